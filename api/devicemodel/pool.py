"""A node's pool as ResourceSlices, within the API's limits.

The pool is named after the node. The API limits each slice (1.35+): a slice holds either devices
or shared counters; at most 8 counter sets of at most 32 counters; at most 128 devices, or 64 when
any of them consumes counters or has taints. So the pool is split: first the counter sets, 8 to a
slice, then the devices in minor order (each whole GPU followed by its MIG placements, the
`cpu-fallback` device last), 64 or 128 to a slice. Every slice names the pool's generation and
slice count; there is always at least one slice (an empty pool says the node has no devices).

This is a purely computational module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drasat.api.devicemodel import devices, partitions
from drasat.api.devicemodel.nodegpus import Inventory
from drasat.api.groups import DRIVER_NAME

Obj = dict[str, Any]

API_VERSION = "resource.k8s.io/v1"

#: `ResourceSliceMaxDevices` and `ResourceSliceMaxDevicesWithAdvancedFeatures`.
MAX_DEVICES = 128
MAX_DEVICES_ADVANCED = 64
#: `ResourceSliceMaxCounterSets`, `ResourceSliceMaxCountersPerCounterSet`.
MAX_COUNTER_SETS = 8
MAX_COUNTERS = 32
#: Object names are DNS subdomains.
MAX_OBJECT_NAME = 253


def all_devices(inventory: Inventory) -> list[Obj]:
    """Every device of the node, in publishing order."""
    out: list[Obj] = []
    for gpu in inventory.ordered_gpus():
        profiles = inventory.mig_profiles.get(gpu.uuid, ()) if gpu.migEnabled else ()
        limits = inventory.instance_limits.get(gpu.uuid, {})
        health = inventory.health_of(gpu)
        out.append(
            devices.gpu_device(
                gpu,
                profiles=profiles if inventory.counters else (),
                limits=limits,
                shareable=inventory.shares and inventory.consumable_capacity and not gpu.migEnabled,
                health=health,
            )
        )
        out.extend(
            devices.mig_devices(
                gpu, profiles, limits=limits, health=health, counters=inventory.counters
            )
        )
    if inventory.fallback:
        out.append(devices.fallback_device(multiple=inventory.consumable_capacity))
    return out


def counter_sets(inventory: Inventory) -> list[Obj]:
    """The counter set of every MIG-enabled GPU that offers profiles, in minor order."""
    out: list[Obj] = []
    if not inventory.counters:
        return out
    for gpu in inventory.ordered_gpus():
        profiles = inventory.mig_profiles.get(gpu.uuid, ()) if gpu.migEnabled else ()
        if profiles:
            found = partitions.counter_set(
                gpu, profiles, inventory.instance_limits.get(gpu.uuid, {})
            )
            counters = found["counters"]
            assert isinstance(counters, dict) and len(counters) <= MAX_COUNTERS
            out.append(found)
    return out


def _advanced(device: Obj) -> bool:
    return bool(device.get("consumesCounters") or device.get("taints"))


def _chunks(items: Sequence[Obj], size: int) -> list[list[Obj]]:
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


def slice_name(node_name: str, number: int) -> str:
    """`<node>-gpu.drasat.io-<n>`, the node part shortened to keep a DNS subdomain."""
    suffix = f"-{DRIVER_NAME}-{number}"
    return node_name[: MAX_OBJECT_NAME - len(suffix)].rstrip("-.") + suffix


def slice_specs(inventory: Inventory) -> list[Obj]:
    """The pool's slice specs without pool generation and count: counter slices, then device
    slices; at least one."""
    specs: list[Obj] = [
        {"sharedCounters": chunk} for chunk in _chunks(counter_sets(inventory), MAX_COUNTER_SETS)
    ]
    found = all_devices(inventory)
    size = MAX_DEVICES_ADVANCED if any(_advanced(d) for d in found) else MAX_DEVICES
    specs.extend({"devices": chunk} for chunk in _chunks(found, size))
    return specs or [{"devices": []}]


def node_slices(
    node_name: str,
    inventory: Inventory,
    *,
    generation: int = 1,
    node_uid: str | None = None,
) -> list[Obj]:
    """The ResourceSlices of one node's pool at `generation`. With `node_uid`, each slice is
    owned by the Node (deleted with it), as the kubelet-plugin helper library does."""
    specs = slice_specs(inventory)
    out = []
    for number, content in enumerate(specs):
        metadata: Obj = {"name": slice_name(node_name, number)}
        if node_uid is not None:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node_name,
                    "uid": node_uid,
                    "controller": True,
                }
            ]
        spec: Obj = {
            "driver": DRIVER_NAME,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": len(specs)},
            **content,
        }
        out.append(
            {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": metadata, "spec": spec}
        )
    return out
