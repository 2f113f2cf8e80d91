"""The built model's structure, and the exact one-claim path against the CP-SAT model."""

from __future__ import annotations

import random

import pytest
from checker import gpu_claim, make_node, mig_claim, pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_solver_properties import random_problem

from drasat.api.policy import AllocationPolicySpec
from drasat.solver import SolverCache, costs, demand, model, nodes, solving
from drasat.solver.inventory import build_view
from drasat.solver.model import PodEntry, PrimaryLevels
from drasat.solver.problem import ClaimRequest, NodeState, PodRequest
from drasat.solver.rules import Rules

BUDGET = solving.Budget(time_limit_s=5.0, workers=1, seed=0)


def _entry(request: PodRequest, *views: object) -> PodEntry:
    claims = tuple(demand.normalize(c, request) for c in request.claims)
    return PodEntry(request, 0, claims, tuple(views))  # type: ignore[arg-type]


def _rules(*node_states: NodeState, policy: AllocationPolicySpec | None = None) -> Rules:
    cache = SolverCache()
    views = tuple(build_view(n, cache) for n in node_states)
    return Rules(policy or AllocationPolicySpec(), views, cache)


def test_whole_claim_gets_a_variable_per_free_matching_gpu() -> None:
    held = {
        "old": {
            "claimInfo": {"namespace": "x", "name": "old", "uid": "old"},
            "gpu": {"devices": [{"uuid": "GPU-n1-0"}]},
        }
    }
    node = make_node("n1", "T4", count=3, allocated=held)  # type: ignore[arg-type]
    view = build_view(node)
    built = model.build([_entry(pod("p", gpu_claim("c", count=2)), view)], _rules(node))
    devices = built.devices["uid-default-c"]
    assert sorted(d.gpu.uuid for d in devices) == ["GPU-n1-1", "GPU-n1-2"]
    assert set(built.at) == {("default/p", "n1")}
    assert all(d.option is None for d in devices)


def test_mig_claim_gets_a_variable_per_free_placement() -> None:
    busy = {
        "old": {
            "claimInfo": {"namespace": "x", "name": "old", "uid": "old"},
            "mig": {
                "devices": [
                    {
                        "profile": "1g.5gb",
                        "parentUUID": "GPU-n1-0",
                        "placement": {"start": 5, "size": 1},
                    }
                ]
            },
        }
    }
    node = make_node("n1", "A100-40GB", count=2, mig=True, allocated=busy)  # type: ignore[arg-type]
    view = build_view(node)
    built = model.build([_entry(pod("p", mig_claim("m", "3g.20gb")), view)], _rules(node))
    options = sorted(
        (d.gpu.uuid, d.option.start) for d in built.devices["uid-default-m"] if d.option
    )
    # GPU 0 keeps only the 3g placement at 0 (slice 5 is taken); GPU 1 has both.
    assert options == [("GPU-n1-0", 0), ("GPU-n1-1", 0), ("GPU-n1-1", 4)]


def test_whole_claims_skip_mig_gpus_unless_they_select_mig_enabled() -> None:
    node = make_node("n1", "A100-40GB", mig=True)
    view = build_view(node)
    rules = _rules(node)
    plain = model.build([_entry(pod("p", gpu_claim("c")), view)], rules)
    asking = model.build(
        [_entry(pod("p", gpu_claim("c", selector={"migEnabled": True})), view)], rules
    )
    assert plain.devices.get("uid-default-c", []) == []
    assert len(asking.devices["uid-default-c"]) == 1


def test_explain_mode_puts_each_rule_behind_an_assumption() -> None:
    node = make_node("n1", "T4", count=2)
    policy = AllocationPolicySpec.model_validate(
        {
            "rules": {
                "reservations": [{"name": "keep", "namespaces": ["a"], "count": 1}],
                "namespaceLimits": [{"namespace": "b", "maxGpus": 1}],
            }
        }
    )
    view = build_view(node)
    request = pod("p", gpu_claim("c", namespace="b"), namespace="b")
    built = model.build([_entry(request, view)], _rules(node, policy=policy), explain=True)
    assert sorted(built.assumptions.values()) == [
        ("namespace limit b maxGpus=1",),
        ("policy rule keep",),
    ]
    plain = model.build([_entry(request, view)], _rules(node, policy=policy))
    assert plain.assumptions == {}


def test_fragmentation_windows_weigh_what_blocking_them_costs() -> None:
    node = make_node("n1", "A100-40GB", mig=True)
    (gpu,) = build_view(node).gpus
    weights = costs.windows(gpu)
    # [0,4) serves 3g and 4g, [4,8) only 3g: a 1g device belongs high.
    assert weights[(0, 4)] == 8 and weights[(4, 4)] == 4
    rules = _rules(node)
    assert costs.blocked(gpu, gpu.mig_options[6], rules) < costs.blocked(
        gpu, gpu.mig_options[0], rules
    )


def test_primary_levels_are_lexicographic() -> None:
    levels = PrimaryLevels.of([0, 0, 0], optional_claims=2)
    # One more placed pod beats every optional device and every order bonus together.
    assert levels.pod(0, 2) > 2 * levels.got + levels.order_total
    assert levels.got > levels.order_total
    # Weighted by priority: a priority-1 pod counts as two priority-0 pods (order breaks ties).
    assert levels.pod(1, 2) // levels.unit == 2 * (levels.pod(0, 0) // levels.unit)


def _one_claim_cases(seed: int) -> list[tuple[PodEntry, NodeState]]:
    problem = random_problem(seed)
    out = []
    for request in problem.pods:
        for claim in request.claims:
            single = PodRequest(request.key, request.namespace, (claim,))
            for node in problem.nodes:
                out.append((_entry(single), node))
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_exact_enumeration_matches_the_cp_sat_model(seed: int) -> None:
    policy = random_problem(seed).policy
    for entry, node in _one_claim_cases(seed):
        view = build_view(node)
        rules = Rules(policy, (view,))
        # Not-ready nodes never reach a model (the filters drop them first).
        if not node.ready or not nodes._enumerable(entry, rules):
            continue
        fast = nodes._enumerate(nodes.shape(entry, rules), view, rules)
        one = PodEntry(entry.request, entry.priority, entry.claims, (view,))
        built = model.build([one], rules, force_placed=True)
        result = solving.solve(built, BUDGET)
        assert (fast.picks is not None) == result.has_solution, (entry.claims, node.name)
        if result.has_solution:
            assert (fast.primary, fast.secondary) == (result.primary, result.secondary)


@pytest.mark.parametrize("seed", range(3))
def test_memoized_evaluation_equals_a_fresh_one(seed: int) -> None:
    rng = random.Random(seed)
    first = make_node("a", "A100-40GB", count=2, mig=True)
    twin = make_node("b", "A100-40GB", count=2, mig=True)
    request = pod("p", mig_claim("m", rng.choice(["1g.5gb", "3g.20gb"])))
    rules = _rules(first, twin)
    shape = nodes.shape(_entry(request), rules)
    a = nodes.evaluate(shape, build_view(first, rules.cache), rules, BUDGET)
    b = nodes.evaluate(shape, build_view(twin, rules.cache), rules, BUDGET)
    assert a is b  # one evaluation serves both nodes (of one cache)
    chosen = nodes.outcome(shape, build_view(twin, rules.cache), b).chosen["uid-default-m"]
    assert chosen[0].uuid.startswith("GPU-b-")


def test_claim_request_needs_exactly_one_kind() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ClaimRequest(uid="u", namespace="n", name="c")


class _CountedSet(frozenset[str]):
    """An eligible set that counts how often it is compared with another."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _CountedSet.compared += 1
        return frozenset.__eq__(self, other)

    __hash__ = frozenset.__hash__


def test_claims_with_equal_eligible_sets_compare_them_once_not_per_gpu() -> None:
    # v1 claims carry the set of every GPU their selectors admit (thousands of uuids), equal
    # sets in distinct objects for the claims of distinct templates or ResourceClaims. The
    # model's memo of the ways a claim takes a GPU keyed the set itself: each lookup compared
    # two such sets (on every GPU of every node); now the claim's shape is interned once.
    node_states = [make_node(f"n{i}", "T4", count=2) for i in range(20)]
    rules = _rules(*node_states)
    views = [build_view(n, rules.cache) for n in node_states]
    uuids = [g.uuid for v in views for g in v.gpus]
    entries = []
    for name in ("a", "b", "c"):
        claim = gpu_claim(name)
        request = pod(name, ClaimRequest(**{**claim.__dict__, "eligible": _CountedSet(uuids)}))
        entries.append(_entry(request, *views))
    _CountedSet.compared = 0
    built = model.build(entries, rules)
    assert len(built.devices) == 3
    assert _CountedSet.compared <= 3
