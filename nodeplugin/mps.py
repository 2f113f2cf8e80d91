"""MPS: one control daemon per claim, described by a jinja2 template and started by a runner.

`render` turns validated limits (thread percentage, pinned memory per device) into the daemon's
description: command, environment (visible devices, pipe and log directories) and the control
commands sent after start. `ProcessRunner` starts `nvidia-cuda-mps-control -d` on the host;
`RecordingRunner` (simulation) starts nothing and writes what would run into the claim's directory.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import jinja2
import yaml

from drasat.nodeplugin.checkpoint import write_atomic
from drasat.nodeplugin.devices import DeviceError

log = logging.getLogger(__name__)

#: Where containers see the claim's MPS pipe directory.
CONTAINER_PIPE_DIR = "/tmp/nvidia-mps"
TEMPLATE = "mps-control-daemon.yaml.j2"
_SAFE = re.compile(r"^[A-Za-z0-9._:/-]+$")

_environment = jinja2.Environment(
    loader=jinja2.PackageLoader("drasat.nodeplugin", "templates"),
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    keep_trailing_newline=True,
    auto_reload=False,  # compiled once; the template ships with the package
)
#: libyaml's loader when PyYAML has it (same results, a fraction of the pure-Python parse time).
_YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class MpsLimits:
    claim_uid: str
    devices: tuple[str, ...]  # GPU or MIG UUIDs
    thread_percentage: int | None = None
    pinned_limit_bytes: dict[int, int] = field(default_factory=dict)  # CUDA index -> bytes


def _check(value: str) -> str:
    if not _SAFE.match(value):
        raise ValueError(f"unsafe value for the MPS daemon template: {value!r}")
    return value


def _megabytes(n: int) -> str:
    return f"{max(1, -(-n // 2**20))}M"


def render(limits: MpsLimits, *, claim_dir: Path) -> dict[str, Any]:
    """The daemon description of one claim. This is a purely computational function."""
    if limits.thread_percentage is not None and not 1 <= limits.thread_percentage <= 100:
        raise ValueError(f"thread percentage {limits.thread_percentage} is not in 1..100")
    text = _environment.get_template(TEMPLATE).render(
        claim_uid=_check(limits.claim_uid),
        devices=[_check(d) for d in limits.devices],
        pipe_dir=_check(str(claim_dir / "pipe")),
        log_dir=_check(str(claim_dir / "log")),
        thread_percentage=limits.thread_percentage,
        pinned_limits={str(i): _megabytes(b) for i, b in limits.pinned_limit_bytes.items()},
    )
    loaded: dict[str, Any] = yaml.load(text, Loader=_YamlLoader)  # a safe loader
    return loaded


class Runner(Protocol):
    def start(self, daemon: dict[str, Any], claim_dir: Path) -> None: ...

    def stop(self, daemon: dict[str, Any], claim_dir: Path) -> None: ...


class ProcessRunner:
    """Runs the real `nvidia-cuda-mps-control` daemon on the host."""

    def start(self, daemon: dict[str, Any], claim_dir: Path) -> None:
        env = {**os.environ, **daemon["env"]}
        self._run(daemon["command"], env, None)
        for command in daemon["control"]:
            self._run(["nvidia-cuda-mps-control"], env, command)

    def stop(self, daemon: dict[str, Any], claim_dir: Path) -> None:
        env = {**os.environ, **daemon["env"]}
        self._run(["nvidia-cuda-mps-control"], env, daemon["stop"])

    @staticmethod
    def _run(argv: list[str], env: dict[str, str], command: str | None) -> None:
        text = None if command is None else command + "\n"
        try:
            subprocess.run(argv, input=text, text=True, env=env, check=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as error:
            raise DeviceError(f"MPS: {' '.join(argv)} {command or ''}: {error}") from error


class RecordingRunner:
    """Simulation: starts nothing; writes `would-run.json` into the claim's directory."""

    def __init__(self) -> None:
        self.running: dict[str, dict[str, Any]] = {}

    def start(self, daemon: dict[str, Any], claim_dir: Path) -> None:
        write_atomic(claim_dir / "would-run.json", json.dumps(daemon, indent=2, sort_keys=True))
        self.running[daemon["name"]] = daemon

    def stop(self, daemon: dict[str, Any], claim_dir: Path) -> None:
        self.running.pop(daemon["name"], None)


class MpsManager:
    """Per-claim MPS daemons under `<state dir>/mps/<claim uid>/`."""

    def __init__(self, root: Path, runner: Runner) -> None:
        self.root = root
        self.runner = runner

    def claim_dir(self, claim_uid: str) -> Path:
        return self.root / claim_uid

    def start(self, limits: MpsLimits) -> Path:
        claim_dir = self.claim_dir(limits.claim_uid)
        daemon = render(limits, claim_dir=claim_dir)
        for sub in ("pipe", "log"):
            (claim_dir / sub).mkdir(parents=True, exist_ok=True, mode=0o750)
        write_atomic(claim_dir / "daemon.json", json.dumps(daemon, sort_keys=True))
        try:
            self.runner.start(daemon, claim_dir)
        except BaseException:
            shutil.rmtree(claim_dir, ignore_errors=True)
            raise
        log.info("MPS daemon %s started for %s", daemon["name"], ", ".join(limits.devices))
        return claim_dir

    def stop(self, claim_uid: str) -> None:
        """Stop the claim's daemon and remove its directory; nothing to do when it is gone."""
        claim_dir = self.claim_dir(claim_uid)
        description = claim_dir / "daemon.json"
        if description.exists():
            self.runner.stop(json.loads(description.read_text()), claim_dir)
        shutil.rmtree(claim_dir, ignore_errors=True)

    def running(self, claim_uid: str) -> bool:
        return (self.claim_dir(claim_uid) / "daemon.json").exists()
