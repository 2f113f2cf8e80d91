"""The simulated fleet answers like NVML: same functions, shapes and NVMLError codes."""

from __future__ import annotations

import ctypes
import time

import pynvml
import pytest

from drasat.api.inputerrors import InputError
from drasat.testbed import simnvml


@pytest.fixture
def sim() -> simnvml.SimulatedNvml:
    fleet = simnvml.SimulatedNvml("2xA100-40GB,mig=1")
    fleet.nvmlInit()
    return fleet


def code(excinfo: pytest.ExceptionInfo[BaseException]) -> int:
    assert isinstance(excinfo.value, pynvml.NVMLError)
    return int(excinfo.value.value)


def profile_id(sim: simnvml.SimulatedNvml, handle: object, index: int) -> int:
    return int(sim.nvmlDeviceGetGpuInstanceProfileInfo(handle, index).id)


def create(sim: simnvml.SimulatedNvml, handle: object, gi_profile: int, start: int) -> object:
    placement = pynvml.c_nvmlGpuInstancePlacement_t()
    placement.start = start
    return sim.nvmlDeviceCreateGpuInstanceWithPlacement(
        handle, gi_profile, ctypes.pointer(placement)
    )


def test_parse_fleet_forms() -> None:
    spec = simnvml.parse_fleet("2xA100-40GB,T4, mig=1, numa=2, delay=5ms")
    assert [g.product.key for g in spec.gpus] == ["A100-40GB", "A100-40GB", "T4"]
    assert [g.mig_enabled for g in spec.gpus] == [False, True, False]
    assert spec.delay_s == pytest.approx(0.005)
    assert len(simnvml.parse_fleet("T4 x2").gpus) == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3xB999", "unknown GPU product 'B999'"),  # a typo names the product and the catalog
        ("T4,mig=0", "no MIG-capable GPU"),  # T4 has no MIG
        ("T4,colour=red", "unknown option"),
        ("", "no GPUs"),
    ],
)
def test_parse_fleet_errors(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        simnvml.parse_fleet(text)


def test_uninitialized_call_fails() -> None:
    fleet = simnvml.SimulatedNvml("T4")
    with pytest.raises(pynvml.NVMLError) as excinfo:
        fleet.nvmlDeviceGetCount()
    assert code(excinfo) == pynvml.NVML_ERROR_UNINITIALIZED


def test_shapes(sim: simnvml.SimulatedNvml) -> None:
    handle = sim.nvmlDeviceGetHandleByIndex(1)
    memory = sim.nvmlDeviceGetMemoryInfo(handle)
    assert isinstance(memory, pynvml.c_nvmlMemory_t)
    assert memory.total == 40 * 2**30
    info = sim.nvmlDeviceGetGpuInstanceProfileInfo(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    assert (info.id, info.sliceCount, info.name) == (9, 3, "MIG 3g.20gb")
    array = (pynvml.c_nvmlGpuInstancePlacement_t * 8)()
    count = ctypes.c_uint(8)
    sim.nvmlDeviceGetGpuInstancePossiblePlacements(handle, 9, array, ctypes.pointer(count))
    assert [(array[i].start, array[i].size) for i in range(count.value)] == [(0, 4), (4, 4)]


def test_overlapping_placement_is_insufficient_resources(sim: simnvml.SimulatedNvml) -> None:
    handle = sim.nvmlDeviceGetHandleByIndex(1)
    create(sim, handle, 9, 4)  # 3g.20gb on slices 4-7
    with pytest.raises(pynvml.NVMLError) as excinfo:
        create(sim, handle, 15, 6)  # 1g.10gb on 6-7 overlaps
    assert code(excinfo) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    create(sim, handle, 14, 0)  # 0-1 is free


def test_second_media_extension_instance_is_refused(sim: simnvml.SimulatedNvml) -> None:
    handle = sim.nvmlDeviceGetHandleByIndex(1)
    create(sim, handle, 20, 0)
    with pytest.raises(pynvml.NVMLError) as excinfo:
        create(sim, handle, 20, 3)  # no overlap, but only one +me instance per GPU
    assert code(excinfo) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES


def test_bad_start_is_invalid_argument(sim: simnvml.SimulatedNvml) -> None:
    with pytest.raises(pynvml.NVMLError) as excinfo:
        create(sim, sim.nvmlDeviceGetHandleByIndex(1), 9, 2)  # 3g starts at 0 or 4 only
    assert code(excinfo) == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_destroy_with_compute_instance_is_in_use(sim: simnvml.SimulatedNvml) -> None:
    handle = sim.nvmlDeviceGetHandleByIndex(1)
    gi = create(sim, handle, 19, 0)
    ci = sim.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    with pytest.raises(pynvml.NVMLError) as excinfo:
        sim.nvmlGpuInstanceDestroy(gi)
    assert code(excinfo) == pynvml.NVML_ERROR_IN_USE
    sim.set_processes(ci.uuid, 1)
    with pytest.raises(pynvml.NVMLError) as excinfo:
        sim.nvmlComputeInstanceDestroy(ci)
    assert code(excinfo) == pynvml.NVML_ERROR_IN_USE
    sim.set_processes(ci.uuid, 0)
    sim.nvmlComputeInstanceDestroy(ci)
    sim.nvmlGpuInstanceDestroy(gi)


def test_not_found_and_not_supported(sim: simnvml.SimulatedNvml) -> None:
    mig_gpu = sim.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(pynvml.NVMLError) as excinfo:
        sim.nvmlDeviceGetGpuInstanceById(mig_gpu, 5)
    assert code(excinfo) == pynvml.NVML_ERROR_NOT_FOUND
    with pytest.raises(pynvml.NVMLError) as excinfo:
        sim.nvmlDeviceGetMigDeviceHandleByIndex(mig_gpu, 0)  # no MIG device yet
    assert code(excinfo) == pynvml.NVML_ERROR_NOT_FOUND
    with pytest.raises(pynvml.NVMLError) as excinfo:
        create(sim, sim.nvmlDeviceGetHandleByIndex(0), 19, 0)  # GPU 0 is not in MIG mode
    assert code(excinfo) == pynvml.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(pynvml.NVMLError) as excinfo:
        sim.nvmlDeviceGetHandleByIndex(7)
    assert code(excinfo) == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_injected_fault_and_delay() -> None:
    fleet = simnvml.SimulatedNvml("T4,delay=20ms")
    fleet.nvmlInit()
    fleet.inject_fault("nvmlDeviceGetCount", pynvml.NVML_ERROR_GPU_IS_LOST)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fleet.nvmlDeviceGetCount()

    started = time.monotonic()
    assert fleet.nvmlDeviceGetCount() == 1
    assert time.monotonic() - started >= 0.02


def test_placement_by_value_is_refused(sim: simnvml.SimulatedNvml) -> None:
    """pynvml passes the placement to the C API unchanged, which takes a pointer."""
    placement = pynvml.c_nvmlGpuInstancePlacement_t()
    with pytest.raises(pynvml.NVMLError) as excinfo:
        sim.nvmlDeviceCreateGpuInstanceWithPlacement(
            sim.nvmlDeviceGetHandleByIndex(1), 19, placement
        )
    assert code(excinfo) == pynvml.NVML_ERROR_INVALID_ARGUMENT
