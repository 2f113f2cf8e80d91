"""The batch model at large sizes: its size grows with the pairs it holds, not with their square,
and its building keeps to the caller's deadline."""

from __future__ import annotations

import dataclasses
import time

import pytest
from checker import assert_valid, gpu_claim, make_node, pod

from drasat.solver import Mode, Problem, SolveParams, Status, solve
from drasat.solver import model as model_module
from drasat.solver.cache import SolverCache
from drasat.solver.demand import normalize
from drasat.solver.inventory import view_of
from drasat.solver.model import PodEntry
from drasat.solver.rules import Rules


def _share_pods(count: int, *, group: str | None) -> tuple[Problem, list[PodEntry], Rules]:
    """`count` pods of one share claim each on one node of 4 T4s; each claim its own share
    group (as v1 gives every share claim), or all in `group`."""
    node = make_node("n1", "T4", count=4)
    pods = []
    for i in range(count):
        claim = gpu_claim(f"c{i}", share={"compute": 10})
        claim = dataclasses.replace(claim, share_group=group or claim.uid)
        pods.append(pod(f"p{i}", claim))
    problem = Problem(nodes=(node,), pods=tuple(pods))
    cache = SolverCache()
    view = view_of(node, cache)
    rules = Rules(problem.policy, (view,), cache)
    entries = [PodEntry(p, 0, tuple(normalize(c, p) for c in p.claims), (view,)) for p in pods]
    return problem, entries, rules


def test_share_claims_of_their_own_group_add_no_spread_constraints() -> None:
    # A group of one share claim takes one GPU, so it never spreads: the constraints that keep a
    # spread group's GPUs from other shares of its namespace were one per (group, GPU, other
    # share), 40 x 4 x 39 here, most of a large v1 model's building.
    _, entries, rules = _share_pods(40, group=None)
    built = model_module.build(entries, rules)
    constraints = len(built.model.proto.constraints)
    assert constraints < 40 * 20
    assert not any(v.name.startswith("spread_") for v in built.model.proto.variables)


def test_a_spread_group_keeps_its_gpus_from_other_shares() -> None:
    # Several claims of one group still get the spread rule (the shares of one ResourceClaim
    # over several GPUs take GPUs no other share claim of their namespace uses).
    _, entries, rules = _share_pods(3, group="one-claim")
    built = model_module.build(entries, rules)
    assert any(v.name.startswith("spread_") for v in built.model.proto.variables)


def test_building_stops_at_the_deadline() -> None:
    _, entries, rules = _share_pods(4, group=None)
    with pytest.raises(model_module.OutOfTime):
        model_module.build(entries, rules, deadline=time.monotonic() - 1)


def test_batch_answers_with_the_warm_start_when_the_model_is_not_built_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The model of tens of thousands of pods takes longer to build than the caller's whole time
    # limit: the batch stops building and answers with the warm start, FEASIBLE, no bound.
    seen: list[float | None] = []

    def too_slow(*args: object, deadline: float | None = None, **kwargs: object) -> object:
        seen.append(deadline)
        raise model_module.OutOfTime

    monkeypatch.setattr(model_module, "build", too_slow)
    problem = Problem(
        nodes=(make_node("n1", "T4", count=2),),
        pods=tuple(pod(f"p{i}", gpu_claim(f"c{i}")) for i in range(3)),
    )
    deadline = time.monotonic() + 60
    solution = solve(problem, SolveParams(mode=Mode.batch, deadline=deadline))
    assert_valid(problem, solution)
    assert seen and seen[0] is not None and seen[0] < deadline
    assert solution.status is Status.FEASIBLE
    assert solution.best_bound is None and solution.gap is None
    assert len(solution.placements) == 2
    assert len(solution.unplaced) == 1 and solution.unplaced[0].reasons
