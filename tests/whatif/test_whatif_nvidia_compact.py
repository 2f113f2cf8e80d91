"""A compact `Cluster` of NVIDIA's driver (`driver: gpu.nvidia.com` per node group): its nodes are
published as NVIDIA's driver publishes them (`drasat.whatif.nvidiaformat`) and read as NVIDIA's
slices are read, so NVIDIA's users can plan a bigger hypothetical fleet.

Held against NVIDIA-format slices of the same hardware (the quickstart's nvidia-slices.yaml:
what `kubectl get resourceslices,nodes -o yaml` prints on a cluster of NVIDIA's driver): the same
devices, names, attributes, capacities and counters (but for what the catalog does not know:
NVML's exact memory sizes, the engines), and the same what-if answer on NVIDIA's quickstart.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml

from drasat import loading
from drasat.api import cluster
from drasat.cli.main import main
from drasat.whatif import nvidiaformat

REPO = pathlib.Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "deploy/examples/v1-nvidia-quickstart"
COMPACT = QUICKSTART / "cluster/nvidia-compact.yaml"
NVIDIA_SLICES = QUICKSTART / "cluster/nvidia-slices.yaml"
Obj = dict[str, Any]

#: What differs between two GPUs of one product (identities, the bus, the driver's versions).
PER_GPU = {"uuid", "parentUUID", "resource.kubernetes.io/pciBusID",
           "resource.kubernetes.io/pcieRoot", "driverVersion", "cudaDriverVersion"}  # fmt: skip
#: NVML's numbers that the catalog does not hold (capacities and counters of engines).
ENGINES = {"multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines",
           "copy-engines", "jpeg-engines", "ofa-engines"}  # fmt: skip


def _compact_slices() -> dict[str, list[Obj]]:
    (document,) = loading.read_documents(COMPACT)
    spec = loading.validate(cluster.Cluster, document).spec
    groups = [g for g in spec.nodes for _ in g.node_names()]
    out: dict[str, list[Obj]] = {}
    for group, node in zip(groups, cluster.expand(spec), strict=True):
        out[node.nas.metadata.name] = nvidiaformat.node_documents(group, node)
    return out


def _nvidia_slices() -> dict[str, list[Obj]]:
    out: dict[str, list[Obj]] = {}
    for item in yaml.safe_load(NVIDIA_SLICES.read_text(encoding="utf-8"))["items"]:
        node = item["metadata"]["name"] if item["kind"] == "Node" else item["spec"]["nodeName"]
        out.setdefault(node, []).append(item)
    return out


def _shape(device: Obj) -> Obj:
    """A device as NVIDIA's driver publishes it, without what differs per GPU or is NVML's:
    attribute names and values, capacity and counter names (memory slices included)."""
    attributes = device.get("attributes") or {}
    return {
        "attributes": sorted(attributes),
        "values": {k: v for k, v in attributes.items() if k not in PER_GPU},
        "capacity": sorted(set(device.get("capacity") or {}) - ENGINES),
        "consumes": [
            (c["counterSet"], sorted(set(c["counters"]) - ENGINES))
            for c in device.get("consumesCounters") or []
        ],
    }


def _devices(documents: list[Obj]) -> dict[str, Obj]:
    return {
        d["name"]: _shape(d)
        for s in documents
        if s["kind"] == "ResourceSlice"
        for d in s["spec"].get("devices") or []
    }


def _counter_sets(documents: list[Obj]) -> dict[str, list[str]]:
    return {
        c["name"]: sorted(set(c["counters"]) - ENGINES)
        for s in documents
        if s["kind"] == "ResourceSlice"
        for c in s["spec"].get("sharedCounters") or []
    }


@pytest.mark.parametrize("node", ["nv-t4", "nv-a100", "nv-a100-static"])
def test_a_compact_node_publishes_the_devices_nvidias_driver_publishes(node: str) -> None:
    """Whole T4s; an A100 with dynamic MIG (the counter set, the whole GPU and every placement
    of every profile, each consuming its memory slices); an A100 with static MIG (only the MIG
    devices made, at the placements nvidia-smi gives them, each with its own UUID)."""
    ours, theirs = _compact_slices()[node], _nvidia_slices()[node]
    assert _devices(ours) == _devices(theirs)
    assert _counter_sets(ours) == _counter_sets(theirs)
    # The node: its labels and allocatable CPU and memory as the compact form says.
    (node_obj,) = [d for d in ours if d["kind"] == "Node"]
    (real,) = [d for d in theirs if d["kind"] == "Node"]
    assert node_obj["metadata"]["labels"] == real["metadata"]["labels"]
    allocatable = dict(real["status"]["allocatable"])
    allocatable.pop("pods")
    assert node_obj["status"]["allocatable"] == allocatable


def _whatif(capsys: pytest.CaptureFixture[str], cluster_file: pathlib.Path) -> str:
    code = main(["whatif", "--cluster", str(cluster_file), "-f", str(QUICKSTART)])
    out = capsys.readouterr().out
    assert code == 0, out
    return out.split("\nsolver: ", 1)[0]  # the summary's solver line has the time


def test_the_whatif_plans_nvidias_quickstart_alike_on_the_compact_form_and_nvidias_slices(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """The same placements and reasons for every pod of NVIDIA's quickstart, on the compact form
    and on NVIDIA's slices of the same hardware (without the XID taint of one T4, which the
    compact form cannot say)."""
    listing = yaml.safe_load(NVIDIA_SLICES.read_text(encoding="utf-8"))
    for item in listing["items"]:
        for device in (item.get("spec") or {}).get("devices") or []:
            device.pop("taints", None)
    untainted = tmp_path / "nvidia-slices.yaml"
    untainted.write_text(yaml.safe_dump(listing), encoding="utf-8")
    planned = _whatif(capsys, COMPACT)
    assert "not placed" in planned and "nv-a100-static" in planned  # a plan worth comparing
    assert planned == _whatif(capsys, untainted)


def test_a_bigger_fleet_of_nvidias_format_is_planned(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """What the compact form is for: the quickstart's nodes times ten place what one node
    could not (every gpu-test4 replica gets its four MIG devices)."""
    text = COMPACT.read_text(encoding="utf-8").replace(
        "  - name: nv-a100 ", "  - count: 10\n    name: nv-a100 "
    )
    bigger = tmp_path / "bigger.yaml"
    bigger.write_text(text, encoding="utf-8")
    code = main(["whatif", "--cluster", str(bigger), "-f", str(QUICKSTART / "gpu-test4.yaml")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "pods: 4 placed, 0 unplaced" in out, out
    assert "nv-a100-9" in out or "nv-a100-3" in out, out


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (
            "{name: n, gpus: [{product: A100-40GB, mig: true, migDevices: [3g.20gb]}]}",
            "static MIG is NVIDIA's driver's (driver: gpu.nvidia.com)",
        ),
        (
            "{name: n, driver: gpu.nvidia.com, gpus: [{product: A100-40GB, "
            "migDevices: [3g.20gb]}]}",
            "migDevices: MIG devices need mig: true",
        ),
        (
            "{name: n, driver: gpu.nvidia.com, gpus: [{product: A100-40GB, mig: true, "
            "migDevices: [3g.20gb, 4g.20gb]}]}",
            "no room for 4g.20gb on a A100-40GB after 3g.20gb",
        ),
        (
            "{name: n, driver: gpu.nvidia.com, gpus: [{product: A100-40GB, mig: true, "
            "migDevices: [1g.10gb+me]}]}",
            "A100-40GB has no MIG profile '1g.10gb+me'",
        ),
        ("{name: n, driver: nvidia, gpus: [{product: T4}]}", "spec.nodes[0].driver"),
    ],
)
def test_a_bad_compact_node_of_nvidias_driver_is_one_line_naming_the_field(
    node: str, message: str, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        f"apiVersion: whatif.drasat.io/v1alpha1\nkind: Cluster\nmetadata: {{name: c}}\n"
        f"spec:\n  nodes:\n  - {node}\n",
        encoding="utf-8",
    )
    code = main(["whatif", "--cluster", str(path), "-f", str(QUICKSTART / "gpu-test1.yaml")])
    captured = capsys.readouterr()
    assert code == 2, captured.out + captured.err
    (line,) = captured.err.strip().splitlines()
    assert str(path) in line and message in line, line
