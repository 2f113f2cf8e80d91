"""`solve`: the two modes over one problem.

- online: pods one at a time in the given order, each decision final before the next. One pod
  lands on one node, so its optimum is the best over nodes of the per-node optimum: nodes failing
  the exact checks of `filters.py` are pruned, the others are evaluated by `nodes.py` (a small
  CP-SAT model per node, or an exact enumeration for one-claim pods, cached by the node's free
  state), and the best node wins (ties: the node listed first).
- batch: all pods in one time-limited model, warm-started from the online solution, which it
  replaces only when it places at least as much (so batch is never worse than online).

What a Solution claims (`Status`): online reports PER_POD_OPTIMAL (FEASIBLE when a per-node
evaluation ran out of time) and no bound — each decision is the best for its pod given the ones
before it, which says nothing about the set. Batch reports CP-SAT's status and bound, except when
the model kept only each pod's best nodes (large problems): then FEASIBLE, without a bound
(a bound of the reduced model is no bound of the problem).

Unplaced pods get explanations (see `explain.py`) computed against the final state.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter, not_

from drasat.api.policy import LifecycleAction
from drasat.solver import (
    demand,
    explain,
    extract,
    filters,
    gangs,
    model,
    nodegroups,
    nodes,
    solving,
    validate,
    workload,
)
from drasat.solver.cache import SolverCache, fresh
from drasat.solver.demand import Claim, Kind
from drasat.solver.extract import Chosen
from drasat.solver.inventory import NodeView, view_of
from drasat.solver.ledger import Allocation
from drasat.solver.model import PodEntry
from drasat.solver.problem import (
    Gang,
    Mode,
    NodeState,
    PodPlacement,
    PodRejection,
    PodRequest,
    Problem,
    Solution,
    SolveParams,
    Status,
)
from drasat.solver.rules import Rules


@dataclass
class _Decision:
    node: str
    chosen: dict[str, list[Chosen]]
    primary: int
    secondary: int


@dataclass
class _State:
    """The cluster as decisions so far left it."""

    nodes: dict[str, NodeState]
    views: dict[str, NodeView]
    rules: Rules
    #: Claim uid -> the node it is allocated on, for the problem's claims (placements add to it).
    owners: dict[str, str] = field(default_factory=dict)
    #: Claims of non-sharable classes placed in this solve -> the pod that uses them.
    exclusive_users: dict[str, str] = field(default_factory=dict)
    #: The policy's lifecycle init actions, resolved into each new allocation.
    init_actions: tuple[LifecycleAction, ...] = ()
    #: The nodes placed on, in order (what `nodegroups.Groups.update` reads).
    changed: list[str] = field(default_factory=list)
    #: (pod shape, candidate nodes) -> its candidates grouped by evaluation (`_best`), taken
    #: from the cache's and given back after the pass.
    groups: dict[tuple[int, tuple[str, ...] | None], nodegroups.Groups] = field(
        default_factory=dict
    )

    @classmethod
    def initial(cls, problem: Problem, views: dict[str, NodeView], cache: SolverCache) -> _State:
        """`views`: the problem's nodes' views by name, in node order (from validate.check)."""
        # The passes over every node below run in C (map, compress): at a thousand nodes and
        # more a Python loop over them is a good part of a one-pod solve.
        states = dict(zip(views, problem.nodes, strict=True))  # same names, same order
        rules = Rules(problem.policy, tuple(views.values()), cache)
        if rules.weights.fragmentation:
            chosen = workload.select(problem.policy, problem.workload, problem.pods, cache)
            rules.workload = chosen.scaled_by_supply(views.values(), rules)
        # One pass over the nodes for every claim of every pod (not one per claim).
        wanted = {c.uid for pod in problem.pods for c in pod.claims}
        owners: dict[str, str] = {}
        allocated = map(attrgetter("allocated"), views.values())
        for view in compress(views.values(), map(not_, map(wanted.isdisjoint, allocated))):
            for uid in view.allocated & wanted:
                owners.setdefault(uid, view.name)
        init = tuple(problem.policy.lifecycle.init)
        return cls(states, dict(views), rules, owners, init_actions=init)

    def allocated_on(self, uid: str) -> str | None:
        return self.owners.get(uid)

    def place(self, pod: PodRequest, claims: Sequence[Claim], decision: _Decision) -> PodPlacement:
        node = self.nodes[decision.node]
        before = self.views[decision.node]
        by_uid = {c.uid: c for c in claims}
        devices = {
            uid: tuple(c.uuid for c in chosen)
            for uid, chosen in decision.chosen.items()
            if by_uid[uid].kind is Kind.device
        }
        allocations = {
            uid: extract.with_lifecycle(
                extract.with_devices(extract.allocation(by_uid[uid], chosen), before),
                self.init_actions,
                before,
            )
            for uid, chosen in decision.chosen.items()
            if uid not in devices
        }
        updated = dataclasses.replace(
            node,
            ledger=node.ledger.with_allocated(allocations),
            used_cpu_milli=node.used_cpu_milli + pod.cpu_milli,
            used_memory_mib=node.used_memory_mib + pod.memory_mib,
            amounts=_drawn(node.amounts, [by_uid[uid] for uid in devices], devices),
            device_claims=node.device_claims | frozenset(devices),
        )
        self.nodes[decision.node] = updated
        self.views[decision.node] = view_of(updated, self.rules.cache)
        self.changed.append(decision.node)
        for uid in [*allocations, *devices]:
            self.owners.setdefault(uid, decision.node)
        for request in pod.claims:
            if not request.shareable:
                self.exclusive_users.setdefault(request.uid, pod.key)
        self._spend(pod, before, allocations)
        return PodPlacement(
            pod=pod.key, node=decision.node, allocations=allocations, devices=devices
        )

    def _spend(self, pod: PodRequest, before: NodeView, new: dict[str, Allocation]) -> None:
        by_namespace: dict[str, tuple[int, int, list[str]]] = {}
        for entry in new.values():
            gpus, slices, uuids = by_namespace.get(entry.namespace, (0, 0, []))
            gpus += len(entry.gpus)
            slices += sum(m.size for m in entry.migs)
            by_namespace[entry.namespace] = (gpus, slices, uuids + list(entry.parents))
        for namespace, (gpus, slices, uuids) in by_namespace.items():
            opened = [g for g in before.gpus if g.uuid in set(uuids) and g.untouched]
            self.rules.spend(namespace, gpus, slices, opened)


def _drawn(
    amounts: tuple[tuple[str, int], ...],
    claims: Sequence[Claim],
    taken: dict[str, tuple[str, ...]],
) -> tuple[tuple[str, int], ...]:
    """The node's amounts less what the device claims' devices just taken draw on."""
    if not claims:
        return amounts
    left = dict(amounts)
    for claim in claims:
        draws = dict(claim.request.device.choices) if claim.request.device is not None else {}
        for key in taken[claim.uid]:
            for name, much in draws[key]:
                left[name] -= much
    return tuple(left.items())


@dataclass
class _PodInput:
    """A pod's claims split into new ones and ones already allocated (which pin the pod)."""

    request: PodRequest
    priority: int
    claims: tuple[Claim, ...]
    pinned_to: frozenset[str]


def _pod_input(pod: PodRequest, state: _State) -> _PodInput:
    new: list[Claim] = []
    pinned: set[str] = set()
    for request in pod.claims:
        node = state.allocated_on(request.uid)
        if node is None:
            new.append(demand.normalize(request, pod))
        else:
            pinned.add(node)
    priority = demand.pod_priority(pod, state.rules.policy)
    return _PodInput(pod, priority, tuple(new), frozenset(pinned))


def _candidates(pod: _PodInput, state: _State) -> tuple[list[NodeView], list[str]]:
    """Nodes the pod may go to (in node order), and reasons when that leaves none."""
    names: dict[str, NodeView] = state.views
    reasons: list[str] = []
    if pod.request.candidate_nodes is not None:
        wanted = set(pod.request.candidate_nodes)
        names = {n: v for n, v in names.items() if n in wanted}
        if not names:
            reasons.append("none of the pod's candidate nodes has a NodeAllocationState")
    for request in pod.request.claims:
        user = state.exclusive_users.get(request.uid)
        if user is not None and user != pod.request.key:
            return [], [
                f"claim {request.namespace}/{request.name} is not sharable (its class sets "
                f"sharable: false) and pod {user} uses it"
            ]
    if len(pod.pinned_to) > 1:
        where = ", ".join(sorted(pod.pinned_to))
        return [], [f"its claims are already allocated on different nodes ({where})"]
    if pod.pinned_to:
        (home,) = pod.pinned_to
        if home not in names:
            return [], [f"a claim of the pod is allocated on node {home}, not a candidate node"]
        return [names[home]], reasons
    return list(names.values()), reasons


@dataclass
class _Online:
    placements: list[PodPlacement]
    unplaced: list[PodRejection]
    feasibility: dict[str, dict[str, str | None]]
    primary: int
    secondary: int
    all_optimal: bool


def _decide(
    pod: _PodInput,
    state: _State,
    budget: solving.Budget,
    *,
    explain_it: bool,
    feasibility: dict[str, str | None] | None,
) -> tuple[_Decision | None, list[filters.Blocker], list[str], bool]:
    """The best node for the pod (or None), blockers of the other nodes, and whether optimal."""
    views, reasons = _candidates(pod, state)
    entry = PodEntry(pod.request, pod.priority, pod.claims, ())
    shape = nodes.shape(entry, state.rules)
    if feasibility is None and views and not pod.pinned_to:
        # No per-node record asked for: one evaluation per group of equal nodes.
        best, blockers, optimal = _best(shape, pod.request.candidate_nodes, views, state, budget)
    else:
        best, blockers, optimal = _scan(shape, views, state, budget, feasibility)
    if best is None and explain_it and feasibility is None:
        # Reasons cost extra only for a pod that fits nowhere: ask again, for them.
        _, blockers, _ = _scan(shape, views, state, budget, {})
    return best, blockers, reasons, optimal


def _best(
    shape: nodes.PodShape,
    candidate_nodes: tuple[str, ...] | None,
    views: Sequence[NodeView],
    state: _State,
    budget: solving.Budget,
) -> tuple[_Decision | None, list[filters.Blocker], bool]:
    """`_scan` without per-node records: the same decision and flag, from the candidates
    grouped by their evaluation (`nodegroups.py`), kept in the state across decisions."""
    key = (shape.key_id, candidate_nodes)
    groups = state.groups.get(key)
    if groups is None:
        # Kept from an earlier solve over the same candidates, or made afresh.
        groups = state.rules.cache.take_groups(key)
        if groups is None or not groups.adopt(shape, views, state.changed, state.rules):
            groups = nodegroups.Groups.of(shape, views, state.rules, state.changed)
        state.groups[key] = groups
    else:
        groups.update(shape, state.views, state.changed, state.rules)
    view, evaluation, optimal = groups.best(shape, state.views, state.rules, budget)
    if view is None or evaluation is None:
        return None, [], optimal
    outcome = nodes.outcome(shape, view, evaluation)
    return _Decision(view.name, outcome.chosen, outcome.primary, outcome.secondary), [], optimal


def _scan(
    shape: nodes.PodShape,
    views: Sequence[NodeView],
    state: _State,
    budget: solving.Budget,
    feasibility: dict[str, str | None] | None,
) -> tuple[_Decision | None, list[filters.Blocker], bool]:
    rules = state.rules
    best: tuple[int, int, NodeView, nodes.Evaluation] | None = None
    blockers: list[filters.Blocker] = []
    misses: list[tuple[NodeView, nodes.Evaluation]] = []
    optimal = True
    evaluations = nodes.evaluate_each(shape, views, rules, budget)
    for view, evaluation in zip(views, evaluations, strict=True):
        # Proven: the node's optimum, or that the pod does not fit there.
        optimal = optimal and evaluation.optimal
        if evaluation.picks is not None:
            if best is None or (evaluation.primary, -evaluation.secondary) > (best[0], -best[1]):
                best = (evaluation.primary, evaluation.secondary, view, evaluation)
            if feasibility is not None:
                feasibility[view.name] = None
        elif feasibility is not None:
            feasibility[view.name] = None  # keeps node order; the reason is filled in below
            misses.append((view, evaluation))
    if feasibility is not None:
        for view, evaluation in misses:
            if best is None:
                blocker = nodes.reason(shape, view, evaluation, rules, budget)
                if blocker is not None:
                    blockers.append(blocker)
                feasibility[view.name] = _node_text(blocker)
            else:
                # The pod fits somewhere: the blockers' cluster-wide sentences are not needed,
                # only each node's own reason (the controller's UnsuitableNodes).
                text = nodes.reason_text(shape, view, evaluation, rules, budget)
                feasibility[view.name] = text or _node_text(None)
    if best is None:
        return None, blockers, optimal
    outcome = nodes.outcome(shape, best[2], best[3])
    decision = _Decision(best[2].name, outcome.chosen, outcome.primary, outcome.secondary)
    return decision, blockers, optimal


def _node_text(blocker: filters.Blocker | None) -> str:
    return blocker.node_text if blocker is not None else "the pod does not fit"


def _reasons(blockers: list[filters.Blocker], reasons: list[str], candidates: int) -> list[str]:
    out = list(reasons)
    out.extend(explain.sentences(blockers, candidates))
    return out or ["no node is a candidate for the pod"]


def _online(
    problem: Problem,
    state: _State,
    budget: solving.Budget,
    params: SolveParams,
    *,
    gangs_whole: bool = True,
) -> _Online:
    """The pods one by one; with `gangs_whole`, a gang is decided whole at its first pod's turn
    (`_gang`), else its pods go one by one like the others (a warm start)."""
    result = _Online([], [], {}, 0, 0, True)
    in_gang = gangs.of_pod(problem.gangs) if gangs_whole else {}
    done: set[str] = set()
    for pod in problem.pods:
        gang = in_gang.get(pod.key)
        if gang is not None:
            if gang.name not in done:
                done.add(gang.name)
                _gang(problem, gang, state, budget, params, result)
            continue
        inputs = _pod_input(pod, state)
        feasibility: dict[str, str | None] | None = {} if params.node_feasibility else None
        decision, blockers, reasons, optimal = _decide(
            inputs, state, budget, explain_it=params.explain, feasibility=feasibility
        )
        result.all_optimal = result.all_optimal and optimal
        if feasibility is not None:
            result.feasibility[pod.key] = feasibility
        if decision is None:
            candidates = len(_candidates(inputs, state)[0])
            text = _reasons(blockers, reasons, candidates) if params.explain else []
            result.unplaced.append(PodRejection(pod.key, tuple(text)))
            continue
        result.placements.append(state.place(pod, inputs.claims, decision))
        result.primary += decision.primary
        result.secondary += decision.secondary
    # The next solve starts from these groups (moving only the nodes that changed since).
    state.rules.cache.keep_groups(state.groups)
    return result


def _gang(
    problem: Problem,
    gang: Gang,
    state: _State,
    budget: solving.Budget,
    params: SolveParams,
    result: _Online,
) -> None:
    """Online mode's turn of a gang: its pods alone, on the nodes as the pods before left them,
    placed whole or not at all. Their online placement one by one stands when it is whole (each
    pod the best of its nodes; within one value of a required topology key); else, or for a
    preferred topology (an objective), one CP-SAT model of the gang decides (`_batch`)."""
    members = tuple(p for p in problem.pods if p.key in gang.pods)
    sub = dataclasses.replace(problem, nodes=tuple(state.nodes.values()), pods=members,
                              gangs=(gang,))  # fmt: skip
    cache = state.rules.cache
    views = validate.check(sub, cache)
    quiet = dataclasses.replace(params, explain=False, node_feasibility=False)
    alone = _online(sub, _State.initial(sub, views, cache), budget, quiet, gangs_whole=False)
    placements: Sequence[PodPlacement] = alone.placements
    unplaced: Sequence[PodRejection] = ()
    preferred = gang.topology_key is not None and not gang.required  # the model's objective
    if preferred or len(gangs.whole(alone.placements, sub.gangs, sub.nodes)) < len(members):
        solution = _batch(sub, views, params, time.perf_counter(), cache)
        placements, unplaced = solution.placements, solution.unplaced
        result.all_optimal = result.all_optimal and solution.status is Status.OPTIMAL
    by_key = {p.key: p for p in members}
    for placement in placements:
        pod = by_key[placement.pod]
        decision = _Decision(placement.node, _chosen_of(placement), 0, 0)
        result.placements.append(state.place(pod, _pod_input(pod, state).claims, decision))
    result.unplaced.extend(unplaced)


def _budget(problem: Problem, params: SolveParams, *, online: bool) -> solving.Budget:
    policy = problem.policy.solver
    if params.time_limit_s is not None:
        limit = params.time_limit_s
    else:
        limit = policy.onlineTimeLimitSeconds if online else policy.timeLimitSeconds
    workers = params.workers if params.workers is not None else policy.workers
    return solving.Budget(limit, 1 if online else workers, policy.randomSeed)


_DEFAULT_PARAMS = SolveParams()


def solve(problem: Problem, params: SolveParams = _DEFAULT_PARAMS) -> Solution:
    """Place the problem's pods. Pure and deterministic: same input, same output.

    Raises drasat.api.inputerrors.InputError when the problem contradicts itself (see validate).
    `params.cache`: the caller's memo tables (a long-running caller keeps one; see cache.py);
    None: a fresh one for this solve.
    """
    cache = fresh(params.cache)
    views = validate.check(problem, cache)
    started = time.perf_counter()
    online_budget = _budget(problem, params, online=True)
    if params.mode is Mode.online:
        state = _State.initial(problem, views, cache)
        outcome = _online(problem, state, online_budget, params)
        # Each decision is the best of its pod's candidate nodes given the earlier ones; that
        # proves nothing for the set (batch may place more), so no bound is claimed.
        return Solution(
            status=Status.PER_POD_OPTIMAL if outcome.all_optimal else Status.FEASIBLE,
            placements=tuple(outcome.placements),
            unplaced=tuple(outcome.unplaced),
            objective=float(-outcome.secondary),
            best_bound=None,
            gap=None,
            wall_time_s=time.perf_counter() - started,
            node_feasibility=outcome.feasibility,
        )
    return _batch(problem, views, params, started, cache)


def _batch(
    problem: Problem,
    views: dict[str, NodeView],
    params: SolveParams,
    started: float,
    cache: SolverCache,
) -> Solution:
    online_budget = _budget(problem, params, online=True)
    quiet = dataclasses.replace(params, explain=False, node_feasibility=False)
    warm_started = time.monotonic()
    warm = _online(
        problem, _State.initial(problem, views, cache), online_budget, quiet, gangs_whole=False
    )
    warm.placements = gangs.whole(warm.placements, problem.gangs, problem.nodes)
    #: What one pod's online decision cost: explaining a pod after the solve costs about three.
    warm_s = time.monotonic() - warm_started
    decision_s = warm_s / max(1, len(problem.pods))
    if params.deadline is not None and time.monotonic() + warm_s >= params.deadline:
        # Building the batch model costs at least what the warm start did: with no time left
        # for it, the warm start's placements are the answer (not proven optimal).
        return _warm_only(warm, started)
    state = _State.initial(problem, views, cache)
    in_gang = gangs.of_pod(problem.gangs)
    build_by = _build_deadline(params, decision_s * len(warm.unplaced))
    try:
        entries, inputs, feasibility, pruned = _batch_entries(
            problem, views, params, state, online_budget, in_gang, warm.placements, build_by
        )
        built = model.build(entries, state.rules, deadline=build_by)
    except model.OutOfTime:
        # The model would not be built in the time the deadline leaves for it (tens of
        # thousands of pods): the warm start's placements are the answer, as above.
        return _warm_only(warm, started)
    gangs.constrain(
        built.model, built.placed, built.at, built.secondary, problem.gangs, problem.nodes
    )
    hint = _hint(built, warm.placements)
    search = _search_budget(problem, params, started, decision_s * len(warm.unplaced))
    result = solving.solve(built, search, hint)
    chosen, (status, objective, bound, gap) = _batch_outcome(
        built, result, entries, warm.placements, pruned
    )
    placements = []
    for pod in problem.pods:
        if pod.key not in chosen:
            continue
        node, claims = chosen[pod.key]
        decision = _Decision(node, claims, 0, 0)
        placements.append(state.place(pod, inputs[pod.key].claims, decision))
    unplaced = []
    fits_alone = {entry.key: len(entry.nodes) for entry in entries}
    for pod in problem.pods:
        if pod.key in chosen:
            continue
        reasons: tuple[str, ...] = ()
        if params.explain and _past(params.deadline):
            reasons = (_unexplained(fits_alone[pod.key]),)
        elif params.explain:
            reasons = _explain_after(pod, state, _budget(problem, params, online=True))
        if pod.key in in_gang:
            reasons = gangs.reasons(in_gang[pod.key], pod.key, reasons, set(inputs))
        unplaced.append(PodRejection(pod.key, reasons))
    return Solution(
        status=status,
        placements=tuple(placements),
        unplaced=tuple(unplaced),
        objective=objective,
        best_bound=bound,
        gap=gap,
        wall_time_s=time.perf_counter() - started,
        node_feasibility=feasibility,
    )


def _warm_only(warm: _Online, started: float) -> Solution:
    """The warm start's placements as the solution, when the deadline leaves no time for the
    batch model: FEASIBLE, no bound, the pods it left out unexplained."""
    placed = {p.pod for p in warm.placements}
    unplaced = [
        PodRejection(
            r.pod,
            r.reasons
            or (
                "not placed by the first pass, and no time left for the batch model (the time "
                "limit ran out)",
            ),
        )
        for r in warm.unplaced
        if r.pod not in placed
    ]
    return Solution(
        status=Status.FEASIBLE,
        placements=tuple(warm.placements),
        unplaced=tuple(unplaced),
        objective=float(-warm.secondary),
        best_bound=None,
        gap=None,
        wall_time_s=time.perf_counter() - started,
        first_pass=True,
    )


def _batch_entries(
    problem: Problem,
    views: dict[str, NodeView],
    params: SolveParams,
    state: _State,
    online_budget: solving.Budget,
    in_gang: dict[str, Gang],
    warm_placements: Sequence[PodPlacement],
    deadline: float | None = None,
) -> tuple[list[PodEntry], dict[str, _PodInput], dict[str, dict[str, str | None]], bool]:
    """The batch model's pods, each with the nodes it may take (its best `keep`, the warm
    start's node always among them), their inputs, each node's feasibility as the pod alone
    would find it (when asked), and whether some pod lost nodes to that cut. Raises
    model.OutOfTime once `deadline` (`time.monotonic()`) has passed."""
    order = {name: i for i, name in enumerate(views)}
    entries: list[PodEntry] = []
    inputs: dict[str, _PodInput] = {}
    warm_node = {p.pod: p.node for p in warm_placements}
    keep = max(_MIN_NODES_PER_POD, _BATCH_NODE_BUDGET // max(1, len(problem.pods)))
    feasibility: dict[str, dict[str, str | None]] = {}
    #: Some pod kept only its best `keep` of the nodes it fits on: CP-SAT's proof and bound are
    #: then of that reduced model, not of the problem.
    pruned = False
    ranking: dict[tuple[object, ...], tuple[list[NodeView], set[str]]] = {}
    for pod in problem.pods:
        if deadline is not None and time.monotonic() >= deadline:
            raise model.OutOfTime
        pod_input = _pod_input(pod, state)
        inputs[pod.key] = pod_input
        candidates, _ = _candidates(pod_input, state)
        if params.node_feasibility:
            # Batch: each node as the pod alone would find it, before this solve's placements.
            feasibility[pod.key] = {}
            shape = nodes.shape(
                PodEntry(pod, pod_input.priority, pod_input.claims, ()), state.rules
            )
            _scan(shape, candidates, state, online_budget, feasibility[pod.key])
        fitting, dropped = _fitting_nodes(
            pod_input,
            candidates,
            state,
            online_budget,
            len(candidates) if pod.key in in_gang else keep,  # a gang needs all its domains
            warm_node.get(pod.key),
            order,
            ranking,
        )
        pruned = pruned or dropped
        entries.append(PodEntry(pod, pod_input.priority, pod_input.claims, fitting))
    return entries, inputs, feasibility, pruned


def _build_deadline(params: SolveParams, explaining_warm_s: float) -> float | None:
    """By when the batch model must be built (`time.monotonic()`), under the caller's deadline:
    early enough for the shortest search and what `_search_budget` keeps back after it (the
    explanations and a tenth for the caller). None: no deadline."""
    if params.deadline is None:
        return None
    remaining = params.deadline - time.monotonic()
    explaining = 3 * explaining_warm_s if params.explain else 0.0
    return time.monotonic() + 0.9 * remaining - explaining - _MIN_SEARCH_S


def _search_budget(
    problem: Problem, params: SolveParams, started: float, explaining_warm_s: float
) -> solving.Budget:
    """CP-SAT's share of the batch's time limit: what building left of it, and, under the
    caller's deadline, early enough for the explanations and the caller's own work after."""
    budget = _budget(problem, params, online=False)
    left = max(0.1 * budget.time_limit_s, budget.time_limit_s - (time.perf_counter() - started))
    if params.deadline is not None:
        # The caller's whole run ends at the deadline: CP-SAT stops early enough for the
        # explanations (about three decisions for each pod the warm start left out) and the
        # caller's own work after the solve (a tenth of what is left).
        remaining = params.deadline - time.monotonic()
        explaining = 3 * explaining_warm_s if params.explain else 0.0
        left = min(left, max(_MIN_SEARCH_S, 0.9 * remaining - explaining))
    return dataclasses.replace(budget, time_limit_s=left)


def _batch_outcome(
    built: model.Built,
    result: solving.Result,
    entries: list[PodEntry],
    warm_placements: Sequence[PodPlacement],
    pruned: bool,
) -> tuple[
    dict[str, tuple[str, dict[str, list[Chosen]]]],
    tuple[Status, float, float | None, float | None],
]:
    """Each placed pod's node and devices, and the status, objective, bound and gap to report:
    CP-SAT's solution, or the warm start where CP-SAT found none better."""
    warm_primary = _primary_of(built, warm_placements)
    if not result.has_solution or result.primary < warm_primary:
        chosen = {p.pod: (p.node, _chosen_of(p)) for p in warm_placements}
        # Objective, bound and gap on the primary level: CP-SAT's own bound is of the combined
        # objective (primary x scale - secondary), which the online solution is not scored on.
        primary_bound = max(warm_primary, _primary_max(built, None if pruned else result))
        status, objective = Status.FEASIBLE, float(warm_primary)
        bound: float | None = float(primary_bound)
        gap: float | None = (primary_bound - warm_primary) / max(1.0, float(warm_primary))
    elif pruned:
        chosen = extract.placements(built, result, entries)
        status, objective, bound, gap = Status.FEASIBLE, result.objective, None, None
    else:
        chosen = extract.placements(built, result, entries)
        status, objective, bound, gap = (
            result.status,
            result.objective,
            result.best_bound,
            result.gap,
        )
    return chosen, (status, objective, bound, gap)


def _primary_max(built: model.Built, result: solving.Result | None) -> int:
    """An upper bound on the primary level: CP-SAT's (`result`: of a model that held every node
    each pod fits on), or every pod placed and every optional claim given devices (on one node:
    a claim is allocated once)."""
    if result is not None and result.primary_bound is not None:
        return result.primary_bound
    claims = {uid for uid, _ in built.got}
    return sum(built.pod_weight.values()) + built.got_weight * len(claims)


#: CP-SAT's search time when a deadline leaves less: enough to read back the warm start.
_MIN_SEARCH_S = 0.05

#: A batch model holds at most about this many (pod, node) pairs: each pod keeps its best nodes
#: (by its per-node optimum alone), at least _MIN_NODES_PER_POD of them, and its online node.
_BATCH_NODE_BUDGET = 4000
_MIN_NODES_PER_POD = 8


def _fitting_nodes(
    pod: _PodInput,
    views: Sequence[NodeView],
    state: _State,
    budget: solving.Budget,
    keep: int,
    warm: str | None,
    node_order: dict[str, int],
    ranking: dict[tuple[object, ...], tuple[list[NodeView], set[str]]],
) -> tuple[tuple[NodeView, ...], bool]:
    """Nodes where the pod fits alone (no others can make room), best first, at most `keep`;
    and whether some were left out."""
    shape = nodes.shape(PodEntry(pod.request, pod.priority, pod.claims, ()), state.rules)
    # Pods of one shape with the same candidates rank the nodes alike (every pod is ranked on
    # the state before the solve): ranked once, not once per pod (the pods of a template).
    memo_key = (shape.key_id, pod.request.candidate_nodes, pod.pinned_to, len(views), keep)
    found = ranking.get(memo_key)
    if found is None:
        ranked = []
        for order, view in enumerate(views):
            evaluation = nodes.evaluate(shape, view, state.rules, budget)
            if evaluation.picks is not None:
                ranked.append((-evaluation.primary, evaluation.secondary, order, view))
        ranked.sort(key=lambda r: r[:3])
        found = ranking[memo_key] = ([r[3] for r in ranked], {r[3].name for r in ranked[keep:]})
    fits, beyond = found
    chosen = fits[:keep]
    if warm in beyond:
        chosen = [*chosen, next(v for v in fits[keep:] if v.name == warm)]
    return tuple(sorted(chosen, key=lambda v: node_order[v.name])), len(chosen) < len(fits)


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _unexplained(fitting: int) -> str:
    """Why a pod is not placed when the deadline leaves no time to ask each node: what the
    batch model knew of it."""
    if not fitting:
        return "fits on no node, even alone (not explained node by node: the time limit ran out)"
    return (
        "fits on some node alone, not beside the pods placed in this solve (not explained "
        "node by node: the time limit ran out)"
    )


def _explain_after(pod: PodRequest, state: _State, budget: solving.Budget) -> tuple[str, ...]:
    """Why the pod does not fit on what the batch left free."""
    inputs = _pod_input(pod, state)
    decision, blockers, reasons, _ = _decide(
        inputs, state, budget, explain_it=True, feasibility=None
    )
    if decision is not None:
        return (
            f"fits on node {decision.node} alone but not alongside the pods placed in this "
            "solve within its time limit",
        )
    return tuple(_reasons(blockers, reasons, len(_candidates(inputs, state)[0])))


def _chosen_of(placement: PodPlacement) -> dict[str, list[Chosen]]:
    out: dict[str, list[Chosen]] = {uid: [Chosen(k) for k in keys]
                                    for uid, keys in placement.devices.items()}  # fmt: skip
    for uid, entry in placement.allocations.items():
        if entry.mig:
            out[uid] = [Chosen(m.parent, m.profile, m.start, m.size) for m in entry.migs]
        else:
            out[uid] = [Chosen(uuid) for uuid in entry.gpus]
    return out


def _hint(built: model.Built, placements: Sequence[PodPlacement]) -> dict[int, int]:
    """The online solution as a CP-SAT hint for the batch model (every decision variable)."""
    hint: dict[int, int] = {v.index: 0 for v in built.at.values()}
    hint.update({v.index: 0 for v in built.claim_at.values()})
    hint.update({v.index: 0 for v in built.got.values()})
    for devices in built.devices.values():
        hint.update({d.var.index: 0 for d in devices})
    for units in built.units.values():
        hint.update({u.var.index: 0 for u in units})
    for placement in placements:
        at = built.at.get((placement.pod, placement.node))
        if at is None:
            continue
        hint[at.index] = 1
        for uid, chosen in _chosen_of(placement).items():
            here = built.claim_at.get((uid, placement.node))
            if here is not None:
                hint[here.index] = 1
            got = built.got.get((uid, placement.node))
            if got is not None and chosen:
                hint[got.index] = 1
            wanted = set(chosen)
            for d in built.devices.get(uid, []):
                if d.gpu.node == placement.node and extract.chosen_of(d) in wanted:
                    hint[d.var.index] = 1
            for u in built.units.get(uid, []):
                if u.node == placement.node and Chosen(u.key) in wanted:
                    hint[u.var.index] = 1
    # A pod already counted by a shared claim's first pod still needs its own `at`.
    return hint


def _primary_of(built: model.Built, placements: Sequence[PodPlacement]) -> int:
    """The batch model's primary objective of the online solution."""
    total = sum(built.pod_weight.get(p.pod, 0) for p in placements)
    for placement in placements:
        for uid, entry in placement.allocations.items():
            if (uid, placement.node) in built.got and entry.has_devices:
                total += built.got_weight
    return total
