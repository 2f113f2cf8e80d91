"""Shared fixtures."""

from __future__ import annotations

import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
    """The project's shared/ folder (beside the checkout), or $DRASAT_SHARED."""
    return pathlib.Path(os.environ.get("DRASAT_SHARED", REPO.parent / "shared"))
