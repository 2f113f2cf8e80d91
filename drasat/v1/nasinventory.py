"""A NodeAllocationState as the solver's node model and ledger, and back.

The NAS stays the node's ledger record (what the node plugin wrote, what the controller
allocated); the solver reads a node in its own terms: its devices (`drasat.solver.nodemodel`)
and what they already hold (`drasat.solver.ledger`), and answers with what each new claim takes
(`ledger.Allocation`). This is the one translation between the two, for what is read as a NAS
(the controller's ledgers, the entries a v1 claim's status stands for, the what-if's
NodeAllocationState input, the classic wing) and for what is written or shown as one (the
solver's answers as allocatedClaims entries, drasat's device model of a node, the what-if's
output). A purely computational module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from drasat.api.nas import (
    AllocatableDevice,
    AllocatedDevices,
    AllocatedGpu,
    AllocatedGpus,
    AllocatedMigDevice,
    AllocatedMigDevices,
    ClaimInfo,
    GpuInfo,
    Health,
    LifecycleStep,
    MigInfo,
    MigPlacement,
    NodeAllocationStateSpec,
    OrphanMigDevice,
    PreparedDevices,
)
from drasat.solver.ledger import Allocation, InitStep, Ledger, MigTaken, Prepared
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
        source="spec.allocatableDevices",
    )


# -- the ledger ------------------------------------------------------------------------------


def allocation_of(entry: AllocatedDevices) -> Allocation:
    """An allocatedClaims entry as what the claim takes, in the solver's terms."""
    info = entry.claimInfo
    steps = tuple(InitStep(s.action, s.value) for s in entry.lifecycle or ())
    if entry.mig is not None:
        migs = tuple(
            MigTaken(d.parentUUID, d.profile, d.placement.start, d.placement.size)
            for d in entry.mig.devices
        )
        return Allocation(
            info.namespace,
            info.name,
            info.uid,
            mig=True,
            migs=migs,
            share=entry.share,
            sharing=entry.mig.sharing,
            optional=bool(entry.optional),
            lifecycle=steps,
        )
    assert entry.gpu is not None  # the model holds exactly one of gpu or mig
    return Allocation(
        info.namespace,
        info.name,
        info.uid,
        gpus=tuple(d.uuid for d in entry.gpu.devices),
        share=entry.share,
        sharing=entry.gpu.sharing,
        optional=bool(entry.optional),
        lifecycle=steps,
    )


def allocations_of(entries: Mapping[str, AllocatedDevices]) -> dict[str, Allocation]:
    return {key: allocation_of(entry) for key, entry in entries.items()}


def entry_of(allocation: Allocation) -> AllocatedDevices:
    """What a claim takes as the allocatedClaims entry the NAS writes."""
    a = allocation
    info = ClaimInfo(namespace=a.namespace, name=a.name, uid=a.uid)
    lifecycle = [LifecycleStep(action=s.action, value=s.value) for s in a.lifecycle] or None
    optional = True if a.optional else None
    if a.mig:
        devices = [
            AllocatedMigDevice(
                profile=m.profile,
                parentUUID=m.parent,
                placement=MigPlacement(start=m.start, size=m.size),
            )
            for m in a.migs
        ]
        return AllocatedDevices(
            claimInfo=info,
            mig=AllocatedMigDevices(devices=devices, sharing=a.sharing),
            share=a.share,
            optional=optional,
            lifecycle=lifecycle,
        )
    return AllocatedDevices(
        claimInfo=info,
        gpu=AllocatedGpus(devices=[AllocatedGpu(uuid=u) for u in a.gpus], sharing=a.sharing),
        share=a.share,
        optional=optional,
        lifecycle=lifecycle,
    )


def entries_of(allocations: Mapping[str, Allocation]) -> dict[str, AllocatedDevices]:
    return {key: entry_of(allocation) for key, allocation in allocations.items()}


def prepared_of(prepared: PreparedDevices) -> Prepared:
    gpus = tuple(d.uuid for d in prepared.gpu.devices) if prepared.gpu is not None else ()
    migs = (
        tuple(
            MigTaken(d.parentUUID, d.profile, d.placement.start, d.placement.size)
            for d in prepared.mig.devices
        )
        if prepared.mig is not None
        else ()
    )
    return Prepared(gpus, migs)


def orphan_of(orphan: OrphanMigDevice) -> MigTaken:
    return MigTaken(
        orphan.parentUUID, orphan.profile, orphan.placement.start, orphan.placement.size
    )


def ledger_of(spec: NodeAllocationStateSpec) -> Ledger:
    """The NAS's allocatedClaims, preparedClaims and orphanMigDevices as the solver's ledger."""
    return Ledger(
        allocated=allocations_of(spec.allocatedClaims),
        prepared={uid: prepared_of(p) for uid, p in spec.preparedClaims.items()},
        orphans=tuple(orphan_of(o) for o in spec.orphanMigDevices),
    )


def with_entries(node: NodeState, entries: Mapping[str, AllocatedDevices]) -> NodeState:
    """The node with these allocatedClaims entries added to its ledger (a key already there is
    replaced)."""
    if not entries:
        return node
    return dataclasses.replace(node, ledger=node.ledger.with_allocated(allocations_of(entries)))


def node_state(name: str, spec: NodeAllocationStateSpec, **fields: Any) -> NodeState:
    """The solver's node of a NAS: its devices, its ledger, and `fields` (readiness, CPU,
    memory, labels) as given."""
    return NodeState(name=name, devices=devices_of(spec), ledger=ledger_of(spec), **fields)


# -- the devices, back ---------------------------------------------------------------------


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
