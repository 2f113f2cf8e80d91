"""The what-if's preemptions: which pods the controller would evict for which, planned by the
controller's own planner (`drasat.v1.preemption.plan_all`) over the same inputs.

After the run places what fits, the refused pods that may preempt (the policy's `preemption`,
not `preemptionPolicy: Never`; a gang whose pods are all refused, as one) are planned highest
priority first over the nodes as the run left them. The candidates are the pods the input binds
(`spec.nodeName`) with allocated claims of drasat's, a gang's whole or not at all; pods the run
placed are not victims (the controller's are not bound yet either). The devices held for pods
the input nominates (`gpu.drasat.io/nomination`) are held here too, and claims that outlive
their pods (standalone claims nobody gives back) free nothing. Priorities come from
`spec.priority`, else the pod's `priorityClassName` and the manifests' PriorityClass objects
(`workloads.priority_of`). PodDisruptionBudgets are not read by the what-if. Purely
computational.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

from drasat.api.policy import AllocationPolicySpec
from drasat.solver import Gang
from drasat.solver.problem import SolveParams
from drasat.v1 import Node, Outcome, PodInput, gangs, preemption
from drasat.v1.allocate import Solve
from drasat.v1.preemption import Hold, Plan, Running, Wanting, checked
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
    gangs: Sequence[Gang] = (),
    holds: Sequence[Hold] = (),
) -> tuple[Plan, ...]:
    """The preemptions the controller would make after this run, in the order it would (the
    plans that find no victim are left out)."""
    if not policy.preemption.enabled:
        return ()
    by_key = {p.key: p for p in workload.pods}
    refused = [
        k
        for k in outcome.refused
        if k in pods_in and k not in outcome.failed and not _never(by_key[k], workload)
    ]
    wanting = _wanting(refused, _at_group_priority(pods_in, by_key, workload), gangs)
    if not wanting:
        return ()
    after = preemption.placed_on(nodes, outcome, list(pods_in.values()))
    running, users = _running(workload, {n.state.name for n in nodes})
    lasting = frozenset(
        str(c.obj["metadata"].get("uid", ""))
        for c in workload.claims.values()
        if v1manifests.allocated(c.obj) and preemption.outlives_its_pods(c.obj)
    )
    # Only running pods are evicted and none start while planning: a pod with no running pod of
    # lower priority has no plan, and trying one for each of many such pods would outlast the
    # time limit.
    wanting = [w for w in wanting if any(r.priority < w.priority for r in running)]
    if not wanting:
        return ()
    try:
        found = preemption.plan_all(
            wanting, after, running, users, workload.classes, policy=policy, holds=holds,
            lasting=lasting, params=params, solve=solve,
        )  # fmt: skip
    except Exception:  # a solver bug leaves the pods refused, never a traceback
        log.debug("preemption plans failed", exc_info=True)
        return ()
    return tuple(p for p in found.plans if p.victims)


def _never(pod: v1manifests.V1Pod, workload: v1manifests.V1Workload) -> bool:
    return gangs.never_preempts(pod.obj, workload.pod_groups)


def _at_group_priority(
    pods_in: Mapping[str, PodInput],
    by_key: Mapping[str, v1manifests.V1Pod],
    workload: v1manifests.V1Workload,
) -> dict[str, PodInput]:
    """The pods as preemptors: a PodGroup's at its group's priority, as the controller's."""
    out = dict(pods_in)
    for key, pod in pods_in.items():
        found = by_key.get(key)
        if found is not None and gangs.pod_group_of(found.obj, workload.pod_groups) is not None:
            priority = gangs.priority_of(found.obj, workload.pod_groups)
            out[key] = dataclasses.replace(pod, priority=priority)
    return out


def _wanting(
    refused: Sequence[str], pods_in: Mapping[str, PodInput], found: Sequence[Gang]
) -> list[Wanting]:
    of_gang = {p: g for g in found for p in g.pods}
    out, seen = [], set()
    for key in refused:
        gang = of_gang.get(key)
        if gang is None:
            out.append(Wanting.of(pods_in[key]))
        elif gang.name not in seen and all(p in refused for p in gang.pods):
            seen.add(gang.name)
            out.append(Wanting(tuple(pods_in[p] for p in sorted(gang.pods)), gang))
    return out


def _running(
    workload: v1manifests.V1Workload, nodes: set[str]
) -> tuple[list[Running], dict[str, frozenset[str]]]:
    """The pods the input binds to a node with allocated claims there (a gang's with its key),
    and each claim's users."""
    users: dict[str, set[str]] = {}
    running = []
    for pod in workload.pods:
        uids = []
        for _, claim in pod.claims:
            uid = str(claim.obj["metadata"].get("uid", ""))
            users.setdefault(uid, set()).add(pod.key)
            if v1manifests.allocated(claim.obj):
                uids.append(uid)
        node = (pod.obj.get("spec") or {}).get("nodeName")
        if not node or node not in nodes or not uids:
            continue
        unit, minimum = gangs.unit_of(pod.obj, workload.pod_groups)
        cpu, memory = pod.cpu_milli, pod.memory_mib
        grouped = gangs.pod_group_of(pod.obj, workload.pod_groups) is not None
        running.append(
            Running(
                pod.key,
                str(node),
                gangs.priority_of(pod.obj, workload.pod_groups) if grouped else pod.priority,
                tuple(uids),
                cpu,
                memory,
                unit=unit,
                minimum=minimum,
            )
        )
    return running, {k: frozenset(v) for k, v in users.items()}


def lines(found: Sequence[Plan], priorities: Mapping[str, int]) -> list[str]:
    """One line per preemption, after a blank line; none without."""
    out = []
    for plan in found:
        victims = ", ".join(f"{v} (priority {priorities.get(v, 0)})" for v in plan.victims)
        proof = "proven optimal" if plan.proven else "optimality not proven"
        whom = plan.preemptor if len(plan.pods) <= 1 else f"gang {plan.preemptor}"
        out.append(
            f"preemption: {whom} (priority {plan.priority}) "
            f"would evict {victims} on {plan.node} ({proof}, {checked(plan.checks)})"
        )
    return ["", *out] if out else []
