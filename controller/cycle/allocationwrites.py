"""The writes of what a cycle placed: each node's ledger entries in one NAS write (re-checked
against the fresh NAS and the claims' statuses: never a device to two claims), then per pod,
several pods at once, our finalizer on its claims, their `status.allocation` (optimistic
concurrency: a claim changed meanwhile is left to the next cycle; one allocated by someone else
meanwhile gets its ledger entry removed again), then the lift of its scheduling gate. A pod whose
write fails is that pod's alone: said by kind, retried next cycle.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from drasat import v1
from drasat.api.groups import DRIVER_NAME
from drasat.api.nas import AllocatedDevices
from drasat.controller import allocation, nasnodes, overcommit, v1inputs
from drasat.controller.cycle.gates import Gates
from drasat.controller.cycle.ledger import Ledger
from drasat.controller.cycle.ownwrites import OwnWrites, WrittenClaim
from drasat.controller.cycle.writes import LeaseLost, Writes, short
from drasat.controller.metrics import Metrics
from drasat.controller.statusledger import status_entries_on
from drasat.kube import errors, informer
from drasat.kube import resources as r
from drasat.kube.client import Api, Obj
from drasat.solver.nodemodel import Gpu
from drasat.v1 import results

log = logging.getLogger(__name__)


class LedgerConflict(errors.Conflict):
    """A device the solver chose would over-commit its GPU beside another claim (the fresh NAS
    or a claim's status)."""


@dataclass
class Placed:
    """A pod the cycle placed, with its claims' allocations."""

    item: v1inputs.Pending
    claims: list[v1.ClaimAllocation]

    @property
    def ledger(self) -> dict[str, AllocatedDevices]:
        out: dict[str, AllocatedDevices] = {}
        for claim in self.claims:
            out.update(claim.ledger)
        return out


class AllocationWriter:
    """Writes the placed pods' allocations down."""

    def __init__(
        self,
        api: Api,
        *,
        writes: Writes,
        ledger: Ledger,
        own: OwnWrites,
        gates: Gates,
        claims: informer.Informer,
        metrics: Metrics,
        explanations: dict[str, str],
    ) -> None:
        self.api = api
        self._writes = writes
        self._ledger = ledger
        self._own = own
        self._gates = gates
        #: The informer's claims: fresher than the snapshot when the statuses are re-checked.
        self._claims = claims
        self._metrics = metrics
        #: Each refused pod's explanation: a pod's goes once its claims are written.
        self._explanations = explanations

    def write(
        self,
        snapshot: v1inputs.Snapshot,
        by_node: Mapping[str, list[Placed]],
        in_gang: Mapping[str, str],
    ) -> dict[str, str]:
        """Write the placed pods down; pod key -> node of each pod whose writes all went."""
        # Each node's ledger entries in one write, the nodes side by side (their NASes are
        # apart: no write waits for another node's).
        nodes_placed = sorted(by_node.items())
        kept = self._writes.in_parallel(
            lambda found: self._write_ledger(found[0], found[1], snapshot), nodes_placed
        )
        in_ledger = [
            (node, pod) for (node, _), pods in zip(nodes_placed, kept, strict=True) for pod in pods
        ]
        # Each pod's statuses then its gate; pods apart from each other, several at once.
        # A gang's pods keep drasat's gate until every one of them is written
        # (`WholeGangs.lift`).
        done = self._writes.in_parallel(
            lambda found: self._write_pod(
                found[0], found[1], lift=found[1].item.input.key not in in_gang
            ),
            in_ledger,
        )
        ok: dict[str, str] = {}
        for (node, pod), (_, failed) in zip(in_ledger, done, strict=True):
            if failed is not None:
                self._not_written(pod.item, node, failed)
            else:
                ok[pod.item.input.key] = node
        return ok

    def _write_ledger(
        self, node: str, placed: list[Placed], snapshot: v1inputs.Snapshot
    ) -> list[Placed]:
        """The ledger entries of the pods placed on one node, in one NAS write; the pods written
        there. A pod whose write fails is that pod's alone (retried next cycle)."""
        ready: list[Placed] = []
        for pod in placed:
            try:
                self._check_statuses(node, pod.ledger, snapshot)
            except LedgerConflict as error:
                self._not_written(pod.item, node, error)
                continue
            ready.append(pod)
        parsed = snapshot.nas.get(node)
        try:
            # A node of another driver has no NAS: the statuses written next are its ledger.
            from_statuses = parsed is not None and parsed.from_statuses
            refused = {} if from_statuses else self._add_to_ledger(node, ready)
        except LeaseLost:
            raise
        except Exception as error:
            for pod in ready:
                self._not_written(pod.item, node, error)
            return []
        for key, clash in refused.items():
            self._not_written(next(p.item for p in ready if p.item.input.key == key), node, clash)
        return [pod for pod in ready if pod.item.input.key not in refused]

    def _write_pod(
        self, node: str, pod: Placed, lift: bool = True
    ) -> tuple[list[v1.ClaimAllocation], Exception | None]:
        """A pod whose ledger entries are written: our finalizer on its claims, their statuses,
        then (`lift`) its gate. The claims written, and what failed (None: nothing). Runs beside
        other pods' writes."""
        item = pod.item
        by_uid = {c["metadata"]["uid"]: c for c in item.claims}
        try:
            for claim in pod.claims:
                if _in_a_nas(claim):
                    by_uid[claim.uid] = self._ensure_finalizer(by_uid[claim.uid])
            for claim in pod.claims:
                self._write_status(by_uid[claim.uid], claim, item)
        except LeaseLost:
            raise
        except Exception as error:
            return [], error
        self._explanations.pop(item.input.key, None)
        if not lift:
            return pod.claims, None
        try:
            self._gates.lift(item.pod, "its claims of drasat's are allocated")
        except LeaseLost:
            raise
        except Exception as error:
            return pod.claims, error
        return pod.claims, None

    def _not_written(self, item: v1inputs.Pending, node: str, error: Exception) -> None:
        """A placed pod's write that failed: said by kind; the next cycle retries the pod."""
        key = item.input.key
        if isinstance(error, LedgerConflict):
            self._writes.fault("LedgerConflict", f"pod {key}: not allocated on {node}: {error}",
                               [item.pod, *item.claims])  # fmt: skip
        elif isinstance(error, errors.Conflict):  # optimistic concurrency
            log.info("%s: write on %s not done (%s); next cycle", key, node, error)
            self._metrics.failures.labels("Conflict").inc()
        else:
            self._writes.fault("WriteFailed", f"pod {key}: allocation on {node} not written: "
                               f"{short(error)}", [item.pod, *item.claims])  # fmt: skip
        self._writes.wake()

    def _check_statuses(
        self, node: str, ledger: Mapping[str, AllocatedDevices], snapshot: v1inputs.Snapshot
    ) -> None:
        """The devices about to be written, beside what the node's claims hold now, hold no
        more of a GPU than it has (`overcommit`, shares by their sums), once a claim there
        changed since the snapshot (another allocator's decision the solve did not see); raises
        LedgerConflict. The API server accepts two claims naming one device, so a decision of
        the same instant can still slip through: `Repairer.clashes` repairs those."""
        uids = {e.claimInfo.uid for e in ledger.values()}
        parsed = snapshot.nas.get(node)
        if parsed is None:
            return
        # Our deallocations count from their write, as in the snapshot.
        claims = [self._own.claim_over(c) for c in self._claims.items()]
        if not any(
            snapshot.claims.get(informer.key_of(c)) is not c  # unchanged: the solve counted it
            and str(c["metadata"].get("uid")) not in uids
            and v1inputs.allocated_node(c) == node
            for c in claims
        ):
            return
        now: dict[str, tuple[Obj, Mapping[str, AllocatedDevices]]] = {}
        for claim in claims:
            uid = str(claim["metadata"].get("uid"))
            if uid in uids or v1inputs.allocated_node(claim) != node:
                continue
            now[uid] = (claim, (
                status_entries_on(claim, snapshot.published[node])
                if parsed.from_statuses
                else results.ledger_from_status(claim, parsed.node.devices)
            ))  # fmt: skip
        # What the solve counted (our own writes the informer has not delivered, ledger
        # entries), with every claim's entries as its status says them now.
        held = {k: e for k, e in parsed.entries.items()
                if e.claimInfo.uid not in now and e.claimInfo.uid not in uids}  # fmt: skip
        for _, entries in now.values():
            held.update(entries)
        found = overcommit.with_added(held, ledger, {g.uuid: g for g in parsed.node.devices.gpus})
        if found is not None:
            others = [now[u][0] for u in found.claims if u in now]
            raise LedgerConflict(
                f"devices on {node} would be over-committed beside "
                f"{', '.join(v1inputs.claim_ref(c) for c in others) or 'the ledger'}: "
                f"GPU {found.gpu} {found.why}",
                status=409,
            )

    def _ensure_finalizer(self, claim: Obj) -> Obj:
        """Our finalizer on a claim about to be allocated; the claim as written. Before the
        status: kube-scheduler reads the claim once it is allocated (PreBind reserves it,
        PostFilter may give it back) and a claim changed after that meets its write with a 409,
        which it does not retry before its next attempt of the pod."""
        if allocation.has_finalizer(claim):
            return claim
        self._writes.guard()
        meta = claim["metadata"]
        patch = {
            "metadata": {
                "finalizers": allocation.finalizers_with(claim),
                "resourceVersion": meta.get("resourceVersion"),
            }
        }
        try:
            return self.api.patch(
                r.RESOURCE_CLAIMS_V1, meta["name"], patch, namespace=meta["namespace"]
            )
        except errors.Invalid as error:
            # A claim created with opaque parameters in non-compact JSON cannot take a JSON
            # metadata change: kube-apiserver re-encodes the parameters compactly and then
            # finds the spec changed. The finalizer is a second safeguard (the ledger is
            # settled from the claims anyway), so the allocation goes on without it.
            log.warning("%s: finalizer not added (%s); its ledger entries are settled from "
                        "its status alone", v1inputs.claim_ref(claim), error)  # fmt: skip
            return claim

    def _add_to_ledger(self, node: str, placed: list[Placed]) -> dict[str, LedgerConflict]:
        """Add the placed pods' entries to the node's ledger in one write; a pod with a device
        another claim holds in the fresh ledger (or a pod before it in this write) is left out:
        pod key -> why. (A claim's status written back is the truth and is never refused:
        `Releaser._restore`; `Repairer.clashes` reports and repairs overlaps.)"""
        refused: dict[str, LedgerConflict] = {}

        def mutate(obj: Obj) -> Obj | None:
            refused.clear()  # called again on each conflict, with the fresh object
            fresh = nasnodes.parse(obj)
            held = dict(fresh.entries)
            gpus = {g.uuid: g for g in fresh.node.devices.gpus}
            added: dict[str, AllocatedDevices] = {}
            for pod in placed:
                clash = _clash(node, pod.ledger, held, gpus)
                if clash is not None:
                    refused[pod.item.input.key] = clash
                    continue
                held.update(pod.ledger)
                added.update(pod.ledger)
            return allocation.nas_with(obj, added) if added else None

        if placed:
            self._ledger.update(node, mutate)
        return refused

    def _write_status(self, claim: Obj, placed: v1.ClaimAllocation, item: v1inputs.Pending) -> None:
        meta = claim["metadata"]
        for _ in range(3):
            if v1inputs.is_allocated(claim):
                if v1inputs.allocated_node(claim) != placed.node:
                    self._ledger.remove(placed.node, set(placed.ledger))
                    there = v1inputs.allocated_node(claim)
                    ref = v1inputs.claim_ref(claim)
                    log.warning(
                        "%s was allocated on %s meanwhile; ledger entry removed", ref, there
                    )
                return
            body = dict(claim)
            # With the DRADeviceBindingConditions and DRAResourceClaimDeviceStatus gates on,
            # kube-scheduler's PreBind stamps an allocation without `allocationTimestamp` and the
            # API server refuses that change of a set allocation: the allocator stamps it.
            stamped = {**placed.allocation, "allocationTimestamp": _now()}
            body["status"] = {**(claim.get("status") or {}), "allocation": stamped}
            self._writes.guard()
            try:
                written = self.api.replace_status(r.RESOURCE_CLAIMS_V1, body)
            except errors.Conflict:
                claim = self.api.get(
                    r.RESOURCE_CLAIMS_V1, meta["name"], namespace=meta["namespace"]
                )
                if claim["metadata"].get("uid") != meta.get("uid"):
                    self._ledger.remove(placed.node, set(placed.ledger))
                    return
                continue
            version = str(written["metadata"].get("resourceVersion", ""))
            self._own.claims[placed.uid] = WrittenClaim(
                placed.node, version, {item.input.key}, placed.ledger, stamped
            )
            self._metrics.allocations.inc()
            where = {"claim": v1inputs.claim_ref(claim), "uid": placed.uid, "node": placed.node}
            log.info("allocated %s on %s for %s", where["claim"], placed.node, item.input.key,
                     extra=where)  # fmt: skip
            return
        raise errors.Conflict(f"{v1inputs.claim_ref(claim)} kept changing", status=409)


def _clash(
    node: str,
    ledger: Mapping[str, AllocatedDevices],
    held: Mapping[str, AllocatedDevices],
    gpus: Mapping[str, Gpu],
) -> LedgerConflict | None:
    """Whether new ledger entries, beside those held, hold more of a GPU than it has
    (`overcommit`: shares by their sums, anything else touching the same GPU or MIG slices)."""
    found = overcommit.with_added(held, ledger, gpus)
    if found is None:
        return None
    others = sorted({k for k, v in held.items() if v.claimInfo.uid in found.claims})
    return LedgerConflict(f"devices on {node} would be over-committed beside "
                          f"{', '.join(others)}: GPU {found.gpu} {found.why}",
                          status=409)  # fmt: skip


def _in_a_nas(claim: v1.ClaimAllocation) -> bool:
    """Whether the allocation has devices of drasat's driver, whose ledger entries in the NAS
    our finalizer keeps until the claim is released. Another driver's (NVIDIA's) are in no NAS:
    their claim gets no finalizer (one write fewer per pod; the status is the ledger)."""
    found = (claim.allocation.get("devices") or {}).get("results") or []
    return any(r.get("driver") == DRIVER_NAME for r in found)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
