"""A tiny JSON client for the Kubernetes REST API on http.client, for the simulated actors.

They must not use the official client (only drasat.kube may), and need little: get, list,
create, merge-patch, delete and a line-by-line watch. Errors arrive as `errors.ApiError`.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

from drasat.sim import errors

Obj = dict[str, Any]


def path(
    group: str,
    version: str,
    plural: str,
    *,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The REST path of a collection or an object (core group when `group` is empty)."""
    parts = ["api", version] if not group else ["apis", group, version]
    if namespace is not None:
        parts += ["namespaces", namespace]
    parts.append(plural)
    parts += [part for part in (name, subresource) if part is not None]
    return "/" + "/".join(urllib.parse.quote(part, safe="") for part in parts)


class KubeClient:
    """One server URL (`http://127.0.0.1:port`); thread-safe (a connection per thread)."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or parsed.hostname is None:
            raise ValueError(f"expected an http:// URL, got {url!r}")
        self._host = parsed.hostname
        self._port = parsed.port or 80
        self._timeout = timeout
        self._open: set[http.client.HTTPConnection] = set()
        self._open_lock = threading.Lock()
        self._local = threading.local()

    def request(
        self,
        method: str,
        url_path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        """Send one request; the decoded JSON answer, or ApiError from the server's Status."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        connection = self._connection()
        try:
            connection.request(method, _with_query(url_path, query), body=data, headers=headers)
            response = connection.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException):
            # Broken or refused: drop it (the next request connects again) and let the caller
            # decide whether to retry; a write may or may not have happened.
            self._local.connection = None
            connection.close()
            raise
        answer = json.loads(payload) if payload else {}
        if response.status >= 300:
            raise _error(response.status, answer)
        result: Obj = answer
        return result

    def _connection(self) -> http.client.HTTPConnection:
        # One keep-alive connection per thread: a connection per request would leave thousands
        # of sockets in TIME_WAIT during a long run.
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            self._local.connection = connection
        return connection

    def get(self, url_path: str) -> Obj:
        return self.request("GET", url_path)

    def list(self, url_path: str, **query: str) -> Obj:
        return self.request("GET", url_path, query=query)

    def create(self, url_path: str, body: Obj) -> Obj:
        return self.request("POST", url_path, body=body)

    def merge_patch(self, url_path: str, patch: Obj) -> Obj:
        return self.request(
            "PATCH", url_path, body=patch, content_type="application/merge-patch+json"
        )

    def delete(self, url_path: str) -> Obj:
        return self.request("DELETE", url_path)

    def watch(self, url_path: str, **query: str) -> Iterator[Obj]:
        """Yield watch events until the server ends the stream or `close_watches()`."""
        connection = http.client.HTTPConnection(self._host, self._port, timeout=None)
        with self._open_lock:
            self._open.add(connection)
        try:
            connection.request("GET", _with_query(url_path, {**query, "watch": "true"}))
            response = connection.getresponse()
            if response.status >= 300:
                raise _error(response.status, json.loads(response.read() or b"{}"))
            while line := response.readline():
                if line.strip():
                    event: Obj = json.loads(line)
                    yield event
        finally:
            with self._open_lock:
                self._open.discard(connection)
            connection.close()

    def close_watches(self) -> None:
        """End every open watch of this client (from another thread)."""
        with self._open_lock:
            open_now = list(self._open)
        for connection in open_now:
            if connection.sock is not None:
                with contextlib.suppress(OSError):
                    connection.sock.shutdown(socket.SHUT_RDWR)


def _with_query(url_path: str, query: Mapping[str, str] | None) -> str:
    return f"{url_path}?{urllib.parse.urlencode(query)}" if query else url_path


def _error(code: int, status: Any) -> errors.ApiError:
    if not isinstance(status, dict):
        status = {}
    return errors.ApiError(
        code,
        str(status.get("reason", "Unknown")),
        str(status.get("message", f"HTTP {code}")),
        details=status.get("details"),
    )
