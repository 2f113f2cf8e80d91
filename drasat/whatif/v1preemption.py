"""The what-if's preemptions (issue 27 item 3): which pods the controller would evict for which.

After the run places what fits, each refused pod that may preempt (the policy's `preemption`,
not `preemptionPolicy: Never`), highest priority first, gets the plan the controller would make
(`drasat.v1.preemption.plan`: the solver's choice of victims, the allocator as the fit check)
over the pods the input binds with allocated claims and the pods this run placed. A plan's
victims leave and its preemptor is placed on the freed devices before the next plan, so two
preemptors never count on one victim. Priorities come from `spec.priority`, else the pod's
`priorityClassName` and the manifests' PriorityClass objects (`workloads.priority_of`).
PodDisruptionBudgets are not read by the what-if. Purely computational.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence

from drasat.api.nas import AllocatedDevices
from drasat.api.policy import AllocationPolicySpec
from drasat.solver.problem import SolveParams
from drasat.v1 import Node, Outcome, PodInput, allocate, preemption
from drasat.v1.allocate import Solve
from drasat.v1.preemption import Plan, Running, checked
from drasat.whatif import v1manifests

log = logging.getLogger(__name__)


def plans(
    nodes: Sequence[Node],
    workload: v1manifests.V1Workload,
    outcome: Outcome,
    *,
    policy: AllocationPolicySpec,
    params: SolveParams,
    solve: Solve,
    pods_in: Mapping[str, PodInput],
) -> tuple[Plan, ...]:
    """The preemptions the controller would make after this run, in the order it would."""
    if not policy.preemption.enabled:
        return ()
    by_key = {p.key: p for p in workload.pods}
    wanting = [
        pods_in[k]
        for k in outcome.refused
        if k in pods_in
        and k not in outcome.failed
        and ((by_key[k].obj.get("spec") or {}).get("preemptionPolicy") != "Never")
    ]
    if not wanting:
        return ()
    states = {n.state.name: _placed(n, outcome, by_key) for n in nodes}
    running, users = _running(workload, outcome, states)
    out = []
    for pod in sorted(wanting, key=lambda p: (-p.priority, p.key)):
        if not any(r.priority < pod.priority for r in running):
            # No pod it may evict (nor any for the pods after it, of no higher priority).
            break
        if params.deadline is not None and time.monotonic() >= params.deadline:
            log.debug("preemptions not planned past the time limit: %s and after", pod.key)
            break
        try:
            found = preemption.plan(
                pod, list(states.values()), running, users, workload.classes,
                policy=policy, params=params, solve=solve,
            )  # fmt: skip
        except Exception:  # a solver bug leaves the pod refused, never a traceback
            log.debug("preemption plan for %s failed", pod.key, exc_info=True)
            continue
        if found.node is None or not found.victims:
            continue
        out.append(found)
        gone = [r for r in running if r.key in found.victims]
        node = preemption.without(states[found.node], set(found.freed), gone)
        alone = dataclasses.replace(pod, candidate_nodes=(found.node,))
        placed = allocate([node], [alone], workload.classes, policy=policy, params=params,
                          solve=solve)  # fmt: skip
        states[found.node] = _with(node, placed)
        running = [r for r in running if r.key not in found.victims]
    return tuple(out)


def _running(
    workload: v1manifests.V1Workload, outcome: Outcome, states: Mapping[str, Node]
) -> tuple[list[Running], dict[str, frozenset[str]]]:
    """The pods holding drasat's claims on a node (bound by the input, or placed by the run)
    and each claim's users."""
    users: dict[str, set[str]] = {}
    running = []
    for pod in workload.pods:
        uids = []
        for _, claim in pod.claims:
            uid = str(claim.obj["metadata"].get("uid", ""))
            users.setdefault(uid, set()).add(pod.key)
            uids.append(uid)
        node = outcome.placed.get(pod.key) or (pod.obj.get("spec") or {}).get("nodeName")
        if not node or node not in states:
            continue
        held = {e.claimInfo.uid for e in states[node].state.nas.allocatedClaims.values()}
        mine = tuple(u for u in uids if u in held)
        if mine:
            running.append(
                Running(pod.key, str(node), pod.priority, mine, pod.cpu_milli, pod.memory_mib)
            )
    return running, {k: frozenset(v) for k, v in users.items()}


def _placed(node: Node, outcome: Outcome, pods: Mapping[str, v1manifests.V1Pod]) -> Node:
    """The node with this run's allocations there in its ledger and its placed pods' CPU."""
    node = _with(node, outcome)
    here = [pods[k] for k, n in outcome.placed.items() if n == node.state.name and k in pods]
    state = dataclasses.replace(
        node.state,
        used_cpu_milli=node.state.used_cpu_milli + sum(p.cpu_milli for p in here),
        used_memory_mib=node.state.used_memory_mib + sum(p.memory_mib for p in here),
    )
    return dataclasses.replace(node, state=state)


def _with(node: Node, outcome: Outcome) -> Node:
    entries: dict[str, AllocatedDevices] = dict(node.state.nas.allocatedClaims)
    for allocation in outcome.allocations.values():
        if allocation.node == node.state.name:
            entries.update(allocation.ledger)
    nas = node.state.nas.model_copy(update={"allocatedClaims": entries})
    return dataclasses.replace(node, state=dataclasses.replace(node.state, nas=nas))


def lines(found: Sequence[Plan], priorities: Mapping[str, int]) -> list[str]:
    """One line per preemption, after a blank line; none without."""
    out = []
    for plan in found:
        victims = ", ".join(f"{v} (priority {priorities.get(v, 0)})" for v in plan.victims)
        proof = "proven optimal" if plan.proven else "optimality not proven"
        out.append(
            f"preemption: {plan.preemptor} (priority {priorities.get(plan.preemptor, 0)}) "
            f"would evict {victims} on {plan.node} ({proof}, {checked(plan.checks)})"
        )
    return ["", *out] if out else []
