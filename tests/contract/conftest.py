"""Contract tests: the same test code against the simulated API server (`drasat.testbed.sim`) and
the real kube-apiserver v1.37.2, so the simulator cannot drift from what it stands in for.

`backend` is parametrized over "sim" and "real"; each test gets an official-client ApiClient and
a fresh namespace on that backend, the widget CRD (`tests/widget_crd.py`) and drasat's CRDs
installed, and the few helpers whose implementation must differ per backend (how to obtain an
expired resourceVersion). Where the backends differ on purpose a test branches on `backend.sim`;
docs/SIMULATED-APISERVER.md lists each such difference and why it is harmless.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import kubernetes
import pytest
from contract import SIM_HISTORY, Backend
from kubecluster import install_crds, wait_for
from kubernetes.client import ApiException
from widget_crd import WIDGET_CRD

from drasat.api import crds
from drasat.testbed.sim import apiserver


@pytest.fixture(scope="session")
def contract_crds() -> list[dict[str, Any]]:
    """The widget CRD and drasat's generated CRDs (generated once per session)."""
    return [WIDGET_CRD, *crds.all_crds()]


def _served(api: kubernetes.client.ApiClient, crd: dict[str, Any]) -> bool:
    """The CRD's resources answer a list (Established comes a moment before the handler)."""
    spec = crd["spec"]
    custom = kubernetes.client.CustomObjectsApi(api)
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        try:
            custom.list_cluster_custom_object(
                spec["group"], version["name"], spec["names"]["plural"], limit=1
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
    return True


@dataclass(frozen=True)
class RealSetup:
    #: A resourceVersion from before the widget CRD existed: older than anything the widgets'
    #: watch cache (started when the CRD was established) can replay.
    before_widgets: str


@pytest.fixture(scope="session")
def real_setup(
    kube_api: kubernetes.client.ApiClient, contract_crds: list[dict[str, Any]]
) -> RealSetup:
    """Install the CRDs the contract tests need on the real server, once; wait until served.
    Other tests may have installed drasat's CRDs already (that is fine); nothing is removed."""
    ext = kubernetes.client.ApiextensionsV1Api(kube_api)
    core = kubernetes.client.CoreV1Api(kube_api)
    before = core.list_namespace(limit=1).metadata.resource_version
    try:
        ext.create_custom_resource_definition(WIDGET_CRD)
    except ApiException as exc:
        if exc.status != 409:
            raise
        # Ours alone: one from before would make `before` meaningless.
        pytest.fail("the widget CRD was installed before the contract tests ran")
    install_crds(kube_api, contract_crds)
    for crd in contract_crds:
        name = crd["metadata"]["name"]
        wait_for(lambda c=crd: _served(kube_api, c), what=f"CRD {name} served")
    return RealSetup(before_widgets=before)


def _sim_backend(contract_crds: list[dict[str, Any]]) -> Iterator[Backend]:
    with apiserver.ApiServer.running(crds=contract_crds, history=SIM_HISTORY) as server:
        configuration = kubernetes.client.Configuration(host=server.url)
        with kubernetes.client.ApiClient(configuration) as client:
            namespace = f"t-{uuid.uuid4().hex[:10]}"
            core = kubernetes.client.CoreV1Api(client)
            core.create_namespace({"metadata": {"name": namespace}})

            def expired() -> str:
                # Note where the history is now, then push it past that point.
                before = core.list_namespace(limit=1).metadata.resource_version
                scratch = core.create_namespaced_config_map(
                    namespace, {"metadata": {"generateName": "churn-"}}
                ).metadata.name
                for i in range(SIM_HISTORY + 1):
                    core.patch_namespaced_config_map(scratch, namespace, {"data": {"i": str(i)}})
                core.delete_namespaced_config_map(scratch, namespace)
                return str(before)

            yield Backend("sim", client, namespace, expired, server=server)
        assert server.internal_errors == []


@pytest.fixture(params=["sim", "real"])
def backend(
    request: pytest.FixtureRequest, contract_crds: list[dict[str, Any]]
) -> Iterator[Backend]:
    if request.param == "sim":
        yield from _sim_backend(contract_crds)
        return
    # Only the real leg asks for the cluster, so `-k sim` runs without one.
    setup: RealSetup = request.getfixturevalue("real_setup")
    api: kubernetes.client.ApiClient = request.getfixturevalue("kube_api")
    namespace: str = request.getfixturevalue("kube_namespace")
    yield Backend("real", api, namespace, lambda: setup.before_widgets)
