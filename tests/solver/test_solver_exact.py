"""Exact answers on tiny instances, including the traps where first-fit fails."""

from __future__ import annotations

import pytest
from checker import assert_valid, gpu_claim, make_node, mig_claim, pod

from drasat.api.nas import AllocatedDevices
from drasat.solver import Mode, Problem, Solution, SolveParams, solve
from drasat.v1 import nasinventory

MODES = [Mode.online, Mode.batch]


def _solve(problem: Problem, mode: Mode) -> Solution:
    solution = solve(problem, SolveParams(mode=mode))
    assert_valid(problem, solution)
    return solution


def _devices(solution: Solution) -> dict[str, AllocatedDevices]:
    # As the edge writes them: the NAS allocatedClaims entries of the solver's answers.
    return {
        uid: a
        for p in solution.placements
        for uid, a in nasinventory.entries_of(p.allocations).items()
    }


@pytest.mark.parametrize("mode", MODES)
def test_two_1g_then_a_4g_fit_on_one_a100(mode: Mode) -> None:
    # First-fit puts the 1g devices at slices 0 and 1, and the 4g (only at 0) no longer fits.
    problem = Problem(
        nodes=(make_node("n1", "A100-40GB", mig=True),),
        pods=(
            pod("small-1", mig_claim("s1", "1g.5gb")),
            pod("small-2", mig_claim("s2", "1g.5gb")),
            pod("big", mig_claim("b", "4g.20gb")),
        ),
    )
    solution = _solve(problem, mode)
    assert not solution.unplaced
    starts = {
        uid: a.mig.devices[0].placement.start for uid, a in _devices(solution).items() if a.mig
    }
    assert starts["uid-default-b"] == 0
    assert starts["uid-default-s1"] >= 4 and starts["uid-default-s2"] >= 4


def test_online_places_the_first_1g_away_from_the_4g_window() -> None:
    # Online sees one pod at a time: only the fragmentation term keeps slices 0-3 free.
    problem = Problem(
        nodes=(make_node("n1", "A100-40GB", mig=True),),
        pods=(pod("small-1", mig_claim("s1", "1g.5gb")),),
    )
    solution = _solve(problem, Mode.online)
    (placement,) = solution.placements
    (entry,) = placement.allocations.values()
    assert entry.mig and entry.migs[0].start == 6


@pytest.mark.parametrize("mode", MODES)
def test_one_gpu_pod_and_two_a100_pod(mode: Mode) -> None:
    # First-fit gives the 1-GPU pod an A100 and the 2xA100 pod no longer fits.
    problem = Problem(
        nodes=(make_node("a100", "A100-40GB", count=2), make_node("t4", "T4", count=1)),
        pods=(
            pod("one", gpu_claim("one")),
            pod("two", gpu_claim("two", count=2, selector={"productName": "*a100*"})),
        ),
    )
    solution = _solve(problem, mode)
    assert not solution.unplaced
    nodes = {p.pod: p.node for p in solution.placements}
    assert nodes == {"default/one": "t4", "default/two": "a100"}


SHARES = Problem(
    nodes=(make_node("n1", "T4", count=2),),
    pods=tuple(
        pod(f"s{i}", gpu_claim(f"s{i}", share={"compute": c}))
        for i, c in enumerate((50, 30, 70, 50))
    ),
)


def test_shares_50_30_70_50_fit_on_two_gpus_in_batch() -> None:
    # Packing in order (50+30 on one GPU) leaves 20% and 30%: the last 50 fits nowhere.
    solution = _solve(SHARES, Mode.batch)
    assert not solution.unplaced, solution.unplaced
    by_gpu: dict[str, int] = {}
    for entry in _devices(solution).values():
        assert entry.gpu is not None and entry.share is not None
        uuid = entry.gpu.devices[0].uuid
        by_gpu[uuid] = by_gpu.get(uuid, 0) + (entry.share.compute or 0)
    assert sorted(by_gpu.values()) == [100, 100]


def test_online_shares_keep_capacity_the_workload_can_use() -> None:
    # The fragmentation term prices what the problem's claim shapes (50, 30, 70, 50) can no
    # longer use: 30 beside 50 would leave 20% that none of them fits, 30 on the empty GPU
    # leaves 70% that the 70 takes. Charging only for opening a GPU packs 30 beside 50, and the
    # last 50 then fits nowhere.
    solution = _solve(SHARES, Mode.online)
    assert not solution.unplaced, solution.unplaced
    gpus = {
        uid: a.gpu.devices[0].uuid for uid, a in _devices(solution).items() if a.gpu is not None
    }
    assert gpus["uid-default-s0"] != gpus["uid-default-s1"]
    assert gpus["uid-default-s1"] == gpus["uid-default-s2"]


def test_online_strands_no_gpu_behind_exhausted_cpu() -> None:
    # Two 1-GPU nodes: "a" has CPU for one more pod only. Whole-GPU pods are the workload, so
    # the CPU-only pod goes to "b" (where it leaves enough CPU), not to "a", which would strand
    # a's free GPU.
    problem = Problem(
        nodes=(
            make_node("a", "T4", count=1, cpu_milli=4000),
            make_node("b", "T4", count=1, cpu_milli=16000),
        ),
        pods=(
            pod("cpu", cpu_milli=2000),
            pod("g1", gpu_claim("g1"), cpu_milli=4000),
            pod("g2", gpu_claim("g2"), cpu_milli=4000),
        ),
    )
    solution = _solve(problem, Mode.online)
    assert not solution.unplaced, solution.unplaced
    assert {p.pod: p.node for p in solution.placements}["default/cpu"] == "b"


def test_online_explains_a_share_that_fits_nowhere() -> None:
    problem = Problem(
        nodes=(make_node("n1", "T4", count=1),),
        pods=(
            pod("s0", gpu_claim("s0", share={"compute": 60})),
            pod("s1", gpu_claim("s1", share={"compute": 50})),
        ),
    )
    solution = _solve(problem, Mode.online)
    (rejected,) = solution.unplaced
    assert rejected.pod == "default/s1"
    assert "share compute 50%" in rejected.reasons[0]
    assert "at most 40% compute free" in rejected.reasons[0]


@pytest.mark.parametrize("mode", MODES)
def test_two_pods_with_exclusive_gpus_get_different_gpus(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "T4", count=2),),
        pods=(pod("pod1", gpu_claim("pod1-gpu")), pod("pod2", gpu_claim("pod2-gpu"))),
    )
    solution = _solve(problem, mode)
    uuids = {a.gpu.devices[0].uuid for a in _devices(solution).values() if a.gpu}
    assert len(uuids) == 2


@pytest.mark.parametrize("mode", MODES)
def test_two_pods_sharing_one_claim_land_on_one_gpu(mode: Mode) -> None:
    shared = gpu_claim("shared-gpu")
    problem = Problem(
        nodes=(make_node("n1", "T4", count=2), make_node("n2", "T4", count=2)),
        pods=(pod("pod1", shared), pod("pod2", shared)),
    )
    solution = _solve(problem, mode)
    assert {p.node for p in solution.placements} == {"n1"} or len(
        {p.node for p in solution.placements}
    ) == 1
    entries = _devices(solution)
    assert list(entries) == ["uid-default-shared-gpu"]
    assert entries["uid-default-shared-gpu"].gpu is not None
    assert len(entries["uid-default-shared-gpu"].gpu.devices) == 1


@pytest.mark.parametrize("mode", MODES)
def test_optional_claim_without_a_free_gpu_runs_with_zero_devices(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "T4", count=1),),
        pods=(
            pod("first", gpu_claim("first")),
            pod("soft", gpu_claim("soft", optional=True)),
        ),
    )
    solution = _solve(problem, mode)
    assert not solution.unplaced
    soft = _devices(solution)["uid-default-soft"]
    assert soft.optional is True and soft.gpu is not None and soft.gpu.devices == []


@pytest.mark.parametrize("mode", MODES)
def test_optional_claim_gets_a_gpu_when_one_is_free(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "T4", count=1),),
        pods=(pod("soft", gpu_claim("soft", optional=True)),),
    )
    soft = _devices(_solve(problem, mode))["uid-default-soft"]
    assert soft.gpu is not None and len(soft.gpu.devices) == 1
