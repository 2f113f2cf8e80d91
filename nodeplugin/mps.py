"""MPS: a control daemon per claim (shares: per namespace and GPU) that enforces its limits.

MPS needs every client of a GPU to reach the one control daemon that owns it: the GPU is in
EXCLUSIVE_PROCESS mode while the daemon runs (what keeps a client from bypassing MPS and its
limits), so only one MPS server may open it; clients and server talk through the pipe directory
(`CUDA_MPS_PIPE_DIRECTORY`) and POSIX shared memory in `/dev/shm`. `MpsManager` keeps each
daemon under `<state dir>/mps/<name>/`, with `pipe/` (the control FIFO and the server's sockets),
`log/` and `shm/` (the server's /dev/shm); a claim's CDI spec mounts its daemon's `pipe/` and
`shm/` into its containers.

Whose daemon (the isolation rule, docs/NODEPLUGIN.md "Isolation"): nothing of MPS on the host is
shared between tenants that the hardware does not make share it.

- A claim that holds its devices alone (whole GPUs, MIG devices) gets its own daemon
  (`claim_scope`): its own pipes, its own shared memory, its own limits; no other claim's
  containers mount them.
- Shares (several claims on one GPU) must all be clients of the GPU's one MPS server, so they
  share its daemon, pipes and shared memory; that daemon serves the shares of one namespace only
  (`namespace_scope`), and a share of another namespace is refused while it runs.

Limits: the claim's thread percentage and pinned-memory limits are the daemon's per-client
defaults, set through its control interface before any client of the claim can start
(`set_default_active_thread_percentage`, `set_default_device_pinned_mem_limit <UUID> <MiB>M`, as
NVIDIA's DRA driver sets them), so a tenant cannot raise them by changing its environment. A
shares daemon bounds every client by the largest share it serves (MPS has one default per
server); a smaller share's clients also get their own part in their environment (`client_env`),
which binds them within their own namespace. The MPS programs are not mounted into containers
(`driverfiles`): a container reaches its own daemon's pipes and nothing else.

Crash safety: `daemon.json` records the daemon's pid and start time (field 22 of
`/proc/PID/stat`), its scope and the limits it enforces, so a restarted plugin finds a running
daemon and adopts it (the pid alone could be a new process reusing the number), and starts a
dead one again with the same limits.

`render` turns a device set into the daemon's description (command, environment) from a jinja2
template; `ProcessRunner` runs `nvidia-cuda-mps-control -f` on a host, in a private mount
namespace whose `/dev/shm` is the daemon's `shm/`; `SimulatedRunner` runs the stand-in
`simmps.py` (same invocations and control commands, no GPU), so tests watch real processes
start, take their limits, survive and stop.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import jinja2
import yaml

import drasat
from drasat.nodeplugin.checkpoint import write_atomic
from drasat.nodeplugin.devicelib import DeviceError

log = logging.getLogger(__name__)

#: Where containers see the daemon's pipe directory and its shared memory.
CONTAINER_PIPE_DIR = "/tmp/nvidia-mps"
CONTAINER_SHM_DIR = "/dev/shm"
TEMPLATE = "mps-control-daemon.yaml.j2"
DESCRIPTION = "daemon.json"
#: The FIFO a running control daemon has in its pipe directory (what clients open).
CONTROL_FIFO = "control"
REAL_PROGRAM = ("nvidia-cuda-mps-control",)
#: The stand-in imports the standard library only: `-S` skips site-packages' start-up cost
#: (a fifth of a second on a loaded machine), paid at every daemon start and control command.
#: It lives in the test bed (drasat/testbed/simmps.py), run as a program, never imported.
SIM_PROGRAM = (sys.executable, "-S", str(Path(drasat.__file__).parent / "testbed" / "simmps.py"))
_SAFE = re.compile(r"^[A-Za-z0-9._:/+-]+$")

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
    """One claim's part of its devices: what its clients may use."""

    claim_uid: str
    devices: tuple[str, ...]  # GPU or MIG UUIDs
    thread_percentage: int | None = None
    pinned_limit_bytes: dict[int, int] = field(default_factory=dict)  # index in devices -> bytes

    def pinned_by_device(self) -> dict[str, int]:
        """The pinned-memory limits by device UUID (what the daemon is told: an index would
        depend on the order each claim lists its devices in)."""
        return {self.devices[i]: n for i, n in self.pinned_limit_bytes.items()}


@dataclass(frozen=True)
class DaemonLimits:
    """What a daemon enforces on every client: its per-client defaults. None / a device left
    out: no limit."""

    thread_percentage: int | None = None
    pinned_bytes: tuple[tuple[str, int], ...] = ()  # (device UUID, bytes), sorted

    @classmethod
    def of(cls, limits: MpsLimits) -> DaemonLimits:
        return cls(limits.thread_percentage, tuple(sorted(limits.pinned_by_device().items())))

    def widest(self, other: DaemonLimits) -> DaemonLimits:
        """Limits that bound the clients of both (a shares daemon serves several shares with one
        default). This is a purely computational function."""
        threads = (
            None
            if self.thread_percentage is None or other.thread_percentage is None
            else max(self.thread_percentage, other.thread_percentage)
        )
        mine, theirs = dict(self.pinned_bytes), dict(other.pinned_bytes)
        pinned = {d: max(n, theirs[d]) for d, n in mine.items() if d in theirs}
        return DaemonLimits(threads, tuple(sorted(pinned.items())))

    def commands(self, before: DaemonLimits | None = None) -> list[str]:
        """The control commands that make a daemon's defaults these (from `before`, the ones it
        has: only what changes). A pinned limit cannot be lifted again through the interface:
        callers give every device of a shares daemon a limit (its whole memory at most)."""
        before = before if before is not None else DaemonLimits()
        out = []
        if self.thread_percentage != before.thread_percentage:
            out.append(f"set_default_active_thread_percentage {self.thread_percentage or 100}")
        old = dict(before.pinned_bytes)
        out += [
            f"set_default_device_pinned_mem_limit {device} {_megabytes(n)}"
            for device, n in self.pinned_bytes
            if old.get(device) != n
        ]
        return out

    def dump(self) -> dict[str, Any]:
        return {"threadPercentage": self.thread_percentage, "pinnedBytes": dict(self.pinned_bytes)}

    @classmethod
    def load(cls, body: Any) -> DaemonLimits:
        if not isinstance(body, dict):
            return cls()
        threads = body.get("threadPercentage")
        pinned = body.get("pinnedBytes") or {}
        return cls(
            int(threads) if threads is not None else None,
            tuple(sorted((str(d), int(n)) for d, n in pinned.items())),
        )


def _check(value: str) -> str:
    if not _SAFE.match(value):
        raise ValueError(f"unsafe value for the MPS daemon template: {value!r}")
    return value


def _megabytes(n: int) -> str:
    return f"{max(1, -(-n // 2**20))}M"


def client_env(limits: MpsLimits, enforced: DaemonLimits | None = None) -> dict[str, str]:
    """The environment a claim's containers get to reach their daemon, with the claim's limits
    that are tighter than what the daemon `enforced` on every client (all of them without it).
    These only narrow a client further (MPS never lets a client exceed the daemon's defaults).
    This is a purely computational function; ValueError for a thread percentage outside 1..100."""
    if limits.thread_percentage is not None and not 1 <= limits.thread_percentage <= 100:
        raise ValueError(f"thread percentage {limits.thread_percentage} is not in 1..100")
    env = {"CUDA_MPS_PIPE_DIRECTORY": CONTAINER_PIPE_DIR}
    bound = enforced if enforced is not None else DaemonLimits()
    threads = limits.thread_percentage
    if threads is not None and (
        bound.thread_percentage is None or threads < bound.thread_percentage
    ):
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(threads)
    daemon = dict(bound.pinned_bytes)
    tighter = any(
        daemon.get(limits.devices[index]) is None or n < daemon[limits.devices[index]]
        for index, n in limits.pinned_limit_bytes.items()
    )
    # The variable names devices by the index the client enumerates them in, which need not be
    # the order the claim lists them: only a limit that is the same for every device is safe
    # (then given for all; where the daemon's is lower, MPS keeps the daemon's).
    pinned = limits.pinned_limit_bytes
    if tighter and len(set(pinned.values())) == 1 and len(pinned) == len(limits.devices):
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(
            f"{index}={_megabytes(n)}" for index, n in sorted(pinned.items())
        )
    return env


def claim_scope(claim_uid: str) -> str:
    """The scope of a claim's own daemon."""
    return f"claim:{claim_uid}"


def namespace_scope(namespace: str) -> str:
    """The scope of the daemon the shares of one namespace use on a GPU."""
    return f"namespace:{namespace}"


def daemon_name(devices: tuple[str, ...] | list[str], scope: str = "") -> str:
    """The daemon of a scope and device set: short (its pipe directory holds UNIX sockets,
    whose paths must stay under 108 bytes) and the same for the same set in any order."""
    key = f"{scope}|{','.join(sorted(set(devices)))}" if scope else ",".join(sorted(set(devices)))
    return f"mps-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def render(
    devices: tuple[str, ...], *, daemon_dir: Path, program: tuple[str, ...], name: str = ""
) -> dict[str, Any]:
    """The description of the daemon `name` (default: of the device set alone) of `devices`.
    This is a purely computational function."""
    if not devices:
        raise ValueError("an MPS daemon needs at least one device")
    text = _environment.get_template(TEMPLATE).render(
        name=_check(name or daemon_name(devices)),
        devices=[_check(d) for d in devices],
        program=[_check(p) for p in program],
        pipe_dir=_check(str(daemon_dir / "pipe")),
        log_dir=_check(str(daemon_dir / "log")),
    )
    loaded: dict[str, Any] = yaml.load(text, Loader=_YamlLoader)  # a safe loader
    return loaded


@dataclass(frozen=True)
class Process:
    """A started daemon: its pid and start time (field 22 of /proc/PID/stat, so a pid reused by
    another process is not taken for it) in the PID namespace `namespace` (`/proc/self/ns/pid`
    of whoever started it; "" in records of earlier versions: the plugin's own)."""

    pid: int
    started: str
    namespace: str = ""


def pid_namespace() -> str:
    """This process's PID namespace (`pid:[4026531836]`); pids mean something only in it."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (field 22 of /proc/PID/stat); None once it has
    exited (gone, or a zombie not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


#: Daemons this process started: reaped when they exit (else they stay zombies and look alive to
#: nobody, but hold a process slot).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
_CHILDREN_LOCK = threading.Lock()


def _reap() -> None:
    with _CHILDREN_LOCK:
        for pid, child in list(_CHILDREN.items()):
            if child.poll() is not None:
                del _CHILDREN[pid]


def alive(pid: int, started: str) -> bool:
    """Whether the process `pid` that started at `started` still runs (not a reused pid)."""
    _reap()
    return pid > 0 and start_time(pid) == started


class Runner(Protocol):
    """What runs the daemons' processes: this process itself (`ProcessRunner`), or the node's
    MPS host over its socket (`drasat.nodeplugin.mpshost.MpsHostClient`)."""

    program: tuple[str, ...]

    def start(self, daemon: dict[str, Any], daemon_dir: Path) -> Process: ...

    def alive(self, process: Process) -> bool: ...

    def control(self, daemon: dict[str, Any], commands: list[str]) -> str: ...

    def stop(self, daemon: dict[str, Any], daemon_dir: Path, process: Process | None) -> None: ...


class ProcessRunner:
    """Runs MPS control daemons as processes: `<program> -f` (foreground, so its pid is known),
    stopped with `quit` on the control client's stdin, then SIGTERM, then SIGKILL.

    `private_shm`: run the daemon in its own mount namespace with the daemon directory's `shm/`
    bound over `/dev/shm` (`unshare`, needs CAP_SYS_ADMIN, as the plugin has on a GPU host), so
    the server and the clients, which mount the same directory, share their memory.

    `root`: run the programs `chroot`ed into this folder, where the plugin sees the host's root
    (the chart mounts it at /driver-root): the host's `nvidia-cuda-mps-control` then finds its
    `nvidia-cuda-mps-server` and libraries as on the host, as NVIDIA's device plugin runs it. Only
    for a driver installed on the host (driver root `/`): the daemon folders under the state
    directory are at the same paths inside."""

    def __init__(
        self,
        program: tuple[str, ...] = REAL_PROGRAM,
        *,
        private_shm: bool = True,
        root: str = "",
        start_timeout_s: float = 10.0,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self.program = program
        self.private_shm = private_shm
        self.root = root
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.die_with_interpreter = False
        self.namespace = pid_namespace()

    def _argv(self, daemon: dict[str, Any], daemon_dir: Path) -> list[str]:
        """The daemon's command line. Every wrapper `exec`s the next, so the pid the plugin
        records is the daemon's own."""
        command = [str(part) for part in daemon["command"]]
        if not self.private_shm:
            return self._rooted(command)
        shm = str(daemon_dir / "shm")
        unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
        if not self.root:
            return [*unshare, 'mount --bind "$0" /dev/shm && exec "$@"', shm, *command]
        # Inside the root the daemon's pipe/ and log/ are bound from where this process has them
        # read-write: the chart mounts the host root read-only, and a name a container planted
        # in pipe/ (a link to a host file) then leads nowhere the daemon can write.
        script = (
            'shm=$0 root=$1 dir=$2; shift 2; mount --bind "$shm" "$root/dev/shm" && '
            'mount --bind "$dir/pipe" "$root$dir/pipe" && '
            'mount --bind "$dir/log" "$root$dir/log" && exec chroot "$root" "$@"'
        )
        return [*unshare, script, shm, self.root, str(daemon_dir), *command]

    def _rooted(self, argv: list[str]) -> list[str]:
        return ["chroot", self.root, *argv] if self.root else argv

    def control_argv(self) -> list[str]:
        """The control client's command line (commands go to its stdin)."""
        return self._rooted(list(self.program))

    def alive(self, process: Process) -> bool:
        """Whether `process` runs: a pid of this PID namespace with its start time."""
        return process.namespace in ("", self.namespace) and alive(process.pid, process.started)

    def start(self, daemon: dict[str, Any], daemon_dir: Path) -> Process:
        env = {**os.environ, **daemon["env"]}
        output = daemon_dir / "log" / "daemon.out"
        argv = self._argv(daemon, daemon_dir)
        try:
            with open(output, "ab") as sink:
                child = subprocess.Popen(
                    argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    # Its own session: a signal to this process's group does not reach it. It
                    # still lives in this process's PID namespace, and dies with its init.
                    start_new_session=True,
                    cwd=daemon_dir,
                )
        except OSError as error:
            raise DeviceError(f"MPS: cannot run {argv[0]}: {error}") from error
        with _CHILDREN_LOCK:
            _CHILDREN[child.pid] = child
        if self.die_with_interpreter:
            _SIMULATED.add(child.pid)
        fifo = Path(daemon["env"]["CUDA_MPS_PIPE_DIRECTORY"]) / CONTROL_FIFO
        deadline = time.monotonic() + self.start_timeout_s
        while not fifo.exists():
            if child.poll() is not None or time.monotonic() > deadline:
                child.kill()
                child.wait()
                tail = _tail(output)
                devices = daemon["env"]["CUDA_VISIBLE_DEVICES"]
                raise DeviceError(
                    f"MPS: {' '.join(daemon['command'])} for {devices} did not start "
                    f"(exit {child.returncode}){': ' + tail if tail else ''}"
                )
            time.sleep(0.01)
        return Process(child.pid, start_time(child.pid) or "", self.namespace)

    def control(self, daemon: dict[str, Any], commands: list[str]) -> str:
        """Send `commands` to the running daemon through its control client (one per line, as
        `echo CMD | nvidia-cuda-mps-control`); what it printed. DeviceError when it fails."""
        env = {**os.environ, **daemon["env"]}
        try:
            done = subprocess.run(
                self.control_argv(),
                input="".join(f"{c}\n" for c in commands).encode(),
                env=env,
                capture_output=True,
                timeout=self.stop_timeout_s,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise DeviceError(f"MPS {daemon['name']}: {self.program[0]}: {error}") from error
        output = done.stdout.decode(errors="replace").strip()
        if done.returncode != 0:
            problem = (done.stderr.decode(errors="replace").strip() or output)[-400:]
            raise DeviceError(
                f"MPS {daemon['name']}: {'; '.join(commands)}: exit {done.returncode}: {problem}"
            )
        return output

    def stop(self, daemon: dict[str, Any], daemon_dir: Path, process: Process | None) -> None:
        """Stop the daemon: `quit` through its pipe directory, then signals. `process` None: its
        pid is unknown (killed before it was recorded), so only `quit` is sent. A process of
        another PID namespace is not this runner's to stop (it is taken for stopped)."""
        if process is not None and not self.alive(process):
            return
        env = {**os.environ, **daemon["env"]}
        try:
            subprocess.run(
                self.control_argv(),
                input=f"{daemon['stop']}\n".encode(),
                env=env,
                capture_output=True,
                timeout=self.stop_timeout_s,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as error:
            log.warning("MPS %s: %s %s: %s", daemon["name"], self.program[0], daemon["stop"], error)
        if process is None:
            return
        pid, started = process.pid, process.started
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None and alive(pid, started):
                log.warning(
                    "MPS %s: pid %d did not quit; sending %s", daemon["name"], pid, sig.name
                )
                os.kill(pid, sig)
            deadline = time.monotonic() + self.stop_timeout_s
            while alive(pid, started) and time.monotonic() < deadline:
                time.sleep(0.01)
            if not alive(pid, started):
                break
        _SIMULATED.discard(pid)


class SimulatedRunner(ProcessRunner):
    """The simulated fleet's daemons: `simmps.py` processes, no GPU, no mount namespace. They
    outlive a killed plugin (adoption is tested across restarts) but not this interpreter's
    normal exit, so test runs leave none behind."""

    def __init__(self, *, start_timeout_s: float = 10.0, stop_timeout_s: float = 5.0) -> None:
        super().__init__(
            SIM_PROGRAM,
            private_shm=False,
            start_timeout_s=start_timeout_s,
            stop_timeout_s=stop_timeout_s,
        )
        self.die_with_interpreter = True


#: The simulated runner's name before it ran processes (tests and tools still construct it).
RecordingRunner = SimulatedRunner

_SIMULATED: set[int] = set()


@atexit.register
def stop_simulated() -> None:
    """Kill the simulated daemons this interpreter started and that still run."""
    for pid in list(_SIMULATED):
        with _CHILDREN_LOCK:
            child = _CHILDREN.pop(pid, None)
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        _SIMULATED.discard(pid)


def _control_env(daemon_dir: Path) -> dict[str, str]:
    return {
        "CUDA_MPS_PIPE_DIRECTORY": str(daemon_dir / "pipe"),
        "CUDA_MPS_LOG_DIRECTORY": str(daemon_dir / "log"),
    }


def _tail(path: Path, limit: int = 400) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    return text[-limit:].replace("\n", " | ")


@dataclass(frozen=True)
class Daemon:
    """What `daemon.json` records of a started daemon."""

    name: str
    devices: tuple[str, ...]
    pid: int
    started: str  # /proc start time, clock ticks
    description: dict[str, Any]
    scope: str = ""  # claim_scope / namespace_scope; "" in records of earlier versions
    limits: DaemonLimits = field(default_factory=DaemonLimits)
    starter: str = ""  # the claim whose prepare started it
    namespace: str = ""  # the PID namespace of `pid` ("" in records of earlier versions)

    @property
    def process(self) -> Process:
        return Process(self.pid, self.started, self.namespace)

    def running(self) -> bool:
        """Whether it runs, seen from this process's PID namespace (the plugin's own daemons;
        `MpsManager` asks its runner, which knows where its daemons live)."""
        return self.namespace in ("", pid_namespace()) and alive(self.pid, self.started)

    def record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "devices": list(self.devices),
            "pid": self.pid,
            "started": self.started,
            "namespace": self.namespace,
            "description": self.description,
            "scope": self.scope,
            "limits": self.limits.dump(),
            "starter": self.starter,
        }


class Outcome(StrEnum):
    """What `MpsManager.ensure_all` found of a daemon its claims hold."""

    adopted = "adopted"  # it runs, enforcing its recorded limits
    limits_restored = "limits restored"  # it runs, but its defaults had changed: set again
    restarted = "restarted"  # it was not running: started again (its clients lost their server)
    down = "down"  # not running, and it cannot be started


@dataclass(frozen=True)
class Ensured:
    name: str
    devices: tuple[str, ...]
    claims: tuple[str, ...]
    outcome: Outcome
    detail: str = ""

    def line(self) -> str:
        devices = ", ".join(self.devices) or "devices unknown"
        text = f"MPS daemon {self.name} ({devices}; claims {', '.join(self.claims)}): "
        return text + self.outcome.value + (f": {self.detail}" if self.detail else "")


def _fresh_folders(daemon_dir: Path) -> None:
    """The daemon's folders as a daemon starts into them: `pipe/` and `shm/` empty real folders,
    `log/` as it was. The first two are bind-mounted read-write into the containers of the
    daemon's claims, so a daemon started again finds there whatever a container left (a FIFO or
    socket where the daemon makes its own, a link to a host file under a name it writes):
    every entry is removed, links themselves and never what they point to. The folders stay the
    same ones: the mounts of running containers hold them, and their clients reach the new
    daemon through them."""
    for sub in ("pipe", "shm"):
        folder = daemon_dir / sub
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            folder.unlink()
        folder.mkdir(parents=True, exist_ok=True, mode=0o755)
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
    (daemon_dir / "log").mkdir(parents=True, exist_ok=True, mode=0o755)
    # The shared memory and pipes are used by clients of any uid in the containers.
    os.chmod(daemon_dir / "pipe", 0o755)
    os.chmod(daemon_dir / "shm", 0o1777)


_ANSWER = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMG]?)", re.IGNORECASE)


def _answer_mib(text: str) -> float | None:
    """A control answer (`30`, `8192M`, `8G`, `0`) as a number (MiB for memory); None when it is
    not one."""
    match = _ANSWER.match(text)
    if match is None:
        return None
    value = float(match.group(1))
    return value * {"": 1.0, "K": 1 / 1024, "M": 1.0, "G": 1024.0}[match.group(2).upper()]


class MpsManager:
    """The node's MPS daemons under `root`, one per scope and device set, with the claims that
    use each.

    Thread-safe: one lock orders every start, stop and change of users, so a daemon is never
    stopped while a claim is between taking it and recording it. The users of each daemon are
    the checkpoint's (`adopt_users` at start); a daemon on disk without users is stopped by
    `sweep` (a plugin killed between starting a daemon and recording it)."""

    def __init__(self, root: Path, runner: Runner) -> None:
        self.root = root
        self.runner = runner
        self.lock = threading.RLock()
        self._users: dict[str, set[str]] = {}

    def daemon_dir(self, name: str) -> Path:
        return self.root / name

    def adopt_users(self, users: dict[str, set[str]]) -> None:
        """The claims that hold each daemon (by name), as the checkpoint records them."""
        with self.lock:
            self._users = {name: set(uids) for name, uids in users.items() if uids}

    def users(self, name: str) -> set[str]:
        with self.lock:
            return set(self._users.get(name, ()))

    def read(self, name: str) -> Daemon | None:
        path = self.daemon_dir(name) / DESCRIPTION
        try:
            body = json.loads(path.read_text())
            return Daemon(
                name=body["name"],
                devices=tuple(body["devices"]),
                pid=int(body["pid"]),
                started=str(body["started"]),
                description=body["description"],
                scope=str(body.get("scope") or ""),
                limits=DaemonLimits.load(body.get("limits")),
                starter=str(body.get("starter") or ""),
                namespace=str(body.get("namespace") or ""),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.error(
                "MPS daemon record %s is unreadable (%s); treated as not running", path, error
            )
            return None

    def alive(self, daemon: Daemon) -> bool:
        """Whether the recorded daemon runs (asked of the runner that started it)."""
        return self.runner.alive(daemon.process)

    def names(self) -> list[str]:
        """Every daemon directory on disk."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def running(self) -> dict[str, Daemon]:
        """The daemons that run now, by name."""
        found = {}
        for name in self.names():
            daemon = self.read(name)
            if daemon is not None and self.alive(daemon):
                found[name] = daemon
        return found

    def acquire(
        self,
        claim_uid: str,
        devices: tuple[str, ...],
        *,
        scope: str = "",
        limits: MpsLimits | None = None,
    ) -> str:
        """Make `claim_uid` a user of the daemon of `scope` (default: the claim's own) and
        `devices` (started, adopted or restarted as needed), enforcing at least the claim's
        `limits`; the daemon's name. DeviceError when it cannot run or a device already has a
        daemon of another scope or device set."""
        scope = scope or claim_scope(claim_uid)
        name = daemon_name(devices, scope)
        wanted = DaemonLimits.of(limits) if limits is not None else DaemonLimits()
        with self.lock:
            self._check_overlap(name, scope, devices)
            users = self._users.setdefault(name, set())
            first = not users
            users.add(claim_uid)
            try:
                self._ensure(
                    name, devices, scope=scope, wanted=wanted, first=first, starter=claim_uid
                )
            except BaseException:
                users.discard(claim_uid)
                if not users:
                    self._stop(name)
                raise
        return name

    def enforced(self, name: str) -> DaemonLimits:
        """The limits daemon `name` enforces on every client (none when it has no record)."""
        daemon = self.read(name)
        return daemon.limits if daemon is not None else DaemonLimits()

    def query(self, name: str, command: str) -> str:
        """One control command to daemon `name` (e.g. `get_default_active_thread_percentage`);
        its answer. DeviceError when the daemon does not run."""
        daemon = self.read(name)
        if daemon is None or not self.alive(daemon):
            raise DeviceError(f"MPS daemon {name} is not running")
        return self.runner.control(daemon.description, [command])

    def release(self, claim_uid: str) -> list[str]:
        """`claim_uid` no longer uses any daemon; stops the daemons it was the last user of, and
        those it started that have no user (a prepare killed before it recorded its daemon).
        Other daemons without users are start-up's `sweep`'s: one may belong to a claim whose
        checkpoint entry cannot be read. The names stopped."""
        with self.lock:
            stopped = []
            for name in sorted(set(self.names()) | set(self._users)):
                users = self._users.get(name, set())
                was_user = claim_uid in users
                users.discard(claim_uid)
                if users:
                    continue
                daemon = self.read(name)
                if was_user or (daemon is not None and daemon.starter == claim_uid):
                    self._stop(name)
                    stopped.append(name)
            return stopped

    def sweep(self) -> list[str]:
        """Stop every daemon without users; the names stopped."""
        with self.lock:
            stopped = []
            for name in sorted(set(self.names()) | set(self._users)):
                if not self._users.get(name):
                    self._stop(name)
                    stopped.append(name)
            return stopped

    def ensure_all(self) -> list[Ensured]:
        """Every daemon with users runs with its recorded limits: adopted when alive (its
        defaults read back and set again where they differ), started again when dead. What
        each was found to be."""
        found = []
        with self.lock:
            for name, users in sorted(self._users.items()):
                if not users:
                    continue
                claims = tuple(sorted(users))
                daemon = self.read(name)
                devices = daemon.devices if daemon is not None else ()
                if not devices:
                    found.append(
                        Ensured(name, (), claims, Outcome.down, "no record of its devices")
                    )
                    continue
                assert daemon is not None
                try:
                    outcome = self._ensure(
                        name, devices, scope=daemon.scope, wanted=None, verify=True
                    )
                    detail = ""
                    if outcome is Outcome.restarted:
                        where = f"pid {daemon.pid} in {daemon.namespace or 'the plugin'}"
                        detail = (
                            f"it was not running ({where}); started again with its limits "
                            f"{daemon.limits.dump()}; the claims' running clients lost their "
                            "MPS server"
                        )
                    found.append(Ensured(name, devices, claims, outcome, detail))
                except (DeviceError, OSError) as error:
                    found.append(Ensured(name, devices, claims, Outcome.down, str(error)))
        return found

    def _check_overlap(self, name: str, scope: str, devices: tuple[str, ...]) -> None:
        for other in self.names():
            if other == name or not self._users.get(other):
                continue
            daemon = self.read(other)
            shared = set(devices) & set(daemon.devices if daemon is not None else ())
            if not shared:
                continue
            assert daemon is not None
            holders = ", ".join(sorted(self._users[other]))
            theirs, mine = daemon.scope.partition(":"), scope.partition(":")
            if theirs[0] == mine[0] == "namespace" and theirs[2] != mine[2]:
                raise DeviceError(
                    f"MPS: GPU {', '.join(sorted(shared))} runs the MPS server of namespace "
                    f"{theirs[2]}'s shares (claims {holders}); MPS runs one server per GPU, whose "
                    f"pipes and shared memory every client uses, so a share of namespace "
                    f"{mine[2]} cannot join it: allocate it on a GPU without another "
                    "namespace's shares"
                )
            raise DeviceError(
                f"MPS: {', '.join(sorted(shared))} already has an MPS daemon for the device "
                f"set {', '.join(daemon.devices)} (claims {holders}); an MPS claim must use "
                "the same devices as the other MPS claims on them"
            )

    def _ensure(
        self,
        name: str,
        devices: tuple[str, ...],
        *,
        scope: str,
        wanted: DaemonLimits | None,
        first: bool = False,
        starter: str = "",
        verify: bool = False,
    ) -> Outcome:
        """Adopted (it runs), restarted (it had died) or started (`Outcome.restarted` without a
        record). The daemon enforces `wanted` (None: what its record says); a running one
        serving other claims is widened to bound theirs and `wanted` both. `first`: the daemon
        has no other user. `verify`: read a running daemon's defaults back, and set them again
        where they differ from its record."""
        daemon = self.read(name)
        if daemon is not None and self.alive(daemon):
            if wanted is not None:
                self._widen(daemon, wanted if first else daemon.limits.widest(wanted))
            elif verify and not self._enforces(daemon):
                self.runner.control(daemon.description, daemon.limits.commands())
                log.warning("MPS daemon %s: limits set again to %s", name, daemon.limits.dump())
                return Outcome.limits_restored
            return Outcome.adopted
        limits = wanted if wanted is not None else DaemonLimits()
        if daemon is not None and not first:
            limits = daemon.limits if wanted is None else daemon.limits.widest(wanted)
        daemon_dir = self.daemon_dir(name)
        description = render(devices, daemon_dir=daemon_dir, program=self.runner.program, name=name)
        if daemon is not None:
            log.warning(
                "MPS daemon %s (pid %d) is not running; starting it again", name, daemon.pid
            )
        _fresh_folders(daemon_dir)
        process = self.runner.start(description, daemon_dir)
        if daemon is not None and not starter:
            starter = daemon.starter
        started = Daemon(
            name,
            devices,
            process.pid,
            process.started,
            description,
            scope,
            limits,
            starter,
            process.namespace,
        )
        self._write(started)
        # Before any client: the claim's containers start only after its prepare returns.
        commands = limits.commands()
        if commands:
            self.runner.control(description, commands)
        log.info(
            "MPS daemon %s (pid %d) started for %s (%s), limits %s",
            name,
            process.pid,
            ", ".join(devices),
            scope,
            limits.dump(),
        )
        return Outcome.restarted

    def _enforces(self, daemon: Daemon) -> bool:
        """Whether the running daemon's defaults are those of its record (read back through its
        control interface; an answer that is not a number counts as different)."""
        limits = daemon.limits
        asks = ["get_default_active_thread_percentage"] + [
            f"get_default_device_pinned_mem_limit {device}" for device, _ in limits.pinned_bytes
        ]
        try:
            answers = self.runner.control(daemon.description, asks).splitlines()
        except DeviceError as error:
            log.warning("MPS daemon %s: cannot read its limits back: %s", daemon.name, error)
            return False
        if len(answers) != len(asks):
            return False
        wanted = [float(limits.thread_percentage or 100)] + [
            float(max(1, -(-n // 2**20))) for _, n in limits.pinned_bytes
        ]
        return all(
            _answer_mib(answer) == value for answer, value in zip(answers, wanted, strict=True)
        )

    def _widen(self, daemon: Daemon, limits: DaemonLimits) -> None:
        """Make a running daemon enforce `limits`: its defaults (for servers it starts later)
        and the running servers' own limits."""
        if limits == daemon.limits:
            return
        commands = limits.commands(daemon.limits)
        if commands:
            # One call: the set commands print nothing, the server list its pids.
            answer = self.runner.control(daemon.description, [*commands, "get_server_list"])
            servers = [word for word in answer.split() if word.isdigit()]
            per_server = [
                f"set_active_thread_percentage {pid} {limits.thread_percentage or 100}"
                for pid in servers
                if limits.thread_percentage != daemon.limits.thread_percentage
            ] + [
                f"set_device_pinned_mem_limit {pid} {device} {_megabytes(n)}"
                for pid in servers
                for device, n in limits.pinned_bytes
                if dict(daemon.limits.pinned_bytes).get(device) != n
            ]
            if per_server:
                self.runner.control(daemon.description, per_server)
        self._write(replace(daemon, limits=limits))
        log.info("MPS daemon %s now enforces %s", daemon.name, limits.dump())

    def _write(self, daemon: Daemon) -> None:
        body = json.dumps(daemon.record(), sort_keys=True)
        write_atomic(self.daemon_dir(daemon.name) / DESCRIPTION, body, mode=0o644)

    def _stop(self, name: str) -> None:
        daemon = self.read(name)
        daemon_dir = self.daemon_dir(name)
        if daemon is not None:
            self.runner.stop(daemon.description, daemon_dir, daemon.process)
            log.info("MPS daemon %s (pid %d) stopped", name, daemon.pid)
        elif (daemon_dir / "pipe" / CONTROL_FIFO).exists():
            # Started but not recorded (the plugin was killed in between): ask it to quit.
            unknown = {"name": name, "stop": "quit", "env": _control_env(daemon_dir)}
            self.runner.stop(unknown, daemon_dir, None)
        shutil.rmtree(self.daemon_dir(name), ignore_errors=True)
        self._users.pop(name, None)
