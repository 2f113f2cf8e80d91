#!/usr/bin/env python3
"""drasat-probe: print as one JSON line what this container sees of its GPUs, then sleep.

The workload image `localhost/drasat-probe:dev` (deploy/probe/Dockerfile) runs it as its default
command, so a pod's log holds the container's own view, as the container runtime built it from the
CDI specs the node plugin wrote:

- `devices`: the GPU device nodes (`/dev/nvidia*`, `/dev/nvidia-caps/*`) with their type and
  major:minor numbers;
- `env`: the `NVIDIA_*` and `CUDA_*` variables;
- `mpsPipeDirectory`: the MPS pipe directory (`$CUDA_MPS_PIPE_DIRECTORY`, else `/tmp/nvidia-mps`):
  whether it is there, its entries, whether it is writable, and the mount it comes from;
- `shm`: `/dev/shm`'s mount (an MPS claim gets its daemon's) and its entries;
- `driverMounts`: the other mounts of the driver's files (libraries, binaries, firmware).

A mount is told by its `root` (mountinfo's fourth field: the path inside the filesystem it
binds), which names the host folder a bind mount comes from. `--once` prints and exits. Standard
library only: the image holds Python and this file.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import sys
import threading
from pathlib import Path
from typing import Any

VERSION = 1
DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"
#: Mount points that hold the driver's files (what a CDI spec of an NVIDIA driver binds).
DRIVER_WORDS = ("nvidia", "cuda", "libnv")


def device_nodes(dev: Path) -> list[dict[str, Any]]:
    """The GPU device nodes under `dev`: /dev/nvidia* and /dev/nvidia-caps/*."""
    found = []
    candidates = sorted(dev.glob("nvidia*"))
    caps = dev / "nvidia-caps"
    if caps.is_dir():
        candidates += sorted(caps.iterdir())
    for path in candidates:
        try:
            info = path.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode):
            continue
        entry: dict[str, Any] = {"path": "/" + str(path.relative_to(dev.parent)).lstrip("/")}
        if stat.S_ISCHR(info.st_mode):
            entry.update(type="char", major=os.major(info.st_rdev), minor=os.minor(info.st_rdev))
        elif stat.S_ISBLK(info.st_mode):
            entry.update(type="block", major=os.major(info.st_rdev), minor=os.minor(info.st_rdev))
        else:
            entry["type"] = "file"
        found.append(entry)
    return found


def gpu_env(environ: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(environ.items()) if k.startswith(("NVIDIA_", "CUDA_"))}


def mounts(mountinfo: str) -> dict[str, dict[str, str]]:
    """Mount point -> its root, filesystem type, source and options (the last mount at a
    point wins, as it hides the others)."""
    table: dict[str, dict[str, str]] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 10:
            continue
        dash = fields.index("-")
        point = _unescape(fields[4])
        table[point] = {
            "root": _unescape(fields[3]),
            "fstype": fields[dash + 1],
            "source": _unescape(fields[dash + 2]),
            "options": fields[5],
        }
    return table


def _unescape(text: str) -> str:
    """mountinfo's octal escapes (\\040 for a space)."""
    return text.encode().decode("unicode_escape") if "\\" in text else text


def folder(root: Path, path: str, table: dict[str, dict[str, str]]) -> dict[str, Any]:
    """What the folder `path` holds and the mount it comes from (`root`: where / is)."""
    real = root / path.lstrip("/")
    view: dict[str, Any] = {"path": path, "present": real.is_dir()}
    if view["present"]:
        try:
            view["entries"] = sorted(entry.name for entry in real.iterdir())
        except OSError as error:
            view["entries"] = f"unreadable: {error.strerror}"
        view["writable"] = os.access(real, os.W_OK)
    view["mount"] = table.get(path)
    return view


def view(root: Path = Path("/"), environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The container's view; `root` and `environ` stand in for / and os.environ in tests."""
    env = dict(os.environ if environ is None else environ)
    try:
        table = mounts((root / "proc/self/mountinfo").read_text())
    except OSError:
        table = {}
    pipe = env.get("CUDA_MPS_PIPE_DIRECTORY", DEFAULT_PIPE_DIR)
    driver = {
        point: {"root": m["root"]}
        for point, m in sorted(table.items())
        if any(word in point for word in DRIVER_WORDS) and point != pipe
    }
    return {
        "probe": "drasat-probe",
        "version": VERSION,
        "hostname": socket.gethostname(),
        "devices": device_nodes(root / "dev"),
        "env": gpu_env(env),
        "mpsPipeDirectory": folder(root, pipe, table),
        "shm": folder(root, "/dev/shm", table),
        "driverMounts": driver,
    }


def main(argv: list[str]) -> int:
    print(json.dumps(view(), sort_keys=True), flush=True)
    if "--once" in argv:
        return 0
    # As PID 1 of its container a process gets no default signal action: stop on SIGTERM
    # (pod deletion) at once instead of waiting out the grace period.
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.wait(3600):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
