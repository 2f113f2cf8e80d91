"""deploy/probe/drasat_probe.py, the drasat-probe image's program: the view it prints of a
container's GPUs, on a made-up root (its /dev, its mountinfo) and environment."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

PROBE = Path(__file__).resolve().parents[2] / "deploy" / "probe" / "drasat_probe.py"


@pytest.fixture(scope="module")
def probe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("drasat_probe", PROBE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MOUNTINFO = """\
20 1 0:30 / / rw,relatime - overlay overlay rw
21 20 0:31 / /dev rw,nosuid - tmpfs tmpfs rw,mode=755
22 21 0:32 / /dev/shm rw,nosuid,nodev - tmpfs shm rw,size=65536k
30 20 254:0 /var/lib/drasat/mps/ns-a/pipe /tmp/nvidia-mps rw,nosuid,nodev - ext4 /dev/vda rw
31 21 254:0 /var/lib/drasat/mps/ns-a/shm /dev/shm rw,nosuid,nodev - ext4 /dev/vda rw
32 20 254:0 /run/nvidia/driver/usr/lib/libcuda.so.550 /usr/lib/libcuda.so.550 ro - ext4 /dev/vda rw
33 20 254:0 /etc/my\\040hosts /etc/hosts rw - ext4 /dev/vda rw
"""


def _root(tmp_path: Path) -> Path:
    (tmp_path / "dev" / "nvidia-caps").mkdir(parents=True)
    for name in ("nvidia0", "nvidiactl", "nvidia-caps/nvidia-cap12", "null"):
        (tmp_path / "dev" / name).write_text("")
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "mountinfo").write_text(MOUNTINFO)
    (tmp_path / "tmp" / "nvidia-mps").mkdir(parents=True)
    (tmp_path / "tmp" / "nvidia-mps" / "control").write_text("")
    (tmp_path / "dev" / "shm").mkdir()
    return tmp_path


def test_the_view_names_gpu_nodes_gpu_variables_and_where_mps_comes_from(
    probe: ModuleType, tmp_path: Path
) -> None:
    env = {
        "NVIDIA_VISIBLE_DEVICES": "GPU-1",
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps",
        "PATH": "/usr/bin",
        "HOSTNAME": "x",
    }
    view = probe.view(_root(tmp_path), env)
    assert [d["path"] for d in view["devices"]] == [
        "/dev/nvidia0",
        "/dev/nvidiactl",
        "/dev/nvidia-caps/nvidia-cap12",
    ]  # not /dev/null
    assert view["env"] == {
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps",
        "NVIDIA_VISIBLE_DEVICES": "GPU-1",
    }
    pipe = view["mpsPipeDirectory"]
    assert pipe["present"] and pipe["entries"] == ["control"]
    assert pipe["mount"]["root"] == "/var/lib/drasat/mps/ns-a/pipe"
    # The last mount at /dev/shm hides the first: the daemon's folder, not the pod's tmpfs.
    assert view["shm"]["mount"]["root"] == "/var/lib/drasat/mps/ns-a/shm"
    assert view["driverMounts"] == {
        "/usr/lib/libcuda.so.550": {"root": "/run/nvidia/driver/usr/lib/libcuda.so.550"}
    }


def test_without_mps_the_pipe_directory_is_absent_and_shm_is_the_pods(
    probe: ModuleType, tmp_path: Path
) -> None:
    root = _root(tmp_path)
    (root / "proc" / "self" / "mountinfo").write_text(MOUNTINFO.splitlines()[2] + "\n")
    (root / "tmp" / "nvidia-mps" / "control").unlink()
    (root / "tmp" / "nvidia-mps").rmdir()
    view = probe.view(root, {})
    assert view["mpsPipeDirectory"] == {"path": "/tmp/nvidia-mps", "present": False, "mount": None}
    assert view["shm"]["mount"]["fstype"] == "tmpfs" and view["shm"]["mount"]["root"] == "/"


@pytest.mark.skipif(os.geteuid() != 0, reason="character devices need root (mknod)")
def test_character_devices_carry_their_numbers(probe: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    os.mknod(tmp_path / "dev" / "nvidia3", 0o666 | 0o020000, os.makedev(195, 3))
    (device,) = probe.device_nodes(tmp_path / "dev")
    assert device == {"path": "/dev/nvidia3", "type": "char", "major": 195, "minor": 3}


def test_mountinfo_escapes_are_undone(probe: ModuleType) -> None:
    assert probe.mounts(MOUNTINFO)["/etc/hosts"]["root"] == "/etc/my hosts"


def test_once_prints_one_json_line_and_exits(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(PROBE), "--once"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert json.loads(line)["probe"] == "drasat-probe"
