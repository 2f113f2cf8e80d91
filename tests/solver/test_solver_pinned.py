"""A claim that existing allocations already hold pins its pod to that node."""

from __future__ import annotations

import pytest
from checker import gpu_claim, make_node, pod

from drasat.api.nas import AllocatedDevices, AllocatedGpu, AllocatedGpus, ClaimInfo
from drasat.solver import Mode, Problem, SolveParams, solve

MODES = [Mode.online, Mode.batch]


def _held(uid: str, uuid: str) -> dict[str, AllocatedDevices]:
    return {
        uid: AllocatedDevices(
            claimInfo=ClaimInfo(namespace="default", name=uid, uid=uid),
            gpu=AllocatedGpus(devices=[AllocatedGpu(uuid=uuid)]),
        )
    }


@pytest.mark.parametrize("mode", MODES)
def test_a_pod_whose_claim_is_allocated_goes_to_that_node_even_when_listed_last(
    mode: Mode,
) -> None:
    shared = gpu_claim("shared", uid="c-shared")
    problem = Problem(
        nodes=(
            make_node("pin-n1", "T4", count=2),
            make_node("pin-n2", "T4", count=2, allocated=_held("c-shared", "GPU-pin-n2-0")),
        ),
        pods=(pod("second-user", shared),),
    )
    solution = solve(problem, SolveParams(mode=mode))
    (placement,) = solution.placements
    assert placement.node == "pin-n2"
    # Nothing new is allocated for it: the claim already has its GPU.
    assert placement.allocations == {}


@pytest.mark.parametrize("mode", MODES)
def test_claims_allocated_on_two_nodes_leave_their_pod_unplaced_with_the_reason(
    mode: Mode,
) -> None:
    problem = Problem(
        nodes=(
            make_node("pin-n1", "T4", count=2, allocated=_held("c-a", "GPU-pin-n1-0")),
            make_node("pin-n2", "T4", count=2, allocated=_held("c-b", "GPU-pin-n2-0")),
        ),
        pods=(pod("both", gpu_claim("a", uid="c-a"), gpu_claim("b", uid="c-b")),),
    )
    solution = solve(problem, SolveParams(mode=mode))
    (rejected,) = solution.unplaced
    assert rejected.reasons == (
        "its claims are already allocated on different nodes (pin-n1, pin-n2)",
    )
