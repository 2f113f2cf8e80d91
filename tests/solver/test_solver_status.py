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
    real = placement.nodes.evaluate_each

    def unproven(*args: object, **kwargs: object) -> list[placement.nodes.Evaluation]:
        import dataclasses

        out = real(*args, **kwargs)  # type: ignore[arg-type]
        return [dataclasses.replace(e, optimal=False) for e in out]

    monkeypatch.setattr(placement.nodes, "evaluate_each", unproven)
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
