"""The policy's lifecycle init actions travel with each new allocation to the node plugin."""

from __future__ import annotations

import pytest
from checker import assert_valid, gpu_claim, make_node, mig_claim, pod

from drasat.api.policy import AllocationPolicySpec
from drasat.solver import Mode, Problem, SolveParams, solve

POLICY = AllocationPolicySpec.model_validate(
    {
        "lifecycle": {
            "init": [
                {"action": "setComputeMode", "value": "ExclusiveProcess"},
                {
                    "action": "setPowerLimitWatts",
                    "value": 250,
                    "selector": {"productName": "*a100*"},
                },
            ]
        }
    }
)


def _steps(problem: Problem, mode: Mode) -> dict[str, list[tuple[str, str | int | None]]]:
    solution = solve(problem, SolveParams(mode=mode))
    assert_valid(problem, solution)
    return {
        uid: [(s.action, s.value) for s in entry.lifecycle]
        for placement in solution.placements
        for uid, entry in placement.allocations.items()
    }


@pytest.mark.parametrize("mode", [Mode.online, Mode.batch])
def test_actions_whose_selector_matches_the_claims_gpus_are_attached(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("t4", "T4"), make_node("a100", "A100-40GB", mig=True)),
        pods=(
            pod("whole", gpu_claim("g", selector={"productName": "tesla*"})),
            pod("mig", mig_claim("m", "1g.5gb")),
        ),
        policy=POLICY,
    )
    steps = _steps(problem, mode)
    assert steps["uid-default-g"] == [("setComputeMode", "ExclusiveProcess")]
    assert steps["uid-default-m"] == [
        ("setComputeMode", "ExclusiveProcess"),
        ("setPowerLimitWatts", 250),
    ]


def test_no_policy_actions_means_no_lifecycle_field() -> None:
    problem = Problem(nodes=(make_node("t4", "T4"),), pods=(pod("p", gpu_claim("g")),))
    solution = solve(problem, SolveParams(mode=Mode.online))
    assert solution.placements[0].allocations["uid-default-g"].lifecycle == ()


def test_optional_claim_without_a_device_gets_no_actions() -> None:
    problem = Problem(
        nodes=(make_node("t4", "T4", allocated={}),),
        pods=(
            pod("first", gpu_claim("a")),
            pod("second", gpu_claim("b", optional=True)),
        ),
        policy=POLICY,
    )
    steps = _steps(problem, Mode.online)
    assert steps["uid-default-b"] == []
