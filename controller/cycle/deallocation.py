"""A claim's allocation given back by drasat, as Kubernetes deallocates one (the resourceclaim
controller when its last consumer goes, kube-scheduler's PostFilter): `status.allocation` cleared
with `reservedFor` and the devices' status, in one status write with the claim's resourceVersion
as precondition, so a pod reserved for it meanwhile (the write answers 409) keeps it; then its
ledger entries leave the node's NAS. drasat's finalizer leaves the claim at a later settle
(`drop_finalizer`, off the path of the pod waiting for the devices), unless a pod names it
again (then it is allocated again soon, finalizer and all).

The order is the allocation's in reverse: the status first, since it is the truth (a crash after
it leaves ledger entries of an unallocated claim, which the next settle removes; never a free
ledger under a claim still allocated, whose devices the next cycle could hand out twice).

Used by the settle (`releasing`: claims no pod uses any more) and by the gang writes
(`allocationwrites`: the written members of a gang whose other writes failed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from drasat.controller import allocation, v1inputs
from drasat.controller.cycle.ledger import Ledger
from drasat.controller.cycle.ownwrites import OwnWrites
from drasat.controller.cycle.writes import Writes
from drasat.controller.metrics import Metrics
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import Api, Obj

log = logging.getLogger(__name__)

#: How many times a deallocation is tried on a fresh read before the next cycle. Its pod done,
#: a claim left allocated is written by the resourceclaim controller over and over: it removes
#: the done pod from `reservedFor` (`syncClaim`) and adds it again (`syncPod` reserves an
#: allocated claim for a bound pod whatever its phase) until the claim is deallocated, so a
#: write between two of its writes may take a few tries (seen on 1.37: 3 tries did not do).
ATTEMPTS = 10

#: Whether a claim (as the API server has it now) may still be deallocated: asked again of the
#: fresh claim when the first write met a change (409).
StillUnused = Callable[[Obj], bool]


class Deallocator:
    """Gives claims' allocations back."""

    def __init__(
        self, api: Api, *, writes: Writes, ledger: Ledger, own: OwnWrites, metrics: Metrics
    ) -> None:
        self.api = api
        self._writes = writes
        self._ledger = ledger
        self._own = own
        self._metrics = metrics

    def deallocate(self, claim: Obj, still_unused: StillUnused, why: str) -> bool:
        """Clear the claim's allocation, then its ledger entries; True when this call cleared
        it. A claim that changed since `claim` was read is read again and
        cleared only if `still_unused` says so of the fresh copy; a claim another writer keeps
        changing is left to the next cycle (Conflict)."""
        meta = claim["metadata"]
        uid = str(meta.get("uid"))
        node = v1inputs.allocated_node(claim)
        entries = self._own.claims.get(uid)
        for _ in range(ATTEMPTS):
            if not v1inputs.is_allocated(claim):
                return False
            status = {k: v for k, v in (claim.get("status") or {}).items()
                      if k not in ("allocation", "reservedFor", "devices")}  # fmt: skip
            self._writes.guard()
            try:
                written = self.api.replace_status(r.RESOURCE_CLAIMS_V1, {**claim, "status": status})
            except errors.NotFound:
                return False
            except errors.Conflict:
                try:
                    claim = self.api.get(
                        r.RESOURCE_CLAIMS_V1, meta["name"], namespace=meta["namespace"]
                    )
                except errors.NotFound:
                    return False
                if claim["metadata"].get("uid") != uid or not still_unused(claim):
                    return False
                continue
            break
        else:
            raise errors.Conflict(f"{v1inputs.claim_ref(claim)} kept changing", status=409)
        # Given back by us, not by the scheduler: no node becomes unsuitable for its pods.
        self._own.claims.pop(uid, None)
        self._own.remember_claim(written)
        self._metrics.deallocations.inc()
        log.info("deallocated %s on %s: %s", v1inputs.claim_ref(claim), node, why)
        if node is not None:
            keys = {k for k, e in self._ledger.entries(node).items() if e.claimInfo.uid == uid}
            keys |= set(entries.ledger) if entries is not None else set()
            if keys:
                self._ledger.remove(node, keys)
        return True

    def drop_finalizer(self, claim: Obj) -> bool:
        """Our finalizer off a claim whose ledger entries are gone (released or deallocated); True
        when this call removed it. A claim changed meanwhile keeps it for the next cycle."""
        if not allocation.has_finalizer(claim):
            return False
        meta = claim["metadata"]
        patch = {
            "metadata": {
                "finalizers": allocation.finalizers_without(claim),
                "resourceVersion": meta.get("resourceVersion"),
            }
        }
        self._writes.guard()
        try:
            written = self.api.patch(
                r.RESOURCE_CLAIMS_V1, meta["name"], patch, namespace=meta["namespace"]
            )
        except (errors.NotFound, errors.Conflict, errors.Invalid):
            return False
        self._own.claims.pop(str(meta.get("uid")), None)
        if str(meta.get("uid")) in self._own.released:
            self._own.remember_claim(written)
        return True
