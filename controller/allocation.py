"""What an allocation looks like on the wire: NAS entries and ResourceClaim status.

A purely computational module: functions from dicts and models to new dicts; the writes happen in
`controller.actions`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from drasat.api import groups, handles
from drasat.api.nas import AllocatedDevices, ClaimInfo

Obj = dict[str, Any]


# ResourceClaim status.allocation.
def node_selector(node: str) -> Obj:
    """A NodeSelector that selects exactly `node` by its name field."""
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


def handle_data(node: str, devices: AllocatedDevices) -> str:
    """The resource handle: a small JSON of the node and devices (what the node plugin reads)."""
    return handles.encode(node, devices)


def allocation_result(node: str, devices: AllocatedDevices, *, shareable: bool) -> Obj:
    return {
        "availableOnNodes": node_selector(node),
        "resourceHandles": [{"driverName": groups.DRIVER_NAME, "data": handle_data(node, devices)}],
        "shareable": shareable,
    }


def allocated_node(claim: Obj) -> str | None:
    """The node a claim's status.allocation selects (by metadata.name or kubernetes.io/hostname)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    terms = (allocation.get("availableOnNodes") or {}).get("nodeSelectorTerms") or []
    for term in terms:
        for requirement in (term.get("matchFields") or []) + (term.get("matchExpressions") or []):
            key = requirement.get("key")
            values = requirement.get("values") or []
            if key in ("metadata.name", "kubernetes.io/hostname") and len(values) == 1:
                return str(values[0])
    return None


def devices_from_status(claim: Obj) -> AllocatedDevices | None:
    """The devices in our resource handle (to repair a NAS that lost them), if readable."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    for handle in allocation.get("resourceHandles") or []:
        if handle.get("driverName") != groups.DRIVER_NAME:
            continue
        try:
            return handles.decode(handle.get("data") or "", ClaimInfo(**claim_info(claim)))
        except ValueError:
            return None
    return None


def is_allocated(claim: Obj) -> bool:
    return bool((claim.get("status") or {}).get("allocation"))


def with_allocation(claim: Obj, node: str, devices: AllocatedDevices, *, shareable: bool) -> Obj:
    new = copy.deepcopy(claim)
    status = new.setdefault("status", {})
    status["allocation"] = allocation_result(node, devices, shareable=shareable)
    status["driverName"] = groups.DRIVER_NAME
    return new


def without_allocation(claim: Obj) -> Obj:
    new = copy.deepcopy(claim)
    status = new.setdefault("status", {})
    status.pop("allocation", None)
    status.pop("driverName", None)
    status.pop("deallocationRequested", None)
    return new


def claim_info(claim: Obj) -> Obj:
    metadata = claim.get("metadata") or {}
    return {
        "namespace": metadata.get("namespace", ""),
        "name": metadata.get("name", ""),
        "uid": metadata.get("uid", ""),
    }


# Finalizer.
def has_finalizer(obj: Obj) -> bool:
    return groups.FINALIZER in ((obj.get("metadata") or {}).get("finalizers") or [])


def finalizers_with(obj: Obj) -> list[str]:
    current = list((obj.get("metadata") or {}).get("finalizers") or [])
    return current if groups.FINALIZER in current else [*current, groups.FINALIZER]


def finalizers_without(obj: Obj) -> list[str]:
    return [f for f in (obj.get("metadata") or {}).get("finalizers") or [] if f != groups.FINALIZER]


# NAS spec.allocatedClaims.
def nas_with(nas_obj: Obj, allocations: dict[str, AllocatedDevices]) -> Obj | None:
    """The NAS with `allocations` added; None when every one is there already."""
    claims = nas_obj.setdefault("spec", {}).setdefault("allocatedClaims", {}) or {}
    nas_obj["spec"]["allocatedClaims"] = claims
    new = {uid: devices for uid, devices in allocations.items() if uid not in claims}
    if not new:
        return None
    for uid, devices in new.items():
        claims[uid] = devices.dump()
    return nas_obj


def conflicts(existing: dict[str, AllocatedDevices], devices: AllocatedDevices) -> list[str]:
    """Claims in `existing` that use any device of `devices` (to re-check a repair).

    Conservative: a GPU used in any way by another claim, or a MIG placement overlapping another
    on the same parent, counts as a conflict.
    """
    gpus = {d.uuid for d in devices.gpu.devices} if devices.gpu else set()
    migs = devices.mig.devices if devices.mig else []
    parents = {m.parentUUID for m in migs}
    out = []
    for uid, other in existing.items():
        other_gpus = {d.uuid for d in other.gpu.devices} if other.gpu else set()
        other_migs = other.mig.devices if other.mig else []
        clash = bool(gpus & other_gpus) or bool(parents & other_gpus)
        clash = clash or any(m.parentUUID in gpus for m in other_migs)
        clash = clash or any(
            m.parentUUID == o.parentUUID and m.placement.overlaps(o.placement)
            for m in migs
            for o in other_migs
        )
        if clash:
            out.append(uid)
    return out


def device_ids(entries: Iterable[AllocatedDevices]) -> frozenset[tuple[object, ...]]:
    """The devices ledger entries name: whole GPUs or shares by uuid, MIG devices by parent and
    placement (to compare a ledger with a claim's status by devices, not by keys)."""
    out: set[tuple[object, ...]] = set()
    for entry in entries:
        for gpu in entry.gpu.devices if entry.gpu else []:
            out.add(("gpu", gpu.uuid))
        for mig in entry.mig.devices if entry.mig else []:
            out.add(("mig", mig.parentUUID, mig.placement.start, mig.placement.size))
    return frozenset(out)


# Pods.
def pod_claim_names(pod: Obj) -> dict[str, str]:
    """pod.spec.resourceClaims[].name -> the ResourceClaim name (template claims from status,
    else NVIDIA-era `<pod>-<entry>`)."""
    metadata = pod.get("metadata") or {}
    generated = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    out: dict[str, str] = {}
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = str(entry.get("name", ""))
        source = entry.get("source") or entry  # 1.31+ moved the source fields up
        if source.get("resourceClaimName"):
            out[name] = str(source["resourceClaimName"])
        elif source.get("resourceClaimTemplateName"):
            claim_name = generated.get(name)
            out[name] = str(claim_name) if claim_name else f"{metadata.get('name')}-{name}"
    return out


def reserved_for_anyone(claim: Obj) -> bool:
    return bool((claim.get("status") or {}).get("reservedFor"))


def being_deleted(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def deallocation_requested(claim: Obj) -> bool:
    return bool((claim.get("status") or {}).get("deallocationRequested"))
