"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from containerdkit import Deployed, deploy


@pytest.fixture(scope="session")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    """drasat installed by its chart on two real kubelets on real containerd, started once for
    every test of the session that asks (tests/e2e/containerdkit.py)."""
    with deploy(tmp_path_factory.mktemp("containerd") / "cluster") as cluster:
        yield cluster
