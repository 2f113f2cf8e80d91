"""Clashes between allocated claims: claims whose statuses hold more of a GPU than it has
(`controller.overcommit`: one device named twice, or shares summing above it; two allocators
deciding at the same instant, a stale replica, an admin). Each is reported with an Event on every
claim of it, and repaired where one is not reserved yet: it gives its devices back (its allocation
is cleared, as kube-scheduler's PostFilter does), one drasat wrote first if several are
unreserved.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from drasat.controller import allocation, overcommit, v1inputs
from drasat.controller.cycle.changes import Scope
from drasat.controller.cycle.ledger import Ledger
from drasat.controller.cycle.ownwrites import OwnWrites
from drasat.controller.cycle.writes import Writes
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import Api, Obj

log = logging.getLogger(__name__)

REASON_CLASH = "DeviceClash"


class Repairer:
    """Finds the clashes of a snapshot and repairs those it can."""

    def __init__(
        self,
        api: Api,
        *,
        writes: Writes,
        ledger: Ledger,
        own: OwnWrites,
        ledgers: v1inputs.StatusLedgers,
    ) -> None:
        self.api = api
        self._writes = writes
        self._ledger = ledger
        self._own = own
        #: Claim statuses read as ledger entries (the cycle's, shared with the other parts).
        self._ledgers = ledgers
        #: (node, uids...) of clashes that cannot be repaired, reported once while they last.
        self._clashes_reported: set[tuple[str, ...]] = set()
        self._clashes_seen: set[tuple[str, ...]] = set()

    def clashes(self, snapshot: v1inputs.Snapshot, scope: Scope | None = None) -> bool:
        """Allocated claims whose statuses hold more of a GPU than it has (`overcommit`: one
        device named twice, or shares summing above it; two allocators deciding at the same
        instant, a stale replica, an admin): reported with an Event on each claim, and
        repaired where one is not reserved yet: it gives its devices back (its allocation is
        cleared, as kube-scheduler's PostFilter does), one drasat wrote first if several are
        unreserved. Never raises: a clash blocks nothing else. True when anything was written.
        `scope`: only the claims allocated on these nodes (`changes.Changes`); None: all."""
        changed = False
        gave_back: set[str] = set()
        self._clashes_seen = set()
        looked_at = snapshot
        if scope is not None and not scope.nodes:
            looked_at = dataclasses.replace(snapshot, claims={})
        elif scope is not None:
            # Every claim allocated on a node in scope (a clash is between a node's claims).
            on_nodes = {k: c for k, c in snapshot.claims.items()
                        if v1inputs.allocated_node(c) in scope.nodes}  # fmt: skip
            looked_at = dataclasses.replace(snapshot, claims=on_nodes)
        for node, held in sorted(v1inputs.status_entries(looked_at, self._ledgers).items()):
            parsed = snapshot.nas.get(node)
            gpus = {g.uuid: g for g in parsed.node.nas.gpus()} if parsed is not None else {}
            entries = [e for _, found in held.values() for e in found.values()]
            for found in overcommit.overcommits(entries, gpus):
                if gave_back & set(found.claims):
                    continue  # what is left may fit now: the next settle looks again
                claims = [held[uid][0] for uid in found.claims]
                giver = self._writes.confined(
                    f"clash on {node}", claims, self._repair_clash, node, found, held,
                )  # fmt: skip
                if giver:
                    gave_back.add(giver)
                    changed = True
        if scope is not None:
            # Clashes on the nodes out of scope are as they were: still reported once.
            self._clashes_seen |= {c for c in self._clashes_reported if c[0] not in scope.nodes}
        self._clashes_reported = self._clashes_seen
        return changed

    def _repair_clash(
        self,
        node: str,
        found: overcommit.Overcommit,
        held: Mapping[str, tuple[Obj, Mapping[str, Any]]],
    ) -> str | None:
        """Report one over-commit and give one claim's devices back if possible; its uid, or
        None."""
        claims = [held[uid][0] for uid in found.claims]
        refs = ("claims " if len(claims) > 1 else "claim ") + " and ".join(
            v1inputs.claim_ref(c) for c in claims
        )
        what = f"GPU {found.gpu} on {node} ({found.why})"
        unreserved = [c for c in claims if not v1inputs.reserved_pods(c)]
        if not unreserved:
            seen = (node, *found.claims)
            self._clashes_seen.add(seen)
            if seen not in self._clashes_reported:  # reported once while it lasts
                text = (f"{refs} hold more of {what} than it has and all are reserved "
                        "by pods: not repaired (delete one of the pods)")  # fmt: skip
                self._writes.fault(REASON_CLASH, text, claims)
            return None
        # Prefer giving back one drasat wrote: the other allocator's claim keeps its device.
        giver = min(unreserved, key=lambda c: (not self._wrote(c), v1inputs.claim_ref(c)))
        meta = giver["metadata"]
        status = {k: v for k, v in (giver.get("status") or {}).items() if k != "allocation"}
        self._writes.guard()
        try:
            self.api.replace_status(r.RESOURCE_CLAIMS_V1, {**giver, "status": status})
        except (errors.Conflict, errors.NotFound) as error:
            log.info("clash of %s on %s: %s changed meanwhile (%s); next cycle",
                     refs, node, v1inputs.claim_ref(giver), error)  # fmt: skip
            return None
        uid = str(meta.get("uid"))
        # Given back by us, not by the scheduler: no node becomes unsuitable for its pods.
        self._own.claims.pop(uid, None)
        keys = set(held[uid][1]) if uid in held else set()
        keys |= {k for k, e in self._ledger.entries(node).items() if e.claimInfo.uid == uid}
        if keys:
            self._ledger.remove(node, keys)
        text = (f"{refs} held more of {what} than it has; "
                f"{v1inputs.claim_ref(giver)}, not reserved yet, gave its allocation back and "
                "will be allocated again")  # fmt: skip
        self._writes.fault(REASON_CLASH, text, claims)
        return uid

    def _wrote(self, claim: Obj) -> bool:
        """Whether drasat allocated the claim (this process, or one before it: our finalizer)."""
        uid = str(claim["metadata"].get("uid"))
        return uid in self._own.claims or allocation.has_finalizer(claim)
