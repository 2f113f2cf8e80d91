"""MIG churn: arrivals and departures of MIG claims under three placement policies.

    python -m bench.mig_churn [--gpus 64] [--events 3000] [--seed 1] [--load 1.2]
                              [--mix default|large] [--no-bound] [--out bench/results/mig_churn]

The cluster: `--gpus` MIG-enabled GPUs, 8 per node, half the nodes A100-40GB, half H100-80GB.
`--events` MIG claims arrive as a Poisson process and each stays for an exponential lifetime
(mean 1 time unit); the arrival rate offers `--load` times the cluster's memory slices, so the
cluster runs near saturation. A claim asks for a profile of one product (no "+me" profiles) or
states needs (memory and/or computeSlices) that either product may serve.

The same event sequence goes to three policies; a rejected claim is dropped (no retry):

- `drasat`: each arrival is a one-pod Problem solved online by `drasat.solver.solve` with the
  current allocations in the nodes' NAS; a departure removes the claim's allocatedClaims entry.
  Every decision is checked here, independently of the solver: a MIG-enabled GPU of the node, a
  profile of its product that is the one asked (or covers the needs), a catalog placement of that
  profile, no overlap with the instances already on the GPU.
- `first-feasible` (NVIDIA classic): GPUs in node order, then index; on each GPU the matching
  profiles smallest first (by needs), the first free placement in placement order.
- `static`: every GPU pre-split into a fixed balanced layout (2g@0, 1g@2, 1g@3, 3g@4: 7 compute
  slices, all 8 memory slices); a claim is served only from a free instance of its profile, by
  needs from the smallest free instance that covers them.

(b) and (c) are baselines of the bench, not of the product. Metrics: accepted claims, and
memory-slice utilization over time (used slices / 8 per GPU; its time-weighted mean after a
warm-up of 2 lifetimes). Beside them, `bound`: an upper bound on the claims any policy could
accept from the same events (an LP relaxation, proved in its docstring), and the share of the
first-feasible -> bound gap each policy closes. Progress goes to stderr; the command prints
where it wrote `summary.md`, `summary.csv`, `utilization.csv` and `mig_churn.png`.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import pathlib
import platform
import random
import sys
import time
from collections.abc import Callable, Sequence

from bench import solver_online
from drasat.api import catalog
from drasat.api.quantity import to_bytes
from drasat.solver import (
    Allocation,
    ClaimRequest,
    MigDemand,
    Mode,
    PodRequest,
    Problem,
    Solution,
    SolveParams,
    SolverCache,
    solve,
)

PRODUCTS = ("A100-40GB", "H100-80GB")
SLICES = 8  # memory slices per GPU (A100/H100)
NAMESPACE = "churn"

#: By profile: (profile index in the product's catalog order without "+me", weight).
#: Catalog order: 1g (1 slice), 1g x2 memory (2), 2g (2), 3g (4), 4g (4), 7g (8).
PROFILE_MIX = ((0, 30), (1, 8), (2, 20), (3, 17), (4, 10), (5, 15))
#: By needs: (memory GiB or None, computeSlices or None, weight).
NEEDS_MIX = ((5, None, 8), (10, None, 6), (None, 2, 5), (20, None, 4), (None, 3, 3), (40, 4, 4))
#: Share of claims stated by needs.
NEEDS_SHARE = 0.3


@dataclasses.dataclass(frozen=True)
class Mix:
    """A workload: profile weights (as PROFILE_MIX), needs weights (as NEEDS_MIX), needs share."""

    profiles: tuple[tuple[int, int], ...]
    needs: tuple[tuple[int | None, int | None, int], ...]
    needs_share: float


#: `default`: the mix every tuned figure uses. `large`: more 3g/4g/7g claims, fixed before any
#: run on it and never tuned for.
MIXES = {
    "default": Mix(PROFILE_MIX, NEEDS_MIX, NEEDS_SHARE),
    "large": Mix(((0, 15), (1, 5), (2, 15), (3, 20), (4, 20), (5, 25)), NEEDS_MIX, NEEDS_SHARE),
}
#: Static layout: (profile index as PROFILE_MIX, start).
STATIC_LAYOUT = ((2, 0), (0, 2), (0, 3), (3, 4))


@dataclasses.dataclass(frozen=True)
class Request:
    id: int
    arrival: float
    departure: float
    product: str | None  # catalog key when by profile
    profile: str | None
    memory_gib: int | None = None
    compute: int | None = None

    def describe(self) -> str:
        if self.profile is not None:
            return f"{self.profile} ({self.product})"
        needs = [f"memory {self.memory_gib}Gi"] if self.memory_gib else []
        needs += [f"computeSlices {self.compute}"] if self.compute else []
        return "needs " + ", ".join(needs)

    def covers(self, profile: catalog.MigProfile, product: str) -> bool:
        """Whether a profile of a product serves this request."""
        if self.profile is not None:
            return product == self.product and profile.name == self.profile
        memory = (self.memory_gib or 0) * catalog.GiB
        return profile.memory_bytes >= memory and profile.compute_slices >= (self.compute or 0)


def _profiles(product: str) -> list[catalog.MigProfile]:
    found = catalog.find_product(product)
    assert found is not None
    return [p for p in found.mig_profiles if not p.media_extensions]


def events(
    count: int, seed: int, gpus: int, load: float, mix: Mix = MIXES["default"]
) -> list[Request]:
    """`count` arrivals with their departures, offering `load` x the cluster's slices."""
    rng = random.Random(seed)
    sizes = {p: [q.memory_slices for q in _profiles(p)] for p in PRODUCTS}
    mean_profile = sum(sizes[PRODUCTS[0]][i] * w for i, w in mix.profiles) / sum(
        w for _, w in mix.profiles
    )
    # By needs, the smallest covering profile's slices (A100, the larger in slices).
    smallest = []
    for memory, compute, weight in mix.needs:
        probe = Request(-1, 0, 0, None, None, memory, compute)
        fit = min(q.memory_slices for q in _profiles(PRODUCTS[0]) if probe.covers(q, PRODUCTS[0]))
        smallest.append((fit, weight))
    mean_needs = sum(f * w for f, w in smallest) / sum(w for _, w in smallest)
    mean_slices = (1 - mix.needs_share) * mean_profile + mix.needs_share * mean_needs
    rate = load * gpus * SLICES / mean_slices  # arrivals per unit time, lifetimes of mean 1
    out, now = [], 0.0
    for i in range(count):
        now += rng.expovariate(rate)
        life = rng.expovariate(1.0)
        if rng.random() < mix.needs_share:
            memory, compute, _ = rng.choices(mix.needs, weights=[w for *_, w in mix.needs])[0]
            out.append(Request(i, now, now + life, None, None, memory, compute))
        else:
            product = rng.choice(PRODUCTS)
            index = rng.choices([i for i, _ in mix.profiles], weights=[w for _, w in mix.profiles])
            name = _profiles(product)[index[0]].name
            out.append(Request(i, now, now + life, product, name))
    return out


@dataclasses.dataclass
class Gpu:
    node: str
    index: int
    uuid: str
    product: str
    #: request id -> (profile, start, size)
    held: dict[int, tuple[str, int, int]] = dataclasses.field(default_factory=dict)

    def free(self, start: int, size: int) -> bool:
        return all(start + size <= s or s + z <= start for _, s, z in self.held.values())

    @property
    def used(self) -> int:
        return sum(z for _, _, z in self.held.values())


def cluster_gpus(gpus: int) -> list[Gpu]:
    nodes = max(1, gpus // 8)
    out = []
    for n in range(nodes):
        product = PRODUCTS[0] if n < (nodes + 1) // 2 else PRODUCTS[1]
        name = node_name(n, product)
        out += [Gpu(name, i, f"GPU-{name}-{i}", product) for i in range(min(8, gpus - 8 * n))]
    return out


def node_name(n: int, product: str) -> str:
    return f"{product.split('-')[0].lower()}-{n:02d}"


class Policy:
    name = ""

    def __init__(self, gpus: list[Gpu]) -> None:
        self.gpus = gpus
        self.where: dict[int, Gpu] = {}

    def arrive(self, request: Request) -> bool:
        raise NotImplementedError

    def depart(self, request: Request) -> None:
        gpu = self.where.pop(request.id, None)
        if gpu is not None:
            del gpu.held[request.id]

    def take(self, request: Request, gpu: Gpu, profile: str, start: int, size: int) -> None:
        gpu.held[request.id] = (profile, start, size)
        self.where[request.id] = gpu

    def used(self) -> int:
        return sum(g.used for g in self.gpus)


class FirstFeasible(Policy):
    name = "first-feasible"

    def arrive(self, request: Request) -> bool:
        for gpu in self.gpus:
            fitting = [p for p in _profiles(gpu.product) if request.covers(p, gpu.product)]
            for profile in sorted(fitting, key=lambda p: (p.memory_slices, p.compute_slices)):
                for start in profile.starts:
                    if gpu.free(start, profile.memory_slices):
                        self.take(request, gpu, profile.name, start, profile.memory_slices)
                        return True
        return False


class Static(Policy):
    name = "static"

    def __init__(self, gpus: list[Gpu]) -> None:
        super().__init__(gpus)
        # (gpu, profile, start), smallest instances first, then GPU order.
        self.instances = []
        for gpu in gpus:
            profiles = _profiles(gpu.product)
            for index, start in STATIC_LAYOUT:
                self.instances.append((gpu, profiles[index], start))
        self.instances.sort(key=lambda t: (t[1].memory_slices, t[1].compute_slices))

    def arrive(self, request: Request) -> bool:
        for gpu, profile, start in self.instances:
            size = profile.memory_slices
            if request.covers(profile, gpu.product) and gpu.free(start, size):
                self.take(request, gpu, profile.name, start, size)
                return True
        return False


class Drasat(Policy):
    name = "drasat"

    def __init__(self, gpus: list[Gpu]) -> None:
        super().__init__(gpus)
        names = sorted({(g.node, g.product) for g in gpus}, key=lambda t: t[0])
        rng = random.Random(0)
        states = []
        for name, product in names:
            count = sum(1 for g in gpus if g.node == name)
            node = solver_online._node(name, product, True, rng, 0.0)
            kept = tuple(g for g in node.devices.gpus if g.index < count)  # a short last node
            devices = dataclasses.replace(node.devices, gpus=kept)
            states.append(dataclasses.replace(node, devices=devices))
        self.states = states
        self.products = dict(names)
        self.index = {n.name: i for i, n in enumerate(states)}
        self.by_uuid = {g.uuid: g for g in gpus}
        self.claims: dict[int, tuple[str, str]] = {}  # request id -> (node, claim uid)
        # One solver cache for the run, as the controller keeps one.
        self.params = SolveParams(mode=Mode.online, explain=False, cache=SolverCache())
        self.solve_s = 0.0
        #: Called with (problem, solution) after every solve (tests run their checker here).
        self.observer: Callable[[Problem, Solution], None] | None = None

    def _set(self, node: str, claims: dict[str, Allocation]) -> None:
        i = self.index[node]
        state = self.states[i]
        ledger = dataclasses.replace(state.ledger, allocated=claims)
        self.states[i] = dataclasses.replace(state, ledger=ledger)

    def arrive(self, request: Request) -> bool:
        uid = f"claim-{request.id}"
        if request.profile is not None:
            spec = MigDemand(profile=request.profile)
        else:
            memory = to_bytes(f"{request.memory_gib}Gi") if request.memory_gib else 0
            spec = MigDemand(memory_bytes=memory, compute_slices=request.compute or 0)
        claim = ClaimRequest(uid=uid, namespace=NAMESPACE, name=uid, mig=spec)
        # A claim by profile asks for one product's profile; a MIG claim names no product and
        # "1g.10gb" is a profile of both (1 slice on H100, 2 on A100), so the pod's candidate
        # nodes (a node selector on the product) keep it to the product as the baselines do.
        nodes = None
        if request.product is not None:
            nodes = tuple(n.name for n in self.states if self.products[n.name] == request.product)
        pod = PodRequest(
            key=f"{NAMESPACE}/pod-{request.id}",
            namespace=NAMESPACE,
            claims=(claim,),
            candidate_nodes=nodes,
        )
        problem = Problem(nodes=tuple(self.states), pods=(pod,))
        started = time.perf_counter()
        solution = solve(problem, self.params)
        self.solve_s += time.perf_counter() - started
        if self.observer is not None:
            self.observer(problem, solution)
        if not solution.placements:
            return False
        placement = solution.placements[0]
        entry = placement.allocations[uid]
        gpu, profile, start, size = self._check(request, placement.node, entry, spec)
        self.take(request, gpu, profile, start, size)
        claims = dict(self.states[self.index[placement.node]].ledger.allocated)
        claims[uid] = entry
        self._set(placement.node, claims)
        self.claims[request.id] = (placement.node, uid)
        return True

    def _check(
        self,
        request: Request,
        node: str,
        entry: Allocation,
        spec: MigDemand,
    ) -> tuple[Gpu, str, int, int]:
        """The bench's own check of one decision; raises on any violation."""
        where = f"drasat decision for claim {request.id} ({request.describe()})"
        if not entry.mig or len(entry.migs) != 1 or entry.gpus:
            raise AssertionError(f"{where}: not exactly one MIG device: {entry}")
        device = entry.migs[0]
        gpu = self.by_uuid.get(device.parent)
        if gpu is None or gpu.node != node:
            raise AssertionError(f"{where}: GPU {device.parent} is not on node {node}")
        product = catalog.find_product(gpu.product)
        assert product is not None
        profile = product.profile(device.profile)
        if profile is None:
            raise AssertionError(f"{where}: {device.profile} is no profile of {gpu.product}")
        if request.profile is not None and device.profile != request.profile:
            raise AssertionError(f"{where}: got {device.profile}")
        if request.product is not None and gpu.product != request.product:
            raise AssertionError(f"{where}: on {gpu.product}")
        if profile.memory_bytes < spec.memory_bytes:
            raise AssertionError(f"{where}: {device.profile} has too little memory")
        if spec.compute_slices > profile.compute_slices:
            raise AssertionError(f"{where}: {device.profile} has too few compute slices")
        start, size = device.start, device.size
        if (start, size) not in profile.placements:
            raise AssertionError(f"{where}: {device.profile} cannot be placed at {start}+{size}")
        if not gpu.free(start, size):
            raise AssertionError(f"{where}: {start}+{size} overlaps {gpu.held} on {gpu.uuid}")
        if profile.media_extensions and any(p.endswith("+me") for p, _, _ in gpu.held.values()):
            raise AssertionError(f"{where}: a second +me instance on {gpu.uuid}")
        return gpu, device.profile, start, size

    def depart(self, request: Request) -> None:
        super().depart(request)
        found = self.claims.pop(request.id, None)
        if found is not None:
            node, uid = found
            claims = dict(self.states[self.index[node]].ledger.allocated)
            del claims[uid]
            self._set(node, claims)


POLICIES: dict[str, type[Policy]] = {p.name: p for p in (Drasat, FirstFeasible, Static)}


@dataclasses.dataclass(frozen=True)
class Bound:
    """An upper bound on the claims any policy accepts from one event sequence (`bound`)."""

    accepted: int  # floor of the LP optimum
    lp_value: float
    moments: int  # alive sets constrained
    wall_s: float


def _lower_costs(request: Request, product: str) -> tuple[int, int, frozenset[int]] | None:
    """What any instance serving the request on a GPU of the product takes at least: memory
    slices, compute slices, and the slices every such placement covers. None: it cannot go there.
    """
    placements = [
        (q, start) for q in _profiles(product) if request.covers(q, product) for start in q.starts
    ]
    if not placements:
        return None
    memory = min(q.memory_slices for q, _ in placements)
    compute = min(q.compute_slices for q, _ in placements)
    spans = [frozenset(range(s, s + q.memory_slices)) for q, s in placements]
    return memory, compute, frozenset.intersection(*spans)


def _peak_sets(requests: Sequence[Request]) -> list[list[int]]:
    """The alive sets that contain every other one: the set just before each departure that
    follows an arrival, and the set at the last arrival (the measured window's end)."""
    timeline = [(r.arrival, 1, r.id) for r in requests] + [(r.departure, 0, r.id) for r in requests]
    timeline.sort()  # departures before arrivals at equal times, as in `run`
    last = requests[-1].arrival if requests else 0.0
    alive: dict[int, None] = {}
    out, grew = [], False
    for when, arrival, rid in timeline:
        if when > last:
            break
        if arrival:
            alive[rid] = None
            grew = True
        else:
            if grew:
                out.append(list(alive))
                grew = False
            alive.pop(rid, None)
    if grew:
        out.append(list(alive))
    return out


def bound(requests: Sequence[Request], gpus: int) -> Bound:
    """An upper bound on the requests that ANY policy accepts from this event sequence.

    The bound is the optimum of a linear program, floored. Variables x[i, p] in [0, 1]: request
    i accepted on product p (only products whose profiles can serve it). Subject to
    sum_p x[i, p] <= 1 for every request, and, for every product p with N_p GPUs and every peak
    alive set S (see `_peak_sets`), with m, c, K from `_lower_costs`:

    (a) sum_{i in S} m[i, p] x[i, p] <= 8 N_p   (memory slices),
    (b) sum_{i in S} c[i, p] x[i, p] <= C N_p   (compute slices, C = 7 per GPU),
    (c) sum_{i in S, t in K[i, p]} x[i, p] <= N_p   for each slice t (e.g. t = 0: 4g and 7g).

    Why it is a bound. Take any policy, online or with hindsight, that may even move instances
    between GPUs at any time or reject claims that fit, and let x[i, p] = 1 when it accepts
    request i and serves it from a GPU of product p. An accepted request holds one instance from
    its arrival to its departure, so at any moment the instances of the requests alive then sit
    on the GPUs at once. On one GPU the instances occupy disjoint memory-slice windows among the
    8, so their memory slices add up to at most 8: that gives (a), since an instance of request
    i on p takes at least m[i, p] slices. Every catalog placement has no more compute slices than
    memory slices within 0..C-1 (checked here: 1g@6 has 1 of slice 6, 3g@4 3 of slices 4-6, 7g
    7 of 0-6, ...), and the windows are disjoint, so the compute slices of one GPU's instances
    add up to at most C: (b). Every placement of every profile serving i on p covers the
    slices K[i, p] (4g and 7g: slice 0), and no two instances on one GPU share a slice: at
    most one such instance per GPU and slice, so (c). Each alive set is a subset of a peak set
    and the coefficients are not negative, so the constraints at the peak sets imply them at
    every moment. So the policy's x is feasible, its accepted count sum x is at most the LP
    optimum, and, being an integer, at most its floor (a tolerance of 1e-3 guards the floor
    against the LP solver's rounding, on the safe side). The relaxation ignores where on a GPU
    and on which GPU an instance sits, so it also bounds policies that re-pack at will: it is
    an upper bound, not an attainable figure.
    """
    from ortools.linear_solver import pywraplp

    started = time.perf_counter()
    cluster = cluster_gpus(gpus)
    counts = {p: sum(1 for g in cluster if g.product == p) for p in PRODUCTS}
    for product in PRODUCTS:
        found = catalog.find_product(product)
        assert found is not None
        for q in _profiles(product):
            for start in q.starts:
                within = len(set(range(start, start + q.memory_slices)) & set(range(7)))
                assert q.compute_slices <= within, f"(b) does not hold for {q.name}@{start}"
        assert found.compute_slices == 7 and found.memory_slices == SLICES
    costs = {
        (r.id, p): c
        for r in requests
        for p in PRODUCTS
        if counts[p] and (c := _lower_costs(r, p)) is not None
    }
    lp = pywraplp.Solver.CreateSolver("GLOP")
    x = {key: lp.NumVar(0.0, 1.0, f"x_{key[0]}_{key[1]}") for key in costs}
    for r in requests:
        mine = [x[(r.id, p)] for p in PRODUCTS if (r.id, p) in x]
        if len(mine) > 1:
            lp.Add(lp.Sum(mine) <= 1)
    peaks = _peak_sets(requests)
    for alive in peaks:
        for p in PRODUCTS:
            keys = [(i, p) for i in alive if (i, p) in costs]
            if not keys:
                continue
            lp.Add(lp.Sum([costs[k][0] * x[k] for k in keys]) <= SLICES * counts[p])
            lp.Add(lp.Sum([costs[k][1] * x[k] for k in keys]) <= 7 * counts[p])
            covering: dict[frozenset[tuple[int, str]], None] = {}
            for t in range(SLICES):
                group = frozenset(k for k in keys if t in costs[k][2])
                if len(group) > counts[p]:
                    covering[group] = None
            for group in covering:
                if not any(group < other for other in covering):
                    lp.Add(lp.Sum([x[k] for k in group]) <= counts[p])
    lp.Maximize(lp.Sum(list(x.values())))
    status = lp.Solve()
    if status != pywraplp.Solver.OPTIMAL:
        raise RuntimeError(f"the bound's LP did not solve to optimality (status {status})")
    value = lp.Objective().Value()
    return Bound(int(value + 1e-3), value, len(peaks), time.perf_counter() - started)


@dataclasses.dataclass
class Result:
    policy: str
    arrivals: int
    accepted: int
    #: (time, used memory slices) after every event
    samples: list[tuple[float, int]]
    capacity: int
    wall_s: float
    by_kind: dict[str, tuple[int, int]]  # kind -> (arrivals, accepted)

    @property
    def accepted_pct(self) -> float:
        return 100.0 * self.accepted / self.arrivals if self.arrivals else 0.0

    def mean_utilization(self, since: float, until: float) -> float:
        """Time-weighted mean of used/capacity over [since, until]."""
        area, span = 0.0, 0.0
        for (t0, used), (t1, _) in zip(self.samples, self.samples[1:], strict=False):
            a, b = max(t0, since), min(t1, until)
            if b > a:
                area += used * (b - a)
                span += b - a
        return area / span / self.capacity if span else 0.0


def _kind(request: Request) -> str:
    if request.profile is None:
        return "by needs"
    return request.profile.split(".")[0]


def run(
    policy: str,
    requests: Sequence[Request],
    gpus: int,
    progress: bool = False,
    configure: Callable[[Policy], None] | None = None,
) -> Result:
    """Replays the arrivals and departures of `requests` under one policy."""
    state = POLICIES[policy](cluster_gpus(gpus))
    if configure is not None:
        configure(state)
    timeline = [(r.arrival, 1, r) for r in requests] + [(r.departure, 0, r) for r in requests]
    timeline.sort(key=lambda e: (e[0], e[1], e[2].id))
    samples: list[tuple[float, int]] = [(0.0, 0)]
    accepted = 0
    by_kind: dict[str, list[int]] = {}
    started = time.perf_counter()
    arrived = 0
    last = requests[-1].arrival if requests else 0.0
    for when, arrival, request in timeline:
        if when > last:
            break  # the measured window ends with the last arrival
        if arrival:
            arrived += 1
            ok = state.arrive(request)
            accepted += ok
            counts = by_kind.setdefault(_kind(request), [0, 0])
            counts[0] += 1
            counts[1] += ok
            if progress and arrived % 250 == 0:
                print(
                    f"{policy}: {arrived}/{len(requests)} arrivals, {accepted} accepted, "
                    f"{time.perf_counter() - started:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
        else:
            state.depart(request)
        samples.append((when, state.used()))
    total = len(state.gpus) * SLICES
    return Result(
        policy,
        arrived,
        accepted,
        samples,
        total,
        time.perf_counter() - started,
        {k: (v[0], v[1]) for k, v in sorted(by_kind.items())},
    )


def _plot(results: list[Result], warmup: float, path: pathlib.Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=80)
    for result in results:
        times = [t for t, _ in result.samples]
        used = [100.0 * u / result.capacity for _, u in result.samples]
        ax.step(times, used, where="post", linewidth=0.8, label=result.policy)
    ax.axvline(warmup, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("time (mean lifetime = 1)")
    ax.set_ylabel("memory slices used (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title, fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mig_churn", description=__doc__)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--events", type=int, default=3000, help="arrivals (each departs)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--load", type=float, default=1.2, help="offered slices / capacity")
    parser.add_argument("--mix", choices=sorted(MIXES), default="default")
    parser.add_argument("--policies", default="drasat,first-feasible,static")
    parser.add_argument("--no-bound", action="store_true", help="skip the LP bound (`bound`)")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/results/mig_churn"))
    args = parser.parse_args(argv)
    requests = events(args.events, args.seed, args.gpus, args.load, MIXES[args.mix])
    warmup = 2.0
    until = requests[-1].arrival if requests else 0.0
    results = []
    for name in args.policies.split(","):
        print(f"{name}: {len(requests)} arrivals on {args.gpus} GPUs", file=sys.stderr)
        results.append(run(name, requests, args.gpus, progress=True))
    limit = None
    if not args.no_bound:
        print("bound: the LP relaxation (see bound())", file=sys.stderr)
        limit = bound(requests, args.gpus)
    base = {r.policy: r.accepted for r in results}
    rows = []
    for r in results:
        row: dict[str, object] = {
            "policy": r.policy,
            "arrivals": r.arrivals,
            "accepted": r.accepted,
            "accepted_pct": round(r.accepted_pct, 2),
            "mean_utilization_pct": round(100 * r.mean_utilization(warmup, until), 2),
        }
        for other in ("first-feasible", "static"):
            if base.get(other):
                row[f"vs_{other}_pct"] = round(100.0 * (r.accepted / base[other] - 1), 1)
        if limit is not None:
            row["bound"] = limit.accepted
            first = base.get("first-feasible")
            if first is not None and limit.accepted > first:
                # Share of the first-feasible -> bound gap this policy closes.
                closed = 100.0 * (r.accepted - first) / (limit.accepted - first)
                row["gap_closed_pct"] = round(closed, 1)
        row["wall_s"] = round(r.wall_s, 1)
        rows.append(row)
    columns = list(dict.fromkeys(c for row in rows for c in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for row in rows]
    kinds = sorted({k for r in results for k in r.by_kind})
    lines += ["", "| kind | " + " | ".join(r.policy for r in results) + " |"]
    lines.append("|" + "---|" * (len(results) + 1))
    for kind in kinds:
        cells = []
        for r in results:
            n, ok = r.by_kind.get(kind, (0, 0))
            cells.append(f"{ok}/{n}")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    if limit is not None:
        pct = 100.0 * limit.accepted / len(requests) if requests else 0.0
        lines.append(
            f"\nbound: at most {limit.accepted} ({pct:.2f}%) of the {len(requests)} claims can be "
            f"accepted by any policy, even with hindsight and re-packing (LP optimum "
            f"{limit.lp_value:.2f}, {limit.moments} peak moments, {limit.wall_s:.1f} s): an upper "
            "bound, not a policy"
        )
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines.append(
        f"\n{args.gpus} GPUs, {args.events} arrivals, mix {args.mix}, seed {args.seed}, "
        f"load {args.load}; "
        f"{stamp}; {platform.platform()}; python {platform.python_version()}"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    with (args.out / "summary.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    with (args.out / "utilization.csv").open("w", newline="") as f:
        series = csv.writer(f)
        series.writerow(["policy", "time", "used_slices", "capacity_slices"])
        for r in results:
            series.writerows((r.policy, round(t, 5), u, r.capacity) for t, u in r.samples)
    title = (
        f"MIG churn: {args.gpus} GPUs (A100-40GB/H100-80GB), {args.events} arrivals, "
        f"load {args.load}, seed {args.seed}, mix {args.mix}"
    )
    _plot(results, warmup, args.out / "mig_churn.png", title)
    print("\n".join(lines))
    print(f"wrote {args.out}/summary.md, summary.csv, utilization.csv, mig_churn.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
