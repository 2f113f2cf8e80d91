"""A GPU in MIG mode goes whole only to a request that asks for MIG mode, on drasat's slices and
on NVIDIA's alike: a container given a MIG-mode GPU with no GPU instance cannot run CUDA on it.
One A100 in MIG mode and a one-GPU claim: refused with the same reason on both formats; a
request selecting `migEnabled` true gets the GPU whole on drasat's."""

from __future__ import annotations

from typing import TYPE_CHECKING

import nvidiaslices
import yaml

if TYPE_CHECKING:
    from conftest import RunCli, WriteYaml

ONE_A100 = """
apiVersion: whatif.drasat.io/v1alpha1
kind: Cluster
spec:
  nodes:
  - {name: a100, gpus: [{product: A100-40GB, count: 1, mig: true}]}
"""


def _claim(device_class: str, selector: str | None = None) -> str:
    exactly: dict[str, object] = {"deviceClassName": device_class}
    if selector is not None:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "one-gpu", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "one-gpu"}],
        },
    }
    return yaml.safe_dump_all([claim, pod])


def _row(out: str) -> list[str]:
    table = out.split("\n\n", 1)[0]
    (row,) = [line.split(None, 3) for line in table.splitlines()[1:]]
    return row


REFUSED = (
    "no GPU without MIG (MIG-enabled GPUs go whole only to claims that select migEnabled=true)"
)


def test_a_plain_claim_never_gets_a_mig_mode_gpu_whole_on_drasats_slices(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    cluster = write_yaml("cluster.yaml", ONE_A100)
    result = run_cli("--cluster", cluster, "-f", write_yaml("app.yaml", _claim("gpu.drasat.io")))
    assert _row(result.out)[2] == "-", result.out
    assert REFUSED in result.out


def test_a_plain_claim_never_gets_a_mig_mode_gpu_whole_on_nvidias_slices(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    # NVIDIA's A100 with dynamic MIG publishes the whole GPU too (consuming every counter).
    node, slices = nvidiaslices.node("nv-a100", "a100")
    node["spec"].pop("taints", None)
    listing = {"apiVersion": "v1", "kind": "List", "items": [node, *slices]}
    cluster = write_yaml("cluster.yaml", yaml.safe_dump(listing))
    result = run_cli("--cluster", cluster, "-f", write_yaml("app.yaml", _claim("gpu.nvidia.com")))
    assert _row(result.out)[2] == "-", result.out
    assert REFUSED in result.out


def test_a_request_selecting_mig_mode_gets_the_gpu_whole(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    cluster = write_yaml("cluster.yaml", ONE_A100)
    asks = 'device.attributes["gpu.drasat.io"].migEnabled == true'
    result = run_cli(
        "--cluster", cluster, "-f", write_yaml("app.yaml", _claim("gpu.drasat.io", asks))
    )
    assert result.code == 0, result.err
    assert _row(result.out)[2:] == ["a100", "gpu: gpu-0"]
