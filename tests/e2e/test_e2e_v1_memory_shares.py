"""NVIDIA's `consumable-shares` memory pattern (claims asking only `memory: 4Gi`) with drasat's
class on the real control plane (issue 26 item 3): drasat's controller packs the shares onto one
GPU by memory, and the node plugin prepares each with its pinned memory limit and no compute
limit."""

from __future__ import annotations

import pathlib
import textwrap
from collections.abc import Iterator
from typing import Any

import allockit
import kubernetes
import pytest
from kubeletkit import gpu_node
from slicekit import applied, unique

pytestmark = pytest.mark.timeout(400)

NAMESPACE = "gpu-share-memory"


@pytest.fixture(scope="module")
def allocator(kube_api: kubernetes.client.ApiClient, kube_cluster: Any) -> Iterator[Any]:
    with allockit.allocator(kube_api, kube_cluster) as found:
        yield found


def _manifest(tmp: pathlib.Path, pods: int) -> pathlib.Path:
    text = f"""
        apiVersion: v1
        kind: Namespace
        metadata: {{name: {NAMESPACE}}}
        ---
        apiVersion: resource.k8s.io/v1
        kind: ResourceClaimTemplate
        metadata: {{namespace: {NAMESPACE}, name: gpu-4gi}}
        spec:
          spec:
            devices:
              requests:
              - name: gpu
                exactly:
                  deviceClassName: gpu.drasat.io
                  capacity: {{requests: {{memory: 4Gi}}}}
        """
    for i in range(pods):
        text += f"""
        ---
        apiVersion: v1
        kind: Pod
        metadata: {{namespace: {NAMESPACE}, name: share-{i}}}
        spec:
          containers: [{{name: c, image: x, resources: {{claims: [{{name: gpu}}]}}}}]
          resourceClaims: [{{name: gpu, resourceClaimTemplateName: gpu-4gi}}]
        """
    path = tmp / "shares.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_memory_only_shares_pack_onto_one_gpu_without_a_compute_limit(
    kube_api: kubernetes.client.ApiClient,
    kube_cluster: Any,
    allocator: Any,
    tmp_path: pathlib.Path,
) -> None:
    with (
        gpu_node(
            kube_api, kube_cluster, unique("v1mem"), "2xT4", nas_namespace=allockit.NAMESPACE
        ) as node,
        applied(kube_api, _manifest(tmp_path, 3)),
    ):
        runs = [node.wait_running(NAMESPACE, f"share-{i}") for i in range(3)]
        devices = {d.device_name for run in runs for c in run.claims for d in run.prepared[c.uid]}
        assert devices == {"gpu-0"} or devices == {"gpu-1"}  # three 4Gi shares fit one T4
        for run in runs:
            env = run.env
            assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
            assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env
            assert env["DRASAT_GPU_SHARE_MEMORY"] == str(4 * 2**30)
            assert "DRASAT_GPU_SHARE_COMPUTE" not in env
        allockit.consistent(kube_api, allocator)
