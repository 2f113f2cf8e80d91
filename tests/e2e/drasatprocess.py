"""drasat's own programs as processes in the real-cluster tests: started (dying with the test
process, as the control plane's components do), waited for, and stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from drasat.api.groups import DRIVER_NAME
from drasat.testbed.controlplane import realcluster


def run(
    args: list[str], log: Path, *, append: bool = False, program: Sequence[str] = ("-m", "drasat")
) -> subprocess.Popen[bytes]:
    """`python -m drasat --log-level INFO ARGS`, its output in `log` (after what it holds, with
    `append`: a restarted process); `program`: what runs drasat instead of `-m drasat` (a
    wrapper script, e.g. callrecord.py's)."""
    with log.open("ab" if append else "wb") as out:
        return subprocess.Popen(
            [sys.executable, *program, "--log-level", "INFO", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=realcluster.sigterm_on_parent_death,
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 20 s; before that, SIGUSR1 has a drasat command write its
    threads' stacks to its log (drasat.stopsignals), to show where it hung."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGUSR1)
            time.sleep(1)  # the stacks are written from C at once; a moment to reach the log
            process.kill()
            process.wait()


def wait_started(
    process: subprocess.Popen[bytes], ready: Callable[[], bool], log: Path, what: str
) -> None:
    """Wait until `ready()`; stop the process and fail with its log's tail if it exits first or
    60 s pass."""
    deadline = time.monotonic() + 60
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            text = log.read_text(errors="replace")[-4000:]
            raise AssertionError(f"{what} did not start:\n{text}")
        time.sleep(0.1)


def start_plugin(
    tmp: Path, node: str, *options: str, program: Sequence[str] = ("-m", "drasat")
) -> subprocess.Popen[bytes]:
    """`drasat nodeplugin` for `node` with its sockets, state and CDI specs under `tmp` and
    `options` (fleet, API access, kubelet API), run by `program` (see `run`); returns once its
    registration socket exists."""
    args = [
        "nodeplugin", "--node-name", node, *options,
        "--kubelet-plugin-dir", str(tmp / "p"), "--kubelet-registry-dir", str(tmp / "r"),
        "--state-dir", str(tmp / "state"), "--cdi-root", str(tmp / "cdi"), "--gc-interval", "0",
    ]  # fmt: skip
    log = tmp / "plugin.log"
    process = run(args, log, program=program)
    socket = tmp / "r" / f"{DRIVER_NAME}-reg.sock"
    wait_started(process, socket.exists, log, f"the node plugin of {node}")
    return process
