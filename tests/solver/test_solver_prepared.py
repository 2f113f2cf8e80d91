"""Devices a node still has in use without an allocation are busy: claims in `preparedClaims`
that left `allocatedClaims` (being torn down) or never were in it (v1 claims), and MIG devices
the node plugin reported as orphans. A new claim is never placed on them."""

from __future__ import annotations

from dataclasses import replace

import pytest
from checker import gpu_claim, make_node, mig_claim, pod
from hypothesis import given, settings
from hypothesis import strategies as st

from drasat.api import catalog
from drasat.api.nas import (
    AllocatedDevices,
    MigPlacement,
    NodeAllocationStateSpec,
    OrphanMigDevice,
    PreparedDevices,
    PreparedGpu,
    PreparedGpus,
    PreparedMigDevice,
    PreparedMigDevices,
)
from drasat.solver import Mode, Problem, SolveParams, solve
from drasat.solver.inventory import build_view
from drasat.solver.problem import NodeState
from drasat.v1 import nasinventory


def _with(node: NodeState, **spec: object) -> NodeState:
    """The node with these NAS fields (preparedClaims, orphanMigDevices) as its ledger."""
    current = {"allocatedClaims": nasinventory.entries_of(node.ledger.allocated)}
    nas = NodeAllocationStateSpec.model_validate({**current, **spec})
    return replace(node, ledger=nasinventory.ledger_of(nas))


def _prepared_gpu(*uuids: str) -> PreparedDevices:
    return PreparedDevices(gpu=PreparedGpus(devices=[PreparedGpu(uuid=u) for u in uuids]))


def _prepared_mig(parent: str, profile: str, start: int, size: int) -> PreparedDevices:
    device = PreparedMigDevice(
        uuid=f"MIG-{parent}-{start}",
        profile=profile,
        parentUUID=parent,
        placement=MigPlacement(start=start, size=size),
    )
    return PreparedDevices(mig=PreparedMigDevices(devices=[device]))


def test_a_prepared_claim_without_an_allocation_holds_its_gpu() -> None:
    node = _with(make_node("n", "T4", count=2), preparedClaims={"gone": _prepared_gpu("GPU-n-0")})
    view = build_view(node)
    held = {g.uuid: (g.held_whole, g.held_by) for g in view.gpus}
    assert held == {"GPU-n-0": (True, ("gone",)), "GPU-n-1": (False, ())}
    assert view.allocated == frozenset()  # not an allocation: no namespace budget, no pinning


def test_a_prepared_claim_that_is_still_allocated_counts_once() -> None:
    share = AllocatedDevices.model_validate(
        {
            "claimInfo": {"namespace": "a", "name": "s", "uid": "s"},
            "gpu": {"devices": [{"uuid": "GPU-n-0"}]},
            "share": {"compute": 30},
        }
    )
    node = _with(
        make_node("n", "T4"),
        allocatedClaims={"s": share},
        preparedClaims={"s": _prepared_gpu("GPU-n-0")},
    )
    (gpu,) = build_view(node).gpus
    assert (gpu.held_whole, gpu.share_compute_used, gpu.share_claims) == (False, 30, 1)


def test_prepared_mig_devices_and_orphans_occupy_their_slices() -> None:
    node = make_node("n", "A100-40GB", mig=True)
    orphan = OrphanMigDevice(
        parentUUID="GPU-n-0", giId=7, profile="1g.5gb", placement=MigPlacement(start=6, size=1)
    )
    node = _with(
        node,
        preparedClaims={"gone": _prepared_mig("GPU-n-0", "2g.10gb", 2, 2)},
        orphanMigDevices=[orphan],
    )
    (gpu,) = build_view(node).gpus
    assert gpu.mig_occupied == frozenset({2, 3, 6})
    assert not gpu.held_whole


@pytest.mark.parametrize("mode", [Mode.online, Mode.batch])
def test_a_slice_being_torn_down_is_not_given_to_a_new_claim(mode: Mode) -> None:
    # 4g.20gb has one placement on an A100-40GB (start 0); a prepared 1g.5gb there blocks it
    # until the plugin removes the preparedClaims entry.
    base = make_node("n", "A100-40GB", mig=True)
    busy = _with(base, preparedClaims={"gone": _prepared_mig("GPU-n-0", "1g.5gb", 0, 1)})
    claim = pod("big", mig_claim("big", "4g.20gb"))
    params = SolveParams(mode=mode)
    assert solve(Problem(nodes=(busy,), pods=(claim,)), params).unplaced
    assert not solve(Problem(nodes=(base,), pods=(claim,)), params).unplaced


@pytest.mark.parametrize("mode", [Mode.online, Mode.batch])
def test_a_gpu_being_torn_down_is_not_given_to_a_new_claim(mode: Mode) -> None:
    node = _with(make_node("n", "T4", count=2), preparedClaims={"gone": _prepared_gpu("GPU-n-0")})
    params = SolveParams(mode=mode)
    two = Problem(nodes=(node,), pods=(pod("two", gpu_claim("two", count=2)),))
    assert solve(two, params).unplaced
    one = solve(Problem(nodes=(node,), pods=(pod("one", gpu_claim("one")),)), params)
    (placement,) = one.placements
    (allocation,) = placement.allocations.values()
    assert allocation.gpus == ("GPU-n-1",)
    share = Problem(nodes=(node,), pods=(pod("s", gpu_claim("s", share={"compute": 10})),))
    (placement,) = solve(share, params).placements
    (allocation,) = placement.allocations.values()
    assert allocation.gpus == ("GPU-n-1",)


_A100 = catalog.find_product("A100-40GB")
assert _A100 is not None
_OPTIONS = [(p.name, s, z) for p in _A100.mig_profiles for s, z in p.placements]


@st.composite
def _busy_layouts(draw: st.DrawFn) -> list[tuple[str, int, int]]:
    """Non-overlapping MIG devices on one A100, each one prepared-only or an orphan."""
    chosen: list[tuple[str, int, int]] = []
    used: set[int] = set()
    for name, start, size in draw(st.permutations(_OPTIONS))[: draw(st.integers(0, 4))]:
        if used.isdisjoint(range(start, start + size)) and not name.endswith("+me"):
            chosen.append((name, start, size))
            used.update(range(start, start + size))
    return chosen


@settings(max_examples=40, deadline=None)
@given(
    busy=_busy_layouts(),
    orphans=st.lists(st.booleans(), min_size=4, max_size=4),
    wanted=st.lists(st.sampled_from(["1g.5gb", "2g.10gb", "3g.20gb"]), min_size=1, max_size=4),
)
def test_no_new_mig_device_overlaps_a_busy_one(
    busy: list[tuple[str, int, int]], orphans: list[bool], wanted: list[str]
) -> None:
    prepared: dict[str, PreparedDevices] = {}
    reported: list[OrphanMigDevice] = []
    for i, (name, start, size) in enumerate(busy):
        if orphans[i]:
            where = MigPlacement(start=start, size=size)
            reported.append(
                OrphanMigDevice(parentUUID="GPU-n-0", giId=i, profile=name, placement=where)
            )
        else:
            prepared[f"gone-{i}"] = _prepared_mig("GPU-n-0", name, start, size)
    node = _with(
        make_node("n", "A100-40GB", mig=True),
        preparedClaims=prepared,
        orphanMigDevices=reported,
    )
    pods = tuple(pod(f"p{i}", mig_claim(f"c{i}", profile)) for i, profile in enumerate(wanted))
    solution = solve(Problem(nodes=(node,), pods=pods), SolveParams(mode=Mode.batch))
    taken = {s for _, start, size in busy for s in range(start, start + size)}
    for placement in solution.placements:
        for allocation in placement.allocations.values():
            assert allocation.mig
            for device in allocation.migs:
                new = set(range(device.start, device.end))
                assert new.isdisjoint(taken), (busy, device)
                taken |= new


def test_the_nas_spec_keeps_the_fields_it_is_given() -> None:
    spec = NodeAllocationStateSpec.model_validate(
        {
            "orphanMigDevices": [
                {
                    "parentUUID": "GPU-x",
                    "giId": 3,
                    "profile": "1g.5gb",
                    "placement": {"start": 1, "size": 1},
                    "createdByDrasat": True,
                }
            ]
        }
    )
    assert spec.orphanMigDevices[0].createdByDrasat
