"""An in-process Kubernetes API server over real HTTP on 127.0.0.1.

The unmodified official client talks to it (`kubernetes.client.Configuration(host=server.url)`):

    with ApiServer.running(crds=[...]) as server:
        server.faults.down_for(2.0)
        ...

It serves the core group and any group/version it knows (built-ins from `resources.BUILTINS`,
custom resources from the CRDs passed in or POSTed later). Semantics live in `api`, watch
streams in `watching`, faults in `faults`; this module only speaks HTTP/1.1.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import logging
import pathlib
import socket
import threading
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from drasat.testbed.sim import api, audit, errors, faults, routing, watching

log = logging.getLogger(__name__)

_JSON = "application/json"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HttpServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes; without this, Nagle's algorithm and the
        # client's delayed ACK add 40 ms to every response.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.connection)

    def finish(self) -> None:
        self.server.untrack(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    # --- dispatch -----------------------------------------------------------------------------

    def _serve(self, method: str) -> None:
        try:
            self._answer(method)
        except ConnectionError:  # the client went away mid-answer: not the server's bug
            self.close_connection = True

    def _answer(self, method: str) -> None:
        # Audited before the answer goes out, so the log order is the order clients saw.
        self._pending: tuple[str, routing.Route, Mapping[str, str]] | None = None
        body = self._read_body()
        owner = self.server.owner
        if owner.stopping.wait(owner.faults.latency) or self._refused():
            return
        url = urllib.parse.urlsplit(self.path)
        query = {key: values[-1] for key, values in urllib.parse.parse_qs(url.query).items()}
        try:
            target = routing.parse(url.path, is_plural=owner.api.is_plural)
            if isinstance(target, routing.Route):
                self._pending = (method, target, query)
            if target is None:
                raise errors.ApiError(404, "NotFound", f"no such path {url.path!r}")
            if isinstance(target, routing.Discovery):
                if method != "GET":
                    raise errors.ApiError(405, "MethodNotAllowed", "discovery is read-only")
                self._send(200, owner.api.discovery(target))
            elif method == "GET" and target.name is None and routing.flag(query, "watch"):
                self._watch(target, query)
            else:
                code, answer = self._resource(method, target, query, body)
                self._send(code, answer)
        except errors.ApiError as exc:
            self._send(exc.code, exc.status())
        except ConnectionError:
            raise
        except Exception as exc:  # a bug in the simulator: answer 500, keep serving
            log.exception("internal error serving %s %s", method, self.path)
            owner.internal_errors.append(f"{method} {self.path}: {exc!r}")
            self._send(500, errors.ApiError(500, "InternalError", str(exc)).status())

    def _record(self, code: int) -> None:
        if self._pending is None:
            return
        method, route, query = self._pending
        self._pending = None
        self.server.owner.audit.record(
            audit.Entry(
                verb=audit.verb(method, route, query),
                group=route.group,
                version=route.version,
                resource=route.plural,
                subresource=route.subresource,
                namespace=route.namespace,
                name=route.name,
                code=code,
                user_agent=self.headers.get("User-Agent", ""),
            )
        )

    def _resource(
        self, method: str, route: routing.Route, query: Mapping[str, str], raw: bytes
    ) -> tuple[int, Any]:
        core = self.server.owner.api
        if method == "GET":
            if route.name is None:
                return 200, core.list_objects(route, query)
            return 200, core.get(route)
        body = api.decode(raw)
        if method == "POST":
            if route.subresource == "binding" and route.plural == "pods" and not route.group:
                return 201, core.bind(route, body)
            return 201, core.create(route, body, query)
        if route.name is None:
            if method == "DELETE":
                return 200, core.delete_collection(route, query)
            raise errors.ApiError(405, "MethodNotAllowed", f"{method} needs an object name")
        if method == "PUT":
            return 200, core.replace(route, body, query)
        if method == "PATCH":
            return 200, core.patch(route, body, self.headers.get("Content-Type", ""), query)
        return 200, core.delete(route, body, query)

    def _refused(self) -> bool:
        mode = self.server.owner.faults.down_mode()
        if mode == faults.DOWN_RESET:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return True
        if mode == faults.DOWN_503:
            self._send(503, errors.unavailable("the server is down (injected fault)").status())
            return True
        return False

    # --- wire ---------------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, code: int, payload: Any) -> None:
        self._record(code)
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", _JSON)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _watch(self, route: routing.Route, query: Mapping[str, str]) -> None:
        owner = self.server.owner
        stream = watching.WatchStream(
            owner.api, route, query, bookmark_interval=owner.bookmark_interval
        )
        self._record(200)  # now, not when the watch ends
        self.send_response(200)
        self.send_header("Content-Type", _JSON)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        owner.watch_opened()
        try:
            for event in stream.events(stopping=owner.stopping.is_set):
                self._chunk(json.dumps(event).encode() + b"\n")
            self._chunk(b"")
        except watching.Dropped:
            # An abrupt close, as when an apiserver or a load balancer goes away.
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            log.debug("watch client went away")
        finally:
            owner.watch_closed()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class _HttpServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # Bursts of clients (many informers, many pods) must not overflow the listen backlog.
    request_queue_size = 256

    def __init__(self, owner: ApiServer) -> None:
        self.owner = owner
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self.opened = 0
        super().__init__(("127.0.0.1", 0), _Handler)

    def track(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.add(connection)
            self.opened += 1

    def untrack(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(connection)

    def close_connections(self) -> None:
        with self._connections_lock:
            open_now = list(self._connections)
        for connection in open_now:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class ApiServer:
    """The server: `start()`/`stop()`, or `with ApiServer.running(...) as server`."""

    def __init__(
        self,
        *,
        crds: Iterable[Mapping[str, Any]] = (),
        history: int = 10_000,
        fault_config: faults.Faults | None = None,
        cel_rules: bool = True,
        graceful_pod_deletion: bool = False,
        admission: Iterable[api.Admission] = (),
    ) -> None:
        self.faults = fault_config or faults.Faults()
        self.stopping = threading.Event()
        #: Seconds between BOOKMARKs on watches that allow them.
        self.bookmark_interval = watching.DEFAULT_BOOKMARK_INTERVAL_S
        #: Every answered resource request, in RBAC terms.
        self.audit = audit.Audit()
        #: Requests that failed with a bug in the simulator (answered 500); tests assert none.
        self.internal_errors: list[str] = []
        self.api = api.Api(
            fault_config=self.faults,
            history=history,
            crds=crds,
            cel_rules=cel_rules,
            graceful_pod_deletion=graceful_pod_deletion,
            admission=admission,
        )
        self.faults.subscribe(self.api.store.wake)
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        self._watches = 0
        self._watches_changed = threading.Condition()

    def watch_opened(self) -> None:
        with self._watches_changed:
            self._watches += 1
            self._watches_changed.notify_all()

    def watch_closed(self) -> None:
        with self._watches_changed:
            self._watches -= 1
            self._watches_changed.notify_all()

    @property
    def connections_opened(self) -> int:
        """How many client connections the server accepted so far."""
        return self._httpd.opened if self._httpd is not None else 0

    @property
    def open_watches(self) -> int:
        with self._watches_changed:
            return self._watches

    def wait_for_watches(self, count: int, *, timeout: float = 10.0) -> bool:
        """Wait until at least `count` watch connections are open (e.g. informers started)."""
        with self._watches_changed:
            return self._watches_changed.wait_for(lambda: self._watches >= count, timeout)

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the API server is not running")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def kubeconfig(self) -> dict[str, Any]:
        """A kubeconfig for this server (no credentials: the server checks none)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "drasat-sim", "cluster": {"server": self.url}}],
            "users": [{"name": "drasat-sim", "user": {}}],
            "contexts": [
                {"name": "drasat-sim", "context": {"cluster": "drasat-sim", "user": "drasat-sim"}}
            ],
            "current-context": "drasat-sim",
        }

    def write_kubeconfig(self, path: pathlib.Path) -> pathlib.Path:
        """Write `kubeconfig()` (JSON, which is YAML) for tools and subprocesses; returns path."""
        path.write_text(json.dumps(self.kubeconfig(), indent=2) + "\n")
        return path

    def start(self) -> ApiServer:
        self._httpd = _HttpServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="drasat-sim-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: end watches, close connections, join the server thread."""
        self.stopping.set()
        self.api.store.close()
        # Let open watches end their streams cleanly before connections are cut.
        with self._watches_changed:
            self._watches_changed.wait_for(lambda: self._watches == 0, timeout=2.0)
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.close_connections()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._httpd = self._thread = None

    @classmethod
    @contextlib.contextmanager
    def running(
        cls,
        *,
        crds: Iterable[Mapping[str, Any]] = (),
        history: int = 10_000,
        fault_config: faults.Faults | None = None,
        cel_rules: bool = True,
        graceful_pod_deletion: bool = False,
        admission: Iterable[api.Admission] = (),
    ) -> Iterator[ApiServer]:
        """A started server, stopped on exit. `cel_rules=False` skips CRDs' CEL rules;
        `graceful_pod_deletion=True` keeps deleted pods on nodes until a kubelet confirms;
        `admission`: mutating admission steps run on every create (`api.Admission`)."""
        server = cls(
            crds=crds,
            history=history,
            fault_config=fault_config,
            cel_rules=cel_rules,
            graceful_pod_deletion=graceful_pod_deletion,
            admission=admission,
        ).start()
        try:
            yield server
        finally:
            server.stop()
