"""Classic DRA end to end on a real Kubernetes v1.30.14 control plane: the two reference cases.

Everything Kubernetes does is the real thing: kube-apiserver serving `resource.k8s.io/v1alpha2`
(gate DynamicResourceAllocation on), kube-scheduler negotiating with drasat through
PodSchedulingContexts, kube-controller-manager's resourceclaim controller creating the claims
from templates and releasing `reservedFor`, the garbage collector. drasat runs as it does in a
cluster: `drasat controller` (a process, allocating through the solver) and one `drasat
nodeplugin` process per node on simulated T4s (one and two), publishing its NodeAllocationState
through the API. No kubelet can run here: each node is a Node object and a simulated 1.30 kubelet
(`drasat.testbed.sim.kubelet`, flavour classic) reaches the API server over https, registers the
plugin over its real sockets, calls `v1alpha3.Node/NodePrepareResources` with the claim's resource
handle, resolves the CDI ids against the plugin's spec files and sets the pods Running.

The manifests are the repository's own `deploy/examples/reference-cases`, applied unchanged. The
cluster holds what `helm install drasat` would for 1.30, less the Deployment and DaemonSet (`helm
template`, applied with kubectl): the ResourceClass and its DeviceClassParameters, the policy
ConfigMap, the ServiceAccounts and their RBAC, and the node plugins' ValidatingAdmissionPolicy.
The controller runs with its ServiceAccount's token and the chart's flags (leader election, the
policy ConfigMap); each node plugin with a token of its ServiceAccount bound to a pod on its node
(so the token names the node, which the admission policy checks).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import drasatprocess
import kubernetes
import pytest
import yaml
from chartkit import kubectl_apply, render
from kubecluster import create_fake_node, exists, install_crds, service_account_token, wait_for
from kubernetes.client import ApiException

from drasat.api import crds
from drasat.testbed.controlplane import realcluster
from drasat.testbed.sim import errors, kubeclient, kubelet

pytestmark = pytest.mark.timeout(420)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "deploy" / "examples" / "reference-cases"
DRIVER = "gpu.drasat.io"
FINALIZER = "gpu.drasat.io/deletion-protection"
NAMESPACE = "drasat"  # the driver namespace: NodeAllocationStates
CHART_KINDS = {
    "ServiceAccount", "ConfigMap", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
    "DeviceClassParameters", "ResourceClass",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
}  # fmt: skip
CONTROLLER_SA, PLUGIN_SA = "drasat-controller", "drasat-node-plugin"
#: The fake nodes and their simulated GPUs: three T4s, so both reference cases fit at once (the
#: README's `kubectl apply -f exclusive-gpus.yaml -f shared-time-sliced-gpu.yaml`).
FLEETS = {"classic-node-a": "1xT4", "classic-node-b": "2xT4"}
NODES = tuple(FLEETS)
RESOURCE = ("resource.k8s.io", "v1alpha2")
NAS = ("nas.gpu.drasat.io", "v1alpha1")

#: kind -> (group, version, plural, namespaced), for the kinds the examples hold.
KINDS = {
    "Namespace": ("", "v1", "namespaces", False),
    "Pod": ("", "v1", "pods", True),
    "ResourceClaim": (*RESOURCE, "resourceclaims", True),
    "ResourceClaimTemplate": (*RESOURCE, "resourceclaimtemplates", True),
    "GpuClaimParameters": ("gpu.drasat.io", "v1alpha1", "gpuclaimparameters", True),
}


@dataclass
class Node:
    name: str
    tmp: Path
    plugin: subprocess.Popen[bytes]
    kubelet: kubelet.Kubelet

    @property
    def cdi_specs(self) -> list[Path]:
        return sorted((self.tmp / "cdi").glob("*.json"))

    def plugin_log(self) -> str:
        return (self.tmp / "plugin.log").read_text(errors="replace")[-4000:]


@dataclass
class Classic:
    """The classic cluster with drasat installed and running."""

    api: kubernetes.client.ApiClient
    client: kubeclient.KubeClient
    nodes: dict[str, Node]
    controller: subprocess.Popen[bytes]
    controller_log: Path
    #: The controller's kubeconfig (its ServiceAccount's token).
    controller_config: Path

    def logs(self) -> str:
        parts = [f"controller:\n{self.controller_log.read_text(errors='replace')[-6000:]}"]
        for node in self.nodes.values():
            parts.append(f"plugin {node.name}:\n{node.plugin_log()}")
            parts.append(f"kubelet {node.name} reasons: {node.kubelet.reasons}")
        return "\n".join(parts)


def _start_plugin(tmp: Path, node: str, kubeconfig: Path) -> subprocess.Popen[bytes]:
    return drasatprocess.start_plugin(
        tmp, node, "--namespace", NAMESPACE, "--simulate-gpus", f"{FLEETS[node]},seed={node}",
        "--kubeconfig", str(kubeconfig), "--kubelet-api", "classic",
    )  # fmt: skip


def _create(client: kubeclient.KubeClient, body: dict[str, Any]) -> dict[str, Any]:
    group, version, plural, namespaced = KINDS[body["kind"]]
    namespace = body["metadata"].get("namespace") if namespaced else None
    return client.create(kubeclient.path(group, version, plural, namespace=namespace), body)


def _chart() -> list[dict[str, Any]]:
    """The chart's objects for a 1.30 cluster (release `drasat`), less the workloads run here as
    processes: ServiceAccounts, RBAC, the policy ConfigMap, the ResourceClass with its
    DeviceClassParameters, the node plugins' ValidatingAdmissionPolicy."""
    return [d for d in render(NAMESPACE, "1.30.14") if d["kind"] in CHART_KINDS]


def _install(kube: realcluster.Cluster, api: kubernetes.client.ApiClient, work: Path) -> None:
    """What `helm install drasat` puts in a classic cluster (its CRDs first), less the
    Deployment and DaemonSet: their processes run here with their ServiceAccounts' tokens."""
    install_crds(api, crds.all_crds())
    core = kubernetes.client.CoreV1Api(api)
    try:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    except ApiException as exc:  # the cluster lives for the session
        if exc.status != 409:
            raise
    done = kubectl_apply(kube, NAMESPACE, _chart(), work / "kubectl-cache", timeout=120)
    assert done.returncode == 0, done.stderr


def _token_kubeconfig(kube: realcluster.Cluster, token: str, path: Path) -> Path:
    """The admin kubeconfig with another bearer token (the server and its CA unchanged)."""
    config = json.loads(kube.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


def _plugin_pod(client: kubeclient.KubeClient, node: str) -> dict[str, Any]:
    """The node plugin's DaemonSet pod on `node` (its ServiceAccount; its token's binding)."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"drasat-node-plugin-{node}", "namespace": NAMESPACE},
        "spec": {
            "nodeName": node,
            "serviceAccountName": PLUGIN_SA,
            "containers": [{"name": "plugin", "image": "drasat"}],
        },
    }
    return _create(client, body)


@pytest.fixture(scope="module")
def classic(classic_kube_cluster: realcluster.Cluster) -> Iterator[Classic]:
    kube = classic_kube_cluster
    kubeconfig = kube.kubeconfig
    api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    core = kubernetes.client.CoreV1Api(api)
    client = kubeclient.KubeClient.from_kubeconfig(kubeconfig)
    work = Path(tempfile.mkdtemp(prefix="kc-", dir="/tmp"))  # unix socket paths stay short
    plugins: list[subprocess.Popen[bytes]] = []
    kubelets: list[kubelet.Kubelet] = []
    controller: subprocess.Popen[bytes] | None = None
    created: list[str] = []
    try:
        _install(kube, api, work)
        nodes: dict[str, Node] = {}
        for name in NODES:
            create_fake_node(api, name)
            created.append(name)
            tmp = work / name[-1]
            tmp.mkdir()
            sim = kubelet.Kubelet(
                kubeclient.KubeClient.from_kubeconfig(kubeconfig),
                node=name,
                registry_dir=tmp / "r",
                cdi_root=tmp / "cdi",
                api=kubelet.DraApi.classic,
                resync=0.5,
            ).start()
            kubelets.append(sim)
            pod = _plugin_pod(client, name)["metadata"]
            token = service_account_token(
                api, NAMESPACE, PLUGIN_SA, bound_pod=(pod["name"], pod["uid"])
            )
            plugin_config = _token_kubeconfig(kube, token, tmp / "kubeconfig")
            plugin = _start_plugin(tmp, name, plugin_config)
            plugins.append(plugin)
            nodes[name] = Node(name, tmp, plugin, sim)

        # Other modules of the session (tests/contract) leave Immediate claims of our class in
        # namespaces being deleted: gone before the controller starts, they take no GPU.
        def no_namespace_terminating() -> bool:
            return all(n.status.phase != "Terminating" for n in core.list_namespace().items)

        wait_for(no_namespace_terminating, timeout=120, interval=0.5, what="namespaces deleted")
        controller_log = work / "controller.log"
        controller_config = _token_kubeconfig(
            kube,
            service_account_token(api, NAMESPACE, CONTROLLER_SA),
            work / "controller.kubeconfig",
        )
        controller = drasatprocess.run(
            # The chart's flags, less the metrics endpoint (a free port is not needed here).
            ["controller", "--kubeconfig", str(controller_config), "--namespace", NAMESPACE,
             "--metrics-address", "", "--resync-period", "5", "--workers", "4",
             "--policy-configmap", "drasat-policy", "--leader-elect"],
            controller_log,
        )  # fmt: skip
        env = Classic(api, client, nodes, controller, controller_log, controller_config)

        def published() -> bool:
            custom = kubernetes.client.CustomObjectsApi(api)
            listed = custom.list_namespaced_custom_object(*NAS, NAMESPACE, "nodeallocationstates")
            ready = {n["metadata"]["name"] for n in listed["items"] if n.get("status") == "Ready"}
            return ready >= set(NODES)

        try:
            wait_for(published, timeout=60, what="both nodes' NodeAllocationState Ready")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{env.logs()}") from None
        for node in nodes.values():
            kl = node.kubelet
            assert kl.wait_for(lambda kl=kl: DRIVER in kl.plugins, 30), kl.refused
            assert kl.plugins[DRIVER].service == "v1alpha3"
        yield env
    finally:
        for sim in kubelets:
            sim.stop()
        if controller is not None:
            drasatprocess.stop(controller)
        for process in plugins:
            drasatprocess.stop(process)
        for name in created:
            with contextlib.suppress(ApiException):
                core.delete_node(name)
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod(
                    f"drasat-node-plugin-{name}", NAMESPACE, grace_period_seconds=0
                )
        client.close_watches()
        api.close()
        shutil.rmtree(work, ignore_errors=True)


def _example(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def _nas(env: Classic, node: str) -> dict[str, Any]:
    custom = kubernetes.client.CustomObjectsApi(env.api)
    nas: dict[str, Any] = custom.get_namespaced_custom_object(
        *NAS, NAMESPACE, "nodeallocationstates", node
    )
    return nas


def _gpu_uuids(env: Classic) -> dict[str, str]:
    """GPU UUID -> node, from what the plugins published."""
    found = {}
    for node in NODES:
        for device in _nas(env, node)["spec"].get("allocatableDevices") or []:
            if "gpu" in device:
                found[device["gpu"]["uuid"]] = node
    return found


def _run(env: Classic, namespace: str, name: str) -> tuple[str, kubelet.PodRun]:
    """The node the pod runs on and its run there (it must be Running in the API too)."""
    core = kubernetes.client.CoreV1Api(env.api)

    def scheduled() -> str | None:
        node: str | None = core.read_namespaced_pod(name, namespace).spec.node_name
        return node

    try:
        node = wait_for(scheduled, timeout=120, what=f"pod {namespace}/{name} scheduled")
        run = env.nodes[node].kubelet.wait_running(namespace, name, timeout=60)
    except (AssertionError, TimeoutError) as error:
        raise AssertionError(f"{error}\n{env.logs()}") from None
    pod = core.read_namespaced_pod(name, namespace)
    assert pod.status.phase == "Running"
    return node, run


def _claim(env: Classic, namespace: str, name: str) -> dict[str, Any]:
    custom = kubernetes.client.CustomObjectsApi(env.api)
    claim: dict[str, Any] = custom.get_namespaced_custom_object(
        *RESOURCE, namespace, "resourceclaims", name
    )
    return claim


def _delete_namespace(env: Classic, namespace: str, pods: list[str]) -> None:
    """Delete the example's namespace: its pods go (each node's kubelet unprepares their claims
    first), the claims lose their finalizer once released, the namespace disappears."""
    core = kubernetes.client.CoreV1Api(env.api)
    with contextlib.suppress(ApiException):
        core.delete_namespace(namespace)

    def gone() -> bool:
        return not exists(core.read_namespace, namespace)

    try:
        wait_for(gone, timeout=120, interval=0.5, what=f"namespace {namespace} deleted")
    except AssertionError as error:
        raise AssertionError(f"{error}\n{env.logs()}") from None
    for name in pods:
        assert any((namespace, name) in n.kubelet.stopped for n in env.nodes.values()), (
            f"pod {namespace}/{name} was not stopped by a kubelet"
        )


def _assert_clean(env: Classic) -> None:
    """Every node back to its baseline: nothing allocated or prepared, no CDI spec left."""
    for name, node in env.nodes.items():

        def nas_empty(name: str = name) -> bool:
            spec = _nas(env, name)["spec"]
            return not spec.get("allocatedClaims") and not spec.get("preparedClaims")

        wait_for(nas_empty, timeout=30, what=f"NAS of {name} empty")
        assert node.cdi_specs == [], node.cdi_specs
        assert node.plugin.poll() is None, node.plugin_log()
    assert env.controller.poll() is None, env.logs()


def _apply(env: Classic, example: str) -> None:
    for body in _example(example):
        try:
            _create(env.client, body)
        except errors.ApiError as exc:
            raise AssertionError(f"{example}: {body['kind']}: {exc.code} {exc.message}") from None


def test_exclusive_gpus_each_pod_its_own_gpu(classic: Classic) -> None:
    """Reference case (a), `exclusive-gpus.yaml` unchanged: two pods, a claim each from the
    template, both Running on two different GPUs."""
    namespace, pods = "gpu-test1", ["pod1", "pod2"]
    uuids = _gpu_uuids(classic)
    _apply(classic, "exclusive-gpus.yaml")
    try:
        seen = {}
        for name in pods:
            node, run = _run(classic, namespace, name)
            (ref,) = run.claims
            # The resourceclaim controller's name for it (1.28+: generateName `<pod>-<entry>-`).
            assert ref.name.startswith(f"{name}-gpu-")
            pod = kubernetes.client.CoreV1Api(classic.api).read_namespaced_pod(name, namespace)
            assert [
                (s.name, s.resource_claim_name) for s in pod.status.resource_claim_statuses
            ] == [("gpu", ref.name)]
            claim = _claim(classic, namespace, ref.name)
            status = claim["status"]
            assert status["driverName"] == DRIVER
            assert [r["uid"] for r in status["reservedFor"]] == [run.uid]
            assert FINALIZER in claim["metadata"]["finalizers"]
            gpu = run.env["DRASAT_GPU_UUIDS"]
            assert uuids[gpu] == node  # a GPU of the node the pod runs on
            allocated = _nas(classic, node)["spec"]["allocatedClaims"][ref.uid]
            assert [d["uuid"] for d in allocated["gpu"]["devices"]] == [gpu]
            assert ref.uid in _nas(classic, node)["spec"]["preparedClaims"]
            seen[name] = gpu
        assert seen["pod1"] != seen["pod2"], seen
    finally:
        _delete_namespace(classic, namespace, pods)
    _assert_clean(classic)


def test_shared_time_sliced_gpu_both_pods_on_one_gpu(classic: Classic) -> None:
    """Reference case (b), `shared-time-sliced-gpu.yaml` unchanged: one claim with time-slicing
    named by two pods, both Running on the same GPU."""
    namespace, pods = "gpu-test2", ["pod1", "pod2"]
    uuids = _gpu_uuids(classic)
    _apply(classic, "shared-time-sliced-gpu.yaml")
    try:
        runs = {name: _run(classic, namespace, name) for name in pods}
        (node,) = {node for node, _ in runs.values()}
        gpus = {run.env["DRASAT_GPU_UUIDS"] for _, run in runs.values()}
        (gpu,) = gpus
        assert uuids[gpu] == node
        claim = _claim(classic, namespace, "shared-gpu")
        status = claim["status"]
        assert status["allocation"]["shareable"] is True
        assert {r["name"] for r in status["reservedFor"]} == set(pods)
        allocated = _nas(classic, node)["spec"]["allocatedClaims"][claim["metadata"]["uid"]]
        assert [d["uuid"] for d in allocated["gpu"]["devices"]] == [gpu]
        prepared = _nas(classic, node)["spec"]["preparedClaims"]
        assert prepared == {claim["metadata"]["uid"]: {"gpu": {"devices": [{"uuid": gpu}]}}}
        sharing = allocated["gpu"]["sharing"]
        assert sharing["strategy"] == "TimeSlicing"
        assert sharing["timeSlicingConfig"]["timeSlice"] == "Long"
    finally:
        _delete_namespace(classic, namespace, pods)
    _assert_clean(classic)


def test_both_cases_at_once_then_a_pod_beyond_the_free_gpus_waits_for_one(
    classic: Classic,
) -> None:
    """The README's `kubectl apply -f exclusive-gpus.yaml -f shared-time-sliced-gpu.yaml`: all
    four pods Running on the three GPUs. Then the negotiation the reference cases do not reach:
    with every GPU taken, a fifth pod of the template is reported unsuitable on every node by
    drasat and stays Pending (the real scheduler keeps retrying); when gpu-test1/pod1 is deleted,
    its claim is released by the resourceclaim controller and deallocated by drasat, and the new
    pod runs on the GPU pod1 had."""
    core = kubernetes.client.CoreV1Api(classic.api)
    custom = kubernetes.client.CustomObjectsApi(classic.api)
    pods = {"gpu-test1": ["pod1", "pod2"], "gpu-test2": ["pod1", "pod2"]}
    _apply(classic, "exclusive-gpus.yaml")
    _apply(classic, "shared-time-sliced-gpu.yaml")
    try:
        runs = {(ns, name): _run(classic, ns, name) for ns, names in pods.items() for name in names}
        gpus = {key: run.env["DRASAT_GPU_UUIDS"] for key, (_, run) in runs.items()}
        assert len(set(gpus.values())) == 3, gpus
        assert gpus["gpu-test2", "pod1"] == gpus["gpu-test2", "pod2"]

        documents = _example("exclusive-gpus.yaml")
        pod1 = next(d for d in documents if d["kind"] == "Pod" and d["metadata"]["name"] == "pod1")
        _create(classic.client, {**pod1, "metadata": {**pod1["metadata"], "name": "pod3"}})
        pods["gpu-test1"].append("pod3")

        def unsuitable_everywhere() -> bool:
            # drasat's answer in the scheduler's PodSchedulingContext: no node has a free GPU.
            try:
                context = custom.get_namespaced_custom_object(
                    *RESOURCE, "gpu-test1", "podschedulingcontexts", "pod3"
                )
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise
            answers = (context.get("status") or {}).get("resourceClaims") or []
            return [sorted(a.get("unsuitableNodes") or []) for a in answers] == [sorted(NODES)]

        try:
            wait_for(unsuitable_everywhere, timeout=90, what="pod3 unsuitable on both nodes")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{classic.logs()}") from None
        time.sleep(2)  # the scheduler has the answer: the pod stays Pending
        pod = core.read_namespaced_pod("pod3", "gpu-test1")
        assert (pod.spec.node_name, pod.status.phase) == (None, "Pending"), classic.logs()
        (status,) = pod.status.resource_claim_statuses
        claim = _claim(classic, "gpu-test1", status.resource_claim_name)
        assert not (claim.get("status") or {}).get("allocation"), claim["status"]

        core.delete_namespaced_pod("pod1", "gpu-test1")
        node, run = _run(classic, "gpu-test1", "pod3")
        freed_node = runs["gpu-test1", "pod1"][0]
        assert (node, run.env["DRASAT_GPU_UUIDS"]) == (freed_node, gpus["gpu-test1", "pod1"])
    finally:
        for namespace, names in pods.items():
            _delete_namespace(classic, namespace, names)
    _assert_clean(classic)


def test_the_charts_rbac_and_node_policy_hold_the_components(classic: Classic) -> None:
    """The components above ran under the chart's ServiceAccounts: RBAC and the node plugins'
    ValidatingAdmissionPolicy are enforced by the real server. A node plugin's token (bound to
    its pod on its node) may not write another node's NodeAllocationState, nor the controller's
    part of its own; the controller's token may not read Secrets."""
    a, b = NODES
    plugin = kubeclient.KubeClient.from_kubeconfig(classic.nodes[a].tmp / "kubeconfig")

    def update(node: str, change: Any) -> dict[str, Any]:
        url = kubeclient.path(*NAS, "nodeallocationstates", namespace=NAMESPACE, name=node)
        obj = plugin.get(url)  # RBAC: get, create, update (no patch, no delete)
        change(obj)
        return plugin.request("PUT", url, body=obj)

    def label(obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("labels", {})["probe"] = "x"

    def allocate(obj: dict[str, Any]) -> None:
        claim = {"claimInfo": {"namespace": "x", "name": "y", "uid": "z"}, "gpu": {"devices": []}}
        obj["spec"].setdefault("allocatedClaims", {})["z"] = claim

    with pytest.raises(errors.ApiError) as refused:
        update(b, label)
    assert refused.value.code == 403 and f'on node "{a}"' in refused.value.message
    with pytest.raises(errors.ApiError) as refused:
        update(a, allocate)
    assert refused.value.code == 403, refused.value.message
    assert "written by the drasat controller only" in refused.value.message
    update(a, label)  # its own NAS: allowed
    update(a, lambda obj: obj["metadata"]["labels"].pop("probe"))
    controller = kubeclient.KubeClient.from_kubeconfig(classic.controller_config)
    with pytest.raises(errors.ApiError) as refused:
        controller.list(kubeclient.path("", "v1", "secrets", namespace=NAMESPACE))
    assert refused.value.code == 403
