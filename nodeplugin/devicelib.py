"""The one small interface between the node plugin and the GPUs (NVIDIA's `nvlib` idea).

Everything the plugin does to hardware goes through a `DeviceLib`; the production implementation
(`drasat.nodeplugin.nvml.NvmlDeviceLib`) calls NVML, and runs unchanged on the simulated fleet in
`drasat.testbed.simnvml`. This module only defines the vocabulary: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from drasat.api.sharing import TimeSlice


class DeviceError(Exception):
    """A device operation failed; `str()` says which device and why (an NVML error name)."""


class GpuLostError(DeviceError):
    """The GPU fell off the bus (XID 79; NVML answers `NVML_ERROR_GPU_IS_LOST`): nothing on it
    can be read or changed until it is reset, and what was set on it went with it."""


class ComputeMode(StrEnum):
    Default = "Default"
    ExclusiveProcess = "ExclusiveProcess"
    Prohibited = "Prohibited"


#: `nvidia-smi compute-policy --set-timeslice` levels.
TIME_SLICE_LEVELS: dict[TimeSlice, int] = {
    TimeSlice.Default: 0,
    TimeSlice.Short: 1,
    TimeSlice.Medium: 2,
    TimeSlice.Long: 3,
}


@dataclass(frozen=True)
class GpuDevice:
    """One physical GPU as NVML reports it."""

    index: int
    minor: int
    uuid: str
    mig_enabled: bool
    memory_bytes: int
    product_name: str
    brand: str
    architecture: str
    cuda_compute_capability: str
    driver_version: str
    cuda_driver_version: str
    pci_bus_id: str | None = None
    numa_node: int | None = None
    nvlink_peers: tuple[str, ...] = ()
    #: Fell off the bus: NVML answers nothing about it. A lost GPU found at discovery has only
    #: its index (uuid ""), unless the plugin knew it from an earlier discovery.
    lost: bool = False


@dataclass(frozen=True)
class MigProfileInfo:
    """One GPU-instance profile of a MIG-enabled GPU with the placements NVML allows for it."""

    name: str  # e.g. "3g.20gb"
    gi_profile_id: int
    compute_slices: int
    memory_bytes: int
    placements: tuple[tuple[int, int], ...]  # (start, size) in memory slices
    max_instances: int = 0


@dataclass(frozen=True)
class MigDevice:
    """A MIG device: one GPU instance with one compute instance spanning it."""

    uuid: str
    parent_uuid: str
    gi_id: int
    ci_id: int
    gi_profile_id: int
    start: int
    size: int


@dataclass(frozen=True)
class GpuInstance:
    """A MIG GPU instance (with or without compute instances)."""

    gi_id: int
    profile_id: int
    start: int
    size: int


@dataclass(frozen=True)
class DeviceEvent:
    """A critical NVML event (XID) on a GPU."""

    gpu_uuid: str
    xid: int


@dataclass
class DeviceSettings:
    """The mutable settings of one GPU the plugin may change (None: the lib cannot read it)."""

    compute_mode: ComputeMode | None = None
    time_slice: TimeSlice | None = None
    power_limit_watts: int | None = None
    default_power_limit_watts: int | None = None
    locked_clocks_mhz: int | None = None
    persistence_mode: bool | None = None
    extra: dict[str, str] = field(default_factory=dict)


class DeviceLib(Protocol):
    """What the node plugin needs from the GPUs. Methods raise DeviceError."""

    def gpus(self) -> list[GpuDevice]:
        """Every GPU; one that answers `NVML_ERROR_GPU_IS_LOST` comes with `lost` set."""
        ...

    def lost(self, gpu_uuid: str) -> bool:
        """True when the GPU no longer answers (fell off the bus)."""
        ...

    def mig_profiles(self, gpu_uuid: str) -> list[MigProfileInfo]: ...

    def gpu_instances(self, gpu_uuid: str) -> list[GpuInstance]: ...

    def gpu_instance(self, gpu_uuid: str, gi_id: int) -> GpuInstance | None: ...

    def create_mig_device(self, gpu_uuid: str, *, gi_profile_id: int, start: int) -> MigDevice:
        """Create a GPU instance at `start` and a compute instance over all of it.

        On failure nothing is left behind (the GPU instance is destroyed again).
        """
        ...

    def destroy_mig_device(self, gpu_uuid: str, *, gi_id: int, ci_id: int | None) -> bool:
        """Destroy a GPU instance and its compute instance(s) (`ci_id` None: all of them).

        False when the GPU instance did not exist (idempotent)."""
        ...

    def settings(self, gpu_uuid: str) -> DeviceSettings: ...

    def set_compute_mode(self, gpu_uuid: str, mode: ComputeMode) -> None: ...

    def set_time_slice(self, gpu_uuid: str, time_slice: TimeSlice) -> None: ...

    def set_power_limit(self, gpu_uuid: str, watts: int | None) -> None:
        """Set the power limit; None restores the default limit."""
        ...

    def lock_clocks(self, gpu_uuid: str, mhz: int | None) -> None:
        """Lock GPU clocks at `mhz`; None resets them."""
        ...

    def set_persistence_mode(self, gpu_uuid: str, enabled: bool) -> None: ...

    def wait_events(self, timeout_ms: int) -> list[DeviceEvent]:
        """Critical XID events of any GPU, waiting up to `timeout_ms`; [] when none came."""
        ...

    def shutdown(self) -> None: ...
