"""The what-if on NVIDIA's `consumable-shares` memory pattern (a Deployment whose claim template
asks only `memory: 4Gi`), with drasat's class: the replicas share a GPU by memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import RunCli, WriteYaml

CLUSTER = """
apiVersion: whatif.drasat.io/v1alpha1
kind: Cluster
spec:
  nodes:
  - {name: t4, gpus: [{product: T4, count: 1}], cpu: 64, memory: 512Gi}
"""

#: NVIDIA's demo/specs/consumable-shares/memory-sharing.yaml in substance, drasat's class, and
#: four replicas (a T4 shares 15Gi: three fit).
MEMORY_SHARING = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: gpu-share-memory, name: gpu-4gi}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.drasat.io
          capacity: {requests: {memory: 4Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {namespace: gpu-share-memory, name: memory-sharing}
spec:
  replicas: 4
  selector: {matchLabels: {app: memory-sharing}}
  template:
    metadata: {labels: {app: memory-sharing}}
    spec:
      resourceClaims: [{name: gpu, resourceClaimTemplateName: gpu-4gi}]
      containers:
      - name: ctr
        image: ubuntu:22.04
        resources: {claims: [{name: gpu}]}
"""


def test_memory_only_shares_of_a_deployment_share_one_gpu(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    cluster = write_yaml("cluster.yaml", CLUSTER)
    app = write_yaml("app.yaml", MEMORY_SHARING)
    result = run_cli("--cluster", cluster, "-f", app)
    assert result.code == 0, result.err
    table, rest = result.out.split("\n\n", 1)
    rows = [line.split(None, 3) for line in table.splitlines()[1:]]
    placed = [r for r in rows if r[2] == "t4"]
    assert len(placed) == 3
    assert all(r[3] == "gpu: gpu-0 (share 4Gi of GPU 0)" for r in placed)
    assert "not placed" in rest and "at most 3072Mi memory free on one" in rest
