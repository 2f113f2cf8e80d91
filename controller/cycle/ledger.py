"""The NAS ledger written (`allocatedClaims` of each node's NodeAllocationState): every write
only while this replica leads, under optimistic concurrency, and remembered at once in
`ownwrites.OwnWrites`. The parts decide what to write (`mutate`); this module writes it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping

from drasat.api.nas import AllocatedDevices
from drasat.controller import allocation, nasnodes
from drasat.controller.cycle.ownwrites import OwnWrites
from drasat.controller.cycle.writes import Writes
from drasat.controller.metrics import Metrics
from drasat.kube import errors, informer, nasclient
from drasat.kube import resources as r
from drasat.kube.client import Api, Obj


class Ledger:
    """The nodes' NAS ledgers, as this process writes them."""

    def __init__(
        self,
        api: Api,
        *,
        namespace: str,
        nas: informer.Informer,
        writes: Writes,
        own: OwnWrites,
        metrics: Metrics,
        attempts: int,
    ) -> None:
        self.api = api
        self._namespace = namespace
        #: The informer's NASes (the cache a write starts from when it is newer than ours).
        self._nas = nas
        self._writes = writes
        self._own = own
        self._metrics = metrics
        self._attempts = attempts

    def update(self, node: str, mutate: Callable[[Obj], Obj | None]) -> None:
        """Every ledger write: only while this replica leads, retried on conflicts, and
        remembered at once (`OwnWrites.remember_nas`). The first try writes over the NAS as this
        process last knew it (its own last write, or the informer's copy if newer), with that
        resourceVersion as precondition: one request instead of a read and a write when the copy
        is current; a stale copy answers 409 and the write goes on from a fresh read."""
        self._writes.guard()
        known = self._own.known_nas(node, self._nas.get(f"{self._namespace}/{node}"))
        changed = mutate(copy.deepcopy(known)) if known is not None else None
        if known is not None and changed is not None:
            changed.setdefault("metadata", {})["resourceVersion"] = known["metadata"].get(
                "resourceVersion"
            )
            try:
                self._own.remember_nas(self.api.replace(r.NAS, changed))
                return
            except errors.Conflict:
                self._metrics.nas_conflicts.inc()
        written = nasclient.update(
            self.api,
            namespace=self._namespace,
            node=node,
            mutate=mutate,
            attempts=self._attempts,
            on_conflict=self._metrics.nas_conflicts.inc,
        )
        self._own.remember_nas(written)

    def remove(self, node: str, keys: set[str]) -> None:
        """The entries `keys` leave the node's ledger: the one rule both controllers remove by
        (`drasat.kube.nasclient.without_claims`), written as every v1 ledger write is."""
        try:
            self.update(node, lambda obj: nasclient.without_claims(obj, keys))
        except errors.NotFound:
            return

    def replace_claim(self, node: str, uid: str, entries: Mapping[str, AllocatedDevices]) -> None:
        """The claim's entries on the node become `entries` (a status written back)."""

        def mutate(obj: Obj) -> Obj | None:
            claims = (obj.get("spec") or {}).get("allocatedClaims") or {}
            mine = {k for k, e in claims.items() if (e.get("claimInfo") or {}).get("uid") == uid}
            cleared = nasclient.without_claims(obj, mine) or obj
            return allocation.nas_with(cleared, dict(entries)) or (cleared if mine else None)

        self.update(node, mutate)

    def entries(self, node: str) -> Mapping[str, AllocatedDevices]:
        """The node's ledger as this process last knew it (its own write, else the informer's)."""
        obj = self._own.nases.get(node) or next(
            (o for o in self._nas.items() if o["metadata"].get("name") == node), None
        )
        return nasnodes.parse(obj).entries if obj is not None else {}
