"""drasat as it is deployed: the real control plane, two real kubelets on real containerd (runc,
CDI; scripts/runtime-build), drasat installed by `helm install` of its chart with the image built
here (localhost/drasat:dev, scripts/image-build): the controller Deployment and the node-plugin
DaemonSet run as containers on the kubelets. The probe workloads (localhost/drasat-probe:dev: the
two reference cases, a MIG device, two MPS shares) then run as containers, and each container's
own log says what it sees: exactly its claims' devices, nothing of another claim's, and the
device nodes, variables and mounts of drasat's CDI specs, which containerd applied (its OCI spec
of the container holds them).

Needs root, and the runtime and images built: `make test` builds them first (DRASAT_RUNTIME_BIN,
DRASAT_IMAGES); a missing one fails with the command to run. The cluster is the session's
`deployed` fixture (tests/e2e/containerdkit.py), which test_e2e_cluster_mps.py shares.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from containerdkit import Deployed
from helm_binary import kubectl_path

from drasat.testbed import probes
from drasat.testbed.controlplane import deployment, realcluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200), pytest.mark.containerd_cluster]


def _kubectl(cluster: realcluster.Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kubectl_path()), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_drasat_runs_as_containers_of_its_image_on_every_node(deployed: Deployed) -> None:
    cluster, nodes = deployed
    listed = probes.get(cluster, f"/api/v1/namespaces/{deployment.NAMESPACE}/pods")["items"]
    running = {
        (p["metadata"]["labels"]["app.kubernetes.io/component"], p["spec"]["nodeName"])
        for p in listed
        if p["status"].get("phase") == "Running"
        and all(s.get("ready") for s in p["status"].get("containerStatuses") or [])
    }
    assert {("node-plugin", n) for n in nodes} <= running, listed
    assert any(component == "controller" for component, _ in running), listed
    for pod in listed:
        for status in pod["status"]["containerStatuses"]:
            assert status["image"] == "localhost/drasat:dev"
            assert status["containerID"].startswith("containerd://")
    for node in nodes.values():
        assert "localhost/drasat:dev" in node.image_names()
    # The API server reaches the kubelets (`kubectl logs` through their ports): the plugin says
    # it runs on the simulated fleet.
    plugin = next(
        p for p in listed if p["metadata"]["labels"]["app.kubernetes.io/component"] == "node-plugin"
    )
    logs = _kubectl(cluster, "logs", "-n", deployment.NAMESPACE, plugin["metadata"]["name"])
    assert "SIMULATED GPUs" in logs.stdout, logs.stderr


def test_each_probe_sees_exactly_its_claims_devices_from_drasats_cdi_specs(
    deployed: Deployed,
) -> None:
    cluster, nodes = deployed
    manifests = probes.workloads()
    names = probes.namespaces(manifests)
    probes.apply(cluster, manifests)
    try:
        probes.wait_running(cluster, names, timeout=420)
        views = probes.collect(cluster, names, nodes)
        assert probes.problems(views) == [], probes.describe(views)
        by_pod = {v.pod: v for v in views}
        # (a) two exclusive GPUs: one each, not the same one (on one node they differ).
        one, two = by_pod["gpu-1"], by_pod["gpu-2"]
        assert len(probes.gpu_minors(one)) == len(probes.gpu_minors(two)) == 1
        assert (one.node, probes.gpu_minors(one)) != (two.node, probes.gpu_minors(two))
        # (b) one claim time-sliced by two pods: the same GPU, one CDI spec.
        first, second = by_pod["ts-1"], by_pod["ts-2"]
        assert first.node == second.node and first.device_nodes() == second.device_nodes()
        assert first.claims[0].uid == second.claims[0].uid
        # A MIG device: its parent GPU and its two capability nodes.
        mig = by_pod["mig-1"]
        assert len([d for d in mig.device_nodes() if d.startswith("/dev/nvidia-caps/")]) == 2
        # Two MPS shares: each reaches a daemon through its pipe directory.
        for share in (by_pod["share-1"], by_pod["share-2"]):
            assert share.view["mpsPipeDirectory"]["present"], probes.describe([share])
            assert "CUDA_MPS_PIPE_DIRECTORY" in share.view["env"]
        # The driver's files of the fake driver root are bound into every GPU container.
        assert all(v.view["driverMounts"] for v in views)
    finally:
        probes.delete_namespaces(cluster, names)
    # Unprepared once the pods are gone: the claims' CDI specs leave the nodes.
    deadline = time.monotonic() + 180
    while any(n.cdi_dir.exists() and any(n.cdi_dir.glob("*.json")) for n in nodes.values()):
        assert time.monotonic() < deadline, [
            str(p) for n in nodes.values() for p in n.cdi_dir.glob("*")
        ]
        time.sleep(1.0)


def test_kubectl_exec_reaches_a_container(deployed: Deployed) -> None:
    cluster, _ = deployed
    listed = probes.get(cluster, f"/api/v1/namespaces/{deployment.NAMESPACE}/pods")["items"]
    name = listed[0]["metadata"]["name"]
    done = _kubectl(cluster, "exec", "-n", deployment.NAMESPACE, name, "--", "drasat", "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("drasat "), done.stdout


def test_the_pods_reach_the_api_server_at_the_kubernetes_service(deployed: Deployed) -> None:
    cluster, _ = deployed
    # The controller talks to the API server in-cluster (KUBERNETES_SERVICE_HOST): its Lease.
    lease = cluster.get_object(
        f"/apis/coordination.k8s.io/v1/namespaces/{deployment.NAMESPACE}/leases/drasat-controller"
    )
    assert lease and lease["spec"].get("holderIdentity"), json.dumps(lease)
