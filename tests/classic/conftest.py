"""Fixtures of the classic wing's tests: the in-process API server with drasat's CRDs, a client
for it, running classic controllers. The builders they share with the v1 controller's tests
(ctl_cluster, ctl_events, ctl_kubefake) are in tests/controller/."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "controller"))

from ctl_classic import FAST

from drasat.api import crds
from drasat.classic.controller import Config, Controller
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


@pytest.fixture
def api_client(server: apiserver.ApiServer) -> Iterator[kubernetes.client.ApiClient]:
    """The official client, configured for `server` and nothing else."""
    configuration = kubernetes.client.Configuration(host=server.url)
    with kubernetes.client.ApiClient(configuration) as client:
        yield client


@pytest.fixture
def start_controller(server: apiserver.ApiServer) -> Iterator[Callable[..., Controller]]:
    """Start controllers (each with its own client); all are stopped at the end."""
    started: list[tuple[Controller, KubeClient]] = []

    def start(config: Config = FAST, **kwargs: Any) -> Controller:
        client = KubeClient(configuration_for(server.url), request_timeout=10)
        controller = Controller(client, config, **kwargs)
        controller.start(sync_timeout_s=10)
        started.append((controller, client))
        return controller

    yield start
    for controller, client in started:
        controller.stop()
        client.close()
