"""The best placement of one pod on one node: the online mode's per-node subproblem.

A purely computational module (with memos, in the caller's SolverCache). How a node is
evaluated:

1. the exact necessary checks of `filters.py` (cheap; they also name the blocking constraint);
2. a pod with one claim (or none) and no topology or counted reservation: an exact enumeration.
   It adds up the very terms the CP-SAT model puts on its variables (`costs.py`): the node's and
   the pod's (`costs.node_use`, `costs.pod_on_node`, `costs.pod_workload` for its CPU and
   memory) plus, per device, the GPU's own (`costs.device`, memoized per GPU state) and, with a
   target workload, the growth of the node's fragmented capacity the claim's GPUs add beside
   the pod's CPU and memory (`costs.claim_workload`). For one device (a share, one whole GPU, a
   MIG device) that cost is separable per device, so the optimum is the cheapest fitting GPU
   or free (GPU, placement); for k > 1 whole GPUs it is the k cheapest eligible GPUs, or with a
   workload part the best over how many GPUs of each kind it takes (`_cheapest_kinds`). Its
   value is the model's for the same placement; ties go to the lowest canonical position;
3. otherwise a small CP-SAT model of the pod forced onto the node, one worker (deterministic).

Results are memoized by (pod shape, policy, the node's canonical free state): nodes in the same
state share one evaluation, and a node the last decision did not touch is not evaluated again.
Every evaluation works on canonical GPU positions, so a memoized result is exactly what a fresh
evaluation of the node would give: same input, same output, whatever ran before. The free
state leaves out which GPU is which (index, uuid, NVLink peers) unless the pod or the policy
reads it (`PodShape.names_gpus`, decided from the selectors' structure). Why a pod does not fit
is memoized the same way, as an Obstacle whose claims and node are references (`reasons.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from drasat.solver import (
    costs,
    demand,
    explain,
    extract,
    filters,
    model,
    reasons,
    solving,
    workload,
)
from drasat.solver.cache import ELIGIBILITY_SIZE
from drasat.solver.demand import Claim, Kind
from drasat.solver.extract import Chosen
from drasat.solver.inventory import GpuSlot, MigOption, NodeView
from drasat.solver.model import PodEntry
from drasat.solver.problem import Status
from drasat.solver.reasons import Names, Obstacle
from drasat.solver.rules import Rules

#: Canonical device choice: (claim index in the pod, GPU position, profile, start, size); for a
#: device claim's device (`_UNIT` as its position) its key in the profile's place (such a pod
#: is evaluated per exact node state: keys are no canonical positions).
_Pick = tuple[int, int, str | None, int, int]
_UNIT = -1
#: `_state` of a node where the pod's first required claim may take no GPU.
_NONE_ELIGIBLE = "none eligible"


@dataclass(frozen=True)
class NodeOutcome:
    chosen: dict[str, list[Chosen]]
    primary: int
    secondary: int
    optimal: bool


@dataclass(frozen=True)
class Evaluation:
    """A node evaluated for a pod shape, in canonical GPU positions (shared by equal nodes and
    by concurrent solves: never changed once made)."""

    picks: tuple[_Pick, ...] | None  # None: the pod does not fit
    primary: int = 0
    secondary: int = 0
    optimal: bool = True


#: Per claim: its eligible uuids (None: any), its eligible (profile, start) by uuid (None:
#: any), and per device constraint its devices' values by uuid ((profile, start), value).
_Eligibility = tuple[
    frozenset[str] | None,
    Mapping[str, tuple[tuple[str, int], ...]] | None,
    tuple[Mapping[str, tuple[tuple[tuple[str | None, int | None], str], ...]], ...],
]


#: Per claim, of one GPU: eligible, its eligible (profile, start) (None: any), its devices'
#: values.
_GpuLimits = tuple[
    bool,
    tuple[tuple[str, int], ...] | None,
    tuple[tuple[tuple[tuple[str | None, int | None], str], ...], ...],
]


@dataclass(frozen=True)
class PodShape:
    """What the per-node evaluation of a pod depends on, besides the node and the policy."""

    entry: PodEntry
    key: tuple[object, ...]
    names_gpus: bool
    #: intern(key), for memo keys.
    key_id: int
    #: The pod's claims as reasons name them (namespace/name), in order: what a ClaimRef of
    #: a memoized obstacle renders to for this pod.
    refs: tuple[str, ...] = ()
    #: Claims limited to some GPUs (an eligible set, MIG placements: v1 claims, whose
    #: selectors were evaluated per device) and naming none otherwise: per claim, the eligible
    #: uuids (None: any) and the eligible (profile, start) by uuid (None: any). A node's state
    #: is then told apart by which of its GPUs (in canonical positions) are eligible, not by
    #: their identity, so equal nodes still share one evaluation (`_state`). None: no such claim
    #: (or `names_gpus`).
    eligibility: tuple[_Eligibility, ...] | None = None
    #: The fragmentation term's workload classes are limited to some GPUs: each GPU's
    #: eligibility row (`workload.eligible_row`) is part of the node's state too.
    rows: bool = False
    #: intern() of what `_state` reads of the pod (its claims' limits, `rows` and what the rows
    #: depend on): shapes that differ only in what they ask (counts, shares, CPU) but are
    #: limited to the same GPUs share each node's reading (a cycle's pods are of many shapes
    #: and few eligible sets; reading every node once per shape was most of a busy cycle).
    eligibility_id: int = 0
    #: intern() of the claims' limits alone (`eligibility_id` without the workload): what a
    #: node's reading of the limits is kept by (`_limits_state`), across solves whose target
    #: workloads differ.
    limits_id: int = 0
    #: The eligible GPUs of the pod's first required claim (None: not limited, or no such
    #: claim): a node with none of them fails that claim first (`filters.node_blocker` checks
    #: the claims in order), whatever else it holds, so `_state` reads it no further.
    gate: frozenset[str] | None = None


def _eligible_text(claim: Claim, groups: dict[str, int], rules: Rules) -> str:
    """`groups`: the pod's constraint keys, numbered in the order met (a key names its claim,
    which pods of one template do not share; what the evaluation reads is which of the pod's
    claims a constraint ties together, so pods that differ only in their claims' names share
    one shape and one evaluation per node)."""
    request = claim.request
    eligible = request.eligible
    # Sets by their interned number (equal sets, one number), not spelled out: a v1 claim's
    # set holds every eligible GPU of the cluster.
    text = "" if eligible is None else f" eligible=#{rules.cache.intern_large(eligible)}"
    if request.placements is not None:
        text += f" placements=#{rules.cache.intern_large(request.placements)}"
    if request.constraints:
        local = tuple(
            (
                groups.setdefault(c.key, len(groups)),
                c.distinct,
                c.evenly,
                c.label,
                rules.cache.intern_large(c.values),
            )
            for c in request.constraints
        )
        text += f" constraints={local!r}"
    if request.share_group is not None:
        text += f" share_group={request.share_group}"
    return text if request.same_gpu is None else f"{text} same_gpu={request.same_gpu}"


def shape(entry: PodEntry, rules: Rules) -> PodShape:
    claims = []
    # Which GPU is which matters when a selector (a claim's, a reservation's, or a workload
    # class's) names an index or uuid: read from the selectors' structure.
    # A workload class limited to some GPUs by an eligible set (v1 claims) is read per node
    # by `_state` through each GPU's eligibility row, like the pod's own eligible sets.
    rows = bool(rules.workload) and rules.workload.names_gpus and not _workload_names_gpus(rules)
    names_gpus = rules.names_gpus or (rules.workload.names_gpus and not rows)
    groups: dict[str, int] = {}
    for claim in entry.claims:
        spec = claim.request.gpu or claim.request.mig or claim.request.device
        assert spec is not None
        # The spec's fields, serialized (equal text: equal fields); a key, never searched.
        text = spec.key() + _eligible_text(claim, groups, rules)
        names_gpus = names_gpus or _names_gpus(claim)
        if claim.request.device is not None:
            # Its choices name devices, and what is left of them is the node's exact state.
            names_gpus = True
            text += f" devices=#{rules.cache.intern_large(claim.request.device.choices)}"
        if claim.request.gpu is not None and claim.request.gpu.topology is not None:
            names_gpus = True  # NVLink peers are named by uuid
        paired = next((i for i, c in enumerate(entry.claims) if c.uid == claim.paired_with), None)
        if claim.paired_with is not None and paired is None:
            names_gpus = True  # which GPU its allocated partner holds is part of the state
        claims.append((claim.kind.value, text, paired))
    budgets = []
    namespaces = sorted({c.namespace for c in entry.claims})
    for namespace in namespaces:
        budgets.append(tuple(dataclasses.astuple(b) for b in rules.limits_for(namespace)))
        budgets.append(
            tuple((b.reservation.name, b.left) for b in rules.reservation_budgets(namespace))
        )
    request = entry.request
    key = (
        rules.fingerprint,
        tuple(namespaces),
        tuple(claims),
        tuple(budgets),
        request.cpu_milli,
        request.memory_mib,
        rules.workload.id,
    )
    refs = tuple(c.ref for c in entry.claims)
    eligibility = None
    limited = any(
        c.request.eligible is not None or c.request.placements is not None or c.request.constraints
        for c in entry.claims
    )
    eligibility_id = 0
    limits_id = 0
    gate = None
    if (limited or rows) and not names_gpus:
        eligibility = tuple(_eligibility(c, rules) for c in entry.claims)
        read = (
            tuple(_limits_key(c, rules) for c in entry.claims),
            (rules.fingerprint, rules.workload.id) if rows else None,
        )
        eligibility_id = rules.cache.intern(read)
        first = next((c for c in entry.claims if not c.optional), None)
        if first is not None and first.kind is not Kind.device:
            gate = first.request.eligible
        gate_id = 0 if gate is None else rules.cache.intern_large(gate)
        limits_id = rules.cache.intern((read[0], gate_id))
    shape_id = rules.cache.intern(key)
    return PodShape(
        entry,
        key,
        names_gpus,
        shape_id,
        refs,
        eligibility,
        rows and not names_gpus,
        eligibility_id,
        limits_id,
        gate,
    )


def _workload_names_gpus(rules: Rules) -> bool:
    """Whether a workload class's selector names GPUs by index or uuid (not only by an
    eligible set, which `workload.eligible_row` reads per GPU)."""
    return any(
        demand.names_gpu(c.claim.selector) or bool(c.claim.request.constraints)
        for c in rules.workload.classes
    )


def _names_gpus(claim: Claim) -> bool:
    """Whether the claim's selector tells GPUs apart by their index or uuid (an eligible set
    and device constraints are read per node by `_state` instead)."""
    return demand.names_gpu(claim.selector)


def _limits_key(claim: Claim, rules: Rules) -> tuple[object, ...]:
    """What `_eligibility` reads of the claim, as interned numbers."""
    request = claim.request
    values_ids = tuple(rules.cache.intern_large(c.values) for c in request.constraints)
    sets = (request.eligible, request.placements)
    return (*(None if v is None else rules.cache.intern_large(v) for v in sets), values_ids)


def _eligibility(claim: Claim, rules: Rules) -> _Eligibility:
    """The claim's limits by uuid (memoized per set: the claims of a template share them)."""
    request = claim.request
    key = _limits_key(claim, rules)
    known = rules.cache.limits.get(key)
    if known is not None:
        return cast(_Eligibility, known)
    starts = None
    if request.placements is not None:
        by_uuid: dict[str, list[tuple[str, int]]] = {}
        for uuid, mig_profile, start in request.placements:
            by_uuid.setdefault(uuid, []).append((mig_profile, start))
        starts = {uuid: tuple(sorted(taken)) for uuid, taken in by_uuid.items()}
    values = []
    for constraint in request.constraints:
        per_uuid: dict[str, list[tuple[tuple[str | None, int | None], str]]] = {}
        for (gpu_uuid, profile, device_start), value in constraint.values:
            per_uuid.setdefault(gpu_uuid, []).append(((profile, device_start), value))
        values.append({uuid: tuple(entries) for uuid, entries in per_uuid.items()})
    made: _Eligibility = (request.eligible, starts, tuple(values))
    rules.cache.put(rules.cache.limits, key, made)
    return made


def _gpu_eligibility(pod: PodShape, uuid: str) -> tuple[_GpuLimits, ...]:
    """What the pod's claims may take of this GPU, and the values its devices have for their
    constraints (see PodShape.eligibility)."""
    assert pod.eligibility is not None
    return tuple(
        (
            eligible is None or uuid in eligible,
            None if starts is None else starts.get(uuid, ()),
            tuple(by_uuid.get(uuid, ()) for by_uuid in values),
        )
        for eligible, starts, values in pod.eligibility
    )


def _state(pod: PodShape, node: NodeView, rules: Rules) -> int:
    """The node's state as the pod's evaluation reads it: which GPU is which when the pod
    names GPUs; when it is limited to some GPUs or constrains their devices' values, which of
    them are eligible and which of their values are equal (values renumbered in the order met:
    the evaluation compares them, never reads them); else what they are. Memoized per pod
    shape's limits (`PodShape.eligibility_id`) and node state (and the node's policy class,
    which the workload rows read)."""
    if pod.names_gpus:
        return node.exact_key
    if pod.eligibility is None:
        return node.canonical_key
    key = (pod.eligibility_id, node.exact_key, rules.node_class_id(node.name) if pod.rows else 0)
    found = rules.cache.eligibility.get(key)
    if found is None:
        limits = _limits_state(pod, node, rules)
        if limits == _NONE_ELIGIBLE_STATE:
            # Its first required claim may take none of the node's GPUs: the pod does not fit,
            # for the same reason on every node of this canonical state.
            state = rules.cache.intern((node.canonical_key, _NONE_ELIGIBLE))
        else:
            rows = _rows_state(node, rules) if pod.rows else 0
            state = rules.cache.intern((node.canonical_key, limits, rows))
        found = rules.cache.put(rules.cache.eligibility, key, state, size=ELIGIBILITY_SIZE)
    return found


#: `_limits_state` of a node none of whose GPUs the pod's first required claim may take
#: (interned numbers start at 1).
_NONE_ELIGIBLE_STATE = 0


def _limits_state(pod: PodShape, node: NodeView, rules: Rules) -> int:
    """The node's GPUs (in canonical positions) as the pod's claims' limits read them: which
    are eligible, which placements, which of their constraint values are equal (renumbered in
    the order met); `_NONE_ELIGIBLE_STATE` when its first required claim may take none of
    them (`PodShape.gate`, part of `limits_id`). Memoized per (limits, node exact state): it
    does not depend on the target workload, which each solve chooses from its own pods, so the
    next cycle's pods limited to the same GPUs find it."""
    key = (pod.limits_id, node.exact_key)
    found = rules.cache.limit_states.get(key)
    if found is None and pod.gate is not None and pod.gate.isdisjoint(g.uuid for g in node.gpus):
        found = rules.cache.put(
            rules.cache.limit_states, key, _NONE_ELIGIBLE_STATE, size=ELIGIBILITY_SIZE
        )
    if found is None:
        numbers: dict[str, int] = {}
        signature: list[object] = []
        for gpu in node.gpus:
            for eligible, starts, values in _gpu_eligibility(pod, gpu.uuid):
                renamed = tuple(
                    tuple(
                        (where, numbers.setdefault(value, len(numbers))) for where, value in entries
                    )
                    for entries in values
                )
                signature.append((eligible, starts, renamed))
        found = rules.cache.put(
            rules.cache.limit_states,
            key,
            rules.cache.intern(tuple(signature)),
            size=ELIGIBILITY_SIZE,
        )
    return found


def _rows_state(node: NodeView, rules: Rules) -> int:
    """The workload's eligibility rows of the node's GPUs (in canonical positions), interned.
    Memoized per (workload, policy, node exact state, node class): one reading per node and
    solve, whatever pod shapes the solve holds."""
    key = (rules.workload.id, rules.fingerprint, node.exact_key, rules.node_class_id(node.name))
    found = rules.cache.row_states.get(key)
    if found is None:
        rows = tuple(workload.eligible_row(rules.workload, gpu, rules) for gpu in node.gpus)
        found = rules.cache.put(rules.cache.row_states, key, rules.cache.intern(rows))
    return found


def memo_key(pod: PodShape, node: NodeView, rules: Rules) -> tuple[int, int, int]:
    """The node's evaluation's memo key: equal keys, one evaluation (`evaluate`)."""
    return (pod.key_id, rules.node_class_id(node.name), _state(pod, node, rules))


def memo_keys(pod: PodShape, views: Sequence[NodeView], rules: Rules) -> list[tuple[int, int, int]]:
    """memo_key() of each node, in order: one loop, for the thousands of nodes a new pod shape
    groups."""
    if pod.eligibility is not None and not pod.names_gpus:
        return [memo_key(pod, node, rules) for node in views]
    class_id, key_id = rules.node_class_id, pod.key_id
    if pod.names_gpus:
        return [(key_id, class_id(node.name), node.exact_key) for node in views]
    return [(key_id, class_id(node.name), node.canonical_key) for node in views]


def cannot_fit(pod: PodShape, node: NodeView) -> bool:
    """Whether the node's free CPU or memory rules the pod out: then its evaluation is
    `Evaluation(None)` whatever else the node holds (both `_compute` paths check this first),
    and a caller with many nodes to look at need not ask for it."""
    return not _fits_cpu(pod.entry, node)


#: What `evaluate` gives a node that `cannot_fit` the pod.
DOES_NOT_FIT = Evaluation(None)


def evaluate(
    pod: PodShape,
    node: NodeView,
    rules: Rules,
    budget: solving.Budget,
    key: tuple[int, int, int] | None = None,
) -> Evaluation:
    """The pod's best placement on the node (`picks` None: it does not fit). Memoized.
    `key`: the node's memo_key, when the caller has it."""
    if key is None:
        key = memo_key(pod, node, rules)
    memo = rules.cache.evaluations
    found = memo.get(key)
    if found is None:
        found = rules.cache.put(memo, key, _compute(pod, node, rules, budget))
    return found


def evaluate_each(
    pod: PodShape, views: Sequence[NodeView], rules: Rules, budget: solving.Budget
) -> list[Evaluation]:
    """evaluate() of each node, in order: one loop, because an online decision runs it over
    every candidate node and at thousands of nodes the per-call overhead is most of its cost."""
    memo_get = rules.cache.evaluations.get
    class_id = rules.node_class_id
    exact = pod.names_gpus
    limited = pod.eligibility is not None
    key_id = pod.key_id
    out: list[Evaluation] = []
    states_get = rules.cache.eligibility.get
    eligibility_id = pod.eligibility_id
    for node in views:
        if limited:
            known = None if pod.rows else states_get((eligibility_id, node.exact_key, 0))
            state = known or _state(pod, node, rules)
        else:
            state = node.exact_key if exact else node.canonical_key
        found = memo_get((key_id, class_id(node.name), state))
        out.append(found if found is not None else evaluate(pod, node, rules, budget))
    return out


def outcome(pod: PodShape, node: NodeView, evaluation: Evaluation) -> NodeOutcome:
    """A fitting evaluation spelled with the node's GPUs and the pod's claims."""
    assert evaluation.picks is not None
    chosen: dict[str, list[Chosen]] = {c.uid: [] for c in pod.entry.claims}
    for index, position, profile, start, size in evaluation.picks:
        if position == _UNIT:
            found = Chosen(str(profile))
        else:
            found = Chosen(node.gpus[position].uuid, profile, start, size)
        chosen[pod.entry.claims[index].uid].append(found)
    return NodeOutcome(chosen, evaluation.primary, evaluation.secondary, evaluation.optimal)


def reason(
    pod: PodShape, node: NodeView, evaluation: Evaluation, rules: Rules, budget: solving.Budget
) -> filters.Blocker | None:
    """Why the pod does not fit the node: the memoized obstacle (computed once per memo entry)
    bound to this node and this pod's claims, whose names it renders."""
    obstacle = _memo_obstacle(pod, node, evaluation, rules, budget)
    if obstacle is None:
        return None
    return filters.Blocker(obstacle, Names(pod.refs, node.name, len(node.unhealthy)))


def reason_text(
    pod: PodShape, node: NodeView, evaluation: Evaluation, rules: Rules, budget: solving.Budget
) -> str | None:
    """`reason(...).node_text` alone (the controller asks it of every node that does not fit;
    the cluster-wide sentence is not rendered). `_memo_obstacle` inlined: it runs per node."""
    if evaluation.picks is not None:
        return None
    key = memo_key(pod, node, rules)
    obstacle = rules.cache.blockers.get(key, _MISSING)
    if obstacle is _MISSING:
        obstacle = rules.cache.put(rules.cache.blockers, key, _obstacle(pod, node, rules, budget))
    if obstacle is None:
        return None
    return reasons.node_text(obstacle.node_text, pod.refs, node.name, len(node.unhealthy))


def _memo_obstacle(
    pod: PodShape, node: NodeView, evaluation: Evaluation, rules: Rules, budget: solving.Budget
) -> Obstacle | None:
    """The obstacle of the node's memo entry, computed the first time it is asked for."""
    if evaluation.picks is not None:
        return None
    key = memo_key(pod, node, rules)
    memo = rules.cache.blockers
    found = memo.get(key, _MISSING)
    if found is _MISSING:
        return rules.cache.put(memo, key, _obstacle(pod, node, rules, budget))
    return found


#: A memo miss (an entry may hold None: no obstacle found).
_MISSING = Obstacle(("missing",), (), ())


def _obstacle(
    pod: PodShape, node: NodeView, rules: Rules, budget: solving.Budget
) -> Obstacle | None:
    """Why the pod does not fit the node, its claims and the node as references."""
    entry = pod.entry
    found = filters.node_blocker(entry.request, entry.claims, node, rules)
    return found or explain.model_blocker(entry, node, rules, budget)


def _compute(pod: PodShape, node: NodeView, rules: Rules, budget: solving.Budget) -> Evaluation:
    """Evaluate a node afresh; blockers are left for `evaluate` to find when asked."""
    entry = pod.entry
    if _enumerable(entry, rules):
        return _enumerate(pod, node, rules)
    if not _fits_cpu(entry, node) or filters.node_blocker(entry.request, entry.claims, node, rules):
        return Evaluation(None)
    one = PodEntry(entry.request, entry.priority, entry.claims, (node,))
    built = model.build([one], rules, force_placed=True)
    result = solving.solve(built, budget)
    if not result.has_solution:
        # "Does not fit" is proven only by INFEASIBLE, not by a time-out.
        return Evaluation(None, optimal=result.status is Status.INFEASIBLE)
    _, chosen = extract.placements(built, result, [one])[entry.key]
    picks: list[_Pick] = []
    positions = {g.uuid: g.position for g in node.gpus}
    for index, claim in enumerate(entry.claims):
        for c in chosen.get(claim.uid, []):
            if claim.kind is Kind.device:
                picks.append((index, _UNIT, c.uuid, 0, 0))
            else:
                picks.append((index, positions[c.uuid], c.profile, c.start, c.size))
    return Evaluation(
        tuple(picks), result.primary, result.secondary, result.status is Status.OPTIMAL
    )


def _enumerable(entry: PodEntry, rules: Rules) -> bool:
    if not entry.claims:
        return True
    if len(entry.claims) != 1:
        return False
    (claim,) = entry.claims
    if claim.kind is Kind.device:
        return False  # the model counts the amounts other drivers' devices draw on
    gpu = claim.request.gpu
    if gpu is not None and gpu.topology is not None and claim.count > 1:
        return False
    if claim.paired_with is not None:
        return False  # its GPU claim is allocated already: the model pins it to that GPU
    if claim.request.constraints:
        return False  # the model reads the devices' values
    return not rules.reservation_budgets(claim.namespace)


def _fits_cpu(entry: PodEntry, node: NodeView) -> bool:
    request = entry.request
    if node.cpu_free_milli is not None and request.cpu_milli > node.cpu_free_milli:
        return False
    return node.memory_free_mib is None or request.memory_mib <= node.memory_free_mib


def _enumerate(pod: PodShape, node: NodeView, rules: Rules) -> Evaluation:
    """Exact optimum of a one-claim pod on one node (see the module docstring)."""
    entry = pod.entry
    if not node.ready or not _fits_cpu(entry, node):
        return Evaluation(None)
    request = entry.request
    cpu, memory = request.cpu_milli, request.memory_mib
    base = costs.node_use(node, rules) + costs.pod_on_node(node, rules)
    if not entry.claims:
        levels = model.PrimaryLevels.of([entry.priority], 0)
        secondary = base + costs.pod_workload(node, cpu, memory, rules)
        return Evaluation((), primary=levels.pod(entry.priority, 0), secondary=secondary)
    (claim,) = entry.claims
    limits = rules.limits_for(claim.namespace)
    gpus_left = min((b.gpus_left for b in limits if b.gpus_left is not None), default=None)
    slices_left = min(
        (b.mig_slices_left for b in limits if b.mig_slices_left is not None), default=None
    )
    node_class = rules.node_class(node.name)
    # The fragmentation term's workload part: the pod's CPU and memory and the claim's GPUs
    # priced together (`costs.placement_workload`, what the model's `pod_workload` and
    # `claim_workload` add up to), per way for a one-device claim, per composition for k > 1
    # whole GPUs; without GPUs (or a workload part), `pod_workload`. It reads the whole node:
    # not memoized per GPU state, but GPUs with equal free compute and equal eligibility for
    # the workload's classes add equal growth.
    priced = costs.priced(claim, rules)
    per_device = priced and costs.per_device(claim)
    grown: dict[tuple[object, ...], int] = {}
    # (cost, position, option order, option) of every way to satisfy the claim on this node.
    ways = []
    for gpu in node.gpus:
        for cost, order, option in _gpu_ways(pod, claim, gpu, node_class, rules):
            if option is not None and slices_left is not None and option.size > slices_left:
                continue
            if per_device:
                key: tuple[object, ...] = ()  # MIG GPUs: outside the measure
                if not gpu.mig_enabled:
                    row = workload.eligible_row(rules.workload, gpu, rules)
                    key = (gpu.held_whole, gpu.share_compute_used, row)
                extra = grown.get(key)
                if extra is None:
                    extra = costs.placement_workload(
                        claim, node, [gpu.position], cpu, memory, rules
                    )
                    grown[key] = extra
                cost += extra
            ways.append((cost, gpu.position, order, option))
    need = claim.count if claim.kind is Kind.whole else 1
    levels = model.PrimaryLevels.of([entry.priority], 1 if claim.optional else 0)
    placed = levels.pod(entry.priority, 0)
    too_many = gpus_left is not None and claim.kind is not Kind.mig and need > gpus_left
    if len(ways) < need or too_many:
        if not claim.optional:
            return Evaluation(None)
        secondary = base + costs.pod_workload(node, cpu, memory, rules)
        return Evaluation((), primary=placed, secondary=secondary)
    ways.sort(key=lambda w: (w[0], w[1], w[2]))
    if per_device:
        chosen, extra = ways[:need], 0  # the one way carries the workload part
    elif priced:
        chosen, extra = _cheapest_kinds(claim, node, ways, cpu, memory, rules)
    else:
        chosen, extra = ways[:need], costs.pod_workload(node, cpu, memory, rules)
    picks = tuple(
        (0, position, o.profile if o else None, o.start if o else 0, o.size if o else 0)
        for _, position, _, o in chosen
    )
    got = levels.got if claim.optional else 0
    secondary = base + sum(w[0] for w in chosen) + extra
    return Evaluation(picks, primary=placed + got, secondary=secondary)


_Way = tuple[int, int, int, MigOption | None]


def _cheapest_kinds(
    claim: Claim,
    node: NodeView,
    ways: list[_Way],
    cpu: int,
    memory: int,
    rules: Rules,
) -> tuple[list[_Way], int]:
    """k > 1 whole GPUs with a workload part: the best over how many GPUs of each
    `costs.whole_kind` it takes (the cheapest of each kind), and that composition's
    `costs.placement_workload`. `ways` sorted; one kind: the k cheapest."""
    kinds: dict[tuple[object, ...], list[_Way]] = {}
    for way in ways:
        kinds.setdefault(costs.whole_kind(node.gpus[way[1]], rules), []).append(way)
    groups = list(kinds.values())
    best: tuple[tuple[object, ...], list[_Way], int] | None = None
    for counts in costs.compositions(claim.count, [len(g) for g in groups]):
        chosen = sorted(
            (w for n, g in zip(counts, groups, strict=True) for w in g[:n]),
            key=lambda w: (w[0], w[1], w[2]),
        )
        positions = [w[1] for w in chosen]
        extra = costs.placement_workload(claim, node, positions, cpu, memory, rules)
        rank = (sum(w[0] for w in chosen) + extra, [(w[0], w[1], w[2]) for w in chosen])
        if best is None or rank < best[0]:
            best = (rank, chosen, extra)
    assert best is not None  # there are at least k ways
    return best[1], best[2]


def _gpu_ways(
    pod: PodShape,
    claim: Claim,
    gpu: GpuSlot,
    node_class: tuple[bool, ...],
    rules: Rules,
) -> tuple[tuple[int, int, MigOption | None], ...]:
    """(cost, order, MIG option or None) of each way the claim can take this GPU. Memoized by
    the GPU's state: thousands of GPUs share a few dozen states."""
    if pod.names_gpus:
        identity: tuple[object, ...] = gpu.identity()
    else:
        identity = () if pod.eligibility is None else _gpu_eligibility(pod, gpu.uuid)
        if pod.rows:
            identity = (*identity, workload.eligible_row(rules.workload, gpu, rules))
    key = (pod.key, gpu.state_id, node_class, identity)
    found = rules.cache.gpu_ways.get(key)
    if found is not None:
        return found
    ways: list[tuple[int, int, MigOption | None]] = []
    if demand.device_fits(claim, gpu) and rules.blocking_rule(claim, gpu) is None:
        if claim.kind is Kind.mig:
            for order, option in enumerate(model.free_options(claim, gpu)):
                ways.append((costs.device(claim, gpu, option, rules), order, option))
        elif (claim.kind is Kind.share and model.share_fits(claim, gpu)) or (
            claim.kind is Kind.whole and gpu.untouched
        ):
            ways.append((costs.device(claim, gpu, None, rules), 0, None))
    return rules.cache.put(rules.cache.gpu_ways, key, tuple(ways))
