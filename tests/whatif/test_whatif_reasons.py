"""A refused pod's reason names its first cause: the class, the selector or the count that
excluded the last candidate devices, in the order kube-scheduler's allocator checks them. Each
case has one known cause, on NVIDIA's slices of deploy/examples/v1-nvidia-quickstart (three T4,
an A100 with dynamic MIG, an A100 with static MIG; whole GPUs of 15Gi and 40Gi)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import RunCli, WriteYaml

CLUSTER = "deploy/examples/v1-nvidia-quickstart/cluster/nvidia-slices.yaml"
NV = "device.attributes['gpu.nvidia.com']"

CLAIM = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: c, namespace: ml}}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: {cls}
        count: {count}
        selectors: {selectors}
---
apiVersion: v1
kind: Pod
metadata: {{name: p, namespace: ml}}
spec:
  tolerations: [{{key: nvidia.com/gpu, operator: Exists}}]
  containers: [{{name: c, image: x, resources: {{claims: [{{name: gpu}}]}}}}]
  resourceClaims: [{{name: gpu, resourceClaimName: c}}]
"""


def _claim(*selectors: str, cls: str = "gpu.nvidia.com", count: int = 1) -> str:
    listed = "[" + ", ".join(f'{{cel: {{expression: "{s}"}}}}' for s in selectors) + "]"
    return CLAIM.format(cls=cls, count=count, selectors=listed)


CASES = [
    pytest.param(
        _claim(cls="gpu.drasat.io"),
        "request gpu (class gpu.drasat.io): no device of the cluster is of class gpu.drasat.io; "
        "the cluster publishes devices of gpu.nvidia.com only",
        id="another-drivers-class",
    ),
    pytest.param(
        _claim("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0"),
        "request gpu (class gpu.nvidia.com): selectors[0] \"device.capacity['gpu.nvidia.com']"
        ".memory.compareTo(quantity('80Gi')) >= 0\" matches none of the 4 device(s) of the "
        "class",
        id="memory-selector",
    ),
    pytest.param(
        _claim(f"{NV}.productName.startsWith('NVIDIA A100')", f"{NV}.productName == 'Tesla T4'"),
        "request gpu (class gpu.nvidia.com): selectors[1] \"device.attributes['gpu.nvidia.com']"
        ".productName == 'Tesla T4'\" matches none of the 1 device(s) of the class",
        id="second-selector-excludes-what-the-first-admitted",
    ),
    pytest.param(
        _claim(f"{NV}.index == 0"),
        "request gpu (class gpu.nvidia.com): \"device.attributes['gpu.nvidia.com'].index == 0\" "
        "failed on device gpu-0: no such key: index",
        id="selector-fails-on-a-device",
    ),
]


@pytest.mark.parametrize(("manifests", "cause"), CASES)
def test_a_refused_pod_names_its_first_cause(
    run_cli: RunCli, write_yaml: WriteYaml, manifests: str, cause: str
) -> None:
    result = run_cli("--cluster", CLUSTER, "-f", write_yaml("app.yaml", manifests))
    assert result.code == 0, result.err
    (line,) = [r for r in result.out.splitlines() if r.startswith("ml/p not placed: ")]
    assert line.startswith("ml/p not placed: claim ml/c: no published device matches " + cause), (
        line
    )
    if "publishes devices of" not in cause:
        assert "publishes devices of" not in line, line


def test_a_count_no_node_holds_names_the_free_devices(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    """Four T4s where a node has three, one of them tainted: the solver's reason says so."""
    manifests = _claim(f"{NV}.productName == 'Tesla T4'", count=4)
    result = run_cli("--cluster", CLUSTER, "-f", write_yaml("app.yaml", manifests))
    assert "needs 4 GPUs on one node; at most 2 free on any matching node (node nv-t4)" in (
        result.out
    )
