"""Claim features, policy terms and modes on tiny instances with known answers."""

from __future__ import annotations

import dataclasses

import pytest
from checker import assert_valid, gpu_claim, make_gpus, make_node, mig_claim, pod

from drasat.api.nas import AllocatedDevices
from drasat.api.policy import AllocationPolicySpec
from drasat.solver import Mode, Problem, Solution, SolveParams, solve
from drasat.v1 import nasinventory

MODES = [Mode.online, Mode.batch]


def _solve(problem: Problem, mode: Mode, **params: object) -> Solution:
    solution = solve(problem, SolveParams(mode=mode, **params))  # type: ignore[arg-type]
    assert_valid(problem, solution)
    return solution


def _entries(solution: Solution) -> dict[str, AllocatedDevices]:
    # As the edge writes them: the NAS allocatedClaims entries of the solver's answers.
    return {
        uid: a
        for p in solution.placements
        for uid, a in nasinventory.entries_of(p.allocations).items()
    }


def _policy(spec: dict[str, object]) -> AllocationPolicySpec:
    return AllocationPolicySpec.model_validate(spec)


def _held(
    uid: str, uuid: str, namespace: str = "other", share: int | None = None
) -> AllocatedDevices:
    return AllocatedDevices.model_validate(
        {
            "claimInfo": {"namespace": namespace, "name": uid, "uid": uid},
            "gpu": {"devices": [{"uuid": uuid}]},
            **({"share": {"compute": share}} if share is not None else {}),
        }
    )


@pytest.mark.parametrize("mode", MODES)
def test_gpu_claim_on_mig_gpu_hosts_its_paired_mig_claims_only(mode: Mode) -> None:
    # NVIDIA's pattern: a GPU claim selecting migEnabled=true, MIG claims carved from it.
    paired = pod(
        "p",
        gpu_claim("p-gpu", selector={"migEnabled": True}),
        mig_claim("small", "1g.5gb", gpu_claim_name="gpu"),
        mig_claim("large", "3g.20gb", gpu_claim_name="gpu"),
    )
    other = pod("q", mig_claim("whole", "7g.40gb"))
    problem = Problem(
        nodes=(make_node("n1", "A100-40GB", count=2, mig=True),), pods=(paired, other)
    )
    entries = _entries(_solve(problem, mode))
    (gpu,) = entries["uid-default-p-gpu"].gpu.devices  # type: ignore[union-attr]
    for uid in ("uid-default-small", "uid-default-large"):
        assert entries[uid].mig.devices[0].parentUUID == gpu.uuid  # type: ignore[union-attr]
    assert entries["uid-default-whole"].mig.devices[0].parentUUID != gpu.uuid  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", MODES)
def test_mig_by_needs_picks_the_least_waste(mode: Mode) -> None:
    # 9Gi: 1g.10gb (1 compute, 2 slices) is the smallest that fits; 2g.10gb wastes a slice.
    problem = Problem(
        nodes=(make_node("n1", "A100-40GB", mig=True),),
        pods=(pod("p", mig_claim("m", memory="9Gi")),),
    )
    (entry,) = _entries(_solve(problem, mode)).values()
    assert entry.mig is not None and entry.mig.devices[0].profile == "1g.10gb"


@pytest.mark.parametrize("mode", MODES)
def test_mig_by_compute_needs(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "H100-80GB", mig=True),),
        pods=(pod("p", mig_claim("m", compute_slices=3)),),
    )
    (entry,) = _entries(_solve(problem, mode)).values()
    assert entry.mig is not None and entry.mig.devices[0].profile == "3g.40gb"


@pytest.mark.parametrize("mode", MODES)
def test_at_most_one_media_extension_profile_per_gpu(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "A100-40GB", count=2, mig=True),),
        pods=(pod("a", mig_claim("a", "1g.5gb+me")), pod("b", mig_claim("b", "1g.5gb+me"))),
    )
    parents = {e.mig.devices[0].parentUUID for e in _entries(_solve(problem, mode)).values()}  # type: ignore[union-attr]
    assert len(parents) == 2


@pytest.mark.parametrize("mode", MODES)
def test_required_numa_picks_gpus_of_one_numa_node(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "A100-80GB", count=4, numa=[0, 1, 0, 1]),),
        pods=(
            pod("first", gpu_claim("first")),
            pod("pair", gpu_claim("pair", count=2, topology={"sameNUMANode": "Required"})),
        ),
    )
    entries = _entries(_solve(problem, mode))
    pair = {d.uuid for d in entries["uid-default-pair"].gpu.devices}  # type: ignore[union-attr]
    assert pair in ({"GPU-n1-0", "GPU-n1-2"}, {"GPU-n1-1", "GPU-n1-3"})


@pytest.mark.parametrize("mode", MODES)
def test_preferred_nvlink_domain(mode: Mode) -> None:
    # GPUs 0-1 are linked with each other, 2 and 3 with nothing.
    loose = make_gpus("n1", "H100-80GB", 2, first_index=2)
    node = make_node("n1", "H100-80GB", count=2, nvlink=True, extra_gpus=loose)
    problem = Problem(
        nodes=(node,),
        pods=(pod("p", gpu_claim("c", count=2, topology={"sameNVLinkDomain": "Preferred"})),),
    )
    (entry,) = _entries(_solve(problem, mode)).values()
    assert {d.uuid for d in entry.gpu.devices} == {"GPU-n1-0", "GPU-n1-1"}  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", MODES)
def test_existing_allocations_are_kept_and_respected(mode: Mode) -> None:
    node = make_node(
        "n1",
        "T4",
        count=3,
        allocated={
            "old-whole": _held("old-whole", "GPU-n1-0"),
            # of the new shares' namespace: shares of two namespaces never share a GPU
            "old-share": _held("old-share", "GPU-n1-1", namespace="default", share=60),
        },
    )
    problem = Problem(
        nodes=(node,),
        pods=(
            pod("whole", gpu_claim("whole")),
            pod("share", gpu_claim("share", share={"compute": 40})),
            pod("too-much", gpu_claim("too-much", share={"compute": 50})),
        ),
    )
    solution = _solve(problem, mode)
    entries = _entries(solution)
    assert entries["uid-default-whole"].gpu.devices[0].uuid == "GPU-n1-2"  # type: ignore[union-attr]
    # 40% fits next to the existing 60%; 50% fits nowhere (GPU 2 is now held whole).
    assert entries["uid-default-share"].gpu.devices[0].uuid == "GPU-n1-1"  # type: ignore[union-attr]
    assert [r.pod for r in solution.unplaced] == ["default/too-much"]


@pytest.mark.parametrize("mode", MODES)
def test_claim_already_allocated_pins_its_pods(mode: Mode) -> None:
    held = _held("uid-default-shared", "GPU-n2-0", namespace="default")
    nodes = (make_node("n1", "T4"), make_node("n2", "T4", allocated={"uid-default-shared": held}))
    shared = gpu_claim("shared", uid="uid-default-shared")
    problem = Problem(nodes=nodes, pods=(pod("user", shared),))
    solution = _solve(problem, mode)
    (placement,) = solution.placements
    assert placement.node == "n2" and placement.allocations == {}


@pytest.mark.parametrize("mode", MODES)
def test_unhealthy_gpus_are_not_used(mode: Mode) -> None:
    node = make_node("n1", "T4", count=2)
    first, *rest = node.devices.gpus
    gpus = (dataclasses.replace(first, healthy=False), *rest)
    node = dataclasses.replace(node, devices=dataclasses.replace(node.devices, gpus=gpus))
    problem = Problem(nodes=(node,), pods=(pod("a", gpu_claim("a")), pod("b", gpu_claim("b"))))
    solution = _solve(problem, mode)
    assert _entries(solution)["uid-default-a"].gpu.devices[0].uuid == "GPU-n1-1"  # type: ignore[union-attr]
    assert [r.pod for r in solution.unplaced] == ["default/b"]


def test_batch_places_the_higher_priority_pod() -> None:
    policy = _policy({"namespacePriorities": {"prod-*": 100}})
    problem = Problem(
        nodes=(make_node("n1", "T4"),),
        pods=(
            pod("batch-job", gpu_claim("low", namespace="dev"), namespace="dev"),
            pod("serving", gpu_claim("high", namespace="prod-a"), namespace="prod-a"),
        ),
        policy=policy,
    )
    solution = _solve(problem, Mode.batch)
    assert [p.pod for p in solution.placements] == ["prod-a/serving"]


@pytest.mark.parametrize("mode", MODES)
def test_binpack_fills_the_used_node_and_spread_the_empty_one(mode: Mode) -> None:
    nodes = (
        make_node("busy", "T4", count=2, allocated={"old": _held("old", "GPU-busy-0")}),
        make_node("empty", "T4", count=2),
    )
    pods = (pod("p", gpu_claim("c")),)
    binpack = _policy({"objective": [{"term": "binpack"}]})
    spread = _policy({"objective": [{"term": "spread"}]})
    assert _solve(Problem(nodes, pods, binpack), mode).placements[0].node == "busy"
    assert _solve(Problem(nodes, pods, spread), mode).placements[0].node == "empty"


@pytest.mark.parametrize("mode", MODES)
def test_prefer_node_and_product(mode: Mode) -> None:
    nodes = (make_node("a-1", "T4"), make_node("b-1", "L4"))
    pods = (pod("p", gpu_claim("c")),)
    by_node = _policy({"objective": [{"term": "preferNode", "nodes": ["b-*"]}]})
    by_product = _policy({"objective": [{"term": "preferProduct", "products": ["*t4*"]}]})
    assert _solve(Problem(nodes, pods, by_node), mode).placements[0].node == "b-1"
    assert _solve(Problem(nodes, pods, by_product), mode).placements[0].node == "a-1"


@pytest.mark.parametrize("mode", MODES)
def test_same_input_same_output(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "A100-40GB", count=2, mig=True), make_node("n2", "T4", count=4)),
        pods=tuple(pod(f"p{i}", mig_claim(f"m{i}", "1g.5gb")) for i in range(5))
        + tuple(pod(f"g{i}", gpu_claim(f"g{i}")) for i in range(3)),
    )
    first = solve(problem, SolveParams(mode=mode))
    second = solve(problem, SolveParams(mode=mode))
    assert first.placements == second.placements and first.unplaced == second.unplaced


def test_batch_is_never_worse_than_online() -> None:
    problem = Problem(
        nodes=(make_node("n1", "T4", count=2),),
        pods=tuple(
            pod(f"s{i}", gpu_claim(f"s{i}", share={"compute": c}))
            for i, c in enumerate((60, 30, 70, 40))
        ),
    )
    online = _solve(problem, Mode.online)
    batch = _solve(problem, Mode.batch)
    assert len(batch.placements) >= len(online.placements)
    assert len(batch.placements) == 4


def test_sharing_defaults_to_nvidia_time_slicing() -> None:
    problem = Problem(nodes=(make_node("n1", "T4"),), pods=(pod("p", gpu_claim("c")),))
    (entry,) = _entries(_solve(problem, Mode.online)).values()
    assert entry.gpu is not None and entry.gpu.sharing is not None
    assert entry.gpu.sharing.model_dump(exclude_none=True, mode="json") == {
        "strategy": "TimeSlicing",
        "timeSlicingConfig": {"timeSlice": "Default"},
    }


def test_mig_profile_facts_fall_back_to_the_catalog() -> None:
    # The example NAS lists MIG entries without memoryBytes: needs use the catalog's values.
    node = make_node("n1", "A100-80GB", mig=True)
    assert all(m.memoryBytes is None for m in node.devices.mig_profiles)
    problem = Problem(nodes=(node,), pods=(pod("p", mig_claim("m", memory="30Gi")),))
    (entry,) = _entries(_solve(problem, Mode.online)).values()
    assert entry.mig is not None and entry.mig.devices[0].profile == "3g.40gb"


@pytest.mark.parametrize("mode", MODES)
def test_claim_of_a_non_sharable_class_serves_one_pod(mode: Mode) -> None:
    private = dataclasses.replace(gpu_claim("private"), shareable=False)
    problem = Problem(
        nodes=(make_node("n1", "T4", count=2),),
        pods=(pod("first", private), pod("second", private)),
    )
    solution = _solve(problem, mode)
    assert [p.pod for p in solution.placements] == ["default/first"]
    (rejected,) = solution.unplaced
    assert "is not sharable" in rejected.reasons[0] and "default/first" in rejected.reasons[0]


def test_huge_priorities_solve_in_two_stages() -> None:
    # Kubernetes priorities reach 2e9: the weights no longer fit one objective.
    problem = Problem(
        nodes=(make_node("n1", "T4"), make_node("n2", "L4")),
        pods=(
            pod("low", gpu_claim("low")),
            pod(
                "critical",
                gpu_claim("critical", selector={"productName": "*T4*"}),
                priority=2_000_000_000,
            ),
            pod(
                "other",
                gpu_claim("other", selector={"productName": "*T4*"}),
                priority=1_000_000_000,
            ),
        ),
    )
    solution = _solve(problem, Mode.batch)
    nodes = {p.pod: p.node for p in solution.placements}
    assert nodes == {"default/critical": "n1", "default/low": "n2"}
    assert solution.status.value == "OPTIMAL"


@pytest.mark.parametrize("mode", MODES)
def test_mig_claim_paired_with_an_allocated_gpu_claim_goes_on_its_gpu(mode: Mode) -> None:
    # The GPU claim was allocated before (Immediate mode); its MIG claim comes now.
    held = _held("uid-default-p-gpu", "GPU-n1-1", namespace="default")
    node = make_node("n1", "A100-40GB", count=2, mig=True, allocated={"uid-default-p-gpu": held})
    gpu = gpu_claim("p-gpu", selector={"migEnabled": True})
    problem = Problem(
        nodes=(node,), pods=(pod("p", gpu, mig_claim("slice", "3g.20gb", gpu_claim_name="gpu")),)
    )
    (entry,) = _entries(_solve(problem, mode)).values()
    assert entry.mig is not None and entry.mig.devices[0].parentUUID == "GPU-n1-1"


def test_unhealthy_gpus_are_mentioned_in_node_reasons() -> None:
    node = make_node("n1", "T4")
    first, *rest = node.devices.gpus
    gpus = (dataclasses.replace(first, healthy=False), *rest)
    node = dataclasses.replace(node, devices=dataclasses.replace(node.devices, gpus=gpus))
    problem = Problem(nodes=(node,), pods=(pod("p", gpu_claim("c")),))
    solution = solve(problem, SolveParams(mode=Mode.online, node_feasibility=True))
    assert "1 unhealthy GPUs not counted" in str(solution.node_feasibility["default/p"]["n1"])
