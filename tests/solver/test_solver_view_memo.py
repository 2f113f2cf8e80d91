"""Node views are memoized per node in the caller's cache: a new snapshot replaces the old one's
entry."""

from __future__ import annotations

import dataclasses

from checker import make_node

from drasat.api.nas import AllocatedDevices, AllocatedGpu, AllocatedGpus, ClaimInfo
from drasat.solver import SolverCache, inventory
from drasat.v1 import nasinventory


def test_a_snapshot_is_built_once_and_a_new_one_replaces_it() -> None:
    cache = SolverCache()
    first = make_node("view-memo", "T4", count=2)
    view = inventory.view_of(first, cache)
    assert inventory.view_of(first, cache) is view  # same snapshot: no rebuild
    held = AllocatedDevices(
        claimInfo=ClaimInfo(namespace="d", name="c", uid="c"),
        gpu=AllocatedGpus(devices=[AllocatedGpu(uuid="GPU-view-memo-0")]),
    )
    ledger = first.ledger.with_allocated({"c": nasinventory.allocation_of(held)})
    size = len(cache.views)
    for _ in range(3):  # snapshots after snapshots of one node take one entry
        second = dataclasses.replace(first, ledger=ledger)
        newer = inventory.view_of(second, cache)
        assert newer is not view and newer.allocated == frozenset({"c"})
    assert len(cache.views) == size
    assert (
        inventory.view_of(first, cache).allocated == frozenset()
    )  # the old snapshot is read again


def test_a_node_rebuilt_from_the_same_devices_and_ledger_keeps_its_view() -> None:
    # The controller builds every node's NodeState anew each cycle (its CPU and memory in use,
    # its labels) around the devices and ledger it read once per change of its slices and NAS:
    # the view of an unchanged node is not built again.
    cache = SolverCache()
    first = make_node("view-again", "T4", count=2, cpu_milli=8000)
    view = inventory.view_of(first, cache)
    again = dataclasses.replace(first, labels=(("zone", "a"),))
    assert again is not first and inventory.view_of(again, cache) is view
    # What the view reads changed: built again.
    busier = dataclasses.replace(again, used_cpu_milli=1000)
    assert inventory.view_of(busier, cache) is not view
    assert inventory.view_of(busier, cache).cpu_free_milli == 7000
    # An equal ledger that is another object (a NAS read again) is built again, and answers
    # the same.
    copied = dataclasses.replace(first, ledger=dataclasses.replace(first.ledger))
    rebuilt = inventory.view_of(copied, cache)
    assert rebuilt is not view and rebuilt.canonical_key == view.canonical_key
