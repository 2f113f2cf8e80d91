"""A stand-in for `nvidia-cuda-mps-control` where there is no GPU (the simulated fleet).

It is run as a program (by path, so it imports nothing of drasat and starts in a few tens of
milliseconds) with the two invocations the node plugin uses of the real one:

- `simmps.py -f`: the control daemon in the foreground. It reads `CUDA_MPS_PIPE_DIRECTORY`,
  `CUDA_MPS_LOG_DIRECTORY` and `CUDA_VISIBLE_DEVICES` as the real daemon does, creates the pipe
  directory's `control` FIFO (what clients and the plugin look for) and
  `nvidia-cuda-mps-control.pid`, writes `control.log` in the log directory, and runs until told to
  quit (SIGTERM or SIGINT) or until its pipe directory is removed (then nobody can reach it).
- `simmps.py` without arguments: the control client. It reads commands on stdin; `quit` signals
  the daemon of `CUDA_MPS_PIPE_DIRECTORY` to stop (the real client writes it into the pipe);
  `get_server_list` prints nothing (no CUDA client ever connects here). Without a daemon it
  fails as the real one does.

So tests check the lifecycle of a real process: started once per device set, found again by pid
and start time after a plugin restart, restarted when dead, stopped after the last claim. With
`DRASAT_SIMMPS_SHM_PROBE=NAME` the daemon also creates `/dev/shm/NAME` (as the real server puts
its shared memory there), so a test can see which `/dev/shm` the daemon was given.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

PID_FILE = "nvidia-cuda-mps-control.pid"
CONTROL = "control"


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())


def _directories() -> tuple[Path, Path]:
    try:
        return Path(os.environ["CUDA_MPS_PIPE_DIRECTORY"]), Path(
            os.environ["CUDA_MPS_LOG_DIRECTORY"]
        )
    except KeyError as missing:
        print(f"simmps: {missing.args[0]} is not set", file=sys.stderr)
        raise SystemExit(2) from None


def daemon() -> int:
    pipe, logs = _directories()
    stop: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    logs.mkdir(parents=True, exist_ok=True)
    pipe.mkdir(parents=True, exist_ok=True)
    with open(logs / "control.log", "a", buffering=1) as log:
        devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        log.write(f"[{_now()}] Startup pid {os.getpid()} devices {devices}\n")
        (pipe / PID_FILE).write_text(f"{os.getpid()}\n")
        fifo = pipe / CONTROL
        fifo.unlink(missing_ok=True)
        probe = os.environ.get("DRASAT_SIMMPS_SHM_PROBE", "")
        if probe:
            Path("/dev/shm", probe).write_text(f"{os.getpid()}\n")
        os.mkfifo(fifo, 0o600)
        while not stop and pipe.is_dir():
            time.sleep(0.1)
        why = "quit" if stop else "pipe directory removed"
        log.write(f"[{_now()}] Shutdown ({why})\n")
        for name in (CONTROL, PID_FILE):
            (pipe / name).unlink(missing_ok=True)
    return 0


def control() -> int:
    pipe, _ = _directories()
    for line in sys.stdin:
        command = line.strip()
        if not command:
            continue
        try:
            pid = int((pipe / PID_FILE).read_text())
        except (OSError, ValueError):
            print("Cannot find MPS control daemon process", file=sys.stderr)
            return 1
        if command == "quit":
            os.kill(pid, signal.SIGTERM)
        elif command != "get_server_list":
            print(f"simmps: unknown command {command!r}", file=sys.stderr)
            return 1
    return 0


def main(argv: list[str]) -> int:
    if argv == ["-f"]:
        return daemon()
    if not argv:
        return control()
    print(f"simmps: usage: simmps.py [-f] (got {' '.join(argv)})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
