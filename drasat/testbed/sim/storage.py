"""Object storage with the API server's write semantics, and the event history watches read.

One lock serializes writes (the simulated etcd); resourceVersions are one global counter, so a
resourceVersion from any list is a valid starting point for any watch.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import datetime
import random
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from drasat.testbed.sim import errors, resources

Obj = dict[str, Any]
#: Called with (resource, new object, old object or None) before every write commits.
ValidateFn = Callable[[resources.ResourceType, Obj, Obj | None], None]


@dataclasses.dataclass(frozen=True)
class Event:
    """One change: `old` is the object before a MODIFIED (selectors decide ADDED/DELETED)."""

    resource_version: int
    type: str
    store_key: tuple[str, str]
    namespace: str
    obj: Obj
    old: Obj | None = None


#: generateName: names of at most 63 characters, the last 5 random from this alphabet.
_NAME_MAX = 63
_NAME_RANDOM = 5
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _gone(meta: Obj) -> bool:
    """Deleted, no finalizers left and no grace period running."""
    return bool(
        meta.get("deletionTimestamp")
        and not meta.get("finalizers")
        and not meta.get("deletionGracePeriodSeconds")
    )


def _without(obj: Obj, *keys: str) -> Obj:
    return {key: value for key, value in obj.items() if key not in keys}


_SYSTEM_META = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
    "namespace",
    "name",
)


class Store:
    """Thread-safe objects of every resource plus a bounded history of changes."""

    def __init__(self, *, validate: ValidateFn, history: int = 10_000) -> None:
        self._validate = validate
        self._cond = threading.Condition(threading.RLock())
        self._objects: dict[tuple[str, str], dict[tuple[str, str], Obj]] = collections.defaultdict(
            dict
        )
        self._rv = 0
        self._events: collections.deque[Event] = collections.deque()
        self._history = history
        self._compacted = 0
        self._closed = False
        #: Resource types by store key, for garbage collection across kinds.
        self._types: dict[tuple[str, str], resources.ResourceType] = {}

    # --- reads --------------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        with self._cond:
            return str(self._rv)

    def get(self, rt: resources.ResourceType, namespace: str, name: str) -> Obj:
        with self._cond:
            return copy.deepcopy(self._current(rt, namespace, name))

    def list_objects(
        self, rt: resources.ResourceType, namespace: str | None
    ) -> tuple[list[Obj], str]:
        """All objects of a resource (in one namespace, or all); sorted by namespace and name."""
        with self._cond:
            bucket = self._objects[rt.store_key]
            items = [
                copy.deepcopy(obj)
                for (ns, _), obj in sorted(bucket.items())
                if namespace is None or ns == namespace
            ]
            return items, str(self._rv)

    def _current(self, rt: resources.ResourceType, namespace: str, name: str) -> Obj:
        obj = self._objects[rt.store_key].get((namespace, name))
        if obj is None:
            raise errors.not_found(plural=rt.plural, group=rt.group, name=name)
        return obj

    # --- writes -------------------------------------------------------------------------------

    def create(
        self,
        rt: resources.ResourceType,
        namespace: str,
        obj: Obj,
        *,
        validate: ValidateFn | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """Store a new object: assign name (generateName), uid, timestamps, generation."""
        with self._cond:
            self._types[rt.store_key] = rt
            new = copy.deepcopy(obj)
            meta = new.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generate_name(rt, namespace, meta["generateName"])
            name = str(meta.get("name") or "")
            if (namespace, name) in self._objects[rt.store_key]:
                raise errors.already_exists(plural=rt.plural, group=rt.group, name=name)
            if meta.get("resourceVersion"):
                # The real server's storage refuses it, with a 500 and no reason.
                raise errors.ApiError(
                    500, "", "resourceVersion should not be set on objects to be created"
                )
            for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
                meta.pop(key, None)
            meta.pop("generation", None)
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now())
            if rt.generation:
                meta["generation"] = 1
            if rt.namespaced:
                meta["namespace"] = namespace
            (validate or self._validate)(rt, new, None)
            if dry_run:
                return new
            return self._commit(rt, "ADDED", namespace, name, new, None)

    def _generate_name(self, rt: resources.ResourceType, namespace: str, prefix: str) -> str:
        # As apiserver's SimpleNameGenerator: the prefix cut to 58 characters, then 5 characters
        # of utilrand's alphabet (no vowels, no look-alikes).
        while True:
            suffix = "".join(random.choice(_NAME_ALPHABET) for _ in range(_NAME_RANDOM))
            name = prefix[: _NAME_MAX - _NAME_RANDOM] + suffix
            if (namespace, name) not in self._objects[rt.store_key]:
                return name

    def update(
        self,
        rt: resources.ResourceType,
        namespace: str,
        name: str,
        change: Callable[[Obj], Obj],
        *,
        subresource: str | None = None,
        validate: ValidateFn | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """Replace an object with `change(current)`, with the real server's rules.

        A `metadata.resourceVersion` in the result is a precondition (409 Conflict when stale).
        With a status subresource the main resource keeps the old status and `/status` changes
        only the status. Removing the last finalizer of a deleted object removes the object.
        """
        with self._cond:
            old = self._current(rt, namespace, name)
            candidate = change(copy.deepcopy(old))
            meta = candidate.get("metadata") or {}
            wanted = meta.get("resourceVersion")
            if wanted and str(wanted) != old["metadata"]["resourceVersion"]:
                raise errors.conflict(plural=rt.plural, group=rt.group, name=name)
            new = self._merge_owned(rt, old, candidate, subresource)
            if new == old:
                return copy.deepcopy(old)
            self._check_finalizers(rt, old, new)
            (validate or self._validate)(rt, new, old)
            if dry_run:
                return new
            if _gone(new["metadata"]):
                # The real store deletes what it holds: watchers get the object as it was
                # before this write (finalizers and all), not the write itself.
                return self._remove(rt, namespace, name, copy.deepcopy(old))
            return self._commit(rt, "MODIFIED", namespace, name, new, old)

    @staticmethod
    def _merge_owned(
        rt: resources.ResourceType, old: Obj, candidate: Obj, subresource: str | None
    ) -> Obj:
        if subresource == "status":
            new = copy.deepcopy(old)
            if "status" in candidate:
                new["status"] = copy.deepcopy(candidate["status"])
            else:
                new.pop("status", None)
            return new
        new = copy.deepcopy(candidate)
        meta = new.setdefault("metadata", {})
        for key in _SYSTEM_META:
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
            else:
                meta.pop(key, None)
        if rt.has_status:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        ignored = ("metadata", "status") if rt.has_status else ("metadata",)
        if rt.generation and _without(new, *ignored) != _without(old, *ignored):
            meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
        return new

    @staticmethod
    def _check_finalizers(rt: resources.ResourceType, old: Obj, new: Obj) -> None:
        if not old["metadata"].get("deletionTimestamp"):
            return
        added = set(new["metadata"].get("finalizers") or []) - set(
            old["metadata"].get("finalizers") or []
        )
        if added:
            raise errors.invalid(
                kind=rt.kind,
                group=rt.group,
                name=str(old["metadata"]["name"]),
                causes=[
                    (
                        "metadata.finalizers",
                        "no new finalizers can be added if the object is being deleted",
                    )
                ],
            )

    def delete(
        self,
        rt: resources.ResourceType,
        namespace: str,
        name: str,
        *,
        preconditions: dict[str, Any] | None = None,
        dry_run: bool = False,
        grace_seconds: int = 0,
    ) -> Obj:
        """Delete now, or mark deleted (deletionTimestamp) while finalizers remain.

        `grace_seconds` > 0 is a graceful deletion (pods on a node): the object is only marked,
        and goes when a later delete with no grace period (the kubelet's) finds no finalizers.
        """
        with self._cond:
            old = self._current(rt, namespace, name)
            pre = preconditions or {}
            if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
                raise errors.conflict(plural=rt.plural, group=rt.group, name=name)
            wanted = pre.get("resourceVersion")
            if wanted and str(wanted) != old["metadata"]["resourceVersion"]:
                raise errors.conflict(plural=rt.plural, group=rt.group, name=name)
            if dry_run:
                return copy.deepcopy(old)
            meta = old["metadata"]
            if grace_seconds > 0 or meta.get("finalizers"):
                marked = meta.get("deletionTimestamp") is not None
                current_grace = int(meta.get("deletionGracePeriodSeconds") or 0)
                grace = min(grace_seconds, current_grace) if marked else grace_seconds
                if marked and grace == current_grace:
                    return copy.deepcopy(old)
                new = copy.deepcopy(old)
                new["metadata"]["deletionGracePeriodSeconds"] = grace
                new["metadata"].setdefault("deletionTimestamp", _now())
                return self._commit(rt, "MODIFIED", namespace, name, new, old)
            return self._remove(rt, namespace, name, copy.deepcopy(old))

    def _remove(self, rt: resources.ResourceType, namespace: str, name: str, obj: Obj) -> Obj:
        del self._objects[rt.store_key][(namespace, name)]
        gone = self._commit(rt, "DELETED", namespace, name, obj, None, store=False)
        self._collect_dependents(str(obj["metadata"]["uid"]))
        return gone

    def _collect_dependents(self, owner_uid: str) -> None:
        """Background cascading deletion, as the garbage collector does for ownerReferences."""
        for key, bucket in list(self._objects.items()):
            for (namespace, name), obj in list(bucket.items()):
                owners = obj["metadata"].get("ownerReferences") or []
                if any(ref.get("uid") == owner_uid for ref in owners):
                    rt = self._types[key]
                    if (namespace, name) in self._objects[key]:
                        self.delete(rt, namespace, name)

    def _commit(
        self,
        rt: resources.ResourceType,
        kind: str,
        namespace: str,
        name: str,
        obj: Obj,
        old: Obj | None,
        *,
        store: bool = True,
    ) -> Obj:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        if store:
            self._objects[rt.store_key][(namespace, name)] = obj
        # Stored objects are never changed in place (writes replace them), so events share them.
        self._events.append(Event(self._rv, kind, rt.store_key, namespace, obj, old))
        while len(self._events) > self._history:
            self._compacted = self._events.popleft().resource_version
        self._cond.notify_all()
        return copy.deepcopy(obj)

    def drop_all(self, rt: resources.ResourceType) -> None:
        """Forget every object of a resource (its CRD was deleted), with DELETED events."""
        with self._cond:
            for (namespace, name), obj in sorted(self._objects[rt.store_key].items()):
                self._remove(rt, namespace, name, copy.deepcopy(obj))

    # --- watching -----------------------------------------------------------------------------

    def snapshot(self, rt: resources.ResourceType, namespace: str | None) -> tuple[list[Obj], int]:
        items, rv = self.list_objects(rt, namespace)
        return items, int(rv)

    def events_after(
        self,
        resource_version: int,
        *,
        timeout: float,
        interrupted: Callable[[], bool] = lambda: False,
    ) -> tuple[list[Event], int]:
        """Events newer than `resource_version`, waiting up to `timeout` for the first one.

        Returns the events and the resourceVersion to continue from; 410 Gone when the history
        no longer reaches back that far.
        """
        with self._cond:
            self._check_not_compacted(resource_version)
            self._cond.wait_for(
                lambda: self._rv > resource_version or self._closed or interrupted(),
                timeout=timeout,
            )
            self._check_not_compacted(resource_version)
            newer = list(self._newer(resource_version))
            newer.reverse()
            return newer, max(self._rv, resource_version)

    def _check_not_compacted(self, resource_version: int) -> None:
        if resource_version < self._compacted:
            raise errors.gone(f"too old resource version: {resource_version} ({self._compacted})")

    def _newer(self, resource_version: int) -> Iterator[Event]:
        for event in reversed(self._events):
            if event.resource_version <= resource_version:
                break
            yield event

    def wake(self) -> None:
        """Make waiting watches re-check their `interrupted` predicate (a fault changed)."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiting watch so the server can shut down."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed
