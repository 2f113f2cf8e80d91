"""The v1 allocation loop: drasat's controller places `resource.k8s.io/v1` claims with the solver
and kube-scheduler binds the pods.

One thread runs cycles; informers wake it. A cycle:

1. settles the ledger (the NAS `allocatedClaims`) with the claims, whose status is the truth:
   entries of claims that are gone, no longer allocated (the scheduler's PostFilter or the
   resourceclaim controller cleared them) or allocated elsewhere are removed; allocated claims
   missing from the ledger are written back (a restart, a lost write); a claim being deleted
   loses our finalizer once nothing holds it. A deallocation of a claim this process wrote marks
   the node unsuitable for the claim's pods for `unsuitable_ttl_s`, with the scheduler's reason;
2. gathers the pending pods with unallocated claims of ours (after a short window, at most
   `batch_max`) and places them together in one `drasat.v1.allocate` call;
3. writes the placed pods: each node's ledger entries in one write (re-checked against the fresh
   NAS: never a device to two claims), then per pod, several pods at once, our finalizer on its
   claims, their `status.allocation` (optimistic concurrency: a claim changed meanwhile is left
   to the next cycle; one allocated by someone else meanwhile gets its ledger entry removed
   again), then the lift of its scheduling gate;
4. tells the pods that fit nowhere why, with a Warning Event on the pod and its claims (the same
   text once per `EventRecorder` ttl).

The scheduling gate (`SCHEDULING_GATE`, put on pods by admission: the chart's
MutatingAdmissionPolicy or `controller.admission`'s webhook) keeps kube-scheduler off a pod until
drasat has allocated its claims, so the scheduler tries it once, when it can bind, and never hands
drasat's devices out first. Each cycle lifts drasat's gate from every pod with nothing left for
drasat to allocate (`v1inputs.to_ungate`: another driver's pods at once, a pod whose allocation
was written before a restart); other owners' gates are never touched.

With `device_taint`, a DeviceTaintRule taints every device of our driver NoSchedule, so
kube-scheduler's own allocator never hands them out to a pod that arrives without the gate; this
controller's allocations are honoured as the scheduler does not look at taints for an allocated
claim. Where the API server serves no DeviceTaintRule, gated pods are still drasat's alone.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from drasat import v1
from drasat.api.groups import DRIVER_NAME, SCHEDULING_GATE
from drasat.api.nas import AllocatedDevices, GpuInfo
from drasat.api.policy import AllocationPolicySpec
from drasat.controller import allocation, decisions, extended, gangs, nasnodes, overcommit, v1inputs
from drasat.controller.drivers import Published, taint_rule_name
from drasat.controller.metrics import Metrics
from drasat.controller.preemption import Preempter
from drasat.controller.statusledger import ledgers_from_statuses, status_entries_on
from drasat.kube import errors, informer, nasclient
from drasat.kube import resources as r
from drasat.kube.client import Api, Obj
from drasat.kube.events import EventRecorder
from drasat.solver import Mode, Problem, Solution, SolveParams
from drasat.solver.cache import SolverCache
from drasat.v1 import gangs as v1gangs
from drasat.v1 import results

log = logging.getLogger(__name__)

Solve = Callable[[Problem, SolveParams], Solution]
T = TypeVar("T")

TAINT_RULE = taint_rule_name(DRIVER_NAME)
TAINT_KEY = v1inputs.ALLOCATOR_TAINT["key"]
TAINT_VALUE = v1inputs.ALLOCATOR_TAINT["value"]
REASON_REFUSED = "NotAllocatable"
REASON_CLASH = "DeviceClash"


class LeaseLost(Exception):
    """This replica stopped leading in the middle of a cycle: nothing more is written."""


class LedgerConflict(errors.Conflict):
    """A device the solver chose is held by another claim (the fresh NAS or a claim's status)."""


def taint_rule(resource: r.Resource = r.DEVICE_TAINT_RULES_V1, driver: str = DRIVER_NAME) -> Obj:
    """The DeviceTaintRule that keeps kube-scheduler's allocator off every device of a driver
    drasat allocates (`TAINT_RULE` for drasat's own; `drivers.taint_rule_name`)."""
    return {
        "apiVersion": resource.api_version,
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": taint_rule_name(driver),
            "labels": {"app.kubernetes.io/managed-by": "drasat"},
        },
        "spec": {
            "deviceSelector": {"driver": driver},
            "taint": {"key": TAINT_KEY, "value": TAINT_VALUE, "effect": "NoSchedule"},
        },
    }


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


@dataclass
class _Written:
    """A claim this process allocated: where, and the status version it wrote."""

    node: str
    version: str
    pods: set[str] = field(default_factory=set)
    #: Its ledger entries: what a node without a NAS counts until the informer sees the status.
    ledger: Mapping[str, AllocatedDevices] = field(default_factory=dict)


def _newer(a: str, b: str) -> bool:
    try:
        return int(a) > int(b)
    except ValueError:
        return a != b


class V1Controller:
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
        self._solve = solve
        self._may_write = may_write
        self._clock = clock
        self.recorder = recorder or EventRecorder(api, component=self.config.component)
        #: Each refused pod's decision, where `drasat explain` reads it.
        self.decisions = decisions.DecisionLog(
            api, component=self.config.component, refresh_s=self.config.decision_refresh_s
        )
        self.solver_cache = SolverCache()
        #: Preemption (`controller.preemption`): victims evicted, devices held for preemptors.
        self.preemption = Preempter(api, self.recorder, clock=clock, may_write=may_write)
        self._templates = extended.TemplateKeeper(api)
        self._wake = threading.Event()
        #: When the first event since the last cycle began came (`time.monotonic()`).
        self._first_event = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._writers: ThreadPoolExecutor | None = None
        self._written: dict[str, _Written] = {}
        self._nas_written: dict[str, Obj] = {}
        #: pod key -> node -> (until, reason).
        self._unsuitable: dict[str, dict[str, tuple[float, str]]] = {}
        #: pod key -> the last explanation (what `drasat explain` would print).
        self.explanations: dict[str, str] = {}
        #: pod key -> when it was last refused (orders the next cycles' pods).
        self._refused_at: dict[str, float] = {}
        #: Claim statuses read as ledger entries, kept while neither side changes.
        self._ledgers = v1inputs.StatusLedgers()
        #: NASes parsed, kept while their version stands (a cycle reads every node's).
        self._parsed_nas = nasnodes.ParsedNases()
        #: (node, uid, uid) of clashes that cannot be repaired, reported once while they last.
        self._clashes_reported: set[tuple[str, ...]] = set()
        self._clashes_seen: set[tuple[str, ...]] = set()
        #: Said once: a pod of drasat's arrived without the scheduling gate (no admission).
        self._said_ungated = False
        #: This cycle's gangs (`controller.gangs`): placed all-or-nothing, gates lifted together.
        self._gangs = gangs.Plan()
        self.cycles = 0
        timeout = self.config.watch_timeout_s

        def make(resource: r.Resource, **kw: Any) -> informer.Informer:
            return informer.Informer(
                api, resource, handler=self._on_event, watch_timeout_s=timeout, **kw
            )

        self.claims = make(r.RESOURCE_CLAIMS_V1)
        self.classes = make(r.DEVICE_CLASSES_V1)
        self.pods = make(r.PODS)
        self.nodes = make(r.NODES)
        self.nas = make(r.NAS, namespace=self.config.namespace)
        #: What the nodes publish: the devices this controller allocates (every driver's
        #: slices are listed; only drasat's are read, each node's again when they change).
        self.slices = make(r.RESOURCE_SLICES_V1)
        self._slice_reader = Published(self.config.drivers)
        self._informers = [
            self.classes, self.nodes, self.slices, self.nas, self.claims, self.pods,
        ]  # fmt: skip

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
        if self._writers is not None:
            self._writers.shutdown(wait=True)

    @property
    def ready(self) -> bool:
        return all(inf.synced for inf in self._informers)

    def _on_event(self, kind: str, obj: Obj) -> None:
        if not self._wake.is_set():
            self._first_event = time.monotonic()  # the batch window starts here
        self._wake.set()

    def ensure_taint_rule(self) -> None:
        """Create or restore the DeviceTaintRule of each driver drasat allocates, in the newest
        version the server serves (v1 from 1.37; v1beta2 and v1alpha3 behind the
        DRADeviceTaintRules gate before). Only get, create and update are used (the chart grants
        no more): a version the server does not serve answers 404 to both get and create. A
        server without the kind is logged, not fatal (kube-scheduler may then allocate our
        devices first: docs/INSTALL.md)."""
        for driver in self.config.drivers:
            if not self._ensure_driver_rule(driver):
                return  # said once: the next driver's rule would fail alike

    def _ensure_driver_rule(self, driver: str) -> bool:
        """One driver's rule; False when it cannot be kept (logged)."""
        name = taint_rule_name(driver)
        for version in ("v1", "v1beta2", "v1alpha3"):
            resource = dataclasses.replace(r.DEVICE_TAINT_RULES_V1, version=version)
            try:
                if self._ensure_taint_rule(resource, driver):
                    return True
            except errors.KubeError as error:
                log.error("cannot keep DeviceTaintRule %s (%s): %s; drasat relies on its "
                          "scheduling gate %s (pods without it may get kube-scheduler's "
                          "allocation of drasat's devices)", name, resource.api_version,
                          error, SCHEDULING_GATE)  # fmt: skip
                return False
        log.warning(
            "the API server serves no DeviceTaintRule (resource.k8s.io v1, v1beta2 or v1alpha3): "
            "drasat relies on its scheduling gate %s (kube-scheduler never tries a gated pod "
            "before drasat allocates it); a pod that arrives without the gate may be given "
            "drasat's devices by kube-scheduler's allocator first; see docs/CONTROLLER.md",
            SCHEDULING_GATE,
        )
        return False

    def _ensure_taint_rule(self, resource: r.Resource, driver: str = DRIVER_NAME) -> bool:
        """Whether the server serves this version (and the rule is now as wanted there)."""
        wanted = taint_rule(resource, driver)
        name = wanted["metadata"]["name"]
        try:
            current = self.api.get(resource, name)
        except errors.NotFound:
            try:
                self.api.create(resource, wanted)
            except errors.AlreadyExists:
                return True
            except errors.NotFound:
                return False  # this version is not served
            log.info("created DeviceTaintRule %s (%s, %s:NoSchedule on every %s device)",
                     name, resource.api_version, TAINT_KEY, driver)  # fmt: skip
            return True
        spec = current.get("spec") or {}
        if (spec.get("taint") or {}).get("key") != TAINT_KEY or (
            spec.get("deviceSelector") != wanted["spec"]["deviceSelector"]
        ):
            current["spec"] = wanted["spec"]
            self.api.replace(resource, current)
            log.warning("restored DeviceTaintRule %s", name)
        return True

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
        claims = {informer.key_of(c): c for c in self.claims.items()}
        parsed = {}
        for obj in self.nas.items():
            name = str(obj["metadata"]["name"])
            mine = self._nas_written.get(name)
            if mine is not None:
                if _newer(str(mine["metadata"].get("resourceVersion", "")),
                          str(obj["metadata"].get("resourceVersion", ""))):  # fmt: skip
                    obj = mine
                else:
                    del self._nas_written[name]
            found = self._parsed_nas.parse(obj)
            parsed[found.node.name] = found
        self._parsed_nas.rotate()
        now = self._clock()
        unsuitable: dict[str, dict[str, str]] = {}
        for pod, by_node in list(self._unsuitable.items()):
            live = {n: why for n, (until, why) in by_node.items() if until > now}
            if live:
                unsuitable[pod] = live
            else:
                del self._unsuitable[pod]
        published = self._slice_reader.read(self.slices.items())
        # Nodes of another driver (NVIDIA's) keep no NAS: their ledger is the claims' statuses.
        parsed |= ledgers_from_statuses(
            published, claims.values(), parsed, self._written, self.config.drivers
        )
        return v1inputs.Snapshot(
            pods=self.pods.items(),
            claims=claims,
            classes=v1inputs.our_classes(self.classes.items(), self.config.drivers),
            nodes={str(n["metadata"]["name"]): n for n in self.nodes.items()},
            nas=parsed,
            unsuitable=unsuitable,
            published=published,
        )

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
        everyone = self._plan_gangs(snapshot, everyone, waiting, ungate)
        for pod, why in ungate.values():
            self._confined(f"pod {v1inputs.pod_key(pod)}", [pod], self._lift_gate, pod, why)
        self._say_ungated(everyone)
        self.metrics.pending_claims.set(sum(len(p.claims) for p in everyone))
        for key, why in waiting.items():
            log.debug("%s waits: %s", key, why)
        live = {p.input.key for p in everyone}
        self.decisions.forget(str(p.pod["metadata"].get("uid")) for p in everyone)
        self._refused_at = {k: t for k, t in self._refused_at.items() if k in live}
        # Pods not yet refused first (a refusal stands until something changes), and among
        # them the higher priority first, as kube-scheduler's queue orders; then the oldest.
        ordered = sorted(
            enumerate(everyone),
            key=lambda item: (
                self._refused_at.get(item[1].input.key, 0.0),
                -item[1].input.priority,
                item[0],
            ),
        )
        pending = gangs.batch([p for _, p in ordered], self.config.batch_max, self._gangs)
        if not pending:
            return False
        # Preemptors whose victims are leaving go first, over the devices held for them.
        first, rest = self.preemption.split(everyone, pending)
        placed = self._place(snapshot, first) if first else 0
        if first:
            snapshot = self.snapshot()
        placed += self._place(snapshot, rest) if rest else 0
        chosen = {p.input.key for p in pending}
        left = [p.input.key for p in everyone if p.input.key not in chosen]
        untried = any(key not in self._refused_at for key in left)
        return untried or (placed > 0 and bool(left))

    def _place(self, snapshot: v1inputs.Snapshot, pending: list[v1inputs.Pending]) -> int:
        """Place the pods and write; how many were placed."""
        params = SolveParams(
            mode=self.config.mode,
            time_limit_s=self.config.time_limit_s,
            cache=self.solver_cache,
        )
        started = time.perf_counter()
        nodes = v1inputs.node_inputs(v1inputs.with_status_holds(snapshot, self._ledgers))
        nodes = self.preemption.hold(nodes, [p.input.key for p in pending])
        policy = self._policy()
        try:
            outcome = v1.allocate(
                nodes, [p.input for p in pending], snapshot.classes,
                policy=policy, params=params, solve=self._solve,
                gangs=list(self._gangs.gangs.values()),
            )  # fmt: skip
        except Exception as error:
            log.warning("cycle %d: the allocator failed on %d pods together (%s); placing them "
                        "one at a time", self.cycles, len(pending), _short(error))  # fmt: skip
            outcome = self._one_at_a_time(nodes, pending, snapshot, policy, params)
        elapsed = time.perf_counter() - started
        self.metrics.solver_seconds.labels("v1-cycle").observe(elapsed)
        for solution in outcome.solutions:
            self.metrics.solves.labels("v1-cycle", solution.status.value).inc()
        log.info(
            "cycle %d: %d pods, %d placed, %d refused in %.3fs (%s)",
            self.cycles, len(pending), len(outcome.placed), len(outcome.refused), elapsed,
            ", ".join(s.optimality_text() for s in outcome.solutions) or "no solve",
        )  # fmt: skip
        by_key = {p.input.key: p for p in pending}
        for pod_key, why in outcome.failed.items():
            # drasat's fault, not the pod's request: counted apart (the refusal's Event says it).
            self.metrics.faults.labels("AllocatorError").inc()
            log.warning("AllocatorError: pod %s: %s", pod_key, why)
        self._only_whole_gangs(outcome)
        by_node: dict[str, list[_Placed]] = {}
        for pod_key, node in outcome.placed.items():
            item = by_key[pod_key]
            mine = [outcome.allocations[c["metadata"]["uid"]] for c in item.claims
                    if c["metadata"]["uid"] in outcome.allocations]  # fmt: skip
            by_node.setdefault(node, []).append(_Placed(item, mine))
        # Each node's ledger entries in one write, the nodes side by side (their NASes are
        # apart: no write waits for another node's).
        nodes_placed = sorted(by_node.items())
        kept = self._in_parallel(
            lambda found: self._write_ledger(found[0], found[1], snapshot), nodes_placed
        )
        in_ledger = [
            (node, pod) for (node, _), pods in zip(nodes_placed, kept, strict=True) for pod in pods
        ]
        # Each pod's statuses then its gate; pods apart from each other, several at once.
        # A gang's pods keep drasat's gate until every one of them is written (`_lift_gangs`).
        in_gang = self._gangs.of_pod
        done = self._in_parallel(
            lambda found: self._write_pod(
                found[0], found[1], lift=found[1].item.input.key not in in_gang
            ),
            in_ledger,
        )
        written: list[v1.ClaimAllocation] = []
        ok: dict[str, str] = {}
        for (node, pod), (claims, failed) in zip(in_ledger, done, strict=True):
            written += claims
            if failed is not None:
                self._not_written(pod.item, node, failed)
            else:
                ok[pod.item.input.key] = node
        self._lift_gangs(ok, by_key)
        now = self._clock()
        for pod_key, reasons in outcome.refused.items():
            self._refused_at[pod_key] = now
            self._refused(by_key[pod_key], reasons, snapshot)
        for pod_key in outcome.placed:
            self._refused_at.pop(pod_key, None)
        # A gang's pod alone never goes (all-or-nothing): victims evicted for it would be in vain.
        refused = [by_key[k] for k in outcome.refused
                   if k not in outcome.failed and k not in self._gangs.of_pod]  # fmt: skip
        self.preemption.consider(snapshot, nodes, refused, policy)
        return len(outcome.placed)

    def _plan_gangs(
        self,
        snapshot: v1inputs.Snapshot,
        everyone: list[v1inputs.Pending],
        waiting: Mapping[str, str],
        ungate: dict[str, tuple[Obj, str]],
    ) -> list[v1inputs.Pending]:
        """This cycle's gangs (`controller.gangs`): the pods of gangs not complete are left out
        (a Normal Event says why), and no pod of an unfinished gang is let go by `ungate`."""
        plan = gangs.plan(
            snapshot.pods, [p.input.key for p in everyone], waiting, ungate, self._policy()
        )
        self._gangs = plan
        for pods in plan.gates_held.values():
            for pod in pods:
                ungate.pop(v1inputs.pod_key(pod), None)
        kept = []
        for item in everyone:
            why = plan.held.get(item.input.key)
            if why is None:
                kept.append(item)
            elif item.input.key in plan.invalid:
                self.recorder.warning(item.pod, REASON_REFUSED, why)
            else:
                self.recorder.normal(item.pod, gangs.REASON_INCOMPLETE, why)
        return kept

    def _only_whole_gangs(self, outcome: v1.Outcome) -> None:
        """A gang's pods are written only when all of them are placed (the solver places a gang
        whole; this keeps it so should a pod's allocation fail to be written down)."""
        whole = gangs.whole(outcome.placed, self._gangs)
        for pod_key, gang in self._gangs.of_pod.items():
            if gang in whole or pod_key not in outcome.placed:
                continue
            del outcome.placed[pod_key]
            outcome.refused[pod_key] = (f"gang {gang} is placed whole or not at all: not every "
                                        "pod of it could be allocated",)  # fmt: skip

    def _lift_gangs(
        self, written: Mapping[str, str], by_key: Mapping[str, v1inputs.Pending]
    ) -> None:
        """Lift the gate of every pod of each gang whose pods of this cycle are all written
        (with its pods allocated in an earlier cycle), and say where the gang went."""
        for name in sorted(gangs.whole(written, self._gangs)):
            gang = self._gangs.gangs[name]
            text = v1gangs.placed_text(gang, written)
            pods = [by_key[k].pod for k in gang.pods] + self._gangs.gates_held.get(name, [])
            for pod in pods:
                self._confined(f"pod {v1inputs.pod_key(pod)}", [pod], self._lift_gate, pod,
                               f"every pod of gang {name} is allocated")  # fmt: skip
                self.recorder.normal(pod, gangs.REASON_PLACED, text)

    def _one_at_a_time(
        self,
        nodes: list[v1.Node],
        pending: list[v1inputs.Pending],
        snapshot: v1inputs.Snapshot,
        policy: AllocationPolicySpec,
        params: SolveParams,
    ) -> v1.Outcome:
        """Each pod alone, over the nodes as the pods before it left them; a pod whose call
        raises is refused with the allocator's error (the others still go)."""
        outcome = v1.Outcome()
        for item in pending:
            try:
                found = v1.allocate(
                    nodes, [item.input], snapshot.classes,
                    policy=policy, params=params, solve=self._solve,
                    gangs=list(self._gangs.gangs.values()),  # a gang's pod alone: not placed
                )  # fmt: skip
            except Exception as error:
                why = f"the allocator failed on this pod: {_short(error)}"
                outcome.failed[item.input.key] = why
                outcome.refused[item.input.key] = (why,)
                continue
            outcome.solutions.extend(found.solutions)
            outcome.refused.update(found.refused)
            outcome.failed.update(found.failed)
            outcome.placed.update(found.placed)
            outcome.allocations.update(found.allocations)
            if found.placed:
                nodes = [_with_placed(n, found, item.input) for n in nodes]
        return outcome

    def _fault(self, kind: str, text: str, objects: list[Obj]) -> None:
        """A fault confined to what caused it: a metric by kind, one log line, a Warning Event
        on each object."""
        self.metrics.faults.labels(kind).inc()
        log.warning("%s: %s", kind, text)
        for obj in objects:
            self.recorder.warning(obj, kind, text)

    def _write_ledger(
        self, node: str, placed: list[_Placed], snapshot: v1inputs.Snapshot
    ) -> list[_Placed]:
        """The ledger entries of the pods placed on one node, in one NAS write; the pods written
        there. A pod whose write fails is that pod's alone (retried next cycle)."""
        ready: list[_Placed] = []
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
        self, node: str, pod: _Placed, lift: bool = True
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
        self.explanations.pop(item.input.key, None)
        if not lift:
            return pod.claims, None
        try:
            self._lift_gate(item.pod, "its claims of drasat's are allocated")
        except LeaseLost:
            raise
        except Exception as error:
            return pod.claims, error
        return pod.claims, None

    def _in_parallel(self, action: Callable[[Any], T], items: list[Any]) -> list[T]:
        """`action` on each item, up to `write_workers` at once; the results in order. A
        LeaseLost raised by one is raised here."""
        if len(items) <= 1 or self.config.write_workers <= 1:
            return [action(item) for item in items]
        if self._writers is None:
            self._writers = ThreadPoolExecutor(self.config.write_workers, "v1-writes")
        return list(self._writers.map(action, items))

    def _not_written(self, item: v1inputs.Pending, node: str, error: Exception) -> None:
        """A placed pod's write that failed: said by kind; the next cycle retries the pod."""
        key = item.input.key
        if isinstance(error, LedgerConflict):
            self._fault("LedgerConflict", f"pod {key}: not allocated on {node}: {error}",
                        [item.pod, *item.claims])  # fmt: skip
        elif isinstance(error, errors.Conflict):  # optimistic concurrency
            log.info("%s: write on %s not done (%s); next cycle", key, node, error)
            self.metrics.failures.labels("Conflict").inc()
        else:
            self._fault("WriteFailed", f"pod {key}: allocation on {node} not written: "
                        f"{_short(error)}", [item.pod, *item.claims])  # fmt: skip
        self._wake.set()

    def _guard(self) -> None:
        """Before every write: this replica must still lead."""
        if not self._may_write():
            raise LeaseLost

    def _check_statuses(
        self, node: str, ledger: Mapping[str, AllocatedDevices], snapshot: v1inputs.Snapshot
    ) -> None:
        """The devices about to be written, beside what the node's claims hold now, hold no
        more of a GPU than it has (`overcommit`, shares by their sums), once a claim there
        changed since the snapshot (another allocator's decision the solve did not see); raises
        LedgerConflict. The API server accepts two claims naming one device, so a decision of
        the same instant can still slip through: `_clashes` repairs those."""
        uids = {e.claimInfo.uid for e in ledger.values()}
        parsed = snapshot.nas.get(node)
        if parsed is None:
            return
        claims = self.claims.items()
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
                else results.ledger_from_status(claim, parsed.node.nas)
            ))  # fmt: skip
        # What the solve counted (our own writes the informer has not delivered, ledger
        # entries), with every claim's entries as its status says them now.
        held = {k: e for k, e in parsed.node.nas.allocatedClaims.items()
                if e.claimInfo.uid not in now and e.claimInfo.uid not in uids}  # fmt: skip
        for _, entries in now.values():
            held.update(entries)
        found = overcommit.with_added(held, ledger, {g.uuid: g for g in parsed.node.nas.gpus()})
        if found is not None:
            others = [now[u][0] for u in found.claims if u in now]
            raise LedgerConflict(
                f"devices on {node} would be over-committed beside "
                f"{', '.join(v1inputs.claim_ref(c) for c in others) or 'the ledger'}: "
                f"GPU {found.gpu} {found.why}",
                status=409,
            )

    def _lift_gate(self, pod: Obj, why: str) -> bool:
        """Remove drasat's scheduling gate from the pod (the others' stay, in their order): one
        update with the pod's resourceVersion as precondition, retried on a fresh read when the
        pod changed meanwhile. True when this call removed it."""
        meta = pod["metadata"]
        for _ in range(3):
            if not v1inputs.has_our_gate(pod) or not v1inputs.is_pending(pod):
                return False
            kept = [g for g in (pod.get("spec") or {}).get("schedulingGates") or []
                    if g.get("name") != SCHEDULING_GATE]  # fmt: skip
            patch = {
                "metadata": {"resourceVersion": pod["metadata"].get("resourceVersion")},
                "spec": {"schedulingGates": kept or None},
            }
            self._guard()
            try:
                self.api.patch(r.PODS, meta["name"], patch, namespace=meta["namespace"])
            except errors.NotFound:
                return False
            except errors.Conflict:
                try:
                    pod = self.api.get(r.PODS, meta["name"], namespace=meta["namespace"])
                except errors.NotFound:
                    return False
                if pod["metadata"].get("uid") != meta.get("uid"):
                    return False
                continue
            self.metrics.gates_lifted.inc()
            log.info("%s: scheduling gate %s lifted (%s)", v1inputs.pod_key(pod),
                     SCHEDULING_GATE, why)  # fmt: skip
            return True
        raise errors.Conflict(f"pod {v1inputs.pod_key(pod)} kept changing", status=409)

    def _say_ungated(self, pending: list[v1inputs.Pending]) -> None:
        """Log once that pods of drasat's arrive without its scheduling gate (no admission):
        kube-scheduler then tries them before drasat allocates and again after its backoff."""
        if self._said_ungated:
            return
        ungated = next((p for p in pending if not v1inputs.has_our_gate(p.pod)), None)
        if ungated is None:
            return
        self._said_ungated = True
        log.warning(
            "pod %s arrived without drasat's scheduling gate %s: without admission (the chart's "
            "MutatingAdmissionPolicy or webhook) kube-scheduler tries such pods before drasat "
            "allocates and binds them only after its retry backoff (the slower path; said once)",
            ungated.input.key, SCHEDULING_GATE,
        )  # fmt: skip

    def _ensure_finalizer(self, claim: Obj) -> Obj:
        """Our finalizer on a claim about to be allocated; the claim as written. Before the
        status: kube-scheduler reads the claim once it is allocated (PreBind reserves it,
        PostFilter may give it back) and a claim changed after that meets its write with a 409,
        which it does not retry before its next attempt of the pod."""
        if allocation.has_finalizer(claim):
            return claim
        self._guard()
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

    def _add_to_ledger(self, node: str, placed: list[_Placed]) -> dict[str, LedgerConflict]:
        """Add the placed pods' entries to the node's ledger in one write; a pod with a device
        another claim holds in the fresh ledger (or a pod before it in this write) is left out:
        pod key -> why. (A claim's status written back is the truth and is never refused:
        `_replace_in_ledger`; `_clashes` reports and repairs overlaps.)"""
        refused: dict[str, LedgerConflict] = {}

        def mutate(obj: Obj) -> Obj | None:
            refused.clear()  # called again on each conflict, with the fresh object
            fresh = nasnodes.parse(obj).node.nas
            held = dict(fresh.allocatedClaims)
            gpus = {g.uuid: g for g in fresh.gpus()}
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
            self._update_nas(node, mutate)
        return refused

    def _write_status(self, claim: Obj, placed: v1.ClaimAllocation, item: v1inputs.Pending) -> None:
        meta = claim["metadata"]
        for _ in range(3):
            if v1inputs.is_allocated(claim):
                if v1inputs.allocated_node(claim) != placed.node:
                    self._remove_from_ledger(placed.node, set(placed.ledger))
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
            self._guard()
            try:
                written = self.api.replace_status(r.RESOURCE_CLAIMS_V1, body)
            except errors.Conflict:
                claim = self.api.get(
                    r.RESOURCE_CLAIMS_V1, meta["name"], namespace=meta["namespace"]
                )
                if claim["metadata"].get("uid") != meta.get("uid"):
                    self._remove_from_ledger(placed.node, set(placed.ledger))
                    return
                continue
            version = str(written["metadata"].get("resourceVersion", ""))
            self._written[placed.uid] = _Written(
                placed.node, version, {item.input.key}, placed.ledger
            )
            self.metrics.allocations.inc()
            where = {"claim": v1inputs.claim_ref(claim), "uid": placed.uid, "node": placed.node}
            log.info("allocated %s on %s for %s", where["claim"], placed.node, item.input.key,
                     extra=where)  # fmt: skip
            return
        raise errors.Conflict(f"{v1inputs.claim_ref(claim)} kept changing", status=409)

    def _refused(
        self, item: v1inputs.Pending, reasons: tuple[str, ...], snapshot: v1inputs.Snapshot
    ) -> None:
        text = explanation(item, reasons)
        self.explanations[item.input.key] = text
        self.metrics.failures.labels("Unsuitable").inc()
        self.decisions.record(item.pod, text, self._decision(item.pod, snapshot))
        for claim in item.claims:
            self.recorder.warning(claim, REASON_REFUSED, f"pod {item.input.key}: {text}")

    def _decision(self, pod: Obj, snapshot: v1inputs.Snapshot) -> decisions.Decision:
        """What the decision on `pod` in this cycle was made with: the ledger as this cycle's
        own writes left it counts (the pods placed before it took their devices)."""
        inventory = decisions.inventory_versions(snapshot)
        inventory += [
            str(o["metadata"].get("resourceVersion", "")) for o in self._nas_written.values()
        ]
        return decisions.Decision(
            cycle=self.cycles,
            decided_at=decisions.stamp(datetime.datetime.now(datetime.UTC)),
            policy=self.config.policy_source,
            policy_digest=decisions.policy_digest(self._policy()),
            mode=self.config.mode.value,
            basis=decisions.basis(pod, decisions.pod_claims(pod, snapshot), inventory),
            controller=self.config.component,
        )

    # The ledger.
    def settle(self, snapshot: v1inputs.Snapshot) -> bool:
        """Bring the ledger in line with the claims' status; True when anything was written."""
        by_uid = {str(c["metadata"].get("uid")): c for c in snapshot.claims.values()}
        changed = False
        for name, parsed in snapshot.nas.items():
            if parsed.from_statuses:
                changed |= self._settle_from_statuses(name, by_uid, snapshot)
                continue
            stale: set[str] = set()
            for key, entry in parsed.node.nas.allocatedClaims.items():
                uid = entry.claimInfo.uid
                claim = by_uid.get(uid)
                if self._holds(claim, uid, name):
                    continue
                stale.add(key)
                self._given_back(uid, name, claim, snapshot)
            if not stale:
                continue
            if self._confined(f"ledger of {name}", [], self._remove_stale, name, stale):
                self.metrics.deallocations.inc(len({k.partition("/")[0] for k in stale}))
                changed = True
        leaving: list[Obj] = []
        for claim in by_uid.values():
            # Ours by finalizer, by status or by class: a claim whose DeviceClass was deleted
            # is still released.
            if not v1inputs.settles(claim, snapshot.classes):
                continue
            ref = v1inputs.claim_ref(claim)
            if v1inputs.names_our_driver(claim):
                changed |= bool(self._confined(ref, [claim], self._restore, claim, snapshot))
            if claim["metadata"].get("deletionTimestamp") and allocation.has_finalizer(claim):
                leaving.append(claim)
        changed |= self._release(leaving, snapshot)
        changed |= self._clashes(snapshot)
        return changed

    def _clashes(self, snapshot: v1inputs.Snapshot) -> bool:
        """Allocated claims whose statuses hold more of a GPU than it has (`overcommit`: one
        device named twice, or shares summing above it; two allocators deciding at the same
        instant, a stale replica, an admin): reported with an Event on each claim, and
        repaired where one is not reserved yet: it gives its devices back (its allocation is
        cleared, as kube-scheduler's PostFilter does), one drasat wrote first if several are
        unreserved. Never raises: a clash blocks nothing else. True when anything was written."""
        changed = False
        gave_back: set[str] = set()
        self._clashes_seen = set()
        for node, held in sorted(v1inputs.status_entries(snapshot, self._ledgers).items()):
            parsed = snapshot.nas.get(node)
            gpus = {g.uuid: g for g in parsed.node.nas.gpus()} if parsed is not None else {}
            entries = [e for _, found in held.values() for e in found.values()]
            for found in overcommit.overcommits(entries, gpus):
                if gave_back & set(found.claims):
                    continue  # what is left may fit now: the next settle looks again
                claims = [held[uid][0] for uid in found.claims]
                giver = self._confined(
                    f"clash on {node}", claims, self._repair_clash, node, found, held,
                )  # fmt: skip
                if giver:
                    gave_back.add(giver)
                    changed = True
        self._clashes_reported = self._clashes_seen
        return changed

    def _settle_from_statuses(
        self, node: str, by_uid: Mapping[str, Obj], snapshot: v1inputs.Snapshot
    ) -> bool:
        """A node whose ledger is the claims' statuses (NVIDIA's driver) has nothing to write
        back; a claim this process allocated there that lost its allocation was given back by
        the scheduler, as a stale NAS entry says on drasat's nodes. True when a write this
        process remembered is forgotten (the snapshot counted it)."""
        forgotten = False
        for uid, written in list(self._written.items()):
            if written.node != node:
                continue
            claim = by_uid.get(uid)
            version = str((claim or {}).get("metadata", {}).get("resourceVersion", ""))
            if claim is not None and _newer(written.version, version):
                continue  # the cache has not seen our status write yet
            if claim is None or v1inputs.allocated_node(claim) != node:
                self._given_back(uid, node, claim, snapshot)
                forgotten = True
        return forgotten

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
                self._fault(REASON_CLASH, text, claims)
            return None
        # Prefer giving back one drasat wrote: the other allocator's claim keeps its device.
        giver = min(unreserved, key=lambda c: (not self._wrote(c), v1inputs.claim_ref(c)))
        meta = giver["metadata"]
        status = {k: v for k, v in (giver.get("status") or {}).items() if k != "allocation"}
        self._guard()
        try:
            self.api.replace_status(r.RESOURCE_CLAIMS_V1, {**giver, "status": status})
        except (errors.Conflict, errors.NotFound) as error:
            log.info("clash of %s on %s: %s changed meanwhile (%s); next cycle",
                     refs, node, v1inputs.claim_ref(giver), error)  # fmt: skip
            return None
        uid = str(meta.get("uid"))
        self._written.pop(uid, None)  # given back by us, not by the scheduler: no unsuitable node
        keys = set(held[uid][1]) if uid in held else set()
        keys |= {k for k, e in self._ledger_of(node).items() if e.claimInfo.uid == uid}
        if keys:
            self._remove_from_ledger(node, keys)
        text = (f"{refs} held more of {what} than it has; "
                f"{v1inputs.claim_ref(giver)}, not reserved yet, gave its allocation back and "
                "will be allocated again")  # fmt: skip
        self._fault(REASON_CLASH, text, claims)
        return uid

    def _wrote(self, claim: Obj) -> bool:
        """Whether drasat allocated the claim (this process, or one before it: our finalizer)."""
        uid = str(claim["metadata"].get("uid"))
        return uid in self._written or allocation.has_finalizer(claim)

    def _ledger_of(self, node: str) -> Mapping[str, AllocatedDevices]:
        obj = self._nas_written.get(node) or next(
            (o for o in self.nas.items() if o["metadata"].get("name") == node), None
        )
        return nasnodes.parse(obj).node.nas.allocatedClaims if obj is not None else {}

    def _confined(
        self, what: str, objects: list[Obj], action: Callable[..., T], *args: Any
    ) -> T | None:
        """Run one object's settle step; a failure is that object's alone (the settle goes on
        with the others)."""
        try:
            return action(*args)
        except LeaseLost:
            raise
        except Exception as error:
            self._fault("SettleFailed", f"{what}: {_short(error)}", objects)
            return None

    def _holds(self, claim: Obj | None, uid: str, node: str) -> bool:
        """Whether a ledger entry on `node` for claim `uid` is still held."""
        written = self._written.get(uid)
        if claim is None:
            return False
        version = str(claim["metadata"].get("resourceVersion", ""))
        if written is not None and written.node == node and _newer(written.version, version):
            return True  # the cache has not seen our status write yet
        if not v1inputs.is_allocated(claim):
            return False
        return v1inputs.allocated_node(claim) == node and v1inputs.names_our_driver(claim)

    def _given_back(
        self, uid: str, node: str, claim: Obj | None, snapshot: v1inputs.Snapshot
    ) -> None:
        """A claim this process allocated lost its allocation while it still exists: the
        scheduler could not bind its pods there. Remember that node for those pods."""
        written = self._written.pop(uid, None)
        if written is None or claim is None or claim["metadata"].get("deletionTimestamp"):
            return
        for pod_key in written.pods:
            reason = _scheduler_reason(snapshot, pod_key)
            until = self._clock() + self.config.unsuitable_ttl_s
            self._unsuitable.setdefault(pod_key, {})[node] = (until, reason)
            log.info("%s: claim %s was given back on %s (%s); trying elsewhere",
                     pod_key, v1inputs.claim_ref(claim), node, reason)  # fmt: skip

    def _restore(self, claim: Obj, snapshot: v1inputs.Snapshot) -> bool:
        """The claim's ledger entries on its node, by the devices its status names (whoever
        allocated it): missing ones are written back; entries naming other devices (the claim
        was given back and allocated again between cycles) are replaced."""
        uid = str(claim["metadata"].get("uid"))
        written = self._written.get(uid)
        version = str(claim["metadata"].get("resourceVersion", ""))
        if written is not None and _newer(written.version, version):
            return False  # the cache has not seen our own status write yet
        node, entries = v1inputs.ledger_of(claim, snapshot, self._ledgers)
        parsed = snapshot.nas.get(node or "")
        if node is None or parsed is None or not entries:
            return False
        ledger = parsed.node.nas.allocatedClaims
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
        self._replace_in_ledger(node, uid, entries)
        kind = "nas-corrected" if current else "nas-rewritten"
        self.metrics.repairs.labels(kind).inc()
        log.info("ledger of %s: %s %s from its status", node,
                 "corrected" if current else "restored", ref)  # fmt: skip
        return True

    def _replace_in_ledger(
        self, node: str, uid: str, entries: Mapping[str, AllocatedDevices]
    ) -> None:
        """The claim's entries on the node become `entries` (a status written back)."""

        def mutate(obj: Obj) -> Obj | None:
            claims = (obj.get("spec") or {}).get("allocatedClaims") or {}
            mine = {k for k, e in claims.items() if (e.get("claimInfo") or {}).get("uid") == uid}
            cleared = nasclient.without_claims(obj, mine) or obj
            return allocation.nas_with(cleared, dict(entries)) or (cleared if mine else None)

        self._update_nas(node, mutate)

    def _release(self, leaving: list[Obj], snapshot: v1inputs.Snapshot) -> bool:
        """Claims being deleted that no pod holds any more: their ledger entries go, one NAS
        write per node (the nodes side by side), then our finalizer, the claims side by side.
        True when anything was written. A departure frees its devices in the cycle that sees
        it, not after one write per claim in a row (the churn's arrivals wait for departures)."""
        if not leaving:
            return False
        pods = {str(p["metadata"].get("uid")): p for p in snapshot.pods}
        free = [c for c in leaving if not self._still_reserved(c, pods)]
        if not free:
            return False
        uids = {str(c["metadata"].get("uid")) for c in free}
        by_node: dict[str, set[str]] = {}
        for name, parsed in snapshot.nas.items():
            if parsed.from_statuses:
                continue  # no NAS there: the status was the ledger
            keys = {k for k, e in parsed.node.nas.allocatedClaims.items()
                    if e.claimInfo.uid in uids}  # fmt: skip
            if keys:
                by_node[name] = keys
        failed: set[str] = set()

        def clear(item: tuple[str, set[str]]) -> None:
            node, keys = item
            what = f"ledger of {node}"
            if self._confined(what, [], self._remove_stale, node, keys) is None:
                failed.add(node)

        self._in_parallel(clear, sorted(by_node.items()))
        # A claim whose entries could not leave its node's ledger keeps our finalizer: the
        # next cycle tries again (the ledger never forgets a claim that still holds devices).
        stuck = {e.claimInfo.uid for n in failed for k, e in
                 snapshot.nas[n].node.nas.allocatedClaims.items() if k in by_node[n]}  # fmt: skip
        ready = [c for c in free if str(c["metadata"].get("uid")) not in stuck]
        done = self._in_parallel(
            lambda claim: self._confined(
                v1inputs.claim_ref(claim), [claim], self._drop_finalizer, claim
            ),
            ready,
        )
        return bool(by_node) or any(done)

    def _still_reserved(self, claim: Obj, pods: Mapping[str, Obj]) -> bool:
        """Whether a pod still holds the claim. A reservation of a pod that is gone (or
        finished, or deleted before it was bound) holds nothing, as the resourceclaim controller
        decides before it clears `reservedFor`: the devices need not wait for that write. A
        pod the cache does not know is looked up (it may be newer than the cache). `pods`: the
        cycle's pods by uid, built once for all the claims leaving."""
        meta = claim["metadata"]
        for ref in (claim.get("status") or {}).get("reservedFor") or []:
            if ref.get("resource", "pods") != "pods" or ref.get("apiGroup"):
                return True  # another kind of consumer: only its owner knows
            pod = pods.get(str(ref.get("uid")))
            if pod is None:
                try:
                    pod = self.api.get(r.PODS, ref.get("name", ""), namespace=meta["namespace"])
                except errors.NotFound:
                    continue
                if pod["metadata"].get("uid") != ref.get("uid"):
                    continue  # another pod of that name
            if not v1inputs.pod_done(pod):
                return True
        return False

    def _drop_finalizer(self, claim: Obj) -> bool:
        """Our finalizer off a released claim (its ledger entries are gone)."""
        meta = claim["metadata"]
        patch = {
            "metadata": {
                "finalizers": allocation.finalizers_without(claim),
                "resourceVersion": meta.get("resourceVersion"),
            }
        }
        self._guard()
        try:
            self.api.patch(r.RESOURCE_CLAIMS_V1, meta["name"], patch, namespace=meta["namespace"])
        except (errors.NotFound, errors.Conflict, errors.Invalid):
            return False
        self._written.pop(str(meta.get("uid")), None)
        log.info("released %s", v1inputs.claim_ref(claim))
        return True

    def _remove_stale(self, node: str, keys: set[str]) -> bool:
        self._remove_from_ledger(node, keys)
        return True

    def _remove_from_ledger(self, node: str, keys: set[str]) -> None:
        """The entries `keys` leave the node's ledger: the one rule both controllers remove by
        (`drasat.kube.nasclient.without_claims`), written as every v1 ledger write is."""
        try:
            self._update_nas(node, lambda obj: nasclient.without_claims(obj, keys))
        except errors.NotFound:
            return

    def _update_nas(self, node: str, mutate: Callable[[Obj], Obj | None]) -> None:
        """Every ledger write: only while this replica leads, retried on conflicts, and
        remembered at once (`_remember_nas`). The first try writes over the NAS as this process
        last knew it (its own last write, or the informer's copy if newer), with that
        resourceVersion as precondition: one request instead of a read and a write when the copy
        is current; a stale copy answers 409 and the write goes on from a fresh read."""
        self._guard()
        known = self._known_nas(node)
        changed = mutate(copy.deepcopy(known)) if known is not None else None
        if known is not None and changed is not None:
            changed.setdefault("metadata", {})["resourceVersion"] = known["metadata"].get(
                "resourceVersion"
            )
            try:
                self._remember_nas(self.api.replace(r.NAS, changed))
                return
            except errors.Conflict:
                self.metrics.nas_conflicts.inc()
        written = nasclient.update(
            self.api,
            namespace=self.config.namespace,
            node=node,
            mutate=mutate,
            attempts=self.config.nas_attempts,
            on_conflict=self.metrics.nas_conflicts.inc,
        )
        self._remember_nas(written)

    def _known_nas(self, node: str) -> Obj | None:
        """The node's NAS as this process last knew it (None: not known)."""
        mine = self._nas_written.get(node)
        cached = self.nas.get(f"{self.config.namespace}/{node}")
        if mine is None or cached is None:
            return mine or cached
        newer = _newer(str(mine["metadata"].get("resourceVersion", "")),
                       str(cached["metadata"].get("resourceVersion", "")))  # fmt: skip
        return mine if newer else cached

    def _remember_nas(self, obj: Obj) -> None:
        """Our own NAS writes count from the moment they are written, not when the informer
        sees them: the next cycle must not hand out a device this one just wrote down."""
        self._nas_written[str(obj["metadata"]["name"])] = obj


@dataclass
class _Placed:
    """A pod the cycle placed, with its claims' allocations."""

    item: v1inputs.Pending
    claims: list[v1.ClaimAllocation]

    @property
    def ledger(self) -> dict[str, AllocatedDevices]:
        out: dict[str, AllocatedDevices] = {}
        for claim in self.claims:
            out.update(claim.ledger)
        return out


def _clash(
    node: str,
    ledger: Mapping[str, AllocatedDevices],
    held: Mapping[str, AllocatedDevices],
    gpus: Mapping[str, GpuInfo],
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


def _devices_named(entries: Mapping[str, AllocatedDevices]) -> list[object]:
    """One item per device the entries name (a CPU fallback entry counts as its device)."""
    out: list[object] = []
    for entry in entries.values():
        gpus = entry.gpu.devices if entry.gpu else []
        migs = entry.mig.devices if entry.mig else []
        out.extend([*gpus, *migs] or ([entry] if entry.optional else []))
    return out


def _short(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}" if not isinstance(error, errors.KubeError) else text


def _with_placed(node: v1.Node, outcome: v1.Outcome, pod: v1.PodInput) -> v1.Node:
    """The node with a pod just placed there: its claims' ledger entries and its cpu/memory."""
    mine = [a for a in outcome.allocations.values() if a.node == node.state.name]
    if not mine:
        return node
    entries = dict(node.state.nas.allocatedClaims)
    for placed in mine:
        entries.update(placed.ledger)
    state = dataclasses.replace(
        node.state,
        nas=node.state.nas.model_copy(update={"allocatedClaims": entries}),
        used_cpu_milli=node.state.used_cpu_milli + pod.cpu_milli,
        used_memory_mib=node.state.used_memory_mib + pod.memory_mib,
    )
    return dataclasses.replace(node, state=state)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _scheduler_reason(snapshot: v1inputs.Snapshot, pod_key: str) -> str:
    pod = next((p for p in snapshot.pods if v1inputs.pod_key(p) == pod_key), None)
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "unschedulable")
    return "the scheduler gave the claim back"


def explanation(item: v1inputs.Pending, reasons: tuple[str, ...]) -> str:
    """Why a pod fits nowhere: the solver's reasons, then the nodes left out before solving; a pod
    carrying drasat's scheduling gate is told that the gate holds it until drasat allocates."""
    parts = list(dict.fromkeys(reasons))
    by_reason: dict[str, list[str]] = {}
    for node, why in sorted(item.excluded.items()):
        by_reason.setdefault(why, []).append(node)
    for why, found in by_reason.items():
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        parts.append(f"{why} (node {shown})")
    text = "; ".join(parts) or "no node with drasat's devices"
    if v1inputs.has_our_gate(item.pod):
        text += (f"; the pod is held by drasat's scheduling gate {SCHEDULING_GATE} until drasat "
                 "can allocate its claims")  # fmt: skip
    return text
