"""Clashes between allocated claims: claims whose statuses hold more of a GPU than it has
(`controller.overcommit`: one device named twice, or shares summing above it; two allocators
deciding at the same instant, a stale replica, an admin, a namespace an administrator exempted
from the toleration policy), or more of another driver's device (a NIC) than its slices publish
where a claim drasat wrote holds one (`overcommit.other_overcommits`). Each is reported with an
Event on every claim of it, and repaired, one claim at a time (what is left may fit):

- where a claim of it is not reserved yet, it gives its devices back (its allocation is cleared,
  as kube-scheduler's PostFilter does), one drasat wrote first if several are unreserved;
- where every claim of it is reserved (two tenants on one GPU), the pods of one claim are
  deleted, with an Event on each; once they are gone the claim is no longer reserved and gives
  its devices back as above. Deleted, not evicted: a PodDisruptionBudget could refuse an
  eviction for ever and leave two tenants on one GPU for ever, so, as Kubernetes does for a
  device that must not be used (the device-taint eviction controller, the NoExecute taint
  manager), the pod is deleted with the grace period it asks for, no budget consulted, and its
  uid as a precondition (a new pod of the same name is never hit). Which claim goes (`goes`):
  one whose pods are not running yet before one whose pods run (nothing is lost), then the one
  drasat did not write (drasat's ledger, policy and gangs stand on its own), then the younger
  (its pods started last).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from drasat.controller import allocation, overcommit, v1inputs
from drasat.controller.cycle.changes import Scope
from drasat.controller.cycle.ledger import Ledger
from drasat.controller.cycle.ownwrites import OwnWrites
from drasat.controller.cycle.writes import Writes
from drasat.kube import errors, eviction
from drasat.kube import resources as r
from drasat.kube.client import Api, Obj
from drasat.v1 import otherdevices

log = logging.getLogger(__name__)

REASON_CLASH = "DeviceClash"
#: On a pod drasat deleted because its claim shares a GPU with another tenant's.
REASON_CLASH_EVICTED = "DeviceClashEvicted"


def goes(
    claims: Sequence[Obj], pods: Mapping[str, Obj], wrote: Callable[[Obj], bool]
) -> tuple[Obj, str]:
    """Which of the clashing claims, all reserved, gives way (its pods are deleted), and why.
    The least loss first: a claim none of whose pods runs yet (nothing has started on the GPU),
    then one drasat did not write (the other allocator broke the one-allocator rule; drasat's
    ledger and policy account for its own), then the younger (the latest first start of its
    pods), then by name. `pods`: every pod by uid.

    This is a purely computational function."""

    def order(claim: Obj) -> tuple[bool, bool, str, str]:
        users = [pods[u] for u in v1inputs.reserved_pods(claim) if u in pods]
        running = any((p.get("status") or {}).get("phase") == "Running" for p in users)
        # "~" sorts after every timestamp: a pod not started yet is the youngest
        starts = [str((p.get("status") or {}).get("startTime") or "~") for p in users]
        return (not running, not wrote(claim), min(starts, default="~"), v1inputs.claim_ref(claim))

    ranked = sorted(claims, key=order, reverse=True)
    loser, kept = order(ranked[0]), order(ranked[1]) if len(ranked) > 1 else None
    whys = ("its pods are not running yet", "drasat did not allocate it",
            "its pods started last", "by name")  # fmt: skip
    why = next((w for w, a, b in zip(whys, loser, kept or loser, strict=True) if a != b), whys[-1])
    return ranked[0], why


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
        slices: Callable[[], Iterable[Obj]] = lambda: (),
        drivers: Iterable[str] = (),
    ) -> None:
        self.api = api
        self._writes = writes
        self._ledger = ledger
        self._own = own
        #: Claim statuses read as ledger entries (the cycle's, shared with the other parts).
        self._ledgers = ledgers
        #: Every ResourceSlice, and the drivers drasat models as GPUs: other drivers' devices
        #: (a NIC) held by claims drasat wrote are checked against what their slices publish.
        self._slices = slices
        self._drivers = frozenset(drivers)
        #: (node, uids...) of clashes that cannot be repaired, reported once while they last.
        self._clashes_reported: set[tuple[str, ...]] = set()
        self._clashes_seen: set[tuple[str, ...]] = set()
        self._others: dict[str, otherdevices.NodeOthers] | None = None

    def clashes(self, snapshot: v1inputs.Snapshot, scope: Scope | None = None) -> bool:
        """Allocated claims whose statuses hold more of a GPU than it has (`overcommit`: one
        device named twice, or shares summing above it; two allocators deciding at the same
        instant, a stale replica, an admin): reported with an Event on each claim, and
        repaired by one claim (module docstring): one not reserved yet gives its devices back,
        or, all reserved, the pods of the one that `goes` are deleted. Never raises: a clash
        blocks nothing else. True when anything was written. `scope`: only the claims allocated
        on these nodes (`changes.Changes`) and on the nodes of clashes still open (their pods may
        still be leaving); None: all."""
        changed = False
        gave_back: set[str] = set()
        reported = self._clashes_reported
        self._clashes_seen = set()
        looked_at = snapshot
        if scope is not None:
            # Every claim allocated on a node looked at: a clash is between one node's claims.
            nodes = scope.nodes | {c[0] for c in reported}
            on_nodes = {k: c for k, c in snapshot.claims.items()
                        if nodes and v1inputs.allocated_node(c) in nodes}  # fmt: skip
            looked_at = dataclasses.replace(snapshot, claims=on_nodes)
        pods: dict[str, Obj] | None = None  # by uid, built for the first clash
        by_node = v1inputs.status_entries(looked_at, self._ledgers)
        others = self._other_holders(looked_at)
        for node in sorted(set(by_node) | set(others)):
            held = {**others.get(node, {}), **by_node.get(node, {})}
            parsed = snapshot.nas.get(node)
            gpus = {g.uuid: g for g in parsed.node.devices.gpus} if parsed is not None else {}
            entries = [e for _, found in by_node.get(node, {}).values() for e in found.values()]
            found_all = overcommit.overcommits(entries, gpus)
            if node in others and self._others is not None and node in self._others:
                holders = [(uid, claim) for uid, (claim, _) in others[node].items()]
                found_all += overcommit.other_overcommits(holders, self._others[node])
            for found in found_all:
                if gave_back & set(found.claims):
                    continue  # what is left may fit now: the next settle looks again
                claims = [held[uid][0] for uid in found.claims]
                if pods is None:
                    pods = {str(p["metadata"].get("uid")): p for p in snapshot.pods}
                giver = self._writes.confined(
                    f"clash on {node}", claims, self._repair_clash, node, found, held, pods,
                )  # fmt: skip
                if giver:
                    gave_back.add(giver)
                    changed = True
        self._clashes_reported = self._clashes_seen
        return changed

    def _other_holders(
        self, snapshot: v1inputs.Snapshot
    ) -> dict[str, dict[str, tuple[Obj, Mapping[str, Any]]]]:
        """node -> claim uid -> (claim, no entries) for the allocated claims holding other
        drivers' devices (a NIC) on a node where a claim drasat wrote holds one: drasat is one
        of their two allocators there (kube-scheduler allocates such a device too). Other
        drivers' slices are read only then."""
        self._others = None
        found: dict[str, dict[str, tuple[Obj, Mapping[str, Any]]]] = {}
        ours: set[str] = set()
        for claim in snapshot.claims.values():
            node = v1inputs.allocated_node(claim)
            allocated = (claim.get("status") or {}).get("allocation") or {}
            results = (allocated.get("devices") or {}).get("results") or []
            if node is None or not any(
                isinstance(x, dict) and x.get("driver") not in self._drivers for x in results
            ):
                continue
            found.setdefault(node, {})[str(claim["metadata"].get("uid"))] = (claim, {})
            if self._wrote(claim):
                ours.add(node)
        if not ours:
            return {}
        self._others = otherdevices.read(self._slices(), self._drivers)
        return {node: held for node, held in found.items() if node in ours}

    def _repair_clash(
        self,
        node: str,
        found: overcommit.Overcommit,
        held: Mapping[str, tuple[Obj, Mapping[str, Any]]],
        pods: Mapping[str, Obj],
    ) -> str | None:
        """Report one over-commit and repair it by one claim if possible (its devices given
        back, or its pods deleted); that claim's uid, or None."""
        claims = [held[uid][0] for uid in found.claims]
        refs = ("claims " if len(claims) > 1 else "claim ") + " and ".join(
            v1inputs.claim_ref(c) for c in claims
        )
        what = f"{found.named} on {node} ({found.why})"
        unreserved = [c for c in claims if not v1inputs.reserved_pods(c)]
        if not unreserved:
            return self._delete(
                node, found, claims, pods, f"{refs} hold more of {what} than it has"
            )
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
            # Counted as a failure, so that the next settle covers everything: a conflict that
            # brought no change of the claim (a webhook refusing its writes with 409) sends no
            # event, and a settle of what changed alone would never look at this clash again.
            self._writes.failures += 1
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

    def _delete(
        self,
        node: str,
        found: overcommit.Overcommit,
        claims: list[Obj],
        pods: Mapping[str, Obj],
        clash: str,
    ) -> str | None:
        """Every claim of the clash is reserved: delete the pods of the one that `goes` (no
        PodDisruptionBudget consulted: module docstring). Its uid once its pods are deleted or
        leaving, else None (reported once while it lasts)."""
        loser, why = goes(claims, pods, self._wrote)
        ref = v1inputs.claim_ref(loser)
        users = [pods.get(u) for u in sorted(v1inputs.reserved_pods(loser))]
        if not self._fresh(claims):
            return None  # changed since the snapshot: the next settle looks again
        if None in users:
            # A consumer that is not a pod drasat sees (the resourceclaim controller drops a pod
            # that is gone from `reservedFor`): nothing to delete yet.
            self._report_once(node, found, claims, f"{clash} and all are reserved: {ref} "
                              f"gives way ({why}) once its consumers are pods")  # fmt: skip
            return None
        deleting = [
            p for p in users if p is not None and not p["metadata"].get("deletionTimestamp")
        ]
        for pod in deleting:
            self._writes.guard()
            if not eviction.delete_pod(self.api, pod):
                continue  # gone meanwhile, or its name is another pod's now: not ours to stop
            log.info("clash on %s: deleted %s (claim %s)", node, v1inputs.pod_key(pod), ref)
            self._writes.recorder.warning(pod, REASON_CLASH_EVICTED,
                                          f"deleted by drasat: {clash}, each in use by pods; "
                                          f"{ref} gives way ({why}). Deleted, not evicted: "
                                          "PodDisruptionBudgets are not consulted, since a "
                                          "budget could keep two tenants on one GPU for ever "
                                          "(as Kubernetes deletes the pods of a device tainted "
                                          "NoExecute)")  # fmt: skip
        if deleting:
            named = ", ".join(map(v1inputs.pod_key, deleting))
            self._writes.fault(REASON_CLASH, f"{clash} and all are reserved by pods: {ref} gives "
                               f"way ({why}), its pods deleted ({named}; no PodDisruptionBudget "
                               "consulted); it gives its allocation back once they are gone",
                               claims)  # fmt: skip
        return str(loser["metadata"].get("uid"))

    def _fresh(self, claims: Sequence[Obj]) -> bool:
        """Whether the API server still holds each claim as the snapshot does (a deletion on a
        stale cache would stop a tenant for nothing)."""
        for claim in claims:
            meta = claim["metadata"]
            try:
                current = self.api.get(
                    r.RESOURCE_CLAIMS_V1, meta["name"], namespace=meta["namespace"]
                )
            except errors.NotFound:
                return False
            if current["metadata"].get("resourceVersion") != meta.get("resourceVersion"):
                return False
        return True

    def _report_once(
        self, node: str, found: overcommit.Overcommit, claims: list[Obj], text: str
    ) -> None:
        seen = (node, *found.claims)
        self._clashes_seen.add(seen)
        if seen not in self._clashes_reported:  # reported once while it lasts
            self._writes.fault(REASON_CLASH, text, claims)

    def _wrote(self, claim: Obj) -> bool:
        """Whether drasat allocated the claim (this process, or one before it: our finalizer)."""
        uid = str(claim["metadata"].get("uid"))
        return uid in self._own.claims or allocation.has_finalizer(claim)
