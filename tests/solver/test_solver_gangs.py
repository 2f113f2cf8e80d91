"""Gangs (issue 27 item 2): every pod of a gang placed, or none of its claims allocated; within
one value of a node label where the policy requires it. Exact small answers and a property."""

from __future__ import annotations

import dataclasses

import pytest
from checker import assert_valid, gpu_claim, make_node, pod
from hypothesis import given, settings
from hypothesis import strategies as st

from drasat.solver import Gang, Mode, NodeState, Problem, Solution, SolveParams, solve

MODES = [Mode.online, Mode.batch]


def _node(name: str, gpus: int, **labels: str) -> NodeState:
    return dataclasses.replace(
        make_node(name, "A100-40GB", count=gpus), labels=tuple(labels.items())
    )


def _members(gang: str, n: int, gpus: int = 2, priority: int = 0) -> list:
    return [
        pod(f"{gang}-{i}", gpu_claim(f"{gang}-{i}", count=gpus), priority=priority)
        for i in range(n)
    ]


def _gang(name: str, n: int, key: str | None = None, required: bool = True) -> Gang:
    return Gang(name, tuple(f"default/{name}-{i}" for i in range(n)), key, required)


def _solve(problem: Problem, mode: Mode) -> Solution:
    solution = solve(problem, SolveParams(mode=mode, time_limit_s=5))
    assert_valid(problem, solution)
    return solution


def _placed(solution: Solution) -> dict[str, str]:
    return {p.pod: p.node for p in solution.placements}


@pytest.mark.parametrize("mode", MODES)
def test_a_gang_that_half_fits_takes_nothing(mode: Mode) -> None:
    # 4 pods x 2 GPUs = 8 GPUs; the cluster has 6: without the gang, three pods would be placed.
    problem = Problem(
        nodes=(_node("n1", 4), _node("n2", 2)),
        pods=tuple(_members("g", 4)),
        gangs=(_gang("g", 4),),
    )
    solution = _solve(problem, mode)
    assert _placed(solution) == {}
    assert all(p.allocations == {} for p in solution.placements)
    reasons = {r.pod: r.reasons for r in solution.unplaced}
    assert reasons["default/g-0"][0] == (
        "gang g is placed whole or not at all: its 4 pods do not all fit together"
    )
    without = dataclasses.replace(problem, gangs=())
    assert len(_placed(_solve(without, mode))) == 3


@pytest.mark.parametrize("mode", MODES)
def test_two_gangs_that_each_half_fit_one_is_placed_whole(mode: Mode) -> None:
    # 8 GPUs: each gang of 4 x 2 GPUs fits alone; together they fit only one. Online order alone
    # would interleave them (a-0, b-0, ...) when listed so: the gang model places one whole.
    a, b = _members("a", 4), _members("b", 4)
    interleaved = tuple(p for pair in zip(a, b, strict=True) for p in pair)
    problem = Problem(
        nodes=(_node("n1", 4), _node("n2", 4)),
        pods=interleaved,
        gangs=(_gang("a", 4), _gang("b", 4)),
    )
    placed = _placed(_solve(problem, mode))
    assert set(placed) == {f"default/a-{i}" for i in range(4)}  # a's pods come first


@pytest.mark.parametrize("mode", MODES)
def test_required_topology_places_the_gang_in_one_rack(mode: Mode) -> None:
    # Rack x has 6 free GPUs over two nodes, rack y 8: the gang of 8 GPUs goes to y whole.
    problem = Problem(
        nodes=(
            _node("x1", 4, rack="x"),
            _node("x2", 2, rack="x"),
            _node("y1", 4, rack="y"),
            _node("y2", 4, rack="y"),
        ),
        pods=tuple(_members("g", 4)),
        gangs=(_gang("g", 4, "rack"),),
    )
    placed = _placed(_solve(problem, mode))
    assert sorted(placed.values()) == ["y1", "y1", "y2", "y2"]


@pytest.mark.parametrize("mode", MODES)
def test_required_topology_no_rack_holds_it_places_nothing(mode: Mode) -> None:
    # 12 free GPUs in all, but 6 per rack (and 4 on a node without the label): nothing.
    problem = Problem(
        nodes=(
            _node("x1", 4, rack="x"),
            _node("x2", 2, rack="x"),
            _node("y1", 4, rack="y"),
            _node("y2", 2, rack="y"),
            _node("z", 4),
        ),
        pods=tuple(_members("g", 4)),
        gangs=(_gang("g", 4, "rack"),),
    )
    solution = _solve(problem, mode)
    assert _placed(solution) == {}
    assert solution.unplaced[0].reasons[0] == (
        "gang g is placed whole or not at all: its 4 pods do not all fit together within one "
        "value of node label rack"
    )
    preferred = dataclasses.replace(problem, gangs=(_gang("g", 4, "rack", required=False),))
    assert len(_placed(_solve(preferred, mode))) == 4


@pytest.mark.parametrize("mode", MODES)
def test_preferred_topology_uses_the_fewest_racks(mode: Mode) -> None:
    # Either rack holds the gang; the binpack term alone would not keep it in one.
    problem = Problem(
        nodes=(
            _node("x1", 4, rack="x"),
            _node("y1", 4, rack="y"),
            _node("x2", 4, rack="x"),
            _node("y2", 4, rack="y"),
        ),
        pods=tuple(_members("g", 4)),
        gangs=(_gang("g", 4, "rack", required=False),),
    )
    placed = _placed(_solve(problem, mode))
    racks = {node[0] for node in placed.values()}
    assert len(placed) == 4 and len(racks) == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_gang_with_a_pod_outside_the_problem_is_not_placed(mode: Mode) -> None:
    problem = Problem(
        nodes=(_node("n1", 8),),
        pods=tuple(_members("g", 3)),
        gangs=(_gang("g", 4),),
    )
    solution = _solve(problem, mode)
    assert _placed(solution) == {}
    assert "its pod default/g-3 is not in this solve" in solution.unplaced[0].reasons[0]


@pytest.mark.parametrize("mode", MODES)
def test_single_pods_beside_a_gang_still_go(mode: Mode) -> None:
    # 6 GPUs: the gang (8) cannot go; the single pod of 2 does.
    problem = Problem(
        nodes=(_node("n1", 4), _node("n2", 2)),
        pods=(*_members("g", 4), pod("single", gpu_claim("single", count=2))),
        gangs=(_gang("g", 4),),
    )
    assert _placed(_solve(problem, mode)) == {"default/single": "n2"}


@settings(max_examples=40, deadline=None)
@given(
    free=st.lists(st.integers(0, 4), min_size=1, max_size=4),
    racks=st.lists(st.sampled_from(["x", "y", None]), min_size=4, max_size=4),
    sizes=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 2)), min_size=1, max_size=3),
    required=st.booleans(),
    mode=st.sampled_from(MODES),
)
def test_every_gang_is_placed_whole_or_holds_nothing(
    free: list[int],
    racks: list[str | None],
    sizes: list[tuple[int, int]],
    required: bool,
    mode: Mode,
) -> None:
    nodes = tuple(
        _node(f"n{i}", gpus, **({"rack": rack} if rack else {}))
        for i, (gpus, rack) in enumerate(zip(free, racks, strict=False))
        if gpus
    )
    if not nodes:
        return
    pods = []
    gangs = []
    for k, (members, gpus) in enumerate(sizes):
        pods += _members(f"g{k}", members, gpus)
        gangs.append(_gang(f"g{k}", members, "rack", required))
    problem = Problem(nodes=nodes, pods=tuple(pods), gangs=tuple(gangs))
    solution = _solve(problem, mode)
    placed = _placed(solution)
    rack_of = {n.name: dict(n.labels).get("rack") for n in nodes}
    for gang in gangs:
        mine = [p for p in gang.pods if p in placed]
        assert mine == [] or mine == list(gang.pods), (gang.name, placed)
        if mine and required:
            assert len({rack_of[placed[p]] for p in mine} - {None}) == 1
            assert None not in {rack_of[placed[p]] for p in mine}
    # Nothing of a gang not placed is allocated: placements carry the only allocations.
    allocated = {uid for p in solution.placements for uid in p.allocations}
    for gang in gangs:
        if gang.pods[0] not in placed:
            assert not any(p.split("/")[1] in uid for p in gang.pods for uid in allocated)
