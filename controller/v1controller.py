"""The v1 allocation loop: drasat's controller places `resource.k8s.io/v1` claims with the solver
and kube-scheduler binds the pods.

One thread runs cycles; informers wake it. A cycle is a short orchestrator over one snapshot of
the informers, each question answered by one part (`controller.cycle`):

1. `releasing`: settles the ledger (the NAS `allocatedClaims`) with the claims, whose status is
   the truth: entries of claims that are gone, no longer allocated (the scheduler's PostFilter
   or the resourceclaim controller cleared them) or allocated elsewhere are removed; allocated
   claims missing from the ledger are written back (a restart, a lost write); a claim being
   deleted loses our finalizer once nothing holds it; a claim of drasat's that no pod uses any
   more is deallocated (`deallocation`). A deallocation by the scheduler of a claim this process
   wrote marks the node unsuitable for the claim's pods for `unsuitable_ttl_s`, with the
   scheduler's reason; then `repairing`: claims whose statuses name one device;
2. gathers the pending pods with unallocated claims of ours (`wholegangs`: a gang's pods whole
   or none) and `allocating`: after a short window, at most `batch_max`, places them together in
   one `drasat.v1.allocate` call;
3. `allocationwrites`: writes the placed pods: each node's ledger entries in one write
   (re-checked against the fresh NAS: never a device to two claims), then per pod, several pods
   at once, our finalizer on its claims, their `status.allocation` (optimistic concurrency: a
   claim changed meanwhile is left to the next cycle; one allocated by someone else meanwhile
   gets its ledger entry removed again), then the lift of its scheduling gate (`gates`);
4. tells the pods that fit nowhere why, with a Warning Event on the pod and its claims (the same
   text once per `EventRecorder` ttl), and asks preemption (`controller.preemption`) for them.

The scheduling gate (`SCHEDULING_GATE`, put on pods by admission: the chart's
MutatingAdmissionPolicy or `controller.admission`'s webhook) keeps kube-scheduler off a pod until
drasat has allocated its claims, so the scheduler tries it once, when it can bind, and never hands
drasat's devices out first. Each cycle lifts drasat's gate from every pod with nothing left for
drasat to allocate (`v1inputs.to_ungate`: another driver's pods at once, a pod whose allocation
was written before a restart); other owners' gates are never touched.

With `device_taint`, a DeviceTaintRule (`controller.taintrule`) taints every device of our driver
NoSchedule, so kube-scheduler's own allocator never hands them out to a pod that arrives without
the gate; this controller's allocations are honoured as the scheduler does not look at taints for
an allocated claim. Where the API server serves no DeviceTaintRule, gated pods are still drasat's
alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from drasat.api.groups import DRIVER_NAME
from drasat.api.policy import AllocationPolicySpec
from drasat.controller import decisions, extended, nasnodes, taintrule, v1inputs
from drasat.controller.cycle.allocating import Allocator, Solve
from drasat.controller.cycle.allocationwrites import AllocationWriter
from drasat.controller.cycle.changes import FULL_EVERY, Changes
from drasat.controller.cycle.deallocation import Deallocator
from drasat.controller.cycle.gates import Gates
from drasat.controller.cycle.ledger import Ledger
from drasat.controller.cycle.ownwrites import OwnWrites
from drasat.controller.cycle.releasing import Releaser
from drasat.controller.cycle.repairing import Repairer
from drasat.controller.cycle.wholegangs import WholeGangs
from drasat.controller.cycle.writes import LeaseLost, Writes
from drasat.controller.drivers import Published
from drasat.controller.metrics import Metrics
from drasat.controller.preemption import Preempter
from drasat.controller.statusledger import ledgers_from_statuses, with_own_writes
from drasat.kube import informer
from drasat.kube import resources as r
from drasat.kube.client import Api, Obj
from drasat.kube.events import EventRecorder
from drasat.solver import Mode

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class V1Config:
    namespace: str = "drasat"
    #: How long a cycle waits after the first event, to gather pods that arrive together (an
    #: event that came while the previous cycle ran has waited that long already). 0.05 s: in the
    #: MIG churn (docs/PERFORMANCE.md §5.6) 0.2 s accepted as many claims, binding 0.11 s later at
    #: p50; busy cycles run back to back whatever the window.
    batch_window_s: float = 0.05
    #: The most pods one cycle places (the rest go to the next cycle).
    batch_max: int = 64
    #: A cycle runs at least this often (settles the ledger, retries the refused).
    resync_s: float = 10.0
    #: Every this many settles, every node's ledger is settled against every claim, whatever
    #: changed (a safety net: between them, a cycle settles only the nodes and claims whose
    #: objects changed; 1: every settle is full).
    full_settle_every: int = FULL_EVERY
    #: How long a node stays unsuitable for a pod after the scheduler gave its claim back.
    unsuitable_ttl_s: float = 60.0
    device_taint: bool = True
    policy_poll_s: float = 5.0
    nas_attempts: int = 8
    watch_timeout_s: int = 30
    component: str = "drasat-controller"
    #: Solver mode of a cycle: online places the cycle's pods one by one, each proven the best
    #: of its nodes given those before it; batch puts them in one model, warm-started from the
    #: online placement. Online is the default: on the openb trace a batch of 64 placed the same
    #: pods as online wherever they all fit, at seconds per call (docs/PERFORMANCE.md §5).
    mode: Mode = Mode.online
    #: A cycle's solve budget (the batch solve stops here, FEASIBLE; pods wait for it).
    time_limit_s: float | None = 1.0
    #: Where the policy in force comes from (said with each decision, for `drasat explain`).
    policy_source: str = "default"
    #: A refused pod's decision Event is updated at most this often while what it was decided
    #: from keeps changing (`controller.decisions`).
    decision_refresh_s: float = 10.0
    #: How many placed pods' writes (statuses, then the gate) go at once; each node's ledger
    #: entries are written before, in one write per node.
    write_workers: int = 8
    #: The drivers whose DeviceClasses drasat allocates (`controller.drivers`): its own, NVIDIA's
    #: gpu.nvidia.com, or both. A node of NVIDIA's keeps its ledger in the claims' statuses.
    drivers: tuple[str, ...] = (DRIVER_NAME,)
    #: Whether the API server serves PodGroups (`scheduling.k8s.io/v1beta1`, the Workload API,
    #: beta in 1.37 behind the `GenericWorkload` gate; `drasat.kube.served.pod_groups`): gangs
    #: then come from the PodGroups pods name too (`drasat.v1.gangs`), else from labels only.
    pod_groups: bool = False


class V1Controller:
    """The v1 allocation loop (module docstring): the informers, the cycle thread, each cycle's
    snapshot, and the cycle over the parts of `controller.cycle`."""

    def __init__(
        self,
        api: Api,
        config: V1Config | None = None,
        *,
        policy: Callable[[], AllocationPolicySpec] = AllocationPolicySpec,
        poll_policy: Callable[[], bool] = lambda: False,
        metrics: Metrics | None = None,
        solve: Solve | None = None,
        may_write: Callable[[], bool] = lambda: True,
        recorder: EventRecorder | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.config = config or V1Config()
        self._policy = policy
        self._poll_policy = poll_policy
        self.metrics = metrics or Metrics()
        self._may_write = may_write
        self._clock = clock
        self.recorder = recorder or EventRecorder(api, component=self.config.component)
        #: Each refused pod's decision, where `drasat explain` reads it.
        self.decisions = decisions.DecisionLog(
            api, component=self.config.component, refresh_s=self.config.decision_refresh_s
        )
        #: Preemption (`controller.preemption`): victims evicted, devices held for preemptors.
        self.preemption = Preempter(api, self.recorder, clock=clock, may_write=may_write)
        self._templates = extended.TemplateKeeper(api)
        self._wake = threading.Event()
        #: When the first event since the last cycle began came (`time.monotonic()`).
        self._first_event = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Claim statuses read as ledger entries, kept while neither side changes.
        self._ledgers = v1inputs.StatusLedgers()
        #: NASes parsed, kept while their version stands (a cycle reads every node's).
        self._parsed_nas = nasnodes.ParsedNases()
        self.cycles = 0
        timeout = self.config.watch_timeout_s

        def make(resource: r.Resource, **kw: Any) -> informer.Informer:
            return informer.Informer(
                api, resource, handler=self._on_event, watch_timeout_s=timeout, **kw
            )

        self.claims = make(r.RESOURCE_CLAIMS_V1)
        self.classes = make(r.DEVICE_CLASSES_V1)
        self.pods = informer.Informer(
            api, r.PODS, handler=self._on_pod_event, watch_timeout_s=timeout
        )
        self.nodes = make(r.NODES)
        self.nas = make(r.NAS, namespace=self.config.namespace)
        #: What the nodes publish: the devices this controller allocates (every driver's
        #: slices are listed; only drasat's are read, each node's again when they change).
        self.slices = make(r.RESOURCE_SLICES_V1)
        self._slice_reader = Published(self.config.drivers)
        self._informers = [
            self.classes, self.nodes, self.slices, self.nas, self.claims, self.pods,
        ]  # fmt: skip
        #: The PodGroups, where served: a gang's members and minimum (`drasat.v1.gangs`).
        self.pod_groups: informer.Informer | None = None
        if self.config.pod_groups:
            self.pod_groups = make(r.POD_GROUPS)
            self._informers.append(self.pod_groups)
        if DRIVER_NAME not in self.config.drivers:
            # Only other drivers' nodes (NVIDIA's): their ledger is the claims' statuses, and
            # drasat's CRDs need not be installed. The NAS cache stays empty.
            self._informers.remove(self.nas)
        self._parts(solve)

    def _parts(self, solve: Solve | None) -> None:
        """The parts of a cycle (`controller.cycle`), each handed what it shares."""
        config = self.config
        #: What this process wrote and the informers may not show yet.
        self.own_writes = OwnWrites()
        self.writes = Writes(may_write=self._may_write, metrics=self.metrics,
                             recorder=self.recorder, workers=config.write_workers,
                             wake=self._wake.set)  # fmt: skip
        self.ledger = Ledger(self.api, namespace=config.namespace, nas=self.nas,
                             writes=self.writes, own=self.own_writes, metrics=self.metrics,
                             attempts=config.nas_attempts)  # fmt: skip
        self.gates = Gates(self.api, writes=self.writes, metrics=self.metrics)
        self.deallocator = Deallocator(self.api, writes=self.writes, ledger=self.ledger,
                                       own=self.own_writes, metrics=self.metrics)  # fmt: skip
        self.gangs = WholeGangs(recorder=self.recorder, gates=self.gates, writes=self.writes,
                                deallocator=self.deallocator)  # fmt: skip
        #: pod key -> the last explanation (what `drasat explain` would print).
        self.explanations: dict[str, str] = {}
        writer = AllocationWriter(self.api, writes=self.writes, ledger=self.ledger,
                                  own=self.own_writes, gates=self.gates, claims=self.claims,
                                  metrics=self.metrics, explanations=self.explanations)  # fmt: skip
        self.allocator = Allocator(
            mode=config.mode, time_limit_s=config.time_limit_s, batch_max=config.batch_max,
            policy=self._policy, policy_source=config.policy_source,
            component=config.component, solve=solve, writer=writer, gangs=self.gangs,
            preemption=self.preemption, ledgers=self._ledgers, own=self.own_writes,
            metrics=self.metrics, recorder=self.recorder, decisions=self.decisions,
            explanations=self.explanations, clock=self._clock,
        )  # fmt: skip
        self.solver_cache = self.allocator.solver_cache
        self.releaser = Releaser(self.api, writes=self.writes, ledger=self.ledger,
                                 own=self.own_writes, ledgers=self._ledgers, metrics=self.metrics,
                                 deallocator=self.deallocator,
                                 unsuitable_ttl_s=config.unsuitable_ttl_s,
                                 clock=self._clock,
                                 refused=lambda: self.allocator.refused_at.keys())  # fmt: skip
        #: What changed since the last settle (a cycle settles only that).
        self.changes = Changes(config.full_settle_every)
        self.repairer = Repairer(self.api, writes=self.writes, ledger=self.ledger,
                                 own=self.own_writes, ledgers=self._ledgers,
                                 slices=self.slices.items, drivers=config.drivers)  # fmt: skip

    # Life cycle.
    def start(self, *, sync_timeout_s: float = 30.0, cycles: bool = True) -> None:
        """Start the informers and (`cycles`) the cycle thread; without it the caller runs
        `cycle()` itself (tests, one step at a time)."""
        self._poll_policy()
        if self.config.device_taint:
            self.ensure_taint_rule()
        for inf in self._informers:
            inf.start()
        for inf in self._informers:
            if not inf.wait_synced(sync_timeout_s):
                # No cycle runs until it has: an empty claim cache would empty the ledger.
                log.warning("%s not synced after %.0fs; cycles wait for it",
                            inf.resource.plural, sync_timeout_s)  # fmt: skip
        if not cycles:
            return
        self._thread = threading.Thread(target=self._loop, name="v1-cycles", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for inf in self._informers:
            inf.stop_soon()
        for inf in self._informers:
            inf.stop()
        if self._thread is not None:
            self._thread.join(10)
        self.writes.shutdown()

    @property
    def ready(self) -> bool:
        return all(inf.synced for inf in self._informers)

    def _on_pod_event(self, kind: str, obj: Obj) -> None:
        if kind == "DELETED":
            self.releaser.pod_deleted(obj)
        self._on_event(kind, obj)

    def _on_event(self, kind: str, obj: Obj) -> None:
        if not self._wake.is_set():
            self._first_event = time.monotonic()  # the batch window starts here
        self._wake.set()

    def ensure_taint_rule(self) -> None:
        """Create or restore the DeviceTaintRule of each driver drasat allocates
        (`taintrule.ensure`)."""
        taintrule.ensure(self.api, self.config.drivers)

    def _loop(self) -> None:
        last_policy = 0.0
        while not self._stop.is_set():
            self._wake.wait(self.config.resync_s)
            if self._stop.is_set():
                return
            time.sleep(self.window_left())
            self._wake.clear()
            now = self._clock()
            if now - last_policy >= self.config.policy_poll_s:
                last_policy = now
                try:
                    self._poll_policy()
                except Exception:
                    log.exception("policy poll failed")
            if not self._may_write() or not self.ready:
                continue
            try:
                more = self.cycle()
            except Exception:  # one bad cycle never stops the loop
                log.exception("allocation cycle failed; retrying")
                more = True
                self._stop.wait(1.0)
            if more:
                self._wake.set()

    def window_left(self) -> float:
        """How long the next cycle still waits to gather pods: the batch window counts from
        the first event since the last cycle began, so events that came while a cycle ran have
        waited already, and a pod left over by a full cycle (`more`) or a resync goes at once."""
        waited = time.monotonic() - self._first_event
        return max(0.0, self.config.batch_window_s - waited)

    # One cycle.
    def snapshot(self) -> v1inputs.Snapshot:
        # This process's deallocations count before the informer delivers them.
        cached = self.claims.items()
        self.own_writes.forget_claims({str(c["metadata"].get("uid")) for c in cached})
        claims = {informer.key_of(c): self.own_writes.claim_over(c) for c in cached}
        parsed = {}
        for obj in self.nas.items():
            found = self._parsed_nas.parse(self.own_writes.nas_over(obj))
            parsed[found.node.name] = found
        self._parsed_nas.rotate()
        unsuitable = self.releaser.unsuitable_now()
        published = self._slice_reader.read(self.slices.items())
        # Nodes of another driver (NVIDIA's) keep no NAS: their ledger is the claims' statuses.
        parsed |= ledgers_from_statuses(
            published, claims.values(), parsed, self.own_writes.claims, self.config.drivers
        )
        classes = self.classes.items()
        ours = v1inputs.our_classes(classes, self.config.drivers)
        # Other drivers' devices (a NIC) have no ledger: this process's own status writes
        # count before the informer delivers them, as they do on NVIDIA's nodes.
        others, others_held = v1inputs.other_devices(
            self.slices.items(),
            with_own_writes(claims.values(), self.own_writes.claims),
            ours,
            self.config.drivers,
        )
        return v1inputs.Snapshot(
            pods=self.pods.items(),
            claims=claims,
            classes=ours,
            nodes={str(n["metadata"]["name"]): n for n in self.nodes.items()},
            nas=parsed,
            unsuitable=unsuitable,
            published=published,
            device_classes={str(c["metadata"]["name"]): c for c in classes},
            others=others,
            others_held=others_held,
            pod_groups=None if self.pod_groups is None else {
                informer.key_of(g): g for g in self.pod_groups.items()
            },
        )  # fmt: skip

    def cycle(self) -> bool:
        """One cycle; True when pods not tried yet were left for the next one (the cap).

        Pods refused before go after those not tried yet, the longest-refused first: a cap
        full of pods that fit nowhere never keeps a new pod waiting. A cycle that placed
        nothing and left only refused pods waits for the next event or resync.

        No cycle runs before every informer has synced (an empty claim cache would empty the
        ledger), and each write first checks that this replica still leads: a cycle that lost
        the lease stops where it is."""
        if not self.ready:
            log.info("informers not synced yet: no cycle")
            return False
        self.cycles += 1
        try:
            return self._cycle()
        except LeaseLost:
            log.warning("cycle %d: this replica stopped leading; nothing more is written",
                        self.cycles)  # fmt: skip
            return False
        finally:
            self._ledgers.rotate()

    def _cycle(self) -> bool:
        snapshot = self.snapshot()
        if self._may_write():
            # Pods converted from nvidia.com/gpu: templates of the class that serves it.
            self._templates.ensure(snapshot.pods, self.classes.items(), self.config.drivers)
        if self.settle(snapshot):
            snapshot = self.snapshot()
        everyone, waiting = v1inputs.pending_pods(snapshot)
        ungate = v1inputs.to_ungate(snapshot)
        everyone = self.gangs.plan_cycle(snapshot, everyone, waiting, ungate, self._policy())
        for pod, why in ungate.values():
            self.gates.lift_confined(pod, why)
        self.gates.say_ungated(everyone)
        self.metrics.pending_claims.set(sum(len(p.claims) for p in everyone))
        for key, why in waiting.items():
            log.debug("%s waits: %s", key, why)
        # A nominee the cycle does not try (its gang held back, another owner's gate) holds
        # nothing: its devices would idle for as long as it is not tried.
        self.preemption.end_untried(snapshot, {p.input.key for p in everyone})
        # A victim gang an eviction refused midway left in part goes whole, pods pending or not.
        self.preemption.finish_units(snapshot)
        pending = self.allocator.batch(everyone, self.preemption.current(snapshot))
        if not pending:
            return False
        placed = self.allocator.place(snapshot, pending, self.cycles)
        return self.allocator.more_left(everyone, pending, placed)

    def settle(self, snapshot: v1inputs.Snapshot) -> bool:
        """The ledger settled with the claims' statuses (`Releaser.settle`), then the clashes
        between claims repaired (`Repairer.clashes`); True when anything was written. Only the
        nodes and claims whose objects changed since the last settle are settled again
        (`changes.Changes`), with a full settle every `full_settle_every` settles and after
        one in which something failed."""
        scope = self.changes.scope(snapshot, self.own_writes.claims)
        failures = self.writes.failures
        try:
            changed = self.releaser.settle(snapshot, scope)
            changed |= self.repairer.clashes(snapshot, scope)
        except BaseException:
            self.changes.forget()
            raise
        self.changes.settled(failed=self.writes.failures != failures)
        return changed
