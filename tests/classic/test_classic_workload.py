"""The target workload the controller gives the solver: what the cluster holds and awaits."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from ctl_cluster import add_claim, add_class, add_node, add_params, allocated_node, claim, t4, wait

from drasat.api.policy import AllocationPolicySpec, ObjectiveTerm, Term, WorkloadShape
from drasat.classic.clusterworkload import ClusterWorkload, allocated_shapes
from drasat.classic.controller import Controller, default_solve
from drasat.controller import nasnodes
from drasat.kube.client import KubeClient
from drasat.solver import GpuDemand, Problem, Solution, SolveParams
from drasat.solver.problem import ClaimRequest, PodRequest

Obj = dict[str, Any]


def _nas(name: str, version: str, claims: dict[str, Obj]) -> nasnodes.ParsedNas:
    return nasnodes.parse(
        {
            "metadata": {"name": name, "namespace": "drasat", "resourceVersion": version},
            "spec": {"allocatableDevices": [t4(0), t4(1)], "allocatedClaims": claims},
            "status": "Ready",
        }
    )


def _entry(uid: str, gpus: int, compute: int | None = None) -> Obj:
    entry: Obj = {
        "claimInfo": {"namespace": "ns", "name": uid, "uid": uid},
        "gpu": {"devices": [{"uuid": f"GPU-{uid}-{i}"} for i in range(gpus)]},
    }
    if compute is not None:
        entry["share"] = {"compute": compute}
    return entry


def _summary(shapes: tuple[WorkloadShape, ...] | None) -> list[tuple[int, int, int]]:
    assert shapes is not None
    return [(s.count, s.share.compute if s.share and s.share.compute else 100, s.weight)
            for s in shapes]  # fmt: skip


PENDING = PodRequest(
    key="ns/p",
    namespace="ns",
    claims=(ClaimRequest(uid="p", namespace="ns", name="p", gpu=GpuDemand(count=2)),),
)


def test_shapes_follow_the_nas_objects_and_add_the_pending_pod() -> None:
    tally = ClusterWorkload()
    policy = AllocationPolicySpec()
    a = _nas("a", "1", {"x": _entry("x", 1, 50), "y": _entry("y", 1, 50)})
    b = _nas("b", "1", {"z": _entry("z", 1)})
    assert _summary(tally.shapes(policy, {"a": a, "b": b}, [PENDING])) == [
        (1, 50, 500),
        (1, 100, 250),
        (2, 100, 250),
    ]
    # b changed (a new object): its old counts go, its new ones come; a is not recounted.
    b2 = _nas("b", "2", {"z": _entry("z", 2), "w": _entry("w", 2)})
    assert _summary(tally.shapes(policy, {"a": a, "b": b2}, [])) == [(1, 50, 500), (2, 100, 500)]
    # a node gone takes its claims with it
    assert _summary(tally.shapes(policy, {"b": b2}, [])) == [(2, 100, 1000)]
    assert tally.shapes(policy, {}, []) is None  # nothing known: the solver estimates


def test_a_policy_that_lists_its_workload_is_left_to_the_solver() -> None:
    listed = AllocationPolicySpec(
        objective=[ObjectiveTerm(term=Term.fragmentation, workload=[WorkloadShape(count=1)])]
    )
    a = _nas("a", "1", {"x": _entry("x", 1)})
    assert ClusterWorkload().shapes(listed, {"a": a}, [PENDING]) is None


def test_one_claim_decisions_see_the_claims_the_cluster_already_holds(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    seen: list[Problem] = []

    def solve(problem: Problem, params: SolveParams) -> Solution:
        seen.append(problem)
        return default_solve(problem, params)

    add_node(api, "node-1", [t4(0), t4(1), t4(2)])
    add_class(api)
    add_params(api, "ns", "two", {"count": 2})
    start_controller(solve=solve)
    add_claim(api, "ns", "big", mode="Immediate", params="two")
    wait(lambda: allocated_node(claim(api, "ns", "big")), what="first allocation")
    add_claim(api, "ns", "small", mode="Immediate")
    wait(lambda: allocated_node(claim(api, "ns", "small")), what="second allocation")
    last = next(p for p in reversed(seen) if p.pods[0].claims[0].name == "small")
    # the 2-GPU claim held in the NAS and the pending 1-GPU claim, half and half
    assert sorted(_summary(last.workload)) == [(1, 100, 500), (2, 100, 500)]


def test_a_nas_counts_its_whole_gpu_claims_and_shares_with_a_compute_percentage() -> None:
    parsed = _nas(
        "n", "1", {"a": _entry("a", 1, 50), "b": _entry("b", 1, 50), "c": _entry("c", 2),
                   "d": _entry("d", 1), "e": {**_entry("e", 0)}}
    )  # fmt: skip
    assert allocated_shapes(parsed.entries) == Counter(
        {("ns", 1, 50): 2, ("ns", 2, 100): 1, ("ns", 1, 100): 1}
    )
