"""The production DeviceLib: NVML through `pynvml` (nvidia-ml-py). The only module importing it.

`NvmlDeviceLib` takes the NVML function table as an argument: the real `pynvml` module, or the
simulated fleet of `drasat.testbed.simnvml` that has the same function names, return shapes
and `pynvml.NVMLError` codes, so this code runs unchanged in CI. Time-slices have no NVML call;
they are set with `nvidia-smi compute-policy` through an injected command runner.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pynvml

from drasat.api.sharing import TimeSlice
from drasat.nodeplugin import devicelib as devices
from drasat.nodeplugin.devicelib import ComputeMode, DeviceError

log = logging.getLogger(__name__)

#: The NVML error class and constants, for the simulator (which must raise the same errors).
NVMLError: type[Exception] = pynvml.NVMLError
NVML: Any = pynvml

#: Runs a command (argv) and returns its stdout; raises DeviceError on failure.
CommandRunner = Callable[[Sequence[str]], str]

_COMPUTE_MODES: dict[ComputeMode, int] = {
    ComputeMode.Default: pynvml.NVML_COMPUTEMODE_DEFAULT,
    ComputeMode.ExclusiveProcess: pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
    ComputeMode.Prohibited: pynvml.NVML_COMPUTEMODE_PROHIBITED,
}
_ARCHITECTURES: dict[int, str] = {
    pynvml.NVML_DEVICE_ARCH_KEPLER: "Kepler",
    pynvml.NVML_DEVICE_ARCH_MAXWELL: "Maxwell",
    pynvml.NVML_DEVICE_ARCH_PASCAL: "Pascal",
    pynvml.NVML_DEVICE_ARCH_VOLTA: "Volta",
    pynvml.NVML_DEVICE_ARCH_TURING: "Turing",
    pynvml.NVML_DEVICE_ARCH_AMPERE: "Ampere",
    pynvml.NVML_DEVICE_ARCH_ADA: "Ada Lovelace",
    pynvml.NVML_DEVICE_ARCH_HOPPER: "Hopper",
    pynvml.NVML_DEVICE_ARCH_BLACKWELL: "Blackwell",
}
_BRANDS: dict[int, str] = {
    pynvml.NVML_BRAND_NVIDIA: "Nvidia",
    pynvml.NVML_BRAND_TESLA: "Tesla",
    pynvml.NVML_BRAND_QUADRO: "Quadro",
    pynvml.NVML_BRAND_GEFORCE: "GeForce",
    pynvml.NVML_BRAND_TITAN: "Titan",
    pynvml.NVML_BRAND_NVIDIA_RTX: "NvidiaRTX",
}
#: GPU/compute instance ids are small; enumeration probes ids below these.
_MAX_GI_ID = 32
_MAX_CI_ID = 8
#: Compute-instance profile index that spans a GPU instance of this many compute slices.
_CI_PROFILE_FOR_SLICES: dict[int, int] = {
    1: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
    2: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
    3: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
    4: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
    6: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE,
    7: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
    8: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE,
}


def error_name(error: Exception) -> str:
    """`NVML_ERROR_INSUFFICIENT_RESOURCES` for an NVMLError, else the exception text."""
    value = getattr(error, "value", None)
    for name in dir(pynvml):
        if name.startswith("NVML_ERROR_") and getattr(pynvml, name) == value:
            return name
    return str(error)


def is_error(error: Exception, code: int) -> bool:
    return isinstance(error, pynvml.NVMLError) and getattr(error, "value", None) == code


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def run_command(argv: Sequence[str]) -> str:
    """Run a host tool (nvidia-smi); DeviceError with its stderr when it fails."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise DeviceError(f"{argv[0]}: {error}") from error
    if done.returncode != 0:
        raise DeviceError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


class NvmlDeviceLib:
    """DeviceLib over an NVML function table (`pynvml` or the simulator)."""

    def __init__(self, nvml: Any = None, *, run: CommandRunner = run_command) -> None:
        self._nvml = pynvml if nvml is None else nvml
        self._run = run
        self._lock = threading.RLock()  # discovery
        self._gpu_locks: dict[str, threading.RLock] = {}  # MIG calls on one GPU must not interleave
        self._profiles: dict[str, list[devices.MigProfileInfo]] = {}
        self._time_slices: dict[str, TimeSlice] = {}
        self._locked_clocks: dict[str, int] = {}
        self._known: dict[int, devices.GpuDevice] = {}  # GPUs discovered, by index
        self._events: Any = None
        self._call("nvmlInit")

    # -- plumbing ----------------------------------------------------------------------------

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, name)(*args)
        except pynvml.NVMLError as error:
            raise _device_error(name, error) from error

    def _optional(self, name: str, *args: Any, default: Any = None) -> Any:
        """Call a query that some GPUs or drivers do not support; `default` when they do not
        (a lost GPU is not one that does not support it: GpuLostError)."""
        try:
            return getattr(self._nvml, name)(*args)
        except pynvml.NVMLError as error:
            if is_error(error, pynvml.NVML_ERROR_GPU_IS_LOST):
                raise _device_error(name, error) from error
            return default

    def _locked(self, gpu_uuid: str) -> threading.RLock:
        with self._lock:
            return self._gpu_locks.setdefault(gpu_uuid, threading.RLock())

    def _handle(self, gpu_uuid: str) -> Any:
        return self._call("nvmlDeviceGetHandleByUUID", gpu_uuid)

    # -- discovery ---------------------------------------------------------------------------

    def gpus(self) -> list[devices.GpuDevice]:
        """Every GPU in index order; a lost one as this lib knew it, or by its index only."""
        with self._lock:
            driver = _text(self._call("nvmlSystemGetDriverVersion"))
            cuda = int(self._call("nvmlSystemGetCudaDriverVersion"))
            cuda_version = f"{cuda // 1000}.{(cuda % 1000) // 10}"
            handles: dict[int, Any] = {}
            lost: list[int] = []
            for index in range(int(self._call("nvmlDeviceGetCount"))):
                try:
                    handle = self._call("nvmlDeviceGetHandleByIndex", index)
                    bus_id = self._bus_id(handle), _text(self._call("nvmlDeviceGetUUID", handle))
                except devices.GpuLostError as error:
                    log.error("GPU %d: %s (fell off the bus)", index, error)
                    lost.append(index)
                    continue
                handles[index] = (handle, bus_id)
            bus_ids = dict(bus for _, bus in handles.values())
            found = {}
            for index, (handle, _) in handles.items():
                try:
                    found[index] = self._gpu(index, handle, driver, cuda_version, bus_ids)
                except devices.GpuLostError as error:
                    log.error("GPU %d: %s (fell off the bus)", index, error)
                    lost.append(index)
            for index in lost:
                known = self._known.get(index)
                found[index] = (
                    dataclasses.replace(known, lost=True)
                    if known is not None
                    else _unknown_lost_gpu(index, driver, cuda_version)
                )
            self._known.update((i, g) for i, g in found.items() if not g.lost)
            return [found[i] for i in sorted(found)]

    def lost(self, gpu_uuid: str) -> bool:
        try:
            self._call("nvmlDeviceGetUUID", self._handle(gpu_uuid))
        except devices.GpuLostError:
            return True
        except DeviceError:
            return False
        return False

    def _bus_id(self, handle: Any) -> str:
        return _pci_bus_id(_text(self._call("nvmlDeviceGetPciInfo", handle).busId))

    def _gpu(
        self, index: int, handle: Any, driver: str, cuda: str, bus_ids: dict[str, str]
    ) -> devices.GpuDevice:
        major, minor = self._call("nvmlDeviceGetCudaComputeCapability", handle)
        mig = self._optional("nvmlDeviceGetMigMode", handle, default=[0, 0])
        architecture = self._optional("nvmlDeviceGetArchitecture", handle, default=-1)
        return devices.GpuDevice(
            index=index,
            minor=int(self._call("nvmlDeviceGetMinorNumber", handle)),
            uuid=_text(self._call("nvmlDeviceGetUUID", handle)),
            mig_enabled=int(mig[0]) == pynvml.NVML_DEVICE_MIG_ENABLE,
            memory_bytes=int(self._call("nvmlDeviceGetMemoryInfo", handle).total),
            product_name=_text(self._call("nvmlDeviceGetName", handle)),
            brand=_BRANDS.get(int(self._call("nvmlDeviceGetBrand", handle)), "Unknown"),
            architecture=_ARCHITECTURES.get(int(architecture), "Unknown"),
            cuda_compute_capability=f"{major}.{minor}",
            driver_version=driver,
            cuda_driver_version=cuda,
            pci_bus_id=self._bus_id(handle),
            numa_node=self._optional("nvmlDeviceGetNumaNodeId", handle),
            nvlink_peers=self._nvlink_peers(handle, bus_ids),
        )

    def _nvlink_peers(self, handle: Any, bus_ids: dict[str, str]) -> tuple[str, ...]:
        peers: list[str] = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            state = self._optional("nvmlDeviceGetNvLinkState", handle, link)
            if state is None:
                break  # no NVLink, or no more links
            if state != pynvml.NVML_FEATURE_ENABLED:
                continue
            remote = self._optional("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            peer = bus_ids.get(_pci_bus_id(_text(remote.busId))) if remote is not None else None
            if peer is not None and peer not in peers:
                peers.append(peer)
        return tuple(peers)

    def mig_profiles(self, gpu_uuid: str) -> list[devices.MigProfileInfo]:
        """The GPU's instance profiles (read once: they change only with the MIG mode)."""
        with self._locked(gpu_uuid):
            if gpu_uuid not in self._profiles:
                self._profiles[gpu_uuid] = self._read_profiles(gpu_uuid)
            return list(self._profiles[gpu_uuid])

    def _read_profiles(self, gpu_uuid: str) -> list[devices.MigProfileInfo]:
        with self._locked(gpu_uuid):
            handle = self._handle(gpu_uuid)
            profiles = []
            for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
                info = self._optional("nvmlDeviceGetGpuInstanceProfileInfo", handle, index)
                if info is None or int(info.instanceCount) == 0:
                    continue
                profiles.append(
                    devices.MigProfileInfo(
                        name=_text(info.name).removeprefix("MIG ").strip(),
                        gi_profile_id=int(info.id),
                        compute_slices=int(info.sliceCount),
                        memory_bytes=int(info.memorySizeMB) * 2**20,
                        placements=self._placements(handle, int(info.id), int(info.instanceCount)),
                        max_instances=int(info.instanceCount),
                    )
                )
            return profiles

    def _placements(self, handle: Any, profile_id: int, most: int) -> tuple[tuple[int, int], ...]:
        array = (pynvml.c_nvmlGpuInstancePlacement_t * max(most, 8))()
        count = ctypes.c_uint(len(array))
        self._call(
            "nvmlDeviceGetGpuInstancePossiblePlacements",
            handle,
            profile_id,
            array,
            ctypes.pointer(count),
        )
        return tuple((int(array[i].start), int(array[i].size)) for i in range(count.value))

    def _mig_device(self, gpu_uuid: str, handle: Any, mig: Any) -> devices.MigDevice:
        gi_id = int(self._call("nvmlDeviceGetGpuInstanceId", mig))
        gi_info = self._call(
            "nvmlGpuInstanceGetInfo", self._call("nvmlDeviceGetGpuInstanceById", handle, gi_id)
        )
        return devices.MigDevice(
            uuid=_text(self._call("nvmlDeviceGetUUID", mig)),
            parent_uuid=gpu_uuid,
            gi_id=gi_id,
            ci_id=int(self._call("nvmlDeviceGetComputeInstanceId", mig)),
            gi_profile_id=int(gi_info.profileId),
            start=int(gi_info.placement.start),
            size=int(gi_info.placement.size),
        )

    def gpu_instances(self, gpu_uuid: str) -> list[devices.GpuInstance]:
        """Every GPU instance, found by id (ids are small), also ones without compute instances."""
        with self._locked(gpu_uuid):
            handle = self._handle(gpu_uuid)
            if not self._is_mig(handle):
                return []
            found = []
            for gi_id in range(_MAX_GI_ID):
                gi = self._optional("nvmlDeviceGetGpuInstanceById", handle, gi_id)
                if gi is None:
                    continue
                found.append(_gpu_instance(self._call("nvmlGpuInstanceGetInfo", gi)))
            return found

    def gpu_instance(self, gpu_uuid: str, gi_id: int) -> devices.GpuInstance | None:
        """The GPU instance with this id, or None."""
        with self._locked(gpu_uuid):
            gi = self._optional("nvmlDeviceGetGpuInstanceById", self._handle(gpu_uuid), gi_id)
            return None if gi is None else _gpu_instance(self._call("nvmlGpuInstanceGetInfo", gi))

    def _is_mig(self, handle: Any) -> bool:
        mode = self._optional("nvmlDeviceGetMigMode", handle, default=[0, 0])
        return bool(int(mode[0]) == pynvml.NVML_DEVICE_MIG_ENABLE)

    # -- MIG create / destroy ----------------------------------------------------------------

    def create_mig_device(
        self, gpu_uuid: str, *, gi_profile_id: int, start: int
    ) -> devices.MigDevice:
        with self._locked(gpu_uuid):
            handle = self._handle(gpu_uuid)
            profiles = {p.gi_profile_id: p for p in self.mig_profiles(gpu_uuid)}
            profile = profiles.get(gi_profile_id)
            if profile is None:
                raise DeviceError(
                    f"GPU instance profile id {gi_profile_id}: NVML_ERROR_NOT_SUPPORTED"
                )
            sizes = dict(profile.placements)
            if start not in sizes:
                raise DeviceError(
                    f"{gpu_uuid}: profile id {gi_profile_id} cannot start at memory slice {start} "
                    f"(possible starts {sorted(sizes)}): NVML_ERROR_INVALID_ARGUMENT"
                )
            placement = pynvml.c_nvmlGpuInstancePlacement_t()
            placement.start = start
            placement.size = sizes[start]
            gi = self._call(
                "nvmlDeviceCreateGpuInstanceWithPlacement",
                handle,
                gi_profile_id,
                ctypes.pointer(placement),  # pynvml hands it to the C API as is: a pointer
            )
            try:
                ci_index = _CI_PROFILE_FOR_SLICES[profile.compute_slices]
                ci_profile = self._call(
                    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                    gi,
                    ci_index,
                    pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                )
                ci = self._call("nvmlGpuInstanceCreateComputeInstance", gi, ci_profile.id)
                gi_id = int(self._call("nvmlGpuInstanceGetInfo", gi).id)
                ci_id = int(self._call("nvmlComputeInstanceGetInfo", ci).id)
                return self._find_mig(gpu_uuid, handle, gi_id, ci_id)
            except (DeviceError, KeyError):
                self._destroy_gi_quietly(gi)
                raise

    def _find_mig(self, gpu_uuid: str, handle: Any, gi_id: int, ci_id: int) -> devices.MigDevice:
        for index in range(int(self._call("nvmlDeviceGetMaxMigDeviceCount", handle))):
            mig = self._optional("nvmlDeviceGetMigDeviceHandleByIndex", handle, index)
            if mig is None:
                continue
            ids = (
                int(self._call("nvmlDeviceGetGpuInstanceId", mig)),
                int(self._call("nvmlDeviceGetComputeInstanceId", mig)),
            )
            if ids == (gi_id, ci_id):
                return self._mig_device(gpu_uuid, handle, mig)
        raise DeviceError(f"MIG device gi={gi_id} ci={ci_id} on {gpu_uuid}: NVML_ERROR_NOT_FOUND")

    def _destroy_gi_quietly(self, gi: Any) -> None:
        try:
            self._nvml.nvmlGpuInstanceDestroy(gi)
        except pynvml.NVMLError as error:
            log.error("could not roll back a GPU instance: %s", error_name(error))

    def destroy_mig_device(self, gpu_uuid: str, *, gi_id: int, ci_id: int | None) -> bool:
        with self._locked(gpu_uuid):
            handle = self._handle(gpu_uuid)
            try:
                gi = self._nvml.nvmlDeviceGetGpuInstanceById(handle, gi_id)
            except pynvml.NVMLError as error:
                if is_error(error, pynvml.NVML_ERROR_NOT_FOUND):
                    return False
                raise _device_error("nvmlDeviceGetGpuInstanceById", error) from error
            for candidate in range(_MAX_CI_ID) if ci_id is None else [ci_id]:
                ci = self._optional("nvmlGpuInstanceGetComputeInstanceById", gi, candidate)
                if ci is not None:
                    self._call("nvmlComputeInstanceDestroy", ci)
            self._call("nvmlGpuInstanceDestroy", gi)
            return True

    # -- settings ----------------------------------------------------------------------------

    def settings(self, gpu_uuid: str) -> devices.DeviceSettings:
        with self._locked(gpu_uuid):
            handle = self._handle(gpu_uuid)
            mode = self._optional("nvmlDeviceGetComputeMode", handle)
            by_value = {v: k for k, v in _COMPUTE_MODES.items()}
            limit = self._optional("nvmlDeviceGetPowerManagementLimit", handle)
            default = self._optional("nvmlDeviceGetPowerManagementDefaultLimit", handle)
            persistence = self._optional("nvmlDeviceGetPersistenceMode", handle)
            return devices.DeviceSettings(
                compute_mode=by_value.get(mode) if mode is not None else None,
                time_slice=self._time_slices.get(gpu_uuid, TimeSlice.Default),
                power_limit_watts=int(limit) // 1000 if limit is not None else None,
                default_power_limit_watts=int(default) // 1000 if default is not None else None,
                locked_clocks_mhz=self._locked_clocks.get(gpu_uuid),
                persistence_mode=(
                    int(persistence) == pynvml.NVML_FEATURE_ENABLED
                    if persistence is not None
                    else None
                ),
            )

    def set_compute_mode(self, gpu_uuid: str, mode: ComputeMode) -> None:
        with self._locked(gpu_uuid):
            self._call("nvmlDeviceSetComputeMode", self._handle(gpu_uuid), _COMPUTE_MODES[mode])

    def set_time_slice(self, gpu_uuid: str, time_slice: TimeSlice) -> None:
        level = devices.TIME_SLICE_LEVELS[time_slice]
        self._run(["nvidia-smi", "compute-policy", "-i", gpu_uuid, f"--set-timeslice={level}"])
        self._time_slices[gpu_uuid] = time_slice

    def set_power_limit(self, gpu_uuid: str, watts: int | None) -> None:
        with self._locked(gpu_uuid):
            handle = self._handle(gpu_uuid)
            milliwatts = (
                int(self._call("nvmlDeviceGetPowerManagementDefaultLimit", handle))
                if watts is None
                else watts * 1000
            )
            self._call("nvmlDeviceSetPowerManagementLimit", handle, milliwatts)

    def lock_clocks(self, gpu_uuid: str, mhz: int | None) -> None:
        with self._locked(gpu_uuid):
            handle = self._handle(gpu_uuid)
            if mhz is None:
                self._call("nvmlDeviceResetGpuLockedClocks", handle)
                self._locked_clocks.pop(gpu_uuid, None)
            else:
                self._call("nvmlDeviceSetGpuLockedClocks", handle, mhz, mhz)
                self._locked_clocks[gpu_uuid] = mhz

    def set_persistence_mode(self, gpu_uuid: str, enabled: bool) -> None:
        with self._locked(gpu_uuid):
            value = pynvml.NVML_FEATURE_ENABLED if enabled else pynvml.NVML_FEATURE_DISABLED
            self._call("nvmlDeviceSetPersistenceMode", self._handle(gpu_uuid), value)

    # -- health events -----------------------------------------------------------------------

    def _event_set(self) -> Any:
        if self._events is None:
            events = self._call("nvmlEventSetCreate")
            for index in range(int(self._call("nvmlDeviceGetCount"))):
                try:
                    handle = self._call("nvmlDeviceGetHandleByIndex", index)
                except devices.GpuLostError as error:  # its loss is found by `lost`
                    log.warning("GPU %d: no XID events: %s", index, error)
                    continue
                try:
                    self._nvml.nvmlDeviceRegisterEvents(
                        handle, pynvml.nvmlEventTypeXidCriticalError, events
                    )
                except pynvml.NVMLError as error:  # e.g. not supported on this GPU
                    log.warning("GPU %d: no XID events: %s", index, error_name(error))
            self._events = events
        return self._events

    def wait_events(self, timeout_ms: int) -> list[devices.DeviceEvent]:
        events = self._event_set()  # not under the MIG lock: this call blocks
        try:
            data = self._nvml.nvmlEventSetWait_v2(events, timeout_ms)
        except pynvml.NVMLError as error:
            if is_error(error, pynvml.NVML_ERROR_TIMEOUT):
                return []
            if is_error(error, pynvml.NVML_ERROR_GPU_IS_LOST):
                return []  # which GPU it was is found by `lost`
            raise DeviceError(f"nvmlEventSetWait_v2: {error_name(error)}") from error
        if int(data.eventType) != pynvml.nvmlEventTypeXidCriticalError:
            return []
        uuid = _text(self._call("nvmlDeviceGetUUID", data.device))
        return [devices.DeviceEvent(gpu_uuid=uuid, xid=int(data.eventData))]

    def shutdown(self) -> None:
        if self._events is not None:
            self._optional("nvmlEventSetFree", self._events)
            self._events = None
        self._optional("nvmlShutdown")


def _device_error(name: str, error: Exception) -> DeviceError:
    if is_error(error, pynvml.NVML_ERROR_GPU_IS_LOST):
        return devices.GpuLostError(f"{name}: NVML_ERROR_GPU_IS_LOST")
    return DeviceError(f"{name}: {error_name(error)}")


def _unknown_lost_gpu(index: int, driver: str, cuda: str) -> devices.GpuDevice:
    """A GPU lost before this lib ever read it: its index is all NVML still says."""
    return devices.GpuDevice(
        index=index,
        minor=-1,
        uuid="",
        mig_enabled=False,
        memory_bytes=0,
        product_name="",
        brand="Unknown",
        architecture="Unknown",
        cuda_compute_capability="",
        driver_version=driver,
        cuda_driver_version=cuda,
        lost=True,
    )


def _gpu_instance(info: Any) -> devices.GpuInstance:
    return devices.GpuInstance(
        gi_id=int(info.id),
        profile_id=int(info.profileId),
        start=int(info.placement.start),
        size=int(info.placement.size),
    )


def _pci_bus_id(bus_id: str) -> str:
    """NVML's `00000000:3B:00.0` as Linux writes it: `0000:3b:00.0`."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    return f"{domain[-4:]}:{rest}" if rest else domain
