"""Access to this node's NodeAllocationState: a small interface, in memory or through drasat.kube.

The node plugin reads `spec.allocatedClaims` and writes `spec.allocatableDevices`,
`spec.preparedClaims` and `status`. Writes go through `update(mutate)`: the store reads the object,
the mutate function changes the model in place and returns whether it changed anything, and the
store retries on a conflicting write (drasat.kube.nasclient.update does this against the API
server). The prepare path uses `allocated_claim` and `set_prepared`, which touch only the claim's
own entries of the raw object: parsing (and, in memory, deep-copying) the whole NAS with every
device's placements for each claim was most of a prepare's time.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import ValidationError

from drasat.api.inputerrors import describe_validation_error
from drasat.api.nas import AllocatedDevices, NodeAllocationState, PreparedDevices
from drasat.kube import errors as kube_errors
from drasat.kube import events as kube_events
from drasat.kube import nasclient
from drasat.kube import resources as kube_resources
from drasat.kube.client import Api

#: Changes the NAS in place; returns False when nothing changed (no write).
Mutate = Callable[[NodeAllocationState], bool]


class NasError(Exception):
    """The NAS could not be read or written (missing, invalid, API unreachable)."""


class NasStore(Protocol):
    node: str
    namespace: str

    def read(self) -> NodeAllocationState: ...

    def update(self, mutate: Mutate, *, create: bool = False) -> NodeAllocationState: ...

    def allocated_claim(self, uid: str) -> AllocatedDevices | None:
        """`spec.allocatedClaims[uid]` (None when absent), validating only that entry."""
        ...

    def set_prepared(self, uid: str, prepared: PreparedDevices | None) -> bool:
        """Write (or, for None, remove) `spec.preparedClaims[uid]`; False when already so."""
        ...

    def warn(self, reason: str, message: str) -> None:
        """A Warning Event on the NAS (what an operator of the node must look at); never
        raises."""
        ...


def _parse(obj: dict[str, Any], where: str) -> NodeAllocationState:
    try:
        return NodeAllocationState.model_validate(obj)
    except ValidationError as error:
        raise NasError(f"{where}: invalid: {describe_validation_error(error)}") from None


def _allocated_entry(obj: dict[str, Any], uid: str, where: str) -> AllocatedDevices | None:
    """One allocatedClaims entry of a raw NAS object, validated alone: a prepare reads only its
    own claim, so it does not parse (or fail on) the rest of the object."""
    spec = obj.get("spec") or {}
    claims = spec.get("allocatedClaims") or {}
    if not isinstance(claims, dict):
        raise NasError(f"{where}: invalid: spec.allocatedClaims is not an object")
    entry = claims.get(uid)
    if entry is None:
        return None
    try:
        return AllocatedDevices.model_validate(entry)
    except ValidationError as error:
        message = describe_validation_error(error)
        raise NasError(f"{where}: invalid: spec.allocatedClaims.{uid}: {message}") from None


def _put_prepared(obj: dict[str, Any], uid: str, prepared: PreparedDevices | None) -> bool:
    """Set or remove preparedClaims[uid] in a raw NAS object; False when it already was so."""
    spec = obj.setdefault("spec", {})
    entries = spec.get("preparedClaims")
    if not isinstance(entries, dict):
        entries = spec["preparedClaims"] = {}
    if prepared is None:
        return entries.pop(uid, None) is not None
    body = prepared.dump()
    if entries.get(uid) == body:
        return False
    entries[uid] = body
    return True


class MemoryNasStore:
    """A NAS held in memory (tests, `drasat nodeplugin` without a cluster)."""

    def __init__(self, *, node: str, namespace: str, obj: dict[str, Any] | None = None) -> None:
        self.node = node
        self.namespace = namespace
        self.obj = copy.deepcopy(obj) if obj is not None else None
        self.writes = 0
        #: The Warning Events written on the NAS: (reason, message).
        self.events: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def read(self) -> NodeAllocationState:
        with self._lock:
            if self.obj is None:
                raise NasError(f"NodeAllocationState {self.namespace}/{self.node} not found")
            return _parse(copy.deepcopy(self.obj), f"NodeAllocationState {self.node}")

    def update(self, mutate: Mutate, *, create: bool = False) -> NodeAllocationState:
        with self._lock:
            if self.obj is None:
                if not create:
                    raise NasError(f"NodeAllocationState {self.namespace}/{self.node} not found")
                self.obj = nasclient.new(namespace=self.namespace, node=self.node)
            model = _parse(copy.deepcopy(self.obj), f"NodeAllocationState {self.node}")
            if mutate(model):
                metadata = self.obj.get("metadata", {})
                self.obj = model.dump()
                self.obj["metadata"] = metadata
                self.writes += 1
            return model

    def allocated_claim(self, uid: str) -> AllocatedDevices | None:
        with self._lock:
            if self.obj is None:
                raise NasError(f"NodeAllocationState {self.namespace}/{self.node} not found")
            # validation copies what it keeps, so the stored object is not shared
            return _allocated_entry(self.obj, uid, f"NodeAllocationState {self.node}")

    def set_prepared(self, uid: str, prepared: PreparedDevices | None) -> bool:
        with self._lock:
            if self.obj is None:
                raise NasError(f"NodeAllocationState {self.namespace}/{self.node} not found")
            changed = _put_prepared(self.obj, uid, prepared)
            self.writes += changed
            return changed

    def warn(self, reason: str, message: str) -> None:
        with self._lock:
            self.events.append((reason, message))

    def allocate(self, uid: str, allocation: dict[str, Any]) -> None:
        """Test helper: what the controller does (write spec.allocatedClaims[uid])."""
        with self._lock:
            assert self.obj is not None
            self.obj.setdefault("spec", {}).setdefault("allocatedClaims", {})[uid] = allocation

    def deallocate(self, uid: str) -> None:
        with self._lock:
            assert self.obj is not None
            self.obj.get("spec", {}).get("allocatedClaims", {}).pop(uid, None)


class KubeNasStore:
    """The NAS on the API server, through drasat.kube (optimistic concurrency with retries)."""

    def __init__(self, api: Api, *, node: str, namespace: str, node_uid: str | None = None) -> None:
        self.api = api
        self.node = node
        self.namespace = namespace
        self.node_uid = node_uid
        self.recorder = kube_events.EventRecorder(api, component="drasat-nodeplugin", instance=node)

    def warn(self, reason: str, message: str) -> None:
        ref = nasclient.new(namespace=self.namespace, node=self.node)
        with contextlib.suppress(kube_errors.KubeError):  # its uid: the Event shows with it
            ref = nasclient.get(self.api, namespace=self.namespace, node=self.node)
        self.recorder.warning(ref, reason, message)

    def read(self) -> NodeAllocationState:
        where = f"NodeAllocationState {self.namespace}/{self.node}"
        try:
            obj = nasclient.get(self.api, namespace=self.namespace, node=self.node)
        except kube_errors.KubeError as error:
            raise NasError(f"{where}: {error}") from error
        return _parse(obj, where)

    def update(self, mutate: Mutate, *, create: bool = False) -> NodeAllocationState:
        where = f"NodeAllocationState {self.namespace}/{self.node}"
        result: list[NodeAllocationState] = []

        def apply(obj: dict[str, Any]) -> dict[str, Any] | None:
            model = _parse(obj, where)
            result[:] = [model]
            if not mutate(model):
                return None
            out = model.dump()
            out["metadata"] = obj.get("metadata", {})
            return out

        try:
            if create:
                self._ensure()
            nasclient.update(self.api, namespace=self.namespace, node=self.node, mutate=apply)
        except kube_errors.KubeError as error:
            raise NasError(f"{where}: {error}") from error
        return result[-1]

    def allocated_claim(self, uid: str) -> AllocatedDevices | None:
        where = f"NodeAllocationState {self.namespace}/{self.node}"
        try:
            obj = nasclient.get(self.api, namespace=self.namespace, node=self.node)
        except kube_errors.KubeError as error:
            raise NasError(f"{where}: {error}") from error
        return _allocated_entry(obj, uid, where)

    def set_prepared(self, uid: str, prepared: PreparedDevices | None) -> bool:
        where = f"NodeAllocationState {self.namespace}/{self.node}"
        changed = False

        def apply(obj: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal changed
            changed = _put_prepared(obj, uid, prepared)
            return obj if changed else None

        try:
            nasclient.update(self.api, namespace=self.namespace, node=self.node, mutate=apply)
        except kube_errors.KubeError as error:
            raise NasError(f"{where}: {error}") from error
        return changed

    def _ensure(self) -> None:
        try:
            nasclient.get(self.api, namespace=self.namespace, node=self.node)
        except kube_errors.NotFound:
            body = nasclient.new(namespace=self.namespace, node=self.node, node_uid=self.node_uid)
            with contextlib.suppress(kube_errors.AlreadyExists):
                self.api.create(kube_resources.nas(), body, namespace=self.namespace)
