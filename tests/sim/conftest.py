"""Fixtures: a running in-process API server and an unmodified kubernetes client for it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from widget_crd import WIDGET_CRD

from drasat.api import crds
from drasat.testbed.sim import apiserver


@pytest.fixture(scope="session")
def all_crds() -> list[dict[str, Any]]:
    """The widget CRD and drasat's generated CRDs (generated once per session)."""
    return [WIDGET_CRD, *crds.all_crds()]


@pytest.fixture
def server(all_crds: list[dict[str, Any]]) -> Iterator[apiserver.ApiServer]:
    """A fresh server with `all_crds` registered."""
    with apiserver.ApiServer.running(crds=all_crds) as running:
        yield running
    assert running.internal_errors == []


@pytest.fixture
def api_client(server: apiserver.ApiServer) -> Iterator[kubernetes.client.ApiClient]:
    """The official client, configured for `server` and nothing else."""
    configuration = kubernetes.client.Configuration(host=server.url)
    with kubernetes.client.ApiClient(configuration) as client:
        yield client


@pytest.fixture
def core(api_client: kubernetes.client.ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api_client)


@pytest.fixture
def custom(api_client: kubernetes.client.ApiClient) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(api_client)
