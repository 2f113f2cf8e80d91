"""What a Solution says it knows: OPTIMAL only where CP-SAT proved the whole set optimal.

Online mode decides pod by pod, each the best of its candidate nodes given the pods before it;
that proves nothing about the whole set, so it reports PER_POD_OPTIMAL and no bound. Batch mode
reports CP-SAT's status and bound, but only for a model that held every node each pod fits on.
"""

from __future__ import annotations

import pytest
from checker import assert_valid, gpu_claim, make_node, pod

from drasat import policyfiles
from drasat.solver import Mode, Problem, SolveParams, Status, placement, solve


def _spread_two_and_one_t4() -> Problem:
    """Spread policy; nodes of 2 and 1 T4; pods of 1 then 2 GPUs. Online puts the 1-GPU pod on
    the emptier (2-GPU) node and the 2-GPU pod then fits nowhere; batch places both."""
    return Problem(
        nodes=(make_node("n2", "T4", count=2), make_node("n1", "T4", count=1)),
        pods=(pod("one", gpu_claim("one")), pod("two", gpu_claim("two", count=2))),
        policy=policyfiles.shipped("spread").spec,
    )


def test_online_reports_per_pod_optimality_and_no_bound() -> None:
    problem = _spread_two_and_one_t4()
    online = solve(problem, SolveParams(mode=Mode.online))
    assert_valid(problem, online)
    assert [p.pod for p in online.placements] == ["default/one"]
    assert [p.node for p in online.placements] == ["n2"]
    assert online.status is Status.PER_POD_OPTIMAL
    assert online.status is not Status.OPTIMAL
    assert online.best_bound is None and online.gap is None
    assert online.bound_text() == "no bound"
    assert "each pod" in online.optimality_text()


def test_batch_places_both_and_proves_it() -> None:
    problem = _spread_two_and_one_t4()
    batch = solve(problem, SolveParams(mode=Mode.batch))
    assert_valid(problem, batch)
    assert {p.pod: p.node for p in batch.placements} == {
        "default/one": "n1",
        "default/two": "n2",
    }
    assert batch.status is Status.OPTIMAL
    assert batch.best_bound == batch.objective and batch.gap == 0.0
    assert batch.bound_text().startswith("best bound ")
    assert "gap 0.00%" in batch.bound_text()


def test_online_with_a_per_node_time_out_is_only_feasible(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A per-node evaluation that did not prove its optimum leaves no per-pod optimality."""
    import dataclasses

    real = placement.nodes.evaluate_each
    real_one = placement.nodes.evaluate

    def unproven(*args: object, **kwargs: object) -> list[placement.nodes.Evaluation]:
        out = real(*args, **kwargs)  # type: ignore[arg-type]
        return [dataclasses.replace(e, optimal=False) for e in out]

    def unproven_one(*args: object, **kwargs: object) -> placement.nodes.Evaluation:
        return dataclasses.replace(real_one(*args, **kwargs), optimal=False)  # type: ignore[arg-type]

    # Every node's pass (`evaluate_each`) and one node per group of equal nodes (`evaluate`).
    monkeypatch.setattr(placement.nodes, "evaluate_each", unproven)
    monkeypatch.setattr(placement.nodes, "evaluate", unproven_one)
    problem = _spread_two_and_one_t4()
    online = solve(problem, SolveParams(mode=Mode.online))
    assert online.status is Status.FEASIBLE
    assert online.best_bound is None and online.gap is None


def test_batch_over_a_pruned_model_is_not_optimal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch model keeps each pod's best nodes only: CP-SAT's proof and bound are then of
    that smaller model, not of the problem, and the solution must not say OPTIMAL."""
    monkeypatch.setattr(placement, "_BATCH_NODE_BUDGET", 1)
    monkeypatch.setattr(placement, "_MIN_NODES_PER_POD", 1)
    problem = Problem(
        nodes=tuple(make_node(f"n{i}", "T4", count=1) for i in range(3)),
        pods=(pod("a", gpu_claim("a")),),
    )
    batch = solve(problem, SolveParams(mode=Mode.batch))
    assert_valid(problem, batch)
    assert len(batch.placements) == 1
    assert batch.status is Status.FEASIBLE
    assert batch.best_bound is None and batch.gap is None


def test_batch_over_an_unpruned_model_keeps_cp_sat_status() -> None:
    problem = Problem(
        nodes=tuple(make_node(f"n{i}", "T4", count=1) for i in range(3)),
        pods=(pod("a", gpu_claim("a")),),
    )
    batch = solve(problem, SolveParams(mode=Mode.batch))
    assert batch.status is Status.OPTIMAL
    assert batch.gap == 0.0


def test_online_with_a_per_node_model_that_timed_out_is_only_feasible(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A two-claim pod is decided by a small CP-SAT model per node. When that model ends without
    an answer (a time-out, faked), 'does not fit here' is not proven: no per-pod optimality."""
    from drasat.solver import solving
    from drasat.solver.model import Built

    def unknown(
        built: Built, budget: solving.Budget, hint: dict[int, int] | None = None
    ) -> solving.Result:
        return solving.Result(Status.UNKNOWN, solving._solver(budget, 0.001), 0.0, 0.0, 0.0)

    monkeypatch.setattr(solving, "solve", unknown)
    problem = Problem(
        nodes=(make_node("n1", "L4", count=3),),
        pods=(pod("p", gpu_claim("p-a", count=2), gpu_claim("p-b")),),
    )
    online = solve(problem, SolveParams(mode=Mode.online, explain=False))
    assert online.placements == ()
    assert online.status is Status.FEASIBLE
    assert online.best_bound is None


# -- what the bound text claims (issue 26 item 4: never "FEASIBLE ... gap 0.00%") ----------------


def test_a_gap_of_zero_is_shown_only_for_what_is_proven_optimal() -> None:
    from drasat.solver.problem import PLACEMENTS_PROVEN, bound_text

    assert bound_text(121.0, 0.0, Status.OPTIMAL) == "best bound 121, gap 0.00%"
    # A FEASIBLE solve that reached its bound reached it on the placements alone.
    assert bound_text(121.0, 0.0, Status.FEASIBLE) == f"best bound 121, {PLACEMENTS_PROVEN}"
    assert "0.00%" not in bound_text(121.0, 0.0, Status.FEASIBLE)
    # Too small to show in two decimals, but not zero.
    assert bound_text(1e8, 2e-7, Status.FEASIBLE) == "best bound 1e+08, gap < 0.01%"
    assert bound_text(1e8, 0.25, Status.FEASIBLE) == "best bound 1e+08, gap 25.00%"
    assert bound_text(None, None, Status.FEASIBLE) == "no bound"


def test_a_deadline_already_past_still_gives_every_pod_an_answer() -> None:
    """SolveParams.deadline bounds the whole batch solve: CP-SAT gets almost nothing and the
    pods it leaves out get a short reason instead of a per-node explanation; the solution is
    still valid (the warm start)."""
    import time

    problem = Problem(
        nodes=(make_node("n1", "T4", count=1),),
        pods=(pod("one", gpu_claim("one")), pod("two", gpu_claim("two"))),
    )
    found = solve(problem, SolveParams(mode=Mode.batch, deadline=time.monotonic() - 1))
    assert_valid(problem, found)
    assert len(found.placements) == 1 and len(found.unplaced) == 1
    (reasons,) = [r.reasons for r in found.unplaced]
    # No time for the batch model at all: the warm start's placements are the answer.
    assert reasons == (
        "not placed by the first pass, and no time left for the batch model (the time limit "
        "ran out)",
    )
    assert found.best_bound is None
    # Without a deadline the same pod is explained node by node.
    explained = solve(problem, SolveParams(mode=Mode.batch))
    assert "time limit ran out" not in " ".join(explained.unplaced[0].reasons)
