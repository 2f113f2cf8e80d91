"""The lifecycle model's tests run with drasat's loggers quiet: the controller's own lines (every
refusal, every injected fault) would drown the report, and what the model finds it says itself.

A fixture, not a level set when the modules are imported: collection imports every test module
of the session first, so an import-time level silenced drasat for every other test too (tests
that read a warning with caplog saw none).

`cluster`: the explicit sequences' worlds (tests/lifecycle/test_lifecycle_defects.py,
test_lifecycle_graceful.py), each closed when its test ends."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest
from lc_world import World


@pytest.fixture(autouse=True)
def _quiet_drasat() -> Iterator[None]:
    logger = logging.getLogger("drasat")
    before = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(before)


@pytest.fixture
def cluster() -> Iterator[Callable[..., World]]:
    """`cluster(node=kind, ...)` makes a World of those nodes; every one made is closed after."""
    made: list[World] = []

    def make(**nodes: str) -> World:
        made.append(World(nodes=nodes))
        return made[-1]

    yield make
    for world in made:
        world.close()
