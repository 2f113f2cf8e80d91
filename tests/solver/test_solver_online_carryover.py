"""Online decisions one solve at a time (the controller's and the replay's way: one pod per call,
one SolverCache for the run) reuse what the last solve learned — the node groups and their
ranking (`nodegroups.py`), the explicit target workload (`workload.py`) — and decide exactly as
a solve that starts from nothing and looks at every node."""

from __future__ import annotations

import dataclasses

import pytest
from checker import assert_valid, gpu_claim, make_node, mig_claim, pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drasat.api.nas import AllocatedDevices
from drasat.api.policy import AllocationPolicySpec, WorkloadShape
from drasat.api.sharing import GpuShare
from drasat.solver import (
    Mode,
    NodeState,
    PodPlacement,
    PodRequest,
    Problem,
    SolveParams,
    SolverCache,
    nodes,
    solve,
    workload,
)

PRODUCTS = ("T4", "V100-16GB", "A100-40GB")


def _held(node: str, index: int, uid: str) -> dict[str, AllocatedDevices]:
    return {
        uid: AllocatedDevices.model_validate(
            {
                "claimInfo": {"namespace": "other", "name": uid, "uid": uid},
                "gpu": {"devices": [{"uuid": f"GPU-{node}-{index}"}]},
            }
        )
    }


@st.composite
def _clusters(draw: st.DrawFn) -> tuple[NodeState, ...]:
    count = draw(st.integers(3, 9))
    out = []
    for i in range(count):
        name = f"n{i:02d}"
        product = draw(st.sampled_from(PRODUCTS))
        mig = product == "A100-40GB" and draw(st.booleans())
        gpus = 1 if mig else draw(st.integers(1, 4))
        held = None
        if not mig and gpus > 1 and draw(st.booleans()):
            held = _held(name, gpus - 1, f"old-{name}")
        cpu = draw(st.sampled_from([None, 8000, 16000]))
        out.append(make_node(name, product, count=gpus, mig=mig, allocated=held, cpu_milli=cpu))
    return tuple(out)


@st.composite
def _pods(draw: st.DrawFn, names: tuple[str, ...]) -> tuple[PodRequest, ...]:
    out = []
    for i in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["one", "two", "share", "mig", "model", "none"]))
        cpu = draw(st.sampled_from([0, 2000, 6000]))
        candidates = None
        if draw(st.integers(0, 4)) == 0:
            candidates = tuple(sorted(draw(st.sets(st.sampled_from(names), min_size=1))))
        if kind == "one":
            claims = (gpu_claim(f"c{i}"),)
        elif kind == "two":
            claims = (gpu_claim(f"c{i}", count=2),)
        elif kind == "share":
            compute = draw(st.sampled_from([20, 30, 50]))
            claims = (gpu_claim(f"c{i}", share={"compute": compute}),)
        elif kind == "mig":
            claims = (mig_claim(f"c{i}", "1g.5gb"),)
        elif kind == "model":
            claims = (gpu_claim(f"c{i}", selector={"productName": "Tesla T4"}),)
        else:
            claims = ()
        out.append(pod(f"p{i}", *claims, candidates=candidates, cpu_milli=cpu))
    return tuple(out)


def _after(node_states: tuple[NodeState, ...], placed: PodPlacement, request: PodRequest):
    """The nodes with one placement applied (as the caller does between its solves)."""
    out = []
    for state in node_states:
        if state.name != placed.node:
            out.append(state)
            continue
        ledger = state.ledger.with_allocated(placed.allocations)
        out.append(
            dataclasses.replace(
                state,
                ledger=ledger,
                used_cpu_milli=state.used_cpu_milli + request.cpu_milli,
            )
        )
    return tuple(out)


WORKLOAD = (
    WorkloadShape(count=1, weight=5),
    WorkloadShape(count=2, weight=2),
    WorkloadShape(count=1, share=GpuShare(compute=30), weight=3),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_one_pod_per_solve_with_one_cache_decides_as_a_fresh_solve(data: st.DataObject) -> None:
    # The reference: each solve with a fresh cache, asking for every node's record (the pass
    # over every node, no groups). The run: one cache for every solve, the nodes sometimes
    # listed in another order (the kept groups then do not apply), the workload sometimes
    # given (the fragmentation term reads it).
    node_states = data.draw(_clusters())
    names = tuple(n.name for n in node_states)
    pods = data.draw(_pods(names))
    given_workload = data.draw(st.sampled_from([None, WORKLOAD]))
    cache = SolverCache()
    for request in pods:
        if data.draw(st.integers(0, 5)) == 0:
            node_states = (*node_states[1:], node_states[0])
        problem = Problem(
            nodes=node_states,
            pods=(request,),
            policy=AllocationPolicySpec(),
            workload=given_workload,
        )
        fresh = solve(problem, SolveParams(mode=Mode.online, node_feasibility=True))
        kept = solve(problem, SolveParams(mode=Mode.online, cache=cache))
        assert_valid(problem, kept)
        assert kept.placements == fresh.placements
        assert [r.pod for r in kept.unplaced] == [r.pod for r in fresh.unplaced]
        assert kept.status == fresh.status
        if kept.placements:
            node_states = _after(node_states, kept.placements[0], request)


def _counting(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    calls = [0]
    original = getattr(module, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _one_pod_solves(node_states: tuple[NodeState, ...], count: int, cache: SolverCache) -> None:
    for i in range(count):
        request = pod(f"p{i}", gpu_claim(f"c{i}"))
        problem = Problem(nodes=node_states, pods=(request,), policy=AllocationPolicySpec())
        solution = solve(problem, SolveParams(mode=Mode.online, cache=cache))
        assert_valid(problem, solution)
        (placed,) = solution.placements
        node_states = _after(node_states, placed, request)


def test_a_solve_moves_only_the_nodes_that_changed_since_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 300 equal nodes, 20 solves of one pod each: the groups are made once (300 keys), then
    # each solve reads the key of the one node the last placement changed (before: every
    # node's key in every solve, 6,000).
    keys = _counting(monkeypatch, nodes, "memo_key")
    node_states = tuple(make_node(f"n{i:03d}", "T4", count=2) for i in range(300))
    _one_pod_solves(node_states, 20, SolverCache())
    assert keys[0] < 300 + 20 * 3


def test_a_decision_evaluates_only_groups_it_has_not_met(monkeypatch: pytest.MonkeyPatch) -> None:
    # 60 nodes in 15 states (their CPU): 40 decisions evaluate each group once and then the
    # group a placement made (before: every group at every decision, over 600).
    evaluations = _counting(monkeypatch, nodes, "evaluate")
    node_states = tuple(
        make_node(f"n{i:03d}", "T4", count=4, cpu_milli=1000 * (1 + i % 15)) for i in range(60)
    )
    _one_pod_solves(node_states, 40, SolverCache())
    assert evaluations[0] < 15 + 40 * 3


def test_the_target_workload_is_read_once_per_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    builds = _counting(monkeypatch, workload.Workload, "_build")
    node_states = tuple(make_node(f"n{i}", "T4", count=2) for i in range(4))
    cache = SolverCache()
    for i in range(6):
        request = pod(f"p{i}", gpu_claim(f"c{i}"))
        problem = Problem(
            nodes=node_states,
            pods=(request,),
            policy=AllocationPolicySpec(),
            # An equal list, not the same object: found by its fields.
            workload=WORKLOAD if i % 2 else tuple(s.model_copy() for s in WORKLOAD),
        )
        solve(problem, SolveParams(mode=Mode.online, cache=cache))
    assert builds[0] == 1


def test_kept_groups_stay_within_their_bound_and_the_oldest_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from drasat.solver import cache as cache_module

    monkeypatch.setattr(cache_module, "GROUP_NODES", 25)
    node_states = tuple(make_node(f"n{i}", "T4", count=2) for i in range(10))
    cache = SolverCache()
    for i in range(4):  # four shapes (their CPU), ten candidates each: two fit the bound
        request = pod(f"p{i}", gpu_claim(f"c{i}"), cpu_milli=100 * (i + 1))
        problem = Problem(nodes=node_states, pods=(request,), policy=AllocationPolicySpec())
        fresh = solve(problem, SolveParams(mode=Mode.online, node_feasibility=True))
        kept = solve(problem, SolveParams(mode=Mode.online, cache=cache))
        assert kept.placements == fresh.placements
        assert cache.groups_held <= 25
    assert len(cache.groups) == 2
    assert cache.groups_held == sum(g.size for g in cache.groups.values()) == 20


def test_groups_whose_cpu_rules_the_pod_out_are_not_evaluated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 40 nodes in 40 states (their CPU), the pod fits the CPU of the last 4: a new shape looks
    # at those 4 only (before: all 40 evaluated), and lands on the first of them.
    evaluations = _counting(monkeypatch, nodes, "evaluate")
    node_states = tuple(
        make_node(f"n{i:03d}", "T4", count=2, cpu_milli=1000 * (i + 1)) for i in range(40)
    )
    request = pod("big", gpu_claim("c"), cpu_milli=37_000)
    problem = Problem(nodes=node_states, pods=(request,), policy=AllocationPolicySpec())
    solution = solve(problem, SolveParams(mode=Mode.online, cache=SolverCache()))
    assert [p.node for p in solution.placements] == ["n036"]
    assert evaluations[0] == 4
