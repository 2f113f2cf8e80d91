"""What the node has, as NodeAllocationState `spec.allocatableDevices` entries.

One `gpu` entry per GPU; for MIG-enabled GPUs one `mig` entry per product x profile, with the
placements NVML reports (memory-slice units). These are purely computational functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from drasat.api.nas import AllocatableDevice, GpuInfo, Health, MigInfo, MigPlacement
from drasat.nodeplugin.devicelib import GpuDevice, MigProfileInfo


def gpu_info(gpu: GpuDevice, *, healthy: bool = True) -> GpuInfo:
    return GpuInfo(
        index=gpu.index,
        uuid=gpu.uuid,
        minor=gpu.minor,
        migEnabled=gpu.mig_enabled,
        memoryBytes=gpu.memory_bytes,
        productName=gpu.product_name,
        brand=gpu.brand,
        architecture=gpu.architecture,
        cudaComputeCapability=gpu.cuda_compute_capability,
        driverVersion=gpu.driver_version,
        cudaDriverVersion=gpu.cuda_driver_version,
        pciBusID=gpu.pci_bus_id,
        numaNode=gpu.numa_node,
        nvlinkPeers=list(gpu.nvlink_peers) or None,
        health=Health.Healthy if healthy else Health.Unhealthy,
    )


def allocatable_devices(
    gpus: Iterable[GpuDevice],
    mig_profiles: Mapping[str, list[MigProfileInfo]],
    *,
    unhealthy: Iterable[str] = (),
) -> list[AllocatableDevice]:
    """GPU entries in index order, then MIG entries by product and profile name."""
    bad = set(unhealthy)
    ordered = sorted(gpus, key=lambda g: g.index)
    out = [AllocatableDevice(gpu=gpu_info(g, healthy=g.uuid not in bad)) for g in ordered]
    seen: dict[tuple[str, str], MigProfileInfo] = {}
    for gpu in ordered:
        if not gpu.mig_enabled:
            continue
        for profile in mig_profiles.get(gpu.uuid, []):
            seen.setdefault((gpu.product_name, profile.name), profile)
    for (product, name), profile in sorted(seen.items()):
        placements = [MigPlacement(start=s, size=z) for s, z in profile.placements]
        mig = MigInfo(
            profile=name,
            parentProductName=product,
            placements=placements,
            giProfileId=profile.gi_profile_id,
            memoryBytes=profile.memory_bytes,
            computeSlices=profile.compute_slices,
        )
        out.append(AllocatableDevice(mig=mig))
    return out
