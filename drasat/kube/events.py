"""Kubernetes Events (core/v1) about an object, deduplicated, never raising."""

from __future__ import annotations

import datetime
import logging
import threading
import uuid
from collections.abc import Callable

from drasat.kube import errors
from drasat.kube.client import Api, Obj
from drasat.kube.resources import EVENTS

log = logging.getLogger(__name__)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class EventRecorder:
    """Writes Events on objects; the same (object, reason, message) is written once per `ttl_s`."""

    def __init__(
        self,
        api: Api,
        *,
        component: str,
        instance: str = "",
        ttl_s: float = 300.0,
        clock: Callable[[], datetime.datetime] = _now,
    ) -> None:
        self.api = api
        self.component = component
        self.instance = instance
        self._ttl = datetime.timedelta(seconds=ttl_s)
        self._clock = clock
        self._sent: dict[tuple[str, str, str], datetime.datetime] = {}
        self._lock = threading.Lock()

    def warning(self, obj: Obj, reason: str, message: str) -> bool:
        return self.emit(obj, "Warning", reason, message)

    def normal(self, obj: Obj, reason: str, message: str) -> bool:
        return self.emit(obj, "Normal", reason, message)

    def emit(self, obj: Obj, kind: str, reason: str, message: str) -> bool:
        """Write the Event; False if it was a recent duplicate or the write failed."""
        metadata = obj.get("metadata") or {}
        now = self._clock()
        key = (str(metadata.get("uid") or _ref(obj)), reason, message)
        with self._lock:
            last = self._sent.get(key)
            if last is not None and now - last < self._ttl:
                return False
            self._sent[key] = now
            self._forget_before(now - self._ttl)
        log.log(
            logging.WARNING if kind == "Warning" else logging.INFO,
            "%s %s: %s: %s",
            obj.get("kind", "?"),
            _ref(obj),
            reason,
            message,
        )
        try:
            self.api.create(EVENTS, event(obj, kind, reason, message, self.component, now))
        except errors.KubeError as error:
            log.warning("could not record event on %s: %s", _ref(obj), error)
            return False
        return True

    def _forget_before(self, cutoff: datetime.datetime) -> None:
        for key in [k for k, t in self._sent.items() if t < cutoff]:
            del self._sent[key]


def event(
    obj: Obj, kind: str, reason: str, message: str, component: str, now: datetime.datetime
) -> Obj:
    """The core/v1 Event body (a pure function)."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace") or "default"
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    involved: Obj = {
        "apiVersion": obj.get("apiVersion", ""),
        "kind": obj.get("kind", ""),
        "name": metadata.get("name", ""),
    }
    for field in ("namespace", "uid", "resourceVersion"):
        if metadata.get(field):
            involved[field] = metadata[field]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{metadata.get('name', 'object')}.{uuid.uuid4().hex[:16]}",
            "namespace": namespace,
        },
        "involvedObject": involved,
        "reason": reason,
        "message": message[:1024],
        "type": kind,
        "count": 1,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "source": {"component": component},
        "reportingComponent": component,
    }


def _ref(obj: Obj) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = metadata.get("name", "?")
    return f"{namespace}/{name}" if namespace else str(name)
