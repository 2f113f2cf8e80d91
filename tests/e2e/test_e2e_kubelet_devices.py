"""Every kind of drasat device end to end on the real v1.37 control plane, on both kubelets (issue
28 item 4: one contract): the node plugin process publishes its node's ResourceSlices
(`--resourceslices`), the plain kube-scheduler allocates from them (no drasat controller), and the
kubelet, the simulated one or the real v1.37.2 on `fakecri` (`kubelet` parameter, see
`anykubelet.py`), prepares through the plugin it registered and creates each container with its
claims' CDI devices. The manifests are `deploy/examples/v1-*`, applied as they are.

Each case asserts that every container was given exactly its claims' CDI devices and what those
devices give it (read from the plugin's CDI specs):

- MIG by profile via CEL (NVIDIA's gpu-test4 shape): the four MIG devices are created on the
  (simulated) GPU at exactly the placements the scheduler allocated, each container sees only its
  request's MIG device;
- a pair of shares of one GPU (consumable capacity): each pod's limits under MPS; then an
  exclusive claim on the same, shareable GPU is prepared as a whole GPU;
- the optional GPU: firstAvailable [gpu, cpu-fallback] on a one-GPU node, one pod gets the GPU,
  the other runs CPU-only and learns it from its environment;
- reference case (b): one claim with a TimeSlicing config, reserved by two pods, prepared once;
- NVIDIA's GpuConfig in a DeviceClass (FromClass) applies; a claim's own config replaces it.

Only the simulated kubelet's: device health per container (the real kubelet's, with its
resource-health gate, is in test_e2e_real_kubelet.py).
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from anykubelet import KINDS, Node, any_node
from kubeletkit import gpu_node
from slicekit import RESOURCE, applied, device_classes, unique

from drasat.api.devicemodel import names
from drasat.api.devicemodel.classes import device_classes as device_classes_of
from drasat.testbed.controlplane import realcluster
from drasat.testbed.simnvml import SimulatedNvml

pytestmark = pytest.mark.timeout(300)

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "examples"
GiB = 2**30

#: Memory slices of the A100-40GB profiles the gpu-test4 example asks for.
SIZE = {"1g5gb": 1, "2g10gb": 2, "3g20gb": 4}
CONTAINERS = ("ctr0", "ctr1", "ctr2", "ctr3")


@pytest.fixture(scope="module")
def classes(kube_api: kubernetes.client.ApiClient) -> Iterator[None]:
    with device_classes(kube_api):
        yield


@pytest.fixture(params=KINDS)
def kubelet(request: pytest.FixtureRequest, classes: None) -> str:
    kind: str = request.param
    return kind


def _where(pod: dict[str, Any]) -> tuple[str, str]:
    return pod["metadata"]["namespace"], pod["metadata"]["name"]


def _results(node: Node, namespace: str, pod: str) -> list[dict[str, Any]]:
    (claim,) = node.claims(namespace, pod).values()
    results: list[dict[str, Any]] = claim["status"]["allocation"]["devices"]["results"]
    return results


def test_gpu_test4_mig_devices_are_created_at_the_allocated_placements(
    kube_api: kubernetes.client.ApiClient, kube_cluster: realcluster.Cluster, kubelet: str
) -> None:
    with (
        any_node(kubelet, kube_api, kube_cluster, "1xA100-40GB,mig=0") as node,
        applied(kube_api, EXAMPLES / "v1-mig-by-profile/gpu-test4.yaml") as (pod,),
    ):
        node.wait_running(*_where(pod))
        results = _results(node, *_where(pod))
        assert [r["request"] for r in results] == ["mig-1g-0", "mig-1g-1", "mig-2g", "mig-3g"]
        placements = []
        for result in results:
            parsed = names.parse(result["device"])
            assert isinstance(parsed, names.MigName) and parsed.minor == 0, result
            placements.append((parsed.start, SIZE[parsed.profile]))
        # The plugin made exactly the GPU instances the scheduler chose, and they tile the GPU.
        assert node.gpu_instances(0) == sorted(placements)
        assert sum(size for _, size in placements) == 8
        # Each container names one request: it gets that request's MIG device and no other.
        visible = {
            c: node.container_env(*_where(pod), c)["DRASAT_GPU_UUIDS"].split(",")
            for c in CONTAINERS
        }
        assert all(len(seen) == 1 for seen in visible.values()), visible
        every = {seen[0] for seen in visible.values()}
        assert len(every) == 4 and all(v.startswith("MIG-") for v in every)
        node.delete_pods(*_where(pod))
        assert node.gpu_instances(0) == []
        node.cleaned_up()


def test_gpu_test4_health_is_each_containers_own_device_on_the_simulated_kubelet(
    kube_api: kubernetes.client.ApiClient, kube_cluster: realcluster.Cluster, classes: None
) -> None:
    """The kubelet keys health entries by a device's first CDI id; one claim-wide id collapsed
    them into one."""
    with (
        gpu_node(kube_api, kube_cluster, unique("kl-mig"), "1xA100-40GB,mig=0") as node,
        applied(kube_api, EXAMPLES / "v1-mig-by-profile/gpu-test4.yaml") as (pod,),
    ):
        run = node.wait_running(*_where(pod))
        (claim,) = run.claims
        devices = run.prepared[claim.uid]
        health = {
            s["name"]: [
                r["resourceID"] for e in s["allocatedResourcesStatus"] for r in e["resources"]
            ]
            for s in run.container_statuses or []
        }
        assert health == {
            c: [f"k8s.gpu.drasat.io/claim={claim.uid}-{d.device_name}"]
            for c, d in zip(CONTAINERS, devices, strict=True)
        }


def test_two_shares_of_one_gpu_get_their_limits_then_an_exclusive_claim_gets_it_whole(
    kube_api: kubernetes.client.ApiClient,
    kube_cluster: realcluster.Cluster,
    kube_namespace: str,
    kubelet: str,
) -> None:
    with (
        any_node(kubelet, kube_api, kube_cluster, "1xT4", shares=True) as node,
        applied(kube_api, EXAMPLES / "v1-shared-gpu/shares.yaml") as pods,
    ):
        share_ids = set()
        for pod in pods:
            node.wait_running(*_where(pod))
            env = node.container_env(*_where(pod))
            (result,) = _results(node, *_where(pod))
            assert result["device"] == "gpu-0" and result["shareID"]
            share_ids.add(result["shareID"])
            assert env["DRASAT_GPU_UUIDS"] == node.uuids["gpu-0"]
            assert env["DRASAT_GPU_SHARE_COMPUTE"] == "25"
            assert env["DRASAT_GPU_SHARE_MEMORY"] == str(4 * GiB)
            assert "CUDA_MPS_PIPE_DIRECTORY" in env
            # each share's own limits, for its clients of the GPU's one MPS daemon
            assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
            assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
        assert len(share_ids) == 2  # one share each
        namespace = pods[0]["metadata"]["namespace"]
        node.delete_pods(namespace, *(p["metadata"]["name"] for p in pods))
        node.cleaned_up()

        # A claim without capacity.requests consumes the whole (shareable) GPU: exclusive.
        custom = kubernetes.client.CustomObjectsApi(kube_api)
        template = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "whole", "namespace": kube_namespace},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "gpu", "exactly": {"deviceClassName": "gpu.drasat.io"}}
                        ]
                    }
                }
            },
        }
        custom.create_namespaced_custom_object(
            *RESOURCE, kube_namespace, "resourceclaimtemplates", template
        )
        whole = {
            "metadata": {"name": "whole"},
            "spec": {
                "automountServiceAccountToken": False,
                "containers": [
                    {"name": "ctr", "image": "ubuntu", "resources": {"claims": [{"name": "g"}]}}
                ],
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "whole"}],
            },
        }
        kubernetes.client.CoreV1Api(kube_api).create_namespaced_pod(kube_namespace, whole)
        node.wait_running(kube_namespace, "whole")
        env = node.container_env(kube_namespace, "whole")
        (result,) = _results(node, kube_namespace, "whole")
        assert result["consumedCapacity"]["compute"] == "0" and result["shareID"]  # defaults
        assert result["device"] == "gpu-0"
        assert env["DRASAT_GPU_UUIDS"] == node.uuids["gpu-0"]
        assert "DRASAT_GPU_SHARE_COMPUTE" not in env and "CUDA_MPS_PIPE_DIRECTORY" not in env
        node.delete_pods(kube_namespace, "whole")
        node.cleaned_up()


def test_optional_gpu_one_pod_gets_the_gpu_the_other_runs_cpu_only(
    kube_api: kubernetes.client.ApiClient, kube_cluster: realcluster.Cluster, kubelet: str
) -> None:
    with (
        any_node(kubelet, kube_api, kube_cluster, "1xT4") as node,
        applied(kube_api, EXAMPLES / "v1-optional-gpu/optional-gpu.yaml") as pods,
    ):
        seen = {}
        for pod in pods:
            node.wait_running(*_where(pod))
            env = node.container_env(*_where(pod))
            (result,) = _results(node, *_where(pod))
            seen[result["request"]] = (
                result["device"],
                env.get("DRASAT_GPU_UUIDS", ""),
                env["NVIDIA_VISIBLE_DEVICES"],
                env["DRASAT_GPU_ALLOCATED"],
            )
        assert seen == {
            "gpu-or-cpu/gpu": ("gpu-0", node.uuids["gpu-0"], "void", "true"),
            "gpu-or-cpu/cpu": ("cpu-fallback", "", "void", "false"),
        }
        namespace = pods[0]["metadata"]["namespace"]
        node.delete_pods(namespace, *(p["metadata"]["name"] for p in pods))
        node.cleaned_up()


def test_reference_case_b_two_pods_time_slice_one_gpu(
    kube_api: kubernetes.client.ApiClient, kube_cluster: realcluster.Cluster, kubelet: str
) -> None:
    with (
        any_node(kubelet, kube_api, kube_cluster, "1xT4") as node,
        applied(kube_api, EXAMPLES / "v1-reference-cases/shared-time-sliced-gpu.yaml") as pods,
    ):
        devices = []
        for pod in pods:
            node.wait_running(*_where(pod))
            devices.append(node.container_cdi_devices(*_where(pod)))
            assert node.container_env(*_where(pod))["DRASAT_GPU_UUIDS"] == node.uuids["gpu-0"]
        assert devices[0] == devices[1]  # one claim, reserved for both pods
        assert len(node.cdi_specs) == 1 and len(node.checkpoint_files) == 1  # prepared once
        assert SimulatedNvml(node.fleet).gpus[0].time_slice == 3  # Long
        namespace = pods[0]["metadata"]["namespace"]
        node.delete_pods(namespace, "pod1")
        assert len(node.cdi_specs) == 1  # pod2 still runs on it
        node.delete_pods(namespace, "pod2")
        assert SimulatedNvml(node.fleet).gpus[0].time_slice == 0
        node.cleaned_up()


def test_a_class_config_applies_and_the_claims_own_config_wins(
    kube_api: kubernetes.client.ApiClient,
    kube_cluster: realcluster.Cluster,
    kube_namespace: str,
    kubelet: str,
) -> None:
    """NVIDIA's GpuConfig, unchanged, in a DeviceClass (the scheduler copies it into the
    allocation as FromClass): TimeSlicing Medium for claims of the class; a claim's own config
    (FromClaim) replaces it."""
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    core = kubernetes.client.CoreV1Api(kube_api)
    class_name = f"{unique('medium')}.gpu.drasat.io"

    def nvidia(interval: str) -> dict[str, Any]:
        return {
            "opaque": {
                "driver": "gpu.drasat.io",
                "parameters": {
                    "apiVersion": "resource.nvidia.com/v1beta1",
                    "kind": "GpuConfig",
                    "sharing": {
                        "strategy": "TimeSlicing",
                        "timeSlicingConfig": {"interval": interval},
                    },
                },
            }
        }

    (gpu_class,) = [c for c in device_classes_of() if c["metadata"]["name"] == "gpu.drasat.io"]
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": class_name},
        "spec": {"selectors": gpu_class["spec"]["selectors"], "config": [nvidia("Medium")]},
    }
    custom.create_cluster_custom_object(*RESOURCE, "deviceclasses", device_class)
    try:
        with any_node(kubelet, kube_api, kube_cluster, "2xT4") as node:
            for name, config in (("medium", []), ("short", [nvidia("Short")])):
                claim = {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": name, "namespace": kube_namespace},
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "gpu", "exactly": {"deviceClassName": class_name}}
                            ],
                            "config": config,
                        }
                    },
                }
                custom.create_namespaced_custom_object(
                    *RESOURCE, kube_namespace, "resourceclaims", claim
                )
                pod = {
                    "metadata": {"name": name},
                    "spec": {
                        "containers": [
                            {
                                "name": "c",
                                "image": "ubuntu",
                                "resources": {"claims": [{"name": "g"}]},
                            }
                        ],
                        "resourceClaims": [{"name": "g", "resourceClaimName": name}],
                    },
                }
                core.create_namespaced_pod(kube_namespace, pod)
            levels = {}
            for name in ("medium", "short"):
                node.wait_running(kube_namespace, name)
                api_claim = custom.get_namespaced_custom_object(
                    *RESOURCE, kube_namespace, "resourceclaims", name
                )
                (result,) = api_claim["status"]["allocation"]["devices"]["results"]
                sources = [
                    c["source"] for c in api_claim["status"]["allocation"]["devices"]["config"]
                ]
                assert sources == (
                    ["FromClass"] if name == "medium" else ["FromClass", "FromClaim"]
                )
                index = int(result["device"].removeprefix("gpu-"))
                levels[name] = SimulatedNvml(node.fleet).gpus[index].time_slice
            assert levels == {"medium": 2, "short": 1}
            node.delete_pods(kube_namespace, "medium", "short")
            assert [g.time_slice for g in SimulatedNvml(node.fleet).gpus] == [0, 0]
            node.cleaned_up()
    finally:
        custom.delete_cluster_custom_object(*RESOURCE, "deviceclasses", class_name)
