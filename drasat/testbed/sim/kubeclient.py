"""A tiny JSON client for the Kubernetes REST API on http.client, for the simulated actors.

They must not use the official client (only drasat.kube may), and need little: get, list,
create, merge-patch, delete and a line-by-line watch. Errors arrive as `errors.ApiError`.

It speaks plain http to the simulated API server, and https to a real one: the server's
certificate checked against the cluster's CA, requests authenticated with a bearer token
(`KubeClient.from_kubeconfig` reads both from a kubeconfig file).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from drasat import loading
from drasat.api.inputerrors import InputError
from drasat.testbed.sim import errors

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
    """One server URL (`http://127.0.0.1:port`, or `https://...` with `ssl_context` and
    `token`); thread-safe (a connection per thread)."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 10.0,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or parsed.hostname is None:
            raise ValueError(f"expected an http:// or https:// URL, got {url!r}")
        self.url = url
        self._https = parsed.scheme == "https"
        self._host = parsed.hostname
        self._port = parsed.port or (443 if self._https else 80)
        self._prefix = parsed.path.rstrip("/")
        self._timeout = timeout
        self._ssl = ssl_context
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        self._open: set[http.client.HTTPConnection] = set()
        self._open_lock = threading.Lock()
        self._local = threading.local()

    @classmethod
    def from_kubeconfig(
        cls, path: str | Path, *, context: str | None = None, timeout: float = 10.0
    ) -> KubeClient:
        """A client for the cluster and user of a kubeconfig's context (its current one by
        default): server URL, CA (`certificate-authority-data` or `certificate-authority`),
        bearer token (`token` or `tokenFile`). Other ways to authenticate (client certificates,
        exec plugins) are refused with an InputError."""
        return cls(timeout=timeout, **kubeconfig_settings(path, context=context))

    def _new_connection(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._https:
            if self._ssl is None:  # the system's trust store
                self._ssl = ssl.create_default_context()
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout, context=self._ssl
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self, extra: Mapping[str, str]) -> dict[str, str]:
        return {"Accept": "application/json", **self._auth, **extra}

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
        # Compact, as kubectl and client-go send it: kube-apiserver keeps opaque parameters
        # (RawExtension) byte for byte, and a later JSON metadata change of an object created
        # with spaces there is refused as a spec change.
        data = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        headers = self._headers({"Content-Type": content_type} if data is not None else {})
        connection = self._connection()
        target = self._prefix + _with_query(url_path, query)
        try:
            connection.request(method, target, body=data, headers=headers)
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
            connection = self._new_connection(self._timeout)
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
        connection = self._new_connection(None)
        with self._open_lock:
            self._open.add(connection)
        try:
            target = self._prefix + _with_query(url_path, {**query, "watch": "true"})
            connection.request("GET", target, headers=self._headers({}))
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
                    # The plain socket's shutdown, also under TLS: it wakes the reading thread
                    # (SSLSocket.shutdown would first unwrap the TLS object under it).
                    socket.socket.shutdown(connection.sock, socket.SHUT_RDWR)


def kubeconfig_settings(path: str | Path, *, context: str | None = None) -> dict[str, Any]:
    """`url`, `token` and `ssl_context` for KubeClient from a kubeconfig file (YAML or JSON,
    read with drasat's loader)."""
    where = str(path)
    documents = loading.read_documents(path)
    config = documents[0].data if documents else {}

    def named(section: str, name: str) -> dict[str, Any]:
        for entry in config.get(section) or []:
            if isinstance(entry, dict) and entry.get("name") == name:
                value = entry.get(section[:-1]) or {}
                if isinstance(value, dict):
                    return value
        raise InputError(f"no {section[:-1]} named {name!r}", where=where)

    chosen = context or config.get("current-context")
    if not chosen:
        raise InputError("no context given and no current-context", where=where)
    ctx = named("contexts", str(chosen))
    cluster = named("clusters", str(ctx.get("cluster", "")))
    user = named("users", str(ctx["user"])) if ctx.get("user") else {}
    url = str(cluster.get("server") or "")
    if not url:
        raise InputError(f"cluster of context {chosen!r} has no server", where=where)
    base = Path(path).parent
    try:
        context_ssl = ssl.create_default_context()
        if cluster.get("insecure-skip-tls-verify"):
            context_ssl.check_hostname = False
            context_ssl.verify_mode = ssl.CERT_NONE
        elif cluster.get("certificate-authority-data"):
            pem = base64.b64decode(str(cluster["certificate-authority-data"])).decode()
            context_ssl = ssl.create_default_context(cadata=pem)
        elif cluster.get("certificate-authority"):
            context_ssl = ssl.create_default_context(
                cafile=str(base / str(cluster["certificate-authority"]))
            )
        token = user.get("token")
        if not token and user.get("tokenFile"):
            token = (base / str(user["tokenFile"])).read_text().strip()
    except (OSError, ValueError) as error:  # ssl.SSLError is an OSError; bad base64 a ValueError
        raise InputError(f"context {chosen!r}: {error}", where=where) from None
    unsupported = sorted(set(user) - {"token", "tokenFile"})
    if unsupported and not token:
        raise InputError(
            f"user of context {chosen!r}: only bearer tokens are supported, not {unsupported}",
            where=where,
        )
    return {"url": url, "token": str(token) if token else None, "ssl_context": context_ssl}


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
