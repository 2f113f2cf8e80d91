"""The allocation of a cycle's pending pods: which pods go into this cycle and in what order
(`Allocator.batch`), one `drasat.v1.allocate` call for them all (each pod alone should that call
fail), the writes of what was placed (`allocationwrites`), and each refusal told: a Warning Event
on the pod's claims and the pod's decision (`controller.decisions`, which `drasat explain` reads).
The refused pods then go to preemption (`controller.preemption.Preempter.consider`).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from collections.abc import Callable, Collection

from drasat import v1
from drasat.api.groups import SCHEDULING_GATE
from drasat.api.policy import AllocationPolicySpec
from drasat.controller import decisions, gangs, v1inputs
from drasat.controller.cycle import releasing
from drasat.controller.cycle.allocationwrites import AllocationWriter, Placed
from drasat.controller.cycle.ownwrites import OwnWrites
from drasat.controller.cycle.wholegangs import WholeGangs
from drasat.controller.cycle.writes import short
from drasat.controller.metrics import Metrics
from drasat.controller.preemption import Preempter
from drasat.kube.client import Obj
from drasat.kube.events import EventRecorder
from drasat.solver import Mode, Problem, Solution, SolveParams
from drasat.solver.cache import SolverCache
from drasat.v1 import preemption

log = logging.getLogger(__name__)

Solve = Callable[[Problem, SolveParams], Solution]


class Allocator:
    """Places the cycle's pending pods and tells the refused why."""

    def __init__(
        self,
        *,
        mode: Mode,
        time_limit_s: float | None,
        batch_max: int,
        policy: Callable[[], AllocationPolicySpec],
        policy_source: str,
        component: str,
        solve: Solve | None,
        writer: AllocationWriter,
        gangs: WholeGangs,
        preemption: Preempter,
        ledgers: v1inputs.StatusLedgers,
        own: OwnWrites,
        metrics: Metrics,
        recorder: EventRecorder,
        decisions: decisions.DecisionLog,
        explanations: dict[str, str],
        clock: Callable[[], float],
    ) -> None:
        self._mode = mode
        self._time_limit_s = time_limit_s
        self._batch_max = batch_max
        self._policy = policy
        self._policy_source = policy_source
        self._component = component
        self._solve = solve
        self._writer = writer
        self._gangs = gangs
        self._preemption = preemption
        #: Claim statuses read as ledger entries (the cycle's, shared with the other parts).
        self._ledgers = ledgers
        self._own = own
        self._metrics = metrics
        self._recorder = recorder
        self._decisions = decisions
        #: Pod key -> the last explanation (what `drasat explain` would print).
        self.explanations = explanations
        self._clock = clock
        self.solver_cache = SolverCache()
        #: The nodes' inputs of the last cycle, handed out again where nothing changed (the
        #: solver cache keeps their views by identity).
        self.node_inputs = v1inputs.NodeInputs()
        #: Pod key -> when it was last refused (orders the next cycles' pods).
        self.refused_at: dict[str, float] = {}

    def batch(
        self, everyone: list[v1inputs.Pending], nominated: Collection[str] = ()
    ) -> list[v1inputs.Pending]:
        """The pods this cycle tries, in order: the higher priority first, as kube-scheduler's
        queue orders (a freed device goes to the highest priority that fits), then nominated
        preemptors, then pods not yet refused, then the longest-refused, then the oldest. At
        most `batch_max`, a gang's pods all or none; when pods not tried yet are left out, pods
        refused before take at most half of the cap (a cap full of pods that fit nowhere never
        keeps a new pod waiting cycle after cycle)."""
        live = {p.input.key for p in everyone}
        self._decisions.forget(str(p.pod["metadata"].get("uid")) for p in everyone)
        self.refused_at = {k: t for k, t in self.refused_at.items() if k in live}
        chosen = set(nominated)
        ordered = [
            p
            for _, p in sorted(
                enumerate(everyone),
                key=lambda item: (
                    -item[1].input.priority,
                    item[1].input.key not in chosen,
                    self.refused_at.get(item[1].input.key, 0.0),
                    item[0],
                ),
            )
        ]
        untried = sum(1 for p in ordered if p.input.key not in self.refused_at)
        if len(ordered) > self._batch_max and untried:
            room = self._batch_max - min(untried, self._batch_max // 2)
            kept, taken = [], 0
            for item in ordered:
                again = item.input.key in self.refused_at and item.input.key not in chosen
                if again and taken >= room:
                    continue
                taken += again
                kept.append(item)
            ordered = kept
        return gangs.batch(ordered, self._batch_max, self._gangs.plan)

    def more_left(
        self, everyone: list[v1inputs.Pending], pending: list[v1inputs.Pending], placed: int
    ) -> bool:
        """Whether the next cycle should run at once: pods not tried yet were left (the cap),
        or this cycle placed some and left others."""
        chosen = {p.input.key for p in pending}
        left = [p.input.key for p in everyone if p.input.key not in chosen]
        untried = any(key not in self.refused_at for key in left)
        return untried or (placed > 0 and bool(left))

    def place(
        self, snapshot: v1inputs.Snapshot, pending: list[v1inputs.Pending], cycle: int
    ) -> int:
        """Place the pods and write; how many were placed. The devices held for nominated
        preemptors are taken for the pods of their priority and lower (`Preempter.holds`): the
        pods go in groups that see the same holds, the higher priority first, each over the
        nodes as the groups before it left them; the refused then go to preemption, over the
        nodes as the whole cycle left them."""
        to_allocate = [c for p in pending for c in p.claims]
        solved = releasing.stale_entries_as_holds(snapshot, to_allocate, self._own.claims)
        nodes = v1inputs.node_inputs(
            v1inputs.with_status_holds(solved, self._ledgers), self.node_inputs
        )
        holds = self._preemption.holds(snapshot)
        policy = self._policy()
        placed, refused = 0, []
        by_key = {p.input.key: p for p in pending}
        gangs = self._gangs.plan.gangs.values()
        for group, seen in preemption.hold_groups([p.input for p in pending], holds, gangs):
            items = [by_key[p.key] for p in group]
            outcome, _ = self._place(snapshot, items, preemption.with_holds(nodes, seen), policy,
                                     cycle)  # fmt: skip
            placed += len(outcome.placed)
            nodes = preemption.placed_on(nodes, outcome, group)
            # A gang's pod alone never goes (all-or-nothing): a gang preempts as one, for all
            # its pods or none (`Preempter.consider`).
            refused += [by_key[k] for k in outcome.refused if k not in outcome.failed]
        self._preemption.consider(snapshot, nodes, refused, policy, self._gangs.plan.gangs)
        return placed

    def _place(
        self,
        snapshot: v1inputs.Snapshot,
        pending: list[v1inputs.Pending],
        nodes: list[v1.Node],
        policy: AllocationPolicySpec,
        cycle: int,
    ) -> tuple[v1.Outcome, dict[str, v1inputs.Pending]]:
        """One `drasat.v1.allocate` call for the pods (each alone should it fail), its writes
        and each refusal told."""
        params = SolveParams(
            mode=self._mode, time_limit_s=self._time_limit_s, cache=self.solver_cache
        )
        started = time.perf_counter()
        try:
            outcome = v1.allocate(
                nodes, [p.input for p in pending], snapshot.claim_classes,
                policy=policy, params=params, solve=self._solve,
                gangs=list(self._gangs.plan.gangs.values()),
            )  # fmt: skip
        except Exception as error:
            log.warning("cycle %d: the allocator failed on %d pods together (%s); placing them "
                        "one at a time", cycle, len(pending), short(error))  # fmt: skip
            outcome = self._one_at_a_time(nodes, pending, snapshot, policy, params)
        self._count(outcome, len(pending), time.perf_counter() - started, cycle)
        by_key = {p.input.key: p for p in pending}
        self._gangs.only_whole(outcome)
        by_node: dict[str, list[Placed]] = {}
        for pod_key, node in outcome.placed.items():
            item = by_key[pod_key]
            mine = [outcome.allocations[c["metadata"]["uid"]] for c in item.claims
                    if c["metadata"]["uid"] in outcome.allocations]  # fmt: skip
            by_node.setdefault(node, []).append(Placed(item, mine))
        written = self._writer.write(snapshot, by_node, self._gangs.plan.of_pod)
        self._gangs.roll_back(snapshot, written, by_key)
        self._gangs.lift(written, by_key)
        now = self._clock()
        for pod_key, reasons in outcome.refused.items():
            self.refused_at[pod_key] = now
            self._refused(by_key[pod_key], reasons, snapshot, cycle)
        for pod_key in outcome.placed:
            self.refused_at.pop(pod_key, None)
        return outcome, by_key

    def _count(self, outcome: v1.Outcome, pods: int, elapsed: float, cycle: int) -> None:
        """The solve's metrics and log line; the allocator's own failures counted apart."""
        self._metrics.solver_seconds.labels("v1-cycle").observe(elapsed)
        for solution in outcome.solutions:
            self._metrics.solves.labels("v1-cycle", solution.status.value).inc()
        log.info(
            "cycle %d: %d pods, %d placed, %d refused in %.3fs (%s)",
            cycle, pods, len(outcome.placed), len(outcome.refused), elapsed,
            ", ".join(s.optimality_text() for s in outcome.solutions) or "no solve",
        )  # fmt: skip
        for pod_key, why in outcome.failed.items():
            # drasat's fault, not the pod's request: counted apart (the refusal's Event says it).
            self._metrics.faults.labels("AllocatorError").inc()
            log.warning("AllocatorError: pod %s: %s", pod_key, why)

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
                    nodes, [item.input], snapshot.claim_classes,
                    policy=policy, params=params, solve=self._solve,
                    gangs=list(self._gangs.plan.gangs.values()),  # a gang's pod alone: not placed
                )  # fmt: skip
            except Exception as error:
                why = f"the allocator failed on this pod: {short(error)}"
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

    def _refused(
        self,
        item: v1inputs.Pending,
        reasons: tuple[str, ...],
        snapshot: v1inputs.Snapshot,
        cycle: int,
    ) -> None:
        text = explanation(item, reasons)
        self.explanations[item.input.key] = text
        self._metrics.failures.labels("Unsuitable").inc()
        self._decisions.record(item.pod, text, self._decision(item.pod, snapshot, cycle))
        for claim in item.claims:
            self._recorder.warning(claim, decisions.REASON, f"pod {item.input.key}: {text}")

    def _decision(self, pod: Obj, snapshot: v1inputs.Snapshot, cycle: int) -> decisions.Decision:
        """What the decision on `pod` in this cycle was made with: the ledger as this cycle's
        own writes left it counts (the pods placed before it took their devices)."""
        inventory = decisions.inventory_versions(snapshot)
        inventory += self._own.nas_versions()
        return decisions.Decision(
            cycle=cycle,
            decided_at=decisions.stamp(datetime.datetime.now(datetime.UTC)),
            policy=self._policy_source,
            policy_digest=decisions.policy_digest(self._policy()),
            mode=self._mode.value,
            basis=decisions.basis(pod, decisions.pod_claims(pod, snapshot), inventory),
            controller=self._component,
        )


def _with_placed(node: v1.Node, outcome: v1.Outcome, pod: v1.PodInput) -> v1.Node:
    """The node with a pod just placed there: its claims' ledger entries and other drivers'
    devices, and its cpu/memory."""
    mine = [a for a in outcome.allocations.values() if a.node == node.state.name]
    if not mine:
        return node
    state = dataclasses.replace(
        v1.with_allocations(node.state, mine),
        used_cpu_milli=node.state.used_cpu_milli + pod.cpu_milli,
        used_memory_mib=node.state.used_memory_mib + pod.memory_mib,
    )
    return dataclasses.replace(node, state=state)


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
