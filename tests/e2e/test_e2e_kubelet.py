"""Current DRA end to end on the real control plane: kube-scheduler allocates whole GPUs from the
ResourceSlice drasat publishes, a simulated 1.34+ kubelet runs the pods through drasat's node
plugin.

The node is a Node object (no kubelet can run here); the node plugin is the real `drasat
nodeplugin` process on a simulated fleet of two T4s, registered with `v1.DRAPlugin`; the kubelet
(`drasat.testbed.sim.kubelet`, flavour v1) reaches the real API server over https with the cluster's
CA and a bearer token, watches the pods bound to the node, calls NodePrepareResources over the
plugin's real sockets, resolves the CDI ids against the spec files and sets the pods Running;
deleting a pod unprepares its claim and confirms the deletion.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterator
from typing import Any

import kubeletkit
import kubernetes
import pytest
from kubecluster import wait_for
from kubeletkit import GpuNode
from kubernetes.client import ApiException

from drasat.api import resourceslices
from drasat.nodeplugin import publish
from drasat.nodeplugin.nvml import NvmlDeviceLib
from drasat.testbed.controlplane import realcluster
from drasat.testbed.sim import errors, kubeclient
from drasat.testbed.simnvml import SimulatedNvml

pytestmark = pytest.mark.timeout(300)

RESOURCE = ("resource.k8s.io", "v1")
NODE = "e2e-kubelet"
FLEET = "2xT4"


@pytest.fixture
def gpu_node(
    request: pytest.FixtureRequest,
    kube_api: kubernetes.client.ApiClient,
    kube_cluster: realcluster.Cluster,
) -> Iterator[GpuNode]:
    """The node with a hand-made slice; `indirect` parametrization gives the minors the slice
    advertises (default: the plugin's own GPUs)."""
    advertised = getattr(request, "param", None)
    # The slice the plugin's fleet publishes (the same seed: the same GPU UUIDs).
    gpus = [publish.gpu_info(g) for g in NvmlDeviceLib(SimulatedNvml(FLEET)).gpus()]
    if advertised is not None:  # a slice that does not match the node's hardware
        more = NvmlDeviceLib(SimulatedNvml(f"{max(advertised) + 1}xT4")).gpus()
        gpus = [publish.gpu_info(g) for g in more if g.minor in advertised]

    def hand_made(node_uid: str) -> list[dict[str, Any]]:
        return resourceslices.node_slices(NODE, gpus, node_uid=node_uid)

    custom = kubernetes.client.CustomObjectsApi(kube_api)
    with kubeletkit.gpu_node(kube_api, kube_cluster, NODE, FLEET, slices=hand_made) as node:
        with contextlib.suppress(ApiException):  # 409: another test made it
            custom.create_cluster_custom_object(
                *RESOURCE, "deviceclasses", resourceslices.gpu_device_class()
            )
        node.uuids = {resourceslices.gpu_device_name(g.minor): g.uuid for g in gpus}
        yield node


def _template(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.drasat.io"}}]
                }
            }
        },
    }


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "ctr", "image": "ubuntu", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
    }


def test_two_pods_each_with_one_exclusive_gpu_run_and_clean_up(
    kube_api: kubernetes.client.ApiClient, kube_namespace: str, gpu_node: GpuNode
) -> None:
    """Reference case (a): two pods, one exclusive GPU each, through the real scheduler."""
    core = kubernetes.client.CoreV1Api(kube_api)
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object(
        *RESOURCE, kube_namespace, "resourceclaimtemplates", _template(kube_namespace)
    )
    for name in ("pod1", "pod2"):
        core.create_namespaced_pod(kube_namespace, _pod(name))
    kl = gpu_node.kubelet
    assert kl.wait_for(lambda: "gpu.drasat.io" in kl.plugins, 30), kl.refused
    assert kl.plugins["gpu.drasat.io"].service == "v1"
    runs = {}
    for name in ("pod1", "pod2"):
        try:
            runs[name] = kl.wait_running(kube_namespace, name, timeout=90)
        except TimeoutError as error:
            raise AssertionError(f"{error}\nplugin log:\n{gpu_node.plugin_log()}") from None
    visible = {}
    for name, run in runs.items():
        (claim,) = run.claims
        assert claim.drivers == ("gpu.drasat.io",)
        (device,) = run.prepared[claim.uid]
        assert (device.request_names, device.pool_name) == (("gpu",), NODE)
        own = f"k8s.gpu.drasat.io/claim={claim.uid}-{device.device_name}"
        assert device.cdi_device_ids == (own,)  # the device's own CDI device
        env = run.env
        # The container sees exactly the GPU the scheduler allocated to its claim.
        assert env["DRASAT_GPU_UUIDS"] == gpu_node.uuids[device.device_name]
        assert env["DRASAT_CLAIM_UID"] == claim.uid
        visible[name] = env["DRASAT_GPU_UUIDS"]
        api_claim = custom.get_namespaced_custom_object(
            *RESOURCE, kube_namespace, "resourceclaims", claim.name
        )
        (result,) = api_claim["status"]["allocation"]["devices"]["results"]
        assert result["device"] == device.device_name
        pod = core.read_namespaced_pod(name, kube_namespace)
        assert (pod.spec.node_name, pod.status.phase) == (NODE, "Running")
        assert {c.type for c in pod.status.conditions} >= {"PodScheduled", "Ready"}

        # Device health: the plugin's DRAResourceHealth stream, as the kubelet shows it in the
        # pod's status (which the real API server validates).
        def healthy(pod_name: str = name, cdi_id: str = device.cdi_device_ids[0]) -> bool:
            status = core.read_namespaced_pod(pod_name, kube_namespace).status
            shown = [
                (entry.name, [(r.resource_id, r.health) for r in entry.resources])
                for container in status.container_statuses or []
                for entry in container.allocated_resources_status or []
            ]
            return shown == [("claim:gpu", [(cdi_id, "Healthy")])]

        wait_for(healthy, timeout=30, what=f"{name}'s device to be Healthy")
    assert kl.plugins["gpu.drasat.io"].health_service == "v1.DRAResourceHealth"
    assert visible["pod1"] != visible["pod2"]
    assert set(visible.values()) == set(gpu_node.uuids.values())
    assert len(gpu_node.cdi_specs) == 2 and len(gpu_node.checkpoint_files) == 2

    # Deleting the pods: the kubelet unprepares each claim, then confirms the deletion.
    for name in ("pod1", "pod2"):
        core.delete_namespaced_pod(name, kube_namespace)
    for name in ("pod1", "pod2"):
        kl.wait_stopped(kube_namespace, name, timeout=60)

    def pods_gone() -> bool:
        return not core.list_namespaced_pod(kube_namespace).items

    wait_for(pods_gone, timeout=60, what="the pods to be deleted")
    assert gpu_node.cdi_specs == []
    assert gpu_node.checkpoint_files == []

    # The resourceclaim controller deletes the claims made for the pods.
    def claims_gone() -> bool:
        listed = custom.list_namespaced_custom_object(*RESOURCE, kube_namespace, "resourceclaims")
        return not listed["items"]

    wait_for(claims_gone, timeout=60, what="the template claims to be deleted")
    assert gpu_node.plugin.poll() is None, gpu_node.plugin_log()


def test_the_sim_client_speaks_https_with_the_clusters_ca_and_token(
    kube_cluster: realcluster.Cluster,
) -> None:
    client = kubeclient.KubeClient.from_kubeconfig(kube_cluster.kubeconfig)
    assert client.url.startswith("https://")
    namespaces = client.list(kubeclient.path("", "v1", "namespaces"))
    assert "kube-system" in {n["metadata"]["name"] for n in namespaces["items"]}
    # Without the token the server does not know us; without the CA we do not trust it.
    settings = kubeclient.kubeconfig_settings(kube_cluster.kubeconfig)
    anonymous = kubeclient.KubeClient(settings["url"], ssl_context=settings["ssl_context"])
    with pytest.raises(errors.ApiError) as refused:
        anonymous.list(kubeclient.path("", "v1", "namespaces"))
    assert refused.value.code in (401, 403)
    stranger = kubeclient.KubeClient(settings["url"], token=settings["token"])
    with pytest.raises(ssl.SSLCertVerificationError):
        stranger.list(kubeclient.path("", "v1", "namespaces"))


@pytest.mark.parametrize("gpu_node", [{2}], indirect=True)
def test_a_device_the_node_does_not_have_fails_the_prepare_and_the_pod_waits(
    kube_api: kubernetes.client.ApiClient, kube_namespace: str, gpu_node: GpuNode
) -> None:
    """The slice advertises gpu-2, the node has gpu-0 and gpu-1: the claim is allocated, the
    prepare fails naming the device, the pod never runs, and deleting it still cleans up."""
    core = kubernetes.client.CoreV1Api(kube_api)
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object(
        *RESOURCE, kube_namespace, "resourceclaimtemplates", _template(kube_namespace)
    )
    core.create_namespaced_pod(kube_namespace, _pod("pod1"))
    kl = gpu_node.kubelet
    expected = f"device gpu-2 is not on node {NODE} (it has: gpu-0, gpu-1)"
    key = (kube_namespace, "pod1")
    if not kl.wait_for(lambda: expected in kl.reasons.get(key, ""), 90):
        raise AssertionError(f"{kl.reasons.get(key)}\nplugin log:\n{gpu_node.plugin_log()}")
    assert "NodePrepareResources failed for claim" in kl.reasons[key]
    assert kl.running(*key) is None
    assert core.read_namespaced_pod("pod1", kube_namespace).status.phase == "Pending"
    assert gpu_node.cdi_specs == [] and gpu_node.checkpoint_files == []
    core.delete_namespaced_pod("pod1", kube_namespace)
    kl.wait_stopped(kube_namespace, "pod1", timeout=60)
    wait_for(
        lambda: not core.list_namespaced_pod(kube_namespace).items,
        timeout=60,
        what="the pod to be deleted",
    )
