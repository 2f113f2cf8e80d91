"""An in-memory `drasat.kube.client.Api` for fast controller tests, with fault injection.

It keeps what the controller relies on: resourceVersion (409 on stale writes), 404, AlreadyExists,
finalizers + deletionTimestamp, the status subresource (spec and status written apart), merge
patches, and watches that replay from a resourceVersion (410 when too old). Faults: `conflict_first`
(every first write of an object answers 409), `down` (every call fails as unreachable),
`fail(verb, plural, error)` (a chosen call answers with an error: a 429, a 5xx, a timeout), and
`drop_watches()`.
"""

from __future__ import annotations

import copy
import datetime
import queue
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from drasat.kube import errors
from drasat.kube.client import ObjectList, Patch, WatchEvent
from drasat.kube.resources import Resource

Obj = dict[str, Any]


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


class _Stream:
    def __init__(self, api: FakeApi, kind: str, namespace: str | None) -> None:
        self.api, self.kind, self.namespace = api, kind, namespace
        self.queue: queue.Queue[WatchEvent | None] = queue.Queue()
        self.closed = False

    def __iter__(self) -> Iterator[WatchEvent]:
        while not self.closed:
            try:
                item = self.queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if item is None:
                return
            yield item

    def close(self) -> None:
        self.closed = True
        self.queue.put(None)
        self.api._forget(self)


@dataclass
class Failure:
    """Calls of `verb` on `plural` (and `name`, when given) answer `error`, `times` times (None:
    until removed)."""

    verb: str
    plural: str
    error: errors.KubeError
    name: str | None = None
    times: int | None = None
    #: How many calls it answered.
    hits: int = 0

    def matches(self, verb: str, plural: str, name: str | None) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        return (self.verb in (verb, "*") and self.plural in (plural, "*")
                and self.name in (None, name))  # fmt: skip


def too_many_requests(what: str = "injected") -> errors.KubeError:
    """What a rate-limited API server (API Priority and Fairness) answers."""
    return errors.from_status(429, "TooManyRequests", f"{what}: too many requests")


def server_error(what: str = "injected") -> errors.KubeError:
    return errors.from_status(500, "InternalError", f"{what}: internal error")


def timed_out(what: str = "injected") -> errors.KubeError:
    """What the client raises when a request times out (`KubeClient`: urllib3's timeout)."""
    return errors.Unavailable(f"{what}: read timed out")


class FakeApi:
    def __init__(self, *, history: int = 10_000) -> None:
        self.lock = threading.RLock()
        self.objects: dict[tuple[str, str, str], Obj] = {}  # (kind key, namespace, name)
        self.version = 0
        self.log: list[tuple[int, str, str, WatchEvent]] = []  # (rv, kind key, ns, event)
        self.history = history
        self.streams: list[_Stream] = []
        self.conflict_first = False
        self._written: set[tuple[str, str, str, str]] = set()
        self.down = False
        self.failures: list[Failure] = []
        self.calls: list[tuple[str, str]] = []  # (verb, plural)

    # Faults.
    def drop_watches(self) -> None:
        with self.lock:
            streams = list(self.streams)
        for stream in streams:
            stream.close()

    def fail(
        self,
        verb: str,
        plural: str,
        error: errors.KubeError | None = None,
        *,
        name: str | None = None,
        times: int | None = None,
    ) -> Failure:
        """Calls of `verb` ("*": any) on `plural` ("*": any; `name`: that object only) answer
        `error` (a 500 by default), `times` times or until `failures` is cleared."""
        found = Failure(verb, plural, error or server_error(f"{verb} {plural}"), name, times)
        self.failures.append(found)
        return found

    @contextmanager
    def unfailing(self) -> Iterator[None]:
        """The test's own calls, answered whatever `failures` says."""
        kept, self.failures = self.failures, []
        try:
            yield
        finally:
            self.failures = kept

    def _check(self, verb: str, resource: Resource, name: str | None = None) -> None:
        self.calls.append((verb, resource.plural))
        if self.down:
            raise errors.Unavailable(f"{verb} {resource.plural}: connection refused")
        for failure in self.failures:
            if failure.matches(verb, resource.plural, name):
                failure.hits += 1
                raise failure.error

    def _maybe_conflict(self, key: tuple[str, str, str], verb: str) -> None:
        if self.conflict_first and (*key, verb) not in self._written:
            self._written.add((*key, verb))
            raise errors.Conflict(f"injected conflict on {verb} {key}", status=409)

    # Helpers.
    @staticmethod
    def _kind(resource: Resource) -> str:
        return f"{resource.group}/{resource.plural}"

    def _key(self, resource: Resource, namespace: str | None, name: str) -> tuple[str, str, str]:
        return (self._kind(resource), (namespace or "") if resource.namespaced else "", name)

    def _emit(self, resource: Resource, kind: str, obj: Obj) -> None:
        event = WatchEvent(kind, copy.deepcopy(obj))
        namespace = (obj.get("metadata") or {}).get("namespace") or ""
        self.log.append((self.version, self._kind(resource), namespace, event))
        del self.log[: -self.history]
        for stream in list(self.streams):
            if stream.kind == self._kind(resource) and stream.namespace in (None, namespace):
                stream.queue.put(event)

    def _forget(self, stream: _Stream) -> None:
        with self.lock:
            if stream in self.streams:
                self.streams.remove(stream)

    def _store(self, resource: Resource, key: tuple[str, str, str], obj: Obj, kind: str) -> Obj:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self.objects.pop(key, None)
            self._emit(resource, "DELETED", obj)
        else:
            self.objects[key] = obj
            self._emit(resource, kind, obj)
        return copy.deepcopy(obj)

    # Api.
    def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        with self.lock:
            self._check("get", resource, name)
            obj = self.objects.get(self._key(resource, namespace, name))
            if obj is None:
                raise errors.NotFound(f"{resource.plural} {namespace}/{name} not found", status=404)
            return copy.deepcopy(obj)

    def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList:
        with self.lock:
            self._check("list", resource)
            kind = self._kind(resource)
            items = [
                copy.deepcopy(obj)
                for (k, ns, _), obj in sorted(self.objects.items())
                if k == kind and (namespace is None or ns == namespace)
            ]
            return ObjectList(items, str(self.version))

    def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: str = "",
        timeout_seconds: int = 60,
    ) -> _Stream:
        with self.lock:
            self._check("watch", resource)
            stream = _Stream(self, self._kind(resource), namespace)
            since = int(resource_version or self.version)
            if self.log and since < self.log[0][0] - 1:
                raise errors.Gone("too old resource version", status=410)
            for rv, kind, ns, event in self.log:
                if rv > since and kind == stream.kind and namespace in (None, ns):
                    stream.queue.put(event)
            self.streams.append(stream)
            return stream

    def create(self, resource: Resource, body: Obj, *, namespace: str | None = None) -> Obj:
        with self.lock:
            self._check("create", resource, (body.get("metadata") or {}).get("name"))
            obj = resource.stamp(copy.deepcopy(body))
            meta = obj.setdefault("metadata", {})
            if namespace and resource.namespaced:
                meta["namespace"] = namespace
            if not meta.get("name"):
                meta["name"] = meta.get("generateName", "obj-") + uuid.uuid4().hex[:5]
            key = self._key(resource, meta.get("namespace"), meta["name"])
            if key in self.objects:
                raise errors.AlreadyExists(f"{key} exists", status=409, reason="AlreadyExists")
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
            return self._store(resource, key, obj, "ADDED")

    def _update(self, resource: Resource, body: Obj, status: bool) -> Obj:
        meta = body.get("metadata") or {}
        key = self._key(resource, meta.get("namespace"), meta.get("name", ""))
        current = self.objects.get(key)
        if current is None:
            raise errors.NotFound(f"{key} not found", status=404)
        version = meta.get("resourceVersion")
        if version and version != current["metadata"]["resourceVersion"]:
            raise errors.Conflict(f"{key}: stale resourceVersion {version}", status=409)
        self._maybe_conflict(key, "status" if status else "update")
        new = copy.deepcopy(current)
        if status:
            if "status" in body:
                new["status"] = copy.deepcopy(body["status"])
            else:
                new.pop("status", None)
        else:
            new = {k: copy.deepcopy(v) for k, v in body.items() if k != "status"}
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            keep = ("uid", "creationTimestamp", "deletionTimestamp")
            for field in keep:
                if field in current["metadata"]:
                    new["metadata"][field] = current["metadata"][field]
        return self._store(resource, key, new, "MODIFIED")

    def replace(self, resource: Resource, body: Obj) -> Obj:
        with self.lock:
            self._check("replace", resource, (body.get("metadata") or {}).get("name"))
            return self._update(resource, body, status=False)

    def replace_status(self, resource: Resource, body: Obj) -> Obj:
        with self.lock:
            self._check("replace_status", resource, (body.get("metadata") or {}).get("name"))
            return self._update(resource, body, status=True)

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: Patch,
        *,
        namespace: str | None = None,
        subresource: str = "",
    ) -> Obj:
        assert isinstance(patch, dict), "the fake applies merge patches only"
        with self.lock:
            self._check("patch", resource, name)
            key = self._key(resource, namespace, name)
            current = self.objects.get(key)
            if current is None:
                raise errors.NotFound(f"{key} not found", status=404)
            version = (patch.get("metadata") or {}).get("resourceVersion")
            if version and version != current["metadata"]["resourceVersion"]:
                raise errors.Conflict(f"{key}: stale resourceVersion {version}", status=409)
            new = merge(current, patch)
            if subresource == "status":
                new = {**current, "status": new.get("status")}
                if new["status"] is None:
                    new.pop("status")
            else:
                new["metadata"]["uid"] = current["metadata"]["uid"]
                new.pop("status", None)
                if "status" in current:
                    new["status"] = current["status"]
            return self._store(resource, key, new, "MODIFIED")

    def delete(
        self, resource: Resource, name: str, *, namespace: str | None = None, uid: str | None = None
    ) -> None:
        with self.lock:
            self._check("delete", resource, name)
            key = self._key(resource, namespace, name)
            current = self.objects.get(key)
            if current is None:
                raise errors.NotFound(f"{key} not found", status=404)
            if uid and current["metadata"].get("uid") != uid:
                raise errors.Conflict(f"{key}: uid precondition {uid} failed", status=409)
            if current["metadata"].get("finalizers"):
                if not current["metadata"].get("deletionTimestamp"):
                    new = copy.deepcopy(current)
                    new["metadata"]["deletionTimestamp"] = _now()
                    self._store(resource, key, new, "MODIFIED")
                return
            del self.objects[key]
            self.version += 1
            gone = copy.deepcopy(current)
            gone["metadata"]["resourceVersion"] = str(self.version)
            self._emit(resource, "DELETED", gone)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
