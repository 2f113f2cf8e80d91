"""Node views are memoized per node in the caller's cache: a new snapshot replaces the old one's
entry."""

from __future__ import annotations

import dataclasses

from checker import make_node

from drasat.api.nas import AllocatedDevices, AllocatedGpu, AllocatedGpus, ClaimInfo
from drasat.solver import SolverCache, inventory


def test_a_snapshot_is_built_once_and_a_new_one_replaces_it() -> None:
    cache = SolverCache()
    first = make_node("view-memo", "T4", count=2)
    view = inventory.view_of(first, cache)
    assert inventory.view_of(first, cache) is view  # same snapshot: no rebuild
    held = AllocatedDevices(
        claimInfo=ClaimInfo(namespace="d", name="c", uid="c"),
        gpu=AllocatedGpus(devices=[AllocatedGpu(uuid="GPU-view-memo-0")]),
    )
    nas = first.nas.model_copy(update={"allocatedClaims": {"c": held}})
    size = len(cache.views)
    for _ in range(3):  # snapshots after snapshots of one node take one entry
        second = dataclasses.replace(first, nas=nas)
        newer = inventory.view_of(second, cache)
        assert newer is not view and newer.allocated == frozenset({"c"})
    assert len(cache.views) == size
    assert (
        inventory.view_of(first, cache).allocated == frozenset()
    )  # the old snapshot is read again
