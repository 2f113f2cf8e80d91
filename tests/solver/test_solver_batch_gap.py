"""Batch mode's reported bound and gap when it keeps the warm-started online solution.

CP-SAT's bound is of the combined objective (primary x scale - secondary); the online solution
is scored on the primary level only. The fallback must report both on the primary level and not
claim a 0% gap it has not proven.
"""

from __future__ import annotations

import pytest
from checker import assert_valid, gpu_claim, make_node, pod

from drasat.solver import Mode, Problem, SolveParams, Status, solve, solving
from drasat.solver.model import Built


def _two_pods_one_gpu() -> Problem:
    return Problem(
        nodes=(make_node("n1", "T4", count=1),),
        pods=(pod("a", gpu_claim("a")), pod("b", gpu_claim("b"))),
    )


def test_fallback_without_a_cp_sat_solution_reports_a_real_gap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CP-SAT found nothing in its time (faked): the bound is every pod placed, gap > 0."""

    def no_solution(
        built: Built, budget: solving.Budget, hint: dict[int, int] | None = None
    ) -> solving.Result:
        return solving.Result(Status.UNKNOWN, solving._solver(budget, 0.001), 0.0, 0.0, 0.0)

    monkeypatch.setattr(solving, "solve", no_solution)
    problem = _two_pods_one_gpu()
    solution = solve(problem, SolveParams(mode=Mode.batch))
    assert_valid(problem, solution)
    assert len(solution.placements) == 1  # the online solution, kept
    assert solution.status is Status.FEASIBLE
    assert solution.best_bound > solution.objective > 0
    assert solution.gap == pytest.approx(
        (solution.best_bound - solution.objective) / solution.objective
    )
    assert solution.gap > 0.5  # one of two equal pods placed: the bound is about twice that


def test_fallback_uses_cp_sat_bound_on_the_primary_scale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CP-SAT's solution is discarded (made worse than online here): its bound, converted to
    the primary level, is used. One GPU for two pods is proven optimal, so the gap is 0 and the
    bound equals the objective (not a combined-scale number many times larger)."""
    real = solving.solve

    def worse(
        built: Built, budget: solving.Budget, hint: dict[int, int] | None = None
    ) -> solving.Result:
        result = real(built, budget, hint)
        assert result.primary_bound is not None
        result.primary = -1
        return result

    monkeypatch.setattr(solving, "solve", worse)
    solution = solve(_two_pods_one_gpu(), SolveParams(mode=Mode.batch))
    assert len(solution.placements) == 1
    assert solution.best_bound == solution.objective
    assert solution.gap == 0.0


def test_primary_bound_of_a_solved_model_matches_its_primary() -> None:
    problem = _two_pods_one_gpu()
    captured: list[solving.Result] = []
    real = solving.solve

    def keep(
        built: Built, budget: solving.Budget, hint: dict[int, int] | None = None
    ) -> solving.Result:
        captured.append(real(built, budget, hint))
        return captured[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(solving, "solve", keep)
        solve(problem, SolveParams(mode=Mode.batch))
    (result,) = captured
    assert result.status is Status.OPTIMAL
    assert result.primary_bound == result.primary


def test_whatif_shows_the_fallback_gap(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The what-if's summary line (the classic example on the embedded compact cluster) shows
    the kept online solution as FEASIBLE with a bound above its objective, not a 0.00% gap; the
    v1 default's line says FEASIBLE too."""
    from drasat.cli import main

    def no_solution(
        built: Built, budget: solving.Budget, hint: dict[int, int] | None = None
    ) -> solving.Result:
        return solving.Result(Status.UNKNOWN, solving._solver(budget, 0.001), 0.0, 0.0, 0.0)

    monkeypatch.setattr(solving, "solve", no_solution)
    main.main(["whatif", "-f", "drasat/classic/whatif/default-manifests-classic.yaml"])
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("solver:")]
    assert line.startswith("solver: FEASIBLE (batch: not proven optimal), objective ")
    assert "gap 0.00%" not in line
    main.main(["whatif"])
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("solver:")]
    # The embedded v1 default solves in rounds (its optional pod's CPU fallback is a second one):
    # every round says FEASIBLE, none claims a proof.
    assert line.startswith("solver: FEASIBLE ") and "OPTIMAL" not in line
    assert "not proven optimal" in line and "gap 0.00%" not in line
