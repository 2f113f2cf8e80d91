"""NodeAllocationState objects: read, and change with optimistic concurrency.

`update` reads the object, hands it to a mutate function, and replaces it with the read
resourceVersion; on 409 it reads again and calls mutate again (so the caller re-checks its decision
against the new state), with a bounded exponential backoff.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable

from drasat.api import groups
from drasat.kube import errors
from drasat.kube.client import Api, Obj
from drasat.kube.resources import Resource, nas

log = logging.getLogger(__name__)

#: Gets a deep copy of the current object; returns the new object, or None for "no change".
Mutate = Callable[[Obj], Obj | None]


class TooManyConflicts(errors.Conflict):
    """`update` gave up after `attempts` conflicts in a row."""


def get(api: Api, *, namespace: str, node: str, resource: Resource | None = None) -> Obj:
    """The NAS of `node`; raises NotFound."""
    return api.get(resource or nas(), node, namespace=namespace)


def list_all(api: Api, *, namespace: str, resource: Resource | None = None) -> list[Obj]:
    return api.list(resource or nas(), namespace=namespace).items


def update(
    api: Api,
    *,
    namespace: str,
    node: str,
    mutate: Mutate,
    status: bool = False,
    attempts: int = 8,
    backoff_s: tuple[float, float] = (0.01, 0.5),
    sleep: Callable[[float], None] = time.sleep,
    on_conflict: Callable[[], None] = lambda: None,
    resource: Resource | None = None,
) -> Obj:
    """Apply `mutate` to the NAS of `node` until the write wins; returns the written object (or the
    current one when mutate said no change). `status`: write the status subresource."""
    resource = resource or nas()
    delay = backoff_s[0]
    for attempt in range(1, attempts + 1):
        current = api.get(resource, node, namespace=namespace)
        changed = mutate(copy.deepcopy(current))
        if changed is None:
            return current
        changed.setdefault("metadata", {})["resourceVersion"] = (current.get("metadata") or {}).get(
            "resourceVersion"
        )
        try:
            if status:
                return api.replace_status(resource, changed)
            return api.replace(resource, changed)
        except errors.Conflict:
            on_conflict()
            log.debug("NAS %s/%s: conflict on attempt %d", namespace, node, attempt)
            if attempt == attempts:
                break
            sleep(delay)
            delay = min(backoff_s[1], delay * 2)
    raise TooManyConflicts(
        f"NodeAllocationState {namespace}/{node}: {attempts} conflicts in a row", status=409
    )


def without_claims(obj: Obj, uids: set[str]) -> Obj | None:
    """The NAS without the claims `uids` in its ledger (spec.allocatedClaims); None when none of
    them is there (a `Mutate`)."""
    claims = (obj.get("spec") or {}).get("allocatedClaims") or {}
    if not uids & set(claims):
        return None
    for uid in uids:
        claims.pop(uid, None)
    return obj


def remove_claims(
    api: Api,
    *,
    namespace: str,
    node: str,
    uids: set[str],
    attempts: int = 8,
    on_conflict: Callable[[], None] = lambda: None,
) -> Obj | None:
    """Take claims out of a node's ledger (`without_claims`), retried on conflicts: the object as
    written (or as it was when none was listed), None when the node has no NAS. The classic
    controller removes through this; the v1 controller applies the same `without_claims` through
    its own ledger write (leader-guarded, first try on its cached copy)."""
    try:
        return update(
            api,
            namespace=namespace,
            node=node,
            mutate=lambda obj: without_claims(obj, uids),
            attempts=attempts,
            on_conflict=on_conflict,
        )
    except errors.NotFound:
        return None


def new(*, namespace: str, node: str, node_uid: str | None = None) -> Obj:
    """An empty NAS for `node`, owned by the Node when its uid is known."""
    metadata: Obj = {"name": node, "namespace": namespace}
    if node_uid:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
        ]
    return {
        "apiVersion": groups.NAS_API_VERSION,
        "kind": groups.NODE_ALLOCATION_STATE,
        "metadata": metadata,
        "spec": {"allocatableDevices": [], "allocatedClaims": {}, "preparedClaims": {}},
    }
