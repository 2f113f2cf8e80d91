"""Current DRA end to end with a real kubelet: kube-scheduler allocates GPUs from the slices
drasat's node plugin publishes, the kubelet v1.37.2 (registering its own Node, on the in-memory
container runtime `fakecri`) registers the plugin through its plugin watcher, prepares the pod's
claims through it, and asks the runtime for containers with the CDI devices the plugin returned.
What each container got is read from the runtime's record of the CreateContainer requests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import drasatprocess
import kubernetes
import pytest
from kubecluster import install_crds, wait_for
from kubernetes.client import ApiException
from realkubeletkit import RealNode, pod, real_node

from drasat.api import crds, resourceslices
from drasat.api.groups import NAS_GROUP, VERSION
from drasat.nodeplugin.app import CRASH_AFTER_ENV
from drasat.testbed.controlplane import binaries, realcluster

pytestmark = pytest.mark.timeout(300)

RESOURCE = ("resource.k8s.io", "v1")
NODE = "e2e-real-kubelet"


def _on(node: str, body: dict[str, Any]) -> dict[str, Any]:
    """`body` pinned to `node` by label (other tests' fake nodes may be up)."""
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return body


def _template(namespace: str, name: str = "one-gpu") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.drasat.io"}}]
                }
            }
        },
    }


def _claim_of(api: kubernetes.client.ApiClient, namespace: str, pod_name: str) -> Any:
    """The ResourceClaim made for the pod's only claim, as the API server holds it."""
    core = kubernetes.client.CoreV1Api(api)
    statuses = core.read_namespaced_pod(pod_name, namespace).status.resource_claim_statuses
    (status,) = statuses
    return kubernetes.client.CustomObjectsApi(api).get_namespaced_custom_object(
        *RESOURCE, namespace, "resourceclaims", status.resource_claim_name
    )


@pytest.fixture
def bare_node(
    kube_api: kubernetes.client.ApiClient, kube_cluster: realcluster.Cluster
) -> Iterator[RealNode]:
    with real_node(kube_api, kube_cluster, NODE, None) as node:
        yield node


@pytest.fixture
def gpu_node(
    kube_api: kubernetes.client.ApiClient, kube_cluster: realcluster.Cluster
) -> Iterator[RealNode]:
    """Two T4s, whole GPUs only (the `gpu.drasat.io` class selects them)."""
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    with contextlib.suppress(ApiException):  # 409: another test made it
        custom.create_cluster_custom_object(
            *RESOURCE, "deviceclasses", resourceslices.gpu_device_class()
        )
    with real_node(kube_api, kube_cluster, NODE, "2xT4", shares=False) as node:
        yield node


def test_the_kubelet_registers_its_node_and_runs_a_pod_on_the_fake_runtime(
    kube_api: kubernetes.client.ApiClient,
    kube_cluster: realcluster.Cluster,
    kube_namespace: str,
    bare_node: RealNode,
) -> None:
    core = kubernetes.client.CoreV1Api(kube_api)
    node = core.read_node(NODE)
    assert node.status.node_info.kubelet_version == binaries.KUBE_VERSION
    assert node.status.node_info.container_runtime_version.startswith("fakeRuntime://")
    assert not [t for t in node.spec.taints or [] if t.effect == "NoSchedule"]

    # The device manager's socket (a fixed /var/lib/kubelet path) is in this kubelet's folder.
    assert (bare_node.kubelet.root / "var-lib-kubelet/device-plugins/kubelet.sock").exists()

    core.create_namespaced_pod(kube_namespace, _on(NODE, pod("plain")))
    held = bare_node.wait_running(kube_api, kube_namespace, "plain")
    assert held.spec.node_name == NODE
    (created,) = bare_node.containers(kube_namespace, "plain")
    assert (created["container"], created["podUID"]) == ("ctr", held.metadata.uid)
    assert created["cdiDevices"] == []

    bare_node.delete_pods(kube_api, kube_namespace, "plain")
    # The kubelet removes a deleted container's logs by globbing "<its log path>*": fakecri
    # reports a log path (the upstream fake reports none, and the kubelet then deleted the
    # first file of its working directory: the cluster's admin kubeconfig, the runtime's record).
    assert kube_cluster.kubeconfig.exists()
    assert bare_node.kubelet.record.exists() and bare_node.containers(kube_namespace, "plain")


def test_two_pods_each_get_exactly_their_claims_gpu_from_the_kubelet(
    kube_api: kubernetes.client.ApiClient, kube_namespace: str, gpu_node: RealNode
) -> None:
    """Reference case (a) on a real kubelet: two pods, one exclusive GPU each, allocated by
    kube-scheduler, prepared by the kubelet through drasat's plugin; each container is created
    with its claim's CDI device and nothing else, which gives it the allocated GPU."""
    core = kubernetes.client.CoreV1Api(kube_api)
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object(
        *RESOURCE, kube_namespace, "resourceclaimtemplates", _template(kube_namespace)
    )
    for name in ("pod1", "pod2"):
        core.create_namespaced_pod(kube_namespace, _on(NODE, pod(name, ("gpu", "one-gpu"))))
    visible = {}
    for name in ("pod1", "pod2"):
        gpu_node.wait_running(kube_api, kube_namespace, name)
        claim = _claim_of(kube_api, kube_namespace, name)
        uid = claim["metadata"]["uid"]
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"]) == ("gpu.drasat.io", NODE)
        (created,) = gpu_node.containers(kube_namespace, name)
        # the device's own CDI device (<claim uid>-<device name>)
        assert created["cdiDevices"] == [f"k8s.gpu.drasat.io/claim={uid}-{result['device']}"]
        env = gpu_node.cdi_env(created["cdiDevices"])
        assert env["DRASAT_GPU_UUIDS"] == gpu_node.uuids[result["device"]]
        assert env["DRASAT_CLAIM_UID"] == uid
        visible[name] = env["DRASAT_GPU_UUIDS"]

        # Device health: the plugin's DRAResourceHealth stream, shown by the kubelet in the
        # pod's status (ResourceHealthStatus is on by default in 1.37), keyed by the CDI id.
        def healthy(pod_name: str = name, cdi_id: str = created["cdiDevices"][0]) -> bool:
            status = core.read_namespaced_pod(pod_name, kube_namespace).status
            shown = [
                (entry.name, [(r.resource_id, r.health) for r in entry.resources])
                for container in status.container_statuses or []
                for entry in container.allocated_resources_status or []
            ]
            return shown == [("claim:gpu", [(cdi_id, "Healthy")])]

        wait_for(healthy, timeout=60, what=f"{name}'s device to show Healthy in its status")
    assert set(visible.values()) == set(gpu_node.uuids.values())
    assert len(gpu_node.cdi_specs) == 2 and len(gpu_node.checkpoint_files) == 2

    # Deleting the pods: the kubelet unprepares each claim before it confirms the deletion.
    gpu_node.delete_pods(kube_api, kube_namespace, "pod1", "pod2")
    assert gpu_node.cdi_specs == []
    assert gpu_node.checkpoint_files == []
    assert gpu_node.plugin.poll() is None, gpu_node.plugin_log()


def _run_one(api: kubernetes.client.ApiClient, namespace: str, node: RealNode, name: str) -> str:
    """Pod `name` with one exclusive GPU, Running; the uid of its claim."""
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, _on(NODE, pod(name, ("gpu", "one-gpu"))))
    node.wait_running(api, namespace, name)
    node.container_got_its_claims(api, namespace, name)
    return str(_claim_of(api, namespace, name)["metadata"]["uid"])


def _health_shown(api: kubernetes.client.ApiClient, namespace: str, pod_name: str) -> list[Any]:
    status = kubernetes.client.CoreV1Api(api).read_namespaced_pod(pod_name, namespace).status
    return [
        (entry.name, [(r.resource_id, r.health) for r in entry.resources])
        for container in status.container_statuses or []
        for entry in container.allocated_resources_status or []
    ]


def test_a_gpu_made_unhealthy_shows_in_the_pods_status(
    kube_api: kubernetes.client.ApiClient, kube_namespace: str, gpu_node: RealNode
) -> None:
    """A critical XID (48, double-bit ECC) on the GPU of a running pod, raised in the plugin's
    simulated NVML: the plugin's health stream turns it Unhealthy and the real kubelet shows it in
    the pod's `status.containerStatuses[].allocatedResourcesStatus`, keyed by the CDI id."""
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object(
        *RESOURCE, kube_namespace, "resourceclaimtemplates", _template(kube_namespace)
    )
    _run_one(kube_api, kube_namespace, gpu_node, "pod1")
    (result,) = _claim_of(kube_api, kube_namespace, "pod1")["status"]["allocation"]["devices"][
        "results"
    ]
    (created,) = gpu_node.containers(kube_namespace, "pod1")
    (cdi_id,) = created["cdiDevices"]
    wait_for(
        lambda: (
            _health_shown(kube_api, kube_namespace, "pod1")
            == [("claim:gpu", [(cdi_id, "Healthy")])]
        ),
        timeout=60,
        what="pod1's device to show Healthy in its status",
    )
    gpu_node.inject_xid(result["device"], 48)
    wait_for(
        lambda: (
            _health_shown(kube_api, kube_namespace, "pod1")
            == [("claim:gpu", [(cdi_id, "Unhealthy")])]
        ),
        timeout=60,
        what=f"pod1's device to show Unhealthy in its status\n{gpu_node.diagnostics()}",
    )
    gpu_node.delete_pods(kube_api, kube_namespace, "pod1")


def _calls(node: RealNode, uid: str) -> tuple[int, int]:
    """How often the kubelet called NodePrepareResources and NodeUnprepareResources for the
    claim (its log line for each call)."""
    return (
        node.kubelet.plugin_calls("NodePrepareResources", uid),
        node.kubelet.plugin_calls("NodeUnprepareResources", uid),
    )


def test_a_kubelet_restart_keeps_the_prepared_claim_and_unprepares_after_the_pod_goes(
    kube_api: kubernetes.client.ApiClient, kube_namespace: str, gpu_node: RealNode
) -> None:
    """The kubelet's claim info survives its restart (its checkpoint): the running pod is not
    prepared again nor its container created again, the plugin registers again, and deleting
    the pod afterwards unprepares the claim through the restarted kubelet."""
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object(
        *RESOURCE, kube_namespace, "resourceclaimtemplates", _template(kube_namespace)
    )
    uid = _run_one(kube_api, kube_namespace, gpu_node, "pod1")
    assert _calls(gpu_node, uid) == (1, 0), gpu_node.diagnostics()
    registered = gpu_node.registrations()
    gpu_node.kubelet.restart_kubelet()
    wait_for(
        lambda: gpu_node.registrations() > registered,
        timeout=60,
        what=f"the restarted kubelet to register the plugin again\n{gpu_node.diagnostics()}",
    )
    gpu_node.wait_running(kube_api, kube_namespace, "pod1")
    time.sleep(12)  # two of the kubelet's sync periods: time to prepare again, if it would
    assert _calls(gpu_node, uid) == (1, 0), gpu_node.diagnostics()
    assert len(gpu_node.containers(kube_namespace, "pod1")) == 1  # the same container runs on
    assert len(gpu_node.cdi_specs) == 1 and len(gpu_node.checkpoint_files) == 1

    gpu_node.delete_pods(kube_api, kube_namespace, "pod1")
    assert _calls(gpu_node, uid) == (1, 1)
    assert gpu_node.cdi_specs == [] and gpu_node.checkpoint_files == []


def test_a_plugin_restart_while_the_kubelet_holds_a_claim(
    kube_api: kubernetes.client.ApiClient, kube_namespace: str, gpu_node: RealNode
) -> None:
    """The plugin restarts while its claim is prepared: the kubelet registers the new process,
    prepares a new pod's claim through it and unprepares the old pod's claim through it."""
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object(
        *RESOURCE, kube_namespace, "resourceclaimtemplates", _template(kube_namespace)
    )
    _run_one(kube_api, kube_namespace, gpu_node, "pod1")
    registered = gpu_node.registrations()
    drasatprocess.stop(gpu_node.plugin)
    gpu_node.start_plugin(append=True)
    wait_for(
        lambda: gpu_node.registrations() > registered,
        timeout=60,
        what=f"the kubelet to register the restarted plugin\n{gpu_node.diagnostics()}",
    )
    _run_one(kube_api, kube_namespace, gpu_node, "pod2")
    assert len(gpu_node.cdi_specs) == 2
    gpu_node.delete_pods(kube_api, kube_namespace, "pod1", "pod2")
    assert gpu_node.cdi_specs == [] and gpu_node.checkpoint_files == []
    assert gpu_node.plugin.poll() is None, gpu_node.plugin_log()


def test_kube_cluster_up_starts_kubelets_each_with_drasats_plugin(
    kube_cluster: realcluster.Cluster,
) -> None:
    """`scripts/kube-cluster up --kubelets 2 --drasat-plugins 1xT4` (the module it runs): two
    Nodes registered by their kubelets; once the plugins' namespace and drasat's CRDs exist (a
    chart installed later makes them), each kubelet registers its own node's plugin, which keeps
    that node's NodeAllocationState there and publishes its slice; `down` stops every process it
    started."""
    folder = Path(tempfile.mkdtemp(prefix="kc-", dir="/tmp")) / "c"  # short socket paths
    env = {**os.environ, "DRASAT_KUBE_BIN": str(kube_cluster.bin_dir)}
    command = [sys.executable, "-m", "drasat.testbed.controlplane"]
    try:
        subprocess.run(
            [*command, "up", "--dir", str(folder), "--kubelets", "2", "--drasat-plugins", "1xT4"],
            env=env, check=True, capture_output=True, timeout=240,
        )  # fmt: skip
        started = realcluster.Cluster.load(folder)
        names = [p.name for p in started.processes]
        assert names[4:] == [
            "fakecri-node-1", "kubelet-node-1", "drasat-plugin-node-1",
            "fakecri-node-2", "kubelet-node-2", "drasat-plugin-node-2",
        ]  # fmt: skip
        client = kubernetes.config.new_client_from_config(config_file=str(started.kubeconfig))
        with client:
            core = kubernetes.client.CoreV1Api(client)
            nodes = {n.metadata.name: n for n in core.list_node().items}
            assert sorted(nodes) == ["node-1", "node-2"]
            assert all(
                n.status.node_info.kubelet_version == binaries.KUBE_VERSION for n in nodes.values()
            )
            custom = kubernetes.client.CustomObjectsApi(client)
            core.create_namespace({"metadata": {"name": "drasat"}})
            install_crds(client, crds.all_crds())

            def published() -> bool:
                listed = custom.list_cluster_custom_object(*RESOURCE, "resourceslices")["items"]
                return sorted(s["spec"]["nodeName"] for s in listed) == ["node-1", "node-2"]

            wait_for(published, timeout=90, what="each node's plugin to publish its slice")
            held = custom.list_namespaced_custom_object(
                NAS_GROUP, VERSION, "drasat", "nodeallocationstates"
            )["items"]
            assert sorted(n["metadata"]["name"] for n in held) == ["node-1", "node-2"]
        for node in ("node-1", "node-2"):
            log = folder / "logs" / f"drasat-plugin-{node}.log"
            wait_for(
                lambda log=log: "registered with the kubelet" in log.read_text(),
                timeout=60,
                what=f"{node}'s kubelet to register its plugin",
            )
            assert f"{folder}/nodes/{node}/root/plugins/gpu.drasat.io/dra.sock" in log.read_text()
    finally:
        subprocess.run([*command, "down", "--dir", str(folder)], env=env, capture_output=True)
        if (folder / realcluster.STATE_FILE).exists():
            assert not realcluster.Cluster.load(folder).running()
        shutil.rmtree(folder.parent, ignore_errors=True)


def test_a_pod_deleted_while_its_prepare_crashed_the_plugin_is_cleaned_up_by_the_kubelet(
    kube_api: kubernetes.client.ApiClient,
    kube_namespace: str,
    gpu_node: RealNode,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plugin dies in the middle of the pod's prepare (after writing the claim's CDI spec);
    the pod is deleted before any prepare finished; once the plugin is back, the kubelet's
    unprepare removes what the half-done prepare left, and only then is the deletion confirmed."""
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    core = kubernetes.client.CoreV1Api(kube_api)
    custom.create_namespaced_custom_object(
        *RESOURCE, kube_namespace, "resourceclaimtemplates", _template(kube_namespace)
    )
    registered = gpu_node.registrations()
    drasatprocess.stop(gpu_node.plugin)
    monkeypatch.setenv(CRASH_AFTER_ENV, "cdi")  # the restarted plugin exits after that step
    gpu_node.start_plugin(append=True)
    monkeypatch.delenv(CRASH_AFTER_ENV)
    wait_for(lambda: gpu_node.registrations() > registered, timeout=60, what="registration")
    core.create_namespaced_pod(kube_namespace, _on(NODE, pod("pod1", ("gpu", "one-gpu"))))
    wait_for(
        lambda: gpu_node.plugin.poll() is not None,
        timeout=90,
        what=f"the plugin to exit in the prepare\n{gpu_node.diagnostics()}",
    )
    assert gpu_node.containers(kube_namespace, "pod1") == []  # never started
    assert len(gpu_node.cdi_specs) == 1  # what the interrupted prepare left
    uid = str(_claim_of(kube_api, kube_namespace, "pod1")["metadata"]["uid"])
    core.delete_namespaced_pod("pod1", kube_namespace)

    registered = gpu_node.registrations()
    gpu_node.start_plugin(append=True)
    wait_for(lambda: gpu_node.registrations() > registered, timeout=60, what="registration")
    wait_for(
        lambda: not core.list_namespaced_pod(kube_namespace).items,
        timeout=90,
        what=f"the kubelet to confirm the deletion\n{gpu_node.diagnostics()}",
    )
    assert gpu_node.kubelet.plugin_calls("NodeUnprepareResources", uid) >= 1
    assert gpu_node.cdi_specs == [] and gpu_node.checkpoint_files == []
    assert gpu_node.containers(kube_namespace, "pod1") == []
