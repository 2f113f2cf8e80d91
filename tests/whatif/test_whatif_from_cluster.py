"""`drasat whatif --from-cluster`: a live cluster read through a kubeconfig, never written."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from drasat.api import crds
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, configuration_for
from drasat.testbed.sim.apiserver import ApiServer

if TYPE_CHECKING:  # annotations only: several test folders have a conftest module
    from conftest import RunCli, WriteYaml

T4 = {"productName": "Tesla T4", "memoryBytes": 16106127360, "architecture": "Turing"}
HELD_UUID = "GPU-00000000-0000-4000-8000-000000000000"
FREE_UUID = "GPU-00000000-0000-4000-8000-000000000001"
HELD_CLAIM = "11111111-0000-4000-8000-000000000000"

NAS = {
    "apiVersion": "nas.gpu.drasat.io/v1alpha1",
    "kind": "NodeAllocationState",
    "metadata": {"name": "node-1", "namespace": "drasat"},
    "spec": {
        "allocatableDevices": [
            {"gpu": {"index": 0, "uuid": HELD_UUID, "minor": 0, **T4}},
            {"gpu": {"index": 1, "uuid": FREE_UUID, "minor": 1, **T4}},
        ],
        "allocatedClaims": {
            HELD_CLAIM: {
                "claimInfo": {"namespace": "team", "name": "running", "uid": HELD_CLAIM},
                "gpu": {"devices": [{"uuid": HELD_UUID}]},
            }
        },
    },
    "status": "Ready",
}

CLASS = {
    "apiVersion": "resource.k8s.io/v1alpha2",
    "kind": "ResourceClass",
    "metadata": {"name": "gpu.drasat.io"},
    "driverName": "gpu.drasat.io",
}

NEW_POD = """
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaimTemplate
metadata: {namespace: team, name: one-gpu}
spec:
  spec: {resourceClassName: gpu.drasat.io}
---
apiVersion: v1
kind: Pod
metadata: {namespace: team, name: new}
spec:
  containers: [{name: c, image: busybox, resources: {claims: [{name: gpu}]}}]
  resourceClaims: [{name: gpu, source: {resourceClaimTemplateName: one-gpu}}]
"""


@pytest.fixture
def kubeconfig(tmp_path: pathlib.Path) -> Iterator[tuple[str, KubeClient]]:
    with ApiServer.running(crds=crds.all_crds()) as server:
        admin = KubeClient(configuration_for(server.url))
        admin.create(r.NAS, NAS, namespace="drasat")
        admin.create(r.RESOURCE_CLASSES, CLASS)
        yield str(server.write_kubeconfig(tmp_path / "kubeconfig")), admin
        admin.close()


def test_new_pod_gets_the_gpu_the_cluster_has_free(
    kubeconfig: tuple[str, KubeClient], run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    path, admin = kubeconfig
    before = admin.get(r.NAS, "node-1", namespace="drasat")["metadata"]["resourceVersion"]
    manifests = write_yaml("new.yaml", NEW_POD)
    result = run_cli("--from-cluster", "--kubeconfig", path, "-f", manifests, "-o", "json")
    assert result.code == 0, result.err
    listing = json.loads(result.out)
    nas = next(i for i in listing["items"] if i["kind"] == "NodeAllocationState")
    claims = nas["spec"]["allocatedClaims"]
    assert claims[HELD_CLAIM]["gpu"]["devices"] == [{"uuid": HELD_UUID}]  # kept as it is
    new = [c for uid, c in claims.items() if uid != HELD_CLAIM]
    assert [c["gpu"]["devices"] for c in new] == [[{"uuid": FREE_UUID}]]
    # Read only: the cluster's objects are untouched.
    after = admin.get(r.NAS, "node-1", namespace="drasat")["metadata"]["resourceVersion"]
    assert after == before
    assert admin.list(r.RESOURCE_CLAIMS, namespace="team").items == []


def test_from_cluster_and_cluster_file_together_are_refused(
    kubeconfig: tuple[str, KubeClient], run_cli: RunCli, cluster_file: str
) -> None:
    path, _ = kubeconfig
    result = run_cli("--from-cluster", "--kubeconfig", path, "--cluster", cluster_file)
    assert result.code == 2
    assert "--cluster and --from-cluster are alternatives" in result.err


def test_unreachable_cluster_is_one_line_and_exit_2(run_cli: RunCli, write_yaml: WriteYaml) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = write_yaml("kubeconfig", json.dumps(config))
    result = run_cli("--from-cluster", "--kubeconfig", path)
    assert result.code == 2
    assert result.err.startswith("error: --from-cluster: cannot read the cluster")
    assert len(result.err.strip().splitlines()) == 1
