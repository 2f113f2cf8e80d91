"""The duplicate-GPU check is memoized by the nodes' uuid sets, and still catches a change."""

from __future__ import annotations

import dataclasses

import pytest
from checker import make_node

from drasat.api.inputerrors import InputError
from drasat.solver import Problem, SolverCache, inventory, validate


def test_checked_uuid_sets_are_remembered_and_a_changed_node_is_checked_again() -> None:
    cache = SolverCache()
    first, second = make_node("memo-n1", "T4"), make_node("memo-n2", "L4")
    validate.check(Problem(nodes=(first, second), pods=()), cache)
    key = (inventory.view_of(first, cache).uuids, inventory.view_of(second, cache).uuids)
    assert key in cache.uuids_checked
    # Same GPUs, another node object (new allocations): the remembered result holds.
    validate.check(Problem(nodes=(first, dataclasses.replace(second, ready=True)), pods=()), cache)
    # One node now carries the other's GPUs: checked afresh, and caught.
    clash = dataclasses.replace(first, name="memo-n2")
    with pytest.raises(
        InputError, match=r"gpu\.uuid GPU-memo-n1-0 \(its [^)]*\) is also on node memo-n1"
    ):
        validate.check(Problem(nodes=(first, clash), pods=()), cache)
