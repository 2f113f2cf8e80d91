"""The what-if places pods that ask for `nvidia.com/gpu` as drasat serves them: converted into
claims of drasat's class from the templates drasat's controller makes (`drasat.v1.extended`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import RunCli, WriteYaml

CLUSTER = """
apiVersion: whatif.drasat.io/v1alpha1
kind: Cluster
spec:
  nodes:
  - {name: t4, gpus: [{product: T4, count: 2}], cpu: 64, memory: 512Gi}
"""

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {namespace: ml, name: trainer}
spec:
  replicas: 3
  selector: {matchLabels: {app: trainer}}
  template:
    metadata: {labels: {app: trainer}}
    spec:
      containers:
      - {name: train, image: x, resources: {limits: {nvidia.com/gpu: %s}}}
"""


def _rows(text: str) -> list[list[str]]:
    return [line.split(None, 3) for line in text.split("\n\n", 1)[0].splitlines()[1:]]


def test_pods_asking_nvidia_com_gpu_are_placed_on_whole_gpus(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    cluster = write_yaml("cluster.yaml", CLUSTER)
    app = write_yaml("app.yaml", DEPLOYMENT % "1")
    result = run_cli("--cluster", cluster, "-f", app)
    assert result.code == 0, result.err
    rows = _rows(result.out)
    assert [r[1] for r in rows] == ["drasat-gpu-0"] * 3
    placed = sorted(r[3] for r in rows if r[2] == "t4")
    assert placed == ["gpu: gpu-0", "gpu: gpu-1"]
    assert "needs 1 GPU on one node; at most 0 free" in result.out


def test_two_gpus_for_one_container_take_two_gpus_of_one_node(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    cluster = write_yaml("cluster.yaml", CLUSTER)
    app = write_yaml("app.yaml", (DEPLOYMENT % "2").replace("replicas: 3", "replicas: 1"))
    result = run_cli("--cluster", cluster, "-f", app)
    assert result.code == 0, result.err
    ((_, claim, node, devices),) = _rows(result.out)
    assert (claim, node) == ("drasat-gpu-0", "t4")
    assert devices == "gpu: gpu-0; gpu: gpu-1"


def test_a_count_that_is_not_whole_is_bad_input_naming_the_field(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    cluster = write_yaml("cluster.yaml", CLUSTER)
    app = write_yaml("app.yaml", DEPLOYMENT % "'1.5'")
    result = run_cli("--cluster", cluster, "-f", app)
    assert result.code == 2
    assert (
        "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "
        '"1.5": must be an integer'
    ) in result.err
    assert "Deployment ml/trainer" in result.err and "Traceback" not in result.err


def test_the_example_is_placed_on_the_embedded_cluster(run_cli: RunCli) -> None:
    example = Path(__file__).resolve().parents[2] / "deploy/examples/v1-extended-resource"
    result = run_cli("-f", str(example / "gpu-pods.yaml"))
    assert result.code == 0, result.err
    rows = {r[0]: r for r in _rows(result.out)}
    assert rows["gpu-extended/one-gpu"][3].count("gpu: ") == 1
    assert rows["gpu-extended/two-gpus"][3].count("gpu: ") == 2


#: NVIDIA's GPU class as NVIDIA's chart installs it: it serves nvidia.com/gpu.
NVIDIA_CLASS = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  extendedResourceName: nvidia.com/gpu
  selectors:
  - cel:
      expression: >-
        device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'
"""

NVIDIA_POD = """
apiVersion: v1
kind: Pod
metadata: {namespace: ml, name: trainer}
spec:
  tolerations: [{key: nvidia.com/gpu, operator: Exists}]
  initContainers:
  - {name: fetch, image: x, resources: {limits: {nvidia.com/gpu: 1}}}
  containers:
  - {name: train, image: x, resources: {limits: {nvidia.com/gpu: 1}}}
"""


def test_nvidia_com_gpu_is_served_by_the_class_the_input_says_serves_it(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    slices = Path(__file__).resolve().parents[2] / (
        "deploy/examples/v1-nvidia-quickstart/cluster/nvidia-slices.yaml"
    )
    app = write_yaml("app.yaml", NVIDIA_CLASS + "---" + NVIDIA_POD)
    result = run_cli("--cluster", str(slices), "-f", app)
    assert result.code == 0, result.err
    # One GPU of NVIDIA's for the pod: the init container uses the app container's.
    ((pod, claim, node, devices),) = _rows(result.out)
    assert (pod, claim, node) == ("ml/trainer", "drasat-gpu-0", "nv-t4")
    assert devices.count("gpu: ") == 1
    # Without NVIDIA's class in the input, drasat's class serves it: no device on these slices.
    app = write_yaml("plain.yaml", NVIDIA_POD)
    result = run_cli("--cluster", str(slices), "-f", app)
    assert [r[2] for r in _rows(result.out)] == ["-"]
