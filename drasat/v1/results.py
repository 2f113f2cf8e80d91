"""Solver placements as a `resource.k8s.io/v1` claim's `status.allocation`, and back.

`allocation` writes what kube-scheduler would have written: one result per device with the
result's `request` (`req/sub` for a firstAvailable entry), `driver`, `pool` and `device`; for a
device that allows several allocations its `consumedCapacity` (a share's memory and compute, a
whole GPU's all) and a `shareID` (derived from the claim and result, so the what-if's output is
stable); the class's then the claim's opaque configs; a `nodeSelector` naming the node, each
result read from what the solver says the claim takes (`ledger.Allocation`), naming the published
device the solver chose (`Allocation.devices`, carried from the node's model: never found again
by UUID or placement). The ledger entry
per solver claim is the NAS `allocatedClaims` entry written from the same answer
(`nasinventory.entry_of`), as in classic mode.

`ledger_from_status` reads a claim's status back into ledger entries (a restart rebuilds the NAS
from the claims: for v1 the claim status is the truth).

`preparable` keeps the variants of a claim that drasat's node plugin can prepare (one NAS entry
per claim: whole GPUs, shares of one size or MIG devices, one configuration); a claim with none
is refused with a ClaimError naming the request, never allocated. This is a purely computational
module.
"""

from __future__ import annotations

import json
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
)
from drasat.api.quantity import to_bytes
from drasat.api.sharing import SharingStrategy
from drasat.solver.ledger import Allocation
from drasat.solver.nodemodel import NodeDevices, PublishedDevice
from drasat.v1 import otherdevices, publisheddevices
from drasat.v1.publisheddevices import Published
from drasat.v1.requests import Claim, ClaimError
from drasat.v1.variants import Option, choices, default_consumed, share_compute

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
    if option.alternative.tolerations:
        result["tolerations"] = [dict(t) for t in option.alternative.tolerations]
    return result


def _whole(published: Published) -> Obj | None:
    """What a request without `capacity.requests` consumes of a device that allows several
    allocations: each capacity's request policy default (all of drasat's memory, no compute)."""
    capacity = published.device.get("capacity") or {}
    out = {
        k: str(default_consumed(published, k)) for k, v in capacity.items() if "requestPolicy" in v
    }
    return out or None


def device_results(option: Option, entry: Allocation) -> list[Obj]:
    """The results of one solver claim: the published devices it takes, as the solver's answer
    names them (`Allocation.devices`, carried from the node's model)."""
    if len(entry.devices) != len(entry.migs if entry.mig else entry.gpus):
        raise ValueError(
            f"the solver's answer for claim {entry.namespace}/{entry.name} names "
            f"{len(entry.devices)} published devices for "
            f"{len(entry.migs) if entry.mig else len(entry.gpus)} taken"
        )
    out = []
    for device in entry.devices:
        found = _published(device)
        if entry.mig:
            out.append(_result(option, found, None))
            continue
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


def _published(device: PublishedDevice) -> Published:
    if not isinstance(device, Published):
        raise TypeError(f"device {device.pool}/{device.name} is not a published device")
    return device


def fallback_results(option: Option, node: Sequence[Published]) -> list[Obj]:
    """The result of a request met by the CPU fallback: the node's fallback device."""
    found = next(d for d in node if d.kind == publisheddevices.FALLBACK)
    return [_result(option, found, None)]


def other_results(option: Option, keys: Sequence[str], node: Sequence[Published]) -> list[Obj]:
    """The results of other drivers' devices taken for one request (`keys`: the solver names
    them by `Published.key`), each naming the driver, pool and device it is; a device that
    allows several allocations with what this one consumes of it, as upstream writes it."""
    drawn = dict(choices(option))
    by_key = {d.key: d for d in node if d.kind == publisheddevices.OTHER}
    out = []
    for key in keys:
        found = by_key[key]
        out.append(_result(option, found, otherdevices.consumed_of(found, drawn[key])))
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


def class_configs(options: Sequence[Option]) -> list[tuple[str, list[str], Obj]]:
    """(class, the results' requests that used it, config) for each class config of the
    classes the options use, classes in order of first use."""
    seen: dict[str, tuple[list[str], tuple[Obj, ...]]] = {}
    for option in options:
        alternative = option.alternative
        names, _ = seen.setdefault(alternative.device_class, ([], alternative.class_config))
        if alternative.result_name not in names:
            names.append(alternative.result_name)
    return [
        (class_name, requests_using, config)
        for class_name, (requests_using, class_config) in seen.items()
        for config in class_config
    ]


def allocation(node: str, results: list[Obj], config: list[Obj]) -> Obj:
    devices_status: Obj = {"results": results}
    if config:
        devices_status["config"] = config
    return {"devices": devices_status, "nodeSelector": node_selector(node)}


def with_configs(
    ledger: Mapping[str, AllocatedDevices],
    config: Sequence[Obj],
    result_names: Mapping[str, str],
) -> dict[str, AllocatedDevices]:
    """The ledger entries with the sharing and lifecycle the claim's and class's opaque configs
    of our driver give each entry's result request (`result_names`, by ledger key: `req` or
    `req/sub`; the node plugin prepares by the same rule, `deviceconfig.for_request`), so the
    NAS says how each device is shared."""
    try:
        applied = deviceconfig.applied(config, DRIVER_NAME)
    except ValueError:
        return dict(ledger)  # read already when the claim was; the node plugin reports it
    out = {}
    for key, entry in ledger.items():
        merged = deviceconfig.for_request(applied, result_names[key])
        update: dict[str, Any] = {}
        if merged.sharing is not None and entry.gpu is not None:
            update["gpu"] = entry.gpu.model_copy(update={"sharing": merged.sharing})
        if merged.sharing is not None and entry.mig is not None:
            update["mig"] = entry.mig.model_copy(update={"sharing": merged.sharing})
        if merged.lifecycle:
            update["lifecycle"] = list(merged.lifecycle)
        out[key] = entry.model_copy(update=update) if update else entry
    return out


# -- what the node plugin prepares -----------------------------------------------------------


def preparable(claim: Claim, variants: Sequence[Sequence[Option]]) -> list[list[Option]]:
    """The claim's variants whose allocation drasat's node plugin can prepare (it puts one
    claim's devices in one NAS entry: whole GPUs, shares of one size or MIG devices, with one
    configuration); ClaimError naming the request when none is, so the claim is refused
    rather than allocated and never prepared."""
    kept = []
    first: ClaimError | None = None
    for options in variants:
        error = unpreparable(claim, options)
        if error is None:
            kept.append(list(options))
        elif first is None:
            first = error
    if not kept and first is not None:
        raise first
    return kept


def unpreparable(claim: Claim, options: Sequence[Option]) -> ClaimError | None:
    """Why the node plugin could not prepare the claim allocated by these options; None: it
    can. Only devices of drasat's driver count (another driver's plugin prepares its own); the
    CPU fallback is prepared as no device and mixes with anything."""
    real = [
        o
        for o in options
        if o.kind != publisheddevices.FALLBACK and any(d.driver == DRIVER_NAME for d in o.devices)
    ]
    if not real:
        return None
    kinds = {_shape(o) for o in real}
    if len(kinds) > 1:
        other = next(o for o in real if _shape(o) != _shape(real[0]))
        return _refusal(
            claim,
            other,
            f"{_describe(real[0])} and {_describe(other)} in one claim cannot be prepared by "
            "drasat's node plugin (use one claim for each)",
        )
    return _config_conflict(claim, real)


def _shape(option: Option) -> tuple[str, int | None]:
    """What one NAS entry holds: MIG devices, whole GPUs, or shares with one compute limit
    (their memory may differ: each GPU gets its own)."""
    if option.kind == publisheddevices.MIG:
        return ("mig", None)
    if option.share is None:
        return ("whole", None)
    return ("share", share_compute(option.share))


def _describe(option: Option) -> str:
    kind, limit = _shape(option)
    what = {"mig": "MIG devices", "whole": "whole GPUs"}.get(kind, "")
    if kind == "share":
        what = f"shares (compute {'no limit' if limit is None else f'{limit}%'})"
    return f"{what} of request {option.alternative.result_name}"


def _config_conflict(claim: Claim, real: Sequence[Option]) -> ClaimError | None:
    merged = _merged_configs(claim, real)
    for option in real:
        sharing = merged[option.alternative.result_name].sharing
        time_sliced = sharing is not None and sharing.strategy is SharingStrategy.TimeSlicing
        if option.share is not None and time_sliced:
            return _refusal(
                claim,
                option,
                f"shares of request {option.alternative.result_name} with time-slicing: "
                "time-slicing is set for a whole GPU, never for a share",
            )
    texts = {name: json.dumps(c.dump(), sort_keys=True) for name, c in merged.items()}
    if len(set(texts.values())) < 2:
        return None
    first = real[0].alternative.result_name
    other = next(o for o in real if texts[o.alternative.result_name] != texts[first])
    return _refusal(
        claim,
        other,
        f"requests {first} and {other.alternative.result_name} have different opaque "
        "configurations; drasat's node plugin applies one to all of a claim's devices",
    )


def _merged_configs(claim: Claim, real: Sequence[Option]) -> dict[str, deviceconfig.GpuConfig]:
    """Each result request's configuration, merged as the node plugin merges it (an invalid
    class config merges as none here: the node plugin reports it)."""
    try:
        applied = deviceconfig.applied(configs(claim.config, class_configs(real)), DRIVER_NAME)
    except ValueError:
        applied = []
    return {
        o.alternative.result_name: deviceconfig.for_request(applied, o.alternative.result_name)
        for o in real
    }


def _refusal(claim: Claim, option: Option, message: str) -> ClaimError:
    index = next(i for i, r in enumerate(claim.requests) if r.name == option.request)
    return ClaimError(claim.ref, f"spec.devices.requests[{index}]", message)


def claim_info(claim: Claim) -> ClaimInfo:
    return ClaimInfo(namespace=claim.namespace, name=claim.name, uid=claim.uid)


def fallback_entry(option: Option) -> AllocatedDevices:
    """The ledger entry of a request met by the CPU fallback: no GPU, marked optional."""
    info = claim_info(option.claim)
    return AllocatedDevices(claimInfo=info, gpu=AllocatedGpus(devices=[]), optional=True)


def ledger_from_status(claim: Obj, devices: NodeDevices) -> dict[str, AllocatedDevices]:
    """The ledger entries a claim's status.allocation stands for on the node of `devices`,
    keyed as `allocate` keys them (`<uid>/<request>`; MIG devices and a request's several
    shares `#<i>`). Results of other drivers or pools are skipped; a device the node does not
    have is skipped too (the caller compares counts to notice), and so is a result with admin
    access: it holds nothing (the device stays with the claims that hold it), as upstream's
    allocator and kube-scheduler count it."""
    meta = claim.get("metadata") or {}
    uid = str(meta.get("uid", ""))
    info = ClaimInfo(
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")), uid=uid
    )
    allocated = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
    ours = [
        r
        for r in allocated.get("results") or []
        if r.get("driver") == DRIVER_NAME and r.get("adminAccess") is not True
    ]
    shares_per_request: dict[str, int] = {}
    for result in ours:
        if _result_share(result, devices) is not None:
            request = _request_of(result)
            shares_per_request[request] = shares_per_request.get(request, 0) + 1
    reader = _StatusReader(info, devices, shares_per_request)
    for result in ours:
        reader.add(result)
    return with_configs(reader.out, allocated.get("config") or [], reader.result_names)


def _request_of(result: Obj) -> str:
    return str(result.get("request", "")).partition("/")[0]


def _result_share(result: Obj, devices: NodeDevices) -> Any:
    parsed = names.parse(str(result.get("device", "")))
    if not isinstance(parsed, names.GpuName):
        return None
    gpu = next((g for g in devices.gpus if g.minor == parsed.minor), None)
    return None if gpu is None else _share_of(result, gpu.memoryBytes)


class _StatusReader:
    """Ledger entries from a claim's results, one result at a time (`ledger_from_status`)."""

    def __init__(
        self, info: ClaimInfo, devices: NodeDevices, shares_per_request: Mapping[str, int]
    ) -> None:
        self.info = info
        self.by_minor = {gpu.minor: gpu for gpu in devices.gpus}
        self.migs = {(m.parentProductName, m.giProfileId): m for m in devices.mig_profiles}
        self.shares_per_request = shares_per_request
        self.out: dict[str, AllocatedDevices] = {}
        self.result_names: dict[str, str] = {}
        self.counters: dict[str, int] = {}

    def _next(self, key: str) -> str:
        i = self.counters.get(key, 0)
        self.counters[key] = i + 1
        return f"{key}#{i}"

    def add(self, result: Obj) -> None:
        key = f"{self.info.uid}/{_request_of(result)}"
        parsed = names.parse(str(result.get("device", "")))
        if isinstance(parsed, names.FallbackName):
            self._put(
                key,
                result,
                AllocatedDevices(claimInfo=self.info, gpu=AllocatedGpus(devices=[]), optional=True),
            )
        elif isinstance(parsed, names.GpuName) and parsed.minor in self.by_minor:
            self._gpu(key, result, self.by_minor[parsed.minor])
        elif isinstance(parsed, names.MigName) and parsed.minor in self.by_minor:
            self._mig(key, result, parsed)

    def _put(self, key: str, result: Obj, entry: AllocatedDevices) -> None:
        self.out[key] = entry
        self.result_names[key] = str(result.get("request", ""))

    def _gpu(self, key: str, result: Obj, gpu: Any) -> None:
        share = _share_of(result, gpu.memoryBytes)
        device = AllocatedGpu(uuid=gpu.uuid)
        if share is not None and self.shares_per_request.get(_request_of(result), 0) > 1:
            entry = AllocatedDevices(
                claimInfo=self.info, gpu=AllocatedGpus(devices=[device]), share=share
            )
            self._put(self._next(key), result, entry)
            return
        entry = self.out.get(key) or AllocatedDevices(claimInfo=self.info, gpu=AllocatedGpus())
        assert entry.gpu is not None
        entry.gpu.devices.append(device)
        if share is not None:
            entry.share = share
        self._put(key, result, entry)

    def _mig(self, key: str, result: Obj, parsed: names.MigName) -> None:
        gpu = self.by_minor[parsed.minor]
        mig = self.migs.get((gpu.productName, parsed.profile_id))
        if mig is None:
            return
        size = next((p.size for p in mig.placements if p.start == parsed.start), 1)
        device = AllocatedMigDevice(
            profile=mig.profile,
            parentUUID=gpu.uuid,
            placement=MigPlacement(start=parsed.start, size=size),
        )
        entry = AllocatedDevices(claimInfo=self.info, mig=AllocatedMigDevices(devices=[device]))
        self._put(self._next(key), result, entry)


def _share_of(result: Obj, gpu_memory: int) -> Any:
    from drasat.api.sharing import GpuShare

    consumed = result.get("consumedCapacity") or {}
    if not consumed:
        return None
    memory = to_bytes(str(consumed.get(shares.MEMORY, "0")))
    compute = int(to_bytes(str(consumed.get(shares.COMPUTE, "0"))))
    if shares.takes_whole(memory, compute, gpu_memory):
        return None  # all of it: the GPU held whole
    return (
        GpuShare(compute=compute or None, memory=memory)
        if memory
        else GpuShare(compute=compute or 100)
    )
