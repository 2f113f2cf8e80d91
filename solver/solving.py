"""Running CP-SAT on a built model: lexicographic objective, budget, hints, assumption cores.

The objective is reported as one number, `primary * (secondary bound + 1) - secondary`: a higher
value is better and every unit of the primary goal outweighs all secondary costs. When those
weights fit comfortably in CP-SAT's integers the model is solved once with that objective;
otherwise in two stages (maximize primary; fix it; minimize secondary), each with half the time.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from drasat.solver.model import Built
from drasat.solver.problem import Status
from drasat.solver.reasons import Label

_SINGLE_STAGE_LIMIT = 2**50


def _status(solver: cp_model.CpSolver) -> Status:
    return Status(solver.status_name())


@dataclass(frozen=True)
class Budget:
    time_limit_s: float
    workers: int
    seed: int


@dataclass
class Result:
    status: Status
    solver: cp_model.CpSolver
    objective: float
    best_bound: float
    wall_time_s: float
    #: Values of the two objective levels in the solution found (higher primary, lower secondary).
    primary: int = 0
    secondary: int = 0
    #: An upper bound on the primary level alone, from CP-SAT's bound (None: no solution found).
    primary_bound: int | None = None

    @property
    def has_solution(self) -> bool:
        return self.status in (Status.OPTIMAL, Status.FEASIBLE)

    def value(self, var: cp_model.IntVar) -> int:
        return int(self.solver.value(var))

    @property
    def gap(self) -> float:
        if not self.has_solution:
            return 0.0
        return abs(self.best_bound - self.objective) / max(1.0, abs(self.objective))


def _solver(budget: Budget, time_limit: float) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.001, time_limit)
    solver.parameters.num_workers = budget.workers
    solver.parameters.random_seed = budget.seed
    return solver


def solve(built: Built, budget: Budget, hint: dict[int, int] | None = None) -> Result:
    """Optimize the model's lexicographic objective within the budget."""
    started = time.perf_counter()
    scale = built.secondary_bound() + 1
    model = built.model
    if hint:
        model.clear_hints()  # type: ignore[no-untyped-call]
        for index, value in sorted(hint.items()):
            model.add_hint(model.get_bool_var_from_proto_index(index), value)
    primary_max = sum(c for c, _ in built.primary)
    if primary_max * scale < _SINGLE_STAGE_LIMIT:
        model.maximize(built.primary_expr() * scale - built.secondary_expr())
        solver = _solver(budget, budget.time_limit_s)
        solver.solve(model)
        status = _status(solver)
        if status not in (Status.OPTIMAL, Status.FEASIBLE):
            return Result(status, solver, 0.0, 0.0, time.perf_counter() - started)
        return Result(
            status,
            solver,
            solver.objective_value,
            solver.best_objective_bound,
            time.perf_counter() - started,
            int(solver.value(built.primary_expr())),
            int(solver.value(built.secondary_expr())),
            _primary_bound(solver.best_objective_bound, scale),
        )
    return _two_stages(built, budget, scale, started)


def _primary_bound(bound: float, scale: int) -> int:
    """The primary level's bound implied by a bound B on `primary * scale - secondary`.

    secondary <= scale - 1 (scale exceeds the sum of its |coefficients|), so
    primary * scale <= B + secondary <= B + scale - 1.
    """
    return math.floor((bound + scale - 1) / scale)


def _two_stages(built: Built, budget: Budget, scale: int, started: float) -> Result:
    model = built.model
    model.maximize(built.primary_expr())
    first = _solver(budget, budget.time_limit_s / 2)
    first.solve(model)
    status = _status(first)
    if status not in (Status.OPTIMAL, Status.FEASIBLE):
        return Result(status, first, 0.0, 0.0, time.perf_counter() - started)
    reached = int(first.objective_value)
    primary_bound = first.best_objective_bound
    model.clear_hints()  # type: ignore[no-untyped-call]
    for var in _all_bools(built):
        model.add_hint(var, int(first.value(var)))
    model.add(built.primary_expr() >= reached)
    model.minimize(built.secondary_expr())
    second = _solver(budget, max(0.001, budget.time_limit_s - (time.perf_counter() - started)))
    second.solve(model)
    status2 = _status(second)
    if status2 not in (Status.OPTIMAL, Status.FEASIBLE):
        return Result(
            status,
            first,
            reached * scale,
            primary_bound * scale,
            time.perf_counter() - started,
            reached,
            int(first.value(built.secondary_expr())),
            math.floor(primary_bound),
        )
    optimal = status is Status.OPTIMAL and status2 is Status.OPTIMAL
    objective = reached * scale - second.objective_value
    bound = primary_bound * scale - second.best_objective_bound
    return Result(
        Status.OPTIMAL if optimal else Status.FEASIBLE,
        second,
        objective,
        bound,
        time.perf_counter() - started,
        reached,
        int(second.objective_value),
        math.floor(primary_bound),
    )


def _all_bools(built: Built) -> list[cp_model.IntVar]:
    seen = list(built.at.values()) + list(built.claim_at.values()) + list(built.got.values())
    seen += [d.var for ds in built.devices.values() for d in ds]
    return seen


def core(built: Built, budget: Budget) -> list[Label] | None:
    """Rules (assumption labels) that together make the model infeasible; None: it is feasible.

    Single worker, as `sufficient_assumptions_for_infeasibility` requires.
    """
    model = built.model
    model.clear_objective()  # type: ignore[no-untyped-call]
    model.clear_assumptions()
    model.add_assumptions([model.get_bool_var_from_proto_index(i) for i in built.assumptions])
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = budget.time_limit_s
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = budget.seed
    solver.solve(model)
    if _status(solver) is not Status.INFEASIBLE:
        return None
    indices = solver.sufficient_assumptions_for_infeasibility()
    return [built.assumptions[i] for i in indices if i in built.assumptions]
