"""`faults=PATH`: NVML failures written to a file by another process make the simulated NVML's
next calls of those functions fail (how the chaos soak, bench/soak.py, fails NVML calls and MIG
creation in a node plugin process)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from drasat.nodeplugin import nvml
from drasat.testbed.simnvml import SimulatedNvml

N = nvml.NVML


def test_each_line_fails_one_call_of_its_function(tmp_path: Path) -> None:
    faults = tmp_path / "faults"
    sim = SimulatedNvml(f"A100-40GB,mig=all,faults={faults}")
    sim.nvmlInit()
    gpu = sim.nvmlDeviceGetHandleByIndex(0)
    faults.write_text(
        f"nvmlDeviceGetComputeMode {N.NVML_ERROR_UNKNOWN}\n"
        "not a line\n"
        f"nvmlDeviceCreateGpuInstanceWithPlacement {N.NVML_ERROR_INSUFFICIENT_RESOURCES}\n"
    )
    with pytest.raises(N.NVMLError) as failed:
        sim.nvmlDeviceGetComputeMode(gpu)
    assert failed.value.value == N.NVML_ERROR_UNKNOWN
    assert not faults.exists()  # taken: a restarted plugin does not fail again
    assert sim.nvmlDeviceGetComputeMode(gpu) == N.NVML_COMPUTEMODE_DEFAULT  # once only
    profile = sim.nvmlDeviceGetGpuInstanceProfileInfo(gpu, N.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    placement = N.c_nvmlGpuInstancePlacement_t()
    placement.start, placement.size = 0, 1
    pointer = ctypes.pointer(placement)
    with pytest.raises(N.NVMLError) as failed:
        sim.nvmlDeviceCreateGpuInstanceWithPlacement(gpu, profile.id, pointer)
    assert failed.value.value == N.NVML_ERROR_INSUFFICIENT_RESOURCES
    created = sim.nvmlDeviceCreateGpuInstanceWithPlacement(gpu, profile.id, pointer)
    assert created.start == 0
