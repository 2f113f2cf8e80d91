"""The real control plane is real: kube-apiserver, kube-scheduler and kube-controller-manager
v1.37.2 serve `resource.k8s.io/v1`, and allocate a claim from a slice drasat's code publishes."""

from __future__ import annotations

import subprocess
from typing import Any

import kubernetes
import pytest
from helm_binary import kubectl_path
from kubecluster import create_fake_node, kubectl_env, wait_for
from kubernetes.client import ApiException
from slicekit import delete_slice

from drasat.api import resourceslices
from drasat.nodeplugin import publish
from drasat.nodeplugin.nvml import NvmlDeviceLib
from drasat.testbed.controlplane import binaries, realcluster
from drasat.testbed.simnvml import SimulatedNvml

RESOURCE = ("resource.k8s.io", "v1")


def kubectl(kube_cluster: realcluster.Cluster, *args: str) -> str:
    done = subprocess.run(
        [str(kubectl_path()), *args],
        env=kubectl_env(kube_cluster),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def test_kubectl_sees_v1_37_and_every_v1_dra_kind(kube_cluster: realcluster.Cluster) -> None:
    assert f"Server Version: {binaries.KUBE_VERSION}" in kubectl(kube_cluster, "version")
    rows = kubectl(kube_cluster, "api-resources", "--api-group=resource.k8s.io", "--no-headers")
    served = {(line.split()[0], line.split()[1]) for line in rows.splitlines() if line.strip()}
    for plural in (
        "resourceslices",
        "deviceclasses",
        "resourceclaims",
        "resourceclaimtemplates",
        "devicetaintrules",
    ):
        assert (plural, "resource.k8s.io/v1") in served


def test_every_dra_feature_gate_listed_is_on(kube_cluster: realcluster.Cluster) -> None:
    listed = binaries.listed_gates(kube_cluster.bin_dir / "kube-apiserver")
    assert {g for g in listed if g.startswith("DRA")} <= set(kube_cluster.feature_gates)
    assert "DRAConsumableCapacity" in kube_cluster.feature_gates


def _create(custom: kubernetes.client.CustomObjectsApi, plural: str, body: dict[str, Any]) -> Any:
    return custom.create_cluster_custom_object(*RESOURCE, plural, body)


@pytest.fixture
def gpu_node(kube_api: kubernetes.client.ApiClient) -> Any:
    """A fake node with one simulated T4 published in drasat's ResourceSlice; removed after."""
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    node = create_fake_node(kube_api, "e2e-t4")
    gpus = [publish.gpu_info(g) for g in NvmlDeviceLib(SimulatedNvml("1xT4")).gpus()]
    slices = resourceslices.node_slices("e2e-t4", gpus, node_uid=node.metadata.uid)
    for body in slices:
        _create(custom, "resourceslices", body)
    try:
        _create(custom, "deviceclasses", resourceslices.gpu_device_class())
    except ApiException as exc:
        if exc.status != 409:
            raise
    yield node, slices
    kubernetes.client.CoreV1Api(kube_api).delete_node("e2e-t4")
    for body in slices:
        delete_slice(custom, body["metadata"]["name"])


def test_real_scheduler_allocates_a_template_claim_from_drasats_slice_and_binds_the_pod(
    kube_api: kubernetes.client.ApiClient, kube_namespace: str, gpu_node: Any
) -> None:
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    core = kubernetes.client.CoreV1Api(kube_api)
    custom.create_namespaced_custom_object(
        *RESOURCE,
        kube_namespace,
        "resourceclaimtemplates",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "gpu", "exactly": {"deviceClassName": "gpu.drasat.io"}}
                        ]
                    }
                }
            },
        },
    )
    core.create_namespaced_pod(
        kube_namespace,
        {
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {"name": "c", "image": "none", "resources": {"claims": [{"name": "gpu"}]}}
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            },
        },
    )
    pod = wait_for(
        lambda: (p := core.read_namespaced_pod("p", kube_namespace)).spec.node_name and p,
        timeout=60,
        what="the scheduler to bind pod p",
    )
    assert pod.spec.node_name == "e2e-t4"
    # The resourceclaim controller made the claim from the template and recorded it in the pod.
    (status,) = pod.status.resource_claim_statuses
    claim = custom.get_namespaced_custom_object(
        *RESOURCE, kube_namespace, "resourceclaims", status.resource_claim_name
    )
    assert claim["metadata"]["ownerReferences"][0]["name"] == "p"
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result == {
        "request": "gpu",
        "driver": "gpu.drasat.io",
        "pool": "e2e-t4",
        "device": "gpu-0",
    }
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["p"]


def test_etcd_finding_its_port_taken_starts_again_on_other_ports(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    # What CI once saw: another process held the port drawn for etcd. The real etcd's own words
    # ("bind: address already in use") make the start try again, on freshly drawn ports.
    import socket

    draw = realcluster.free_port
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", draw()))
        holder.listen()
        held = holder.getsockname()[1]
        draws = iter([held])
        monkeypatch.setattr(realcluster, "free_port", lambda: next(draws, None) or draw())
        said: list[str] = []
        started = realcluster.Cluster.start(
            directory=tmp_path / "cluster", progress=said.append, die_with_parent=True
        )
        try:
            assert "a port was taken meanwhile: starting again on other ports" in said
            assert held not in started.ports.values()
            assert started.running()
        finally:
            started.stop()
