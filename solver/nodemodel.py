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
and memory, memory slices in use) is counted from the node's ledger (`NodeState.nas`,
`inventory`).
"""

from __future__ import annotations

from dataclasses import dataclass


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
