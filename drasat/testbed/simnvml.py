"""A simulated GPU fleet at the `pynvml` function level, configured from the hardware catalog.

`SimulatedNvml` has the NVML function names the production code calls (`nvmlDeviceGetCount`,
`nvmlDeviceCreateGpuInstanceWithPlacement`, ...), returns the same shapes (pynvml's own ctypes
structs where they carry only numbers and strings, small objects with the same attribute names
where real NVML returns handles) and raises `pynvml.NVMLError` with NVML's codes:

- `NVML_ERROR_INSUFFICIENT_RESOURCES`: a GPU instance overlaps an existing one (or a second
  `+me` instance);
- `NVML_ERROR_IN_USE`: destroying a GPU instance that still has compute instances, or a compute
  instance that has processes;
- `NVML_ERROR_NOT_FOUND`: no GPU/compute instance with that id, an empty MIG device slot;
- `NVML_ERROR_INVALID_ARGUMENT`: a bad index, profile or placement start;
- `NVML_ERROR_NOT_SUPPORTED`: MIG calls on a GPU without MIG, NVLink on a GPU without it;
- `NVML_ERROR_UNINITIALIZED`: any call before `nvmlInit`;
- `NVML_ERROR_GPU_IS_LOST`: every call about a GPU that fell off the bus (`lose_gpu`: getting its
  handle by index or UUID, and any call on a handle, instance or MIG device of it), while
  `nvmlDeviceGetCount` still counts it, as the driver does after XID 79.

A fleet is written `2xA100-40GB,mig=1` (GPU 1 in MIG mode), `T4x2`, `H100-80GB,A30-24GB,mig=all`,
with options `mig=`, `nvlink=on|off`, `numa=N`, `delay=5ms` (per-call delay for benchmarks),
`driver=`, `cuda=`, and `state=PATH`: the fleet's hardware state (instances, modes) is kept in a
JSON file, so it outlives a killed plugin process like real GPUs do; `xids=PATH`: lines
`<GPU index> <xid>` appended to that file are XID events, for a plugin in another process;
`faults=PATH`: lines `<nvml function> <NVML error code>` written to that file make the next call
of that function fail with that code (the fleet takes the file away at its next call, so each
line fails one call, also across a plugin restart: the chaos soak's NVML and MIG creation
failures). It also answers the `nvidia-smi compute-policy` time-slice command (`run`). It refuses
(`AttributeError`) any `nvml*` function or `NVML_*` constant that the installed pynvml does not
have, so a call that works here cannot be a typo or a call pynvml removed
(tests/nodeplugin/test_np_pynvml_contract.py).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from drasat.api import catalog
from drasat.api.inputerrors import InputError
from drasat.nodeplugin import mps, nvml
from drasat.nodeplugin.devicelib import DeviceError

log = logging.getLogger(__name__)

N: Any = nvml.NVML  # pynvml: constants, NVMLError and ctypes structs

_ARCH = {
    "Volta": N.NVML_DEVICE_ARCH_VOLTA,
    "Turing": N.NVML_DEVICE_ARCH_TURING,
    "Ampere": N.NVML_DEVICE_ARCH_AMPERE,
    "Ada Lovelace": N.NVML_DEVICE_ARCH_ADA,
    "Hopper": N.NVML_DEVICE_ARCH_HOPPER,
}
_DEFAULT_POWER_W = {"T4": 70, "L4": 72, "A30-24GB": 165}
_NVLINK_PRODUCTS = {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "V100-16GB", "V100-32GB"}
_CI_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6}


#: Calls that block (event waits) and so run outside the fleet lock.
_BLOCKING = frozenset({"nvmlEventSetWait_v2"})
#: Calls that change the hardware (persisted with state=PATH).
_MUTATING = (
    "nvmlDeviceCreate",
    "nvmlDeviceSet",
    "nvmlDeviceReset",
    "nvmlGpuInstanceCreate",
    "nvmlGpuInstanceDestroy",
    "nvmlComputeInstanceDestroy",
)


def nvml_profile_index(profile: catalog.MigProfile, product: catalog.Product) -> int:
    """The NVML_GPU_INSTANCE_PROFILE_* index of a catalog profile."""
    if profile.media_extensions:
        return int(
            N.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1
            if profile.compute_slices == 1
            else N.NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1
        )
    if profile.compute_slices == 1 and profile.memory_slices == 2 and product.memory_slices == 8:
        return int(N.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2)
    by_slices = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
    return by_slices[profile.compute_slices]


def _fail(code: int) -> NoReturn:
    raise N.NVMLError(code)


def _gpu_of(handle: Any) -> SimGpu | None:
    """The GPU an NVML handle argument belongs to (None: not a GPU's handle)."""
    if isinstance(handle, SimGpu):
        return handle
    if isinstance(handle, SimMigHandle):
        return handle.compute_instance.gpu_instance.gpu
    if isinstance(handle, SimComputeInstance):
        return handle.gpu_instance.gpu
    if isinstance(handle, SimGpuInstance):
        return handle.gpu
    return None


# -- the fleet description -------------------------------------------------------------------


@dataclass(frozen=True)
class SimGpuSpec:
    product: catalog.Product
    mig_enabled: bool = False


@dataclass(frozen=True)
class FleetSpec:
    gpus: tuple[SimGpuSpec, ...]
    driver_version: str = "550.54.15"
    cuda_version: str = "12.4"
    nvlink: bool | None = None  # None: the products that have NVLink
    numa_nodes: int = 1
    delay_s: float = 0.0
    seed: str = "drasat-sim"
    state_file: str = ""  # "": the fleet lives in memory only
    #: XIDs for a plugin in another process (the real kubelet's tests): lines "<GPU index> <xid>"
    #: appended to this file are delivered as XID events while the plugin waits for events.
    xid_file: str = ""
    #: Injected NVML failures for a plugin in another process: lines "<function> <NVML code>".
    fault_file: str = ""


_ITEM = re.compile(r"^(?:(\d+)\s*[x×*]\s*)?(.+?)(?:\s*[x×*]\s*(\d+))?$")


def _duration(text: str) -> float:
    for suffix, scale in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
        if text.endswith(suffix):
            return float(text.removesuffix(suffix)) * scale
    return float(text)


def parse_fleet(text: str) -> FleetSpec:
    """`2xA100-40GB,mig=1` -> FleetSpec; InputError naming the bad part."""
    products: list[catalog.Product] = []
    options: dict[str, str] = {}
    for raw in (part.strip() for part in text.split(",")):
        if not raw:
            continue
        if "=" in raw:
            key, value = (s.strip() for s in raw.split("=", 1))
            options[key.lower()] = value
            continue
        match = _ITEM.match(raw)
        assert match is not None  # the pattern matches any non-empty text
        product = catalog.find_product(match.group(2))
        if product is None:
            known = ", ".join(p.key for p in catalog.PRODUCTS)
            raise InputError(f"unknown GPU product {match.group(2)!r} (known: {known})")
        products.extend([product] * int(match.group(1) or match.group(3) or 1))
    if not products:
        raise InputError(f"no GPUs in simulated fleet {text!r} (e.g. 2xA100-40GB,mig=1)")
    try:
        return _fleet(products, options)
    except ValueError as error:
        raise InputError(f"simulated fleet {text!r}: {error}") from None


def _fleet(products: list[catalog.Product], options: dict[str, str]) -> FleetSpec:
    known = {"mig", "nvlink", "numa", "delay", "driver", "cuda", "seed", "state", "xids", "faults"}
    unknown = set(options) - known
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)}")
    mig = options.get("mig", "none").lower()
    if mig == "all":
        on = {i for i, p in enumerate(products) if p.mig_capable}
    elif mig in ("none", ""):
        on = set()
    else:
        on = {int(i) for i in re.split(r"[+;: ]", mig) if i}
    for index in on:
        if index >= len(products) or not products[index].mig_capable:
            raise ValueError(f"mig={index}: no MIG-capable GPU with that index")
    nvlink = options.get("nvlink")
    return FleetSpec(
        gpus=tuple(SimGpuSpec(p, i in on) for i, p in enumerate(products)),
        driver_version=options.get("driver", "550.54.15"),
        cuda_version=options.get("cuda", "12.4"),
        nvlink=None if nvlink is None else nvlink.lower() in ("on", "yes", "true", "1"),
        numa_nodes=max(1, int(options.get("numa", "1"))),
        delay_s=_duration(options.get("delay", "0")),
        seed=options.get("seed", "drasat-sim"),
        state_file=options.get("state", ""),
        xid_file=options.get("xids", ""),
        fault_file=options.get("faults", ""),
    )


# -- simulated objects -----------------------------------------------------------------------


@dataclass(eq=False)
class SimComputeInstance:
    gpu_instance: SimGpuInstance
    id: int
    profile_id: int
    slices: int
    uuid: str
    processes: int = 0


@dataclass(eq=False)
class SimGpuInstance:
    gpu: SimGpu
    id: int
    profile: catalog.MigProfile
    profile_index: int
    start: int
    compute_instances: dict[int, SimComputeInstance] = field(default_factory=dict)

    @property
    def end(self) -> int:
        return self.start + self.profile.memory_slices


@dataclass(eq=False)
class SimMigHandle:
    compute_instance: SimComputeInstance


@dataclass(eq=False)
class SimGpu:
    index: int
    spec: SimGpuSpec
    uuid: str
    bus_id: str
    numa_node: int
    mig_mode: int
    default_power_mw: int
    compute_mode: int = N.NVML_COMPUTEMODE_DEFAULT
    power_mw: int = 0
    persistence: int = N.NVML_FEATURE_ENABLED
    locked_clocks: tuple[int, int] | None = None
    time_slice: int = 0
    gpu_instances: dict[int, SimGpuInstance] = field(default_factory=dict)
    nvlink_peers: list[SimGpu] = field(default_factory=list)
    lost: bool = False  # fell off the bus: NVML_ERROR_GPU_IS_LOST

    @property
    def product(self) -> catalog.Product:
        return self.spec.product


@dataclass(eq=False)
class SimEventSet:
    registered: dict[int, int] = field(default_factory=dict)  # GPU index -> event type mask
    pending: list[EventData] = field(default_factory=list)
    freed: bool = False


@dataclass
class EventData:
    """nvmlEventSetWait_v2's shape."""

    device: SimGpu
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class GiInfo:
    """nvmlGpuInstanceGetInfo's shape: id, profileId, placement{start,size}."""

    id: int
    profileId: int
    placement: Any


@dataclass
class CiInfo:
    """nvmlComputeInstanceGetInfo's shape: id, profileId, gpuInstance."""

    id: int
    profileId: int
    gpuInstance: SimGpuInstance


class SimulatedNvml:
    """The pynvml functions the node plugin uses, over an in-memory fleet. Thread-safe."""

    def __init__(self, spec: FleetSpec | str) -> None:
        self.spec = parse_fleet(spec) if isinstance(spec, str) else spec
        self._lock = threading.RLock()
        self._initialized = 0
        self._faults: dict[str, list[BaseException]] = {}
        self.calls: list[str] = []
        self._event_sets: list[SimEventSet] = []
        self._event = threading.Condition(self._lock)
        self._xids_read = 0  # bytes of spec.xid_file already delivered
        self.gpus = [self._make_gpu(i, g) for i, g in enumerate(self.spec.gpus)]
        linked = [g for g in self.gpus if self._has_nvlink(g)]
        for gpu in linked:
            gpu.nvlink_peers = [peer for peer in linked if peer is not gpu]
        if self.spec.state_file:
            self._load(Path(self.spec.state_file))

    # -- persistence (state=PATH) ------------------------------------------------------------

    def _dump(self) -> list[dict[str, Any]]:
        return [
            {
                "uuid": g.uuid,
                "compute_mode": g.compute_mode,
                "power_mw": g.power_mw,
                "persistence": g.persistence,
                "locked_clocks": list(g.locked_clocks) if g.locked_clocks else None,
                "time_slice": g.time_slice,
                "lost": g.lost,
                "gpu_instances": [
                    {
                        "id": gi.id,
                        "profile_id": gi.profile.gi_profile_id,
                        "start": gi.start,
                        "compute_instances": [
                            {
                                "id": ci.id,
                                "profile_id": ci.profile_id,
                                "slices": ci.slices,
                                "uuid": ci.uuid,
                                "processes": ci.processes,
                            }
                            for ci in gi.compute_instances.values()
                        ],
                    }
                    for gi in g.gpu_instances.values()
                ],
            }
            for g in self.gpus
        ]

    def _persist(self) -> None:
        if self.spec.state_file:
            path = Path(self.spec.state_file)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(json.dumps(self._dump(), indent=1))
            os.replace(tmp, path)

    def _load(self, path: Path) -> None:
        try:
            saved = json.loads(path.read_text())
        except FileNotFoundError:
            return
        for gpu, data in zip(self.gpus, saved, strict=False):
            if data["uuid"] != gpu.uuid:
                raise InputError(f"simulated fleet state {path} is of another fleet")
            gpu.compute_mode = data["compute_mode"]
            gpu.power_mw = data["power_mw"]
            gpu.persistence = data["persistence"]
            clocks = data["locked_clocks"]
            gpu.locked_clocks = (clocks[0], clocks[1]) if clocks else None
            gpu.time_slice = data["time_slice"]
            gpu.lost = bool(data.get("lost", False))
            for gi_data in data["gpu_instances"]:
                index, profile = self._profile_by_id(gpu, gi_data["profile_id"])
                gi = SimGpuInstance(gpu, gi_data["id"], profile, index, gi_data["start"])
                for ci in gi_data["compute_instances"]:
                    gi.compute_instances[ci["id"]] = SimComputeInstance(
                        gi, ci["id"], ci["profile_id"], ci["slices"], ci["uuid"], ci["processes"]
                    )
                gpu.gpu_instances[gi.id] = gi

    def _has_nvlink(self, gpu: SimGpu) -> bool:
        if self.spec.nvlink is not None:
            return self.spec.nvlink
        return gpu.product.key in _NVLINK_PRODUCTS

    def _make_gpu(self, index: int, spec: SimGpuSpec) -> SimGpu:
        uid = uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"{self.spec.seed}/gpu/{index}")
        power = _DEFAULT_POWER_W.get(spec.product.key, 300) * 1000
        return SimGpu(
            index=index,
            spec=spec,
            uuid=f"GPU-{uid}",
            bus_id=f"00000000:{(0x17 + 0x20 * index) % 256:02X}:00.0",
            numa_node=index * self.spec.numa_nodes // len(self.spec.gpus),
            mig_mode=N.NVML_DEVICE_MIG_ENABLE if spec.mig_enabled else N.NVML_DEVICE_MIG_DISABLE,
            default_power_mw=power,
            power_mw=power,
        )

    # -- test hooks --------------------------------------------------------------------------

    def inject_fault(self, function: str, error: BaseException | int) -> None:
        """Make the next call of `function` raise (an NVML code becomes an NVMLError)."""
        exc = N.NVMLError(error) if isinstance(error, int) else error
        with self._lock:
            self._faults.setdefault(function, []).append(exc)

    def _take_fault_file(self) -> None:
        """Queue the failures written to `faults=PATH` (lines "<nvml function> <NVML code>"),
        then remove the file: renamed first, so a line is taken once even by two readers; taken
        lines wait in memory for their function's next call. A line that does not parse is
        skipped with a warning, as a test bed's typo."""
        path = self.spec.fault_file
        if not path or not os.path.exists(path):
            return
        taken = f"{path}.taken-{os.getpid()}"
        try:
            os.replace(path, taken)
        except FileNotFoundError:
            return
        try:
            text = Path(taken).read_text(errors="replace")
        finally:
            os.unlink(taken)
        for line in text.splitlines():
            parts = line.split()
            known = len(parts) == 2 and parts[0].startswith("nvml") and hasattr(N, parts[0])
            if not known or not parts[1].isdigit():
                log.warning("simulated NVML: %s: skipped line %r (want '<nvml function> <code>')",
                            path, line)  # fmt: skip
                continue
            self.inject_fault(parts[0], int(parts[1]))

    def inject_xid(self, uuid: str, xid: int) -> None:
        """An XID error on a GPU, delivered to every event set that registered for it."""
        gpu = self.gpu(uuid)
        with self._event:
            for events in self._event_sets:
                mask = events.registered.get(gpu.index, 0)
                if mask & N.nvmlEventTypeXidCriticalError:
                    events.pending.append(EventData(gpu, N.nvmlEventTypeXidCriticalError, xid))
            self._event.notify_all()

    def _deliver_xid_file(self) -> None:
        """Deliver the XIDs appended to `xids=PATH` since the last read (lines "<index> <xid>";
        a line that does not parse is skipped with a warning, as a test bed's typo)."""
        if not self.spec.xid_file:
            return
        try:
            with open(self.spec.xid_file, "rb") as f:
                f.seek(self._xids_read)
                data = f.read()
        except FileNotFoundError:
            return
        complete = data[: data.rfind(b"\n") + 1]
        self._xids_read += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            parts = line.split()
            try:
                index, xid = int(parts[0]), int(parts[1])
                uuid = self.gpus[index].uuid
            except (IndexError, ValueError):
                log.warning("simulated NVML: %s: skipped line %r (want '<GPU index> <xid>')",
                            self.spec.xid_file, line)  # fmt: skip
                continue
            self.inject_xid(uuid, xid)

    def lose_gpu(self, uuid: str, *, xid_event: bool = False) -> None:
        """The GPU falls off the bus: from now on NVML answers NVML_ERROR_GPU_IS_LOST about it
        (and, with `xid_event`, an XID 79 event is delivered first, as the driver may)."""
        gpu = self.gpu(uuid)
        if xid_event:
            self.inject_xid(uuid, 79)
        with self._lock:
            gpu.lost = True
            self._persist()

    def gpu(self, uuid: str) -> SimGpu:
        return next(g for g in self.gpus if g.uuid == uuid)

    def set_processes(self, mig_uuid: str, count: int) -> None:
        """Pretend `count` processes run on a MIG device (its destroy then fails IN_USE)."""
        self._mig_by_uuid(mig_uuid).compute_instance.processes = count

    def run(self, argv: Sequence[str]) -> str:
        """The `nvidia-smi compute-policy -i UUID --set-timeslice=N` command, simulated."""
        args = list(argv)
        if args[:2] != ["nvidia-smi", "compute-policy"] or "-i" not in args:
            raise DeviceError(f"simulated fleet cannot run {' '.join(args)}")
        target = args[args.index("-i") + 1]
        level = next((a.split("=", 1)[1] for a in args if a.startswith("--set-timeslice=")), None)
        with self._lock:
            gpu = next((g for g in self.gpus if target in (g.uuid, str(g.index))), None)
            if gpu is None or level is None or int(level) not in range(4):
                raise DeviceError(f"nvidia-smi: invalid arguments {' '.join(args)}")
            gpu.time_slice = int(level)
            self._persist()
        return ""

    # -- plumbing ----------------------------------------------------------------------------

    def __getattribute__(self, name: str) -> Any:
        if name.startswith(("nvml", "NVML_")) and not hasattr(N, name):
            raise AttributeError(f"{name}: pynvml has no such function or constant")
        attr = object.__getattribute__(self, name)
        if not name.startswith("nvml"):
            return attr

        def call(*args: Any) -> Any:
            spec: FleetSpec = object.__getattribute__(self, "spec")
            if spec.delay_s:
                time.sleep(spec.delay_s)
            if name in _BLOCKING:
                return attr(*args)  # waits on its own; must not hold the fleet lock
            with object.__getattribute__(self, "_lock"):
                object.__getattribute__(self, "calls").append(name)
                if spec.fault_file:
                    object.__getattribute__(self, "_take_fault_file")()
                faults = object.__getattribute__(self, "_faults").get(name)
                if faults:
                    raise faults.pop(0)
                if name != "nvmlInit" and not object.__getattribute__(self, "_initialized"):
                    _fail(N.NVML_ERROR_UNINITIALIZED)
                if any(getattr(_gpu_of(a), "lost", False) for a in args):
                    _fail(N.NVML_ERROR_GPU_IS_LOST)
                result = attr(*args)
                if name.startswith(_MUTATING):
                    object.__getattribute__(self, "_persist")()
                return result

        return call

    def _mig_gpu(self, device: Any) -> SimGpu:
        if not isinstance(device, SimGpu):
            _fail(N.NVML_ERROR_INVALID_ARGUMENT)
        if device.mig_mode != N.NVML_DEVICE_MIG_ENABLE:
            _fail(N.NVML_ERROR_NOT_SUPPORTED)
        return device

    def _mig_by_uuid(self, uuid: str) -> SimMigHandle:
        for gpu in self.gpus:
            for gi in gpu.gpu_instances.values():
                for ci in gi.compute_instances.values():
                    if ci.uuid == uuid:
                        return SimMigHandle(ci)
        _fail(N.NVML_ERROR_NOT_FOUND)

    # -- system ------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._initialized += 1

    def nvmlShutdown(self) -> None:
        if not self._initialized:
            _fail(N.NVML_ERROR_UNINITIALIZED)
        self._initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.spec.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        major, minor = (int(x) for x in self.spec.cuda_version.split("."))
        return major * 1000 + minor * 10

    # -- devices -----------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimGpu:
        if not 0 <= index < len(self.gpus):
            _fail(N.NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index].lost:
            _fail(N.NVML_ERROR_GPU_IS_LOST)
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> SimGpu | SimMigHandle:
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for gpu in self.gpus:
            if gpu.uuid == text:
                if gpu.lost:
                    _fail(N.NVML_ERROR_GPU_IS_LOST)
                return gpu
        handle = self._mig_by_uuid(text)
        if handle.compute_instance.gpu_instance.gpu.lost:
            _fail(N.NVML_ERROR_GPU_IS_LOST)
        return handle

    def nvmlDeviceGetUUID(self, device: SimGpu | SimMigHandle) -> str:
        return device.compute_instance.uuid if isinstance(device, SimMigHandle) else device.uuid

    def nvmlDeviceGetName(self, device: SimGpu) -> str:
        return device.product.product_name

    def nvmlDeviceGetMinorNumber(self, device: SimGpu) -> int:
        return device.index

    def nvmlDeviceGetBrand(self, device: SimGpu) -> int:
        return int(N.NVML_BRAND_NVIDIA)

    def nvmlDeviceGetArchitecture(self, device: SimGpu) -> int:
        return int(_ARCH.get(device.product.architecture, N.NVML_DEVICE_ARCH_UNKNOWN))

    def nvmlDeviceGetCudaComputeCapability(self, device: SimGpu) -> tuple[int, int]:
        major, minor = device.product.compute_capability.split(".")
        return int(major), int(minor)

    def nvmlDeviceGetMemoryInfo(self, device: SimGpu) -> Any:
        memory = N.c_nvmlMemory_t()
        memory.total = device.product.memory_bytes
        used = sum(gi.profile.memory_bytes for gi in device.gpu_instances.values())
        memory.used = used
        memory.free = device.product.memory_bytes - used
        return memory

    def nvmlDeviceGetPciInfo(self, device: SimGpu) -> Any:
        return self._pci(device)

    @staticmethod
    def _pci(device: SimGpu) -> Any:
        info = N.nvmlPciInfo_t()
        info.busId = device.bus_id.encode()
        info.bus = int(device.bus_id.split(":")[1], 16)
        return info

    def nvmlDeviceGetNumaNodeId(self, device: SimGpu) -> int:
        return device.numa_node

    def nvmlDeviceGetMigMode(self, device: SimGpu) -> list[int]:
        if not device.product.mig_capable:
            _fail(N.NVML_ERROR_NOT_SUPPORTED)
        return [device.mig_mode, device.mig_mode]

    def nvmlDeviceGetNvLinkState(self, device: SimGpu, link: int) -> int:
        if not device.nvlink_peers:
            _fail(N.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(device.nvlink_peers):
            _fail(N.NVML_ERROR_INVALID_ARGUMENT)
        return int(N.NVML_FEATURE_ENABLED)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: SimGpu, link: int) -> Any:
        self.nvmlDeviceGetNvLinkState(device, link)
        return self._pci(device.nvlink_peers[link])

    # -- events ------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> SimEventSet:
        events = SimEventSet()
        self._event_sets.append(events)
        return events

    def nvmlDeviceRegisterEvents(self, device: SimGpu, types: int, events: SimEventSet) -> None:
        if not isinstance(device, SimGpu) or not isinstance(events, SimEventSet):
            _fail(N.NVML_ERROR_INVALID_ARGUMENT)
        events.registered[device.index] = events.registered.get(device.index, 0) | int(types)

    def nvmlEventSetWait_v2(self, events: SimEventSet, timeout_ms: int) -> EventData:
        with self._event:
            if not self._initialized or events.freed:
                _fail(N.NVML_ERROR_UNINITIALIZED)
            deadline = time.monotonic() + timeout_ms / 1000
            while not events.pending and (left := deadline - time.monotonic()) > 0:
                self._deliver_xid_file()
                # The file is polled: another process appends to it without notifying us.
                wait = min(left, 0.2) if self.spec.xid_file else left
                self._event.wait_for(lambda: bool(events.pending), wait)
            if not events.pending:
                _fail(N.NVML_ERROR_TIMEOUT)
            return events.pending.pop(0)

    def nvmlEventSetFree(self, events: SimEventSet) -> None:
        events.freed = True
        if events in self._event_sets:
            self._event_sets.remove(events)

    # -- settings ----------------------------------------------------------------------------

    def nvmlDeviceGetComputeMode(self, device: SimGpu) -> int:
        return device.compute_mode

    def nvmlDeviceSetComputeMode(self, device: SimGpu, mode: int) -> None:
        if mode not in range(int(N.NVML_COMPUTEMODE_COUNT)):
            _fail(N.NVML_ERROR_INVALID_ARGUMENT)
        device.compute_mode = mode

    def nvmlDeviceGetPowerManagementLimit(self, device: SimGpu) -> int:
        return device.power_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, device: SimGpu) -> int:
        return device.default_power_mw

    def nvmlDeviceSetPowerManagementLimit(self, device: SimGpu, milliwatts: int) -> None:
        if not device.default_power_mw // 2 <= milliwatts <= device.default_power_mw:
            _fail(N.NVML_ERROR_INVALID_ARGUMENT)
        device.power_mw = milliwatts

    def nvmlDeviceSetGpuLockedClocks(self, device: SimGpu, low: int, high: int) -> None:
        if not 0 < low <= high:
            _fail(N.NVML_ERROR_INVALID_ARGUMENT)
        device.locked_clocks = (low, high)

    def nvmlDeviceResetGpuLockedClocks(self, device: SimGpu) -> None:
        device.locked_clocks = None

    def nvmlDeviceGetPersistenceMode(self, device: SimGpu) -> int:
        return device.persistence

    def nvmlDeviceSetPersistenceMode(self, device: SimGpu, mode: int) -> None:
        device.persistence = mode

    # -- MIG ---------------------------------------------------------------------------------

    def _profile_at(self, gpu: SimGpu, index: int) -> catalog.MigProfile | None:
        for profile in gpu.product.mig_profiles:
            if nvml_profile_index(profile, gpu.product) == index:
                return profile
        return None

    def _profile_by_id(self, gpu: SimGpu, profile_id: int) -> tuple[int, catalog.MigProfile]:
        for profile in gpu.product.mig_profiles:
            if profile.gi_profile_id == profile_id:
                return nvml_profile_index(profile, gpu.product), profile
        _fail(N.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: SimGpu, index: int, version: int = 2
    ) -> Any:
        gpu = self._mig_gpu(device)
        profile = self._profile_at(gpu, index)
        if profile is None:
            _fail(N.NVML_ERROR_NOT_SUPPORTED)
        assert profile is not None
        info = N.c_nvmlGpuInstanceProfileInfo_v2_t()
        info.id = profile.gi_profile_id
        info.sliceCount = profile.compute_slices
        info.instanceCount = 1 if profile.media_extensions else len(profile.starts)
        info.memorySizeMB = profile.memory_bytes // 2**20
        info.name = f"MIG {profile.name}".encode()
        return info

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, device: SimGpu, profile_id: int, placements: Any, count: Any
    ) -> int:
        gpu = self._mig_gpu(device)
        _, profile = self._profile_by_id(gpu, profile_id)
        if placements is None:
            count.contents.value = len(profile.starts)
            return int(N.NVML_SUCCESS)
        if count.contents.value < len(profile.starts):
            count.contents.value = len(profile.starts)
            _fail(N.NVML_ERROR_INSUFFICIENT_SIZE)
        for i, start in enumerate(profile.starts):
            placements[i].start = start
            placements[i].size = profile.memory_slices
        count.contents.value = len(profile.starts)
        return int(N.NVML_SUCCESS)

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, device: SimGpu, profile_id: int, placement: Any
    ) -> SimGpuInstance:
        gpu = self._mig_gpu(device)
        index, profile = self._profile_by_id(gpu, profile_id)
        if not hasattr(placement, "contents"):  # the C API takes a pointer; pynvml passes it on
            _fail(N.NVML_ERROR_INVALID_ARGUMENT)
        start = int(placement.contents.start)
        if start not in profile.starts:
            _fail(N.NVML_ERROR_INVALID_ARGUMENT)
        end = start + profile.memory_slices
        for other in gpu.gpu_instances.values():
            overlap = start < other.end and other.start < end
            both_me = profile.media_extensions and other.profile.media_extensions
            if overlap or both_me:
                _fail(N.NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi_id = next(i for i in range(1, 64) if i not in gpu.gpu_instances)
        gi = SimGpuInstance(gpu, gi_id, profile, index, start)
        gpu.gpu_instances[gi_id] = gi
        return gi

    def nvmlDeviceGetGpuInstanceById(self, device: SimGpu, gi_id: int) -> SimGpuInstance:
        gpu = self._mig_gpu(device)
        if gi_id not in gpu.gpu_instances:
            _fail(N.NVML_ERROR_NOT_FOUND)
        return gpu.gpu_instances[gi_id]

    def nvmlGpuInstanceGetInfo(self, gi: SimGpuInstance) -> GiInfo:
        self._alive(gi)
        placement = N.c_nvmlGpuInstancePlacement_t()
        placement.start = gi.start
        placement.size = gi.profile.memory_slices
        return GiInfo(id=gi.id, profileId=gi.profile.gi_profile_id, placement=placement)

    def _alive(self, gi: SimGpuInstance) -> None:
        if not isinstance(gi, SimGpuInstance) or gi.gpu.gpu_instances.get(gi.id) is not gi:
            _fail(N.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlGpuInstanceDestroy(self, gi: SimGpuInstance) -> None:
        self._alive(gi)
        if gi.compute_instances:
            _fail(N.NVML_ERROR_IN_USE)
        del gi.gpu.gpu_instances[gi.id]

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gi: SimGpuInstance, index: int, engine: int, version: int = 2
    ) -> Any:
        self._alive(gi)
        slices = _CI_SLICES.get(index)
        if slices is None or slices > gi.profile.compute_slices:
            _fail(N.NVML_ERROR_NOT_SUPPORTED)
        info = N.c_nvmlComputeInstanceProfileInfo_v2_t()
        info.id = index
        info.sliceCount = slices
        info.instanceCount = gi.profile.compute_slices // slices
        return info

    def nvmlGpuInstanceCreateComputeInstance(
        self, gi: SimGpuInstance, profile_id: int
    ) -> SimComputeInstance:
        self._alive(gi)
        slices = _CI_SLICES.get(profile_id)
        used = sum(ci.slices for ci in gi.compute_instances.values())
        if slices is None:
            _fail(N.NVML_ERROR_INVALID_ARGUMENT)
        assert slices is not None
        if used + slices > gi.profile.compute_slices:
            _fail(N.NVML_ERROR_INSUFFICIENT_RESOURCES)
        ci_id = next(i for i in range(64) if i not in gi.compute_instances)
        name = (
            f"{self.spec.seed}/mig/{gi.gpu.uuid}/{gi.id}/{ci_id}/{gi.start}/{time.monotonic_ns()}"
        )
        ci = SimComputeInstance(
            gi, ci_id, profile_id, slices, f"MIG-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, name)}"
        )
        gi.compute_instances[ci_id] = ci
        return ci

    def nvmlGpuInstanceGetComputeInstanceById(
        self, gi: SimGpuInstance, ci_id: int
    ) -> SimComputeInstance:
        self._alive(gi)
        if ci_id not in gi.compute_instances:
            _fail(N.NVML_ERROR_NOT_FOUND)
        return gi.compute_instances[ci_id]

    def nvmlComputeInstanceGetInfo(self, ci: SimComputeInstance) -> CiInfo:
        return CiInfo(id=ci.id, profileId=ci.profile_id, gpuInstance=ci.gpu_instance)

    def nvmlComputeInstanceDestroy(self, ci: SimComputeInstance) -> None:
        gi = ci.gpu_instance
        if gi.compute_instances.get(ci.id) is not ci:
            _fail(N.NVML_ERROR_INVALID_ARGUMENT)
        if ci.processes:
            _fail(N.NVML_ERROR_IN_USE)
        del gi.compute_instances[ci.id]

    def _mig_slots(self, gpu: SimGpu) -> list[SimComputeInstance]:
        return [
            ci
            for _, gi in sorted(gpu.gpu_instances.items())
            for _, ci in sorted(gi.compute_instances.items())
        ]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: SimGpu) -> int:
        if device.mig_mode != N.NVML_DEVICE_MIG_ENABLE:
            return 0
        return device.product.compute_slices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: SimGpu, index: int) -> SimMigHandle:
        gpu = self._mig_gpu(device)
        if not 0 <= index < gpu.product.compute_slices:
            _fail(N.NVML_ERROR_INVALID_ARGUMENT)
        slots = self._mig_slots(gpu)
        if index >= len(slots):
            _fail(N.NVML_ERROR_NOT_FOUND)
        return SimMigHandle(slots[index])

    def nvmlDeviceGetGpuInstanceId(self, mig: SimMigHandle) -> int:
        if not isinstance(mig, SimMigHandle):
            _fail(N.NVML_ERROR_INVALID_ARGUMENT)
        return mig.compute_instance.gpu_instance.id

    def nvmlDeviceGetComputeInstanceId(self, mig: SimMigHandle) -> int:
        if not isinstance(mig, SimMigHandle):
            _fail(N.NVML_ERROR_INVALID_ARGUMENT)
        return mig.compute_instance.id


def node_plugin_parts(spec: str) -> tuple[nvml.NvmlDeviceLib, mps.SimulatedRunner, int]:
    """The node plugin's parts for `--simulate-gpus SPEC` (`drasat.nodeplugin.app.Simulator`):
    NVML calls answered by this fleet, MPS daemons played by simmps.py, and the GPU count."""
    fleet = SimulatedNvml(spec)
    return nvml.NvmlDeviceLib(fleet, run=fleet.run), mps.SimulatedRunner(), len(fleet.gpus)
