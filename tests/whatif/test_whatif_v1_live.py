"""`drasat whatif --from-cluster` on the real v1.37 control plane: ResourceSlices, Nodes,
DeviceClasses, claims and pods are read (never written), and what kube-scheduler already
allocated stays taken."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import kubernetes
import yaml
from kubecluster import create_fake_node, wait_for
from kubernetes.client import ApiException

from drasat.testbed.controlplane import realcluster

if TYPE_CHECKING:  # annotations only: several test folders have a conftest module
    from conftest import RunCli, WriteYaml

GPU_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                }
            }
        ]
    },
}


def t4(minor: int, node: str) -> dict[str, Any]:
    return {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{node}-{minor}"},
            "productName": {"string": "Tesla T4"},
            "architecture": {"string": "Turing"},
            "cudaComputeCapability": {"version": "7.5.0"},
        },
        "capacity": {"memory": {"value": "15Gi"}},
    }


def _create(create: Any, *args: Any) -> None:
    with contextlib.suppress(ApiException):  # 409: another test of the session made it
        create(*args)


def _claims(custom: Any, namespace: str) -> list[dict[str, Any]]:
    listed = custom.list_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaims"
    )
    return list(listed["items"])


def test_from_cluster_keeps_what_the_scheduler_allocated(
    kube_cluster: realcluster.Cluster,
    kube_api: kubernetes.client.ApiClient,
    kube_namespace: str,
    run_cli: RunCli,
    write_yaml: WriteYaml,
) -> None:
    node = f"wi-{kube_namespace}"
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    core = kubernetes.client.CoreV1Api(kube_api)
    create_fake_node(kube_api, node)
    _create(
        custom.create_cluster_custom_object, "resource.k8s.io", "v1", "deviceclasses", GPU_CLASS
    )
    custom.create_cluster_custom_object(
        "resource.k8s.io",
        "v1",
        "resourceslices",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu.nvidia.com"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [t4(0, node), t4(1, node)],
            },
        },
    )
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "held"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        },
    }
    custom.create_namespaced_custom_object(
        "resource.k8s.io", "v1", kube_namespace, "resourceclaims", claim
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "running"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "held"}],
        },
    }
    core.create_namespaced_pod(kube_namespace, pod)

    def held_device() -> str | None:
        found = custom.get_namespaced_custom_object(
            "resource.k8s.io", "v1", kube_namespace, "resourceclaims", "held"
        )
        results = ((found.get("status") or {}).get("allocation") or {}).get("devices", {})
        return next((r["device"] for r in results.get("results", [])), None)

    taken = wait_for(held_device, timeout=60, what="kube-scheduler to allocate the claim")
    before = {
        c["metadata"]["name"]: c["metadata"]["resourceVersion"]
        for c in _claims(custom, kube_namespace)
    }

    app = write_yaml(
        "app.yaml",
        f"""
        apiVersion: resource.k8s.io/v1
        kind: ResourceClaimTemplate
        metadata: {{namespace: {kube_namespace}, name: one}}
        spec:
          spec:
            devices:
              requests: [{{name: gpu, exactly: {{deviceClassName: gpu.nvidia.com}}}}]
        ---
        apiVersion: v1
        kind: Pod
        metadata: {{namespace: {kube_namespace}, name: new}}
        spec:
          nodeSelector: {{kubernetes.io/hostname: {node}}}
          containers: [{{name: c, image: busybox}}]
          resourceClaims: [{{name: gpu, resourceClaimTemplateName: one}}]
        """,
    )
    result = run_cli(
        "--from-cluster", "--kubeconfig", str(kube_cluster.kubeconfig), "-f", app, "-o", "yaml"
    )
    assert result.code == 0, result.err
    claims = {c["metadata"]["name"]: c for c in yaml.safe_load(result.out)["items"]}
    new = next(c for name, c in claims.items() if name.startswith("new-gpu-"))
    (placed,) = new["status"]["allocation"]["devices"]["results"]
    # The device kube-scheduler gave `held` stays taken: the new claim gets the other one.
    assert (placed["pool"], placed["driver"]) == (node, "gpu.nvidia.com")
    assert {placed["device"], taken} == {"gpu-0", "gpu-1"}
    assert claims["held"]["status"]["allocation"]["devices"]["results"][0]["device"] == taken
    # Read only: no claim was created or changed.
    after = {
        c["metadata"]["name"]: c["metadata"]["resourceVersion"]
        for c in _claims(custom, kube_namespace)
    }
    assert after == before
