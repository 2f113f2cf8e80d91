"""The ledger settled with the claims, whose status is the truth (the first step of a cycle):

- entries of claims that are gone, no longer allocated (the scheduler's PostFilter or the
  resourceclaim controller cleared them) or allocated elsewhere leave the ledger; a claim this
  process allocated that lost its allocation while it still exists was given back by the
  scheduler: its node is unsuitable for the claim's pods for `unsuitable_ttl_s`, with the
  scheduler's reason (`Releaser.unsuitable`);
- allocated claims missing from the ledger are written back (a restart, a lost write);
- claims being deleted that no pod holds any more are released: their ledger entries go, then
  our finalizer;
- claims of drasat's that no pod uses any more (`unused`: no live consumer in `reservedFor`,
  no bound pod naming them, no pending pod that could still go where they are allocated and is
  neither refused by drasat's allocation nor held by another owner's gate) are deallocated
  (`deallocation.Deallocator`): a standalone claim whose last pod finished or left, a claim
  whose pod was deleted before it was bound, a claim left on a drained node whose next pod
  cannot go there, a claim pinning its refused pod to a full node. As the resourceclaim
  controller and kube-scheduler's PostFilter do for kube-scheduler's claims, but from the
  state, not from the moment `reservedFor` empties: a restarted controller finds them;
- a claim not allocated that no pod names and no ledger entry holds loses our finalizer (after
  a deallocation, off the path of the pods waiting for its devices).

A node of another driver (NVIDIA's) keeps no NAS: its ledger is the claims' statuses, and only
this process's memory of what it allocated there is settled.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Container, Iterable, Mapping

from drasat.api import nodefit
from drasat.api.nas import AllocatedDevices
from drasat.controller import allocation, nasnodes, v1inputs
from drasat.controller.cycle.changes import Scope
from drasat.controller.cycle.deallocation import Deallocator
from drasat.controller.cycle.ledger import Ledger
from drasat.controller.cycle.ownwrites import OwnWrites, WrittenClaim
from drasat.controller.cycle.writes import Writes
from drasat.controller.metrics import Metrics
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import Api, Obj

log = logging.getLogger(__name__)

#: How many deleted pods' uids `Releaser.gone` keeps (the resourceclaim controller keeps 500).
GONE_KEPT = 1000


class Releaser:
    """Settles the ledger and releases the claims nothing holds."""

    def __init__(
        self,
        api: Api,
        *,
        writes: Writes,
        ledger: Ledger,
        own: OwnWrites,
        ledgers: v1inputs.StatusLedgers,
        metrics: Metrics,
        deallocator: Deallocator,
        unsuitable_ttl_s: float,
        clock: Callable[[], float],
        refused: Callable[[], Collection[str]] = frozenset,
    ) -> None:
        self.api = api
        self._writes = writes
        self._ledger = ledger
        self._own = own
        self._deallocator = deallocator
        #: Claim statuses read as ledger entries (the cycle's, shared with the other parts).
        self._ledgers = ledgers
        self._metrics = metrics
        self._unsuitable_ttl_s = unsuitable_ttl_s
        self._clock = clock
        #: pod key -> node -> (until, reason).
        self.unsuitable: dict[str, dict[str, tuple[float, str]]] = {}
        #: The uids of the last pods the informer saw deleted (`pod_deleted`), oldest first.
        self.gone: dict[str, None] = {}
        #: The keys of the pending pods drasat's allocation refused last (`unused`).
        self._refused = refused
        #: Those the last settle saw: a pod refused since names claims to look at again.
        self._refused_seen: frozenset[str] = frozenset()

    def pod_deleted(self, pod: Obj) -> None:
        """Remember a pod the informer saw deleted: a reservation of it holds nothing, and
        needs no lookup (`still_reserved`). The last `GONE_KEPT` are kept."""
        self.gone[str(pod["metadata"].get("uid"))] = None
        while len(self.gone) > GONE_KEPT:
            del self.gone[next(iter(self.gone))]

    def unsuitable_now(self) -> dict[str, dict[str, str]]:
        """pod key -> node -> why, for the nodes still unsuitable for the pod (the others are
        forgotten)."""
        now = self._clock()
        out: dict[str, dict[str, str]] = {}
        for pod, by_node in list(self.unsuitable.items()):
            live = {n: why for n, (until, why) in by_node.items() if until > now}
            if live:
                out[pod] = live
            else:
                del self.unsuitable[pod]
        return out

    def settle(self, snapshot: v1inputs.Snapshot, scope: Scope | None = None) -> bool:
        """Bring the ledger in line with the claims' status; True when anything was written.
        `scope`: only these nodes' ledgers and these claims (`changes.Changes`: the others are
        as the last settle left them); None: all. Claims being deleted are all looked at."""
        by_uid = {str(c["metadata"].get("uid")): c for c in snapshot.claims.values()}
        changed = False
        for name, parsed in snapshot.nas.items():
            if parsed.from_statuses:
                changed |= self._settle_from_statuses(name, by_uid, snapshot)
                continue
            if scope is not None and name not in scope.nodes:
                continue
            stale = stale_entries(parsed.entries, name, by_uid, self._own.claims)
            for uid in stale.values():
                self._given_back(uid, name, by_uid.get(uid), snapshot)
            if not stale:
                continue
            if self._writes.confined(f"ledger of {name}", [], self._remove_stale, name, set(stale)):
                self._metrics.deallocations.inc(len({k.partition("/")[0] for k in stale}))
                changed = True
        claims = list(by_uid.values()) if scope is None else scope.claims_of(by_uid.values())
        leaving = claims_leaving(by_uid.values(), snapshot.classes)
        free = self._unheld(leaving, snapshot) if leaving else []
        # A claim released in an earlier cycle whose finalizer stayed (that patch met a change)
        # is still allocated in its status: its entries are gone on purpose, not lost.
        releasing = {str(c["metadata"].get("uid")) for c in free}
        for claim in claims:
            if str(claim["metadata"].get("uid")) in releasing:
                continue
            if v1inputs.settles(claim, snapshot.classes) and v1inputs.names_our_driver(claim):
                ref = v1inputs.claim_ref(claim)
                changed |= bool(self._writes.confined(ref, [claim], self._restore, claim, snapshot))
        changed |= self._release(free, snapshot)
        refused = frozenset(self._refused())
        fresh = refused - self._refused_seen
        again = _claims_of(snapshot, fresh) if scope is not None and fresh else []
        self._refused_seen = refused
        seen = {str(c["metadata"].get("uid")) for c in claims}
        extra = [c for c in again if str(c["metadata"].get("uid")) not in seen]
        changed |= self._deallocate_unused(snapshot, claims + extra, refused)
        self._drop_unneeded_finalizers(snapshot, claims)
        return changed

    def _drop_unneeded_finalizers(self, snapshot: v1inputs.Snapshot, claims: list[Obj]) -> None:
        """Our finalizer off the claims (of `claims`) that need it no more
        (`finalizer_unneeded`), side by side. Nothing waits for these writes: the next cycles
        need not run for them."""
        maybe = [c for c in claims if allocation.has_finalizer(c) and not v1inputs.is_allocated(c)]
        if not maybe:
            return
        users = claim_users(snapshot.pods)
        held = {e.claimInfo.uid for p in snapshot.nas.values() if not p.from_statuses
                for e in p.entries.values()}  # fmt: skip
        found = [c for c in maybe if finalizer_unneeded(c, users, held)]
        self._writes.in_parallel(
            lambda claim: self._writes.confined(
                v1inputs.claim_ref(claim), [claim], self._deallocator.drop_finalizer, claim
            ),
            found,
        )

    def _deallocate_unused(
        self, snapshot: v1inputs.Snapshot, claims: list[Obj], refused: Container[str]
    ) -> bool:
        """Deallocate the claims (of `claims`) of drasat's that no pod uses any more (`unused`;
        `refused`: the pods drasat's allocation refused), side by side; True when any was. A
        claim whose pods cannot be looked up now waits for the next cycle; one whose write
        fails is that claim's alone (`Writes.confined`)."""
        candidates = [c for c in claims if deallocates(c, snapshot.classes)]
        if not candidates:
            return False
        pods = {str(p["metadata"].get("uid")): p for p in snapshot.pods}
        users = claim_users(snapshot.pods)

        def still_unused(claim: Obj) -> bool:
            mine = users.get(v1inputs.claim_ref(claim), [])
            return deallocates(claim, snapshot.classes) and unused(
                claim, mine, snapshot.nodes, pods, self._look_up_pod, self.gone, refused
            )

        found = []
        for claim in candidates:
            what = f"{v1inputs.claim_ref(claim)}: looking up the pods it is reserved for"
            if self._writes.confined(what, [claim], still_unused, claim):
                found.append(claim)
        done = self._writes.in_parallel(
            lambda claim: self._writes.confined(
                v1inputs.claim_ref(claim), [claim], self._deallocator.deallocate,
                claim, still_unused, "no pod uses it any more",
            ),
            found,
        )  # fmt: skip
        return any(done)

    def _settle_from_statuses(
        self, node: str, by_uid: Mapping[str, Obj], snapshot: v1inputs.Snapshot
    ) -> bool:
        """A node whose ledger is the claims' statuses (NVIDIA's driver) has nothing to write
        back; a claim this process allocated there that lost its allocation was given back by
        the scheduler, as a stale NAS entry says on drasat's nodes. True when a write this
        process remembered is forgotten (the snapshot counted it)."""
        forgotten = False
        for uid, written in list(self._own.claims.items()):
            if written.node != node:
                continue
            claim = by_uid.get(uid)
            if claim is not None and written.unseen_in(claim):
                continue  # the cache has not seen our status write yet
            if claim is None or v1inputs.allocated_node(claim) != node:
                self._given_back(uid, node, claim, snapshot)
                forgotten = True
        return forgotten

    def _given_back(
        self, uid: str, node: str, claim: Obj | None, snapshot: v1inputs.Snapshot
    ) -> None:
        """A claim this process allocated lost its allocation while it still exists: the
        scheduler could not bind its pods there. Remember that node for those pods."""
        written = self._own.claims.pop(uid, None)
        if written is None or claim is None or claim["metadata"].get("deletionTimestamp"):
            return
        for pod_key in written.pods:
            reason = _scheduler_reason(snapshot, pod_key)
            until = self._clock() + self._unsuitable_ttl_s
            self.unsuitable.setdefault(pod_key, {})[node] = (until, reason)
            log.info("%s: claim %s was given back on %s (%s); trying elsewhere",
                     pod_key, v1inputs.claim_ref(claim), node, reason)  # fmt: skip

    def _restore(self, claim: Obj, snapshot: v1inputs.Snapshot) -> bool:
        """The claim's ledger entries on its node, by the devices its status names (whoever
        allocated it): missing ones are written back; entries naming other devices (the claim
        was given back and allocated again between cycles) are replaced."""
        uid = str(claim["metadata"].get("uid"))
        written = self._own.claims.get(uid)
        if written is not None and written.unseen_in(claim):
            return False  # the cache has not seen our own status write yet
        node, entries = v1inputs.ledger_of(claim, snapshot, self._ledgers)
        parsed = snapshot.nas.get(node or "")
        if node is None or parsed is None or not entries:
            return False
        ledger = parsed.entries
        current = {k: e for k, e in ledger.items() if e.claimInfo.uid == uid}
        if allocation.device_ids(current.values()) == allocation.device_ids(entries.values()):
            missing = {k: v for k, v in entries.items() if k not in ledger}
            if not missing or current:
                return False
        ref = v1inputs.claim_ref(claim)
        if current and len(_devices_named(entries)) < len(v1inputs.our_results(claim)):
            # Some result names a device this node's NAS does not list: keep what is there
            # rather than drop devices the claim may hold.
            log.info("ledger of %s: %s names devices the node does not list", node, ref)
            return False
        self._ledger.replace_claim(node, uid, entries)
        kind = "nas-corrected" if current else "nas-rewritten"
        self._metrics.repairs.labels(kind).inc()
        log.info("ledger of %s: %s %s from its status", node,
                 "corrected" if current else "restored", ref)  # fmt: skip
        return True

    def _release(self, free: list[Obj], snapshot: v1inputs.Snapshot) -> bool:
        """Claims being deleted that no pod holds any more (`_unheld` of `claims_leaving`):
        their ledger entries go, one NAS write per node (the nodes side by side), then our
        finalizer, the claims side by side. True when anything was written. A departure frees
        its devices in the cycle that sees it, not after one write per claim in a row (the
        churn's arrivals wait for departures)."""
        if not free:
            return False
        by_node = ledger_keys(snapshot, {str(c["metadata"].get("uid")) for c in free})
        failed: set[str] = set()

        def clear(item: tuple[str, set[str]]) -> None:
            node, keys = item
            what = f"ledger of {node}"
            if self._writes.confined(what, [], self._remove_stale, node, keys) is None:
                failed.add(node)

        self._writes.in_parallel(clear, sorted(by_node.items()))
        # A claim whose entries could not leave its node's ledger keeps our finalizer: the
        # next cycle tries again (the ledger never forgets a claim that still holds devices).
        stuck = {e.claimInfo.uid for n in failed for k, e in
                 snapshot.nas[n].entries.items() if k in by_node[n]}  # fmt: skip
        ready = [c for c in free if str(c["metadata"].get("uid")) not in stuck]
        done = self._writes.in_parallel(
            lambda claim: self._writes.confined(
                v1inputs.claim_ref(claim), [claim], self._drop_finalizer, claim
            ),
            ready,
        )
        return bool(by_node) or any(done)

    def _drop_finalizer(self, claim: Obj) -> bool:
        """Our finalizer off a released claim (its ledger entries are gone)."""
        dropped = self._deallocator.drop_finalizer(claim)
        if dropped:
            log.info("released %s", v1inputs.claim_ref(claim))
        return dropped

    def _unheld(self, claims: list[Obj], snapshot: v1inputs.Snapshot) -> list[Obj]:
        """The claims no pod holds any more (`still_reserved`). A claim whose pod could not be
        looked up (the API server answered 429 or 5xx, or timed out) is held for now: it waits
        for the next cycle, said as a fault on it; the others go on."""
        pods = {str(p["metadata"].get("uid")): p for p in snapshot.pods}
        free = []
        for claim in claims:
            what = f"{v1inputs.claim_ref(claim)}: looking up the pods it is reserved for"
            held = self._writes.confined(
                what, [claim], still_reserved, claim, pods, self._look_up_pod, self.gone
            )
            if held is False:
                free.append(claim)
        return free

    def _look_up_pod(self, namespace: str, name: str) -> Obj | None:
        """A pod the cache does not know, read from the API server (None: not found)."""
        try:
            return self.api.get(r.PODS, name, namespace=namespace)
        except errors.NotFound:
            return None

    def _remove_stale(self, node: str, keys: set[str]) -> bool:
        self._ledger.remove(node, keys)
        return True


def _devices_named(entries: Mapping[str, AllocatedDevices]) -> list[object]:
    """One item per device the entries name (a CPU fallback entry counts as its device)."""
    out: list[object] = []
    for entry in entries.values():
        gpus = entry.gpu.devices if entry.gpu else []
        migs = entry.mig.devices if entry.mig else []
        out.extend([*gpus, *migs] or ([entry] if entry.optional else []))
    return out


def _claims_of(snapshot: v1inputs.Snapshot, pod_keys: Container[str]) -> list[Obj]:
    """The existing claims the pods `pod_keys` name."""
    out: dict[str, Obj] = {}
    for name, users in claim_users(p for p in snapshot.pods
                                   if v1inputs.pod_key(p) in pod_keys).items():  # fmt: skip
        claim = snapshot.claims.get(name)
        if claim is not None and users:
            out[name] = claim
    return list(out.values())


def _scheduler_reason(snapshot: v1inputs.Snapshot, pod_key: str) -> str:
    pod = next((p for p in snapshot.pods if v1inputs.pod_key(p) == pod_key), None)
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "unschedulable")
    return "the scheduler gave the claim back"


# What is stale, leaving and still held: purely computational, over the snapshot and this
# process's memory of its writes.
def holds(claim: Obj | None, written: WrittenClaim | None, node: str) -> bool:
    """Whether a ledger entry on `node` of `claim` (None: the claim is gone) is still held: the
    claim is allocated on `node` with a result of drasat's driver, or this process wrote its
    allocation there (`written`) and the cache has not seen that write yet."""
    if claim is None:
        return False
    if written is not None and written.node == node and written.unseen_in(claim):
        return True  # the cache has not seen our status write yet
    if not v1inputs.is_allocated(claim):
        return False
    return v1inputs.allocated_node(claim) == node and v1inputs.names_our_driver(claim)


def stale_entries(
    ledger: Mapping[str, AllocatedDevices],
    node: str,
    by_uid: Mapping[str, Obj],
    written: Mapping[str, WrittenClaim],
) -> dict[str, str]:
    """The entries of a node's ledger that no claim holds any more (`holds`): key -> claim
    uid, in the ledger's order. `by_uid`: the snapshot's claims; `written`: this process's."""
    out: dict[str, str] = {}
    for key, entry in ledger.items():
        uid = entry.claimInfo.uid
        if not holds(by_uid.get(uid), written.get(uid), node):
            out[key] = uid
    return out


def stale_entries_as_holds(
    snapshot: v1inputs.Snapshot, to_allocate: Iterable[Obj], written: Mapping[str, WrittenClaim]
) -> v1inputs.Snapshot:
    """The snapshot with each stale ledger entry (`stale_entries`) of a claim about to be
    allocated (`to_allocate`) kept as a hold of its devices, not as that claim's entry. Such an
    entry is left when the claim's status write failed after its ledger write, until a settle
    removes it (that write may fail too); the solver takes a claim with a ledger entry on a node
    as allocated there, so it would place the claim's pod with nothing to write (a gang let go
    with a member unallocated). Its devices stay taken until the settle removes the entry."""
    uids = {str(c["metadata"].get("uid")) for c in to_allocate}
    by_uid = {str(c["metadata"].get("uid")): c for c in snapshot.claims.values()}
    nas = dict(snapshot.nas)
    for name, parsed in snapshot.nas.items():
        if parsed.from_statuses:
            continue
        ledger = parsed.entries
        mine = {k: e for k, e in ledger.items() if e.claimInfo.uid in uids}
        stale = stale_entries(mine, name, by_uid, written) if mine else {}
        if not stale:
            continue
        claims = {(nasnodes.HELD_PREFIX + k if k in stale else k): e for k, e in ledger.items()}
        nas[name] = nasnodes.with_entries(parsed, claims)
    return dataclasses.replace(snapshot, nas=nas)


def claims_leaving(claims: Iterable[Obj], classes: Mapping[str, Obj]) -> list[Obj]:
    """The claims being deleted that carry our finalizer: released once no pod holds them. Ours
    by finalizer, by status or by class (`v1inputs.settles`): a claim whose DeviceClass was
    deleted is still released."""
    return [
        c for c in claims
        if c["metadata"].get("deletionTimestamp") and allocation.has_finalizer(c)
        and v1inputs.settles(c, classes)
    ]  # fmt: skip


def still_reserved(
    claim: Obj,
    pods: Mapping[str, Obj],
    look_up: Callable[[str, str], Obj | None],
    gone: Container[str] = frozenset(),
) -> bool:
    """Whether a pod still holds the claim. A reservation of a pod that is gone (or finished,
    or deleted before it was bound) holds nothing, as the resourceclaim controller decides
    before it clears `reservedFor`: the devices need not wait for that write. A pod the cache
    does not know is looked up (`look_up(namespace, name)`, None: not found; it may be newer
    than the cache), unless the informer saw it deleted (`gone`: uids; the resourceclaim
    controller keeps the same memory to spare that request). `pods`: the cycle's pods by uid,
    built once for all the claims."""
    meta = claim["metadata"]
    for ref in (claim.get("status") or {}).get("reservedFor") or []:
        if ref.get("resource", "pods") != "pods" or ref.get("apiGroup"):
            return True  # another kind of consumer: only its owner knows
        pod = pods.get(str(ref.get("uid")))
        if pod is None and str(ref.get("uid")) in gone:
            continue
        if pod is None:
            pod = look_up(meta["namespace"], ref.get("name", ""))
            if pod is None:
                continue
            if pod["metadata"].get("uid") != ref.get("uid"):
                continue  # another pod of that name
        if not v1inputs.pod_done(pod):
            return True
    return False


def deallocates(claim: Obj, classes: Mapping[str, Obj]) -> bool:
    """Whether drasat deallocates the claim once no pod uses it: allocated, not being deleted
    (then it is released), and allocated by drasat. A claim of drasat's driver says so by our
    finalizer, added before its status and by nothing else (an allocation another writer put
    there, an admin's or a stale replica's, is not drasat's to take back). A claim of another
    driver drasat allocates (NVIDIA's: no NAS, so no finalizer, one write fewer per pod) is
    drasat's when its class is one drasat allocates (`v1inputs.allocates`: drasat is then its
    one allocator, whether the claim tolerates the allocator taint or not; a claim asking for
    admin access alone is kube-scheduler's, whose deallocation is the resourceclaim
    controller's)."""
    if not v1inputs.is_allocated(claim) or claim["metadata"].get("deletionTimestamp"):
        return False
    if allocation.has_finalizer(claim):
        return True
    return not v1inputs.names_our_driver(claim) and v1inputs.allocates(claim, classes)


def finalizer_unneeded(claim: Obj, users: Mapping[str, list[Obj]], held: Container[str]) -> bool:
    """Whether the claim carries our finalizer for nothing: not allocated, not being deleted
    (then it is released), named by no pod that is not done (`claim_users`: that pod's claim
    is allocated again soon, and would need the finalizer again), and no ledger entry of it
    left (`held`: the uids the NASes hold; the finalizer keeps the claim until they go)."""
    if not allocation.has_finalizer(claim) or v1inputs.is_allocated(claim):
        return False
    meta = claim["metadata"]
    if meta.get("deletionTimestamp") or str(meta.get("uid")) in held:
        return False
    return not users.get(v1inputs.claim_ref(claim))


def claim_users(pods: Iterable[Obj]) -> dict[str, list[Obj]]:
    """Claim `namespace/name` -> the pods not done that name it (in `spec.resourceClaims`, a
    template's claim by `status.resourceClaimStatuses`, or as kube-scheduler's claim of their
    extended resources)."""
    out: dict[str, list[Obj]] = {}
    for pod in pods:
        if v1inputs.pod_done(pod):
            continue
        namespace = str(pod["metadata"].get("namespace", ""))
        names = [n for n in v1inputs.pod_claim_names(pod) if n]
        extended = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get(
            "resourceClaimName"
        )
        if extended:
            names.append(str(extended))
        for name in dict.fromkeys(names):
            out.setdefault(f"{namespace}/{name}", []).append(pod)
    return out


def unused(
    claim: Obj,
    users: Iterable[Obj],
    nodes: Mapping[str, Obj],
    pods: Mapping[str, Obj],
    look_up: Callable[[str, str], Obj | None],
    gone: Container[str] = frozenset(),
    refused: Container[str] = frozenset(),
) -> bool:
    """Whether no pod uses the allocated claim any more, nor will where it is allocated:

    - no consumer in its `reservedFor` still holds it (`still_reserved`: a finished, deleted or
      replaced pod holds nothing, as the resourceclaim controller decides);
    - no pod naming it (`users`, from `claim_users`) is bound: a bound pod the resourceclaim
      controller has not reserved it for yet will use it;
    - no pending pod naming it could go to the node it is allocated on (`nodefit.unfit`: a
      cordoned or deleted node, taints, node selectors and affinity): a pending pod keeps the
      claim it was allocated for, but not on a drained node, where it would wait for ever;
    - a pending pod keeps it neither while another owner's scheduling gate holds the pod
      (Kueue's: it cannot run now, and may wait for hours) nor once drasat's allocation refused
      the pod (`refused`: pod keys), which may only go where its allocated claims are: given
      back, the claim is allocated again with the pod's others, wherever they all fit, as
      kube-scheduler's PostFilter deallocates an unreserved claim of a pod that fits nowhere.

    A claim allocated for a pending pod that kube-scheduler has not reserved it for yet is in
    use. `pods`: the cycle's pods by uid; `look_up`, `gone`: a pod the cache does not know
    (`still_reserved`)."""
    if still_reserved(claim, pods, look_up, gone):
        return False
    name = v1inputs.allocated_node(claim)
    node = nodes.get(name) if name else None
    for pod in users:
        if (pod.get("spec") or {}).get("nodeName"):
            return False
        if v1inputs.others_gates(pod) or v1inputs.pod_key(pod) in refused:
            continue  # cannot run now, or cannot be placed with the claim where it is
        if name is None:
            return False  # allocated where its node selector says, not on one node: kept
        if node is not None and nodefit.unfit(pod, node) is None:
            return False
    return True


def ledger_keys(snapshot: v1inputs.Snapshot, uids: set[str]) -> dict[str, set[str]]:
    """Node -> the keys of the ledger entries of the claims `uids`, on the nodes with a NAS (on
    the others the status was the ledger)."""
    out: dict[str, set[str]] = {}
    for name, parsed in snapshot.nas.items():
        if parsed.from_statuses:
            continue  # no NAS there: the status was the ledger
        keys = {k for k, e in parsed.entries.items() if e.claimInfo.uid in uids}
        if keys:
            out[name] = keys
    return out
