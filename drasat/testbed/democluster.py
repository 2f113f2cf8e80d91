"""The demo's cluster, every part real, only the hardware (and, by default, the cluster) simulated:
`V1Cluster` for `drasat demo` (the classic demo's own is `drasat.classic.demo.DemoCluster`), and the
parts both demos share (a node's simulated fleet, `SimNode`, stopping parts in order).

drasat's parts are the real ones, in this process: the v1 controller (`App` with `--dra-api v1`,
its policy from a ConfigMap), and per node a node plugin (simulated NVML fleet, real gRPC sockets,
its ResourceSlices and NodeAllocationState published). Around them, the cluster is one of:

- simulated (`V1Cluster.simulated`): the in-process API server, the simulated v1 scheduler
  (honours the allocations drasat's controller writes, allocates nothing), controller manager
  (claims from templates, pods of Deployments, ReplicaSets and Jobs) and a simulated v1 kubelet
  per node (`drasat.testbed.sim.kubelet`);
- real (`V1Cluster.real`): etcd, kube-apiserver, kube-scheduler and kube-controller-manager
  (`drasat.testbed.controlplane`) in a temporary folder, stopped and removed at the end; with
  `real_kubelets`, a real kubelet per node on its fake container runtime (`RealKubelet` reads
  it as the demo reads the simulated one), else simulated kubelets.
"""

from __future__ import annotations

import contextlib
import logging
import pathlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from drasat import DRIVER_NAME
from drasat.api import catalog, crds
from drasat.api.cluster import Cluster, ClusterNode
from drasat.api.devicemodel import classes
from drasat.api.nas import NodeAllocationState
from drasat.controller.app import App, Options
from drasat.controller.policy import CONFIGMAP_KEY
from drasat.controller.taintrule import TAINT_RULE
from drasat.kube.client import KubeClient as OfficialClient
from drasat.kube.client import configuration_for, load_configuration
from drasat.nodeplugin import mps, nvml, registration, slicepublisher, v1claims
from drasat.nodeplugin.nasstore import KubeNasStore
from drasat.nodeplugin.plugin import Config, NodePlugin
from drasat.testbed import simnvml
from drasat.testbed.controlplane import realcluster as controlplane
from drasat.testbed.controlplane import realkubelet
from drasat.testbed.demoshow import SETTLE_S, DemoError, Key, Out, PodOutcome, until
from drasat.testbed.sim import (
    apiserver,
    apply,
    controllers,
    errors,
    kubeclient,
    kubelet,
    resources,
    v1scheduler,
)
from drasat.v1 import extended

log = logging.getLogger(__name__)

Obj = dict[str, Any]
NAMESPACE = "drasat"
POLICY_CONFIGMAP = "drasat-policy"
CLASS_PARAMETERS = "drasat-gpu"
_V1 = ("resource.k8s.io", "v1")


def v1_path(plural: str, namespace: str | None = None, name: str | None = None) -> str:
    return kubeclient.path(*_V1, plural, namespace=namespace, name=name)


def core_path(
    plural: str, namespace: str | None = None, name: str | None = None, sub: str | None = None
) -> str:
    return kubeclient.path("", "v1", plural, namespace=namespace, name=name, subresource=sub)


def fleet_spec(cluster: Cluster, node: ClusterNode, name: str) -> simnvml.FleetSpec:
    """The simulated NVML fleet of one described node (GPU UUIDs seeded by the node name)."""
    gpus: list[simnvml.SimGpuSpec] = []
    for group in node.gpus:
        product = catalog.find_product(group.product)
        assert product is not None  # the Cluster model checked the name
        gpus.extend(simnvml.SimGpuSpec(product, group.mig) for _ in range(group.count))
    return simnvml.FleetSpec(
        gpus=tuple(gpus),
        driver_version=cluster.spec.driverVersion,
        cuda_version=cluster.spec.cudaDriverVersion,
        nvlink=node.nvlink or None,
        numa_nodes=2 if len(gpus) > 1 else 1,
        seed=name,
    )


def extended_resource_admission(rt: resources.ResourceType, obj: Obj) -> None:
    """The chart's MutatingAdmissionPolicy (`extended.admission_policy`) on the simulated API
    server, which evaluates no admission policies: the same rule in its Python form
    (`extended.admitted`, held equal to the policy on the real API server by
    tests/e2e/test_e2e_v1_extended.py), so a pod asking `nvidia.com/gpu` becomes the same claim
    pod on both clusters (and in the what-if)."""
    if (rt.group, rt.kind) != ("", "Pod"):
        return
    converted = extended.admitted(obj)
    if converted is not None:
        obj["spec"] = converted["spec"]


def describe(spec: simnvml.FleetSpec) -> str:
    """`2 × A100-40GB (MIG)` per product, in GPU order."""
    counts: dict[str, int] = {}
    for gpu in spec.gpus:
        label = gpu.product.key + (" (MIG)" if gpu.mig_enabled else "")
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{n} × {label}" for label, n in counts.items()) or "no GPUs"


class NodeKubelet(Protocol):
    """What the demo reads of a node's kubelet: the simulated one (`drasat.testbed.sim.kubelet`), or
    a real kubelet seen through its runtime's record (`RealKubelet`)."""

    @property
    def plugins(self) -> Mapping[str, object]: ...  # the drivers it registered

    @property
    def reasons(self) -> Mapping[tuple[str, str], str]: ...  # why a pod has not started

    def running(self, namespace: str, name: str) -> kubelet.PodRun | None: ...

    def stop(self) -> None: ...


@dataclass
class SimNode:
    """One simulated node: its fleet, node plugin and kubelet."""

    name: str
    fleet: simnvml.SimulatedNvml
    config: Config
    plugin: NodePlugin
    kubelet: NodeKubelet | None = None

    def mig_devices(self) -> int:
        """MIG devices (GPU instances) that exist on the node's GPUs now."""
        return sum(len(gpu.gpu_instances) for gpu in self.fleet.gpus)

    def cdi_specs(self) -> list[pathlib.Path]:
        root = self.config.cdi_root
        return sorted(root.glob("*.json")) if root.is_dir() else []


def settle_pods(
    nodes: Sequence[SimNode],
    pods: Sequence[Key],
    *,
    refusal: Callable[[Key], str | None],
    why: Callable[[Key], str],
    timeout: float,
) -> dict[Key, PodOutcome]:
    """Wait until each pod runs on one of the nodes' kubelets, or its `refusal` (a Warning that
    says why it cannot run) has stood for SETTLE_S; a pod still open after `timeout` gets
    `why` it waits. Both demos wait for their pods this way."""
    outcomes = {key: PodOutcome(key) for key in pods}
    warned: dict[Key, float] = {}
    open_ = set(pods)

    def step() -> bool:
        for key in sorted(open_):
            found = next(
                (
                    (run, node.name)
                    for node in nodes
                    if node.kubelet is not None and (run := node.kubelet.running(*key)) is not None
                ),
                None,
            )
            if found is not None:
                outcomes[key].run, outcomes[key].node = found
                open_.discard(key)
                continue
            warning = refusal(key)
            if warning is None:
                warned.pop(key, None)
                continue
            since = warned.setdefault(key, time.monotonic())
            if time.monotonic() - since >= SETTLE_S:
                outcomes[key].reason = warning
                open_.discard(key)
        return not open_

    if not until(step, timeout):
        for key in sorted(open_):
            outcomes[key].reason = f"timed out after {timeout:g}s: {why(key)}"
    return outcomes


class ClusterParts:
    """What both demos' clusters hold and stop alike (`V1Cluster`, and the classic wing's
    `drasat.classic.demo.DemoCluster`): `client` is the admin's (simulated kubectl) API client;
    the official API clients drasat's parts get (`official_client`), the nodes, the simulated
    scheduler and controller manager where the cluster has them, the controller's thread."""

    def __init__(
        self, client: kubeclient.KubeClient, official: Callable[[], OfficialClient]
    ) -> None:
        self.client = client
        self._new_official = official
        self.nodes: list[SimNode] = []
        self.scheduler: v1scheduler.PodScheduler | None = None
        self.controller_manager: controllers.ControllerManager | None = None
        self._clients: list[OfficialClient] = []
        self._controller_stop = threading.Event()
        self._controller: threading.Thread | None = None

    def official_client(self) -> OfficialClient:
        client = self._new_official()
        self._clients.append(client)
        return client

    def get_object(self, url: str) -> Obj | None:
        try:
            return self.client.get(url)
        except errors.ApiError as error:
            if error.code == 404:
                return None
            raise

    def nas(self, node: str) -> NodeAllocationState | None:
        url = kubeclient.path(
            "nas.gpu.drasat.io", "v1alpha1", "nodeallocationstates", namespace=NAMESPACE, name=node
        )
        found = self.get_object(url)
        return None if found is None else NodeAllocationState.model_validate(found)

    def _run_controller(self, app: App) -> None:
        self._controller = threading.Thread(
            target=app.run, args=(self._controller_stop,), name="demo-controller", daemon=True
        )
        self._controller.start()

    def _stop(self) -> None:
        """Stop every part that was started, in reverse order; each stop runs even if an
        earlier one failed (that failure is logged)."""
        steps: list[tuple[str, Callable[[], Any]]] = [
            (f"kubelet {n.name}", n.kubelet.stop) for n in self.nodes if n.kubelet
        ]
        if self.controller_manager is not None:
            steps.append(("controller manager", self.controller_manager.stop))
        if self.scheduler is not None:
            steps.append(("scheduler", self.scheduler.stop))
        steps.append(("controller", self._stop_controller))
        steps.extend((f"node plugin {n.name}", n.plugin.stop) for n in reversed(self.nodes))
        steps.extend(("API client", c.close) for c in self._clients)
        stop_parts(steps)

    def _stop_controller(self) -> None:
        stop_thread(self._controller_stop, self._controller, "the controller")


class DemoSteps:
    """The steps both demos take alike on their started cluster: waiting for the pods and saying
    how each did, the claims' fate after the deletions, the cleanup check. Each demo says which
    Warning refuses a pod (`_refusal`), what else explains a wait (`_pod_reasons`) and what a
    running pod shows (`_show_run`)."""

    def __init__(self, cluster: ClusterParts, out: Out, timeout: float) -> None:
        self.cluster = cluster
        self.out = out
        self.timeout = timeout
        self.failures: list[str] = []

    @property
    def client(self) -> kubeclient.KubeClient:
        return self.cluster.client

    def until(self, check: Callable[[], Any], timeout: float | None = None) -> Any:
        return until(check, self.timeout if timeout is None else timeout)

    def _refusal(self, key: Key) -> str | None:
        """The Warning that says the pod cannot run, if one stands."""
        raise NotImplementedError

    def _pod_reasons(self, key: Key) -> list[str]:
        """Why the pod waits, besides the simulated scheduler's and the kubelets' reasons."""
        return []

    def _show_run(self, run: kubelet.PodRun) -> None:
        """The lines of a pod that runs, after `Pending -> Running`."""
        raise NotImplementedError

    def wait_pods(self, pods: list[Key]) -> dict[Key, PodOutcome]:
        self.out.phase(f"waiting for {len(pods)} pod(s) (at most {self.timeout:g}s each step)")
        outcomes = settle_pods(
            self.cluster.nodes, pods, refusal=self._refusal, why=self._why, timeout=self.timeout
        )
        for key in sorted(outcomes):
            outcome, ref = outcomes[key], f"pod {key[0]}/{key[1]}"
            if outcome.run is None:
                self.out(f"{ref}  stays Pending: {outcome.reason}")
                continue
            self.out(f"{ref}  Pending -> Running on {outcome.node}")
            if not outcome.run.claims:
                self.out("  log: (no resource claims)")
            self._show_run(outcome.run)
        return outcomes

    def _why(self, key: Key) -> str:
        reasons = []
        sim = self.cluster.scheduler
        if sim is not None and key in sim.reasons:
            reasons.append(f"scheduler: {sim.reasons[key]}")
        reasons += self._pod_reasons(key)
        for node in self.cluster.nodes:
            if node.kubelet is not None and key in node.kubelet.reasons:
                reasons.append(f"kubelet {node.name}: {node.kubelet.reasons[key]}")
        return "; ".join(reasons) or "nothing happened to it"

    def show_claims_left(
        self, existing: Sequence[Key], applied: Sequence[Key], still: set[Key]
    ) -> None:
        """After the deletions: each claim that `existing` names, `still` there or gone, and how
        it was to go (with its manifest, among the `applied` claims, or with its pod)."""
        for key in existing:
            how = (
                "deleted with its manifest"
                if key in applied
                else "made for its pod, deleted with it"
            )
            state = "still there" if key in still else "deallocated and gone"
            self.out(f"claim {key[0]}/{key[1]}  {state} ({how})")

    def check_cleanup(self) -> None:
        self.out.phase("cleanup")

        def leftovers(node: SimNode) -> list[str]:
            nas = self.cluster.nas(node.name)
            counts = {
                "allocated": len(nas.spec.allocatedClaims) if nas else 0,
                "prepared": len(nas.spec.preparedClaims) if nas else 0,
                "CDI specs": len(node.cdi_specs()),
                "MIG devices": node.mig_devices(),
            }
            return [f"{n} {what}" for what, n in counts.items()]

        def clean() -> bool:
            return all(all(i.startswith("0 ") for i in leftovers(n)) for n in self.cluster.nodes)

        self.until(clean)
        for node in sorted(self.cluster.nodes, key=lambda n: n.name):
            items = leftovers(node)
            ok = all(item.startswith("0 ") for item in items)
            self.out(f"node {node.name}: {', '.join(items)}  {'ok' if ok else 'NOT CLEAN'}")
            if not ok:
                self.failures.append(f"node {node.name} not clean: {', '.join(items)}")


class V1Cluster(ClusterParts):
    """The parts, started; `client` is the admin's (simulated kubectl) API client, `kind` says
    which cluster ("simulated API server" or "real control plane vX")."""

    def __init__(
        self, client: kubeclient.KubeClient, official: Callable[[], OfficialClient], kind: str
    ) -> None:
        super().__init__(client, official)
        self.kind = kind
        #: The real control plane (its controller manager makes ServiceAccounts; the
        #: simulated one does not, nor does the simulated API server ask for them).
        self.real_control_plane = not kind.startswith("simulated")
        #: Seconds each start step took, in order.
        self.timings: list[tuple[str, float]] = []
        self._kinds: dict[tuple[str, str], resources.ResourceType] | None = None
        #: Which kubelets run the pods, as the demo says it.
        self.kubelets = "simulated kubelets"
        self._real_kubelets: list[realkubelet.Kubelet] = []

    @classmethod
    @contextlib.contextmanager
    def simulated(
        cls, cluster: Cluster, *, policy_text: str, tmp: pathlib.Path
    ) -> Iterator[V1Cluster]:
        began = time.monotonic()
        with apiserver.ApiServer.running(
            crds=crds.all_crds(),
            graceful_pod_deletion=True,
            admission=(extended_resource_admission,),
        ) as server:
            demo = cls(
                kubeclient.KubeClient(server.url),
                lambda: OfficialClient(configuration_for(server.url), request_timeout=10),
                "simulated API server",
            )
            demo.timings.append(("API server", time.monotonic() - began))
            try:
                demo._install(cluster, policy_text, real=False)
                demo._start_nodes(cluster, tmp)
                demo._start_controller()
                demo.scheduler = v1scheduler.V1Scheduler(
                    kubeclient.KubeClient(server.url), resync=0.5
                ).start()
                demo.controller_manager = controllers.ControllerManager(
                    kubeclient.KubeClient(server.url), resync=0.5
                ).start()
                demo._start_kubelets(lambda: kubeclient.KubeClient(server.url))
                yield demo
            finally:
                demo._stop()

    @classmethod
    @contextlib.contextmanager
    def real(
        cls,
        cluster: Cluster,
        *,
        policy_text: str,
        tmp: pathlib.Path,
        bin_dir: pathlib.Path,
        out: Out,
        timeout: float,
        real_kubelets: bool = False,
    ) -> Iterator[V1Cluster]:
        """`real_kubelets`: a real kubelet per node on its fake container runtime (`fakecri`),
        registering its own Node and drasat's plugin; else simulated kubelets on Nodes the demo
        makes Ready itself."""
        began = time.monotonic()
        kube = controlplane.Cluster.start(
            directory=tmp / "kube",
            bin_dir=bin_dir,
            timeout=max(timeout, 120.0),
            progress=lambda line: out(f"  starting {line}"),
            die_with_parent=True,  # an interrupted demo leaves no control plane behind
            root_ca_publisher=real_kubelets,  # a real kubelet mounts kube-root-ca.crt in pods
        )
        try:
            config = kube.kubeconfig
            demo = cls(
                kubeclient.KubeClient.from_kubeconfig(config),
                lambda: OfficialClient(load_configuration(str(config)), request_timeout=10),
                f"real control plane v1.{kube.minor} ({bin_dir})",
            )
            demo.timings.append(("control plane", time.monotonic() - began))
            try:
                if real_kubelets:
                    demo.kubelets = f"real kubelets v1.{kube.minor} on fakecri"
                    demo._install(cluster, policy_text, real=True, timeout=timeout, nodes=False)
                    started = demo._start_real_kubelets(kube, cluster, tmp, out, timeout)
                    demo._start_nodes(cluster, tmp, started)
                    demo._start_controller()
                else:
                    demo._install(cluster, policy_text, real=True, timeout=timeout)
                    demo._start_nodes(cluster, tmp)
                    demo._start_controller()
                    demo._start_kubelets(lambda: kubeclient.KubeClient.from_kubeconfig(config))
                yield demo
            finally:
                demo._stop()
        finally:
            stopping = time.monotonic()
            stopped = kube.stop()
            out(f"== stopped {', '.join(stopped)} in {time.monotonic() - stopping:.1f}s")

    def kinds(self) -> dict[tuple[str, str], resources.ResourceType]:
        """What `apply` may create: the simulated server's kinds, or all the real one serves."""
        if self._kinds is None:
            real = self.real_control_plane
            self._kinds = served_kinds(self.client) if real else apply.kinds(crds.all_crds())
        return self._kinds

    # --- start --------------------------------------------------------------------------------

    def _step(self, what: str, began: float) -> None:
        self.timings.append((what, time.monotonic() - began))

    def _install(
        self,
        cluster: Cluster,
        policy_text: str,
        *,
        real: bool,
        timeout: float = 60.0,
        nodes: bool = True,
    ) -> None:
        """What the Helm chart and the cluster hold before any user object: on the real cluster
        the CRDs too (the simulated server is started with them), and (`nodes`) Nodes whose
        status says Ready with room for pods (no kubelet reports it; real kubelets register
        their own)."""
        began = time.monotonic()
        if real:
            self._install_crds(timeout)
        self.client.create(core_path("namespaces"), {"metadata": {"name": NAMESPACE}})
        for body in classes.device_classes():
            self.client.create(v1_path("deviceclasses"), body)
        self.client.create(
            core_path("configmaps", NAMESPACE),
            {
                "metadata": {"name": POLICY_CONFIGMAP, "namespace": NAMESPACE},
                "data": {CONFIGMAP_KEY: policy_text},
            },
        )
        if real:
            self._install_extended_resources(timeout)
        for group in cluster.spec.nodes if nodes else ():
            for name in group.node_names():
                labels = {"kubernetes.io/hostname": name, **group.labels}
                self.client.create(
                    core_path("nodes"), {"metadata": {"name": name, "labels": labels}}
                )
                if real:
                    self._node_ready(name, str(group.cpu or "64"), str(group.memory or "512Gi"))
        self._step("drasat's objects and the Nodes", began)

    def _install_extended_resources(self, timeout: float) -> None:
        """The chart's MutatingAdmissionPolicy that turns `nvidia.com/gpu` into claims
        (`extendedResources.enabled: auto`, where the API server serves it, as 1.36+ do), and
        a wait until the API server applies it: its policy informer takes a moment, and a pod
        created before would keep `nvidia.com/gpu` (kube-scheduler: Insufficient)."""
        group = ("admissionregistration.k8s.io", "v1")
        plurals = self._plurals("/".join(group))
        if "MutatingAdmissionPolicy" not in plurals:
            return
        for body in extended.admission_policy():
            self.client.create(kubeclient.path(*group, plurals[str(body["kind"])]), body)
        probe = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "drasat-admission-probe"},
            "spec": {
                "containers": [
                    {"name": "c", "image": "x", "resources": {"limits": {extended.RESOURCE: "1"}}}
                ]
            },
        }

        def applied() -> bool:
            try:  # a dry run goes through admission and stores nothing
                made = self.client.request(
                    "POST", core_path("pods", "default"), body=probe, query={"dryRun": "All"}
                )
            except errors.ApiError:  # e.g. the default ServiceAccount is not made yet
                return False
            return bool((made.get("spec") or {}).get("resourceClaims"))

        if not until(applied, timeout):
            raise DemoError(f"the API server did not apply {extended.POLICY_NAME} in {timeout:g}s")

    def _plurals(self, group_version: str) -> dict[str, str]:
        """kind -> resource of what the API server serves in `group_version` (its discovery)."""
        try:
            found = self.client.get(f"/apis/{group_version}")
        except errors.ApiError:
            return {}
        return {
            str(r.get("kind")): str(r.get("name"))
            for r in found.get("resources") or []
            if "/" not in str(r.get("name"))
        }

    def _install_crds(self, timeout: float) -> None:
        url = kubeclient.path("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        names = []
        for crd in crds.all_crds():
            self.client.create(url, dict(crd))
            names.append(str(crd["metadata"]["name"]))

        def established() -> bool:
            for name in names:
                held = self.client.get(f"{url}/{name}")
                conditions = {
                    c.get("type"): c.get("status")
                    for c in (held.get("status") or {}).get("conditions") or []
                }
                if conditions.get("Established") != "True":
                    return False
            return True

        if not until(established, timeout):
            raise DemoError(f"drasat's CRDs were not Established within {timeout:g}s")

    def _node_ready(self, name: str, cpu: str, memory: str) -> None:
        """Ready, with allocatable cpu, memory and pods, and without the not-ready taint the
        TaintNodesByCondition admission puts on a new Node (the node-lifecycle controller
        would lift it once the node reports Ready)."""
        room = {"cpu": cpu, "memory": memory, "pods": "110"}
        status = {
            "capacity": room,
            "allocatable": room,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "demo"}
            ],
        }
        self.client.merge_patch(core_path("nodes", name=name, sub="status"), {"status": status})
        self.client.merge_patch(core_path("nodes", name=name), {"spec": {"taints": None}})

    def _start_nodes(
        self,
        cluster: Cluster,
        tmp: pathlib.Path,
        kubelets: dict[str, realkubelet.Kubelet] | None = None,
    ) -> None:
        """A node plugin per node; with real `kubelets` (by node), in that kubelet's plugin
        folders, registered through its plugin watcher and driven by it."""
        began = time.monotonic()
        for group in cluster.spec.nodes:
            for name in group.node_names():
                fleet = simnvml.SimulatedNvml(fleet_spec(cluster, group, name))
                base = tmp / name
                real = (kubelets or {}).get(name)
                config = Config(
                    node_name=name,
                    namespace=NAMESPACE,
                    cdi_root=base / "cdi",
                    plugin_dir=real.plugins_dir if real else base / "plugins",
                    registry_dir=real.registry_dir if real else base / "registry",
                    state_dir=base / "state",
                    # Watched health: the kubelet writes Healthy into the pods' status. Unwatched,
                    # it writes Unknown with a message, a field the simulated API server's Pod
                    # schema (1.34) lacks.
                    health_events=True,
                    start_timeout_s=10.0,
                    kubelet_api=registration.KubeletApi.structured,
                    publish_slices=True,
                )
                api = self.official_client()
                plugin = NodePlugin(
                    config,
                    lib=nvml.NvmlDeviceLib(fleet, run=fleet.run),
                    store=KubeNasStore(api, node=name, namespace=NAMESPACE),
                    mps_runner=mps.RecordingRunner(),
                    claim_reader=v1claims.KubeClaimReader(api),
                    slice_publisher=slicepublisher.SlicePublisher(api, node_name=name),
                )
                node = SimNode(name, fleet, config, plugin)
                self.nodes.append(node)
                plugin.start()
                if real is not None:
                    node.kubelet = RealKubelet(real, self.client, plugin, config.cdi_root)
        self._step("node plugins", began)

    def _start_real_kubelets(
        self,
        kube: controlplane.Cluster,
        cluster: Cluster,
        tmp: pathlib.Path,
        out: Out,
        timeout: float,
    ) -> dict[str, realkubelet.Kubelet]:
        """A real kubelet per node, each registering its Node (then given the described node's
        labels, as a node's provisioning would); stopped with the rest on exit."""
        began = time.monotonic()
        started: dict[str, realkubelet.Kubelet] = {}
        for group in cluster.spec.nodes:
            for name in group.node_names():
                out(f"  starting kubelet {name} on its fake container runtime")
                node = realkubelet.Kubelet.start(
                    kube, name, root=tmp / name / "kubelet", timeout=max(timeout, 120.0)
                )
                started[name] = node
                self._real_kubelets.append(node)
                if group.labels:
                    self.client.merge_patch(
                        core_path("nodes", name=name), {"metadata": {"labels": dict(group.labels)}}
                    )
        self._step("kubelets", began)
        return started

    def _start_controller(self) -> None:
        began = time.monotonic()
        app = App(
            Options(
                namespace=NAMESPACE,
                metrics_address="",
                policy_configmap=POLICY_CONFIGMAP,
                dra_api="v1",
                resync_s=2.0,
                batch_window_s=0.1,
            ),
            api=self.official_client(),
        )
        self._run_controller(app)
        self._step("controller", began)

    def _start_kubelets(self, new_client: Callable[[], kubeclient.KubeClient]) -> None:
        began = time.monotonic()
        for node in self.nodes:
            node.kubelet = kubelet.Kubelet(
                new_client(),
                node=node.name,
                registry_dir=node.config.registry_dir,
                cdi_root=node.config.cdi_root,
                api=kubelet.DraApi.v1,
                resync=0.5,
            ).start()
        self._step("kubelets", began)

    def ready(self, timeout: float) -> list[str]:
        """Wait until every kubelet registered its plugin, every node published its slices and
        a Ready NAS, and the controller made its DeviceTaintRule; what is still missing."""
        began = time.monotonic()

        def missing() -> list[str]:
            left = []
            for node in self.nodes:
                if node.kubelet is None or DRIVER_NAME not in node.kubelet.plugins:
                    left.append(f"node {node.name}: the kubelet has not registered the plugin")
                if not self.slices(node.name):
                    left.append(f"node {node.name}: no ResourceSlice")
                nas = self.nas(node.name)
                if nas is None or nas.status is None or nas.status.value != "Ready":
                    left.append(f"node {node.name}: NAS not Ready")
            if self.get_object(v1_path("devicetaintrules", name=TAINT_RULE)) is None:
                left.append(f"the controller's DeviceTaintRule {TAINT_RULE} is missing")
            return left

        until(lambda: not missing(), timeout)
        self._step("nodes ready", began)
        return missing()

    # --- reads --------------------------------------------------------------------------------

    def slices(self, node: str) -> list[Obj]:
        items: list[Obj] = self.client.list(
            v1_path("resourceslices"), fieldSelector=f"spec.nodeName={node}"
        )["items"]
        return [s for s in items if (s.get("spec") or {}).get("driver") == DRIVER_NAME]


class RealKubelet:
    """A real kubelet (`drasat.testbed.controlplane.realkubelet`) as the demo reads the simulated
    one: the plugin it registered, and each pod it runs with what its containers were given, read
    from the fake runtime's record of the kubelet's CreateContainer requests (their CDI devices,
    resolved against the plugin's CDI specs as a CDI-aware runtime would)."""

    def __init__(
        self,
        node: realkubelet.Kubelet,
        client: kubeclient.KubeClient,
        plugin: NodePlugin,
        cdi_root: pathlib.Path,
    ) -> None:
        self.node = node
        self.client = client
        self.plugin = plugin
        self.cdi_root = cdi_root
        self._runs: dict[str, kubelet.PodRun] = {}

    @property
    def plugins(self) -> dict[str, str]:
        """The drivers this kubelet registered (drasat's once the plugin was told so)."""
        registered = self.plugin.registration.registered.is_set()
        return {DRIVER_NAME: str(self.node.registry_dir)} if registered else {}

    @property
    def reasons(self) -> dict[Key, str]:
        """Why pods on this node have not started: the kubelet's newest Warning Event on each
        (e.g. FailedPrepareDynamicResources with the plugin's error)."""
        return kubelet_warnings(self.client.list(core_path("events"))["items"], self.node.name)

    def running(self, namespace: str, name: str) -> kubelet.PodRun | None:
        """The pod, once Running on this node, with its claims, their devices (from their
        allocation) and each container's CDI devices (from the runtime's record)."""
        try:
            pod = self.client.get(core_path("pods", namespace, name))
        except errors.ApiError as error:
            if error.code == 404:
                return None
            raise
        status, spec = pod.get("status") or {}, pod.get("spec") or {}
        if spec.get("nodeName") != self.node.name or status.get("phase") != "Running":
            return None
        uid = str(pod["metadata"]["uid"])
        if uid in self._runs:
            return self._runs[uid]
        made = {
            s.get("name"): s.get("resourceClaimName")
            for s in status.get("resourceClaimStatuses") or []
        }
        claims, uids, prepared = [], {}, {}
        for entry in spec.get("resourceClaims") or []:
            claim_name = str(entry.get("resourceClaimName") or made.get(entry.get("name")))
            claim = self.client.get(v1_path("resourceclaims", namespace, claim_name))
            claim_uid = str(claim["metadata"]["uid"])
            results = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
            claims.append(kubelet.ClaimRef(namespace, claim_name, claim_uid, (DRIVER_NAME,)))
            uids[str(entry.get("name"))] = claim_uid
            prepared[claim_uid] = [
                kubelet.PreparedDevice(
                    (str(r.get("request")),), str(r.get("pool")), str(r.get("device")), ()
                )
                for r in results.get("results") or []
                if r.get("driver") == DRIVER_NAME
            ]
        containers = {
            str(r["container"]): list(r.get("cdiDevices") or [])
            for r in self.node.created_containers()
            if (r.get("namespace"), r.get("pod")) == (namespace, name)
        }
        every = list(dict.fromkeys(d for ids in containers.values() for d in ids))
        env, _undefined = kubelet.cdi_edits(self.cdi_root, every)
        devices = {c.uid: [d for d in every if c.uid in d] for c in claims}
        run = kubelet.PodRun(namespace, name, uid, claims, devices, env, prepared, uids)
        run.containers = containers
        self._runs[uid] = run
        return run

    def stop(self) -> None:
        """Stop the kubelet and its runtime, and remove their folder (mounts detached first)."""
        self.node.stop()
        self.node.remove()


def kubelet_warnings(events: Sequence[Obj], node: str) -> dict[Key, str]:
    """The newest Warning Event the kubelet of `node` wrote on each pod: `Warning REASON:
    MESSAGE`, by (namespace, pod name)."""
    newest: dict[Key, Obj] = {}
    for event in events:
        source = event.get("source") or {}
        involved = event.get("involvedObject") or {}
        if (
            event.get("type") != "Warning"
            or involved.get("kind") != "Pod"
            or source.get("component") != "kubelet"
            or source.get("host") != node
        ):
            continue
        key = (str(involved.get("namespace")), str(involved.get("name")))
        stamp = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        held = newest.get(key)
        if held is None or stamp >= str(held.get("lastTimestamp") or held.get("eventTime") or ""):
            newest[key] = event
    return {key: f"Warning {e.get('reason')}: {e.get('message')}" for key, e in newest.items()}


def served_kinds(client: kubeclient.KubeClient) -> dict[tuple[str, str], resources.ResourceType]:
    """(apiVersion, kind) -> resource of every kind a real API server serves (its discovery:
    `/api/v1` and each group's versions), over drasat's CRDs: what `apply` may create there."""
    served = dict(apply.kinds(crds.all_crds()))
    lists = [("", "v1", client.get("/api/v1"))]
    for group in client.get("/apis").get("groups") or []:
        for version in group.get("versions") or []:
            gv = str(version["groupVersion"])
            lists.append((str(group["name"]), str(version["version"]), client.get(f"/apis/{gv}")))
    for group_name, version_name, listed in lists:
        for item in listed.get("resources") or []:
            if "/" in str(item["name"]):  # a subresource (pods/status)
                continue
            rt = resources.ResourceType(
                group=group_name,
                version=version_name,
                plural=str(item["name"]),
                kind=str(item["kind"]),
                namespaced=bool(item.get("namespaced")),
                has_status=True,
            )
            served.setdefault((rt.api_version, rt.kind), rt)
    return served


def stop_parts(steps: Sequence[tuple[str, Callable[[], Any]]]) -> None:
    """Run each stop in order; one that fails is logged and the next still runs."""
    for what, stop in steps:
        try:
            stop()
        except Exception:
            log.exception("stopping the %s failed", what)


def stop_thread(stop: threading.Event, thread: threading.Thread | None, what: str) -> None:
    """Signal a part's thread to stop and wait up to 15 s for it."""
    stop.set()
    if thread is not None:
        thread.join(15)
        if thread.is_alive():
            log.error("%s did not stop within 15s", what)
