"""A NodeAllocationState's `allocatableDevices` as the solver's node model, and back.

The NAS stays the node's ledger record (what the node plugin wrote, what the controller
allocated); the solver reads a node's devices in its own terms (`drasat.solver.nodemodel`). This
is the one translation between the two, for what is read as a NAS (the controller's ledgers, the
what-if's NodeAllocationState input, the classic wing) and for what is written or shown as one
(drasat's device model of a node, the what-if's output). A purely computational module.
"""

from __future__ import annotations

from typing import Any

from drasat.api.nas import (
    AllocatableDevice,
    GpuInfo,
    Health,
    MigInfo,
    MigPlacement,
    NodeAllocationStateSpec,
)
from drasat.solver.nodemodel import Gpu, MigProfile, NodeDevices, Placement
from drasat.solver.problem import NodeState


def gpu_of(info: GpuInfo) -> Gpu:
    return Gpu(
        index=info.index,
        uuid=info.uuid,
        productName=info.productName,
        memoryBytes=info.memoryBytes,
        minor=info.minor,
        migEnabled=info.migEnabled,
        brand=info.brand,
        architecture=info.architecture,
        cudaComputeCapability=info.cudaComputeCapability,
        driverVersion=info.driverVersion,
        cudaDriverVersion=info.cudaDriverVersion,
        pciBusID=info.pciBusID,
        numaNode=info.numaNode,
        nvlinkPeers=None if info.nvlinkPeers is None else tuple(info.nvlinkPeers),
        healthy=info.health is Health.Healthy,
    )


def profile_of(info: MigInfo) -> MigProfile:
    return MigProfile(
        profile=info.profile,
        parentProductName=info.parentProductName,
        placements=tuple(Placement(p.start, p.size) for p in info.placements),
        giProfileId=info.giProfileId,
        memoryBytes=info.memoryBytes,
        computeSlices=info.computeSlices,
    )


def devices_of(spec: NodeAllocationStateSpec) -> NodeDevices:
    """The solver's devices of a NAS, in its order."""
    return NodeDevices(
        gpus=tuple(gpu_of(g) for g in spec.gpus()),
        mig_profiles=tuple(profile_of(m) for m in spec.mig_profiles()),
    )


def ledger_of(spec: NodeAllocationStateSpec) -> NodeAllocationStateSpec:
    """The NAS without its allocatableDevices: what `NodeState.nas` holds."""
    if not spec.allocatableDevices:
        return spec
    return spec.model_copy(update={"allocatableDevices": []})


def node_state(name: str, spec: NodeAllocationStateSpec, **fields: Any) -> NodeState:
    """The solver's node of a NAS: its devices, its ledger, and `fields` (readiness, CPU,
    memory, labels) as given."""
    return NodeState(name=name, devices=devices_of(spec), nas=ledger_of(spec), **fields)


def gpu_info(gpu: Gpu) -> GpuInfo:
    """A solver GPU as the NAS writes it (drasat's device model reads this shape)."""
    return GpuInfo.model_construct(
        index=gpu.index,
        uuid=gpu.uuid,
        minor=gpu.minor,
        migEnabled=gpu.migEnabled,
        memoryBytes=gpu.memoryBytes,
        productName=gpu.productName,
        brand=gpu.brand,
        architecture=gpu.architecture,
        cudaComputeCapability=gpu.cudaComputeCapability,
        driverVersion=gpu.driverVersion,
        cudaDriverVersion=gpu.cudaDriverVersion,
        pciBusID=gpu.pciBusID,
        numaNode=gpu.numaNode,
        nvlinkPeers=None if gpu.nvlinkPeers is None else list(gpu.nvlinkPeers),
        health=Health.Healthy if gpu.healthy else Health.Unhealthy,
    )


def mig_info(profile: MigProfile) -> MigInfo:
    return MigInfo.model_construct(
        profile=profile.profile,
        parentProductName=profile.parentProductName,
        placements=[
            MigPlacement.model_construct(start=p.start, size=p.size) for p in profile.placements
        ],
        giProfileId=profile.giProfileId,
        memoryBytes=profile.memoryBytes,
        computeSlices=profile.computeSlices,
    )


def allocatable_of(devices: NodeDevices) -> list[AllocatableDevice]:
    """The devices as a NAS's allocatableDevices: GPUs, then MIG profiles. Built from values
    the edges validated, so not validated again."""
    out = [AllocatableDevice.model_construct(gpu=gpu_info(g), mig=None) for g in devices.gpus]
    out += [
        AllocatableDevice.model_construct(gpu=None, mig=mig_info(m)) for m in devices.mig_profiles
    ]
    return out


def nas_spec(devices: NodeDevices) -> NodeAllocationStateSpec:
    """A NAS spec holding just the devices (drasat's device model and the what-if's output
    read one)."""
    return NodeAllocationStateSpec(allocatableDevices=allocatable_of(devices))
