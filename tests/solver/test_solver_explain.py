"""Every unplaced pod gets a reason that names the blocking constraint."""

from __future__ import annotations

import pytest
from checker import assert_valid, gpu_claim, make_node, mig_claim, pod

from drasat.api.nas import (
    AllocatedDevices,
    AllocatedMigDevice,
    AllocatedMigDevices,
    ClaimInfo,
    MigPlacement,
)
from drasat.api.policy import AllocationPolicySpec
from drasat.solver import Mode, Problem, SolveParams, solve

MODES = [Mode.online, Mode.batch]


def _reasons(problem: Problem, mode: Mode) -> tuple[str, ...]:
    solution = solve(problem, SolveParams(mode=mode))
    assert_valid(problem, solution)
    (rejected,) = solution.unplaced
    return rejected.reasons


def _policy(rules: dict[str, object]) -> AllocationPolicySpec:
    return AllocationPolicySpec.model_validate({"rules": rules})


def _mig_on(uuid: str, starts: list[tuple[str, int, int]]) -> dict[str, AllocatedDevices]:
    return {
        f"old-{i}": AllocatedDevices(
            claimInfo=ClaimInfo(namespace="other", name=f"old-{i}", uid=f"old-{i}"),
            mig=AllocatedMigDevices(
                devices=[
                    AllocatedMigDevice(
                        profile=profile,
                        parentUUID=uuid,
                        placement=MigPlacement(start=start, size=size),
                    )
                ]
            ),
        )
        for i, (profile, start, size) in enumerate(starts)
    }


@pytest.mark.parametrize("mode", MODES)
def test_selector_that_matches_nothing(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "T4", count=2), make_node("n2", "L4")),
        pods=(pod("p", gpu_claim("c", selector={"productName": "*a100*"})),),
    )
    assert _reasons(problem, mode) == (
        "claim default/c: selector productName=*a100* matches no GPU",
    )


@pytest.mark.parametrize("mode", MODES)
def test_count_larger_than_any_node_has_free(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "T4", count=1), make_node("n2", "T4", count=1)),
        pods=(pod("p", gpu_claim("c", count=2)),),
    )
    (reason,) = _reasons(problem, mode)
    assert "needs 2 GPUs on one node; at most 1 free on any matching node" in reason


@pytest.mark.parametrize("mode", MODES)
def test_mig_profile_blocked_by_existing_devices(mode: Mode) -> None:
    # 1g devices at slices 2 and 5 break both 3g placements (0-3 and 4-7) of the only GPU.
    busy = _mig_on("GPU-n1-0", [("1g.5gb", 2, 1), ("1g.5gb", 5, 1)])
    problem = Problem(
        nodes=(make_node("n1", "A100-40GB", mig=True, allocated=busy),),
        pods=(pod("p", mig_claim("m", "3g.20gb")),),
    )
    assert _reasons(problem, mode) == (
        "claim default/m: 3g.20gb: every placement overlaps existing MIG devices on the 1 "
        "matching GPUs",
    )


@pytest.mark.parametrize("mode", MODES)
def test_profile_no_gpu_offers(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "T4"),),
        pods=(pod("p", mig_claim("m", "3g.40gb")),),
    )
    (reason,) = _reasons(problem, mode)
    assert reason == "claim default/m: 3g.40gb: no MIG-enabled GPU offers it"


@pytest.mark.parametrize("mode", MODES)
def test_whole_claim_does_not_take_mig_gpus(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "A100-40GB", mig=True),),
        pods=(pod("p", gpu_claim("c")),),
    )
    (reason,) = _reasons(problem, mode)
    assert "no GPU without MIG" in reason and "migEnabled=true" in reason


@pytest.mark.parametrize("mode", MODES)
def test_reservation_names_the_rule(mode: Mode) -> None:
    policy = _policy(
        {"reservations": [{"name": "reserve-team-a", "namespaces": ["team-a"], "nodes": ["n1"]}]}
    )
    problem = Problem(
        nodes=(make_node("n1", "T4"),),
        pods=(pod("p", gpu_claim("c", namespace="team-b"), namespace="team-b"),),
        policy=policy,
    )
    assert _reasons(problem, mode) == ("claim team-b/c: policy rule reserve-team-a",)


@pytest.mark.parametrize("mode", MODES)
def test_counted_reservation_names_the_rule(mode: Mode) -> None:
    # Two of the three GPUs are kept for team-a: team-b may take only one.
    policy = _policy({"reservations": [{"name": "keep-2", "namespaces": ["team-a"], "count": 2}]})
    problem = Problem(
        nodes=(make_node("n1", "T4", count=3),),
        pods=(pod("p", gpu_claim("c", count=2, namespace="team-b"), namespace="team-b"),),
        policy=policy,
    )
    assert _reasons(problem, mode) == ("policy rule keep-2",)


@pytest.mark.parametrize("mode", MODES)
def test_namespace_limit_counts_existing_allocations(mode: Mode) -> None:
    policy = _policy({"namespaceLimits": [{"namespace": "team-b", "maxGpus": 2}]})
    problem = Problem(
        nodes=(make_node("n1", "T4", count=4),),
        pods=(
            pod("first", gpu_claim("first", namespace="team-b"), namespace="team-b"),
            pod("second", gpu_claim("second", count=2, namespace="team-b"), namespace="team-b"),
        ),
        policy=policy,
    )
    assert _reasons(problem, mode) == ("namespace limit team-b maxGpus=2",)


@pytest.mark.parametrize("mode", MODES)
def test_allowed_products(mode: Mode) -> None:
    policy = _policy({"allowedProducts": [{"namespace": "team-b", "products": ["*T4*"]}]})
    problem = Problem(
        nodes=(make_node("n1", "A100-80GB"),),
        pods=(pod("p", gpu_claim("c", namespace="team-b"), namespace="team-b"),),
        policy=policy,
    )
    (reason,) = _reasons(problem, mode)
    assert reason == "claim team-b/c: policy allowedProducts: namespace team-b may use only *T4*"


@pytest.mark.parametrize("mode", MODES)
def test_reasons_quote_user_text_with_braces(mode: Mode) -> None:
    policy = _policy({"allowedProducts": [{"namespace": "b", "products": ["{x}*"]}]})
    problem = Problem(
        nodes=(make_node("n1", "T4"), make_node("n2", "T4")),
        pods=(pod("p", gpu_claim("c", namespace="b"), namespace="b"),),
        policy=policy,
    )
    (reason,) = _reasons(problem, mode)
    assert reason == "claim b/c: policy allowedProducts: namespace b may use only {x}*"


@pytest.mark.parametrize("mode", MODES)
def test_not_ready_node(mode: Mode) -> None:
    problem = Problem(nodes=(make_node("n1", "T4", ready=False),), pods=(pod("p", gpu_claim("c")),))
    assert _reasons(problem, mode) == ("node n1: NAS NotReady",)


@pytest.mark.parametrize("mode", MODES)
def test_candidate_nodes_without_nas(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "T4"),), pods=(pod("p", gpu_claim("c"), candidates=["elsewhere"]),)
    )
    assert _reasons(problem, mode) == (
        "none of the pod's candidate nodes has a NodeAllocationState",
    )


@pytest.mark.parametrize("mode", MODES)
def test_required_numa_topology(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "A100-80GB", count=4, numa=[0, 0, 1, 1]),),
        pods=(pod("p", gpu_claim("c", count=3, topology={"sameNUMANode": "Required"})),),
    )
    assert _reasons(problem, mode) == (
        "claim default/c: topology sameNUMANode is Required; at most 2 free matching GPUs share "
        "a NUMA node",
    )


@pytest.mark.parametrize("mode", MODES)
def test_claims_of_one_pod_competing_for_one_node(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "T4", count=2),),
        pods=(pod("p", gpu_claim("a"), gpu_claim("b", count=2)),),
    )
    (reason,) = _reasons(problem, mode)
    assert "claims default/a, default/b do not fit together" in reason


@pytest.mark.parametrize("mode", MODES)
def test_cpu_capacity(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "T4", cpu_milli=1000),),
        pods=(pod("p", gpu_claim("c"), cpu_milli=4000),),
    )
    (reason,) = _reasons(problem, mode)
    assert "needs 4000m CPU" in reason


@pytest.mark.parametrize("mode", MODES)
def test_node_feasibility_reports_every_candidate(mode: Mode) -> None:
    problem = Problem(
        nodes=(
            make_node("free", "T4"),
            make_node("down", "T4", ready=False),
            make_node("small", "L4"),
        ),
        pods=(pod("p", gpu_claim("c", selector={"productName": "*T4*"})),),
    )
    solution = solve(problem, SolveParams(mode=mode, node_feasibility=True))
    assert solution.node_feasibility == {
        "default/p": {
            "free": None,
            "down": "node down: NAS NotReady",
            "small": "claim default/c: selector productName=*T4* matches no GPU on node small",
        }
    }


def test_nodes_in_the_same_state_get_reasons_naming_themselves() -> None:
    # One memoized evaluation serves both nodes; each reason still names its own node.
    problem = Problem(
        nodes=(make_node("left", "T4"), make_node("right", "T4")),
        pods=(pod("p", gpu_claim("c", count=2)),),
    )
    solution = solve(problem, SolveParams(mode=Mode.online, node_feasibility=True))
    reasons = solution.node_feasibility["default/p"]
    assert reasons["left"] is not None and "node left" in reasons["left"]
    assert reasons["right"] is not None and "node right" in reasons["right"]
