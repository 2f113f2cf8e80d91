"""How far online placement is from the best possible on the openb replay, at 100% arrival.

    python -m bench.openb_bound --traces DIR [--pod-list default ...] [--seed 42]
                                [--bound-seconds 30] [--batch-seconds 180] [--out DIR]

For the pods that have arrived when the arrived GPU demand reaches 100% of the cluster's GPUs
(the same seeded shuffle and tuning as `bench.openb`, the last record whose arrival rounds to
100%), it computes:

- **online**: FGD (the paper's policy, `bench.openb_sim`) replayed on those pods, as `bench.openb`
  does: its allocation at 100% (the replay's metric: the mean over the records whose arrival
  rounds to 100%) and at the end of those pods (the state the other two columns compare with);
- **bound**: an upper bound on the GPU allocation that any placement of those pods (online or
  offline, any subset of them) can reach, from a relaxation solved with CP-SAT (`bound`);
- **batch**: a feasible placement with all those pods known, found by drasat's solver in batch
  mode (`drasat.solver.solve(..., SolveParams(mode=Mode.batch))`) re-solving groups of nodes
  together with pods still unplaced, starting from FGD's placement (`batch`), checked pod by pod
  against the replay's capacity model (`check`).

Writes bound.csv and bound.md to --out and prints the table and where it wrote them.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import math
import pathlib
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from bench import openb, openb_sim, openb_trace, replay
from bench.openb_trace import MILLI, IntArray, Nodes, Pods

Assignment = list[tuple[int, list[int]] | None]  # per pod: (node, GPU indices) or unplaced


# -- the pods arrived at a percent -------------------------------------------------------------


def arrived(pods: Pods, total_gpus: int, percent: int = openb.AT) -> int:
    """How many pods (of `pods`, in arrival order) have arrived at the last record whose arrival
    rounds to at most `percent` (as `replay.by_arrival` rounds it): on the openb cluster, the
    last of the records the replay's metric at `percent` averages over. Pure."""
    arrival = np.round(np.cumsum(pods.total_milli) / total_gpus / 10)
    return int(np.searchsorted(arrival, percent, side="right"))


def value_milli(pods: Pods) -> IntArray:
    """GPU milli each pod holds once placed, as the replay counts it (a share is on one GPU)."""
    whole = pods.milli >= MILLI
    out: IntArray = np.where(whole, pods.milli * pods.num_gpu, pods.milli)
    return np.where(pods.num_gpu > 0, out, 0)


# -- the checker -------------------------------------------------------------------------------


def check(nodes: Nodes, pods: Pods, where: Assignment) -> int:
    """GPU milli allocated by a complete placement, each pod checked against the replay's
    capacity model (`openb_sim.Cluster`): GPU model allowed by its gpu_spec, CPU and memory
    left on the node, whole GPUs fully free and as many as it asks, a share on one GPU with
    enough left. Raises AssertionError naming the first pod that breaks one."""
    target = openb_trace.target_workload(pods)
    cluster = openb_sim.Cluster(nodes, target)
    specs = tuple(sorted(set(pods.spec)))
    allowed = openb_trace.allowed_models(specs, nodes.models)
    for p, placed in enumerate(where):
        if placed is None:
            continue
        node, gpus = placed
        n, m = int(pods.num_gpu[p]), int(pods.milli[p])
        assert cluster.cpu_left[node] >= pods.cpu_milli[p], f"pod {p}: CPU on node {node}"
        assert cluster.mem_left[node] >= pods.memory_mib[p], f"pod {p}: memory on node {node}"
        if n == 0 or m == 0:
            assert not gpus, f"pod {p}: CPU-only pod given GPUs"
        else:
            assert allowed[specs.index(pods.spec[p]), nodes.model[node]], f"pod {p}: GPU model"
            assert len(set(gpus)) == len(gpus) and all(0 <= g < nodes.gpus[node] for g in gpus), (
                f"pod {p}: GPU indices {gpus} on node {node}"
            )
            if m >= MILLI:
                assert len(gpus) == n, f"pod {p}: {len(gpus)} GPUs for {n}"
                assert all(cluster.gpu_left[node, g] == MILLI for g in gpus), f"pod {p}: busy GPU"
            else:
                assert len(gpus) == 1, f"pod {p}: a share on {len(gpus)} GPUs"
                assert cluster.gpu_left[node, gpus[0]] >= m, f"pod {p}: share does not fit"
        cluster.place(pods, p, node, gpus)
    return cluster.used_milli


# -- the bound ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeType:
    """Nodes alike in every way the replay looks at."""

    model: int
    gpus: int
    cpu_milli: int
    memory_mib: int
    members: tuple[int, ...]


def node_types(nodes: Nodes) -> list[NodeType]:
    groups: dict[tuple[int, int, int, int], list[int]] = {}
    for i in range(nodes.count):
        key = (
            int(nodes.model[i]),
            int(nodes.gpus[i]),
            int(nodes.cpu_milli[i]),
            int(nodes.memory_mib[i]),
        )
        groups.setdefault(key, []).append(i)
    return [NodeType(*key, members=tuple(m)) for key, m in sorted(groups.items())]


@dataclass(frozen=True)
class PodClass:
    """GPU pods alike in every way the replay looks at, and how many there are."""

    cpu_milli: int
    memory_mib: int
    milli: int
    num_gpu: int
    spec: str
    count: int

    @property
    def whole(self) -> bool:
        return self.milli >= MILLI

    @property
    def value(self) -> int:
        return self.milli * self.num_gpu if self.whole else self.milli


def pod_classes(pods: Pods) -> list[PodClass]:
    """Classes of the pods that hold GPU share once placed (CPU-only pods add nothing)."""
    counts: dict[tuple[int, int, int, int, str], int] = {}
    for p in range(pods.count):
        n, m = int(pods.num_gpu[p]), int(pods.milli[p])
        if n > 0 and m > 0:
            key = (int(pods.cpu_milli[p]), int(pods.memory_mib[p]), m, n, pods.spec[p])
            counts[key] = counts.get(key, 0) + 1
    return [PodClass(*key, count=c) for key, c in sorted(counts.items())]


def eligible(c: PodClass, t: NodeType, models: tuple[str, ...]) -> bool:
    """May a pod of class c go to an empty node of type t (the replay's `feasible`)."""
    allowed = openb_trace.allowed_models((c.spec,), models)[0, t.model]
    gpus_ok = t.gpus >= (c.num_gpu if c.whole else 1)
    return bool(allowed) and gpus_ok and c.cpu_milli <= t.cpu_milli and c.memory_mib <= t.memory_mib


#: The dual feasible functions used (k of Fekete and Schepers' u^(k)); 0 is the identity.
DFF_KS = (0, 1, 2, 3, 4, 5, 6, 9)


def dff(size: int, capacity: int, k: int) -> tuple[int, int]:
    """(weight of an item of `size`, weight of a full bin) under the dual feasible function
    u^(k) of Fekete and Schepers, scaled by k(k+1) to integers; k = 0: (size, capacity).

    u^(k)(x) = x when (k+1)x is an integer, floor((k+1)x)/k otherwise, for x = size/capacity in
    [0, 1]. It is dual feasible: items of one bin (sizes summing to at most 1) have u-values
    summing to at most 1 = u^(k)(1) (Fekete and Schepers, Math. Programming 91, 2001, Thm. 2).
    Pure.
    """
    if k == 0:
        return size, capacity
    scaled = (k + 1) * size
    if scaled % capacity == 0:
        return k * (scaled // capacity), k * (k + 1)
    return (k + 1) * (scaled // capacity), k * (k + 1)


@dataclass(frozen=True)
class Bound:
    bound_milli: int  # no placement allocates more GPU milli
    relaxed_milli: int  # the best solution of the relaxation found (>= bound means proven)
    status: str
    wall_s: float
    classes: int
    types: int
    demand_milli: int
    capacity_milli: int


def bound(
    nodes: Nodes, pods: Pods, *, time_limit_s: float = 30.0, workers: int = 1, seed: int = 0
) -> Bound:
    """An upper bound on the GPU milli any placement of `pods` on `nodes` allocates.

    The relaxation (an integer program, solved by CP-SAT; its best proven bound is reported,
    floored to an integer since every solution's value is one):

    - x[c, t] >= 0 integer: how many pods of class c (`pod_classes`: equal CPU, memory, GPU
      share or count, gpu_spec) go to nodes of type t (`node_types`: equal GPU model, GPU count,
      CPU, memory), only where one such pod fits an empty node of that type (`eligible`);
      sum over t of x[c, t] <= the class's count;
    - per node type, for each dual feasible function f of `dff` (the identity among them):
      CPU: sum f(cpu_c / CPU_t) x[c, t] <= N_t f(1); the same for memory, and for each node's
      GPU share (a pod's whole demand against 1000 x the node's GPUs); and per GPU: a whole-GPU
      pod fills `num_gpu` GPUs (f(1) each), a share pod takes its share of one GPU:
      sum f(share_c / 1000) x[c, t] + sum num_gpu_c f(1) x[c, t] <= N_t G_t f(1);
    - maximize the GPU milli allocated: sum over classes of share (or 1000 x num_gpu) x[c, t].

    Why it is a valid upper bound: take any placement the replay accepts (any subset of the
    pods, each on one node, its CPU and memory within the node's, whole GPUs exclusive, shares of
    one GPU summing to at most 1000). Count x[c, t] = pods of class c it puts on nodes of type t:
    each such pod fits an empty node of the type, so x is 0 where the model has no variable; the
    counts respect the class sizes. On each node the CPU of its pods sums to at most its CPU, so
    by dual feasibility their f-values sum to at most f(1); summing over the N_t nodes of the
    type gives the type's constraint — the same for memory and a node's GPU share; on each GPU
    either one whole-GPU pod (f(1)) or shares summing to at most 1000 (f-values at most f(1)),
    and summing over the type's N_t G_t GPUs gives the per-GPU constraint. So every placement
    gives a feasible x of equal value (CPU-only pods add nothing; dropping them only relaxes),
    the relaxation's optimum is at least the best placement's value, and CP-SAT's proven bound
    is at least that optimum. Not modelled (hence a relaxation): which node of a type a pod
    takes, and which GPU of a node.
    """
    started = time.perf_counter()
    types, classes = node_types(nodes), pod_classes(pods)
    model = cp_model.CpModel()
    x: dict[tuple[int, int], cp_model.IntVar] = {}
    for ci, c in enumerate(classes):
        for ti, t in enumerate(types):
            if eligible(c, t, nodes.models):
                x[ci, ti] = model.new_int_var(0, c.count, f"x_{ci}_{ti}")
        row = [x[ci, ti] for ti in range(len(types)) if (ci, ti) in x]
        if row:
            model.add(sum(row) <= c.count)
    for ti, t in enumerate(types):
        here = [(classes[ci], v) for (ci, tj), v in x.items() if tj == ti]
        if not here:
            continue
        n = len(t.members)
        for k in DFF_KS:
            for sizes, capacity in (
                ([c.cpu_milli for c, _ in here], t.cpu_milli),
                ([c.memory_mib for c, _ in here], t.memory_mib),
                ([c.value for c, _ in here], MILLI * t.gpus),
            ):
                weights = [
                    (dff(size, capacity, k)[0], v) for size, (_, v) in zip(sizes, here, strict=True)
                ]
                full = dff(capacity, capacity, k)[1]
                if any(w for w, _ in weights):
                    model.add(sum(w * v for w, v in weights) <= n * full)
            full = dff(MILLI, MILLI, k)[1]
            per_gpu = [
                (c.num_gpu * full if c.whole else dff(c.milli, MILLI, k)[0], v) for c, v in here
            ]
            model.add(sum(w * v for w, v in per_gpu) <= n * t.gpus * full)
    model.maximize(sum(classes[ci].value * v for (ci, _), v in x.items()))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    solver.solve(model)
    status = solver.status_name()
    demand = int(value_milli(pods).sum())
    capacity = MILLI * nodes.total_gpus
    if status in ("OPTIMAL", "FEASIBLE"):
        best, relaxed = math.floor(solver.best_objective_bound + 1e-6), int(solver.objective_value)
    else:  # nothing proven: the trivial bound
        best, relaxed = min(demand, capacity), 0
    return Bound(
        bound_milli=min(best, demand, capacity),
        relaxed_milli=relaxed,
        status=status,
        wall_s=time.perf_counter() - started,
        classes=len(classes),
        types=len(types),
        demand_milli=demand,
        capacity_milli=capacity,
    )


# -- online: a replay policy's own placement ---------------------------------------------------


class Recording(openb_sim.Policy):
    """Wraps a replay policy and records where it put each pod."""

    def __init__(self, inner: openb_sim.Policy, count: int) -> None:
        super().__init__()
        self.inner, self.name = inner, inner.name
        self.where: Assignment = [None] * count

    def choose(
        self,
        cluster: openb_sim.Cluster,
        pods: Pods,
        p: int,
        feasible: IntArray,
        rng: np.random.Generator,
    ) -> tuple[int, list[int]] | None:
        choice = self.inner.choose(cluster, pods, p, feasible, rng)
        if choice is not None:
            self.where[p] = (choice[0], list(choice[1]))
        return choice

    def unplaceable(self, cluster: openb_sim.Cluster, pods: Pods, p: int) -> None:
        self.inner.unplaceable(cluster, pods, p)


@dataclass(frozen=True)
class Online:
    name: str
    alloc_at: float  # the replay's metric at the percent (% of cluster GPUs)
    end_milli: int  # allocated after the last arrived pod
    where: Assignment
    wall_s: float


def online(
    nodes: Nodes,
    all_pods: Pods,
    arrived_pods: Pods,
    policy: openb_sim.Policy,
    rng: np.random.Generator,
    percent: int = openb.AT,
) -> Online:
    """Replay the arrived pods (the first records of `bench.openb`'s replay, same generator)."""
    recording = Recording(policy, arrived_pods.count)
    target = openb_trace.target_workload(all_pods)
    result = replay.replay(nodes, arrived_pods, recording, target, rng)
    alloc = replay.by_arrival(
        result.arrived_milli, result.used_milli.astype(np.float64), result.total_gpus
    )
    return Online(
        name=policy.name,
        alloc_at=float(alloc[percent]),
        end_milli=int(result.used_milli[-1]),
        where=recording.where,
        wall_s=result.wall_s,
    )


# -- batch: drasat's batch mode on groups of nodes with the pods still unplaced ----------------


@dataclass(frozen=True)
class Batch:
    milli: int  # checked by `check`
    where: Assignment
    start_milli: int
    solves: int
    improved: int
    passes: float  # groups tried / groups in one pass
    wall_s: float
    solver_s: float


def batch(
    nodes: Nodes,
    pods: Pods,
    start: Assignment,
    *,
    seconds: float,
    solve_seconds: float = 2.0,
    group_gpus: int = 32,
    candidates: int = 24,
    rng: np.random.Generator,
) -> Batch:
    """Improve a placement of all `pods` with drasat's solver in batch mode.

    Large-neighbourhood search: nodes are split into groups of one node type (about
    `group_gpus` GPUs each; a fresh random split every pass). For a group, the pods placed on
    its nodes and up to `candidates` unplaced GPU pods that fit the type (the largest first, a
    few of each class) form one batch problem on the group's nodes, emptied; the solver's
    priority of a pod is its GPU share in tenths of a GPU, so its primary objective (placed pods
    weighted by 1 + priority) is about the GPU share placed. The new placement of the group
    replaces the old one only when it holds more GPU share (pods it leaves out become
    unplaced). Until `seconds` have passed or a whole pass improves nothing. Every placement is
    checked by `check` at the end. CP-SAT runs under a wall-time limit, so the result depends
    on the machine and its load (not only on the seed).
    """
    from bench import drasat_policy
    from drasat.api.policy import AllocationPolicySpec
    from drasat.solver import Mode, Problem, SolveParams, SolverCache, solve

    started = time.perf_counter()
    where: Assignment = list(start)
    value = value_milli(pods)
    states = drasat_policy.node_states(nodes)
    index = {name: i for i, name in enumerate(nodes.names)}
    requests = [drasat_policy.pod_request(pods, p, f"{p:06d}") for p in range(pods.count)]
    requests = [
        dataclasses.replace(r, priority=int(value[p]) // 100) for p, r in enumerate(requests)
    ]
    key_of = {r.key: p for p, r in enumerate(requests)}
    types = node_types(nodes)
    classes = {
        p: (
            int(pods.cpu_milli[p]),
            int(pods.memory_mib[p]),
            int(pods.milli[p]),
            int(pods.num_gpu[p]),
            pods.spec[p],
        )
        for p in range(pods.count)
    }
    fits = {
        ti: np.array(
            [
                value[p] > 0 and eligible(PodClass(*classes[p], count=1), t, nodes.models)
                for p in range(pods.count)
            ],
            dtype=np.bool_,
        )
        for ti, t in enumerate(types)
    }
    policy = AllocationPolicySpec()
    cache = SolverCache()  # one for the whole search: its groups share nodes in equal states
    start_milli = sum(int(value[p]) for p, w in enumerate(where) if w is not None)
    solves = improved = tried = 0
    solver_s = 0.0
    groups_per_pass = 0
    while time.perf_counter() - started < seconds:
        groups: list[tuple[int, list[int]]] = []
        for ti, t in enumerate(types):
            members = [int(m) for m in rng.permutation(np.array(t.members))]
            size = max(1, group_gpus // max(1, t.gpus))
            groups += [(ti, members[i : i + size]) for i in range(0, len(members), size)]
        groups_per_pass = len(groups)
        free_milli = _free_milli(nodes, pods, where)
        # The groups with the most free GPU share first (only free share can take more pods).
        ranked = sorted(groups, key=lambda g: -int(free_milli[g[1]].sum()))
        improved_before = improved
        for ti, group in ranked:
            if time.perf_counter() - started >= seconds:
                break
            tried += 1
            in_group = set(group)
            residents = [p for p, w in enumerate(where) if w is not None and w[0] in in_group]
            free = [p for p, w in enumerate(where) if w is None and fits[ti][p]]
            free.sort(key=lambda p: (-int(value[p]), p))
            picked: list[int] = []
            per_class: dict[tuple[int, int, int, int, str], int] = {}
            for p in free:
                if len(picked) >= candidates:
                    break
                if per_class.get(classes[p], 0) < 3:
                    per_class[classes[p]] = per_class.get(classes[p], 0) + 1
                    picked.append(p)
            if not picked:
                continue
            problem = Problem(
                nodes=tuple(states[i] for i in group),
                pods=tuple(requests[p] for p in residents + picked),
                policy=policy,
            )
            t0 = time.perf_counter()
            solution = solve(
                problem,
                SolveParams(
                    mode=Mode.batch,
                    time_limit_s=solve_seconds,
                    workers=1,
                    explain=False,
                    cache=cache,
                ),
            )
            solver_s += time.perf_counter() - t0
            solves += 1
            new: dict[int, tuple[int, list[int]]] = {}
            for placement in solution.placements:
                gpus: list[int] = []
                for entry in placement.allocations.values():
                    if not entry.mig:
                        gpus += [int(uuid.rsplit("-", 1)[1]) for uuid in entry.gpus]
                new[key_of[placement.pod]] = (index[placement.node], sorted(gpus))
            before = sum(int(value[p]) for p in residents)
            after = sum(int(value[p]) for p in new)
            if after > before:
                improved += 1
                for p in residents + picked:
                    where[p] = new.get(p)
        if improved == improved_before:
            break  # a whole pass found nothing better (or nothing left to place)
    milli = check(nodes, pods, where)
    return Batch(
        milli=milli,
        where=where,
        start_milli=start_milli,
        solves=solves,
        improved=improved,
        passes=tried / max(1, groups_per_pass),
        wall_s=time.perf_counter() - started,
        solver_s=solver_s,
    )


@dataclass(frozen=True)
class WholeBatch:
    """drasat's batch mode on the whole problem in one call."""

    milli: int  # checked by `check`
    status: str
    objective: float
    #: None: the solver claims no bound (its model kept only each pod's best nodes).
    best_bound: float | None
    gap: float | None
    wall_s: float

    @property
    def bound_text(self) -> str:
        from drasat.solver.problem import bound_text

        return bound_text(self.best_bound, self.gap)


def whole_batch(nodes: Nodes, pods: Pods, *, seconds: float) -> WholeBatch:
    """`solve(Problem(all nodes, all pods), SolveParams(mode=Mode.batch))`, GPU share as
    priority (as `batch`), the time limit given; its placement checked by `check`."""
    from bench import drasat_policy
    from drasat.api.policy import AllocationPolicySpec
    from drasat.solver import Mode, Problem, SolveParams, solve

    started = time.perf_counter()
    value = value_milli(pods)
    requests = tuple(
        dataclasses.replace(
            drasat_policy.pod_request(pods, p, f"{p:06d}"), priority=int(value[p]) // 100
        )
        for p in range(pods.count)
    )
    key_of = {r.key: p for p, r in enumerate(requests)}
    index = {name: i for i, name in enumerate(nodes.names)}
    problem = Problem(
        nodes=tuple(drasat_policy.node_states(nodes)),
        pods=requests,
        policy=AllocationPolicySpec(),
    )
    solution = solve(
        problem, SolveParams(mode=Mode.batch, time_limit_s=seconds, workers=1, explain=False)
    )
    where: Assignment = [None] * pods.count
    for placement in solution.placements:
        gpus: list[int] = []
        for entry in placement.allocations.values():
            if not entry.mig:
                gpus += [int(uuid.rsplit("-", 1)[1]) for uuid in entry.gpus]
        where[key_of[placement.pod]] = (index[placement.node], sorted(gpus))
    return WholeBatch(
        milli=check(nodes, pods, where),
        status=str(solution.status),
        objective=solution.objective,
        best_bound=solution.best_bound,
        gap=solution.gap,
        wall_s=time.perf_counter() - started,
    )


def _free_milli(nodes: Nodes, pods: Pods, where: Assignment) -> IntArray:
    """Free GPU share of every node under a placement."""
    used = np.zeros(nodes.count, dtype=np.int64)
    value = value_milli(pods)
    for p, w in enumerate(where):
        if w is not None:
            used[w[0]] += value[p]
    out: IntArray = MILLI * nodes.gpus - used
    return out


# -- the command -------------------------------------------------------------------------------


def percent_of(milli: int, nodes: Nodes) -> float:
    return round(milli / nodes.total_gpus / 10, 2)


def run_list(
    nodes: Nodes, pods: Pods, pod_list: str, args: argparse.Namespace
) -> dict[str, str | float | int]:
    """One pod list: online policies, the bound, the batch result; a row of the table."""
    rng = np.random.default_rng(args.seed)
    order = openb_trace.arrival_order(
        pods, nodes.total_gpus * MILLI, ratio=args.tune_ratio, rng=rng
    )
    ordered = pods.take(order)
    count = arrived(ordered, nodes.total_gpus)
    if args.max_pods:
        count = min(count, args.max_pods)
    mine = ordered.take(np.arange(count, dtype=np.int64))
    row: dict[str, str | float | int] = {"pod_list": pod_list, "seed": args.seed, "pods": count}
    say = print if not args.quiet else (lambda *a, **k: None)
    runs: list[Online] = []
    factories = openb.policy_factories(args.online.split(","), random_ties=False)
    for name, make in factories.items():
        # Each online replay gets the generator as bench.openb's replay of this seed has it.
        replay_rng = np.random.default_rng(args.seed)
        openb_trace.arrival_order(
            pods, nodes.total_gpus * MILLI, ratio=args.tune_ratio, rng=replay_rng
        )
        run = online(nodes, pods, mine, make(), replay_rng)
        checked = check(nodes, mine, run.where)
        assert checked == run.end_milli, f"{name}: replay and checker disagree"
        runs.append(run)
        row[f"{name}_at_100"] = run.alloc_at
        row[f"{name}_end"] = percent_of(run.end_milli, nodes)
        say(f"{pod_list}: {name} online {run.alloc_at:.2f} at 100% ({run.wall_s:.0f} s)")
    relaxed = bound(nodes, mine, time_limit_s=args.bound_seconds, seed=args.seed)
    say(
        f"{pod_list}: bound {percent_of(relaxed.bound_milli, nodes):.2f} ({relaxed.status}, "
        f"{relaxed.classes} pod classes x {relaxed.types} node types, {relaxed.wall_s:.0f} s)"
    )
    best = max(runs, key=lambda r: r.end_milli)
    improved = batch(
        nodes,
        mine,
        best.where,
        seconds=args.batch_seconds,
        solve_seconds=args.solve_seconds,
        group_gpus=args.group_gpus,
        candidates=args.candidates,
        rng=np.random.default_rng(args.seed),
    )
    say(
        f"{pod_list}: batch {percent_of(improved.milli, nodes):.2f} from {best.name}'s "
        f"{percent_of(improved.start_milli, nodes):.2f} ({improved.solves} solves, "
        f"{improved.improved} improved, {improved.passes:.2f} passes, {improved.wall_s:.0f} s)"
    )
    if args.whole_batch_seconds:
        whole = whole_batch(nodes, mine, seconds=args.whole_batch_seconds)
        row["whole_batch"] = percent_of(whole.milli, nodes)
        row["whole_batch_status"] = f"{whole.status} {whole.bound_text}"
        row["whole_batch_s"] = round(whole.wall_s)
        say(
            f"{pod_list}: drasat batch mode on the whole problem: "
            f"{percent_of(whole.milli, nodes):.2f} ({whole.status}, objective "
            f"{whole.objective:g}, {whole.bound_text}, "
            f"{whole.wall_s:.0f} s)"
        )
    b, bat = percent_of(relaxed.bound_milli, nodes), percent_of(improved.milli, nodes)
    row.update(
        {
            "arrived_demand": percent_of(relaxed.demand_milli, nodes),
            "batch_from": best.name,
            "batch": bat,
            "batch_pods_placed": sum(1 for w in improved.where if w is not None),
            "online_pods_placed": sum(1 for w in best.where if w is not None),
            "bound": b,
            "bound_status": relaxed.status,
            "gap_online_end": round(b - percent_of(best.end_milli, nodes), 2),
            "gap_batch": round(b - bat, 2),
            "batch_solves": improved.solves,
            "batch_improved": improved.improved,
            "batch_passes": round(improved.passes, 2),
            "batch_s": round(improved.wall_s),
            "bound_s": round(relaxed.wall_s),
        }
    )
    return row


def write_table(rows: Sequence[dict[str, str | float | int]], out: pathlib.Path) -> None:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with (out / "bound.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in columns) + " |" for r in rows]
    (out / "bound.md").write_text("\n".join(lines) + "\n")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.openb_bound", description=__doc__)
    parser.add_argument("--traces", type=pathlib.Path, required=True, help="the openb CSVs")
    parser.add_argument(
        "--pod-list",
        nargs="+",
        default=["default"],
        help=f"names or 'all': {', '.join(openb.POD_LISTS)}",
    )
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--tune-ratio", type=float, default=1.3, help="as bench.openb")
    parser.add_argument(
        "--online", default="FGD", help="replay policies to compare (bench.openb's names)"
    )
    parser.add_argument("--bound-seconds", type=float, default=30.0, help="CP-SAT's limit")
    parser.add_argument(
        "--batch-seconds", type=float, default=180.0, help="time for the batch search per list"
    )
    parser.add_argument("--solve-seconds", type=float, default=1.0, help="per batch solve")
    parser.add_argument("--group-gpus", type=int, default=16, help="GPUs per node group")
    parser.add_argument("--candidates", type=int, default=16, help="unplaced pods per group")
    parser.add_argument(
        "--whole-batch-seconds",
        type=float,
        default=0.0,
        help="also try drasat's batch mode on the whole problem in one call with this limit",
    )
    parser.add_argument("--max-pods", type=int, default=0, help="fewer pods (smoke)")
    parser.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path("bench/results/openb_bound")
    )
    parser.add_argument("--quiet", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    lists = list(openb.POD_LISTS) if args.pod_list == ["all"] else args.pod_list
    nodes = openb_trace.read_nodes(args.traces / openb.NODE_LIST)
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, str | float | int]] = []
    for pod_list in lists:
        pods = openb_trace.read_pods(args.traces / f"openb_pod_list_{pod_list}.csv")
        rows.append(run_list(nodes, pods, pod_list, args))
        write_table(rows, args.out)  # after each list: partial results survive
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    (args.out / "machine.txt").write_text(
        f"{stamp}; {platform.platform()}; python {platform.python_version()}; "
        f"argv: {' '.join(sys.argv[1:] if argv is None else argv)}\n"
    )
    print((args.out / "bound.md").read_text(), end="")
    print(f"wrote {args.out}/bound.csv, bound.md, machine.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
