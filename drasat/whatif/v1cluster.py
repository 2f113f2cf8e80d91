"""A v1 cluster as the solver sees it: ResourceSlices (drasat's or NVIDIA's) and Nodes in,
one NodeAllocationState-shaped node per Node out, with the way back to the published devices.

`kubectl get resourceslices,nodes -o yaml` prints a List of both; Nodes are optional (without
them a node's CPU, memory and taints are no constraint). The slices are read by
`drasat.v1.slices`, the reader the controller uses too (per pool, the highest generation only;
how drasat's and NVIDIA's devices become drasat's model; device taints and DeviceTaintRules).
Here, unlike the controller, a pool missing some of its `resourceSliceCount` slices is an input
error (a file or a listing should hold whole pools), and VFIO devices, other drivers' slices and
older generations are listed as ignored. This is a purely computational module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from drasat import loading
from drasat.api import limits
from drasat.api.devicemodel import classes
from drasat.api.inputerrors import InputError
from drasat.v1 import slices
from drasat.v1.slices import DRIVERS, NVIDIA_DRIVER, OWN_ALLOCATOR_TAINT, V1Node, node_state
from drasat.whatif import v1kinds
from drasat.whatif.manifestindex import Ignored, located

__all__ = [
    "DRIVERS",
    "NVIDIA_DRIVER",
    "V1Cluster",
    "V1Node",
    "device_classes",
    "is_v1_cluster_document",
    "load",
    "node_state",
]

Obj = dict[str, Any]
M = TypeVar("M", v1kinds.ResourceSlice, v1kinds.Node, v1kinds.DeviceTaintRule)


@dataclass(frozen=True)
class V1Cluster:
    nodes: tuple[V1Node, ...]
    ignored: tuple[Ignored, ...] = ()
    #: (driver, pool, counter set name) -> counter -> value, for checks of an allocation.
    counter_sets: Mapping[tuple[str, str, str], Mapping[str, int]] = field(default_factory=dict)


def is_v1_cluster_document(data: Mapping[str, Any]) -> bool:
    """A ResourceSlice or DeviceTaintRule of a read version, or a core Node."""
    kind, version = data.get("kind"), data.get("apiVersion")
    return (kind in ("ResourceSlice", "DeviceTaintRule") and version in v1kinds.VERSIONS) or (
        kind == "Node" and version == "v1"
    )


# Reading the documents.


def load(documents: Sequence[loading.Document]) -> V1Cluster:
    """Nodes of the ResourceSlices and Node objects among `documents` (others are not read).
    Raises InputError naming file, document, object and field."""
    node_objects: dict[str, tuple[str, Obj]] = {}
    pools: dict[tuple[str, str], slices.Pool] = {}
    skipped: list[slices.Skipped] = []
    rules: list[v1kinds.DeviceTaintRule] = []
    for document in documents:
        if not is_v1_cluster_document(document.data):
            continue
        where = located(document, "")
        if document.data["kind"] == "DeviceTaintRule":
            rule = _validate(v1kinds.DeviceTaintRule, v1kinds.to_v1(document.data), where)
            if rule.spec.taint.key != OWN_ALLOCATOR_TAINT and rule.spec.deviceSelector:
                rules.append(rule)
            continue
        if document.data["kind"] == "Node":
            name = _node_name(document, where)
            _validate(v1kinds.Node, document.data, where)
            if name in node_objects:
                raise InputError(
                    f"node {name!r} is also given at {node_objects[name][0]}", where=where
                )
            node_objects[name] = (where, document.data)
            continue
        data = v1kinds.to_v1(document.data)
        found = _validate(v1kinds.ResourceSlice, data, where)
        what = where.removeprefix(f"{document.where}: ")
        slices.add_slice(pools, skipped, found, data, where=where, source=document.where, what=what)
    per_node: dict[str, list[slices.Pool]] = {}
    for found_pool in pools.values():
        incomplete = found_pool.incomplete()
        if incomplete is not None:
            raise InputError(incomplete, where=found_pool.slices[0][0])
        if found_pool.node is None:
            first = found_pool.slices[0][0]
            skipped.append(
                slices.Skipped(first, f"pool {found_pool.name}", "not local to one node")
            )
            continue
        if node_objects and found_pool.node not in node_objects:
            skipped.append(
                slices.Skipped(
                    found_pool.slices[0][0],
                    f"pool {found_pool.name}",
                    f"node {found_pool.node!r} is not among the Nodes given",
                )
            )
            continue
        per_node.setdefault(found_pool.node, []).append(found_pool)
    names_in_order = list(node_objects) + [n for n in per_node if n not in node_objects]
    most = loading.env_limit("DRASAT_MAX_NODES", limits.MAX_NODES)
    if len(names_in_order) > most:
        raise InputError(
            f"the cluster has more than {most:,} nodes (raise the limit with DRASAT_MAX_NODES)",
            where=documents[0].source,
        )
    counter_sets: slices.CounterSets = {}
    built = []
    for name in names_in_order:
        where, node = node_objects.get(name, ("", None))
        reader = slices.NodeReader(name, rules)
        for found_pool in per_node.get(name, []):
            reader.read_pool(found_pool, counter_sets)
        skipped.extend(reader.skipped)
        built.append(reader.finish(node, where))
    ignored = tuple(Ignored(s.where, s.what, s.reason) for s in skipped)
    return V1Cluster(tuple(built), ignored, counter_sets)


def _node_name(document: loading.Document, where: str) -> str:
    metadata = document.data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        raise InputError("metadata.name: missing (the node's name)", where=where)
    return name


def _validate(model: type[M], data: Obj, where: str) -> M:
    try:
        return loading.validate(model, loading.Document("", 0, data))
    except InputError as error:
        raise InputError(error.detail, where=where) from None


# The compact and NAS forms, in v1 terms.


def device_classes() -> dict[str, Obj]:
    """drasat's shipped DeviceClasses and NVIDIA's GPU ones, by name (installed by the Helm
    charts, so manifests need not carry them)."""
    out = {c["metadata"]["name"]: c for c in classes.device_classes()}
    for name, kind in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")):
        expression = (
            f"device.driver == '{NVIDIA_DRIVER}' && "
            f"device.attributes['{NVIDIA_DRIVER}'].type == '{kind}'"
        )
        spec: Obj = {"selectors": [{"cel": {"expression": expression}}]}
        if kind == "gpu":
            spec["extendedResourceName"] = "nvidia.com/gpu"
        out[name] = {
            "apiVersion": v1kinds.V1,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": spec,
        }
    return out
