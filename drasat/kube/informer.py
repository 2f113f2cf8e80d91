"""List + watch one kind into an in-memory cache, calling back on every change.

A thread lists, then watches from the list's resourceVersion; when the watch ends it resumes from
the last version seen; on 410 Gone or any error it lists again after a bounded backoff, and reports
the difference to the cache as events, so nothing is missed across dropped connections.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from drasat.kube import errors
from drasat.kube.client import Api, Obj
from drasat.kube.resources import Resource

log = logging.getLogger(__name__)

#: (event type ADDED|MODIFIED|DELETED, the object: for DELETED its last state)
Handler = Callable[[str, Obj], None]


def key_of(obj: Obj) -> str:
    """`namespace/name`, or `name` for a cluster-scoped object."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = str(metadata.get("name", ""))
    return f"{namespace}/{name}" if namespace else name


class Informer:
    def __init__(
        self,
        api: Api,
        resource: Resource,
        *,
        handler: Handler,
        namespace: str | None = None,
        watch_timeout_s: int = 30,
        backoff_s: tuple[float, float] = (0.1, 5.0),
    ) -> None:
        self.api = api
        self.resource = resource
        self.namespace = namespace
        self._handler = handler
        self._watch_timeout = watch_timeout_s
        self._backoff = backoff_s
        self._cache: dict[str, Obj] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._stream: Any = None
        self._thread: threading.Thread | None = None

    # Reading the cache.
    def get(self, key: str) -> Obj | None:
        with self._lock:
            return self._cache.get(key)

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._cache.values())

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    # Running.
    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"informer-{self.resource.plural}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_soon()
        if self._thread is not None:
            self._thread.join(timeout)

    def stop_soon(self) -> None:
        """Ask the thread to end (without waiting for it)."""
        self._stopping.set()
        stream = self._stream
        if stream is not None:
            stream.close()

    def _run(self) -> None:
        delay = self._backoff[0]
        while not self._stopping.is_set():
            try:
                version = self._relist()
                delay = self._backoff[0]
                while not self._stopping.is_set():
                    version = self._watch(version)
            except errors.Gone:
                log.info("watch %s: resourceVersion too old, listing again", self.resource.plural)
                continue
            except errors.KubeError as error:
                log.warning("watch %s: %s (retrying in %.1fs)", self.resource.plural, error, delay)
            except Exception:  # a handler bug must not end the informer
                log.exception("informer %s failed (retrying in %.1fs)", self.resource.plural, delay)
            self._stopping.wait(delay)
            delay = min(self._backoff[1], delay * 2)

    def _relist(self) -> str:
        listed = self.api.list(self.resource, namespace=self.namespace)
        fresh = {key_of(obj): obj for obj in listed.items}
        with self._lock:
            old, self._cache = self._cache, dict(fresh)
        for key, obj in fresh.items():
            previous = old.get(key)
            if previous is None:
                self._handler("ADDED", obj)
            elif _version(previous) != _version(obj):
                self._handler("MODIFIED", obj)
        for key, obj in old.items():
            if key not in fresh:
                self._handler("DELETED", obj)
        self._synced.set()
        return listed.resource_version

    def _watch(self, version: str) -> str:
        stream = self.api.watch(
            self.resource,
            namespace=self.namespace,
            resource_version=version,
            timeout_seconds=self._watch_timeout,
        )
        self._stream = stream
        try:
            for event in stream:
                if self._stopping.is_set():
                    break
                version = _version(event.object) or version
                if event.type == "BOOKMARK":
                    continue
                self._apply(event.type, event.object)
        finally:
            self._stream = None
            stream.close()
        return version

    def _apply(self, kind: str, obj: Obj) -> None:
        obj = self.resource.stamp(obj)
        key = key_of(obj)
        with self._lock:
            if kind == "DELETED":
                self._cache.pop(key, None)
            else:
                self._cache[key] = obj
        self._handler(kind, obj)


def _version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))
