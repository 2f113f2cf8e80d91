"""The shared containerd cluster's life (tests/e2e/containerdkit.py), with a stand-in start: one
start for every test that asks, stopped after the last of them, a failed start not tried again."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from containerdkit import MARKER, SharedCluster, last_of_run


class Starts:
    """A stand-in for `deploy`: records each start and stop; raises `error` if given."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error
        self.started: list[Path] = []
        self.stopped = 0

    @contextmanager
    def __call__(self, folder: Path) -> Iterator[Any]:
        self.started.append(folder)
        if self.error is not None:
            raise self.error
        try:
            yield (f"cluster {len(self.started)}", {})
        finally:
            self.stopped += 1


def test_one_start_serves_every_test_until_stopped(tmp_path: Path) -> None:
    starts = Starts()
    shared = SharedCluster(starts)
    first = shared.get(lambda: tmp_path / "a")
    assert shared.get(lambda: tmp_path / "b") is first
    assert starts.started == [tmp_path / "a"] and starts.stopped == 0
    shared.stop()
    assert starts.stopped == 1
    shared.stop()  # nothing runs: nothing to stop
    assert starts.stopped == 1
    # A later test that asks again gets a new one.
    assert shared.get(lambda: tmp_path / "c") == ("cluster 2", {})
    shared.stop()
    assert starts.stopped == 2


def test_a_failed_start_is_not_tried_again(tmp_path: Path) -> None:
    starts = Starts(RuntimeError("etcd did not start\nits log: ..."))
    shared = SharedCluster(starts)
    with pytest.raises(RuntimeError):
        shared.get(lambda: tmp_path)
    with pytest.raises(pytest.fail.Exception, match=r"RuntimeError: etcd did not start$"):
        shared.get(lambda: tmp_path)
    assert len(starts.started) == 1
    shared.stop()


def test_a_skipped_start_is_tried_again(tmp_path: Path) -> None:
    starts = Starts(pytest.skip.Exception("containerd nodes run as root"))
    shared = SharedCluster(starts)
    for _ in range(2):
        with pytest.raises(pytest.skip.Exception):
            shared.get(lambda: tmp_path)
    assert len(starts.started) == 2


class Item:
    def __init__(self, marked: bool) -> None:
        self.marked = marked

    def get_closest_marker(self, name: str) -> object:
        return object() if self.marked and name == MARKER else None


@pytest.mark.parametrize(
    ("item", "nextitem", "last"),
    [
        (True, None, True),  # the session's last test
        (True, False, True),  # the next does not use the cluster
        (True, True, False),  # the next does: keep it
        (False, None, False),
        (False, True, False),
    ],
)
def test_the_cluster_stops_after_the_last_test_of_a_run_that_uses_it(
    item: bool, nextitem: bool | None, last: bool
) -> None:
    after = None if nextitem is None else Item(nextitem)
    assert last_of_run(Item(item), after) is last  # type: ignore[arg-type]
