"""Which running pods to evict so a refused pod fits: the fewest, lowest-priority victims.

A preemptor lands on one node, so its victims are all there: for each node a small CP-SAT model
with one boolean `evict` per candidate pod there chooses a victim set minimizing the policy's
terms lexicographically (`Term`s in `order`: victims, then the sum of their priorities, then the
devices they hold — by default; each stage solved, proven, and fixed before the next), never
more than `max_victims`, never more of a PodDisruptionBudget's pods than it allows; the best set
over the cluster is the best of the nodes' answers. Whether the preemptor then fits is not
modelled twice: the caller's `fits` answers it with the allocator itself (the same device and
capacity model as any placement: whole GPUs, MIG placements, share capacity, CPU). A set that
does not fit is cut off with a no-good constraint (at least one candidate outside the set is
evicted too) and that node is solved again. The cut removes only sets that cannot fit, because
fitting is monotone in the set (evicting more only frees more), so the first set that fits is
the optimum (a logic-based Benders loop; `Choice.proven` says whether every node's model was
proven). `WholeGpus`, when the caller knows it, adds a necessary condition (enough whole GPUs
free after the eviction), so the allocator is asked about few sets.

The caller decides who may be a candidate (a lower priority than the preemptor's, not leaving
already); `choose` refuses a candidate of equal or higher priority outright. Pure: ortools only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
    #: The GPUs its claims touch (uuids), for `WholeGpus`.
    gpus: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Choice:
    #: The node the preemptor goes to; None: no victim set lets it fit.
    node: str | None
    victims: tuple[str, ...] = ()
    #: Every master solve was proven optimal by CP-SAT: no smaller/lower set fits.
    proven: bool = True
    #: How many victim sets the allocator checked.
    checks: int = 0
    #: Why none (empty when a set was found).
    reason: str = ""
    #: Sets found not to fit, in the order tried (for explanations and tests).
    tried: tuple[tuple[str, frozenset[str]], ...] = field(default=())


Fits = Callable[[str, frozenset[str]], bool]


@dataclass(frozen=True)
class WholeGpus:
    """A necessary condition the master model keeps (a relaxation, never the whole rule): the
    preemptor needs `need` whole GPUs free on its node. A GPU is free after the eviction when
    it is free now (`free`, per node) or when every candidate touching it (`Candidate.gpus`) is
    a victim and nothing else holds it (`freeable`, per node: the GPUs only candidates hold)."""

    need: int
    free: Mapping[str, int]
    freeable: Mapping[str, frozenset[str]]


def choose(
    preemptor_priority: int,
    candidates: Sequence[Candidate],
    fits: Fits,
    *,
    max_victims: int,
    budgets: Mapping[str, int] | None = None,
    order: Sequence[Term] = DEFAULT_ORDER,
    whole: WholeGpus | None = None,
    max_checks: int = 64,
    time_limit_s: float = 2.0,
) -> Choice:
    """The best victim set for a preemptor, or why there is none.

    `fits(node, victims)`: whether the preemptor fits on `node` once `victims` are gone (the
    caller frees a shared claim only when every pod using it is a victim). `budgets`: each
    PodDisruptionBudget's name -> the disruptions it allows now. `whole`: what the preemptor
    needs of whole GPUs, when the caller knows it (the master then proposes only sets that free
    enough of them, so the allocator is asked about few sets)."""
    for c in candidates:
        if c.priority >= preemptor_priority:
            raise ValueError(
                f"candidate {c.key} has priority {c.priority}, not below the preemptor's "
                f"{preemptor_priority}"
            )
    if not candidates:
        return Choice(None, reason="no running pod of lower priority holds devices on its nodes")
    budgets = dict(budgets or {})
    usable: dict[str, list[Candidate]] = {}
    for c in candidates:
        usable.setdefault(c.node, []).append(c)
    lowest = min(c.priority for c in candidates)
    checks = 0
    tried: list[tuple[str, frozenset[str]]] = []
    cuts: dict[str, list[frozenset[str]]] = {n: [] for n in usable}
    #: Nodes where evicting every candidate was checked (and found enough).
    enough: set[str] = set()
    #: Each node's best set not cut off yet (None: none; _UNKNOWN: not found in time).
    best: dict[str, _Answer | str | None] = {}

    def solve(node: str) -> None:
        best[node] = _master(
            usable[node], cuts[node], max_victims, budgets, order, whole, lowest, time_limit_s
        )

    for node in usable:
        solve(node)
    while checks < max_checks:
        live = {n: a for n, a in best.items() if isinstance(a, _Answer)}
        # Proven: every node's best was proven optimal, or proven to have none.
        proven = all(a is None or (isinstance(a, _Answer) and a.optimal) for a in best.values())
        if not live:
            return Choice(
                None,
                proven=proven,
                checks=checks,
                reason=f"no set of at most {max_victims} lower-priority pods that their "
                "PodDisruptionBudgets allow to evict frees enough"
                + ("" if proven else " (not proven: a search ran out of time)"),
                tried=tuple(tried),
            )
        node = min(live, key=lambda n: (live[n].values, n))
        victims = live[node].victims
        checks += 1
        if fits(node, victims):
            return Choice(node, tuple(sorted(victims)), proven, checks, "", tuple(tried))
        tried.append((node, victims))
        cuts[node].append(victims)
        if node not in enough:
            # Once per node: is evicting every candidate there enough at all? If not, the
            # node is out (one check instead of a cut per set).
            every = frozenset(c.key for c in usable[node])
            if every != victims:
                checks += 1
                if not fits(node, every):
                    tried.append((node, every))
                    best[node] = None
                    continue
            enough.add(node)
        solve(node)
    return Choice(
        None,
        proven=False,
        checks=checks,
        reason=f"gave up after checking {checks} victim sets",
        tried=tuple(tried),
    )


@dataclass(frozen=True)
class _Answer:
    """A node's best victim set: its cost per term (in the policy's order)."""

    values: tuple[int, ...]
    victims: frozenset[str]
    optimal: bool


_UNKNOWN = "unknown"


def _master(
    found: Sequence[Candidate],
    cuts: Sequence[frozenset[str]],
    max_victims: int,
    budgets: Mapping[str, int],
    order: Sequence[Term],
    whole: WholeGpus | None,
    lowest: int,
    time_limit_s: float,
) -> _Answer | str | None:
    """The best set on one node not cut off yet; None when there is none (proven), _UNKNOWN
    when CP-SAT found none in time. The victims of one preemptor are all on its node, so the
    best set over the cluster is the best of the nodes' (each node one small model)."""
    m = cp_model.CpModel()
    evict = {c.key: m.new_bool_var(f"evict_{i}") for i, c in enumerate(found)}
    # At least one victim: the preemptor was refused without any.
    m.add_bool_or(list(evict.values()))
    if whole is not None and whole.need > 0:
        _whole_gpus(m, found[0].node, found, evict, whole)
    m.add(sum(evict.values()) <= max_victims)
    for name, allowed in budgets.items():
        members = [evict[c.key] for c in found if name in c.budgets]
        if members:
            m.add(sum(members) <= max(allowed, 0))
    for victims in cuts:
        others = [evict[c.key] for c in found if c.key not in victims]
        if not others:
            return None
        m.add_bool_or(others)
    terms = {
        Term.victims: sum(evict.values()),
        Term.priority: sum((c.priority - lowest) * evict[c.key] for c in found),
        Term.devices: sum(max(c.devices, 0) * evict[c.key] for c in found),
    }
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = time_limit_s
    optimal = True
    values = []
    for term in order:
        expr = terms[term]
        m.minimize(expr)
        solver.solve(m)
        status = solver.status_name()
        if status == "INFEASIBLE":
            return None
        if status not in ("OPTIMAL", "FEASIBLE"):
            return _UNKNOWN
        optimal = optimal and status == "OPTIMAL"
        values.append(int(solver.objective_value))
        # The next stage keeps this one's best (the lexicographic order).
        m.add(expr == values[-1])
        _hint(m, solver, evict)
    victims = frozenset(k for k, v in evict.items() if solver.value(v))
    return _Answer(tuple(values), victims, optimal)


def _whole_gpus(
    m: cp_model.CpModel,
    node: str,
    found: Sequence[Candidate],
    evict: Mapping[str, cp_model.IntVar],
    whole: WholeGpus,
) -> None:
    """Enough GPUs free on `node` after the eviction for the whole GPUs the preemptor needs."""
    freed = []
    for gpu in sorted(whole.freeable.get(node, frozenset())):
        holders = [evict[c.key] for c in found if gpu in c.gpus]
        if not holders:
            continue
        free = m.new_bool_var("")
        for holder in holders:
            m.add_implication(free, holder)
        freed.append(free)
    m.add(whole.free.get(node, 0) + sum(freed) >= whole.need)


def _hint(
    m: cp_model.CpModel, solver: cp_model.CpSolver, evict: Mapping[str, cp_model.IntVar]
) -> None:
    """Start the next stage from this one's answer (it is feasible there)."""
    m.clear_hints()  # type: ignore[no-untyped-call]
    for var in evict.values():
        m.add_hint(var, solver.value(var))
