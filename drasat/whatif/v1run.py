"""A what-if run on `resource.k8s.io/v1` manifests: the cluster's nodes and published devices,
the pods with the claims they still need, then `drasat.v1.allocate` (the translation the
controller uses) over them.

Inputs are made here and nowhere else: each node's published devices (the slices read, or what
drasat's node plugin would publish for a NAS or compact node), its CPU and memory left after the
pods already bound to it (`drasat.api.nodefit`), the claims that already hold an allocation
entered in the node's ledger (so their devices are taken), and each pod's candidate nodes (the
scheduler's filters before DynamicResources on the Node objects given; without Node objects,
`spec.nodeName` and `spec.nodeSelector` on the node's labels).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drasat.api import nodefit
from drasat.api.groups import DRIVER_NAME
from drasat.api.nas import AllocatedDevices
from drasat.api.policy import AllocationPolicySpec
from drasat.solver.problem import Gang, Problem, Solution, SolveParams
from drasat.v1 import (
    Node,
    Outcome,
    PodInput,
    allocate,
    gangs,
    nasinventory,
    nominations,
    preemption,
    results,
)
from drasat.v1.nominations import Nomination, holds_of
from drasat.v1.preemption import Hold, Plan
from drasat.whatif import clusternodes, v1manifests, v1preemption

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Solve = Callable[[Problem, SolveParams], Solution]


@dataclass(frozen=True)
class V1Result:
    cluster: clusternodes.ClusterNodes
    workload: v1manifests.V1Workload
    outcome: Outcome
    #: Pods no node admits before devices are considered: pod key -> why, per node.
    blocked: Mapping[str, tuple[str, ...]]
    solver_error: str | None = None
    #: The gangs placed all-or-nothing (a PodGroup's with a gang policy, or pods labelled
    #: `gpu.drasat.io/gang`): each one's first pods up to its minimum (`GangPlan`).
    gangs: tuple[Gang, ...] = ()
    #: The preemptions the controller would make for pods refused here (`v1preemption`).
    preemptions: tuple[Plan, ...] = ()


def in_drasat_terms(claim: Obj, cluster: clusternodes.ClusterNodes) -> Obj:
    """The claim with its allocation's results renamed to drasat's devices (driver
    gpu.drasat.io, pool = node): how a result of NVIDIA's driver finds its GPU. Pure."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    found = (allocation.get("devices") or {}).get("results") or []
    renamed = []
    for result in found:
        key = (result.get("driver"), result.get("pool"), result.get("device"))
        place = _locate(cluster, key)
        if place is not None:
            node, name = place
            result = {**result, "driver": DRIVER_NAME, "pool": node, "device": name}
        renamed.append(result)
    devices = {**(allocation.get("devices") or {}), "results": renamed}
    status = {**claim["status"], "allocation": {**allocation, "devices": devices}}
    return {**claim, "status": status}


def _locate(
    cluster: clusternodes.ClusterNodes, key: tuple[Any, Any, Any]
) -> tuple[str, str] | None:
    """(node, drasat's device name) of a device published by a slice that was read."""
    for node, published in cluster.devices.items():
        for name, device in published.items():
            if (device.driver, device.pool, device.name) == key:
                return node, name
    return None


def node_inputs(cluster: clusternodes.ClusterNodes, workload: v1manifests.V1Workload) -> list[Node]:
    """Each node: capacity left after its bound pods, existing allocations in its ledger, and
    its published devices."""
    bound = _bound(workload)
    ledgers: dict[str, dict[str, AllocatedDevices]] = {}
    states = {s.name: s for s in cluster.states}
    for claim in workload.claims.values():
        if not v1manifests.allocated(claim.obj):
            continue
        renamed = in_drasat_terms(claim.obj, cluster)
        for name, state in states.items():
            entries = results.ledger_from_status(_only_pool(renamed, name), state.devices)
            ledgers.setdefault(name, {}).update(entries)
    out = []
    for state in cluster.states:
        node = cluster.node_objects.get(state.name)
        if node is not None:
            capacity = nodefit.capacity(node, bound.get(state.name, []))
            state = dataclasses.replace(
                state,
                used_cpu_milli=capacity.used_cpu_milli,
                used_memory_mib=capacity.used_memory_mib,
            )
        state = nasinventory.with_entries(state, ledgers.get(state.name) or {})
        out.append(Node(state, cluster.published(state.name)))
    return out


def _bound(workload: v1manifests.V1Workload) -> dict[str, list[Obj]]:
    """node -> the input's pods bound to it."""
    out: dict[str, list[Obj]] = {}
    for pod in workload.bound:
        out.setdefault(str(pod["spec"]["nodeName"]), []).append(pod)
    return out


def _only_pool(claim: Obj, pool: str) -> Obj:
    """The claim with only the results of one node's drasat pool."""
    allocation = claim["status"]["allocation"]
    found = [r for r in allocation["devices"].get("results") or [] if r.get("pool") == pool]
    devices = {**allocation["devices"], "results": found}
    return {
        **claim,
        "status": {**claim["status"], "allocation": {**allocation, "devices": devices}},
    }


def _merge(into: Outcome, found: Outcome) -> None:
    """One group's outcome added to the run's."""
    into.placed.update(found.placed)
    into.allocations.update(found.allocations)
    into.refused.update(found.refused)
    into.solutions.extend(found.solutions)
    into.failed.update(found.failed)
    into.untried += found.untried
    for key in found.placed:
        into.refused.pop(key, None)


def pod_inputs(
    cluster: clusternodes.ClusterNodes, workload: v1manifests.V1Workload
) -> tuple[list[PodInput], dict[str, tuple[str, ...]]]:
    """The pods with claims still to allocate, each with its candidate nodes; and the pods no
    node admits, with each node's reason."""
    out: list[PodInput] = []
    blocked: dict[str, tuple[str, ...]] = {}
    fit = _Fit(cluster, _bound(workload))
    for pod in workload.pods:
        pending = pod.pending()
        if not pending:
            continue
        allowed, reasons = fit.candidates(pod)
        held = {
            node
            for _, claim in pod.claims
            if v1manifests.allocated(claim.obj)
            for node in _allocated_nodes(claim.obj, cluster)
        }
        if held:  # a claim allocated already ties the pod to its node
            allowed = tuple(n for n in (allowed or [s.name for s in cluster.states]) if n in held)
            reasons = (*reasons, f"its allocated claims are on {', '.join(sorted(held))}")
        if allowed == ():
            blocked[pod.key] = reasons
            continue
        out.append(
            PodInput(
                key=pod.key,
                namespace=pod.instance.namespace,
                claims=tuple(c.obj for c in pending),
                priority=pod.priority,
                cpu_milli=pod.cpu_milli,
                memory_mib=pod.memory_mib,
                candidate_nodes=allowed,
            )
        )
    return out, blocked


def _allocated_nodes(claim: Obj, cluster: clusternodes.ClusterNodes) -> set[str]:
    """The nodes an allocated claim's devices are on (their pools, in drasat's terms)."""
    names = {s.name for s in cluster.states}
    renamed = in_drasat_terms(claim, cluster)
    found = renamed["status"]["allocation"].get("devices", {}).get("results") or []
    return {str(r.get("pool")) for r in found if r.get("pool") in names}


#: The pod fields the node filters read (`nodefit.unfit`): pods that agree on them (the pods of
#: one template, say) get the same nodes, so each distinct set is checked against the nodes once.
_SCHEDULING_FIELDS = ("nodeName", "nodeSelector", "tolerations", "affinity")


@dataclass
class _Fit:
    """Each pod's candidate nodes, memoised per distinct scheduling fields: a cluster of
    thousands of nodes and pods is not filtered pod by node."""

    cluster: clusternodes.ClusterNodes
    bound: Mapping[str, list[Obj]]
    _memo: dict[str, tuple[tuple[str, ...] | None, tuple[str, ...]]] = dataclasses.field(
        default_factory=dict
    )
    #: node -> why no further pod fits there by count (None: one does), computed once.
    _full: dict[str, str | None] | None = None

    def candidates(self, pod: v1manifests.V1Pod) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
        spec = pod.obj.get("spec") or {}
        key = json.dumps([spec.get(f) for f in _SCHEDULING_FIELDS], sort_keys=True, default=str)
        found = self._memo.get(key)
        if found is None:
            found = self._candidates(pod)
            self._memo[key] = found
        return found

    def _node_full(self) -> dict[str, str | None]:
        if self._full is None:
            self._full = {
                name: nodefit.full(nodefit.capacity(node, self.bound.get(name, [])))
                for name, node in self.cluster.node_objects.items()
            }
        return self._full

    def _candidates(self, pod: v1manifests.V1Pod) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
        cluster = self.cluster
        spec = pod.instance.spec
        if not cluster.node_objects:
            allowed = clusternodes.matching_nodes(
                cluster.states, node_name=spec.nodeName, node_selector=spec.nodeSelector
            )
            wanted = [f"nodeName={spec.nodeName}"] if spec.nodeName else []
            wanted += [f"{k}={v}" for k, v in (spec.nodeSelector or {}).items()]
            return allowed, (f"no node matches the pod's {', '.join(wanted)}",)
        full = self._node_full()
        kept: list[str] = []
        reasons: list[str] = []
        for state in cluster.states:
            node = cluster.node_objects.get(state.name)
            why = nodefit.unfit(pod.obj, node) if node is not None else None
            if why is None and node is not None:
                why = full[state.name]
            if why is None and node is None:
                allowed = clusternodes.matching_nodes(
                    [state], node_name=spec.nodeName, node_selector=spec.nodeSelector
                )
                why = (
                    None
                    if allowed is None or allowed
                    else "no Node object and nodeName/nodeSelector do not match"
                )
            if why is None:
                kept.append(state.name)
            else:
                reasons.append(f"{state.name}: {why}")
        return tuple(kept), tuple(reasons)


@dataclass(frozen=True)
class GangPlan:
    """The input's gangs as the controller plays them out (`drasat.v1.gangs.step`)."""

    #: Each gang's first pods up to its minimum still to allocate, all-or-nothing.
    gangs: tuple[Gang, ...]
    #: Pods not tried, with why: a gang short of its minimum, a PodGroup missing, a bad field.
    held: Mapping[str, str]
    #: Pods past a gang's minimum -> (gang, why they wait): they go one by one once the gang's
    #: first pods are allocated.
    later: Mapping[str, tuple[str, str]]


def plan_gangs(workload: v1manifests.V1Workload, policy: AllocationPolicySpec) -> GangPlan:
    """The gangs of the input's pods: membership from the PodGroups the input holds (the
    what-if reads them as a server that serves the Workload API) and the labels, and the
    controller's rule of which pods go when, no pod waiting."""
    found = gangs.read(((p.key, p.obj) for p in workload.pods), workload.pod_groups)
    pending = {p.key for p in workload.pods if p.pending()}
    out: list[Gang] = []
    held = dict(found.invalid)
    later: dict[str, tuple[str, str]] = {}
    for name, members in sorted(found.members.items()):
        now = gangs.step(found.gangs[name], (k for k, _ in members), pending, {})
        if now.quorum:
            out.append(gangs.solver_gang(name, now.quorum, policy))
        for key, why in now.held.items():
            if key in now.later:
                later[key] = (name, why)
            else:
                held[key] = why
    return GangPlan(tuple(out), held, later)


def _allocate(
    nodes: list[Node],
    pods: list[PodInput],
    gangs_of: Sequence[Gang],
    holds: Sequence[Hold],
    workload: v1manifests.V1Workload,
    policy: AllocationPolicySpec,
    params: SolveParams,
    solve: Solve,
) -> tuple[Outcome, list[Node]]:
    """One cycle's allocation of `pods` on `nodes` (holding the devices nominated pods hold),
    and the nodes with what it placed."""
    outcome = Outcome()
    for group, seen in preemption.hold_groups(pods, holds, gangs_of):
        placed = allocate(
            preemption.with_holds(nodes, seen), group, workload.classes,
            policy=policy, params=params, solve=solve, gangs=gangs_of,
        )  # fmt: skip
        _merge(outcome, placed)
        nodes = preemption.placed_on(nodes, placed, group)
    return outcome, nodes


def _nominations(workload: v1manifests.V1Workload) -> dict[str, Nomination]:
    """Pod key -> the nomination the input vouches for, by the controller's rule (an annotation
    alone is the pod's tenant's word: `nominations.believed`)."""
    out = {}
    for pod in workload.pods:
        own = frozenset(str(c.obj["metadata"].get("uid", "")) for _, c in pod.claims)
        found = nominations.believed(pod.obj, own, workload.pod_groups, priority=pod.priority)
        if found is not None:
            out[found.pod] = found
    return out


def run_v1(
    cluster: clusternodes.ClusterNodes,
    workload: v1manifests.V1Workload,
    *,
    policy: AllocationPolicySpec,
    params: SolveParams,
    solve: Solve,
) -> V1Result:
    """Allocate the pods' pending claims. A solver that raises is reported, not raised."""
    node_list = node_inputs(cluster, workload)
    pods, blocked = pod_inputs(cluster, workload)
    placing = {p.key for p in pods}
    plan = plan_gangs(workload, policy)
    complete, held, later = plan.gangs, plan.held, plan.later
    pods = [p for p in pods if p.key not in held]
    error = None
    # As the controller's cycle: the higher priority first, nominated preemptors before their
    # peers, and the devices held for a nominee taken for every pod of its priority or lower.
    nominated = _nominations(workload)
    pods = [p for _, p in sorted(enumerate(pods), key=lambda item: (
        -item[1].priority, item[1].key not in nominated, item[0]))]  # fmt: skip
    holds = holds_of(n for k, n in nominated.items() if k in placing)
    try:
        firsts = [p for p in pods if p.key not in later]
        outcome, seen_nodes = _allocate(node_list, firsts, complete, holds, workload, policy,
                                        params, solve)  # fmt: skip
        # As the controller's next cycles: a gang whose first pods are allocated is admitted,
        # and its pods past the minimum go one by one on what is left.
        admitted = {g.name for g in complete if all(p in outcome.placed for p in g.pods)}
        rest = [p for p in pods if p.key in later and later[p.key][0] in admitted]
        if rest:
            found, _ = _allocate(seen_nodes, rest, (), holds, workload, policy, params, solve)
            _merge(outcome, found)
        for key, (gang, why) in later.items():
            if gang not in admitted and key in placing:
                outcome.refused[key] = (why,)
    except Exception as failure:  # a solver bug must still end in a report, not a traceback
        log.debug("allocation failed", exc_info=True)
        error = f"solver failed: {type(failure).__name__}: {failure}"
        outcome = Outcome(refused={p.key: (error,) for p in pods})
    # A whole-run failure leaves nothing to plan preemptions from; one of some pods does not.
    crashed = error is not None
    if error is None and outcome.failed:
        # A solve that raised for some pods (the rest were placed): drasat's fault, not the
        # pods' request, so the run fails (exit 1) as a whole-run failure does.
        first = next(iter(outcome.failed.values()))
        error = f"solver failed for {len(outcome.failed)} pod(s), first: {first}"
    for key, reasons in blocked.items():
        outcome.refused[key] = ("no node admits the pod: " + "; ".join(reasons),)
    for key, why in held.items():
        if key in placing:
            outcome.refused[key] = (why,)
    preempting = () if crashed else v1preemption.plans(
        node_list, workload, outcome, policy=policy, params=params, solve=solve,
        pods_in={p.key: p for p in pods}, gangs=complete, holds=holds,
    )  # fmt: skip
    return V1Result(cluster, workload, outcome, blocked, error, tuple(complete), preempting)
