"""The allocation of a `resource.k8s.io/v1` ResourceClaim, for the v1/v1beta1 DRAPlugin services.

A current kubelet (1.34+) names a claim (namespace, name, uid) and nothing more: the plugin reads
the ResourceClaim through drasat.kube, takes the results of `status.allocation.devices.results`
whose driver is gpu.drasat.io and whose pool is this node, and translates them into what the
preparer already consumes (an `AllocatedDevices` entry, as the classic controller writes in the
NAS), so both kubelet generations share one retry-safe, checkpointed preparer (`state.py`).

Whole GPUs for now: a device named `gpu-<minor>` (`api.resourceslices.gpu_device_name`, the
device model the ResourceSlices are published from) is this node's GPU with that minor. MIG
devices, shares (consumable capacity), admin access and opaque configuration for our driver are
refused with an error naming them, as is a device the node does not have.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from drasat.api.errors import describe_validation_error, show
from drasat.api.groups import DRIVER_NAME
from drasat.api.nas import AllocatedDevices
from drasat.api.resourceslices import gpu_device_name
from drasat.kube import errors as kube_errors
from drasat.kube import resources
from drasat.kube.client import Api
from drasat.nodeplugin.devices import GpuDevice
from drasat.nodeplugin.state import ClaimError, ClaimRef

Obj = dict[str, Any]

#: Namespace (DNS label) and claim name (DNS subdomain) as the API server allows them: they go
#: into the URL the claim is read from.
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
#: NVIDIA's (and drasat's) MIG device names: `gpu-<minor>-mig-<profile>-<profileID>-<start>`.
_MIG_DEVICE = re.compile(r"gpu-\d+-mig-")


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


@dataclass(frozen=True)
class ClaimAllocation:
    """A v1 claim's devices on this node: for the preparer and for the kubelet's answer."""

    allocation: AllocatedDevices
    results: tuple[Result, ...]


class ClaimAllocations:
    """Resolves the kubelet's claim references against the API (`reader`) and this node."""

    def __init__(
        self,
        reader: ClaimReader | None,
        *,
        pool: str,
        gpus: Callable[[], Sequence[GpuDevice]],
        driver: str = DRIVER_NAME,
    ) -> None:
        self.reader = reader
        self.pool = pool
        self.gpus = gpus
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
            obj, claim, pool=self.pool, gpus=self.gpus(), driver=self.driver
        )


def allocation_from_claim(
    obj: Mapping[str, Any],
    claim: ClaimRef,
    *,
    pool: str,
    gpus: Sequence[GpuDevice],
    driver: str = DRIVER_NAME,
) -> ClaimAllocation:
    """The whole GPUs a v1 ResourceClaim was allocated on this node (pool `pool`), as the
    preparer's AllocatedDevices, with the results they come from. Pure; ClaimError on anything
    this node cannot prepare."""
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
    for config in devices.get("config") or []:
        opaque = config.get("opaque") or {}
        if opaque.get("driver") == driver:
            raise ClaimError(
                f"claim {claim}: opaque configuration for {driver} (source "
                f"{show(config.get('source'))}) is not supported by the v1 prepare yet"
            )
    by_name = {gpu_device_name(gpu.minor): gpu for gpu in gpus}
    uuids: list[str] = []
    results = []
    for result in ours:
        name = str(result.get("device", ""))
        where = f"{result.get('pool')}/{name}"
        problem = ""
        if result.get("pool") != pool:
            problem = f"device {where} is not in this node's pool {pool}"
        elif result.get("consumedCapacity") or result.get("shareID"):
            problem = (
                f"device {where} is allocated as a share (consumable capacity): shares are not "
                "supported by the v1 prepare yet"
            )
        elif result.get("adminAccess"):
            problem = f"device {where}: admin access is not supported by the v1 prepare yet"
        elif name not in by_name and _MIG_DEVICE.match(name):
            problem = f"MIG device {where}: MIG partitions are not supported by the v1 prepare yet"
        elif name not in by_name:
            have = ", ".join(sorted(by_name, key=_natural)) or "no GPUs"
            problem = f"device {show(name)} is not on node {pool} (it has: {have})"
        if problem:
            raise ClaimError(f"claim {claim}: {problem}")
        uuids.append(by_name[name].uuid)
        results.append(Result(str(result.get("request", "")), pool, name))
    entry = {
        "claimInfo": {"namespace": claim.namespace, "name": claim.name, "uid": claim.uid},
        "gpu": {"devices": [{"uuid": uuid} for uuid in dict.fromkeys(uuids)]},
    }
    try:
        model = AllocatedDevices.model_validate(entry)
    except ValidationError as error:  # e.g. more devices than a claim may have
        raise ClaimError(f"claim {claim}: {describe_validation_error(error)}") from None
    return ClaimAllocation(model, tuple(results))


def _natural(name: str) -> tuple[int, str]:
    digits = name.rsplit("-", 1)[-1]
    return (int(digits), name) if digits.isdigit() else (1 << 30, name)
