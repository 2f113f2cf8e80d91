"""Which running pods to evict so a refused pod fits: the fewest, lowest-priority victims.

A CP-SAT model with one boolean `evict` per candidate pod and one `on` per node (the preemptor
lands on one node, so its victims are all there) chooses a victim set minimizing the policy's
terms lexicographically (`Order`: victims, then the sum of their priorities, then the devices
they hold — by default), never more than `max_victims`, and never more of a PodDisruptionBudget's
pods than it allows. Whether the preemptor then fits is not modelled twice: the caller's `fits`
answers it with the allocator itself (the same device and capacity model as any placement:
whole GPUs, MIG placements, share capacity, CPU). A set that does not fit is cut off with a
no-good constraint: on that node, at least one candidate outside the set is evicted too. The cut
removes only sets that cannot fit, because fitting is monotone in the set (evicting more only
frees more), so the first set that fits is the optimum (a logic-based Benders loop, each master
solve proven optimal by CP-SAT; `Choice.proven` says when a master solve was not).

The caller decides who may be a candidate (a lower priority than the preemptor's, not leaving
already); this module never evicts one of equal or higher priority because it is never given
one: `choose` refuses such a candidate outright. Pure: ortools only.
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


def choose(
    preemptor_priority: int,
    candidates: Sequence[Candidate],
    fits: Fits,
    *,
    max_victims: int,
    budgets: Mapping[str, int] | None = None,
    order: Sequence[Term] = DEFAULT_ORDER,
    max_checks: int = 64,
    time_limit_s: float = 2.0,
) -> Choice:
    """The best victim set for a preemptor, or why there is none.

    `fits(node, victims)`: whether the preemptor fits on `node` once `victims` are gone (the
    caller frees a shared claim only when every pod using it is a victim). `budgets`: each
    PodDisruptionBudget's name -> the disruptions it allows now."""
    for c in candidates:
        if c.priority >= preemptor_priority:
            raise ValueError(
                f"candidate {c.key} has priority {c.priority}, not below the preemptor's "
                f"{preemptor_priority}"
            )
    budgets = dict(budgets or {})
    by_node: dict[str, list[Candidate]] = {}
    for c in candidates:
        by_node.setdefault(c.node, []).append(c)
    checks = 0
    tried: list[tuple[str, frozenset[str]]] = []
    # A node where evicting every candidate is not enough can never do: one check each.
    usable: dict[str, list[Candidate]] = {}
    for node, found in sorted(by_node.items()):
        every = frozenset(c.key for c in found)
        checks += 1
        if fits(node, every):
            usable[node] = found
        else:
            tried.append((node, every))
    if not usable:
        why = "evicting every lower-priority pod would not free enough on any node"
        if not candidates:
            why = "no running pod of lower priority holds devices on its nodes"
        return Choice(None, checks=checks, reason=why, tried=tuple(tried))
    cuts: list[tuple[str, frozenset[str]]] = []
    proven = True
    while checks < max_checks:
        found_set = _master(usable, cuts, max_victims, budgets, order, time_limit_s)
        if found_set is None:
            return Choice(
                None,
                proven=proven,
                checks=checks,
                reason=f"no set of at most {max_victims} lower-priority pods that their "
                "PodDisruptionBudgets allow to evict frees enough",
                tried=tuple(tried),
            )
        node, victims, optimal = found_set
        proven = proven and optimal
        checks += 1
        if fits(node, victims):
            return Choice(node, tuple(sorted(victims)), proven, checks, "", tuple(tried))
        tried.append((node, victims))
        cuts.append((node, victims))
    return Choice(
        None,
        proven=False,
        checks=checks,
        reason=f"gave up after checking {checks} victim sets",
        tried=tuple(tried),
    )


def _master(
    usable: Mapping[str, Sequence[Candidate]],
    cuts: Sequence[tuple[str, frozenset[str]]],
    max_victims: int,
    budgets: Mapping[str, int],
    order: Sequence[Term],
    time_limit_s: float,
) -> tuple[str, frozenset[str], bool] | None:
    """The best set not cut off yet, its node, and whether CP-SAT proved each stage."""
    m = cp_model.CpModel()
    on = {n: m.new_bool_var(f"on_{i}") for i, n in enumerate(sorted(usable))}
    evict: dict[str, cp_model.IntVar] = {}
    pods: dict[str, Candidate] = {}
    for node, found in usable.items():
        for c in found:
            var = m.new_bool_var(f"evict_{len(evict)}")
            m.add_implication(var, on[node])
            evict[c.key] = var
            pods[c.key] = c
    m.add_exactly_one(on.values())
    for node, found in usable.items():
        # At least one victim on the chosen node: the preemptor was refused without any.
        m.add_bool_or([evict[c.key] for c in found]).only_enforce_if(on[node])
    m.add(sum(evict.values()) <= max_victims)
    for name, allowed in budgets.items():
        members = [evict[k] for k, c in pods.items() if name in c.budgets]
        if members:
            m.add(sum(members) <= max(allowed, 0))
    for node, victims in cuts:
        others = [evict[c.key] for c in usable[node] if c.key not in victims]
        if others:
            m.add_bool_or(others).only_enforce_if(on[node])
        else:
            m.add(on[node] == 0)
    lowest = min(c.priority for c in pods.values())
    terms = {
        Term.victims: sum(evict.values()),
        Term.priority: sum((c.priority - lowest) * evict[k] for k, c in pods.items()),
        Term.devices: sum(max(c.devices, 0) * evict[k] for k, c in pods.items()),
    }
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = time_limit_s
    optimal = True
    for term in order:
        expr = terms[term]
        m.minimize(expr)
        solver.solve(m)
        status = solver.status_name()
        if status not in ("OPTIMAL", "FEASIBLE"):
            return None
        optimal = optimal and status == "OPTIMAL"
        # The next stage keeps this one's best (the lexicographic order).
        m.add(expr == int(solver.objective_value))
        _hint(m, solver, on, evict)
    node = next(n for n, v in on.items() if solver.value(v))
    victims = frozenset(k for k, v in evict.items() if solver.value(v))
    return node, victims, optimal


def _hint(
    m: cp_model.CpModel,
    solver: cp_model.CpSolver,
    on: Mapping[str, cp_model.IntVar],
    evict: Mapping[str, cp_model.IntVar],
) -> None:
    """Start the next stage from this one's answer (it is feasible there)."""
    m.clear_hints()  # type: ignore[no-untyped-call]
    for var in [*on.values(), *evict.values()]:
        m.add_hint(var, solver.value(var))
