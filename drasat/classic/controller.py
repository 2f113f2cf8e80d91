"""The controller loop: informers feed a work queue; workers decide with the solver and write.

Decisions (which devices, which nodes are unsuitable) are made from the informer caches under one
lock, so two pods negotiating at once see each other's tentative holds; writes go to the API
with optimistic concurrency. Order of writes for an allocation: finalizer on the claim, then the
NAS entry (the ledger), then the claim's status. A crash between any two is repaired by `resync`,
which runs at start and periodically: NAS entries without a claim are removed, claims in NAS but
not in their status are completed, claims in status but not in NAS are re-written or reported,
and NAS entries on a node other than the one the claim's status names are removed.

One claim, one node. Before a claim is allocated, its ownership is looked up across every NAS
object, the writes in flight (`Writes`) and its status (`_owners`), never only on the nodes the
decision looks at: a claim already listed somewhere is finished from there, not allocated again.
A status that already names another node when ours is written wins (the scheduler and the
kubelet follow it), and the NAS entry just written is removed again (`_write_status`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from drasat.api import groups
from drasat.api.nas import AllocatedDevices
from drasat.api.policy import AllocationPolicySpec
from drasat.classic import params
from drasat.classic import schedulingcontexts as scheduling
from drasat.classic.clusterworkload import ClusterWorkload
from drasat.classic.holds import Holds, Writes
from drasat.classic.workqueue import WorkQueue
from drasat.controller import allocation, nasnodes
from drasat.controller.metrics import Metrics
from drasat.kube import errors, informer, nasclient
from drasat.kube import resources as r
from drasat.kube.client import Api, Obj
from drasat.kube.events import EventRecorder
from drasat.solver.cache import SolverCache
from drasat.solver.problem import (
    ClaimRequest,
    Mode,
    NodeState,
    PodRequest,
    Problem,
    Solution,
    SolveParams,
)
from drasat.v1 import nasinventory

if TYPE_CHECKING:
    from drasat.controller.app import App

log = logging.getLogger(__name__)

Solve = Callable[[Problem, SolveParams], Solution]


@dataclass(frozen=True)
class Config:
    #: Namespace of the NodeAllocationState objects (the driver's namespace).
    namespace: str = "drasat"
    workers: int = 2
    hold_ttl_s: float = 30.0
    resync_s: float = 30.0
    policy_poll_s: float = 5.0
    retry_backoff_s: tuple[float, float] = (0.05, 5.0)
    nas_attempts: int = 8
    watch_timeout_s: int = 30
    component: str = "drasat-controller"


class Retry(Exception):
    """Process this key again later (with backoff)."""


class NoFit(Exception):
    """The decision no longer holds on the node (re-checked against a fresh NAS)."""


class AllocatedElsewhere(Retry):
    """The claim's status already names another node; our NAS entry for it was removed."""


@dataclass
class _Pending:
    """A decision being written: the pod, its node and the new allocations."""

    key: str
    node: str
    allocations: dict[str, AllocatedDevices]
    claims: dict[str, Obj]  # uid -> claim
    shareable: dict[str, bool]
    pod: PodRequest
    nas_version: str
    #: The claims registered in `Controller.writes` for this write (released when it ends).
    registered: frozenset[str] = frozenset()
    extra: dict[str, Any] = field(default_factory=dict)


def default_solve(problem: Problem, params: SolveParams) -> Solution:
    from drasat.solver import solve

    return solve(problem, params)


class Controller:
    def __init__(
        self,
        api: Api,
        config: Config | None = None,
        *,
        policy: Callable[[], AllocationPolicySpec] = AllocationPolicySpec,
        poll_policy: Callable[[], bool] = lambda: False,
        metrics: Metrics | None = None,
        solve: Solve = default_solve,
        hold_clock: Callable[[], float] = time.monotonic,
        may_write: Callable[[], bool] = lambda: True,
        recorder: EventRecorder | None = None,
    ) -> None:
        self.api = api
        self.config = config or Config()
        self._policy = policy
        self._poll_policy = poll_policy
        self.metrics = metrics or Metrics()
        self._solve = solve
        #: The solver's memo tables, this controller's own, passed to every solve (safe for the
        #: re-check solves that run outside the decision lock).
        self.solver_cache = SolverCache()
        self._may_write = may_write
        self.recorder = recorder or EventRecorder(api, component=self.config.component)
        self.holds = Holds(ttl_s=self.config.hold_ttl_s, clock=hold_clock)
        self.writes = Writes()
        self.queue = WorkQueue(backoff_s=self.config.retry_backoff_s)
        self._decide = threading.Lock()
        self._nas: dict[str, nasnodes.ParsedNas] = {}
        self._nas_lock = threading.Lock()
        self.workload = ClusterWorkload()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        timeout = self.config.watch_timeout_s

        def make(resource: r.Resource, handler: informer.Handler, **kw: Any) -> informer.Informer:
            return informer.Informer(api, resource, handler=handler, watch_timeout_s=timeout, **kw)

        self.claims = make(r.RESOURCE_CLAIMS, self._on_claim)
        self.classes = make(r.RESOURCE_CLASSES, self._on_class)
        self.contexts = make(r.POD_SCHEDULING_CONTEXTS, self._on_context)
        self.pods = make(r.PODS, self._on_pod)
        self.nas = make(r.NAS, self._on_nas, namespace=self.config.namespace)
        #: Our group's parameter kinds (NVIDIA's, rarely installed, are read on demand).
        self.parameters = {
            resource.kind: make(resource, self._on_parameters)
            for resource in (
                r.gpu_claim_parameters(),
                r.mig_device_claim_parameters(),
                r.device_class_parameters(),
            )
        }
        self._informers = [self.classes, self.nas, *self.parameters.values(), self.claims,
                           self.pods, self.contexts]  # fmt: skip

    # Life cycle.
    def start(self, *, sync_timeout_s: float = 30.0) -> None:
        self._poll_policy()
        for inf in self._informers:
            inf.start()
        for inf in self._informers:
            if not inf.wait_synced(sync_timeout_s):
                log.warning("%s not synced after %.0fs", inf.resource.plural, sync_timeout_s)
        self.queue.add("resync")
        for i in range(max(1, self.config.workers)):
            self._spawn(self._work, f"worker-{i}")
        self._spawn(self._tick, "resync")

    def stop(self) -> None:
        self._stop.set()
        self.queue.close()
        for inf in self._informers:
            inf.stop_soon()
        for inf in self._informers:
            inf.stop()
        for thread in self._threads:
            thread.join(5)

    @property
    def ready(self) -> bool:
        return all(inf.synced for inf in self._informers)

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _tick(self) -> None:
        last_resync = time.monotonic()
        while not self._stop.wait(min(self.config.policy_poll_s, self.config.resync_s)):
            try:
                if self._poll_policy():
                    self._enqueue_all_pending()
            except Exception:
                log.exception("policy poll failed")
            if time.monotonic() - last_resync >= self.config.resync_s:
                last_resync = time.monotonic()
                self.queue.add("resync")

    def _work(self) -> None:
        while not self._stop.is_set():
            key = self.queue.get(timeout=0.5)
            if key is None:
                continue
            try:
                self._process(key)
                self.queue.forget(key)
            except Retry as why:
                log.debug("%s: retry (%s)", key, why)
                self.queue.retry(key)
            except errors.KubeError as error:
                log.info("%s: API error, retrying: %s", key, error)
                self.queue.retry(key)
            except Exception:  # never let one object stop a worker
                log.exception("%s: unexpected error, retrying", key)
                self.queue.retry(key)
            finally:
                self.queue.done(key)

    def _process(self, key: str) -> None:
        kind, _, name = key.partition(":")
        if kind == "claim":
            self.reconcile_claim(name)
        elif kind == "pod":
            self.reconcile_context(name)
        elif kind == "resync":
            self.resync()
        self._update_pending_gauge()

    # Event handlers: enqueue, nothing else.
    def _on_claim(self, kind: str, obj: Obj) -> None:
        key = informer.key_of(obj)
        if kind == "DELETED":
            self.holds.drop(str((obj.get("metadata") or {}).get("uid", "")))
        self.queue.add(f"claim:{key}")
        namespace = (obj.get("metadata") or {}).get("namespace")
        for context in self.contexts.items():
            if (context.get("metadata") or {}).get("namespace") == namespace:
                self.queue.add(f"pod:{informer.key_of(context)}")

    def _on_class(self, kind: str, obj: Obj) -> None:
        self._enqueue_all_pending()

    def _on_context(self, kind: str, obj: Obj) -> None:
        key = informer.key_of(obj)
        if kind != "DELETED":
            self.queue.add(f"pod:{key}")
            return
        pod = self.pods.get(key)  # the pod went away (or was scheduled): end its holds
        namespace = (obj.get("metadata") or {}).get("namespace")
        for claim_name in allocation.pod_claim_names(pod or {}).values():
            claim = self.claims.get(f"{namespace}/{claim_name}")
            if claim is not None:
                self.holds.drop(str(claim["metadata"].get("uid", "")))

    def _on_parameters(self, kind: str, obj: Obj) -> None:
        self._enqueue_all_pending()

    def _on_pod(self, kind: str, obj: Obj) -> None:
        key = informer.key_of(obj)
        if self.contexts.get(key) is not None:
            self.queue.add(f"pod:{key}")

    def _on_nas(self, kind: str, obj: Obj) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        if kind == "DELETED":
            with self._nas_lock:
                self._nas.pop(name, None)
        else:
            self._remember_nas(obj)
        self._enqueue_all_pending()

    def _enqueue_all_pending(self) -> None:
        for context in self.contexts.items():
            self.queue.add(f"pod:{informer.key_of(context)}")
        for claim in self.claims.items():  # WaitForFirstConsumer claims move with their pods
            immediate = params.allocation_mode(claim) == params.IMMEDIATE
            pending = immediate and not allocation.is_allocated(claim)
            if pending or allocation.being_deleted(claim):
                self.queue.add(f"claim:{informer.key_of(claim)}")

    # The NAS cache: parsed once per resourceVersion; our own writes land at once.
    def _remember_nas(self, obj: Obj) -> None:
        parsed = nasnodes.parse(obj)
        name = parsed.node.name
        with self._nas_lock:
            current = self._nas.get(name)
            if current is None or _newer(parsed.resource_version, current.resource_version):
                self._nas[name] = parsed
        if parsed.problem:
            self.recorder.warning(obj, "InvalidNodeAllocationState", parsed.problem)

    def _nas_snapshot(self) -> dict[str, nasnodes.ParsedNas]:
        with self._nas_lock:
            return dict(self._nas)

    # Looking things up.
    def _lookup(self, group: str, kind: str, namespace: str | None, name: str) -> Obj | None:
        resource = r.parameters(group, kind)
        if resource is None:
            return None
        cache = self.parameters.get(kind) if group == groups.PARAMS_GROUP else None
        if cache is not None:
            found = cache.get(f"{namespace}/{name}" if namespace else name)
            if found is not None:
                return found
        try:  # not cached (yet): ask the server, so a fresh object is never reported missing
            return self.api.get(resource, name, namespace=namespace)
        except errors.NotFound:
            return None

    def _class_of(self, claim: Obj) -> Obj | None:
        name = (claim.get("spec") or {}).get("resourceClassName")
        return self.classes.get(str(name)) if name else None

    def _request_for(self, claim: Obj) -> tuple[ClaimRequest, bool]:
        """The claim's ClaimRequest and shareable; raises ParameterError (Event written)."""
        resource_class = self._class_of(claim)
        assert resource_class is not None
        try:
            info = params.resolve_class(resource_class, self._lookup)
            request = params.resolve_claim(claim, info, self._lookup)
        except params.ParameterError as error:
            self.recorder.warning(claim, error.reason, error.message)
            self.metrics.failures.labels(error.reason).inc()
            raise
        return request, info.shareable

    def _is_ours(self, claim: Obj) -> bool:
        return params.is_ours(self._class_of(claim)) or (
            allocation.has_finalizer(claim)
            and (claim.get("status") or {}).get("driverName") in (None, groups.DRIVER_NAME)
        )

    def _policy_now(self) -> AllocationPolicySpec:
        return self._policy()

    def _problem(
        self,
        states: tuple[NodeState, ...],
        pod: PodRequest,
        snapshot: dict[str, nasnodes.ParsedNas],
    ) -> Problem:
        """A one-pod problem whose target workload is what the whole cluster holds and awaits
        (`workload.py`), not that pod alone."""
        policy = self._policy_now()
        return Problem(
            states, (pod,), policy, workload=self.workload.shapes(policy, snapshot, [pod])
        )

    def _params(self, *, feasibility: bool) -> SolveParams:
        budget = self._policy_now().solver
        return SolveParams(
            mode=Mode.online,
            node_feasibility=feasibility,
            explain=feasibility,
            time_limit_s=budget.onlineTimeLimitSeconds,
            cache=self.solver_cache,
        )

    def _timed_solve(self, problem: Problem, *, feasibility: bool, kind: str) -> Solution:
        started = time.perf_counter()
        try:
            solution = self._solve(problem, self._params(feasibility=feasibility))
        finally:
            self.metrics.solver_seconds.labels(kind).observe(time.perf_counter() - started)
        # What the solve proved, as the solver states it (online: per pod, no bound).
        self.metrics.solves.labels(kind, solution.status.value).inc()
        log.debug(
            "solve %s: %s; %s; %d placed, %d unplaced",
            kind,
            solution.optimality_text(),
            solution.bound_text(),
            len(solution.placements),
            len(solution.unplaced),
            extra={"kind": kind, "status": solution.status.value, "bound": solution.bound_text()},
        )
        return solution

    def _owners(self, claims: list[Obj], snapshot: dict[str, nasnodes.ParsedNas]) -> dict[str, str]:
        """Where a decision's claims live already: claim uid -> node, for the allocated ones.

        Ownership is read across every NAS object (the ledger), the writes in flight and the
        claim's status, never from the nodes a problem happens to hold: a claim listed on a
        node the decision does not look at is allocated there all the same. Raises Retry when
        a claim is being written, when a claim the decision would allocate is owned already
        (its status is finished from the NAS next time, not allocated again), and when the
        ledger and the status disagree (resync repairs that). Call under the decision lock."""
        out: dict[str, str] = {}
        for claim in claims:
            uid, key = str(claim["metadata"].get("uid", "")), informer.key_of(claim)
            if self.writes.node(uid) is not None:
                raise Retry(f"claim {key} is being written")
            listed = nasnodes.owners_of(snapshot, uid)
            if not allocation.is_allocated(claim):
                if listed:
                    raise Retry(f"claim {key} is allocated on {listed[0]} already")
                continue
            there = allocation.allocated_node(claim)
            if there is None or listed != [there]:
                raise Retry(
                    f"claim {key}: its status names {there or 'no node'}, NodeAllocationState "
                    f"lists it on {', '.join(listed) or 'no node'}"
                )
            out[uid] = there
        return out

    # Claims.
    def reconcile_claim(self, key: str) -> None:
        claim = self.claims.get(key)
        if claim is None or not self._is_ours(claim):
            return
        uid = str(claim["metadata"].get("uid", ""))
        if allocation.being_deleted(claim) or allocation.deallocation_requested(claim):
            if allocation.reserved_for_anyone(claim) and not allocation.deallocation_requested(
                claim
            ):
                return  # deleted, but a pod still uses it: wait until it is released
            self.deallocate(claim)
            return
        if allocation.is_allocated(claim):
            self.holds.drop(uid)
            return
        if self._finish_listed([claim]):
            return
        try:
            request, shareable = self._request_for(claim)
        except params.ParameterError:
            return  # fixed parameters bring a new event for the claim or its class
        if params.allocation_mode(claim) == params.IMMEDIATE:
            self._allocate_immediate(claim, request, shareable)

    def _allocate_immediate(self, claim: Obj, request: ClaimRequest, shareable: bool) -> None:
        pod = PodRequest(
            key=f"claim:{informer.key_of(claim)}", namespace=request.namespace, claims=(request,)
        )
        with self._decide:
            # Holds before the NAS: a write that lands in between shows in the NAS, its hold
            # in `held`, or both (a held claim already in the NAS is not counted twice).
            held = self.holds.by_node(excluding=frozenset({request.uid}))
            snapshot = self._nas_snapshot()
            self._owners([claim], snapshot)  # not allocated anywhere yet, nor being written
            problem = self._problem(
                nasnodes.nodes_for(sorted(snapshot), snapshot, held), pod, snapshot
            )
            solution = self._timed_solve(problem, feasibility=False, kind="immediate")
            placement = solution.placement_of(pod.key)
            if placement is None:
                reasons = _reasons(solution, pod.key)
                self.recorder.warning(claim, "Unschedulable", f"no node fits: {reasons}")
                self.metrics.failures.labels("Unschedulable").inc()
                raise Retry("no node fits")
            pending = self._pending(
                pod,
                placement.node,
                nasinventory.entries_of(placement.allocations),
                {request.uid: claim},
                {request.uid: shareable},
                snapshot,
            )
        self._write(pending)

    def _pending(
        self,
        pod: PodRequest,
        node: str,
        allocations: dict[str, AllocatedDevices],
        claims: dict[str, Obj],
        shareable: dict[str, bool],
        snapshot: dict[str, nasnodes.ParsedNas],
    ) -> _Pending:
        """Register the claims as being written and hold their devices (under the decision lock,
        so no other decision sees them unowned) until the write ends."""
        if not self.writes.begin({uid: node for uid in allocations}):
            raise Retry("a claim of the decision is being written by another one")
        for uid, devices in allocations.items():
            self.holds.hold(uid, node, devices)
        entry = snapshot.get(node)
        return _Pending(
            pod.key,
            node,
            dict(allocations),
            claims,
            shareable,
            pod,
            entry.resource_version if entry else "",
            registered=frozenset(allocations),
        )

    # Writing an allocation: finalizer, NAS, status.
    def _write(self, pending: _Pending) -> None:
        """Write the allocations; their holds and registrations end with the write, whatever
        its outcome."""
        try:
            self._write_held(pending)
        finally:
            for uid in pending.allocations:
                self.holds.drop(uid)
            self.writes.end(pending.registered)

    def _write_held(self, pending: _Pending) -> None:
        self._check_leader()
        for uid, claim in pending.claims.items():
            if uid in pending.allocations:
                pending.claims[uid] = self._ensure_finalizer(claim)
        try:
            written = nasclient.update(
                self.api,
                namespace=self.config.namespace,
                node=pending.node,
                mutate=lambda obj: self._nas_mutation(obj, pending),
                attempts=self.config.nas_attempts,
                on_conflict=self.metrics.nas_conflicts.inc,
            )
        except NoFit as why:
            for uid in pending.allocations:
                self.holds.drop(uid)
            self.metrics.failures.labels("Conflict").inc()
            raise Retry(f"re-check on {pending.node} failed: {why}") from None
        except errors.NotFound:
            for uid in pending.allocations:
                self.holds.drop(uid)
            raise Retry(f"NodeAllocationState {pending.node} disappeared") from None
        self._remember_nas(written)
        unconfirmed = set(pending.allocations)
        for uid, devices in pending.allocations.items():
            claim = pending.claims[uid]
            # A status naming another node undoes every entry of this write whose status does
            # not name our node yet: the pod cannot run here without that claim.
            self._write_status(
                claim, pending.node, devices, shareable=pending.shareable[uid], undo=unconfirmed
            )
            unconfirmed.discard(uid)
            self.holds.drop(uid)
            self.metrics.allocations.inc()
            where = {"claim": informer.key_of(claim), "uid": uid, "node": pending.node}
            log.info("allocated %s on %s", where["claim"], pending.node, extra=where)

    def _nas_mutation(self, obj: Obj, pending: _Pending) -> Obj | None:
        """Add the pending allocations to a fresh NAS; re-check with the solver if it moved.

        Only this NAS is read: no other can gain the claims meanwhile, as they are registered
        in `writes` from the decision to the status (another replica's write, which this
        process cannot see, is caught by the status write, and resync removes its leftovers)."""
        self._check_leader()
        fresh = nasnodes.parse(obj)
        allocated = fresh.entries
        if fresh.resource_version != pending.nas_version:
            todo = {uid: d for uid, d in pending.allocations.items() if uid not in allocated}
            if todo:
                pending.allocations = self._recheck(pending, fresh.node, set(todo))
        pending.allocations = {
            uid: (allocated.get(uid) or devices) for uid, devices in pending.allocations.items()
        }
        pending.nas_version = fresh.resource_version
        return allocation.nas_with(obj, pending.allocations)

    def _recheck(self, pending: _Pending, fresh: NodeState, todo: set[str]) -> dict[str, Any]:
        if not fresh.ready:
            raise NoFit(fresh.unready_reason)
        ours = frozenset(c.uid for c in pending.pod.claims)
        held = self.holds.by_node(excluding=ours).get(fresh.name) or {}
        node = nasnodes.with_held(fresh, held)
        pod = replace(pending.pod, candidate_nodes=(fresh.name,))
        problem = self._problem((node,), pod, self._nas_snapshot())
        solution = self._timed_solve(problem, feasibility=False, kind="recheck")
        placement = solution.placement_of(pod.key)
        if placement is None:
            raise NoFit(_reasons(solution, pod.key))
        out = {uid: d for uid, d in pending.allocations.items() if uid not in todo}
        new = nasinventory.entries_of(placement.allocations)
        out.update({uid: d for uid, d in new.items() if uid in todo})
        return out

    def _ensure_finalizer(self, claim: Obj) -> Obj:
        if allocation.has_finalizer(claim):
            return claim
        try:
            return self.api.patch(
                r.RESOURCE_CLAIMS,
                claim["metadata"]["name"],
                {
                    "metadata": {
                        "finalizers": allocation.finalizers_with(claim),
                        "resourceVersion": claim["metadata"].get("resourceVersion"),
                    }
                },
                namespace=claim["metadata"]["namespace"],
            )
        except errors.Conflict:
            raise Retry("claim changed while adding the finalizer") from None

    def _write_status(
        self,
        claim: Obj,
        node: str,
        devices: AllocatedDevices,
        *,
        shareable: bool,
        undo: set[str],
    ) -> bool:
        """Set the claim's status.allocation to `node`: True when written, False when it names
        `node` already (or the claim was replaced by a new one of that name).

        A status that names another node wins: status.allocation cannot be changed, only
        cleared, and the scheduler and the kubelet follow it. Our NAS entries `undo` on `node`
        are then removed (else their devices stay taken for the claim's lifetime) and
        AllocatedElsewhere is raised."""
        meta = claim["metadata"]
        fresh = False  # an allocated status from the cache is read again before it is believed
        for _ in range(5):
            self._check_leader()
            if allocation.is_allocated(claim) and fresh:
                there = allocation.allocated_node(claim)
                if there == node:
                    return False
                self._remove_from_nas(node, undo)
                self.metrics.failures.labels("AllocatedElsewhere").inc()
                where = {"claim": informer.key_of(claim), "uid": meta.get("uid"), "node": node}
                log.warning(
                    "%s is allocated on %s already: removed it from the NAS of %s",
                    where["claim"], there or "another node", node, extra=where,
                )  # fmt: skip
                raise AllocatedElsewhere(f"{where['claim']} is allocated on {there}")
            if not allocation.is_allocated(claim):
                try:
                    self.api.replace_status(
                        r.RESOURCE_CLAIMS,
                        allocation.with_allocation(claim, node, devices, shareable=shareable),
                    )
                    return True
                except errors.Conflict:
                    pass
            claim = self.api.get(r.RESOURCE_CLAIMS, meta["name"], namespace=meta["namespace"])
            fresh = True
            if claim["metadata"].get("uid") != meta.get("uid"):
                return False  # a new claim of that name; resync removes the orphaned NAS entry
        raise Retry("claim status kept changing")

    def _finish_listed(self, claims: list[Obj]) -> bool:
        """Claims without status.allocation that a NAS lists are allocated there already (their
        status write is late, or a crash came between the two writes): write their status from
        the NAS; never allocate them again, on that node or another. Claims being written are
        left to their writer. True when any claim was listed."""
        snapshot = self._nas_snapshot()
        found = False
        for claim in claims:
            uid = str(claim["metadata"].get("uid", ""))
            owner = nasnodes.owner_of(snapshot, uid)
            if owner is not None and self.writes.node(uid) is None:
                self._complete_from_nas(claim, owner)
                found = True
        return found

    def _complete_from_nas(self, claim: Obj, node: str) -> None:
        """The NAS has it but the status does not (crash between the two writes): finish."""
        uid = str(claim["metadata"]["uid"])
        devices = self._nas_snapshot()[node].entries[uid]
        try:
            _, shareable = self._request_for(claim)
        except params.ParameterError:
            shareable = True
        claim = self._ensure_finalizer(claim)
        written = self._write_status(claim, node, devices, shareable=shareable, undo={uid})
        self.holds.drop(uid)
        if written:
            self.metrics.repairs.labels("completed").inc()
            log.info("completed %s from the NAS of %s", informer.key_of(claim), node)

    # Deallocation.
    def deallocate(self, claim: Obj) -> None:
        self._check_leader()
        meta = claim["metadata"]
        uid = str(meta.get("uid", ""))
        # Every NAS that lists the claim lets go of it, not only its status's node: an entry
        # left elsewhere would be finished into a new allocation (`_finish_listed`).
        node = allocation.allocated_node(claim)
        listed = set(nasnodes.owners_of(self._nas_snapshot(), uid))
        for name in sorted(listed | ({node} if node else set())):
            self._remove_from_nas(name, {uid})
        node = node or min(listed, default=None)
        self.holds.drop(uid)
        if allocation.being_deleted(claim):
            if allocation.has_finalizer(claim):
                patch = {
                    "metadata": {
                        "finalizers": allocation.finalizers_without(claim),
                        "resourceVersion": meta.get("resourceVersion"),
                    }
                }
                try:
                    self.api.patch(
                        r.RESOURCE_CLAIMS, meta["name"], patch, namespace=meta["namespace"]
                    )
                except errors.NotFound:
                    if not listed:
                        # Gone, and no NAS listed it: a stale cached copy of a claim that was
                        # deallocated already (its key came back before the informer saw the
                        # deletion) — nothing was done now, so nothing is counted or logged.
                        return
                except errors.Conflict:
                    raise Retry("claim changed while removing the finalizer") from None
        elif allocation.is_allocated(claim) or allocation.deallocation_requested(claim):
            try:
                self.api.replace_status(r.RESOURCE_CLAIMS, allocation.without_allocation(claim))
            except errors.Conflict:
                raise Retry("claim changed while clearing its allocation") from None
        self.metrics.deallocations.inc()
        where = {"claim": informer.key_of(claim), "uid": uid, "node": node or ""}
        log.info("deallocated %s", informer.key_of(claim), extra=where)

    def _remove_from_nas(self, node: str, uids: set[str]) -> None:
        written = nasclient.remove_claims(
            self.api,
            namespace=self.config.namespace,
            node=node,
            uids=uids,
            attempts=self.config.nas_attempts,
            on_conflict=self.metrics.nas_conflicts.inc,
        )
        if written is not None:
            self._remember_nas(written)

    # Scheduling contexts (WaitForFirstConsumer).
    def reconcile_context(self, key: str) -> None:
        context = self.contexts.get(key)
        pod_obj = self.pods.get(key)
        if context is None or pod_obj is None or allocation.being_deleted(context):
            return
        namespace = str(context["metadata"].get("namespace", ""))
        entries: dict[str, Obj] = {}  # pod claim entry -> claim (ours only)
        for entry, claim_name in allocation.pod_claim_names(pod_obj).items():
            claim = self.claims.get(f"{namespace}/{claim_name}")
            if claim is None:
                raise Retry(f"claim {namespace}/{claim_name} not seen yet")
            if params.is_ours(self._class_of(claim)):
                entries[entry] = claim
        pending = {
            e: c
            for e, c in entries.items()
            if not allocation.is_allocated(c)
            and params.allocation_mode(c) == params.WAIT_FOR_FIRST_CONSUMER
            and not allocation.being_deleted(c)
        }
        if not pending:
            return
        if self._finish_listed(list(pending.values())):
            return  # their status changes bring the pod back
        candidates = scheduling.candidates(context)
        requests: dict[str, ClaimRequest] = {}
        shareable: dict[str, bool] = {}
        bad: list[str] = []
        for entry, claim in entries.items():
            try:
                request, share = self._request_for(claim)
            except params.ParameterError:
                bad.append(entry)
                continue
            requests[request.uid], shareable[request.uid] = request, share
        if bad:
            self._write_context(context, {e: list(candidates) for e in pending})
            return
        pod = PodRequest(
            key=key,
            namespace=namespace,
            claims=tuple(requests.values()),
            candidate_nodes=candidates,
        )
        by_uid = {str(c["metadata"]["uid"]): c for c in entries.values()}
        selected = scheduling.selected_node(context)
        with self._decide:
            # Holds before the NAS: a write that lands in between shows in the NAS, its hold
            # in `held`, or both (a held claim already in the NAS is not counted twice).
            held = self.holds.by_node(excluding=frozenset(requests))
            snapshot = self._nas_snapshot()
            # The nodes of the pod's allocated claims join every problem (not as candidates):
            # the solver pins the pod to them, and allocates none of those claims again.
            homes = sorted(set(self._owners(list(entries.values()), snapshot).values()))
            pending_write = None
            if selected is not None:
                pinned = replace(pod, candidate_nodes=(selected,))
                problem = self._problem(
                    nasnodes.nodes_for([selected, *homes], snapshot, held), pinned, snapshot
                )
                solution = self._timed_solve(problem, feasibility=False, kind="selected")
                placement = solution.placement_of(key)
                if placement is not None:
                    pending_write = self._pending(
                        pinned,
                        selected,
                        nasinventory.entries_of(placement.allocations),
                        by_uid,
                        shareable,
                        snapshot,
                    )
            if pending_write is None:
                problem = self._problem(
                    nasnodes.nodes_for([*candidates, *homes], snapshot, held), pod, snapshot
                )
                solution = self._timed_solve(problem, feasibility=True, kind="feasibility")
                feasibility = dict(solution.node_feasibility.get(key) or {})
                for node in problem.nodes:
                    if not node.ready:
                        feasibility[node.name] = node.unready_reason
                placement = solution.placement_of(key)
                for uid in requests:  # the previous choice is void; keep only the new one
                    self.holds.drop(uid)
                if placement is not None and feasibility.get(placement.node, "x") is None:
                    for uid, devices in nasinventory.entries_of(placement.allocations).items():
                        self.holds.hold(uid, placement.node, devices)
        if pending_write is not None:
            try:
                self._write(pending_write)
            except Retry:
                self.queue.add_after(f"pod:{key}", 0.05)
                raise
            return
        unsuitable = scheduling.unsuitable(candidates, feasibility)
        self._write_context(context, {e: unsuitable for e in pending})
        if unsuitable:
            text = scheduling.describe(feasibility, candidates)
            all_bad = len(unsuitable) == len(candidates)
            for claim in pending.values():
                if all_bad:
                    self.recorder.warning(claim, "UnsuitableNodes", f"no node fits: {text}")
                    self.metrics.failures.labels("Unsuitable").inc()
                else:
                    self.recorder.normal(claim, "UnsuitableNodes", text)
        if selected is not None and selected in unsuitable:
            self.queue.add_after(f"pod:{key}", 1.0)  # the scheduler picks again

    def _write_context(self, context: Obj, unsuitable: dict[str, list[str]]) -> None:
        statuses = scheduling.merged(context, unsuitable)  # other drivers' entries are kept
        if not scheduling.status_differs(context, statuses):
            return
        self._check_leader()
        body = {**context, "status": {**(context.get("status") or {}), "resourceClaims": statuses}}
        try:
            self.api.replace_status(r.POD_SCHEDULING_CONTEXTS, body)
        except errors.Conflict:
            raise Retry("scheduling context changed") from None
        except errors.NotFound:
            return

    # Restart safety.
    def resync(self) -> None:
        """Make NAS and claim statuses agree; see the module docstring."""
        if not (self.claims.synced and self.nas.synced):
            raise Retry("caches not synced")
        claims = {str(c["metadata"].get("uid")): c for c in self.claims.items()}
        snapshot = self._nas_snapshot()
        in_nas: dict[str, set[str]] = {}
        for name, entry in snapshot.items():
            orphans = set()
            for uid in entry.entries:
                in_nas.setdefault(uid, set()).add(name)
                if uid not in claims:
                    orphans.add(uid)
            if orphans:
                self._check_leader()
                log.info("removing %d allocations of deleted claims from %s", len(orphans), name)
                self._remove_from_nas(name, orphans)
                self.metrics.repairs.labels("orphan").inc(len(orphans))
        for uid, claim in claims.items():
            ours = self._is_ours(claim)
            if not ours:
                continue
            key = informer.key_of(claim)
            allocated = allocation.is_allocated(claim)
            if allocation.being_deleted(claim) or not allocated:
                self.queue.add(f"claim:{key}")
            elif (claim.get("status") or {}).get("driverName") == groups.DRIVER_NAME:
                node = allocation.allocated_node(claim)
                if in_nas.get(uid, set()) != ({node} if node else set()):
                    self._agree(claim)
        for context in self.contexts.items():
            self.queue.add(f"pod:{informer.key_of(context)}")

    def _agree(self, cached: Obj) -> None:
        """Make the NAS objects agree with an allocated claim's status, read fresh (the cache may
        lag, and removing an entry is not undone). The status is the truth, as the scheduler and
        the kubelet follow it: an entry on any other node is removed (its devices would stay
        taken for the claim's lifetime), and a missing entry on its node is re-written
        (`_repair`). The claim is registered as being written meanwhile, so that no decision
        allocates it in between; while a write runs, the next pass looks again."""
        meta = cached["metadata"]
        uid = str(meta.get("uid", ""))
        if not self.writes.begin({uid: ""}):
            return
        try:
            try:
                claim = self.api.get(r.RESOURCE_CLAIMS, meta["name"], namespace=meta["namespace"])
            except errors.NotFound:
                return
            status = claim.get("status") or {}
            ours = status.get("driverName") == groups.DRIVER_NAME
            if claim["metadata"].get("uid") != uid or not status.get("allocation") or not ours:
                return  # changed since the cache saw it: the next pass decides
            node = allocation.allocated_node(claim)
            listed = nasnodes.owners_of(self._nas_snapshot(), uid)
            if node is None:
                if not listed:
                    self._repair(claim, self._nas_snapshot())  # reports it lost
                return  # no node to compare with: leave the ledger as it is
            for stray in listed:
                if stray == node:
                    continue
                self._check_leader()
                self._remove_from_nas(stray, {uid})
                self.metrics.repairs.labels("stray").inc()
                text = f"removed it from NodeAllocationState {stray}: its status names {node}"
                where = {"claim": informer.key_of(claim), "uid": uid, "node": stray}
                log.warning("%s: %s", where["claim"], text, extra=where)
                self.recorder.normal(claim, "AllocationRepaired", text)
            if node not in listed:
                self._repair(claim, self._nas_snapshot())
        finally:
            self.writes.end({uid})

    def _repair(self, claim: Obj, snapshot: dict[str, nasnodes.ParsedNas]) -> None:
        """In its status but not in its node's NAS: re-write it there if its devices are free."""
        node = allocation.allocated_node(claim)
        devices = allocation.devices_from_status(claim)
        uid = str(claim["metadata"]["uid"])
        entry = snapshot.get(node) if node else None
        if node is None or devices is None or entry is None:
            why = (
                "its node or devices cannot be read back"
                if entry or not node
                else (f"node {node} has no NodeAllocationState")
            )
            self._lost(claim, why)
            return
        clash = allocation.conflicts(dict(entry.entries), devices)
        if clash:
            self._lost(claim, f"its devices on {node} are now used by claims {', '.join(clash)}")
            return
        self._check_leader()

        def mutate(obj: Obj) -> Obj | None:
            fresh = nasnodes.parse(obj).entries
            if uid in fresh:
                return None
            if allocation.conflicts(dict(fresh), devices):
                raise NoFit("devices taken meanwhile")
            return allocation.nas_with(obj, {uid: devices})

        try:
            written = nasclient.update(
                self.api,
                namespace=self.config.namespace,
                node=node,
                mutate=mutate,
                on_conflict=self.metrics.nas_conflicts.inc,
            )
        except NoFit as why:
            self._lost(claim, str(why))
            return
        self._remember_nas(written)
        self.metrics.repairs.labels("rewritten").inc()
        self.recorder.normal(
            claim, "AllocationRepaired", f"re-wrote the allocation into NodeAllocationState {node}"
        )

    def _lost(self, claim: Obj, why: str) -> None:
        self.metrics.repairs.labels("lost").inc()
        self.recorder.warning(
            claim,
            "AllocationLost",
            f"allocated in status but missing from every NodeAllocationState and not re-written: "
            f"{why}; delete the claim or request deallocation",
        )

    def _update_pending_gauge(self) -> None:
        count = 0
        for claim in self.claims.items():
            open_claim = not allocation.is_allocated(claim) and not allocation.being_deleted(claim)
            if open_claim and params.is_ours(self._class_of(claim)):
                count += 1
        self.metrics.pending_claims.set(count)

    def _check_leader(self) -> None:
        if not self._may_write():
            raise Retry("not the leader")


def _reasons(solution: Solution, pod: str) -> str:
    for rejection in solution.unplaced:
        if rejection.pod == pod:
            return "; ".join(rejection.reasons) or "no reason given"
    return f"solver status {solution.status.value}"


def _newer(a: str, b: str) -> bool:
    """Is resourceVersion a newer than b? (numeric where both are; else assume so)."""
    if a.isdigit() and b.isdigit():
        return int(a) >= int(b)
    return True


def for_app(app: App, solve: Solve | None) -> Controller:
    """The classic controller of `drasat controller` (`app.Classic`), from the app's options."""
    options = app.options
    return Controller(
        app.api,
        Config(
            namespace=options.namespace,
            workers=options.workers,
            resync_s=options.resync_s,
            hold_ttl_s=options.hold_ttl_s,
        ),
        policy=app.policy.current,
        poll_policy=app.policy.poll,
        metrics=app.metrics,
        solve=solve or default_solve,
        may_write=app.may_write,
    )
