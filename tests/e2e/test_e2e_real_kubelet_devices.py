"""drasat's kinds of devices end to end with a real kubelet v1.37.2: the node plugin process
publishes its node's ResourceSlices, the plain kube-scheduler allocates from them, the kubelet
prepares each pod's claims through the plugin it registered and creates the containers on
`fakecri`. The manifests are `deploy/examples/v1-*`, applied as they are (their pods mount the
service-account token: the kubelet requests and mounts it, in its own mount namespace).

Each case asserts from the runtime's record that every container was created with exactly its
claims' CDI devices, and what those devices give it (read from the plugin's CDI specs):

- MIG by profile via CEL (gpu-test4): the four MIG devices, made at the allocated placements;
- two shares of one GPU: each container's MPS limits;
- the optional GPU (firstAvailable [gpu, cpu-fallback]) on a one-GPU node: one pod gets the GPU,
  the other the CPU fallback;
- reference case (b): one claim shared by two pods, prepared once, unprepared after the last.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from realkubeletkit import RealNode, real_node
from slicekit import applied, device_classes, unique

from drasat.api.devicemodel import names
from drasat.testbed.controlplane import cluster
from drasat.testbed.simnvml import SimulatedNvml

pytestmark = pytest.mark.timeout(300)

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "examples"
GiB = 2**30
#: Memory slices of the A100-40GB profiles the gpu-test4 example asks for.
SIZE = {"1g5gb": 1, "2g10gb": 2, "3g20gb": 4}


@pytest.fixture(scope="module")
def classes(kube_api: kubernetes.client.ApiClient) -> Iterator[None]:
    with device_classes(kube_api):
        yield


def _where(pod: dict[str, Any]) -> tuple[str, str]:
    return pod["metadata"]["namespace"], pod["metadata"]["name"]


def _cleaned_up(node: RealNode) -> None:
    assert node.cdi_specs == [] and node.checkpoint_files == []
    assert node.plugin.poll() is None, node.plugin_log()


def _gpu_test4(
    api: kubernetes.client.ApiClient, kube_cluster: cluster.Cluster
) -> Iterator[tuple[RealNode, dict[str, Any], dict[str, list[str]]]]:
    """gpu-test4 on a one-A100 node: the node, the pod, and the MIG UUIDs each container sees."""
    with (
        real_node(api, kube_cluster, unique("rk-mig"), "1xA100-40GB,mig=0") as node,
        applied(api, EXAMPLES / "v1-mig-by-profile/gpu-test4.yaml") as (pod,),
    ):
        node.wait_running(api, *_where(pod))
        visible = {}
        for container in ("ctr0", "ctr1", "ctr2", "ctr3"):
            _, env = node.container_got_its_claims(api, *_where(pod), container)
            visible[container] = env["NVIDIA_VISIBLE_DEVICES"].split(",")
        yield node, pod, visible


def test_gpu_test4_mig_devices_are_made_and_reach_the_containers_through_the_kubelet(
    kube_api: kubernetes.client.ApiClient, kube_cluster: cluster.Cluster, classes: None
) -> None:
    for node, pod, visible in _gpu_test4(kube_api, kube_cluster):
        (claim,) = node.claim_uids(kube_api, *_where(pod)).values()
        results = claim["status"]["allocation"]["devices"]["results"]
        placements = []
        for result in results:
            parsed = names.parse(result["device"])
            assert isinstance(parsed, names.MigName) and parsed.minor == 0, result
            placements.append((parsed.start, SIZE[parsed.profile]))
        # The plugin made exactly the GPU instances the scheduler chose, and they tile the GPU.
        assert node.gpu_instances(0) == sorted(placements)
        every = {uuid for seen in visible.values() for uuid in seen}
        assert len(every) == 4 and all(v.startswith("MIG-") for v in every)
        node.delete_pods(kube_api, *_where(pod))
        assert node.gpu_instances(0) == []
        _cleaned_up(node)


def test_gpu_test4_each_container_sees_only_its_requests_mig_device(
    kube_api: kubernetes.client.ApiClient, kube_cluster: cluster.Cluster, classes: None
) -> None:
    for _node, _pod, visible in _gpu_test4(kube_api, kube_cluster):
        assert all(len(seen) == 1 for seen in visible.values()), visible
        assert len({seen[0] for seen in visible.values()}) == 4


def test_two_shares_of_one_gpu_get_their_limits_through_the_kubelet(
    kube_api: kubernetes.client.ApiClient, kube_cluster: cluster.Cluster, classes: None
) -> None:
    with (
        real_node(kube_api, kube_cluster, unique("rk-share"), "1xT4", shares=True) as node,
        applied(kube_api, EXAMPLES / "v1-shared-gpu/shares.yaml") as pods,
    ):
        share_ids = set()
        for pod in pods:
            node.wait_running(kube_api, *_where(pod))
            _, env = node.container_got_its_claims(kube_api, *_where(pod))
            (claim,) = node.claim_uids(kube_api, *_where(pod)).values()
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert result["device"] == "gpu-0" and result["shareID"]
            share_ids.add(result["shareID"])
            assert env["NVIDIA_VISIBLE_DEVICES"] == node.uuids["gpu-0"]
            assert env["DRASAT_GPU_SHARE_COMPUTE"] == "25"
            assert env["DRASAT_GPU_SHARE_MEMORY"] == str(4 * GiB)
            assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
            assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
        assert len(share_ids) == 2  # one share each
        namespace = pods[0]["metadata"]["namespace"]
        node.delete_pods(kube_api, namespace, *(p["metadata"]["name"] for p in pods))
        _cleaned_up(node)


def test_optional_gpu_one_pod_gets_the_gpu_the_other_the_cpu_fallback(
    kube_api: kubernetes.client.ApiClient, kube_cluster: cluster.Cluster, classes: None
) -> None:
    with (
        real_node(kube_api, kube_cluster, unique("rk-opt"), "1xT4") as node,
        applied(kube_api, EXAMPLES / "v1-optional-gpu/optional-gpu.yaml") as pods,
    ):
        seen = {}
        for pod in pods:
            node.wait_running(kube_api, *_where(pod))
            _, env = node.container_got_its_claims(kube_api, *_where(pod))
            (claim,) = node.claim_uids(kube_api, *_where(pod)).values()
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            seen[result["request"]] = (
                result["device"],
                env["NVIDIA_VISIBLE_DEVICES"],
                env["DRASAT_GPU_ALLOCATED"],
            )
        assert seen == {
            "gpu-or-cpu/gpu": ("gpu-0", node.uuids["gpu-0"], "true"),
            "gpu-or-cpu/cpu": ("cpu-fallback", "void", "false"),
        }
        namespace = pods[0]["metadata"]["namespace"]
        node.delete_pods(kube_api, namespace, *(p["metadata"]["name"] for p in pods))
        _cleaned_up(node)


def test_reference_case_b_one_claim_two_pods_prepared_once_by_the_kubelet(
    kube_api: kubernetes.client.ApiClient, kube_cluster: cluster.Cluster, classes: None
) -> None:
    with (
        real_node(kube_api, kube_cluster, unique("rk-ts"), "1xT4") as node,
        applied(kube_api, EXAMPLES / "v1-reference-cases/shared-time-sliced-gpu.yaml") as pods,
    ):
        devices = []
        for pod in pods:
            node.wait_running(kube_api, *_where(pod))
            created, env = node.container_got_its_claims(kube_api, *_where(pod))
            devices.append(created["cdiDevices"])
            assert env["NVIDIA_VISIBLE_DEVICES"] == node.uuids["gpu-0"]
        assert devices[0] == devices[1]  # one claim, reserved for both pods
        assert len(node.cdi_specs) == 1 and len(node.checkpoint_files) == 1  # prepared once
        assert SimulatedNvml(node.fleet).gpus[0].time_slice == 3  # Long
        namespace = pods[0]["metadata"]["namespace"]
        node.delete_pods(kube_api, namespace, "pod1")
        assert len(node.cdi_specs) == 1  # pod2 still runs on it
        node.delete_pods(kube_api, namespace, "pod2")
        assert SimulatedNvml(node.fleet).gpus[0].time_slice == 0
        _cleaned_up(node)
