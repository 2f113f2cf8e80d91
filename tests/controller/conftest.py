"""Fixtures: the in-process API server with drasat's CRDs and a client for it (the classic
controller's own are in tests/classic/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drasat.api import crds
from drasat.kube.client import KubeClient, configuration_for
from drasat.testbed.sim import apiserver


@pytest.fixture
def server() -> Iterator[apiserver.ApiServer]:
    with apiserver.ApiServer.running(crds=crds.all_crds()) as running:
        yield running


@pytest.fixture
def api(server: apiserver.ApiServer) -> Iterator[KubeClient]:
    client = KubeClient(configuration_for(server.url), request_timeout=10)
    yield client
    client.close()
