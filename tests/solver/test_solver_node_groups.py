"""An online decision evaluates one node per group of equal nodes (`nodegroups.py`), not every
node per pod: the same placements as the pass over every node, at a cost that does not grow with
pods × nodes."""

from __future__ import annotations

import dataclasses

import pytest
from checker import assert_valid, gpu_claim, make_node, mig_claim, pod

from drasat.api.nas import AllocatedDevices
from drasat.api.policy import AllocationPolicySpec
from drasat.solver import Mode, Problem, SolveParams, SolverCache, solve
from drasat.solver.rules import Rules


def _held(node: str, index: int) -> dict[str, AllocatedDevices]:
    uid = f"old-{node}"
    return {
        uid: AllocatedDevices.model_validate(
            {
                "claimInfo": {"namespace": "other", "name": uid, "uid": uid},
                "gpu": {"devices": [{"uuid": f"GPU-{node}-{index}"}]},
            }
        )
    }


def _mixed_problem() -> Problem:
    """Equal nodes in several groups (some told apart only by an existing allocation), pods of
    several shapes, some limited to some nodes: ties everywhere, and nodes leave their group as
    pods land on them."""
    nodes = []
    for i in range(12):
        name = f"n{i:02d}"
        if i % 4 == 3:
            nodes.append(make_node(name, "A100-40GB", count=1, mig=True))
        elif i % 4 == 2:
            nodes.append(make_node(name, "T4", count=2, allocated=_held(name, 1)))
        else:
            nodes.append(make_node(name, "T4", count=2))
    pods = []
    for i in range(30):
        kind = i % 5
        if kind == 0:
            pods.append(pod(f"p{i}", gpu_claim(f"c{i}")))
        elif kind == 1:
            pods.append(pod(f"p{i}", gpu_claim(f"c{i}", count=2)))
        elif kind == 2:
            pods.append(pod(f"p{i}", mig_claim(f"c{i}", "1g.5gb")))
        elif kind == 3:
            pods.append(pod(f"p{i}", gpu_claim(f"c{i}"), candidates=("n05", "n06", "n09")))
        else:
            pods.append(pod(f"p{i}", gpu_claim(f"c{i}", share={"compute": 30})))
    return Problem(nodes=tuple(nodes), pods=tuple(pods), policy=AllocationPolicySpec())


def test_grouped_decisions_place_as_the_pass_over_every_node() -> None:
    # node_feasibility asks for every node's record: the pass over every node (`_scan`);
    # without it each decision goes through the groups.
    problem = _mixed_problem()
    every_node = solve(problem, SolveParams(mode=Mode.online, node_feasibility=True))
    grouped = solve(problem, SolveParams(mode=Mode.online))
    assert_valid(problem, grouped)
    assert grouped.placements == every_node.placements
    assert grouped.unplaced == every_node.unplaced
    assert grouped.status == every_node.status
    assert len(grouped.placements) > 10 and grouped.unplaced  # both paths were exercised


def test_a_decision_does_not_look_at_every_node(monkeypatch: pytest.MonkeyPatch) -> None:
    # 300 equal nodes, 40 pods, online (batch's warm start is the same pass): the pass over
    # every node read each node's policy class once per pod (12,000 times); grouped, once per
    # node and once per node a pod landed on.
    calls = 0
    original = Rules.node_class_id

    def counted(self: Rules, node: str) -> int:
        nonlocal calls
        calls += 1
        return original(self, node)

    monkeypatch.setattr(Rules, "node_class_id", counted)
    nodes = tuple(make_node(f"n{i:03d}", "T4", count=2) for i in range(300))
    pods = tuple(pod(f"p{i}", gpu_claim(f"c{i}")) for i in range(40))
    problem = Problem(nodes=nodes, pods=pods, policy=AllocationPolicySpec())
    solution = solve(problem, SolveParams(mode=Mode.online, cache=SolverCache()))
    assert_valid(problem, solution)
    assert len(solution.placements) == 40
    assert calls < 2_000


def test_shapes_limited_to_the_same_gpus_read_each_node_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # v1 claims carry the set of GPUs their selectors admit; a cycle's pods are of many shapes
    # (counts, shares) over few such sets. Which of a node's GPUs a set admits is read once per
    # node and set, not once per node and shape: 200 nodes x 2 GPUs, 8 shapes of one set.
    from drasat.solver import nodes as nodes_module

    reads = 0
    original = nodes_module._gpu_eligibility

    def counted(shape: nodes_module.PodShape, uuid: str) -> object:
        nonlocal reads
        reads += 1
        return original(shape, uuid)

    monkeypatch.setattr(nodes_module, "_gpu_eligibility", counted)
    nodes = tuple(make_node(f"n{i:03d}", "T4", count=2) for i in range(200))
    eligible = frozenset(f"GPU-n{i:03d}-{g}" for i in range(0, 200, 2) for g in range(2))
    shapes = [
        {"count": 1},
        {"count": 2},
        {"share": {"compute": 10}},
        {"share": {"compute": 20}},
        {"share": {"compute": 30}},
        {"share": {"compute": 40}},
        {"share": {"compute": 50}},
        {"share": {"compute": 60}},
    ]
    pods = tuple(
        pod(
            f"p{i}",
            dataclasses.replace(gpu_claim(f"c{i}", **shapes[i % len(shapes)]), eligible=eligible),
        )
        for i in range(16)
    )
    problem = Problem(nodes=nodes, pods=pods, policy=AllocationPolicySpec())
    solution = solve(problem, SolveParams(mode=Mode.online, cache=SolverCache()))
    assert_valid(problem, solution)
    assert len(solution.placements) == 16
    assert {p.node for p in solution.placements} <= {f"n{i:03d}" for i in range(0, 200, 2)}
    # Once per node (400 GPUs), and again for each node a pod changed: not 8 x 400.
    assert reads < 2 * 400


def test_nodes_without_an_eligible_gpu_are_not_read_gpu_by_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A MIG profile of one product admits a few nodes of thousands: the others fail the pod's
    # first claim whatever they hold, and are not read GPU by GPU; the decisions and the
    # reasons are those of the pass over every node.
    from drasat.solver import nodes as nodes_module

    reads = 0
    original = nodes_module._gpu_eligibility

    def counted(shape: nodes_module.PodShape, uuid: str) -> object:
        nonlocal reads
        reads += 1
        return original(shape, uuid)

    monkeypatch.setattr(nodes_module, "_gpu_eligibility", counted)
    nodes = tuple(make_node(f"n{i:03d}", "T4", count=2) for i in range(200))
    eligible = frozenset(f"GPU-n{i:03d}-{g}" for i in range(190, 200) for g in range(2))
    pods = tuple(
        pod(f"p{i}", dataclasses.replace(gpu_claim(f"c{i}"), eligible=eligible)) for i in range(24)
    )
    problem = Problem(nodes=nodes, pods=pods, policy=AllocationPolicySpec())
    grouped = solve(problem, SolveParams(mode=Mode.online, cache=SolverCache()))
    assert reads <= 2 * 20 * 2  # the 20 eligible GPUs, again as pods land on their nodes
    every_node = solve(problem, SolveParams(mode=Mode.online, node_feasibility=True))
    assert_valid(problem, grouped)
    assert grouped.placements == every_node.placements
    assert grouped.unplaced == every_node.unplaced
    assert len(grouped.placements) == 20 and len(grouped.unplaced) == 4
