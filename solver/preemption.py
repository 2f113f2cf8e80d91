"""Which running pods to evict so a refused pod fits: the cheapest victim set, or a proof that
none exists.

A preemptor lands on one node, so its victims are all there (but for the other members of a
victim's unit, below). Each node gets a proposal: its cheapest victim set that frees a place for
the preemptor's devices; the cluster's best proposal is checked by the caller's `fits` (the
allocator itself, the same model as any placement: whole GPUs, MIG placements, share capacity,
CPU), and a set that does not fit is cut off on its node (some candidate outside it must go
too) and that node proposes again. Fitting is monotone in the set (evicting more frees more),
so a cut removes only sets that cannot fit, and the first set that fits is the optimum (a
logic-based Benders loop; `Choice.proven`). The search ends when a set fits or no node has a
proposal left: then none exists, proven; only `budget_s` (CPU seconds of the calling thread)
stops it earlier, said as not proven.

Cost: the policy's terms compared lexicographically (`Term`s in `order`: victims, then the sum
of their priorities above the lowest, then the devices they hold — by default). A candidate
never costs less than its unit: a unit (a gang) goes whole or not at all, with its members on
other nodes, and every member counts in every term, every PodDisruptionBudget and
`max_victims`.

What makes few checks: `Devices`, the node's GPUs, who holds what of each (`Hold`: a whole GPU,
a share's compute and memory, MIG memory slices) and the preemptor's device needs (`Need`, per
way its claims can be met). A proposal must free a place for every need of one way: the GPUs a
whole-GPU need takes held by nobody left; a share's GPU with room for its compute and memory
beside the shares left; a MIG placement's slices free. That is exact for the devices, so the
first proposal fits unless something the devices do not say (CPU, an attribute constraint, a
namespace's MPS server) is short. A node whose ways each need one device is answered by
enumerating its GPUs and placements (no CP-SAT: hundreds of nodes in milliseconds); several
devices go to a CP-SAT model of the same conditions, solved per term and proven.

The caller decides who may be a candidate (a lower priority than the preemptor's, not leaving
already); `choose` refuses a candidate of equal or higher priority outright. Pure: ortools only.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from drasat.api.policy import PreemptionTerm

Term = PreemptionTerm
DEFAULT_ORDER: tuple[Term, ...] = (Term.victims, Term.priority, Term.devices)


@dataclass(frozen=True)
class Candidate:
    """A running pod that may be evicted."""

    key: str  # namespace/name
    node: str
    priority: int
    #: Devices its claims hold there (a share counts 1): the size its eviction costs.
    devices: int = 1
    #: The PodDisruptionBudgets that select it (their names).
    budgets: tuple[str, ...] = ()
    #: The unit it is evicted with (a gang's key): all of a unit's candidates go, or none.
    #: None: itself alone.
    unit: str | None = None

    @property
    def unit_key(self) -> str:
        return self.unit if self.unit is not None else self.key


@dataclass(frozen=True)
class Hold:
    """What some claim holds of one GPU of a node. `holders`: the candidates that must all be
    evicted to free it (the users of its claim); None: nothing frees it."""

    gpu: str
    holders: frozenset[str] | None
    whole: bool = False
    compute: int = 0
    memory_mib: int = 0
    #: MIG memory slices.
    slices: frozenset[int] = frozenset()
    media: bool = False


@dataclass(frozen=True)
class Gpu:
    uuid: str
    memory_mib: int
    #: The GPU's compute, in percent (a share's unit).
    compute: int = 100


@dataclass(frozen=True)
class Need:
    """Devices one request of the preemptor needs on one node: `count` whole GPUs or shares of
    `gpus`, or `count` MIG devices at `placements` ((gpu, start, size))."""

    kind: str  # "gpu", "share", "mig"
    count: int = 1
    gpus: frozenset[str] = frozenset()
    compute: int = 0
    memory_mib: int = 0
    placements: frozenset[tuple[str, int, int]] = frozenset()
    media: bool = False

    GPU = "gpu"
    SHARE = "share"
    MIG = "mig"


@dataclass(frozen=True)
class Devices:
    """A node's devices as preemption sees them."""

    gpus: tuple[Gpu, ...]
    holds: tuple[Hold, ...]
    #: The ways the preemptor's claims can be met there, each the needs of all of them.
    ways: tuple[tuple[Need, ...], ...]


@dataclass(frozen=True)
class Choice:
    #: The node the preemptor goes to; None: no victim set lets it fit.
    node: str | None
    victims: tuple[str, ...] = ()
    #: The search ended (a set fitted, or none is left): no cheaper set fits, or none does.
    proven: bool = True
    #: How many victim sets the allocator checked.
    checks: int = 0
    #: Why none (empty when a set was found).
    reason: str = ""
    #: Sets found not to fit, in the order tried (for explanations and tests).
    tried: tuple[tuple[str, frozenset[str]], ...] = field(default=())


Fits = Callable[[str, frozenset[str]], bool]
Cost = tuple[int, ...]


def choose(
    preemptor_priority: int,
    candidates: Sequence[Candidate],
    fits: Fits,
    *,
    max_victims: int,
    budgets: Mapping[str, int] | None = None,
    order: Sequence[Term] = DEFAULT_ORDER,
    devices: Mapping[str, Devices] | None = None,
    nodes: Iterable[str] | None = None,
    budget_s: float = 10.0,
    time_limit_s: float = 2.0,
) -> Choice:
    """The best victim set for a preemptor, or why there is none.

    `fits(node, victims)`: whether the preemptor fits on `node` once `victims` are gone (the
    caller frees a shared claim only when every pod using it is a victim). `budgets`: each
    PodDisruptionBudget's name -> the disruptions it allows now. `devices`: per node, what the
    preemptor needs and who holds what (a node without it proposes any set, cut by `fits`).
    `nodes`: where the preemptor may go (by default, wherever a candidate is); a candidate
    elsewhere is a victim only with a unit that has one there."""
    for c in candidates:
        if c.priority >= preemptor_priority:
            raise ValueError(
                f"candidate {c.key} has priority {c.priority}, not below the preemptor's "
                f"{preemptor_priority}"
            )
    if not candidates:
        return Choice(None, reason="no running pod of lower priority holds devices on its nodes")
    search = _Search(
        candidates, max_victims, dict(budgets or {}), tuple(order), devices or {}, time_limit_s
    )
    if nodes is not None:
        search.nodes = sorted(set(search.nodes) & set(nodes))
    # CPU time of this thread: a loaded machine slows the search, not its verdict.
    deadline = time.thread_time() + budget_s
    checks = 0
    tried: list[tuple[str, frozenset[str]]] = []
    for node in search.nodes:
        search.propose(node)
    while True:
        live = {n: a for n, a in search.best.items() if isinstance(a, _Answer)}
        if not live:
            proven = all(a is None or isinstance(a, _Answer) for a in search.best.values())
            return Choice(
                None,
                proven=proven,
                checks=checks,
                reason=f"no set of at most {max_victims} lower-priority pods that their "
                "PodDisruptionBudgets allow to evict frees enough"
                + ("" if proven else " (not proven: a search ran out of time)"),
                tried=tuple(tried),
            )
        if time.thread_time() > deadline:
            return Choice(
                None,
                proven=False,
                checks=checks,
                reason=f"gave up after {budget_s:.0f}s of CPU and {checks} victim sets checked",
                tried=tuple(tried),
            )
        node = min(live, key=lambda n: (live[n].values, n))
        victims = live[node].victims
        checks += 1
        if fits(node, victims):
            proven = all(a is None or isinstance(a, _Answer) for a in search.best.values())
            return Choice(node, tuple(sorted(victims)), proven, checks, "", tuple(tried))
        tried.append((node, victims))
        search.cut(node, victims)
        if node not in search.enough:
            # Once per node: is evicting every candidate there (with their units) enough at
            # all? If not, the node is out (one check instead of a cut per set).
            every = search.every(node)
            if every != victims:
                checks += 1
                if not fits(node, every):
                    tried.append((node, every))
                    search.best[node] = None
                    continue
            search.enough.add(node)
        search.propose(node)


@dataclass(frozen=True)
class _Answer:
    """A node's best set not cut off yet: its cost per term (in the policy's order)."""

    values: Cost
    victims: frozenset[str]


_UNKNOWN = "unknown"


class _Search:
    """Each node's proposals: the cheapest unit set not cut off that frees the devices."""

    def __init__(
        self,
        candidates: Sequence[Candidate],
        max_victims: int,
        budgets: dict[str, int],
        order: tuple[Term, ...],
        devices: Mapping[str, Devices],
        time_limit_s: float,
    ) -> None:
        self.max_victims = max_victims
        self.budgets = budgets
        self.order = order
        self.devices = devices
        self.time_limit_s = time_limit_s
        self.lowest = min(c.priority for c in candidates)
        self.members: dict[str, list[Candidate]] = {}
        for c in candidates:
            self.members.setdefault(c.unit_key, []).append(c)
        self.units_on: dict[str, list[str]] = {}
        for unit, found in self.members.items():
            for node in sorted({c.node for c in found}):
                self.units_on.setdefault(node, []).append(unit)
        self.nodes = sorted(self.units_on)
        self.cuts: dict[str, list[frozenset[str]]] = {n: [] for n in self.nodes}
        #: Nodes where evicting every candidate was checked (and found enough).
        self.enough: set[str] = set()
        #: Each node's best set not cut off (None: none, proven; _UNKNOWN: not found in time).
        self.best: dict[str, _Answer | str | None] = {}
        self._key_unit = {c.key: c.unit_key for c in candidates}

    # Proposals.
    def propose(self, node: str) -> None:
        found = self.devices.get(node)
        if found is not None and not self.cuts[node] and _single(found):
            self.best[node] = self._enumerate(node, found)
        else:
            self.best[node] = self._master(node, found)

    def cut(self, node: str, victims: frozenset[str]) -> None:
        self.cuts[node].append(victims)

    def every(self, node: str) -> frozenset[str]:
        return self._pods(self.units_on[node])

    def _pods(self, units: Iterable[str]) -> frozenset[str]:
        return frozenset(c.key for u in units for c in self.members[u])

    def cost(self, units: Iterable[str]) -> Cost | None:
        """The set's cost in the policy's order; None when the bounds refuse it."""
        chosen = [c for u in set(units) for c in self.members[u]]
        if not chosen or len(chosen) > self.max_victims:
            return None
        for name, allowed in self.budgets.items():
            if sum(1 for c in chosen if name in c.budgets) > max(allowed, 0):
                return None
        terms = {
            Term.victims: len(chosen),
            Term.priority: sum(c.priority - self.lowest for c in chosen),
            Term.devices: sum(max(c.devices, 0) for c in chosen),
        }
        return tuple(terms[t] for t in self.order)

    # One device per way: every place the devices could go, the units that must leave for it.
    def _enumerate(self, node: str, devices: Devices) -> _Answer | str | None:
        best: tuple[Cost, tuple[str, ...]] | None = None
        for way in devices.ways:
            (need,) = way
            for needed in _frees(need, devices, self._key_unit):
                units = tuple(sorted(needed))
                if not units:
                    # A free place that does not fit as it is (CPU, a constraint): what to
                    # evict is not the devices' question.
                    return self._master(node, None)
                cost = self.cost(units)
                if cost is not None and (best is None or (cost, units) < best):
                    best = (cost, units)
        if best is None:
            return None
        return _Answer(best[0], self._pods(best[1]))

    # Several devices (or no device facts): CP-SAT over the units here.
    def _master(self, node: str, devices: Devices | None) -> _Answer | str | None:
        m = cp_model.CpModel()
        units = self.units_on[node]
        evict = {u: m.new_bool_var(f"evict_{i}") for i, u in enumerate(units)}
        # At least one victim: the preemptor was refused without any.
        m.add_bool_or(list(evict.values()))
        chosen = [(c, evict[u]) for u in units for c in self.members[u]]
        m.add(sum(v for _, v in chosen) <= self.max_victims)
        for name, allowed in self.budgets.items():
            members = [v for c, v in chosen if name in c.budgets]
            if members:
                m.add(sum(members) <= max(allowed, 0))
        for victims in self.cuts[node]:
            others = [evict[u] for u in units if not self._pods([u]) <= victims]
            if not others:
                return None
            m.add_bool_or(others)
        if devices is not None and not _room(m, devices, evict, self._key_unit):
            return None
        terms = {
            Term.victims: sum(v for _, v in chosen),
            Term.priority: sum((c.priority - self.lowest) * v for c, v in chosen),
            Term.devices: sum(max(c.devices, 0) * v for c, v in chosen),
        }
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = 0
        solver.parameters.max_time_in_seconds = self.time_limit_s
        values = []
        for term in self.order:
            expr = terms[term]
            m.minimize(expr)
            solver.solve(m)
            status = solver.status_name()
            if status == "INFEASIBLE":
                return None
            if status != "OPTIMAL":
                return _UNKNOWN
            values.append(int(solver.objective_value))
            # The next stage keeps this one's best (the lexicographic order).
            m.add(expr == values[-1])
            _hint(m, solver, evict)
        found = [u for u, v in evict.items() if solver.value(v)]
        return _Answer(tuple(values), self._pods(found))


#: The most GPU sets one whole-GPU need's enumeration looks at on a node (C(8, 4) = 70).
MAX_GPU_SETS = 256


def _single(devices: Devices) -> bool:
    """Every way needs one device, or whole GPUs of one request (then enumerating places is
    exact and cheap)."""
    for way in devices.ways:
        if len(way) != 1:
            return False
        (need,) = way
        if need.count == 1:
            continue
        if need.kind != Need.GPU or _combinations(len(need.gpus), need.count) > MAX_GPU_SETS:
            return False
    return True


def _combinations(n: int, k: int) -> int:
    return math.comb(n, k) if 0 <= k <= n else 0


def _frees(need: Need, devices: Devices, unit_of: Mapping[str, str]) -> Iterable[frozenset[str]]:
    """For each place on the node the need could take, the least sets of units that free it
    (several for a share: which shares go is a choice)."""
    by_gpu: dict[str, list[Hold]] = {}
    for hold in devices.holds:
        by_gpu.setdefault(hold.gpu, []).append(hold)
    gpus = {g.uuid: g for g in devices.gpus}

    def units(hold: Hold) -> frozenset[str] | None:
        if hold.holders is None or any(h not in unit_of for h in hold.holders):
            return None
        return frozenset(unit_of[h] for h in hold.holders)

    def all_units(holds: Iterable[Hold]) -> frozenset[str] | None:
        """The units whose going frees every hold of `holds`; None when one cannot go."""
        needed: set[str] = set()
        for hold in holds:
            found = units(hold)
            if found is None:
                return None
            needed |= found
        return frozenset(needed)

    if need.kind == Need.MIG:
        for gpu, start, size in sorted(need.placements):
            slices = set(range(start, start + size))
            overlapping = [
                h
                for h in by_gpu.get(gpu, ())
                if h.whole or h.slices & slices or (need.media and h.media)
            ]
            freed = all_units(overlapping)
            if freed is not None:
                yield freed
        return
    if need.kind == Need.GPU and need.count > 1:
        # Whole GPUs: each set of `count` of them, every hold on each gone.
        freeable: dict[str, frozenset[str]] = {}
        for uuid in sorted(need.gpus):
            if uuid not in gpus:
                continue
            freed = all_units(by_gpu.get(uuid, []))
            if freed is not None:
                freeable[uuid] = freed
        for chosen in itertools.combinations(sorted(freeable), need.count):
            yield frozenset().union(*(freeable[g] for g in chosen))
        return
    for uuid in sorted(need.gpus):
        card = gpus.get(uuid)
        if card is None:
            continue
        holds = by_gpu.get(uuid, [])
        if need.kind == Need.GPU:
            freed = all_units(holds)
            if freed is not None:
                yield freed
            continue
        # A share: whole GPUs and MIG devices there must go; then enough of the shares.
        must: set[str] = set()
        shares: list[tuple[Hold, frozenset[str] | None]] = []
        blocked = False
        for hold in holds:
            if hold.whole or hold.slices:
                found = units(hold)
                if found is None:
                    blocked = True
                    break
                must |= found
            else:
                shares.append((hold, units(hold)))
        if blocked:
            continue
        yield from _share_sets(need, card, must, shares)


def _share_sets(
    need: Need, gpu: Gpu, must: set[str], shares: list[tuple[Hold, frozenset[str] | None]]
) -> Iterable[frozenset[str]]:
    """The least sets of units whose shares leave room for the need beside the rest."""
    fixed = [h for h, u in shares if u is None]
    movable: dict[frozenset[str], tuple[int, int]] = {}
    for hold, found in shares:
        if found is not None:
            compute, memory = movable.get(found, (0, 0))
            movable[found] = (compute + hold.compute, memory + hold.memory_mib)
    compute_left = gpu.compute - need.compute - sum(h.compute for h in fixed)
    memory_left = gpu.memory_mib - need.memory_mib - sum(h.memory_mib for h in fixed)
    groups = sorted(movable.items(), key=lambda item: sorted(item[0]))
    if compute_left < 0 or memory_left < 0:
        return
    minimal: list[frozenset[str]] = []
    for size in range(len(groups) + 1):
        for combo in itertools.combinations(groups, size):
            gone = frozenset().union(*(g for g, _ in combo)) if combo else frozenset()
            if any(m <= gone for m in minimal):
                continue
            stays = [v for g, v in groups if not g <= gone]
            if sum(c for c, _ in stays) <= compute_left and sum(m for _, m in stays) <= (
                memory_left
            ):
                minimal.append(gone)
                yield frozenset(must | gone)


def _room(
    m: cp_model.CpModel,
    devices: Devices,
    evict: Mapping[str, cp_model.IntVar],
    unit_of: Mapping[str, str],
) -> bool:
    """Constrain the set to free a place for every need of one of the ways. A hold stays
    unless every unit holding it goes (a hold with a holder that is no candidate here stays)."""
    gpus = {g.uuid: g for g in devices.gpus}
    gone_of: dict[int, cp_model.IntVar | None] = {}

    def gone(i: int, hold: Hold) -> cp_model.IntVar | None:
        """The literal true when the hold is freed; None: it is never freed."""
        if i not in gone_of:
            units = None if hold.holders is None else {unit_of.get(h) for h in hold.holders}
            if units is None or None in units or not units <= set(evict):
                gone_of[i] = None
            else:
                var = m.new_bool_var(f"gone_{i}")
                literals = [evict[u] for u in sorted(u for u in units if u is not None)]
                m.add_bool_and(literals).only_enforce_if(var)
                m.add_bool_or([var] + [v.Not() for v in literals])
                gone_of[i] = var
        return gone_of[i]

    def needs_gone(pick: cp_model.IntVar, i: int, hold: Hold) -> None:
        freed = gone(i, hold)
        if freed is None:
            m.add(pick == 0)
        else:
            m.add_implication(pick, freed)

    by_gpu: dict[str, list[tuple[int, Hold]]] = {}
    for i, hold in enumerate(devices.holds):
        by_gpu.setdefault(hold.gpu, []).append((i, hold))
    ways = []
    for w, way in enumerate(devices.ways):
        if not way:
            return True  # a way that needs no device: the allocator decides alone
        use = m.new_bool_var(f"way_{w}")
        ways.append(use)
        whole_on: dict[str, list[cp_model.IntVar]] = {}
        share_on: dict[str, list[tuple[cp_model.IntVar, Need]]] = {}
        mig_on: dict[str, list[tuple[cp_model.IntVar, int, int, bool]]] = {}
        for need in way:
            picks = []
            if need.kind == Need.MIG:
                for gpu, start, size in sorted(need.placements):
                    if gpu in gpus:
                        var = m.new_bool_var("")
                        picks.append(var)
                        mig_on.setdefault(gpu, []).append((var, start, size, need.media))
            else:
                for uuid in sorted(need.gpus & set(gpus)):
                    var = m.new_bool_var("")
                    picks.append(var)
                    if need.kind == Need.GPU:
                        whole_on.setdefault(uuid, []).append(var)
                    else:
                        share_on.setdefault(uuid, []).append((var, need))
            m.add(sum(picks) == need.count).only_enforce_if(use)
        for uuid, card in gpus.items():
            holds = by_gpu.get(uuid, [])
            whole = whole_on.get(uuid, [])
            shares = share_on.get(uuid, [])
            migs = mig_on.get(uuid, [])
            others = [v for v, _ in shares] + [v for v, *_ in migs]
            for pick in whole:  # alone on the GPU, every hold gone
                for other in whole + others:
                    if other is not pick:
                        m.add_implication(pick, other.Not())
                for i, hold in holds:
                    needs_gone(pick, i, hold)
            if shares:
                for pick, _ in shares:
                    for i, hold in holds:
                        if hold.whole or hold.slices:
                            needs_gone(pick, i, hold)
                some = m.new_bool_var("")
                m.add_bool_or([v for v, _ in shares]).only_enforce_if(some)
                m.add_bool_and([v.Not() for v, _ in shares]).only_enforce_if(some.Not())
                for cap, compute in ((card.compute, True), (card.memory_mib, False)):
                    terms: list[cp_model.LinearExprT] = []
                    for i, hold in holds:
                        amount = hold.compute if compute else hold.memory_mib
                        if hold.whole or hold.slices or not amount:
                            continue
                        freed = gone(i, hold)
                        terms.append(amount if freed is None else amount * (1 - freed))
                    for pick, need in shares:
                        terms.append((need.compute if compute else need.memory_mib) * pick)
                    m.add(sum(terms) <= cap).only_enforce_if(some)
            for pick, start, size, media in migs:
                slices = set(range(start, start + size))
                for i, hold in holds:
                    if hold.whole or hold.slices & slices or (media and hold.media):
                        needs_gone(pick, i, hold)
            for (a, sa, za, ma), (b, sb, zb, mb) in itertools.combinations(migs, 2):
                if set(range(sa, sa + za)) & set(range(sb, sb + zb)) or (ma and mb):
                    m.add_bool_or([a.Not(), b.Not()])
    if ways:
        m.add_bool_or(ways)
    return True


def _hint(
    m: cp_model.CpModel, solver: cp_model.CpSolver, evict: Mapping[str, cp_model.IntVar]
) -> None:
    """Start the next stage from this one's answer (it is feasible there)."""
    m.clear_hints()  # type: ignore[no-untyped-call]
    for var in evict.values():
        m.add_hint(var, solver.value(var))
