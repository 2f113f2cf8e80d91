"""The MPS host: the process that runs a node's MPS control daemons, apart from the node plugin.

A process started by `drasat nodeplugin` lives in the plugin container's PID namespace, whose
init the plugin is: when it exits (a crash, an OOM kill, a rollout, its pod deleted) the kernel
kills every process of the namespace, every claim's MPS daemon with it, under running
workloads. So the daemons are started by `drasat mps-host`, a process of its own pod (the chart's
`mps-host` DaemonSet: no API access, no NVML, no gRPC, updated only when deleted), and the
plugin asks it over a UNIX socket in the state folder (`MpsHostClient`, an `mps.Runner`). The
plugin can then exit and start again as often as it must: its daemons run on, and the restarted
plugin adopts them (docs/NODEPLUGIN.md, "Where the daemons run").

The protocol: one JSON object per line, a request `{"op": ...}` and one answer `{"ok": true,
...}` or `{"ok": false, "error": "..."}`, one request per connection:

- `start {name, devices}`: start the daemon `name` (`mps-<16 hex>`) of the devices in
  `<root>/<name>/` (the folders the plugin made); answers `pid`, `started`, `namespace` (the
  host's PID namespace, in which the pid means something);
- `alive {pid, started, namespace}`: `alive`, whether that process runs;
- `control {name, commands}`: control commands of the vocabulary the plugin uses
  (`CONTROL_VERBS`) to that daemon; answers its `output`;
- `stop {name, pid, started, namespace}`: stop it (`quit`, then signals).

The host takes names and device UUIDs, never a command line or a path: what it runs is its own
program (its flags), in the daemon folder of that name under its own root. The socket is 0600 in
the state folder (0700): only root on the node reaches it, who could run the programs anyway.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import socketserver
import threading
from pathlib import Path
from typing import Any

from drasat.nodeplugin import mps
from drasat.nodeplugin.devicelib import DeviceError

log = logging.getLogger(__name__)

#: The socket's name in the state folder.
SOCKET_NAME = "mps-host.sock"
#: The control commands the host passes on (what `mps.MpsManager` sends); `quit` is `stop`'s.
CONTROL_VERBS = frozenset(
    {
        "get_server_list",
        "get_default_active_thread_percentage",
        "set_default_active_thread_percentage",
        "get_default_device_pinned_mem_limit",
        "set_default_device_pinned_mem_limit",
        "set_active_thread_percentage",
        "set_device_pinned_mem_limit",
    }
)
_NAME = re.compile(r"^mps-[0-9a-f]{16}$")
_WORD = re.compile(r"^[A-Za-z0-9._:+-]+$")
_MAX_REQUEST = 64 * 1024
#: A start waits for the daemon's FIFO (the runner's own timeout); calls wait this much longer.
CALL_TIMEOUT_S = 60.0


class RequestError(ValueError):
    """A request the host refuses (not what the protocol allows)."""


def _field(request: dict[str, Any], key: str, kind: type) -> Any:
    value = request.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise RequestError(f"{key}: expected {kind.__name__}, got {value!r}")
    return value


def _name(request: dict[str, Any]) -> str:
    name = _field(request, "name", str)
    if not _NAME.match(name):
        raise RequestError(f"name: {name!r} is not a daemon name (mps-<16 hex digits>)")
    return str(name)


def _process(request: dict[str, Any]) -> mps.Process:
    return mps.Process(
        int(_field(request, "pid", int)),
        str(_field(request, "started", str)),
        str(_field(request, "namespace", str)),
    )


def _command(command: Any) -> str:
    if not isinstance(command, str):
        raise RequestError(f"commands: {command!r} is not a string")
    verb, *args = command.split()
    if verb not in CONTROL_VERBS:
        raise RequestError(f"commands: {verb!r} is not one the host passes on")
    if len(args) > 3 or not all(_WORD.match(a) for a in args):
        raise RequestError(f"commands: bad arguments in {command!r}")
    return " ".join([verb, *args])


class MpsHost:
    """Runs the daemons of the folders under `root` with `runner` (in this process's PID
    namespace), serving the plugin's requests on `socket_path`."""

    def __init__(self, root: Path, runner: mps.ProcessRunner, socket_path: Path) -> None:
        self.root = root
        self.runner = runner
        self.socket_path = socket_path
        self._lock = threading.Lock()
        #: What this host started and did not stop: name -> (process, description).
        self._started: dict[str, tuple[mps.Process, dict[str, Any]]] = {}
        self._server: socketserver.ThreadingUnixStreamServer | None = None

    # -- what the requests do --------------------------------------------------------------

    def handle(self, request: Any) -> dict[str, Any]:
        """The answer to one request (never raises)."""
        try:
            if not isinstance(request, dict):
                raise RequestError("a request is a JSON object")
            op = request.get("op")
            if op == "start":
                return {"ok": True, **self._start(request)}
            if op == "alive":
                process = _process(request)
                # A pid of another namespace (an earlier host's, whose daemons died with it, or
                # a plugin's own) is not one of this host's.
                mine = process.namespace == self.runner.namespace
                return {"ok": True, "alive": mine and self.runner.alive(process)}
            if op == "control":
                return {"ok": True, "output": self._control(request)}
            if op == "stop":
                self._stop(request)
                return {"ok": True}
            if op == "hello":
                return {"ok": True, "namespace": self.runner.namespace}
            raise RequestError(f"op: {op!r} is not one of start, alive, control, stop, hello")
        except (RequestError, DeviceError) as error:
            return {"ok": False, "error": str(error)}
        except Exception as error:  # a bug: the plugin gets an answer, the host goes on
            log.exception("MPS host: request %r", request)
            return {"ok": False, "error": f"internal error: {error!r}"}

    def _folder(self, name: str) -> Path:
        folder = self.root / name
        if folder.is_symlink() or not folder.is_dir():
            raise RequestError(f"{folder} is not a daemon folder (the plugin makes it first)")
        return folder

    def _start(self, request: dict[str, Any]) -> dict[str, Any]:
        name = _name(request)
        devices = _field(request, "devices", list)
        if not devices or not all(isinstance(d, str) for d in devices):
            raise RequestError("devices: expected a list of device UUIDs")
        folder = self._folder(name)
        try:
            description = mps.render(
                tuple(devices), daemon_dir=folder, program=self.runner.program, name=name
            )
        except ValueError as error:
            raise RequestError(str(error)) from None
        with self._lock:
            process = self.runner.start(description, folder)
            self._started[name] = (process, description)
        log.info("MPS daemon %s started: pid %d, devices %s", name, process.pid, devices)
        return {"pid": process.pid, "started": process.started, "namespace": process.namespace}

    def _control(self, request: dict[str, Any]) -> str:
        name = _name(request)
        commands = [_command(c) for c in _field(request, "commands", list)]
        folder = self._folder(name)
        daemon = {"name": name, "env": _control_env(folder)}
        return self.runner.control(daemon, commands)

    def _stop(self, request: dict[str, Any]) -> None:
        name = _name(request)
        process = _process(request) if request.get("pid") else None
        folder = self.root / name
        daemon = {"name": name, "stop": "quit", "env": _control_env(folder)}
        with self._lock:
            self.runner.stop(daemon, folder, process)
            self._started.pop(name, None)
        log.info("MPS daemon %s stopped", name)

    # -- serving ---------------------------------------------------------------------------

    def serve(self, stop: threading.Event) -> None:
        """Serve until `stop` is set; then stop the daemons this host started (they would not
        outlive it: they are its container's processes)."""
        self.socket_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # The state folder is the plugin's alone, also when it existed (as the plugin sets it).
        os.chmod(self.socket_path.parent, 0o700)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.socket_path.unlink(missing_ok=True)  # a stale socket of a previous host
        host = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline(_MAX_REQUEST)
                try:
                    request = json.loads(line)
                except ValueError:
                    answer = {"ok": False, "error": "a request is one line of JSON"}
                else:
                    answer = host.handle(request)
                self.wfile.write(json.dumps(answer).encode() + b"\n")

        old_umask = os.umask(0o177)  # the socket is 0600 from the start
        try:
            server = socketserver.ThreadingUnixStreamServer(str(self.socket_path), Handler)
        finally:
            os.umask(old_umask)
        server.daemon_threads = True
        self._server = server
        thread = threading.Thread(target=server.serve_forever, name="mps-host", daemon=True)
        thread.start()
        log.warning(
            "MPS host serving %s for the daemons under %s (PID namespace %s)",
            self.socket_path,
            self.root,
            self.runner.namespace,
        )
        try:
            stop.wait()
        finally:
            server.shutdown()
            server.server_close()
            self.socket_path.unlink(missing_ok=True)
            self.stop_all()

    def stop_all(self) -> None:
        with self._lock:
            started = dict(self._started)
        for name, (process, description) in started.items():
            folder = self.root / name
            daemon = {"name": name, "stop": "quit", "env": _control_env(folder)}
            try:
                self.runner.stop({**description, **daemon}, folder, process)
            except OSError as error:
                log.error("MPS host: stopping %s: %s", name, error)
        with self._lock:
            self._started.clear()


def _control_env(folder: Path) -> dict[str, str]:
    return {
        "CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"),
        "CUDA_MPS_LOG_DIRECTORY": str(folder / "log"),
    }


class MpsHostClient:
    """An `mps.Runner` that asks the node's MPS host (`MpsHost`) over its socket. `program` is
    what the host runs, for the daemons' records."""

    def __init__(
        self,
        socket_path: Path,
        *,
        program: tuple[str, ...] = mps.REAL_PROGRAM,
        timeout_s: float = CALL_TIMEOUT_S,
    ) -> None:
        self.socket_path = socket_path
        self.program = program
        self.timeout_s = timeout_s

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request and its answer; DeviceError when the host cannot be reached or refuses."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(self.timeout_s)
                conn.connect(str(self.socket_path))
                conn.sendall(json.dumps(request).encode() + b"\n")
                with conn.makefile("rb") as answers:
                    line = answers.readline(_MAX_REQUEST)
        except OSError as error:
            raise DeviceError(
                f"MPS host at {self.socket_path} cannot be reached ({error}): the MPS daemons "
                "run there (the chart's mps-host DaemonSet, `drasat mps-host`); is it running "
                "on this node?"
            ) from error
        try:
            answer = json.loads(line)
        except ValueError:
            raise DeviceError(f"MPS host at {self.socket_path}: no answer") from None
        if not isinstance(answer, dict) or not answer.get("ok"):
            why = answer.get("error") if isinstance(answer, dict) else answer
            raise DeviceError(f"MPS host: {request.get('op')} {request.get('name', '')}: {why}")
        return answer

    def start(self, daemon: dict[str, Any], daemon_dir: Path) -> mps.Process:
        devices = daemon["env"]["CUDA_VISIBLE_DEVICES"].split(",")
        answer = self.call({"op": "start", "name": daemon["name"], "devices": devices})
        return mps.Process(int(answer["pid"]), str(answer["started"]), str(answer["namespace"]))

    def alive(self, process: mps.Process) -> bool:
        request = {"op": "alive", "pid": process.pid, "started": process.started}
        return bool(self.call({**request, "namespace": process.namespace})["alive"])

    def control(self, daemon: dict[str, Any], commands: list[str]) -> str:
        answer = self.call({"op": "control", "name": daemon["name"], "commands": commands})
        return str(answer["output"])

    def stop(self, daemon: dict[str, Any], daemon_dir: Path, process: mps.Process | None) -> None:
        request: dict[str, Any] = {"op": "stop", "name": daemon["name"]}
        if process is not None:
            request.update(pid=process.pid, started=process.started, namespace=process.namespace)
        self.call(request)
