"""The solver's own ledger: what a node's devices already hold, and what a new claim takes.

Plain frozen dataclasses, as `nodemodel` is for the devices. A node's `Ledger` is built at the
edge from what the caller keeps (`drasat.v1.nasinventory`: a NodeAllocationState's
allocatedClaims, preparedClaims and orphanMigDevices, or the entries a v1 claim's status stands
for); the solver answers each new claim with an `Allocation` (`PodPlacement.allocations`), the
same type the ledger holds, which the edge writes back as the node's ledger record. No
validation runs here: the edges validated what they read.

`inventory` counts what is taken from it: GPUs held whole, shares' compute and memory and
namespaces, MIG memory slices occupied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from drasat.api.sharing import GpuShare, GpuSharing
from drasat.solver.nodemodel import PublishedDevice


@dataclass(frozen=True, slots=True)
class MigTaken:
    """One MIG device: its parent GPU, profile and memory slices start .. start + size - 1."""

    parent: str
    profile: str
    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def media_extensions(self) -> bool:
        return self.profile.endswith("+me")


@dataclass(frozen=True, slots=True)
class InitStep:
    """One of the policy's init actions resolved for a claim (the node plugin runs it)."""

    action: str
    value: str | int | None = None


@dataclass(frozen=True, slots=True)
class Allocation:
    """What one claim takes on a node: whole GPUs or shares of them (`gpus`), or MIG devices
    (`migs`); an optional claim may take none."""

    #: The claim as the ledger names it: its namespace and name, and `uid`, the ResourceClaim
    #: it belongs to (the shares of one claim spread over several GPUs have one).
    namespace: str
    name: str
    uid: str
    #: A MIG claim (its devices are `migs`), else a GPU claim (`gpus`).
    mig: bool = False
    #: GPU uuids taken: whole, or a share of each (`share`).
    gpus: tuple[str, ...] = ()
    migs: tuple[MigTaken, ...] = ()
    #: A share of each GPU instead of the whole.
    share: GpuShare | None = None
    #: How the devices are shared between the claim's pods (the claim's or the default).
    sharing: GpuSharing | None = None
    optional: bool = False
    #: The policy's init actions for its devices.
    lifecycle: tuple[InitStep, ...] = ()
    #: The published devices it takes, one for each of `gpus` (or `migs`) in order, as the
    #: node's model names them (`nodemodel.Gpu.device`, `Gpu.mig_devices`); empty when the
    #: node's model names none (read from a NodeAllocationState) and in the ledger's entries.
    #: Not part of equality: the ledger compares what is taken, not where it was published.
    devices: tuple[PublishedDevice, ...] = field(default=(), compare=False)

    @property
    def has_devices(self) -> bool:
        return bool(self.migs) if self.mig else bool(self.gpus)

    @property
    def parents(self) -> tuple[str, ...]:
        """The GPUs its devices are on (a MIG device's parent)."""
        return tuple(m.parent for m in self.migs) if self.mig else self.gpus


@dataclass(frozen=True, slots=True)
class Prepared:
    """A claim the node has prepared: its GPUs and MIG devices."""

    gpus: tuple[str, ...] = ()
    migs: tuple[MigTaken, ...] = ()


@dataclass(frozen=True, slots=True)
class Ledger:
    """What a node's devices already hold. Treated as an immutable snapshot (the mappings are
    never changed once built): a new allocation makes a new Ledger (`with_allocated`)."""

    #: Ledger key (claim uid, or `<uid>/<request>[#i]`) -> what it took. Existing, never moved.
    allocated: Mapping[str, Allocation] = field(default_factory=dict)
    #: Claim uid -> what the node prepared for it. One that is not (or no longer) in
    #: `allocated` still counts as taken: its devices are being torn down, or are held by the
    #: kubelet's own claims; its GPUs held whole (a prepared GPU does not say it was a share).
    prepared: Mapping[str, Prepared] = field(default_factory=dict)
    #: MIG devices the node found that no prepared claim owns: their slices are occupied.
    orphans: tuple[MigTaken, ...] = ()

    def with_allocated(self, more: Mapping[str, Allocation]) -> Ledger:
        """This ledger with `more` allocated (an existing key is replaced)."""
        if not more:
            return self
        return Ledger({**self.allocated, **more}, self.prepared, self.orphans)
