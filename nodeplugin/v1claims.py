"""The allocation of a `resource.k8s.io/v1` ResourceClaim, for the v1/v1beta1 DRAPlugin services.

A current kubelet (1.34+) names a claim (namespace, name, uid) and nothing more: the plugin reads
the ResourceClaim through drasat.kube, takes the results of `status.allocation.devices.results`
whose driver is gpu.drasat.io and whose pool is this node, and resolves them on this node, with
the claim's opaque configuration, into the plan the preparer sets up (`plan.DevicePlan`: GPUs by
UUID, MIG placements, share, sharing, lifecycle; a classic claim's plan is converted from its
NAS entry), so both kubelet generations share one retry-safe, checkpointed preparer
(`state.py`). The preparer also gets the claim's own allocation for this driver
(`ClaimAllocation.devices`: results and configuration as the API has them), which its
checkpoint record keeps and each result's CDI device and answer come from.

Each result's device name is parsed with the device model's codec (`api.devicemodel.names`):

- `gpu-<minor>`: this node's GPU with that minor, whole; on a shareable GPU a result whose
  `consumedCapacity` is less than all of it is a share (`DevicePlan.share`: compute % and
  memory, enforced under MPS as the classic `share`), one that took all of it is exclusive.
  Shares of one GPU in one claim add up; shares of different memory on different GPUs keep
  each its own (a per-GPU pinned-memory limit of the claim's MPS daemon); their compute must
  be one percentage (MPS gives a client one for all its GPUs);
- `gpu-<minor>-mig-<profile>-<profileID>-<start>`: a MIG placement, created by the preparer at
  exactly that start (`DevicePlan.migs`, as a classic claim's `mig.devices[]`);
- `cpu-fallback`: nothing to prepare; a claim with nothing else is the classic `optional` claim
  without devices (its CDI device tells the container `DRASAT_GPU_ALLOCATED=false`).

Opaque configuration for our driver (`api.deviceconfig`: drasat's GpuConfig, NVIDIA's
GpuConfig/MigDeviceConfig), the class's then the claim's, for all requests or the ones named,
becomes the plan's `sharing`, `share` and `lifecycle`. Admin access, a device the node does not
have, a bad configuration and combinations one plan cannot hold (whole GPUs beside MIG devices
or shares, different configurations per request, shares of different compute in one claim) are
refused with an error naming them.

Tenant isolation (docs/NODEPLUGIN.md "Isolation"): a claim's own config may not carry
`lifecycle` (device initialisation is the cluster's: `deviceconfig.refusals`), and a share may
not ask for time-slicing (a GPU-wide setting); both are refused naming the entry or the device.
The preparer applies even the class's lifecycle only to GPUs the claim holds whole and alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from drasat.api import deviceconfig
from drasat.api.devicemodel import names, shares
from drasat.api.groups import DRIVER_NAME
from drasat.api.inputerrors import describe_validation_error, show
from drasat.api.quantity import to_bytes
from drasat.api.sharing import GpuShare, GpuSharing, SharingStrategy
from drasat.kube import errors as kube_errors
from drasat.kube import resources
from drasat.kube.client import Api
from drasat.nodeplugin.devicelib import GpuDevice, MigProfileInfo
from drasat.nodeplugin.plan import DevicePlan, MigSlot, Step
from drasat.nodeplugin.state import ClaimError, ClaimRef

Obj = dict[str, Any]

#: Namespace (DNS label) and claim name (DNS subdomain) as the API server allows them: they go
#: into the URL the claim is read from.
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


class ClaimReader(Protocol):
    def read(self, namespace: str, name: str) -> Obj:
        """The ResourceClaim; ClaimError when it cannot be read."""
        ...


class KubeClaimReader:
    """Reads `resource.k8s.io/v1` ResourceClaims from the API server (drasat.kube)."""

    def __init__(self, api: Api) -> None:
        self.api = api

    def read(self, namespace: str, name: str) -> Obj:
        where = f"ResourceClaim {namespace}/{name}"
        try:
            return self.api.get(resources.RESOURCE_CLAIMS_V1, name, namespace=namespace)
        except kube_errors.NotFound:
            raise ClaimError(f"{where} not found") from None
        except kube_errors.KubeError as error:
            raise ClaimError(f"cannot read {where}: {error}") from None


@dataclass(frozen=True)
class Result:
    """One allocation result of ours: the kubelet gets one Device per result."""

    request: str
    pool: str
    device: str
    share_id: str | None = None

    @classmethod
    def of(cls, result: Mapping[str, Any]) -> Result:
        """The answer's view of an allocation result as the API writes it."""
        share_id = result.get("shareID") or None
        return cls(
            str(result.get("request", "")),
            str(result.get("pool", "")),
            str(result.get("device", "")),
            str(share_id) if share_id else None,
        )


@dataclass(frozen=True)
class ClaimAllocation:
    """A v1 claim's allocation for this driver and what it asks of this node.

    `devices` is the claim's own shape (`status.allocation.devices` with our results and our
    configuration only): the preparer records it, and the kubelet's answer comes from it.
    `plan` is what the preparer sets up for it here (GPUs, MIG placements, share, sharing,
    lifecycle), resolved against this node's GPUs."""

    plan: DevicePlan
    devices: Mapping[str, Any]

    @property
    def results(self) -> tuple[Result, ...]:
        return tuple(Result.of(r) for r in self.devices.get("results") or [])


class ClaimAllocations:
    """Resolves the kubelet's claim references against the API (`reader`) and this node."""

    def __init__(
        self,
        reader: ClaimReader | None,
        *,
        pool: str,
        gpus: Callable[[], Sequence[GpuDevice]],
        profiles: Callable[[str], Sequence[MigProfileInfo]] = lambda uuid: (),
        driver: str = DRIVER_NAME,
    ) -> None:
        self.reader = reader
        self.pool = pool
        self.gpus = gpus
        self.profiles = profiles
        self.driver = driver

    def resolve(self, claim: ClaimRef) -> ClaimAllocation:
        """Read the claim and translate its results; ClaimError naming what is wrong."""
        if not _NAMESPACE.fullmatch(claim.namespace) or not _NAME.fullmatch(claim.name):
            raise ClaimError(
                f"claim {show(claim.namespace)}/{show(claim.name)} ({claim.uid}): a v1 request "
                "names the claim by a Kubernetes namespace and name"
            )
        if self.reader is None:
            raise ClaimError(
                f"claim {claim}: cannot read ResourceClaims (the plugin runs without API "
                "access: give it a kubeconfig or run it in the cluster)"
            )
        obj = self.reader.read(claim.namespace, claim.name)
        return allocation_from_claim(
            obj, claim, pool=self.pool, gpus=self.gpus(), profiles=self.profiles, driver=self.driver
        )


def allocation_from_claim(
    obj: Mapping[str, Any],
    claim: ClaimRef,
    *,
    pool: str,
    gpus: Sequence[GpuDevice],
    profiles: Callable[[str], Sequence[MigProfileInfo]] = lambda uuid: (),
    driver: str = DRIVER_NAME,
) -> ClaimAllocation:
    """The devices a v1 ResourceClaim was allocated on this node (pool `pool`), as the
    preparer's plan, with the results they come from. `profiles(parent uuid)` gives
    a MIG-enabled GPU's profiles and placements (NVML). Pure but for `profiles`; ClaimError on
    anything this node cannot prepare."""
    metadata = obj.get("metadata") or {}
    if metadata.get("uid") != claim.uid:
        raise ClaimError(
            f"claim {claim}: ResourceClaim {claim.namespace}/{claim.name} has uid "
            f"{show(metadata.get('uid'))}, not the kubelet's (deleted and created again?)"
        )
    allocation = (obj.get("status") or {}).get("allocation") or {}
    if not allocation:
        raise ClaimError(f"claim {claim} is not allocated")
    devices = allocation.get("devices") or {}
    ours = [r for r in devices.get("results") or [] if r.get("driver") == driver]
    if not ours:
        raise ClaimError(f"claim {claim}: its allocation has no device of driver {driver}")
    try:
        try:
            configs = deviceconfig.applied(devices.get("config") or [], driver)
        except ValueError as error:
            raise _Refused(str(error)) from None
        refused = deviceconfig.refusals(configs)
        if refused:
            raise _Refused("; ".join(refused))
        by_minor = {gpu.minor: gpu for gpu in gpus}
        translated = [_translate(r, pool, by_minor, profiles) for r in ours]
        plan = _plan(claim, translated, configs)
        plan.record()  # what the checkpoint will keep of it, checked now
    except _Refused as error:
        raise ClaimError(f"claim {claim}: {error}") from None
    except ValidationError as error:  # e.g. more devices than a claim may have
        raise ClaimError(f"claim {claim}: {describe_validation_error(error)}") from None
    own_config = [c for c in devices.get("config") or [] if _driver_of(c) == driver]
    kept = {"results": ours, **({"config": own_config} if own_config else {})}
    return ClaimAllocation(plan, json.loads(json.dumps(kept)))


def _driver_of(config: Any) -> Any:
    opaque = config.get("opaque") if isinstance(config, Mapping) else None
    return opaque.get("driver") if isinstance(opaque, Mapping) else None


class _Refused(Exception):
    """Something of the claim this node cannot prepare (the message names it)."""


@dataclass(frozen=True)
class _Device:
    """One result of ours, resolved on this node."""

    request: str
    device: str
    share_id: str | None
    gpu: GpuDevice | None = None  # a whole GPU (exclusive or shared)
    share: GpuShare | None = None  # the part of `gpu` the result consumed
    mig: MigSlot | None = None
    fallback: bool = False


def _translate(
    result: Mapping[str, Any],
    pool: str,
    by_minor: Mapping[int, GpuDevice],
    profiles: Callable[[str], Sequence[MigProfileInfo]],
) -> _Device:
    name = str(result.get("device", ""))
    where = f"{result.get('pool')}/{name}"
    request = str(result.get("request", ""))
    share_id = result.get("shareID") or None
    if result.get("pool") != pool:
        raise _Refused(f"device {where} is not in this node's pool {pool}")
    if result.get("adminAccess"):
        raise _Refused(f"device {where}: admin access is not supported by the v1 prepare yet")
    parsed = names.parse(name)
    missing = _Refused(f"device {show(name)} is not on node {pool} (it has: {_have(by_minor)})")
    if isinstance(parsed, names.FallbackName):
        return _Device(request, name, share_id, fallback=True)
    if isinstance(parsed, names.GpuName):
        gpu = by_minor.get(parsed.minor)
        if gpu is None:
            raise missing
        share = _share(result.get("consumedCapacity"), gpu, where)
        return _Device(request, name, share_id, gpu=gpu, share=share)
    if isinstance(parsed, names.MigName):
        parent = by_minor.get(parsed.minor)
        if parent is None:
            raise missing
        if result.get("consumedCapacity"):
            raise _Refused(f"MIG device {where} cannot be allocated as a share")
        if not parent.mig_enabled:
            raise _Refused(
                f"MIG device {show(name)}: GPU {names.gpu_name(parent.minor)} {parent.uuid} "
                "is not in MIG mode"
            )
        profile = next(
            (p for p in profiles(parent.uuid) if p.gi_profile_id == parsed.profile_id), None
        )
        size = (
            next((z for s, z in profile.placements if s == parsed.start), None) if profile else None
        )
        if profile is None or size is None or names.dns_safe(profile.name) != parsed.profile:
            offered = sorted(
                names.mig_name(parsed.minor, p.name, p.gi_profile_id, s)
                for p in profiles(parent.uuid)
                for s, _ in p.placements
            )
            state = "MIG devices: " + ", ".join(offered) if offered else "no MIG devices"
            raise _Refused(
                f"MIG device {show(name)} is not on node {pool} (GPU {names.gpu_name(parent.minor)}"
                f" {parent.uuid} offers {state})"
            )
        mig = MigSlot(profile.name, parent.uuid, parsed.start, size)
        return _Device(request, name, share_id, mig=mig)
    raise missing


def _have(by_minor: Mapping[int, GpuDevice]) -> str:
    return ", ".join(names.gpu_name(m) for m in sorted(by_minor)) or "no GPUs"


def _share(consumed: Any, gpu: GpuDevice, where: str) -> GpuShare | None:
    """The share a result's `consumedCapacity` stands for; None when it took the whole GPU (the
    default of a request without `capacity.requests`: an exclusive GPU)."""
    if not consumed:
        return None
    if not isinstance(consumed, Mapping):
        raise _Refused(f"device {where}: consumedCapacity is not a map")
    whole = gpu.memory_bytes // shares.MiB * shares.MiB  # what the slice offers
    try:
        memory = to_bytes(consumed.get(shares.MEMORY, whole))
        compute = to_bytes(consumed.get(shares.COMPUTE, 0))  # the published default
    except ValueError as error:
        raise _Refused(f"device {where}: consumedCapacity: {error}") from None
    unknown = sorted(set(consumed) - {shares.MEMORY, shares.COMPUTE})
    if unknown:
        raise _Refused(f"device {where}: consumedCapacity of unknown capacity {unknown[0]}")
    if shares.takes_whole(memory, compute, gpu.memory_bytes):
        return None  # all of it (with no compute asked, no other share fits beside it either)
    try:
        return GpuShare(compute=compute or None, memory=memory if memory < whole else None)
    except ValidationError as error:
        raise _Refused(
            f"device {where}: consumedCapacity: {describe_validation_error(error)}"
        ) from None


def _plan(
    claim: ClaimRef, devices: list[_Device], configs: list[deviceconfig.Applied]
) -> DevicePlan:
    """The plan of the claim's devices on this node, with the configuration that applies."""
    real = [d for d in devices if not d.fallback]
    if not real:  # only the node's cpu-fallback: prepared as the classic optional, no device
        return DevicePlan(claim.namespace, claim.name, claim.uid, optional=True)
    gpus = [d for d in real if d.gpu is not None]
    migs = [d for d in real if d.mig is not None]
    if gpus and migs:
        raise _Refused(
            f"whole GPU {gpus[0].device} and MIG device {migs[0].device} in one claim are not "
            "supported by the v1 prepare (use one claim for each)"
        )
    whole = [d for d in gpus if d.share is None]
    parts = [d for d in gpus if d.share is not None]
    if whole and parts:
        raise _Refused(
            f"whole GPU {whole[0].device} and share {parts[0].device} in one claim are not "
            "supported by the v1 prepare: the claim's clients run under MPS, limited on every "
            "GPU they use (use one claim for each)"
        )
    share, per_gpu_memory = _claim_share(parts)
    merged = {}
    for device in real:
        merged[device.request] = deviceconfig.for_request(configs, device.request)
    if len({json.dumps(c.dump(), sort_keys=True) for c in merged.values()}) > 1:
        raise _Refused(
            f"requests {', '.join(sorted(merged))} have different opaque configurations: the v1 "
            "prepare applies one configuration to all of a claim's devices"
        )
    config = next(iter(merged.values()))
    sharing = config.sharing
    if per_gpu_memory:
        pinned = _with_pinned_memory(sharing.dump() if sharing else None, per_gpu_memory)
        sharing = GpuSharing.model_validate(pinned)
    lifecycle = [Step(step.action, step.value) for step in config.lifecycle or []]
    return DevicePlan(
        claim.namespace,
        claim.name,
        claim.uid,
        gpus=tuple(dict.fromkeys(d.gpu.uuid for d in gpus if d.gpu is not None)),
        migs=tuple(d.mig for d in migs if d.mig is not None),
        mig_claim=bool(migs),
        sharing=sharing,
        share=share if share is not None else config.share,
        lifecycle=tuple(lifecycle) or None,
    )


def _claim_share(parts: list[_Device]) -> tuple[GpuShare | None, dict[str, int]]:
    """The share limits of a claim whose GPUs are shares: its compute % (one for all its GPUs:
    MPS gives a client one thread percentage), and its memory, one amount when every GPU's is
    the same, else (None and) each GPU's by UUID. Shares of one GPU add up (count: 2 may give a
    claim two shares of one GPU)."""
    if not parts:
        return None, {}
    compute: dict[str, int | None] = {}
    memory: dict[str, int] = {}
    names: dict[str, str] = {}
    for device in parts:
        assert device.gpu is not None and device.share is not None
        uuid, whole = device.gpu.uuid, device.gpu.memory_bytes // shares.MiB * shares.MiB
        names[uuid] = device.device
        taken = device.share.compute
        before = compute.get(uuid, 0)
        compute[uuid] = None if taken is None or before is None else min(100, before + taken)
        amount = to_bytes(device.share.memory) if device.share.memory is not None else whole
        memory[uuid] = min(whole, memory.get(uuid, 0) + amount)
    if len(set(compute.values())) > 1:
        described = ", ".join(
            f"{compute[u]}% of {names[u]}" if compute[u] else f"no compute limit on {names[u]}"
            for u in compute
        )
        raise _Refused(
            f"shares of one claim take different compute ({described}): MPS gives a client one "
            "thread percentage for all its GPUs"
        )
    percent = next(iter(compute.values()))
    wholes = {d.gpu.uuid: d.gpu.memory_bytes // shares.MiB * shares.MiB for d in parts if d.gpu}
    limited = {u: n for u, n in memory.items() if n < wholes[u]}
    if len(set(memory.values())) == 1 and len(limited) in (0, len(memory)):
        same: int | None = next(iter(limited.values()), None)
        if percent is None and same is None:
            return None, {}  # all of every GPU: whole GPUs after all
        return GpuShare(compute=percent, memory=same), {}
    # Different amounts per GPU: the MPS daemon limits each GPU by UUID (a share marks the
    # claim as one; 100% when it asked for memory only, which limits no compute).
    return GpuShare(compute=percent or 100), memory


def _with_pinned_memory(sharing: Obj | None, memory: Mapping[str, int]) -> Obj:
    """The claim's MPS sharing with each GPU's pinned-memory limit (by UUID) set to its share's
    memory, or to the claim's own lower limit for that GPU (or for all)."""
    sharing = dict(sharing or {"strategy": SharingStrategy.MPS.value})
    config = dict(sharing.get("mpsConfig") or {})
    own = dict(config.get("defaultPerDevicePinnedMemoryLimit") or {})
    default = config.get("defaultPinnedDeviceMemoryLimit")
    limits = {}
    for uuid, n in memory.items():
        mine = [to_bytes(q) for q in (own.get(uuid), default) if q is not None]
        limits[uuid] = str(min([n, *mine]))
    config["defaultPerDevicePinnedMemoryLimit"] = limits
    sharing["mpsConfig"] = config
    return sharing
