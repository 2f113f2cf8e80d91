"""The lifecycle model's tests run with drasat's loggers quiet: the controller's own lines (every
refusal, every injected fault) would drown the report, and what the model finds it says itself.

A fixture, not a level set when the modules are imported: collection imports every test module
of the session first, so an import-time level silenced drasat for every other test too (tests
that read a warning with caplog saw none)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _quiet_drasat() -> Iterator[None]:
    logger = logging.getLogger("drasat")
    before = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(before)
