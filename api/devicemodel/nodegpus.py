"""What the device model is built from: a node's GPUs as discovered, the MIG profiles each
MIG-enabled GPU offers (from NVML, or the NAS's per-product entries), their health, and which
kinds of device to publish.

This is a purely computational module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from drasat.api.nas import GpuInfo, Health, MigInfo

#: XID 79: "GPU has fallen off the bus" — the GPU is gone until the node is repaired.
XID_GPU_LOST = 79


@dataclass(frozen=True)
class GpuHealth:
    """Why a GPU is unhealthy: a critical XID (None: unknown, e.g. only the NAS said so) and
    whether the GPU is lost (off the bus: nothing on it can keep running)."""

    xid: int | None = None
    lost: bool = False

    @classmethod
    def from_xid(cls, xid: int | None) -> GpuHealth:
        return cls(xid=xid, lost=xid == XID_GPU_LOST)


@dataclass(frozen=True)
class Inventory:
    """One node's devices as the device model sees them.

    `mig_profiles` maps a MIG-enabled GPU's UUID to the profiles it offers with their
    placements and GPU-instance profile ids; `health` maps an unhealthy GPU's UUID to why.
    `instance_limits` maps a MIG-enabled GPU's UUID to the most instances NVML allows per
    GPU-instance profile id (`instanceCount`; `1g.5gb+me`: 1). `shares`: publish non-MIG GPUs
    as shareable (consumable capacity; off by default until the node plugin's v1 prepare takes
    shares); `fallback`: publish the node's `cpu-fallback` device.

    What the API server keeps, where a feature gate of Kubernetes 1.34/1.35 is off by default
    (it drops the fields otherwise, drasat.kube.served asks it): `consumable_capacity`
    (DRAConsumableCapacity: `allowMultipleAllocations`, so shares and a fallback device that many
    claims take; off: whole GPUs only) and `counters` (DRAPartitionableDevices: the counter sets
    that tie a MIG-enabled GPU's placements together; off: the placements alone, which drasat's
    NAS ledger keeps apart)."""

    gpus: Sequence[GpuInfo]
    mig_profiles: Mapping[str, Sequence[MigInfo]] = field(default_factory=dict)
    health: Mapping[str, GpuHealth] = field(default_factory=dict)
    instance_limits: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    shares: bool = False
    fallback: bool = True
    consumable_capacity: bool = True
    counters: bool = True

    def ordered_gpus(self) -> list[GpuInfo]:
        return sorted(self.gpus, key=lambda gpu: gpu.minor)

    def health_of(self, gpu: GpuInfo) -> GpuHealth | None:
        found = self.health.get(gpu.uuid)
        if found is None and gpu.health is Health.Unhealthy:
            return GpuHealth()
        return found


def profiles_by_gpu(gpus: Iterable[GpuInfo], migs: Iterable[MigInfo]) -> dict[str, list[MigInfo]]:
    """NAS-shaped input (one `mig` entry per product x profile) as profiles per MIG-enabled GPU:
    each such GPU offers the entries of its product."""
    by_product: dict[str, list[MigInfo]] = {}
    for mig in migs:
        by_product.setdefault(mig.parentProductName, []).append(mig)
    return {
        gpu.uuid: list(by_product.get(gpu.productName, []))
        for gpu in gpus
        if gpu.migEnabled and gpu.productName in by_product
    }
