"""The solver's own node: the GPUs a node has and the MIG partitions their products offer.

Plain frozen dataclasses, built at each wing's edge straight from what it reads (as
`claimspec` is for claims): drasat's and NVIDIA's ResourceSlices (`drasat.v1.slices`), the
compact what-if `Cluster` and a NodeAllocationState's `allocatableDevices`
(`drasat.v1.nasinventory`, both ways). No validation runs here: the edges validated what they
read, and a node's devices are built once per change of its slices, on the controller's first
cycle for every node of the fleet.

Field names are the API's: a `Gpu` is what the GPU selectors read (`api.selectors.GpuProperties`:
`productName`, `memoryBytes`, ...), a `MigProfile` what NVIDIA's NAS calls one profile of one
product (`parentProductName`, `giProfileId`, ...), so a rule has one spelling from the user's
policy to the solver. What is taken of the devices (the ledger's allocations, shares' compute
and memory, memory slices in use) is counted from the node's ledger (`ledger.Ledger`,
`NodeState.ledger`, in `inventory`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol


class PublishedDevice(Protocol):
    """The edge's own record of one device it read from a ResourceSlice (the v1 edge's
    `Published`): the solver never reads it beyond these names, it hands it back in its answer
    (`ledger.Allocation.devices`), so the edge writes the device the solver chose without
    finding it again."""

    @property
    def driver(self) -> str: ...

    @property
    def pool(self) -> str: ...

    @property
    def name(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU of the node."""

    index: int
    uuid: str
    productName: str
    #: Its whole memory, in bytes.
    memoryBytes: int
    minor: int = 0
    migEnabled: bool = False
    brand: str = "Nvidia"
    architecture: str = ""
    cudaComputeCapability: str = ""
    driverVersion: str = ""
    cudaDriverVersion: str = ""
    pciBusID: str | None = None
    numaNode: int | None = None
    #: UUIDs of the GPUs NVLink connects it to; None: not known.
    nvlinkPeers: tuple[str, ...] | None = None
    #: False: nothing new is allocated on it (a blocking device taint, NVML's health events).
    healthy: bool = True
    #: The published device that is this GPU whole; None: not published whole (a static MIG
    #: parent) or not read from published devices (a NodeAllocationState). Not part of
    #: equality: the same GPU is equal wherever it was read.
    device: PublishedDevice | None = field(default=None, compare=False)
    #: (MIG profile, placement start) -> the published MIG device at that placement of this
    #: GPU (the profiles' placements are the product's; which devices exist is the GPU's).
    #: Not part of equality, as `device`.
    mig_devices: Mapping[tuple[str, int], PublishedDevice] = field(
        default_factory=dict, compare=False
    )


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one MIG instance can sit: memory slices start .. start + size - 1."""

    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG profile of one product: its instances' size and where they can be placed."""

    profile: str
    parentProductName: str
    placements: tuple[Placement, ...]
    giProfileId: int | None = None
    memoryBytes: int | None = None
    computeSlices: int | None = None


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """What the node has: its GPUs (healthy or not) and, per MIG-capable product among them,
    the MIG profiles it offers (once per product, not per GPU)."""

    gpus: tuple[Gpu, ...] = ()
    mig_profiles: tuple[MigProfile, ...] = ()
    #: Where they were read, as a message names it (`spec.allocatableDevices`, `ResourceSlices
    #: of gpu.drasat.io`): the solver names the source of a contradiction it finds (one GPU on
    #: two nodes) without knowing the edges. Not part of equality: the same devices are equal
    #: wherever they were read.
    source: str = field(default="devices", compare=False)
