"""A test publisher of NVIDIA-format ResourceSlices (driver `gpu.nvidia.com`, as NVIDIA's DRA
driver publishes them) and NVIDIA's DeviceClasses, for the controller's tests on the in-process
API server and on the real control plane.

The devices are those of deploy/examples/v1-nvidia-quickstart/cluster/nvidia-slices.yaml (what
`kubectl get resourceslices,nodes -o yaml` prints on a cluster of NVIDIA's current driver): three
Tesla T4 (one with an XID device taint), an A100 with dynamic MIG (a counter set; the whole GPU
and every placement), an A100 with static MIG devices. `nodes(prefix)` gives each example node
under a name of its own, with its GPU UUIDs made that node's own (real UUIDs differ).
"""

from __future__ import annotations

import copy
import pathlib
import uuid
from collections.abc import Iterable
from typing import Any

import yaml

from bench import nvidia_alloc

Obj = dict[str, Any]

REPO = pathlib.Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "deploy/examples/v1-nvidia-quickstart"
EXAMPLE = QUICKSTART / "cluster/nvidia-slices.yaml"
DRIVER = "gpu.nvidia.com"
#: The example's nodes: whole T4s, an A100 with dynamic MIG, an A100 with static MIG devices.
KINDS = ("nv-t4", "nv-a100", "nv-a100-static")


#: The extended resource NVIDIA's chart has its GPU class serve.
EXTENDED_RESOURCE = "nvidia.com/gpu"


def device_classes() -> list[Obj]:
    """NVIDIA's DeviceClasses as its Helm chart installs them (`gpu.nvidia.com`,
    `mig.nvidia.com`): the benchmark's, so both publish the same, and the GPU class's
    `extendedResourceName: nvidia.com/gpu`."""
    out = nvidia_alloc.nvidia_classes()
    for body in out:
        if body["metadata"]["name"] == DRIVER:
            body["spec"]["extendedResourceName"] = EXTENDED_RESOURCE
    return out


def _example() -> dict[str, list[Obj]]:
    items = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))["items"]
    out: dict[str, list[Obj]] = {}
    for item in items:
        node = item["metadata"]["name"] if item["kind"] == "Node" else item["spec"]["nodeName"]
        out.setdefault(node, []).append(item)
    return out


def _rename(value: Any, old: str, new: str) -> Any:
    if isinstance(value, dict):
        return {k: _rename(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_rename(v, old, new) for v in value]
    if isinstance(value, str):
        if value == old:
            return new
        if value.startswith(f"{old}-{DRIVER}"):
            return new + value[len(old) :]
        if value.startswith("GPU-"):
            return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_OID, f"{new}/{value}"))
    return value


def node(kind: str, name: str) -> tuple[Obj, list[Obj]]:
    """The example node `kind` as node `name`: its Node (labels, taints, allocatable, Ready)
    and its ResourceSlices, without server-set fields (owner references, uids)."""
    found = _example()[kind]
    (node_obj,) = [copy.deepcopy(i) for i in found if i["kind"] == "Node"]
    node_obj = _rename(node_obj, kind, name)
    node_obj["metadata"]["labels"]["kubernetes.io/hostname"] = name
    out = []
    for item in found:
        if item["kind"] != "ResourceSlice":
            continue
        body = _rename(copy.deepcopy(item), kind, name)
        body["metadata"].pop("ownerReferences", None)
        out.append(body)
    return node_obj, out


def devices(slices: Iterable[Obj]) -> dict[str, Obj]:
    """device name -> the published device, over a node's slices."""
    return {d["name"]: d for s in slices for d in s["spec"].get("devices") or []}


def fleet_node(name: str, fleet: str) -> tuple[Obj, list[Obj]]:
    """A node of simulated GPUs (`fleet`, e.g. `8xH100-80GB,mig=all`: every GPU in dynamic MIG
    mode, the whole GPU and every placement sharing a counter set) with its slices as NVIDIA's
    driver publishes them (`bench.nvidia_alloc`, written by `drasat.whatif.nvidiaformat`: its
    driver name, device names and attributes); a Ready Node without taints."""
    from bench import kube_alloc, nvidia_alloc

    planned = kube_alloc.FleetNode(name, f"{fleet},seed={name}", {})
    slices = nvidia_alloc.nvidia_slices(planned, "")
    for body in slices:
        body["metadata"].pop("ownerReferences", None)
    return kube_alloc.node_body(planned), slices
