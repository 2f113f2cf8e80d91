"""Clashes between allocated claims: two claims whose statuses name one device (two allocators
deciding at the same instant, a stale replica, an admin). Each is reported with an Event on both
claims, and repaired where one is not reserved yet: it gives its devices back (its allocation is
cleared, as kube-scheduler's PostFilter does), the one drasat wrote first if both are unreserved.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from drasat.controller import allocation, v1inputs
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
        #: (node, uid, uid) of clashes that cannot be repaired, reported once while they last.
        self._clashes_reported: set[tuple[str, ...]] = set()
        self._clashes_seen: set[tuple[str, ...]] = set()

    def clashes(self, snapshot: v1inputs.Snapshot) -> bool:
        """Allocated claims whose statuses name one device (two allocators deciding at the same
        instant, a stale replica, an admin): reported with an Event on both claims, and
        repaired where one is not reserved yet: it gives its devices back (its allocation is
        cleared, as kube-scheduler's PostFilter does), the one drasat wrote first if both are
        unreserved. Never raises: a clash blocks nothing else. True when anything was written."""
        changed = False
        gave_back: set[str] = set()
        self._clashes_seen = set()
        for node, held in sorted(v1inputs.status_entries(snapshot, self._ledgers).items()):
            by_gpu: dict[str, list[str]] = {}
            for uid, (_, entries) in held.items():
                for entry in entries.values():
                    for gpu in allocation.gpus_touched(entry):
                        by_gpu.setdefault(gpu, []).append(uid)
            pairs: set[tuple[str, str]] = set()
            for uids in by_gpu.values():
                distinct = sorted(set(uids))
                pairs.update((a, b) for i, a in enumerate(distinct) for b in distinct[i + 1 :])
            for a, b in sorted(pairs):
                if a in gave_back or b in gave_back:
                    continue
                (claim_a, entries_a), (claim_b, entries_b) = held[a], held[b]
                if not any(allocation.exclusive_clash(x, y) for x in entries_a.values()
                           for y in entries_b.values()):  # fmt: skip
                    continue
                giver = self._writes.confined(
                    f"clash on {node}", [claim_a, claim_b],
                    self._repair_clash, node, claim_a, claim_b, held,
                )  # fmt: skip
                if giver:
                    gave_back.add(giver)
                    changed = True
        self._clashes_reported = self._clashes_seen
        return changed

    def _repair_clash(
        self, node: str, a: Obj, b: Obj, held: Mapping[str, tuple[Obj, Mapping[str, Any]]]
    ) -> str | None:
        """Report one clash and give one claim's devices back if possible; its uid, or None."""
        refs = f"{v1inputs.claim_ref(a)} and {v1inputs.claim_ref(b)}"
        unreserved = [c for c in (a, b) if not v1inputs.reserved_pods(c)]
        if not unreserved:
            pair = (node, *sorted((str(a["metadata"].get("uid")), str(b["metadata"].get("uid")))))
            self._clashes_seen.add(pair)
            if pair not in self._clashes_reported:  # reported once while it lasts
                text = (f"claims {refs} both hold a device on {node} and both are reserved by "
                        "pods: not repaired (delete one of the pods)")  # fmt: skip
                self._writes.fault(REASON_CLASH, text, [a, b])
            return None
        # Prefer giving back the one drasat wrote: the other allocator's claim keeps its device.
        giver = min(unreserved, key=lambda c: (not self._wrote(c), v1inputs.claim_ref(c)))
        other = b if giver is a else a
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
        text = (f"claims {v1inputs.claim_ref(giver)} and {v1inputs.claim_ref(other)} both held a "
                f"device on {node}; {v1inputs.claim_ref(giver)}, not reserved yet, gave its "
                "allocation back and will be allocated again")  # fmt: skip
        self._writes.fault(REASON_CLASH, text, [giver, other])
        return uid

    def _wrote(self, claim: Obj) -> bool:
        """Whether drasat allocated the claim (this process, or one before it: our finalizer)."""
        uid = str(claim["metadata"].get("uid"))
        return uid in self._own.claims or allocation.has_finalizer(claim)
