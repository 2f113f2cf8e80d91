"""Fixtures of the end-to-end tests.

`deployed`: drasat installed by its chart on two real kubelets on real containerd
(tests/e2e/containerdkit.py), shared by the tests marked `containerd_cluster`: started by the
first that asks, stopped right after the last of a run of such tests (not at the end of the whole
session, so the rest of the suite does not run beside an idle cluster), and at the session's end
whatever happened (a failure, -x, an interrupt). A later test that asks again starts a new one.
"""

from __future__ import annotations

import pytest
from containerdkit import MARKER, Deployed, SharedCluster, last_of_run

_CLUSTER = pytest.StashKey[SharedCluster]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: the test uses the shared containerd cluster (`deployed`)"
    )
    config.stash[_CLUSTER] = SharedCluster()


@pytest.fixture(scope="module")
def deployed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Deployed:
    """The shared containerd cluster with drasat installed (its tests carry the marker)."""
    assert request.node.get_closest_marker(MARKER), f"mark the module {MARKER}"
    return request.config.stash[_CLUSTER].get(
        lambda: tmp_path_factory.mktemp("containerd") / "cluster"
    )


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if last_of_run(item, nextitem):
        item.config.stash[_CLUSTER].stop()


def pytest_sessionfinish(session: pytest.Session) -> None:
    session.config.stash[_CLUSTER].stop()
