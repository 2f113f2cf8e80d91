"""The controller's side of the simulated API server, as the lifecycle model needs it.

`ModelApi` wraps the real client (`drasat.kube.client.KubeClient`, HTTP to the simulated API
server) that one controller replica is built with. It adds three things, none of which the
controller can tell from a real server:

- **catching up without sleeping**: every watch stream the replica's informers open is wrapped,
  and the resourceVersion of each event is recorded once the informer has handled it (when it
  asks for the next one); a list counts when the informer opens its watch after it. The model
  waits until each kind's recorded version reaches the server's newest of that kind
  (`Tracker.caught_up`), so a cycle always decides from caches that have seen every write;
- **API errors on any verb for a step** (`FaultPlan`): the next call of a verb on a kind (and
  optionally one object) made from the model's own thread (the cycle: informers are never
  faulted) answers 429, 500, 503, a timeout, or 409 — the errors `drasat.kube.errors.from_status`
  makes of those answers. A timeout of a write may come after the server applied it
  (`after_write`), as a real timeout can;
- **the Eviction API and PodDisruptionBudgets**, which the simulated server does not serve: an
  eviction deletes the pod (uid precondition checked first) unless a budget selecting it allows no
  disruption now (429, as the API server answers); the budgets are the model's (`budgets`), their
  `status.disruptionsAllowed` always current.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any

from drasat.controller.preemption import selects
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, ObjectList, Patch, WatchEvent
from drasat.kube.resources import Resource

Obj = dict[str, Any]

#: What a step's fault makes of a call: an HTTP status, or "timeout" (no answer).
FAULT_CODES = (429, 500, 503, 409, "timeout")
VERBS = ("get", "list", "create", "replace", "replace_status", "patch", "delete")


@dataclasses.dataclass
class Fault:
    """One injected error: the next `times` calls of `verb` on `plural` (of object `name`, when
    given) fail with `code`; `after_write`: a write is applied first (a timeout after it)."""

    verb: str
    plural: str
    code: int | str
    name: str | None = None
    times: int = 1
    #: Rounds it stays armed (`FaultPlan.tick` after each round).
    rounds: int = 1
    after_write: bool = False

    def matches(self, verb: str, plural: str, name: str | None) -> bool:
        return (
            self.times > 0
            and self.verb == verb
            and self.plural == plural
            and (self.name is None or self.name == name)
        )

    def error(self, verb: str, plural: str) -> errors.KubeError:
        where = f"{verb} {plural} (injected)"
        if self.code == "timeout":
            return errors.Unavailable(f"{where}: read timed out")
        reasons = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
                   409: "Conflict"}  # fmt: skip
        return errors.from_status(int(self.code), reasons.get(int(self.code), ""), where)


class FaultPlan:
    """The faults armed for the next cycles; `injected` counts what was met (verb, plural, code)."""

    def __init__(self) -> None:
        self.armed: list[Fault] = []
        self.injected: list[tuple[str, str, str]] = []
        self.thread: threading.Thread | None = None

    def arm(self, fault: Fault) -> None:
        self.armed.append(fault)

    def tick(self) -> None:
        """A round is over: faults whose rounds are spent (or whose calls are) go."""
        for fault in self.armed:
            fault.rounds -= 1
        self.armed = [f for f in self.armed if f.rounds > 0 and f.times > 0]

    def take(self, verb: str, plural: str, name: str | None) -> Fault | None:
        if threading.current_thread() is not self.thread:
            return None  # informers are never faulted
        for fault in self.armed:
            if fault.matches(verb, plural, name):
                fault.times -= 1
                self.injected.append((verb, plural, str(fault.code)))
                return fault
        return None


class Tracker:
    """The resourceVersion each watched kind's informer has handled, by plural."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seen: dict[str, int] = {}
        self._listed: dict[str, int] = {}

    def listed(self, plural: str, version: str) -> None:
        with self._lock:
            self._listed[plural] = _int(version)

    def watching(self, plural: str) -> None:
        """A watch opens after its list was handled (the informer lists, fills its cache, then
        watches): the list's version counts from now."""
        with self._lock:
            if plural in self._listed:
                self._bump(plural, self._listed.pop(plural))

    def handled(self, plural: str, version: str) -> None:
        with self._lock:
            self._bump(plural, _int(version))

    def _bump(self, plural: str, version: int) -> None:
        self.seen[plural] = max(self.seen.get(plural, 0), version)

    def caught_up(self, newest: Callable[[str], int]) -> bool:
        """Every kind listed so far is watched and has handled the newest write of its kind (a
        kind listed and not watched yet has not: writes after its list would be missed)."""
        with self._lock:
            kinds = set(self.seen) | set(self._listed)
            return bool(kinds) and all(self.seen.get(p, -1) >= newest(p) for p in kinds)


class _TrackedStream:
    def __init__(self, inner: Any, plural: str, tracker: Tracker) -> None:
        self._inner, self._plural, self._tracker = inner, plural, tracker

    def __iter__(self) -> Iterator[WatchEvent]:
        for event in self._inner:
            yield event
            # The informer asks for the next event only after it handled this one.
            version = (event.object.get("metadata") or {}).get("resourceVersion")
            if version:
                self._tracker.handled(self._plural, str(version))

    def close(self) -> None:
        self._inner.close()


class ModelApi:
    """`drasat.kube.client.Api` for one replica: the real client plus the module docstring's
    three additions."""

    def __init__(
        self,
        inner: KubeClient,
        faults: FaultPlan,
        tracker: Tracker,
        evicted: Callable[[str], None] = lambda pod: None,
        budgets: Callable[[], list[Obj]] = list,
        refused: Callable[[str, str], None] = lambda pod, budget: None,
    ) -> None:
        self.inner = inner
        self.faults = faults
        self.tracker = tracker
        #: Told of each pod this replica evicted (namespace/name).
        self.evicted = evicted
        #: The PodDisruptionBudgets now, with their status.
        self.budgets = budgets
        #: Told of each eviction a budget refused (namespace/name, the budget's name).
        self.refused = refused

    def _call(
        self, verb: str, resource: Resource, name: str | None, call: Callable[[], Any]
    ) -> Any:
        fault = self.faults.take(verb, resource.plural, name)
        if fault is None:
            return call()
        if fault.after_write and verb not in ("get", "list"):
            call()
        raise fault.error(verb, resource.plural)

    def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        return self._call(  # type: ignore[no-any-return]
            "get", resource, name, lambda: self.inner.get(resource, name, namespace=namespace)
        )

    def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList:
        if resource.plural == "poddisruptionbudgets":
            return ObjectList(self.budgets(), "0")  # the model's, never faulted

        def call() -> ObjectList:
            found = self.inner.list(
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
            )
            self.tracker.listed(resource.plural, found.resource_version)
            return found

        return self._call("list", resource, None, call)  # type: ignore[no-any-return]

    def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: str = "",
        timeout_seconds: int = 60,
    ) -> _TrackedStream:
        self.tracker.watching(resource.plural)
        stream = self.inner.watch(
            resource,
            namespace=namespace,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
        )
        return _TrackedStream(stream, resource.plural, self.tracker)

    def create(self, resource: Resource, body: Obj, *, namespace: str | None = None) -> Obj:
        if resource.kind == "Eviction":
            return self._call("create", r.PODS, None, lambda: self._evict(body, namespace))
        name = (body.get("metadata") or {}).get("name")
        return self._call(  # type: ignore[no-any-return]
            "create",
            resource,
            name,
            lambda: self.inner.create(resource, body, namespace=namespace),
        )

    def _evict(self, body: Obj, namespace: str | None) -> Obj:
        name = str((body.get("metadata") or {}).get("name", ""))
        uid = ((body.get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
        pod = self.inner.get(r.PODS, name, namespace=namespace)
        if uid and pod["metadata"].get("uid") != uid:
            raise errors.Conflict(f"pod {namespace}/{name}: uid precondition failed", status=409)
        for budget in self.budgets():
            meta = budget["metadata"]
            if (
                meta.get("namespace") == namespace
                and selects(budget["spec"].get("selector"), pod["metadata"].get("labels") or {})
                and int(budget["status"]["disruptionsAllowed"]) < 1
            ):
                self.refused(f"{namespace}/{name}", str(meta["name"]))
                raise errors.Unavailable(
                    "429 TooManyRequests: Cannot evict pod as it would violate the pod's "
                    f"disruption budget {meta['name']}",
                    status=429,
                    reason="TooManyRequests",
                )
        if (body.get("deleteOptions") or {}).get("dryRun"):
            return body  # checked, not done: as the API server answers a dry run
        self.inner.delete(r.PODS, name, namespace=namespace)
        self.evicted(f"{namespace}/{name}")
        return body

    def replace(self, resource: Resource, body: Obj) -> Obj:
        name = (body.get("metadata") or {}).get("name")
        return self._call(  # type: ignore[no-any-return]
            "replace", resource, name, lambda: self.inner.replace(resource, body)
        )

    def replace_status(self, resource: Resource, body: Obj) -> Obj:
        name = (body.get("metadata") or {}).get("name")
        return self._call(  # type: ignore[no-any-return]
            "replace_status", resource, name, lambda: self.inner.replace_status(resource, body)
        )

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: Patch,
        *,
        namespace: str | None = None,
        subresource: str = "",
    ) -> Obj:
        return self._call(  # type: ignore[no-any-return]
            "patch",
            resource,
            name,
            lambda: self.inner.patch(
                resource, name, patch, namespace=namespace, subresource=subresource
            ),
        )

    def delete(
        self, resource: Resource, name: str, *, namespace: str | None = None, uid: str | None = None
    ) -> None:
        self._call(
            "delete",
            resource,
            name,
            lambda: self.inner.delete(resource, name, namespace=namespace, uid=uid),
        )


def _int(version: str) -> int:
    try:
        return int(version)
    except ValueError:
        return 0
