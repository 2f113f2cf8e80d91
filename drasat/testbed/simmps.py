"""A stand-in for `nvidia-cuda-mps-control` where there is no GPU (the simulated fleet).

It is run as a program (by path, so it imports nothing of drasat and starts in a few tens of
milliseconds) with the two invocations the node plugin uses of the real one:

- `simmps.py -f`: the control daemon in the foreground. It reads `CUDA_MPS_PIPE_DIRECTORY`,
  `CUDA_MPS_LOG_DIRECTORY` and `CUDA_VISIBLE_DEVICES` as the real daemon does, creates the pipe
  directory's `control` FIFO (what clients and the plugin look for) and
  `nvidia-cuda-mps-control.pid`, writes `control.log` in the log directory (a `Cmd:` line per
  command, as the real one logs them), answers control commands, and runs until told to quit
  (`quit` through the FIFO, SIGTERM or SIGINT) or until its pipe directory is removed (then
  nobody can reach it).
- `simmps.py` without arguments: the control client. It reads commands on stdin and sends each
  to the daemon of `CUDA_MPS_PIPE_DIRECTORY` through its `control` FIFO, printing the answer;
  `quit` asks the daemon to stop, through the FIFO too (as the real client does: no pid read
  from the pipe directory, which containers can write, and none that means anything across PID
  namespaces). Without a daemon it fails as the real one does.

The daemon keeps the per-client defaults of the real one's interface:
`set_default_active_thread_percentage <1..100>` / `get_default_active_thread_percentage`,
`set_default_device_pinned_mem_limit <dev> <n>M|<n>G` / `get_default_device_pinned_mem_limit
<dev>` (a device by index or by a UUID of `CUDA_VISIBLE_DEVICES`), and `get_server_list` (no CUDA
client ever connects here, so it lists nothing, and the per-server commands find no server). A
bad command or value is an error (exit status 1), so tests see what a real daemon refuses.

So tests check the lifecycle of a real process: started once per daemon, its limits set before
any client, found again by pid and start time after a plugin restart, restarted when dead,
stopped after the last claim. With `DRASAT_SIMMPS_SHM_PROBE=NAME` the daemon also creates
`/dev/shm/NAME` (as the real server puts its shared memory there), so a test can see which
`/dev/shm` the daemon was given.
"""

from __future__ import annotations

import os
import re
import select
import signal
import sys
import time
from pathlib import Path
from types import FrameType

PID_FILE = "nvidia-cuda-mps-control.pid"
CONTROL = "control"
REPLY_TIMEOUT_S = 10.0
_MEMORY = re.compile(r"[1-9][0-9]*[MG]")


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
        # Read and write: the FIFO never reports end-of-file while the daemon holds it.
        control_fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        defaults = Defaults(devices.split(",") if devices else [])
        pending = b""
        while not stop and pipe.is_dir():
            ready, _, _ = select.select([control_fd], [], [], 0.1)
            if not ready:
                continue
            try:
                pending += os.read(control_fd, 65536)
            except BlockingIOError:
                continue
            *lines, pending = pending.split(b"\n")
            for line in lines:
                reply_to, _, command = line.decode(errors="replace").partition("\t")
                log.write(f"[{_now()}] Cmd:{command}\n")
                if command.strip() == "quit":
                    stop.append(0)
                    status, answer = 0, ""
                else:
                    status, answer = defaults.run(command)
                _reply(Path(reply_to), status, answer)
        os.close(control_fd)
        why = "quit" if stop else "pipe directory removed"
        log.write(f"[{_now()}] Shutdown ({why})\n")
        for name in (CONTROL, PID_FILE):
            (pipe / name).unlink(missing_ok=True)
    return 0


class Defaults:
    """The daemon's per-client defaults and its answers to control commands."""

    def __init__(self, devices: list[str]) -> None:
        self.devices = devices
        self.threads = 100
        self.pinned: dict[str, str] = {}

    def _device(self, text: str) -> str | None:
        if text.isdigit() and int(text) < len(self.devices):
            return self.devices[int(text)]
        return text if text in self.devices else None

    def run(self, command: str) -> tuple[int, str]:
        """(0, answer) or (1, error) for one command line."""
        verb, *args = command.split()
        if verb == "get_server_list" and not args:
            return 0, ""
        if verb == "get_default_active_thread_percentage" and not args:
            return 0, str(self.threads)
        if verb == "set_default_active_thread_percentage" and len(args) == 1:
            if not args[0].isdigit() or not 1 <= int(args[0]) <= 100:
                return 1, f"Invalid active thread percentage {args[0]}"
            self.threads = int(args[0])
            return 0, ""
        if verb in ("get_default_device_pinned_mem_limit", "set_default_device_pinned_mem_limit"):
            device = self._device(args[0]) if args else None
            if device is None:
                return 1, f"Invalid device {' '.join(args[:1])} (devices: {self.devices})"
            if verb.startswith("get") and len(args) == 1:
                return 0, self.pinned.get(device, "0")
            if len(args) == 2 and _MEMORY.fullmatch(args[1]):
                self.pinned[device] = args[1]
                return 0, ""
            return 1, f"Invalid memory limit {' '.join(args[1:])}"
        if verb in ("set_active_thread_percentage", "set_device_pinned_mem_limit") and args:
            return 1, f"No server with PID {args[0]}"
        return 1, f"simmps: unknown command {command!r}"


def _reply(path: Path, status: int, answer: str) -> None:
    if path.parent.is_dir():
        partial = path.with_name(path.name + ".part")
        partial.write_text(f"{status}\n{answer}")
        partial.rename(path)  # whole, or not there


def _ask(pipe: Path, command: str, serial: int) -> tuple[int, str]:
    """Send one command to the daemon through its FIFO; its (status, answer)."""
    reply = pipe / f"reply-{os.getpid()}-{serial}"
    try:
        fd = os.open(pipe / CONTROL, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no FIFO, or nobody reading it
        return 1, "Cannot find MPS control daemon process"
    try:
        os.write(fd, f"{reply}\t{command}\n".encode())
    finally:
        os.close(fd)
    deadline = time.monotonic() + REPLY_TIMEOUT_S
    while not reply.exists():
        if time.monotonic() > deadline:
            return 1, f"simmps: no answer to {command!r}"
        time.sleep(0.005)
    status, _, answer = reply.read_text().partition("\n")
    reply.unlink(missing_ok=True)
    return int(status), answer


def control() -> int:
    pipe, _ = _directories()
    for serial, line in enumerate(sys.stdin):
        command = line.strip()
        if not command:
            continue
        status, answer = _ask(pipe, command, serial)
        if status != 0:
            print(answer, file=sys.stderr)
            return 1
        if answer:
            print(answer)
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
