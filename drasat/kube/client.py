"""A small typed client over the official `kubernetes` library: plain dicts in and out.

Every kind goes through one generic code path (the library's `ApiClient` request layer, as its
`CustomObjectsApi` does): bodies are dicts, answers are the server's JSON, so alpha kinds such as
`resource.k8s.io/v1alpha2` lose no field to the library's typed models. Errors are our own
(`drasat.kube.errors`). Requests are paced by a token bucket (QPS and burst, as client-go does).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import urllib3
from kubernetes import client as _client
from kubernetes import config as _config

from drasat.api.inputerrors import InputError
from drasat.kube import errors
from drasat.kube.resources import Resource

log = logging.getLogger(__name__)

# The library is typed only in part; drasat sees it through `Any`.
k8s: Any = _client
k8s_config: Any = _config

Obj = dict[str, Any]

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

#: A JSON merge patch (a dict) or a JSON patch (a list of operations).
Patch = Obj | list[Obj]


@dataclass(frozen=True)
class ObjectList:
    items: list[Obj]
    resource_version: str


@dataclass(frozen=True)
class WatchEvent:
    #: ADDED | MODIFIED | DELETED | BOOKMARK
    type: str
    object: Obj


class WatchStream(Protocol):
    def __iter__(self) -> Iterator[WatchEvent]: ...

    def close(self) -> None: ...


class Api(Protocol):
    """What the controller and the node plugin need from the Kubernetes API."""

    def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj: ...

    def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList: ...

    def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: str = "",
        timeout_seconds: int = 60,
    ) -> WatchStream: ...

    def create(self, resource: Resource, body: Obj, *, namespace: str | None = None) -> Obj: ...

    def replace(self, resource: Resource, body: Obj) -> Obj: ...

    def replace_status(self, resource: Resource, body: Obj) -> Obj: ...

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: Patch,
        *,
        namespace: str | None = None,
        subresource: str = "",
    ) -> Obj: ...

    def delete(
        self, resource: Resource, name: str, *, namespace: str | None = None, uid: str | None = None
    ) -> None:
        """Delete the object; with `uid`, only while the name is that object's (a precondition:
        Conflict when another object of the name has been created since). A pod gets the grace
        period its spec asks for."""
        ...


class RateLimiter:
    """Token bucket: `qps` tokens a second, at most `burst` saved. qps <= 0: no limit."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take a token; return how long the caller must wait before using it."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def wait(self) -> None:
        delay = self.reserve()
        if delay > 0:
            self._sleep(delay)


def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A `kubernetes.client.Configuration`: the kubeconfig if given, else in-cluster, else the
    default kubeconfig (`$KUBECONFIG`, `~/.kube/config`)."""
    configuration = k8s.Configuration()
    try:
        if kubeconfig:
            k8s_config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
            return configuration
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except k8s_config.ConfigException:
            k8s_config.load_kube_config(context=context, client_configuration=configuration)
    except (k8s_config.ConfigException, OSError) as error:
        raise InputError(
            f"no usable Kubernetes configuration: {error}", where="kubeconfig"
        ) from None
    return configuration


#: Where a pod's service account token mounts its namespace (kubectl reads it in a pod).
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def default_namespace(kubeconfig: str | None = None) -> str:
    """The namespace kubectl uses without `-n`: the current context's of the kubeconfig (the
    given one, else `$KUBECONFIG` or `~/.kube/config`), else inside a pod the pod's own, else
    `default`."""
    try:
        _, current = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
    except (k8s_config.ConfigException, OSError):
        in_pod = Path(SERVICE_ACCOUNT_NAMESPACE)
        if not kubeconfig and in_pod.is_file():
            return in_pod.read_text().strip() or "default"
        return "default"
    return str(((current or {}).get("context") or {}).get("namespace") or "default")


def configuration_for(host: str) -> Any:
    """A Configuration for a plain-HTTP server (tests, the in-process API server)."""
    configuration = k8s.Configuration(host=host)
    return configuration


@dataclass
class _Stream:
    response: Any
    resource: Resource
    _closed: bool = field(default=False)

    def __iter__(self) -> Iterator[WatchEvent]:
        buffer = b""
        try:
            for chunk in self.response.stream(amt=None, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield self._event(line)
            if buffer.strip():
                yield self._event(buffer)
        except (urllib3.exceptions.HTTPError, OSError, AttributeError, ValueError) as error:
            # (urllib3 raises AttributeError/ValueError when the connection closes under it)
            if not self._closed:
                raise errors.Unavailable(f"watch {self.resource.plural}: {error}") from None
        finally:
            self.close()

    def _event(self, line: bytes) -> WatchEvent:
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            raise errors.Unavailable(f"watch {self.resource.plural}: bad event line") from None
        kind, obj = data.get("type", ""), data.get("object") or {}
        if kind == "ERROR":
            raise errors.from_status(
                int(obj.get("code", 500)), str(obj.get("reason", "")), str(obj.get("message", ""))
            )
        return WatchEvent(kind, obj)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                # Shut the socket down first: that wakes a thread blocked reading it.
                sock = getattr(getattr(self.response, "connection", None), "sock", None)
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                self.response.close()
                self.response.release_conn()
            except Exception:  # closing a dead connection may fail in many ways
                log.debug("closing watch stream", exc_info=True)


#: Connections a client keeps open to the server. One client carries a controller's watches
#: (one long request each, up to 7), its parallel writes (8 by default), events and the lease;
#: urllib3's default of 10 made it drop a connection after nearly every write under load and
#: open a new one (TLS included) for the next.
CONNECTIONS = 32


class KubeClient:
    """The real `Api`: talks to a server through the official client's request layer."""

    def __init__(
        self,
        configuration: Any,
        *,
        qps: float = 0.0,
        burst: int = 10,
        request_timeout: float = 30.0,
        connections: int = CONNECTIONS,
    ) -> None:
        # Set before the ApiClient exists: it sizes its connection pool once, from this.
        configuration.connection_pool_maxsize = max(
            connections, configuration.connection_pool_maxsize or 0
        )
        self._api: Any = k8s.ApiClient(configuration)
        self._limiter = RateLimiter(qps, burst)
        self._timeout = request_timeout

    def close(self) -> None:
        self._api.close()

    # The one request path.
    def _request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = JSON,
        stream: bool = False,
        timeout: float | tuple[float, float] | None = None,
    ) -> Any:
        self._limiter.wait()
        headers = {"Accept": JSON, "Content-Type": content_type}
        request = self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self._api.call_api(
                *request, _request_timeout=timeout if timeout is not None else self._timeout
            )
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise errors.Unavailable(f"{method} {path}: {error}") from None
        if not 200 <= response.status <= 299:
            raise self._error(method, path, response)
        if stream:
            return response.response
        data = response.read()
        return json.loads(data) if data else {}

    @staticmethod
    def _error(method: str, path: str, response: Any) -> errors.KubeError:
        try:
            raw = response.read()
            status = json.loads(raw) if raw else {}
        except (json.JSONDecodeError, urllib3.exceptions.HTTPError, OSError):
            status = {}
        if not isinstance(status, dict):
            status = {}
        message = str(status.get("message", "")) or f"{method} {path}"
        reason = str(status.get("reason", "")) or str(response.reason or "")
        return errors.from_status(int(response.status), reason, message)

    # Api
    def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        result: Obj = self._request("GET", resource.path(namespace=namespace, name=name))
        return result

    def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList:
        query = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        data = self._request("GET", resource.path(namespace=namespace), query=query)
        items = [resource.stamp(item) for item in data.get("items") or []]
        return ObjectList(items, str((data.get("metadata") or {}).get("resourceVersion", "")))

    def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: str = "",
        timeout_seconds: int = 60,
    ) -> WatchStream:
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        response = self._request(
            "GET",
            resource.path(namespace=namespace),
            query=query,
            stream=True,
            timeout=(self._timeout, timeout_seconds + 5),
        )
        return _Stream(response, resource)

    def create(self, resource: Resource, body: Obj, *, namespace: str | None = None) -> Obj:
        namespace = namespace or (body.get("metadata") or {}).get("namespace")
        result: Obj = self._request(
            "POST", resource.path(namespace=namespace), body=resource.stamp(body)
        )
        return result

    def create_dry_run(self, resource: Resource, body: Obj, *, namespace: str | None = None) -> Obj:
        """The object as the server would store it (defaults set, the fields a turned-off
        feature gate drops dropped), after validation and admission; nothing is stored."""
        namespace = namespace or (body.get("metadata") or {}).get("namespace")
        result: Obj = self._request(
            "POST",
            resource.path(namespace=namespace),
            query=[("dryRun", "All")],
            body=resource.stamp(body),
        )
        return result

    def served_kinds(self, group_version: str) -> frozenset[str]:
        """The kinds of the top-level resources the server serves in `group_version` (e.g.
        `resource.k8s.io/v1`); none where it serves no such version (discovery answers 404)."""
        path = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        try:
            found = self._request("GET", path)
        except errors.NotFound:
            return frozenset()
        return frozenset(
            str(entry.get("kind"))
            for entry in found.get("resources") or []
            if "/" not in str(entry.get("name", ""))
        )

    def replace(self, resource: Resource, body: Obj) -> Obj:
        result: Obj = self._request("PUT", _object_path(resource, body), body=body)
        return result

    def replace_status(self, resource: Resource, body: Obj) -> Obj:
        result: Obj = self._request("PUT", _object_path(resource, body, "status"), body=body)
        return result

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: Patch,
        *,
        namespace: str | None = None,
        subresource: str = "",
    ) -> Obj:
        """A JSON merge patch (a dict) or a JSON patch (a list of operations)."""
        content_type = JSON_PATCH if isinstance(patch, list) else MERGE_PATCH
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        result: Obj = self._request("PATCH", path, body=patch, content_type=content_type)
        return result

    def delete(
        self, resource: Resource, name: str, *, namespace: str | None = None, uid: str | None = None
    ) -> None:
        options = None
        if uid:
            options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        self._request("DELETE", resource.path(namespace=namespace, name=name), body=options)


def _object_path(resource: Resource, body: Obj, subresource: str = "") -> str:
    metadata = body.get("metadata") or {}
    return resource.path(
        namespace=metadata.get("namespace") if resource.namespaced else None,
        name=str(metadata.get("name", "")),
        subresource=subresource,
    )
