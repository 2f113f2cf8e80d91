"""The `deploy/examples/v1-*` manifests on the real v1.37.2 control plane: applied as they are
to a cluster whose only drasat devices are a fake node's simulated fleet, the plain
kube-scheduler allocates what each README says."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from kubecluster import wait_for
from slicekit import RESOURCE, GpuNode, applied, device_classes, gpu_node

pytestmark = pytest.mark.timeout(300)

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "examples"

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def classes(kube_api: kubernetes.client.ApiClient) -> Iterator[None]:
    with device_classes(kube_api):
        yield


def results_of(api: kubernetes.client.ApiClient, pod: Obj, node: GpuNode) -> list[Obj]:
    """The allocation results of the pod's one claim, once the scheduler bound it to `node`."""
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    bound = wait_for(
        lambda: (p := core.read_namespaced_pod(name, namespace)).spec.node_name and p,
        60,
        0.2,
        what=f"the scheduler to bind {namespace}/{name}",
    )
    assert bound.spec.node_name == node.name
    (status,) = bound.status.resource_claim_statuses
    claim = custom.get_namespaced_custom_object(
        *RESOURCE, namespace, "resourceclaims", status.resource_claim_name
    )
    results: list[Obj] = claim["status"]["allocation"]["devices"]["results"]
    return results


def test_optional_gpu_one_pod_gets_the_gpu_the_other_falls_back(
    kube_api: kubernetes.client.ApiClient, classes: None
) -> None:
    with (
        gpu_node(kube_api, "1xT4") as node,
        applied(kube_api, EXAMPLES / "v1-optional-gpu/optional-gpu.yaml") as pods,
    ):
        taken = sorted(
            (r["request"], r["device"]) for p in pods for r in results_of(kube_api, p, node)
        )
        assert taken == [("gpu-or-cpu/cpu", "cpu-fallback"), ("gpu-or-cpu/gpu", "gpu-0")]


def test_gpu_test4_tiles_one_gpu_with_four_mig_devices(
    kube_api: kubernetes.client.ApiClient, classes: None
) -> None:
    with (
        gpu_node(kube_api, "1xA100-40GB,mig=0") as node,
        applied(kube_api, EXAMPLES / "v1-mig-by-profile/gpu-test4.yaml") as (pod,),
    ):
        results = results_of(kube_api, pod, node)
        assert [r["request"] for r in results] == ["mig-1g-0", "mig-1g-1", "mig-2g", "mig-3g"]
        used = []
        for result in results:
            attributes = node.devices[result["device"]]["attributes"]
            start, size = attributes["placementStart"]["int"], attributes["placementSize"]["int"]
            used.extend(range(start, start + size))
        assert sorted(used) == list(range(8))


def test_two_shares_land_on_one_gpu(kube_api: kubernetes.client.ApiClient, classes: None) -> None:
    with (
        gpu_node(kube_api, "1xT4") as node,
        applied(kube_api, EXAMPLES / "v1-shared-gpu/shares.yaml") as pods,
    ):
        results = [r for p in pods for r in results_of(kube_api, p, node)]
        assert [r["device"] for r in results] == ["gpu-0", "gpu-0"]
        assert [r["consumedCapacity"] for r in results] == [
            {"compute": "25", "memory": "4294967296"}
        ] * 2
        assert results[0]["shareID"] != results[1]["shareID"]
