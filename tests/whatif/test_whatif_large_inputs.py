"""What keeps the what-if's time linear at large inputs (issue 38, "bounded at any size"). No
timing here: the sizes are measured by bench.whatif_scale (docs/PERFORMANCE.md, "The batch solve
at large sizes"); these tests hold the mechanisms that the measurements rely on."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from drasat.cli import whatif as whatif_cli

if TYPE_CHECKING:
    from conftest import RunCli


@pytest.fixture
def gc_threshold() -> Iterator[None]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*saved)


@pytest.mark.usefixtures("gc_threshold")
def test_a_run_collects_young_garbage_less_often_and_old_as_before(run_cli: RunCli) -> None:
    result = run_cli("-o", "table")
    assert result.code == 0, result.err
    assert gc.get_threshold() == (whatif_cli.YOUNG_COLLECTION_EVERY, 10, 10)
    assert gc.isenabled()
