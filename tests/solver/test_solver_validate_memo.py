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


class _CountedGets(dict):  # type: ignore[type-arg]
    gets = 0

    def get(self, *args: object) -> object:
        _CountedGets.gets += 1
        return super().get(*args)


def test_a_check_looks_only_at_the_nodes_that_changed_since_the_last() -> None:
    # The next solve of an online run is the last one's cluster with one node replaced: the
    # other 299 are not looked up again (before: each node's view looked up on every check).
    cache = SolverCache()
    cache.views = _CountedGets()
    node_states = [make_node(f"few-{i:03d}", "T4") for i in range(300)]
    validate.check(Problem(nodes=tuple(node_states), pods=()), cache)
    _CountedGets.gets = 0
    node_states[7] = dataclasses.replace(node_states[7], ready=True)
    views = validate.check(Problem(nodes=tuple(node_states), pods=()), cache)
    assert _CountedGets.gets <= 1
    assert views["few-007"] is inventory.view_of(node_states[7], cache)
    assert list(views) == [n.name for n in node_states]


def test_nodes_listed_in_another_order_are_viewed_in_that_order() -> None:
    cache = SolverCache()
    node_states = [make_node(f"order-{i}", "T4") for i in range(5)]
    validate.check(Problem(nodes=tuple(node_states), pods=()), cache)
    swapped = [node_states[1], node_states[0], *node_states[2:]]
    views = validate.check(Problem(nodes=tuple(swapped), pods=()), cache)
    assert list(views) == [n.name for n in swapped]
    # And back: the last check is the reference now.
    views = validate.check(Problem(nodes=tuple(node_states), pods=()), cache)
    assert list(views) == [n.name for n in node_states]


def test_a_changed_node_that_takes_another_nodes_gpus_is_caught() -> None:
    cache = SolverCache()
    node_states = [make_node(f"took-{i}", "T4") for i in range(4)]
    validate.check(Problem(nodes=tuple(node_states), pods=()), cache)
    # Node took-2 now publishes took-0's GPUs.
    node_states[2] = dataclasses.replace(node_states[0], name="took-2")
    with pytest.raises(
        InputError, match=r"gpu\.uuid GPU-took-0-0 \(its [^)]*\) is also on node took-0"
    ):
        validate.check(Problem(nodes=tuple(node_states), pods=()), cache)
