"""Shared fixtures."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import kubernetes
import pytest

# The real control plane (session-scoped), for every test directory.
from kubecluster import (  # noqa: F401  (fixtures and a report hook, registered by import)
    classic_kube_cluster,
    kube_api,
    kube_cluster,
    kube_namespace,
    pytest_runtest_makereport,
)

from drasat.api import crds
from drasat.testbed.sim.apiserver import ApiServer

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
    """The project's shared/ folder (beside the checkout), or $DRASAT_SHARED."""
    return pathlib.Path(os.environ.get("DRASAT_SHARED", REPO.parent / "shared"))


@pytest.fixture
def sim_apiserver() -> Iterator[ApiServer]:
    """An in-process API server (drasat.testbed.sim.apiserver) serving drasat's CRDs; stopped
    after."""
    with ApiServer.running(crds=crds.all_crds()) as server:
        yield server


@pytest.fixture
def sim_api_client(sim_apiserver: ApiServer) -> Iterator[kubernetes.client.ApiClient]:
    """The unmodified kubernetes client, configured for `sim_apiserver`."""
    configuration = kubernetes.client.Configuration(host=sim_apiserver.url)
    with kubernetes.client.ApiClient(configuration) as client:
        yield client
