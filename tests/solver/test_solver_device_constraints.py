"""The solver's constraints over the devices a pod's claims take (DeviceConstraint), a MIG
claim's eligible placements, and topology on GPUs without a NUMA node: exact answers on tiny
instances, in both modes."""

from __future__ import annotations

import dataclasses

import pytest
from checker import gpu_claim, make_node, mig_claim, pod

from drasat.api.nas import AllocatedDevices
from drasat.api.policy import AllocationPolicySpec
from drasat.solver import (
    DeviceConstraint,
    Mode,
    Problem,
    Solution,
    SolveParams,
    SolverCache,
    demand,
    extract,
    model,
    solve,
    solving,
)
from drasat.solver.inventory import build_view
from drasat.solver.model import PodEntry
from drasat.solver.problem import ClaimRequest, DeviceKey
from drasat.solver.rules import Rules
from drasat.v1 import nasinventory

MODES = [Mode.online, Mode.batch]


def _solve(problem: Problem, mode: Mode) -> Solution:
    return solve(problem, SolveParams(mode=mode))


def _entries(solution: Solution) -> dict[str, AllocatedDevices]:
    # As the edge writes them: the NAS allocatedClaims entries of the solver's answers.
    return {
        uid: a
        for p in solution.placements
        for uid, a in nasinventory.entries_of(p.allocations).items()
    }


def _gpus(entry: AllocatedDevices) -> list[str]:
    assert entry.gpu is not None
    return sorted(d.uuid for d in entry.gpu.devices)


def _with(claim: ClaimRequest, *constraints: DeviceConstraint) -> ClaimRequest:
    return dataclasses.replace(claim, constraints=constraints)


def _whole(values: dict[str, str]) -> tuple[tuple[DeviceKey, str], ...]:
    return tuple(sorted(((uuid, None, None), v) for uuid, v in values.items()))


@pytest.mark.parametrize("mode", MODES)
def test_required_numa_on_gpus_without_numa_is_unplaced_not_raised(mode: Mode) -> None:
    # Each GPU without a NUMA node is a group of its own: two of them never share one.
    problem = Problem(
        nodes=(make_node("n1", "T4", count=2),),
        pods=(pod("pair", gpu_claim("pair", count=2, topology={"sameNUMANode": "Required"})),),
    )
    solution = _solve(problem, mode)
    assert not solution.placements and [r.pod for r in solution.unplaced] == ["default/pair"]


@pytest.mark.parametrize("mode", MODES)
def test_match_puts_a_claims_gpus_on_one_value(mode: Mode) -> None:
    values = _whole({"GPU-n1-0": "a", "GPU-n1-1": "b", "GPU-n1-2": "a", "GPU-n1-3": "b"})
    match = DeviceConstraint("k", distinct=False, values=values, label="matchAttribute x")
    problem = Problem(
        nodes=(make_node("n1", "T4", count=4),),
        pods=(
            pod("first", gpu_claim("first", uid="first")),
            pod("pair", _with(gpu_claim("pair", count=2, uid="pair"), match)),
        ),
    )
    pair = _gpus(_entries(_solve(problem, mode))["pair"])
    assert pair in (["GPU-n1-0", "GPU-n1-2"], ["GPU-n1-1", "GPU-n1-3"])


@pytest.mark.parametrize("mode", MODES)
def test_match_across_two_claims_of_a_pod(mode: Mode) -> None:
    values = _whole({"GPU-n1-0": "a", "GPU-n1-1": "b", "GPU-n1-2": "b"})
    match = DeviceConstraint("k", distinct=False, values=values)
    problem = Problem(
        nodes=(make_node("n1", "T4", count=3),),
        pods=(
            pod(
                "p",
                _with(gpu_claim("x", uid="x"), match),
                _with(gpu_claim("y", uid="y"), match),
            ),
        ),
    )
    entries = _entries(_solve(problem, mode))
    assert _gpus(entries["x"]) + _gpus(entries["y"]) in (
        ["GPU-n1-1", "GPU-n1-2"],
        ["GPU-n1-2", "GPU-n1-1"],
    )


@pytest.mark.parametrize("mode", MODES)
def test_a_device_without_a_value_is_never_taken(mode: Mode) -> None:
    values = _whole({"GPU-n1-1": "a"})
    match = DeviceConstraint("k", distinct=False, values=values)
    problem = Problem(
        nodes=(make_node("n1", "T4", count=2),),
        pods=(pod("p", _with(gpu_claim("x", uid="x"), match)),),
    )
    assert _gpus(_entries(_solve(problem, mode))["x"]) == ["GPU-n1-1"]
    problem = dataclasses.replace(
        problem, pods=(pod("p", _with(gpu_claim("x", count=2, uid="x"), match)),)
    )
    assert not _solve(problem, mode).placements


@pytest.mark.parametrize("mode", MODES)
def test_distinct_shares_take_two_gpus(mode: Mode) -> None:
    values = _whole({"GPU-n1-0": "0", "GPU-n1-1": "1"})
    distinct = DeviceConstraint("k", distinct=True, values=values)
    share = {"memory": "1Gi", "compute": 10}
    one = _with(gpu_claim("a", share=share, uid="a"), distinct)
    two = _with(gpu_claim("b", share=share, uid="b"), distinct)
    problem = Problem(nodes=(make_node("n1", "T4", count=2),), pods=(pod("p", one, two),))
    entries = _entries(_solve(problem, mode))
    assert sorted(_gpus(entries["a"]) + _gpus(entries["b"])) == ["GPU-n1-0", "GPU-n1-1"]
    alone = Problem(nodes=(make_node("n1", "T4", count=1),), pods=(pod("p", one, two),))
    assert not _solve(alone, mode).placements


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("start", [0, 2, 5])
def test_eligible_placements_choose_the_mig_start(mode: Mode, start: int) -> None:
    claim = dataclasses.replace(
        mig_claim("m", "1g.5gb"), placements=frozenset({("GPU-n1-0", "1g.5gb", start)})
    )
    problem = Problem(nodes=(make_node("n1", "A100-40GB", mig=True),), pods=(pod("p", claim),))
    (entry,) = _entries(_solve(problem, mode)).values()
    assert entry.mig is not None
    assert [d.placement.start for d in entry.mig.devices] == [start]


@pytest.mark.parametrize("mode", MODES)
def test_a_mig_claim_of_no_profile_takes_any_device_it_lists(mode: Mode) -> None:
    # Listed devices of two profiles (one placement each): the claim takes either, and only
    # a listed one, whatever the needs of a claim of no profile would say.
    listed = frozenset({("GPU-n1-0", "3g.20gb", 4), ("GPU-n1-0", "1g.5gb+me", 0)})
    claim = dataclasses.replace(mig_claim("m", None), placements=listed)
    pair = dataclasses.replace(claim, uid="m2", name="m2")
    problem = Problem(
        nodes=(make_node("n1", "A100-40GB", mig=True),), pods=(pod("p", claim, pair),)
    )
    entries = _entries(_solve(problem, mode))
    taken = sorted((d.profile, d.placement.start) for e in entries.values() for d in e.mig.devices)  # type: ignore[union-attr]
    assert taken == [("1g.5gb+me", 0), ("3g.20gb", 4)]


def test_the_model_of_required_numa_builds_over_gpus_without_numa() -> None:
    # The model itself (not only the filters before it) groups a GPU without a NUMA node alone;
    # it raised TypeError (unhashable GpuSlot) when such a GPU reached it.
    node = make_node("n1", "T4", count=3, numa=[0, 0, None])  # type: ignore[list-item]
    view = build_view(node)
    request = pod("p", gpu_claim("pair", count=2, topology={"sameNUMANode": "Required"}))
    claims = tuple(demand.normalize(c, request) for c in request.claims)
    rules = Rules(AllocationPolicySpec(), (view,), SolverCache())
    built = model.build([PodEntry(request, 0, claims, (view,))], rules)
    result = solving.solve(built, solving.Budget(time_limit_s=5.0, workers=1, seed=0))
    _, chosen = extract.placements(built, result, [PodEntry(request, 0, claims, (view,))])[
        "default/p"
    ]
    assert sorted(c.uuid for c in chosen["uid-default-pair"]) == ["GPU-n1-0", "GPU-n1-1"]


# -- shares of one namespace per GPU (the node plugin's one MPS server per GPU) -------------------


def _share(name: str, namespace: str) -> ClaimRequest:
    return gpu_claim(name, share={"compute": 20}, namespace=namespace)


@pytest.mark.parametrize("mode", MODES)
def test_shares_of_two_namespaces_take_two_gpus(mode: Mode) -> None:
    problem = Problem(
        nodes=(make_node("n1", "T4", count=2),),
        pods=(
            pod("a", _share("a", "team-a"), namespace="team-a"),
            pod("b", _share("b", "team-b"), namespace="team-b"),
            pod("c", _share("c", "team-a"), namespace="team-a"),
        ),
    )
    entries = _entries(_solve(problem, mode))
    a, b, c = (_gpus(entries[uid])[0] for uid in ("uid-team-a-a", "uid-team-b-b", "uid-team-a-c"))
    assert a != b and c == a


@pytest.mark.parametrize("mode", MODES)
def test_a_gpu_with_another_namespaces_share_is_closed_to_a_share(mode: Mode) -> None:
    held = AllocatedDevices.model_validate(
        {
            "claimInfo": {"namespace": "team-b", "name": "old", "uid": "old"},
            "gpu": {"devices": [{"uuid": "GPU-n1-0"}]},
            "share": {"compute": 10},
        }
    )
    problem = Problem(
        nodes=(make_node("n1", "T4", count=1, allocated={"old": held}),),
        pods=(pod("a", _share("a", "team-a"), namespace="team-a"),),
    )
    solution = _solve(problem, mode)
    assert not solution.placements
    (rejection,) = solution.unplaced
    assert "hold shares of other namespaces" in " ".join(rejection.reasons), rejection.reasons
    same = dataclasses.replace(problem, pods=(pod("b", _share("b", "team-b"), namespace="team-b"),))
    assert _solve(same, mode).placements


@pytest.mark.parametrize("mode", MODES)
def test_a_gpu_of_a_spread_share_claim_is_closed_to_its_namespaces_shares(mode: Mode) -> None:
    def held(uuid: str) -> AllocatedDevices:
        return AllocatedDevices.model_validate(
            {
                "claimInfo": {"namespace": "team-a", "name": "old", "uid": "old"},
                "gpu": {"devices": [{"uuid": uuid}]},
                "share": {"memory": "1Gi"},
            }
        )

    # One claim's two shares (two ledger entries of claim `old`) on GPUs 0 and 1.
    spread = {"old/s#0": held("GPU-n1-0"), "old/s#1": held("GPU-n1-1")}
    problem = Problem(
        nodes=(make_node("n1", "T4", count=3, allocated=spread),),
        pods=(pod("a", _share("a", "team-a"), namespace="team-a"),),
    )
    entries = _entries(_solve(problem, mode))
    assert _gpus(entries["uid-team-a-a"]) == ["GPU-n1-2"]
