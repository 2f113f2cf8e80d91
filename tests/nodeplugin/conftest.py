"""Node plugin fixtures (helpers live in npfixtures.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from npfixtures import Node, make_node

from drasat.nodeplugin import mps


@pytest.fixture(autouse=True)
def _no_mps_daemon_left() -> Iterator[None]:
    """The simulated MPS daemons a test leaves running (claims it never unprepared) end with it."""
    yield
    mps.stop_simulated()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short directory (unix socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="np-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def node_factory(short_tmp: Path) -> Any:
    def make(fleet: str, **config: Any) -> Node:
        return make_node(short_tmp, fleet, **config)

    return make


@pytest.fixture
def served_node(node_factory: Any) -> Iterator[Node]:
    """A started plugin (sockets, health monitor) on two T4s."""
    node = node_factory("T4 x2")
    node.plugin.start()
    yield node
    node.plugin.stop(grace_s=0)
