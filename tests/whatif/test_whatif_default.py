"""The embedded default of `drasat whatif` is current Kubernetes (issue 25): resource.k8s.io/v1
claims placed on the ResourceSlices and Nodes drasat's node plugin publishes. Runs in the copy
without the classic wing too (scripts/without_classic.py); the classic combinations are in
tests/classic/test_classic_whatif_default.py."""

from __future__ import annotations

import json
import sys
from importlib.resources import files
from typing import TYPE_CHECKING, Any

import default_slices
import pytest

from drasat.whatif import run

if TYPE_CHECKING:
    from conftest import RunCli, WriteYaml

#: The embedded example's pods, in table order, with their claim column.
PODS = [
    ("gpu-test1/pod1", "gpu"),
    ("gpu-test1/pod2", "gpu"),
    ("gpu-test2/pod1", "shared-gpu"),
    ("gpu-test2/pod2", "shared-gpu"),
    ("gpu-test3/mig-pod", "mig"),
    ("gpu-test4/opt-pod", "gpu"),
]

#: NodeAllocationStates of one node, no ResourceSlice: a classic cluster's inventory.
NAS = """
apiVersion: nas.gpu.resource.nvidia.com/v1alpha1
kind: NodeAllocationState
metadata: {name: node-a, namespace: nvidia-dra-driver}
spec:
  allocatableDevices:
  - gpu: {index: 0, uuid: GPU-aaaa0000-0000-0000-0000-000000000000, memoryBytes: 16106127360,
          productName: Tesla T4}
  - gpu: {index: 1, uuid: GPU-bbbb0000-0000-0000-0000-000000000000, memoryBytes: 16106127360,
          productName: Tesla T4}
status: Ready
"""


def _published() -> dict[tuple[str, str], dict[str, Any]]:
    """(pool, device name) -> device of the embedded cluster's drasat slices."""
    return {
        (d.data["spec"]["pool"]["name"], device["name"]): device
        for d in run.embedded(run.DEFAULT_CLUSTER)
        if d.data["kind"] == "ResourceSlice"
        for device in d.data["spec"].get("devices") or []
    }


def _results(out: str) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(namespace, pod or claim name) -> the allocation results of the printed claims."""
    items = json.loads(out)["items"]
    claims = [i for i in items if i["kind"] == "ResourceClaim"]
    assert {c["apiVersion"] for c in claims} == {"resource.k8s.io/v1"}
    return {
        (c["metadata"]["namespace"], c["metadata"]["name"]): c["status"]["allocation"]["devices"][
            "results"
        ]
        for c in claims
    }


def test_the_embedded_inputs_are_v1_slices_nodes_and_claims() -> None:
    inputs = run.read_inputs(cluster=None, manifest_files=[], policy=None)
    kinds = {d.data["kind"] for d in inputs.cluster}
    assert kinds == {"ResourceSlice", "Node"}
    assert inputs.cluster_source == "<embedded>/default-slices.yaml"
    assert run.is_v1(inputs)
    versions = {d.data["apiVersion"] for d in inputs.manifests if d.data["kind"] != "Pod"}
    assert versions == {"v1", "resource.k8s.io/v1"}  # Namespaces, claims and templates
    assert inputs.manifests_embedded


def test_the_default_places_the_reference_cases_on_published_devices(run_cli: RunCli) -> None:
    result = run_cli("-o", "json")
    assert result.code == 0, result.err
    found = _results(result.out)
    published = _published()
    for results in found.values():
        assert len(results) == 1
        assert (results[0]["pool"], results[0]["device"]) in published
        assert results[0]["driver"] == "gpu.drasat.io"
    one, two = (r for (ns, _), r in found.items() if ns == "gpu-test1")
    shared = found[("gpu-test2", "shared-gpu")][0]
    # Case 1: each pod's claim a whole GPU of its own; case 2: one claim, on a third GPU.
    gpus = {(r["pool"], r["device"]) for r in (one[0], two[0], shared)}
    assert len(gpus) == 3
    assert all(published[gpu]["attributes"]["type"] == {"string": "gpu"} for gpu in gpus)
    (mig,) = (r for (ns, _), r in found.items() if ns == "gpu-test3")
    profile = published[(mig[0]["pool"], mig[0]["device"])]["attributes"]["profile"]
    assert profile == {"string": "3g.20gb"}
    (optional,) = (r for (ns, _), r in found.items() if ns == "gpu-test4")
    assert optional[0]["request"] in ("gpu-or-cpu/gpu", "gpu-or-cpu/cpu")


def test_the_default_table_shows_the_shared_gpu_once_for_both_pods(run_cli: RunCli) -> None:
    result = run_cli()
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == ["POD", "CLAIM", "NODE", "DEVICES"]
    rows = [line.split() for line in lines[1:7]]
    assert [tuple(r[:2]) for r in rows] == PODS
    # The time-sliced pods: one node, one device; the exclusive ones: two others.
    assert rows[2][2:] == rows[3][2:]
    assert len({tuple(r[2:]) for r in rows[:3]}) == 3
    assert "3g.20gb@" in lines[5]
    assert "pods: 6 placed, 0 unplaced" in result.out
    assert (
        "ignored: Namespace gpu-test1, gpu-test2, gpu-test3, gpu-test4 "
        "(<embedded>/default-manifests.yaml): not a kind the what-if places\n"
    ) in result.out


def test_the_default_wide_table_names_the_sharing(run_cli: RunCli) -> None:
    result = run_cli("-o", "wide")
    assert result.code == 0, result.err
    shared = [line for line in result.out.splitlines() if line.startswith("gpu-test2/")]
    assert len(shared) == 2 and all(line.endswith("TimeSlicing, 2 pods") for line in shared)
    alone = [line for line in result.out.splitlines() if line.startswith("gpu-test1/")]
    assert len(alone) == 2 and all(line.endswith("  1 pod") for line in alone)


def test_v1_manifests_alone_go_on_the_embedded_slices(write_yaml: WriteYaml) -> None:
    text = (files("drasat.whatif") / run.DEFAULT_MANIFESTS).read_text(encoding="utf-8")
    path = write_yaml("m.yaml", text)  # the example's own manifests, given as a file
    inputs = run.read_inputs(cluster=None, manifest_files=[path], policy=None)
    assert inputs.cluster_source == "<embedded>/default-slices.yaml"
    assert not inputs.manifests_embedded


def test_a_cluster_alone_gets_the_v1_example(run_cli: RunCli, cluster_file: str) -> None:
    """A compact Cluster (or ResourceSlices) given alone: the v1 example on it."""
    result = run_cli("--cluster", cluster_file)
    assert result.code == 0, result.err
    assert [tuple(line.split()[:2]) for line in result.out.splitlines()[1:7]] == PODS
    assert "(<embedded>/default-manifests.yaml)" in result.out


def test_nas_without_the_classic_wing_get_the_v1_example(
    run_cli: RunCli, write_yaml: WriteYaml, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A classic cluster's NodeAllocationStates alone get the classic wing's example; in a copy
    without the wing, the v1 one (v1 claims are placed on NodeAllocationStates too)."""
    monkeypatch.setitem(sys.modules, "drasat.classic.whatif", None)  # import raises ImportError
    result = run_cli("--cluster", write_yaml("nas.yaml", NAS))
    assert result.code == 0, result.err
    assert "(<embedded>/default-manifests.yaml)" in result.out
    assert "gpu-test1/pod1" in result.out and "gpu: gpu-" in result.out


def test_the_embedded_slices_are_what_the_node_plugin_publishes() -> None:
    """default-slices.yaml is generated from default-cluster.yaml: rewrite it with
    `make generate` (tests/whatif/default_slices.py) when this fails."""
    assert default_slices.TARGET.read_text(encoding="utf-8") == default_slices.text()
