"""NodeAllocationState: one per node; what it has, what the controller allocated, what is prepared.

`allocatableDevices` is written by the node plugin, `allocatedClaims` only by the controller (or the
what-if), `preparedClaims` only by the node plugin. Field names follow NVIDIA's classic driver.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from drasat.api import groups, limits
from drasat.api.base import Object, Spec
from drasat.api.sharing import GpuShare, GpuSharing


class Health(StrEnum):
    Healthy = "Healthy"
    Unhealthy = "Unhealthy"


class GpuInfo(Spec):
    index: int = Field(ge=0)
    uuid: str
    minor: int = Field(0, ge=0)
    migEnabled: bool = False
    memoryBytes: int = Field(ge=0)
    productName: str
    brand: str = "Nvidia"
    architecture: str = ""
    cudaComputeCapability: str = ""
    driverVersion: str = ""
    cudaDriverVersion: str = ""
    # drasat additions
    pciBusID: str | None = None
    numaNode: int | None = None
    nvlinkPeers: list[str] | None = Field(
        None, max_length=limits.MAX_GPUS_PER_NODE, description="UUIDs of NVLink-connected GPUs."
    )
    health: Health = Health.Healthy


class MigPlacement(Spec):
    start: int = Field(ge=0, le=7, description="First memory slice.")
    size: int = Field(ge=1, le=8, description="Number of memory slices.")

    @property
    def end(self) -> int:
        return self.start + self.size

    def overlaps(self, other: MigPlacement) -> bool:
        return self.start < other.end and other.start < self.end


class MigInfo(Spec):
    """One MIG profile of one product: where its instances can be placed on such a GPU."""

    profile: str
    parentProductName: str
    placements: list[MigPlacement] = Field(max_length=8)  # 8 memory slices
    # drasat additions (read from NVML or the catalog)
    giProfileId: int | None = None
    memoryBytes: int | None = None
    computeSlices: int | None = None


class AllocatableDevice(Spec):
    gpu: GpuInfo | None = None
    mig: MigInfo | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> AllocatableDevice:
        if (self.gpu is None) == (self.mig is None):
            raise ValueError("an allocatable device is exactly one of gpu or mig")
        return self


class ClaimInfo(Spec):
    namespace: str
    name: str
    uid: str


class AllocatedGpu(Spec):
    uuid: str


class AllocatedGpus(Spec):
    devices: list[AllocatedGpu] = Field(
        default_factory=list, max_length=limits.MAX_DEVICES_PER_CLAIM
    )
    sharing: GpuSharing | None = None


class AllocatedMigDevice(Spec):
    profile: str
    parentUUID: str
    placement: MigPlacement


class AllocatedMigDevices(Spec):
    devices: list[AllocatedMigDevice] = Field(
        default_factory=list, max_length=limits.MAX_DEVICES_PER_CLAIM
    )
    sharing: GpuSharing | None = None


class LifecycleStep(Spec):
    """An init/cleanup action from the policy's fixed vocabulary, resolved for this claim."""

    action: str
    value: str | int | None = None


class AllocatedDevices(Spec):
    claimInfo: ClaimInfo
    gpu: AllocatedGpus | None = None
    mig: AllocatedMigDevices | None = None
    # drasat additions
    share: GpuShare | None = None
    optional: bool | None = None
    lifecycle: list[LifecycleStep] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> AllocatedDevices:
        if (self.gpu is None) == (self.mig is None):
            raise ValueError("an allocated claim holds exactly one of gpu or mig")
        return self


class PreparedGpu(Spec):
    uuid: str


class PreparedGpus(Spec):
    devices: list[PreparedGpu] = Field(
        default_factory=list, max_length=limits.MAX_DEVICES_PER_CLAIM
    )


class PreparedMigDevice(Spec):
    uuid: str
    profile: str
    parentUUID: str
    placement: MigPlacement
    giId: int | None = None
    ciId: int | None = None


class PreparedMigDevices(Spec):
    devices: list[PreparedMigDevice] = Field(
        default_factory=list, max_length=limits.MAX_DEVICES_PER_CLAIM
    )


class PreparedDevices(Spec):
    gpu: PreparedGpus | None = None
    mig: PreparedMigDevices | None = None


class OrphanMigDevice(Spec):
    """A MIG device (GPU instance) on the node that no claim prepared there owns."""

    parentUUID: str
    giId: int = Field(ge=0, description="GPU instance id.")
    profile: str = Field("", description="MIG profile; empty when the GPU does not list it.")
    placement: MigPlacement
    createdByDrasat: bool = Field(
        False,
        description="The node plugin made it (its checkpoint says so) for a claim since gone.",
    )


class NodeAllocationStateSpec(Spec):
    allocatableDevices: list[AllocatableDevice] = Field(
        default_factory=list, max_length=limits.MAX_NODE_DEVICES
    )
    allocatedClaims: dict[str, AllocatedDevices] = Field(default_factory=dict)
    preparedClaims: dict[str, PreparedDevices] = Field(default_factory=dict)
    # drasat addition, written by the node plugin
    orphanMigDevices: list[OrphanMigDevice] = Field(
        default_factory=list,
        max_length=limits.MAX_NODE_DEVICES,
        description="MIG devices the node plugin found that no prepared claim owns and that it "
        "kept (its --orphan-mig policy); their memory slices are not free for new claims.",
    )

    def gpus(self) -> list[GpuInfo]:
        return [d.gpu for d in self.allocatableDevices if d.gpu is not None]

    def mig_profiles(self) -> list[MigInfo]:
        return [d.mig for d in self.allocatableDevices if d.mig is not None]


class NasStatus(StrEnum):
    Ready = "Ready"
    NotReady = "NotReady"


class NodeAllocationState(Object):
    kind: Literal["NodeAllocationState"] = "NodeAllocationState"
    apiVersion: str = groups.NAS_API_VERSION
    spec: NodeAllocationStateSpec = Field(default_factory=NodeAllocationStateSpec)
    status: NasStatus | None = Field(None, description="Ready once the node plugin published.")
