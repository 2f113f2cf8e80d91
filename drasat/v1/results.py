"""Solver placements as a `resource.k8s.io/v1` claim's `status.allocation`, and back.

`allocation` writes what kube-scheduler would have written: one result per device with the
result's `request` (`req/sub` for a firstAvailable entry), `driver`, `pool` and `device`; for a
device that allows several allocations its `consumedCapacity` (a share's memory and compute, a
whole GPU's all) and a `shareID` (derived from the claim and result, so the what-if's output is
stable); the class's then the claim's opaque configs; a `nodeSelector` naming the node. The
ledger entry per solver claim is the NAS `allocatedClaims` entry, as in classic mode.

`ledger_from_status` reads a claim's status back into ledger entries (a restart rebuilds the NAS
from the claims: for v1 the claim status is the truth). This is a purely computational module.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Mapping, Sequence
from typing import Any

from drasat.api import deviceconfig
from drasat.api.devicemodel import names, shares
from drasat.api.groups import DRIVER_NAME
from drasat.api.nas import (
    AllocatedDevices,
    AllocatedGpu,
    AllocatedGpus,
    AllocatedMigDevice,
    AllocatedMigDevices,
    ClaimInfo,
    MigPlacement,
    NodeAllocationStateSpec,
)
from drasat.api.quantity import to_bytes
from drasat.v1 import devices
from drasat.v1.devices import Published
from drasat.v1.requests import Claim
from drasat.v1.variants import Option

Obj = dict[str, Any]

_SHARE_NAMESPACE = uuidlib.UUID("6f1c2d7e-4b8a-4e0f-9d3c-2a5b7c9e1f30")


def node_selector(node: str) -> Obj:
    """A NodeSelector that selects exactly `node` by its name field."""
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


def _share_id(claim_uid: str, request: str, device: str) -> str:
    return str(uuidlib.uuid5(_SHARE_NAMESPACE, f"{claim_uid}/{request}/{device}"))


def _result(option: Option, published: Published, consumed: Obj | None) -> Obj:
    result: Obj = {
        "request": option.alternative.result_name,
        "driver": published.driver,
        "pool": published.pool,
        "device": published.name,
    }
    if published.device.get("allowMultipleAllocations"):
        if consumed is not None:
            result["consumedCapacity"] = consumed
        result["shareID"] = _share_id(option.claim.uid, result["request"], published.name)
    return result


def _whole(published: Published) -> Obj | None:
    capacity = published.device.get("capacity") or {}
    out = {k: str(v.get("value")) for k, v in capacity.items() if "requestPolicy" in v}
    return out or None


def device_results(
    option: Option,
    entry: AllocatedDevices | None,
    lookup: Mapping[tuple[object, ...], Published],
) -> list[Obj]:
    """The results of one solver claim (or of a fallback option when `entry` is None)."""
    if entry is None:
        found = lookup[(devices.FALLBACK,)]
        return [_result(option, found, None)]
    out = []
    if entry.mig is not None:
        for mig in entry.mig.devices:
            found = lookup[(devices.MIG, mig.parentUUID, mig.profile, mig.placement.start)]
            out.append(_result(option, found, None))
        return out
    assert entry.gpu is not None
    for gpu in entry.gpu.devices:
        found = lookup[(devices.GPU, gpu.uuid)]
        consumed = _whole(found)
        if entry.share is not None:
            memory = to_bytes(entry.share.memory) if entry.share.memory is not None else 0
            memory = -(-memory // shares.MiB) * shares.MiB
            consumed = {
                shares.MEMORY: str(memory),
                shares.COMPUTE: str(entry.share.compute or 0),
            }
        out.append(_result(option, found, consumed))
    return out


def configs(
    claim_config: Sequence[Obj], class_configs: Sequence[tuple[str, list[str], Obj]]
) -> list[Obj]:
    """`status.allocation.devices.config`: each class's opaque configs for the results that
    used it (source FromClass), then the claim's (FromClaim), as kube-scheduler orders them."""
    out = []
    for _, requests, config in class_configs:
        out.append({"source": "FromClass", "requests": requests, **config})
    for config in claim_config:
        out.append({"source": "FromClaim", **config})
    return out


def allocation(node: str, results: list[Obj], config: list[Obj]) -> Obj:
    devices_status: Obj = {"results": results}
    if config:
        devices_status["config"] = config
    return {"devices": devices_status, "nodeSelector": node_selector(node)}


def with_configs(
    ledger: Mapping[str, AllocatedDevices], config: Sequence[Obj]
) -> dict[str, AllocatedDevices]:
    """The ledger entries with the sharing and lifecycle the claim's and class's opaque configs
    of our driver give each request (the node plugin prepares by the same rule,
    `deviceconfig.for_request`), so the NAS says how each device is shared."""
    try:
        applied = deviceconfig.applied(config, DRIVER_NAME)
    except ValueError:
        return dict(ledger)  # read already when the claim was; the node plugin reports it
    out = {}
    for key, entry in ledger.items():
        # `<claim uid>/<request>[#i]`: the request (a config names it, not a subrequest)
        request = key.partition("/")[2].partition("#")[0]
        merged = deviceconfig.for_request(applied, request)
        update: dict[str, Any] = {}
        if merged.sharing is not None and entry.gpu is not None:
            update["gpu"] = entry.gpu.model_copy(update={"sharing": merged.sharing})
        if merged.sharing is not None and entry.mig is not None:
            update["mig"] = entry.mig.model_copy(update={"sharing": merged.sharing})
        if merged.lifecycle:
            update["lifecycle"] = list(merged.lifecycle)
        out[key] = entry.model_copy(update=update) if update else entry
    return out


def claim_info(claim: Claim) -> ClaimInfo:
    return ClaimInfo(namespace=claim.namespace, name=claim.name, uid=claim.uid)


def fallback_entry(option: Option) -> AllocatedDevices:
    """The ledger entry of a request met by the CPU fallback: no GPU, marked optional."""
    info = claim_info(option.claim)
    return AllocatedDevices(claimInfo=info, gpu=AllocatedGpus(devices=[]), optional=True)


def ledger_from_status(claim: Obj, nas: NodeAllocationStateSpec) -> dict[str, AllocatedDevices]:
    """The ledger entries a claim's status.allocation stands for on the node whose NAS is given,
    keyed as `allocate` keys them (`<uid>/<request>`; MIG devices `#<i>`). Results of other
    drivers or pools are skipped; a device the node does not have is skipped too (the caller
    compares counts to notice)."""
    meta = claim.get("metadata") or {}
    uid = str(meta.get("uid", ""))
    info = ClaimInfo(
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")), uid=uid
    )
    allocated = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
    results = allocated.get("results") or []
    by_minor = {gpu.minor: gpu for gpu in nas.gpus()}
    migs = {(m.parentProductName, m.giProfileId): m for m in nas.mig_profiles()}
    out: dict[str, AllocatedDevices] = {}
    counters: dict[str, int] = {}
    for result in results:
        if result.get("driver") != DRIVER_NAME:
            continue
        request = str(result.get("request", "")).partition("/")[0]
        parsed = names.parse(str(result.get("device", "")))
        key = f"{uid}/{request}"
        if isinstance(parsed, names.FallbackName):
            out[key] = AllocatedDevices(
                claimInfo=info, gpu=AllocatedGpus(devices=[]), optional=True
            )
        elif isinstance(parsed, names.GpuName) and parsed.minor in by_minor:
            entry = out.get(key) or AllocatedDevices(claimInfo=info, gpu=AllocatedGpus())
            assert entry.gpu is not None
            entry.gpu.devices.append(AllocatedGpu(uuid=by_minor[parsed.minor].uuid))
            share = _share_of(result, by_minor[parsed.minor].memoryBytes)
            if share is not None:
                entry.share = share
            out[key] = entry
        elif isinstance(parsed, names.MigName) and parsed.minor in by_minor:
            gpu = by_minor[parsed.minor]
            mig = migs.get((gpu.productName, parsed.profile_id))
            if mig is None:
                continue
            size = next((p.size for p in mig.placements if p.start == parsed.start), 1)
            i = counters.get(key, 0)
            counters[key] = i + 1
            device = AllocatedMigDevice(
                profile=mig.profile,
                parentUUID=gpu.uuid,
                placement=MigPlacement(start=parsed.start, size=size),
            )
            out[f"{key}#{i}"] = AllocatedDevices(
                claimInfo=info, mig=AllocatedMigDevices(devices=[device])
            )
    return with_configs(out, allocated.get("config") or [])


def _share_of(result: Obj, gpu_memory: int) -> Any:
    from drasat.api.claims import GpuShare

    consumed = result.get("consumedCapacity") or {}
    if not consumed:
        return None
    memory = to_bytes(str(consumed.get(shares.MEMORY, "0")))
    compute = int(to_bytes(str(consumed.get(shares.COMPUTE, "0"))))
    if memory >= gpu_memory // shares.MiB * shares.MiB and compute >= 100:
        return None  # all of it: the GPU held whole
    return (
        GpuShare(compute=compute or None, memory=memory)
        if memory
        else GpuShare(compute=compute or 100)
    )
