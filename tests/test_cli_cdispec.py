"""`drasat cdi-spec`: the node plugin's spec for one device, printed without a kubelet; bad input is
one line and exit 2; its help loads no heavy part."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from drasat.cli import main
from drasat.nodeplugin import cdi, driverfiles
from drasat.testbed import fakedriver
from drasat.testbed.fakedriver import LIBDIR, VERSION


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fakedriver.make(tmp_path_factory.mktemp("cdispec") / "root")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main.main(["cdi-spec", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_whole_gpu_spec(capsys: pytest.CaptureFixture[str], root: Path) -> None:
    code, out, _ = _run(
        capsys, "--simulate-gpus", "T4 x2", "--device", "gpu-1", "--driver-root", str(root)
    )
    assert code == 0
    spec = json.loads(out)
    (device,) = spec["devices"]
    assert device["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia1", "hostPath": f"{root}/dev/nvidia1"}
    ]
    mounts = {m["containerPath"]: m["hostPath"] for m in spec["containerEdits"]["mounts"]}
    assert (
        mounts[f"{LIBDIR}/libnvidia-ml.so.{VERSION}"] == f"{root}{LIBDIR}/libnvidia-ml.so.{VERSION}"
    )
    # + vdpau, the binaries (not the MPS programs: the node plugin runs those), firmware
    assert len(mounts) == len(fakedriver.LIBRARIES) + 1 + len(driverfiles.BINARIES) + 2
    assert not any(p.endswith(driverfiles.WITHHELD_BINARIES) for p in mounts)
    assert [h["args"][1] for h in spec["containerEdits"]["hooks"]] == [
        "create-symlinks",
        "update-ldcache",
        "disable-device-node-modification",
    ]


def test_mig_device_spec_and_yaml(capsys: pytest.CaptureFixture[str], root: Path) -> None:
    code, out, _ = _run(
        capsys,
        "--simulate-gpus",
        "A100-40GB,mig=all",
        "--device",
        "gpu-0-mig-3g20gb-9-4",
        "--driver-root",
        str(root),
        "--proc-root",
        str(root / "proc"),
        "-o",
        "yaml",
    )
    assert code == 0
    spec: dict[str, Any] = yaml.safe_load(out)
    paths = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert paths[0] == "/dev/nvidia0"
    assert paths[1].startswith("/dev/nvidia-caps/nvidia-cap") and len(paths) == 3


def test_dev_root_apart_from_the_driver_root(
    capsys: pytest.CaptureFixture[str], root: Path, tmp_path: Path
) -> None:
    dev = tmp_path / "devroot"
    (dev / "dev").mkdir(parents=True)
    for node in ("nvidiactl", "nvidia0"):
        (dev / "dev" / node).write_text("")
    code, out, _ = _run(
        capsys,
        "--simulate-gpus",
        "T4",
        "--driver-root",
        str(root),
        "--dev-root",
        str(dev),
        "--cdi-hook-path",
        "",
    )
    assert code == 0
    spec = json.loads(out)
    assert spec["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidiactl", "hostPath": f"{dev}/dev/nvidiactl"}
    ]
    assert "hooks" not in spec["containerEdits"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--simulate-gpus", "T4", "--device", "gpu-7"], "device gpu-7 is not on node cdi-spec"),
        (["--simulate-gpus", "T4", "--driver-root", "/no/such/dir"], "--driver-root /no/such/dir"),
        (["--simulate-gpus", "3xFOO"], "unknown GPU product 'FOO'"),
        ([], "give --simulate-gpus SPEC or, on a GPU host, --from-nvml"),
        (["--from-nvml", "--device", "gpu-0-mig-1g5gb-19-0"], "would create it"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err


def test_a_root_without_the_driver_names_what_is_missing(
    capsys: pytest.CaptureFixture[str], root: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    (empty / "dev").mkdir(parents=True)
    for node in ("nvidia0", "nvidiactl"):
        (empty / "dev" / node).write_text("")
    code, _, err = _run(capsys, "--simulate-gpus", "T4", "--driver-root", str(empty))
    assert code == 2
    assert f"error: driver root {empty}: no libcuda.so.{VERSION} and no libnvidia-ml.so" in err


def test_help_loads_nothing_heavy() -> None:
    probe = (
        "import sys\nfrom drasat.cli import main\n"
        "try:\n    main.main(['cdi-spec', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('drasat.nodeplugin', 'pynvml', "
        "'grpc', 'kubernetes'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert "--driver-root" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_simulated_fleet_needs_no_driver_root(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --driver-root a simulated GPU's spec has its device nodes and environment, no
    host paths, and says so as the node plugin does (issue 26 item 7)."""
    code, out, err = _run(capsys, "--simulate-gpus", "T4 x2", "--device", "gpu-1")
    assert code == 0
    (device,) = json.loads(out)["devices"]
    edits = device["containerEdits"]
    assert edits["deviceNodes"] == [
        {"path": path} for path in (*cdi.CONTROL_DEVICES, "/dev/nvidia1")
    ]
    assert "DRASAT_GPU_COUNT=1" in edits["env"] and "mounts" not in edits
    assert err == f"warning: {cdi.undiscovered_driver_note('/proc')}\n"
