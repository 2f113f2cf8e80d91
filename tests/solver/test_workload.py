"""The fragmentation term's target workload: where it comes from and what it decides."""

from __future__ import annotations

from collections import Counter

import pytest
from checker import assert_valid, gpu_claim, make_node, pod
from pydantic import ValidationError

from drasat.api.nas import (
    AllocatedDevices,
    AllocatedGpu,
    AllocatedGpus,
    ClaimInfo,
)
from drasat.api.policy import AllocationPolicySpec, ObjectiveTerm, Term, WorkloadShape
from drasat.api.sharing import GpuShare
from drasat.solver import Mode, NodeState, Problem, SolveParams, SolverCache, solve
from drasat.solver import workload as wl
from drasat.solver.inventory import NodeView, view_of
from drasat.solver.rules import Rules

FRAG_ONLY = [ObjectiveTerm(term=Term.fragmentation)]


def _held_share(
    uid: str, uuid: str, compute: int | None, namespace: str = "default"
) -> AllocatedDevices:
    """An existing claim on one GPU: a share of `compute` %, or the whole GPU (None)."""
    return AllocatedDevices(
        claimInfo=ClaimInfo(namespace=namespace, name=uid, uid=uid),
        gpu=AllocatedGpus(devices=[AllocatedGpu(uuid=uuid)]),
        share=GpuShare(compute=compute) if compute is not None else None,
    )


def _gpu_of_30(
    given: tuple[WorkloadShape, ...] | None, listed: list[WorkloadShape] | None = None
) -> str:
    """Where a 30% share lands on a 2-GPU node whose GPU 0 holds a 50% share."""
    node = make_node("n", "T4", count=2, allocated={"old": _held_share("old", "GPU-n-0", 50)})
    objective = [ObjectiveTerm(term=Term.fragmentation, workload=listed)]
    problem = Problem(
        nodes=(node,),
        pods=(pod("s", gpu_claim("s", share={"compute": 30})),),
        policy=AllocationPolicySpec(objective=objective),
        workload=given,
    )
    solution = solve(problem, SolveParams(mode=Mode.online))
    assert_valid(problem, solution)
    (placement,) = solution.placements
    (entry,) = placement.allocations.values()
    return entry.gpus[0]


SEVENTY = WorkloadShape(share=GpuShare(compute=70))
THIRTY = WorkloadShape(share=GpuShare(compute=30))


def test_one_pod_problem_estimates_from_its_own_pod() -> None:
    # Alone, the pod's own shape (30%) is the workload: beside the 50% it would leave 20%
    # that no 30% claim can use, so it opens the free GPU.
    assert _gpu_of_30(None) == "GPU-n-1"


def test_given_workload_replaces_the_problem_estimate() -> None:
    # 70% claims are what comes: the free GPU must stay whole enough for them, so the 30% goes
    # beside the 50% (the 50% left there was unusable for 70% claims anyway).
    assert _gpu_of_30((SEVENTY,)) == "GPU-n-0"


def test_policy_workload_takes_precedence_over_the_given_one() -> None:
    assert _gpu_of_30((SEVENTY,), listed=[THIRTY]) == "GPU-n-1"
    assert _gpu_of_30(None, listed=[SEVENTY]) == "GPU-n-0"


def test_select_order() -> None:
    policy = AllocationPolicySpec(
        objective=[ObjectiveTerm(term=Term.fragmentation, workload=[THIRTY])]
    )
    pods = (pod("w", gpu_claim("w", count=2)),)
    assert [c.need for c in wl.select(policy, (SEVENTY,), pods).classes] == [30]
    assert [c.need for c in wl.select(AllocationPolicySpec(), (SEVENTY,), pods).classes] == [70]
    (only,) = wl.select(AllocationPolicySpec(), None, pods).classes
    assert (only.need, only.count) == (100, 2)


def test_from_shapes_keeps_weights_cpu_memory_and_selector() -> None:
    shapes = (
        WorkloadShape(count=8, selector={"productName": "*V100*"}, cpu="32", memory="64Gi"),
        WorkloadShape(share=GpuShare(compute=50), weight=9, cpu="500m"),
    )
    cache = SolverCache()
    found = wl.Workload.from_shapes(shapes, cache)
    assert found.total == 10
    half, eight = found.classes  # heaviest first
    assert (half.need, half.count, half.cpu_milli, half.weight) == (50, 1, 500, 9)
    assert (eight.need, eight.count, eight.cpu_milli, eight.memory_mib) == (100, 8, 32000, 65536)
    assert eight.claim.selector is not None
    # equal shapes: equal memo keys (numbered by one cache)
    assert wl.Workload.from_shapes(shapes, cache).id == found.id


def test_estimate_counts_allocations_and_pending_claims() -> None:
    # What the cluster holds, as drasat/classic/clusterworkload.py counts a NAS
    # (tests/classic/test_classic_workload.py): two 50% shares and a claim of two GPUs.
    counts = Counter({("t", 1, 50): 2, ("t", 2, 100): 1})
    pending = pod("p", gpu_claim("p", share={"compute": 50}, namespace="t"), namespace="t")
    counts += wl.pending_shapes([pending])
    shapes = wl.estimate(counts)
    assert [(s.count, s.share.compute if s.share else None, s.weight) for s in shapes] == [
        (1, 50, 750),
        (2, None, 250),
    ]
    assert all(s.namespace == "t" for s in shapes)


def test_estimate_keeps_the_popular_shapes_covering_95_percent() -> None:
    counts: Counter[wl.ShapeKey] = Counter({("", 1, 100): 96, ("", 1, 10): 3, ("", 2, 100): 1})
    assert [s.count for s in wl.estimate(counts)] == [1]
    assert wl.estimate(Counter()) == ()


@pytest.mark.parametrize(
    "term",
    [
        {"term": "binpack", "workload": [{"count": 1}]},
        {"term": "fragmentation", "workload": []},
        {"term": "fragmentation", "workload": [{"count": 2, "share": {"compute": 50}}]},
        {"term": "fragmentation", "workload": [{"share": {"memory": "8Gi"}}]},
        {"term": "fragmentation", "workload": [{"count": 1, "weight": 0}]},
        {"term": "fragmentation", "workload": [{"count": 1, "cpu": "lots"}]},
        {"term": "fragmentation", "workload": [{"count": 1, "gpus": 2}]},
    ],
)
def test_policy_workload_is_validated(term: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ObjectiveTerm.model_validate(term)


#: 19 of 20 expected claims take any GPU, one takes only a T4.
ANY_GPU = WorkloadShape(weight=19)
T4_ONLY = WorkloadShape(weight=1, selector={"productName": "*T4*"})


def _scarce_cluster() -> tuple[NodeState, NodeState]:
    """A T4 node (2 GPUs, one in use: binpack's pick) and an idle 8 x A100 node."""
    rare = make_node(
        "rare", "T4", count=2, allocated={"old": _held_share("old", "GPU-rare-0", None)}
    )
    return rare, make_node("common", "A100-40GB", count=8)


def _scaled_weights(
    shapes: tuple[WorkloadShape, ...],
    views: tuple[NodeView, ...],
    policy: AllocationPolicySpec | None = None,
    cache: SolverCache | None = None,
) -> list[int]:
    work = wl.Workload.from_shapes(shapes, cache)
    rules = Rules(policy or AllocationPolicySpec(), views, cache)
    return [c.scaled for c in work.scaled_by_supply(views, rules).classes]


def test_scarce_gpus_are_kept_for_the_claims_that_can_use_nothing_else() -> None:
    # Without scarcity the T4 class is 1/20 of the workload: freeing the A100 node's capacity
    # for it saves 1 unit, less than binpack's cost of a new node, so the pod took the last
    # T4. Counted against its supply (2 of 10 GPUs: 25 x its weight), that T4 is worth more.
    problem = Problem(
        nodes=_scarce_cluster(),
        pods=(pod("any", gpu_claim("any")),),
        policy=AllocationPolicySpec(),
        workload=(ANY_GPU, T4_ONLY),
    )
    solution = solve(problem, SolveParams(mode=Mode.online))
    assert_valid(problem, solution)
    assert [p.node for p in solution.placements] == ["common"]


def test_scarcity_scales_only_restricted_classes() -> None:
    nodes = _scarce_cluster()
    views = tuple(view_of(n) for n in nodes)
    rules = Rules(AllocationPolicySpec(), views)
    plain = wl.Workload.from_shapes((ANY_GPU,))
    assert plain.scaled_by_supply(views, rules) is plain  # nothing restricted: unchanged
    scaled = wl.Workload.from_shapes((ANY_GPU, T4_ONLY)).scaled_by_supply(views, rules)
    assert [(c.weight, c.scaled) for c in scaled.classes] == [(19, 19), (1, 25)]
    assert scaled.total == 20
    # Scarcity is relative to the least constrained class: 2 T4s against 8 A100s.
    a100 = WorkloadShape(weight=3, selector={"productName": "*A100*"})
    assert _scaled_weights((a100, T4_ONLY), views) == [3, 16]
    alone = wl.Workload.from_shapes((T4_ONLY,))  # one class: nothing to weigh it against
    assert alone.scaled_by_supply(views, rules) is alone
    # Every GPU allowed by the selector: no scarcity, same workload.
    wide = wl.Workload.from_shapes((ANY_GPU, WorkloadShape(selector={"productName": "*"})))
    assert wide.scaled_by_supply(views, rules) is wide
    # A namespace confined to T4s by the policy is as scarce as the T4 selector.
    confined = AllocationPolicySpec.model_validate(
        {"rules": {"allowedProducts": [{"namespace": "t4s", "products": ["*T4*"]}]}}
    )
    shapes = (ANY_GPU, WorkloadShape(weight=1, namespace="t4s"))
    assert _scaled_weights(shapes, views, confined) == [19, 25]


def test_which_classes_may_use_a_gpu_is_read_per_node_policy_class() -> None:
    # Two nodes with GPUs of one kind in one state; a reservation keeps one node's GPUs for
    # team-a. Asked about the reserved node first, the answer must not stick to the other.
    reserved, open_node = make_node("res-1", "T4"), make_node("open-1", "T4")
    policy = AllocationPolicySpec.model_validate(
        {
            "rules": {
                "reservations": [{"name": "keep", "namespaces": ["team-a"], "nodes": ["res-*"]}]
            }
        }
    )
    views = (view_of(reserved), view_of(open_node))
    rules = Rules(policy, views)
    shapes = (WorkloadShape(weight=2, namespace="team-a"), WorkloadShape(weight=1, namespace="b"))
    work = wl.Workload.from_shapes(shapes)
    assert wl.eligible_row(work, views[0].gpus[0], rules) == (True, False)
    assert wl.eligible_row(work, views[1].gpus[0], rules) == (True, True)
    # The other team's claims are scarce for the reserved GPU: 1 of 2 GPUs, 4 x their weight.
    assert _scaled_weights(shapes, views, policy) == [2, 4]


def test_supply_is_counted_again_when_a_node_changes_hardware() -> None:
    cache = SolverCache()  # one cache throughout: its supply tables are what is tested
    two_t4 = tuple(view_of(n, cache) for n in _scarce_cluster())
    assert _scaled_weights((ANY_GPU, T4_ONLY), two_t4, cache=cache) == [19, 25]
    # The same node names, the T4 node now with 8 GPUs: 8 of 16, 4 x the weight.
    eight_t4 = (view_of(make_node("rare", "T4", count=8), cache), two_t4[1])
    assert _scaled_weights((ANY_GPU, T4_ONLY), eight_t4, cache=cache) == [19, 4]
    # And back: the first count is remembered, not mixed up with the second.
    assert _scaled_weights((ANY_GPU, T4_ONLY), two_t4, cache=cache) == [19, 25]
