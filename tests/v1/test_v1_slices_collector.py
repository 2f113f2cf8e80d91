"""drasat.v1.slices.Reader: many nodes read at once with Python's cyclic collector paused (the
first read grew with the square of the nodes otherwise: docs/PERFORMANCE.md §5.3), and the
collector as it was afterwards, also when a read fails."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from test_v1_slices import published

from drasat.v1 import slices


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Whether the collector was on at each node's read."""
    states: list[bool] = []
    real = slices.read_node

    def spy(*args: Any, **kw: Any) -> slices.NodeDevices:
        states.append(gc.isenabled())
        return real(*args, **kw)

    monkeypatch.setattr(slices, "read_node", spy)
    yield states
    gc.enable()


def test_many_nodes_read_with_the_collector_paused(seen: list[bool]) -> None:
    assert gc.isenabled()
    reader = slices.Reader()
    assert set(reader.read(published("n1", 1) + published("n2", 1))) == {"n1", "n2"}
    assert seen == [False, False] and gc.isenabled()
    # One node changed: read alone, the collector left on.
    changed = published("n1", 1, generation=2)
    reader.read(changed + published("n2", 1))
    assert seen[2:] == [True] and gc.isenabled()


def test_the_collector_stays_off_if_it_was(seen: list[bool]) -> None:
    gc.disable()
    slices.Reader().read(published("n1", 1) + published("n2", 1))
    assert not gc.isenabled()


def test_the_collector_comes_back_when_a_read_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kw: Any) -> slices.NodeDevices:
        raise RuntimeError("boom")

    monkeypatch.setattr(slices, "read_node", broken)
    with pytest.raises(RuntimeError):
        slices.Reader().read(published("n1", 1) + published("n2", 1))
    assert gc.isenabled()
