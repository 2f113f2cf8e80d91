"""scripts/gpu_check.py (`make gpu-check`): on a machine without a GPU it says so and exits 77, not
1; on the simulated fleet with a fake driver root every step runs and the table says what passed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from drasat.testbed import fakedriver

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=120
    )


def _rows(out: str) -> dict[str, tuple[str, str]]:
    """check -> (result, detail) from the verdict table."""
    rows = {}
    for line in out.splitlines()[1:]:
        for result in ("PASS", "FAIL", "SKIP"):
            check, sep, detail = line.partition(f"  {result}  ")
            if sep:
                rows[check.strip()] = (result, detail.strip())
    return rows


def _has_nvml() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_has_nvml(), reason="this machine has an NVIDIA driver: the real check runs")
def test_without_a_gpu_it_says_so_and_exits_77() -> None:
    done = _run()
    assert done.returncode == 77, done.stdout + done.stderr
    rows = _rows(done.stdout)
    result, detail = rows["discovery (pynvml)"]
    assert result == "SKIP"
    assert detail.startswith("NO GPU: no NVIDIA GPU or driver on this machine")


@pytest.fixture
def driver(tmp_path: Path) -> Path:
    # The fake nvidia-smi prints what a container would see: the claim's GPU and the libraries.
    script = 'echo "GPU 0: Tesla T4 (UUID: $DRASAT_GPU_UUIDS) libs=$LD_LIBRARY_PATH"'
    root = fakedriver.make(tmp_path / "root", smi_script=script)
    hook = root / "usr/bin/nvidia-cdi-hook"
    hook.write_text("")
    hook.chmod(0o755)
    return root


def _simulated(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return _run(
        "--simulate-gpus",
        "T4,A100-40GB,mig=1",
        "--driver-root",
        str(root),
        "--proc-root",
        str(root / "proc"),
        *extra,
    )


def test_every_step_on_the_simulated_fleet(driver: Path) -> None:
    done = _simulated(driver, "--cdi-hook-path", str(driver / "usr/bin/nvidia-cdi-hook"))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _rows(done.stdout)
    assert rows["discovery (pynvml)"][0] == "PASS"
    assert rows["MIG profiles of GPU 1"][0] == "PASS"
    assert rows["ResourceSlices"][0] == "PASS" and "gpu-0, gpu-1" in rows["ResourceSlices"][1]
    assert rows["CDI spec (gpu-0)"][0] == "PASS"
    assert rows["spec paths on the host"] == (
        "PASS",
        "all 18 present",
    )  # the MPS programs are not mounted
    result, detail = rows["nvidia-smi with the spec's env"]
    assert result == "PASS"
    lib = f"{driver}{fakedriver.LIBDIR}"
    assert f"libs={lib}:{lib}/vdpau" in detail  # only the spec's library folders
    assert rows["GPUs unchanged (read-only)"][0] == "PASS"
    if not any(os.access(Path(d) / "nvcc", os.X_OK) for d in os.environ["PATH"].split(":")):
        assert rows["CUDA program with the spec's env"][0] == "SKIP"


def test_a_missing_hook_fails_naming_it(driver: Path) -> None:
    done = _simulated(driver, "--cdi-hook-path", "/no/such/nvidia-cdi-hook")
    assert done.returncode == 1
    result, detail = _rows(done.stdout)["spec paths on the host"]
    assert (result, detail) == ("FAIL", "missing: hook /no/such/nvidia-cdi-hook")


def test_a_wrong_driver_root_fails_the_spec(tmp_path: Path, driver: Path) -> None:
    (driver / "usr/lib/x86_64-linux-gnu" / f"libcuda.so.{fakedriver.VERSION}").unlink()
    done = _simulated(driver)
    assert done.returncode == 1
    result, detail = _rows(done.stdout)["CDI spec (gpu-0)"]
    assert result == "FAIL" and f"no libcuda.so.{fakedriver.VERSION}" in detail
