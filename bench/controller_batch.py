"""The v1 controller's batch path as a policy of the openb replay: `--window K`.

The controller gathers the pods pending in one cycle and solves them together in one solver
call (issue 15 item 2). Here the replay's arrivals stand in for the pending pods: when a pod
arrives and has no decision yet, it and the next K - 1 arrivals form one window, solved in one
`batch_solve` call; the replay then applies the window's decisions in arrival order, and the
allocation metric is still taken after every pod, so a window's look-ahead is the only thing
that differs from online placement. K = 1 is a one-pod batch solve per arrival.

`batch_solve` is the single function that stands for the controller's cycle solve. Until the
controller exists it is `drasat.solver.solve` in batch mode with the policy's budget; when the
controller exposes its own cycle function, `set_batch_solver` (or `--batch-solver
module:function` on the command line) swaps it in and nothing else changes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from bench.drasat_policy import LOCAL, POLICIES, DrasatOnline
from bench.openb_sim import Policy
from drasat.api.policy import AllocationPolicySpec
from drasat.solver import Mode, Problem, Solution, SolveParams, SolverCache, solve

#: One call of the controller's cycle: the window's pods on the current cluster -> placements.
BatchSolver = Callable[[Problem, SolverCache, float | None], Solution]

#: `drasat@w8`: the drasat policy `drasat` through the batch path with windows of 8 pods.
WINDOW_MARK = "@w"


def solver_batch(problem: Problem, cache: SolverCache, time_limit_s: float | None) -> Solution:
    """The solver's batch mode as the controller will call it: one model for every pod of the
    window (warm-started from the online placement, which it never falls below), no
    explanations (the controller explains only pods that stay unplaced), the policy's budget
    unless `time_limit_s` overrides it."""
    params = SolveParams(mode=Mode.batch, explain=False, cache=cache, time_limit_s=time_limit_s)
    return solve(problem, params)


_batch_solver: BatchSolver = solver_batch


def set_batch_solver(function: BatchSolver) -> None:
    """Replace the cycle solve (the controller's own, once it exists) for every later replay."""
    global _batch_solver
    _batch_solver = function


def load_batch_solver(spec: str) -> BatchSolver:
    """`package.module:function` -> that function (for `--batch-solver`)."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise SystemExit(f"--batch-solver {spec!r}: expected package.module:function")
    try:
        function = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"--batch-solver {spec!r}: {exc}") from None
    if not callable(function):
        raise SystemExit(f"--batch-solver {spec!r}: not a function")
    return function  # type: ignore[no-any-return]


class DrasatWindow(DrasatOnline):
    """drasat's placement through the batch path, `window` arrivals per solver call."""

    def __init__(
        self,
        name: str,
        policy: AllocationPolicySpec,
        *,
        window: int,
        target: bool = True,
        time_limit_s: float | None = None,
    ) -> None:
        super().__init__(name, policy, chunk=window, target=target)
        self.time_limit_s = time_limit_s

    def solve_chunk(self, problem: Problem) -> Solution:
        return _batch_solver(problem, self.cache, self.time_limit_s)


def parse_name(name: str) -> tuple[str, int]:
    """`drasat@w8` -> (`drasat`, 8)."""
    base, _, window = name.partition(WINDOW_MARK)
    if not window.isdigit() or int(window) < 1:
        raise SystemExit(f"policy {name!r}: the window must be a positive integer, e.g. drasat@w8")
    return base, int(window)


def factory(name: str, *, time_limit_s: float | None = None) -> Callable[[], Policy]:
    """`drasat@wK` (any drasat policy, `-local` too) -> a DrasatWindow constructor."""
    base, window = parse_name(name)
    policy = base.removesuffix(LOCAL)
    if policy not in POLICIES:
        known = ", ".join(f"{p}{WINDOW_MARK}K" for p in POLICIES)
        raise SystemExit(f"unknown drasat policy {name!r}; known: {known}")
    target = not base.endswith(LOCAL)
    return lambda: DrasatWindow(
        name, POLICIES[policy], window=window, target=target, time_limit_s=time_limit_s
    )
