"""`drasat demo` on current Kubernetes (`resource.k8s.io/v1`), the default flow.

drasat's parts are the real ones, in this process: the v1 controller (`App` with `--dra-api v1`,
its policy from a ConfigMap), and per simulated node a node plugin (simulated NVML fleet, real
gRPC sockets, its ResourceSlices and NodeAllocationState published) and a simulated v1 kubelet
that calls it (`drasat.testbed.sim.kubelet`, DraApi.v1). Around them, the cluster is one of:

- simulated (default): the in-process API server, the simulated v1 scheduler (honours the
  allocations drasat's controller writes, allocates nothing) and controller manager (claims from
  templates, pods of Deployments, ReplicaSets and Jobs);
- real (`--kube-bin DIR`): etcd, kube-apiserver, kube-scheduler and kube-controller-manager from
  DIR (`drasat.testbed.controlplane`), in a temporary folder, stopped and removed at the end.

What the Helm chart and the cluster would hold is created first: drasat's CRDs (real cluster),
its namespace, DeviceClasses and policy ConfigMap, one Node per described node. The demo waits for
every node's slices and NAS and for the controller's DeviceTaintRule (which keeps kube-scheduler's
own allocator off drasat's devices), applies the manifests, shows each pod Running with the
devices its claims were prepared with and its container's GPU environment, the allocations, then
deletes everything it applied and checks every node is clean again.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import pathlib
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any, TextIO

from drasat import loading
from drasat.api import crds
from drasat.api.cluster import Cluster
from drasat.api.devicemodel import classes
from drasat.api.errors import InputError
from drasat.api.groups import DRIVER_NAME
from drasat.api.nas import AllocatedDevices, NodeAllocationState
from drasat.cli.demo import (
    POLL_S,
    SETTLE_S,
    Key,
    Obj,
    Out,
    PodOutcome,
    Workload,
    _table,
    devices_text,
    env_line,
    sharing_text,
    shortfalls,
    wanted_pods,
    workload_pods,
)
from drasat.controller.app import App, Options
from drasat.controller.policy import CONFIGMAP_KEY
from drasat.controller.v1controller import REASON_REFUSED, TAINT_RULE
from drasat.kube.client import KubeClient as OfficialClient
from drasat.kube.client import configuration_for, load_configuration
from drasat.nodeplugin import mps, nvml, registration, slices, v1claims
from drasat.nodeplugin.nasstore import KubeNasStore
from drasat.nodeplugin.plugin import Config, NodePlugin
from drasat.testbed import democluster, simnvml
from drasat.testbed.controlplane import binaries
from drasat.testbed.controlplane import cluster as controlplane
from drasat.testbed.controlplane import kubelet as realkubelet
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

log = logging.getLogger(__name__)

NAMESPACE = democluster.NAMESPACE
POLICY_CONFIGMAP = democluster.POLICY_CONFIGMAP
_V1 = ("resource.k8s.io", "v1")
#: Classic DRA objects, which this flow's API (and current Kubernetes) no longer has.
_CLASSIC = ("resource.k8s.io/v1alpha2", "gpu.drasat.io/v1alpha1")


def _path(plural: str, namespace: str | None = None, name: str | None = None) -> str:
    return kubeclient.path(*_V1, plural, namespace=namespace, name=name)


def _core(
    plural: str, namespace: str | None = None, name: str | None = None, sub: str | None = None
) -> str:
    return kubeclient.path("", "v1", plural, namespace=namespace, name=name, subresource=sub)


# --- the cluster ------------------------------------------------------------------------------


class V1Cluster:
    """The parts, started; `client` is the admin's (simulated kubectl) API client, `kind` says
    which cluster ("simulated API server" or "real control plane vX")."""

    def __init__(
        self, client: kubeclient.KubeClient, official: Callable[[], OfficialClient], kind: str
    ) -> None:
        self.client = client
        self.kind = kind
        #: The real control plane (its controller manager makes ServiceAccounts; the
        #: simulated one does not, nor does the simulated API server ask for them).
        self.real_control_plane = not kind.startswith("simulated")
        self._new_official = official
        self.nodes: list[democluster.SimNode] = []
        self.scheduler: v1scheduler.V1Scheduler | None = None
        self.controller_manager: controllers.ControllerManager | None = None
        self._clients: list[OfficialClient] = []
        self._controller_stop = threading.Event()
        self._controller: threading.Thread | None = None
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
            crds=crds.all_crds(), graceful_pod_deletion=True
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

    def official_client(self) -> OfficialClient:
        client = self._new_official()
        self._clients.append(client)
        return client

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
        self.client.create(_core("namespaces"), {"metadata": {"name": NAMESPACE}})
        for body in classes.device_classes():
            self.client.create(_path("deviceclasses"), body)
        self.client.create(
            _core("configmaps", NAMESPACE),
            {
                "metadata": {"name": POLICY_CONFIGMAP, "namespace": NAMESPACE},
                "data": {CONFIGMAP_KEY: policy_text},
            },
        )
        for group in cluster.spec.nodes if nodes else ():
            for name in group.node_names():
                labels = {"kubernetes.io/hostname": name, **group.labels}
                self.client.create(_core("nodes"), {"metadata": {"name": name, "labels": labels}})
                if real:
                    self._node_ready(name, str(group.cpu or "64"), str(group.memory or "512Gi"))
        self._step("drasat's objects and the Nodes", began)

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

        if not _until(established, timeout):
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
        self.client.merge_patch(_core("nodes", name=name, sub="status"), {"status": status})
        self.client.merge_patch(_core("nodes", name=name), {"spec": {"taints": None}})

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
                fleet = simnvml.SimulatedNvml(democluster.fleet_spec(cluster, group, name))
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
                    slice_publisher=slices.SlicePublisher(api, node_name=name),
                )
                node = democluster.SimNode(name, fleet, config, plugin)
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
                        _core("nodes", name=name), {"metadata": {"labels": dict(group.labels)}}
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
        self._controller = threading.Thread(
            target=app.run, args=(self._controller_stop,), name="demo-controller", daemon=True
        )
        self._controller.start()
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
            if self.get_object(_path("devicetaintrules", name=TAINT_RULE)) is None:
                left.append(f"the controller's DeviceTaintRule {TAINT_RULE} is missing")
            return left

        _until(lambda: not missing(), timeout)
        self._step("nodes ready", began)
        return missing()

    # --- reads --------------------------------------------------------------------------------

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

    def slices(self, node: str) -> list[Obj]:
        items: list[Obj] = self.client.list(
            _path("resourceslices"), fieldSelector=f"spec.nodeName={node}"
        )["items"]
        return [s for s in items if (s.get("spec") or {}).get("driver") == DRIVER_NAME]

    # --- stop ---------------------------------------------------------------------------------

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
        democluster.stop_parts(steps)

    def _stop_controller(self) -> None:
        democluster.stop_thread(self._controller_stop, self._controller, "the controller")


class RealKubelet:
    """A real kubelet (`drasat.testbed.controlplane.kubelet`) as the demo reads the simulated one:
    the plugin it registered, and each pod it runs with what its containers were given, read from
    the fake runtime's record of the kubelet's CreateContainer requests (their CDI devices,
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
        #: Why a pod has not started (the kubelet says it in Events; the demo reads those).
        self.reasons: dict[Key, str] = {}
        self._runs: dict[str, kubelet.PodRun] = {}

    @property
    def plugins(self) -> dict[str, str]:
        """The drivers this kubelet registered (drasat's once the plugin was told so)."""
        registered = self.plugin.registration.registered.is_set()
        return {DRIVER_NAME: str(self.node.registry_dir)} if registered else {}

    def running(self, namespace: str, name: str) -> kubelet.PodRun | None:
        """The pod, once Running on this node, with its claims, their devices (from their
        allocation) and each container's CDI devices (from the runtime's record)."""
        try:
            pod = self.client.get(_core("pods", namespace, name))
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
            claim_name = entry.get("resourceClaimName") or made.get(entry.get("name"))
            claim = self.client.get(_path("resourceclaims", namespace, claim_name))
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


class DemoError(Exception):
    """A step of the demo failed (exit 1); the message says which."""


def _until(check: Callable[[], Any], timeout: float) -> Any:
    """Poll `check` until it is truthy or `timeout` passes; its last value."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = check()
        if value or time.monotonic() >= deadline:
            return value
        pause.wait(POLL_S)


# --- the run ----------------------------------------------------------------------------------


class V1Demo:
    def __init__(self, cluster: V1Cluster, out: Out, timeout: float) -> None:
        self.cluster = cluster
        self.out = out
        self.timeout = timeout
        self.failures: list[str] = []

    @property
    def client(self) -> kubeclient.KubeClient:
        return self.cluster.client

    def until(self, check: Callable[[], Any], timeout: float | None = None) -> Any:
        return _until(check, self.timeout if timeout is None else timeout)

    def show_cluster(self, source: str) -> None:
        missing = self.cluster.ready(self.timeout)
        cluster = self.cluster
        self.out.phase(
            f"cluster ({source}, {cluster.kind}, {cluster.kubelets}): {len(cluster.nodes)} nodes"
        )
        rows = [["NODE", "GPUS", "SLICE DEVICES", "NAS"]]
        for node in sorted(self.cluster.nodes, key=lambda n: n.name):
            nas = self.cluster.nas(node.name)
            devices = sum(
                len(s["spec"].get("devices") or []) for s in self.cluster.slices(node.name)
            )
            status = nas.status.value if nas is not None and nas.status else "missing"
            rows.append([node.name, democluster.describe(node.fleet.spec), str(devices), status])
        for line in _table(rows):
            self.out(line)
        self.failures.extend(missing)

    def apply(self, title: str, documents: list[loading.Document]) -> list[apply.Applied]:
        """Namespaces first, and (on a real cluster) only then the rest once each namespace's
        default ServiceAccount exists: the ServiceAccount admission refuses pods before."""
        self.out.phase(f"applying {title}")
        known = self.cluster.kinds()
        first = [d for d in documents if d.data.get("kind") == "Namespace"]
        applied = apply.apply(self.client, first, known=known)
        if self.cluster.real_control_plane:  # kube-controller-manager makes them
            for item in applied:
                name = str(item.object["metadata"]["name"])
                url = _core("serviceaccounts", name, "default")
                if not self.until(functools.partial(self._exists, url)):
                    raise DemoError(f"namespace {name}: no default ServiceAccount was made")
        applied += apply.apply(
            self.client, [d for d in documents if d.data.get("kind") != "Namespace"], known=known
        )
        for item in applied:
            self.out(f"{item.ref} {'created' if item.created else 'unchanged'}")
        return applied

    def _exists(self, url: str) -> bool:
        return self.cluster.get_object(url) is not None

    def wait_pods(self, pods: list[Key]) -> dict[Key, PodOutcome]:
        self.out.phase(f"waiting for {len(pods)} pod(s) (at most {self.timeout:g}s each step)")
        outcomes = {key: PodOutcome(key) for key in pods}
        warned: dict[Key, float] = {}
        open_ = set(pods)

        def step() -> bool:
            for key in sorted(open_):
                for node in self.cluster.nodes:
                    run = node.kubelet.running(*key) if node.kubelet is not None else None
                    if run is not None:
                        outcomes[key].run, outcomes[key].node = run, node.name
                        open_.discard(key)
                        break
                else:
                    warning = self._refusal(key)
                    if warning is None:
                        warned.pop(key, None)
                        continue
                    since = warned.setdefault(key, time.monotonic())
                    if time.monotonic() - since >= SETTLE_S:
                        outcomes[key].reason = warning
                        open_.discard(key)
            return not open_

        if not self.until(step):
            for key in sorted(open_):
                outcomes[key].reason = f"timed out after {self.timeout:g}s: {self._why(key)}"
        for key in sorted(outcomes):
            outcome, ref = outcomes[key], f"pod {key[0]}/{key[1]}"
            if outcome.run is None:
                self.out(f"{ref}  stays Pending: {outcome.reason}")
                continue
            self.out(f"{ref}  Pending -> Running on {outcome.node}")
            if not outcome.run.claims:
                self.out("  log: (no resource claims)")
            for claim in outcome.run.claims:
                devices = [
                    f"{d.pool_name}/{d.device_name}"
                    for d in outcome.run.prepared.get(claim.uid, [])
                ]
                self.out(f"  claim {claim.name}: {', '.join(devices) or 'no device'}")
                if len(outcome.run.containers) <= 1:
                    self.out(f"  log [{claim.name}]: {env_line(outcome.run.claim_env(claim.uid))}")
            if len(outcome.run.containers) > 1:
                # Each container gets the devices of the requests it names (the kubelet's rule).
                for name in outcome.run.containers:
                    self.out(f"  log [{name}]: {env_line(outcome.run.container_env(name))}")
        return outcomes

    def _refusal(self, key: Key) -> str | None:
        """The newest Warning of drasat's controller on the pod: no node has the devices."""
        events = self.client.list(_core("events", key[0]))["items"]
        found = [
            e
            for e in events
            if e.get("type") == "Warning"
            and e.get("reason") == REASON_REFUSED
            and (e.get("involvedObject") or {}).get("kind") == "Pod"
            and (e.get("involvedObject") or {}).get("name") == key[1]
        ]
        if not found:
            return None
        newest = max(found, key=lambda e: str(e.get("lastTimestamp") or e["metadata"]["name"]))
        return f"Warning {newest.get('reason')}: {newest.get('message')}"

    def _why(self, key: Key) -> str:
        reasons = []
        sim = self.cluster.scheduler
        if sim is not None and key in sim.reasons:
            reasons.append(f"scheduler: {sim.reasons[key]}")
        pod = self.cluster.get_object(_core("pods", key[0], key[1]))
        if pod is not None and sim is None:
            for condition in (pod.get("status") or {}).get("conditions") or []:
                if condition.get("type") == "PodScheduled" and condition.get("status") != "True":
                    reasons.append(f"kube-scheduler: {condition.get('message')}")
        for node in self.cluster.nodes:
            if node.kubelet is not None and key in node.kubelet.reasons:
                reasons.append(f"kubelet {node.name}: {node.kubelet.reasons[key]}")
        return "; ".join(reasons) or "nothing happened to it"

    def claims(self, namespaces: Sequence[str]) -> list[Obj]:
        return [
            c for ns in namespaces for c in self.client.list(_path("resourceclaims", ns))["items"]
        ]

    def show_allocations(self, namespaces: Sequence[str]) -> None:
        """Each claim as its status says (node, devices, the pods it is reserved for), with what
        the node's NAS ledger says it gets (exclusive, time-sliced, MPS, a share) and the
        time-slice its GPUs are set to now (the simulated hardware, as the plugin left it)."""
        self.out.phase("allocations (ResourceClaim status, NodeAllocationState)")
        # The ledger names an entry `<claim uid>/<request>`: a claim may have several.
        ledger: dict[str, list[tuple[AllocatedDevices, dict[str, int]]]] = {}
        for node in self.cluster.nodes:
            nas = self.cluster.nas(node.name)
            if nas is None:
                continue
            index = {d.gpu.uuid: d.gpu.index for d in nas.spec.allocatableDevices if d.gpu}
            for key in sorted(nas.spec.allocatedClaims):
                entry = nas.spec.allocatedClaims[key]
                ledger.setdefault(entry.claimInfo.uid, []).append((entry, index))
        slices_of = {
            (node.name, gpu.uuid): _TIME_SLICES[gpu.time_slice]
            for node in self.cluster.nodes
            for gpu in node.fleet.gpus
        }
        rows = [["CLAIM", "NODE", "DEVICES", "GPU", "NAS SHARING", "TIME-SLICE", "RESERVED FOR"]]
        for claim in sorted(
            self.claims(namespaces),
            key=lambda c: (c["metadata"]["namespace"], c["metadata"]["name"]),
        ):
            meta, status = claim["metadata"], claim.get("status") or {}
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            pods = sorted(
                str(r.get("name"))
                for r in status.get("reservedFor") or []
                if r.get("resource") == "pods"
            )
            pool = str(results[0].get("pool")) if results else "-"
            found = ledger.get(str(meta["uid"]), [])
            uuids = {u for entry, _ in found for u in _gpu_uuids(entry)}
            rows.append(
                [
                    f"{meta['namespace']}/{meta['name']}",
                    pool,
                    ",".join(str(r.get("device")) for r in results) or "not allocated",
                    ", ".join(devices_text(entry, index) for entry, index in found) or "-",
                    ", ".join(dict.fromkeys(sharing_text(e, len(pods)) for e, _ in found)) or "-",
                    ",".join(sorted({slices_of.get((pool, u), "?") for u in uuids})) or "-",
                    ",".join(pods) or "-",
                ]
            )
        for line in _table(rows):
            self.out(line)

    def delete(self, pods: list[Key], claims: list[Key], owners: Sequence[str]) -> None:
        """Delete the workloads (their pods go with them), the pods and the claims applied, and
        wait until every claim in their namespaces is gone (the resourceclaim controller deletes
        the ones it made from templates once their pod is gone)."""
        namespaces = sorted({k[0] for k in pods} | {k[0] for k in claims})
        existing = sorted(
            (c["metadata"]["namespace"], c["metadata"]["name"]) for c in self.claims(namespaces)
        )
        if owners:
            self.out.phase("deleting workloads")
            for url in owners:  # first, or their controllers would replace the pods
                self._delete(url, background=True)
        self.out.phase("deleting pods")
        for key in sorted(pods):
            self._delete(_core("pods", key[0], key[1]))
        get = self.cluster.get_object
        gone = self.until(lambda: all(get(_core("pods", *k)) is None for k in pods))
        for key in sorted(pods):
            there = self.cluster.get_object(_core("pods", *key)) is not None
            self.out(
                f"pod {key[0]}/{key[1]}  {'still there: ' + self._why(key) if there else 'deleted'}"
            )
        if not gone:
            self.failures.append(f"pods not deleted within {self.timeout:g}s")
        self.out.phase("deleting claims")
        for key in claims:
            self._delete(_path("resourceclaims", key[0], key[1]))
        left = self.until(lambda: not self.claims(namespaces))
        still = {
            (c["metadata"]["namespace"], c["metadata"]["name"]) for c in self.claims(namespaces)
        }
        for key in existing:
            how = (
                "deleted with its manifest"
                if key in claims
                else "made for its pod, deleted with it"
            )
            state = "still there" if key in still else "deallocated and gone"
            self.out(f"claim {key[0]}/{key[1]}  {state} ({how})")
        if not left:
            self.failures.append(f"claims not deleted within {self.timeout:g}s")

    def _delete(self, url: str, *, background: bool = False) -> None:
        """DELETE `url`; `background`: its dependents go too, as `kubectl delete` asks (a
        batch/v1 Job would otherwise orphan its pods)."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        try:
            self.client.request("DELETE", url, body=body if background else None)
        except errors.ApiError as error:
            if error.code != 404:
                raise

    def check_cleanup(self) -> None:
        self.out.phase("cleanup")

        def leftovers(node: democluster.SimNode) -> list[str]:
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


#: `nvidia-smi compute-policy --set-timeslice=N` levels.
_TIME_SLICES = ("Default", "Short", "Medium", "Long")


def _gpu_uuids(entry: AllocatedDevices) -> list[str]:
    """The GPUs (MIG devices: their parents) of a ledger entry."""
    uuids = [g.uuid for g in entry.gpu.devices] if entry.gpu is not None else []
    uuids += [m.parentUUID for m in entry.mig.devices] if entry.mig is not None else []
    return uuids


def _keys(applied: Sequence[apply.Applied], kind: str) -> list[Key]:
    return sorted(
        (str(a.object["metadata"]["namespace"]), str(a.object["metadata"]["name"]))
        for a in applied
        if a.object.get("kind") == kind and a.created
    )


def _terminate(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _terminate_unwinds() -> Any:
    """SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so every part is stopped and the
    temporary folder (the control plane's etcd data) removed; the previous handler, or None
    where this thread may not set one (not the main thread)."""
    try:
        return signal.signal(signal.SIGTERM, _terminate)
    except ValueError:
        return None


def _real_kubelets(bin_dir: pathlib.Path) -> tuple[bool, str]:
    """Whether the real control plane gets real kubelets (the kubelet and fakecri in `bin_dir`,
    and root to run them), and the line that says which and why."""
    try:
        realkubelet.locate_node_binaries(bin_dir)
    except binaries.MissingBinaries:
        return False, (
            f"simulated ({bin_dir} has no kubelet and fakecri: scripts/kube-build builds them)"
        )
    if os.geteuid() != 0:
        return False, "simulated (the real kubelet runs as root)"
    return True, f"real (kubelet and fakecri from {bin_dir}, one per node)"


def check_v1(documents: Sequence[loading.Document], *, real: bool = False) -> None:
    """Before anything starts: classic DRA objects are for `--classic` (say so), and a kind the
    simulated API server does not serve is refused as `apply` would refuse it later (on the real
    control plane, `served_kinds` decides once it runs)."""
    known = apply.kinds(crds.all_crds())
    for document in documents:
        version, kind = str(document.data.get("apiVersion")), str(document.data.get("kind"))
        where = f"{document.where}: {document.describe()}"
        if version in _CLASSIC:
            raise InputError(
                f"{kind} of {version} is classic DRA, which current Kubernetes does not serve: "
                "run it with drasat demo --classic",
                where=where,
            )
        if not real and (version, kind) not in known:
            raise InputError(
                f"the simulated API server does not serve {kind} of {version} (the real control "
                "plane, --kube-bin DIR, serves what Kubernetes serves)",
                where=where,
            )


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


def run(
    args: argparse.Namespace,
    stream: TextIO,
    sources: list[tuple[str, list[loading.Document]]],
    cluster: Cluster,
    source: str,
    policy: tuple[list[loading.Document], str, str],
) -> int:
    out = Out(stream)
    documents, policy_text, policy_name = policy
    check_v1(documents, real=args.kube_bin is not None)
    bin_dir: pathlib.Path | None = None
    if args.kube_bin is not None:
        try:
            bin_dir = binaries.locate(pathlib.Path(args.kube_bin))
        except binaries.MissingBinaries as error:
            raise InputError(str(error), where="--kube-bin") from None
    kept = {id(d) for d in documents}
    previous = _terminate_unwinds()
    began = time.monotonic()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="drasat-demo-"))  # short unix socket paths
    ran: set[Key] = set()
    stuck: list[PodOutcome] = []
    try:
        if bin_dir is None:
            running = V1Cluster.simulated(cluster, policy_text=policy_text, tmp=tmp)
        else:
            real_kubelets, why = _real_kubelets(bin_dir)
            out.phase(f"starting the real control plane from {bin_dir}")
            out(f"  kubelets: {why}")
            running = V1Cluster.real(
                cluster,
                policy_text=policy_text,
                tmp=tmp,
                bin_dir=bin_dir,
                out=out,
                timeout=args.timeout,
                real_kubelets=real_kubelets,
            )
        with running as v1_cluster:
            demo = V1Demo(v1_cluster, out, args.timeout)
            demo.show_cluster(source)
            out(f"policy: {policy_name}")
            started = time.monotonic()
            applied: list[apply.Applied] = []
            for title, docs in sources:
                applied += demo.apply(title, [d for d in docs if id(d) in kept])
            pods, claims = _keys(applied, "Pod"), _keys(applied, "ResourceClaim")
            workloads = [
                Workload(a, n)
                for a in applied
                if a.created and (n := wanted_pods(a.object)) is not None
            ]
            pods_of = workload_pods(demo.client, out, demo.until, workloads)
            made = sorted({k for w in workloads for k in pods_of.get(w.uid, [])})
            outcomes = demo.wait_pods(pods + made)
            ran_s = time.monotonic() - started
            namespaces = sorted({k[0] for k in pods + made + claims})
            demo.show_allocations(namespaces)
            ran = {k for k, o in outcomes.items() if o.run is not None}
            known = v1_cluster.kinds()
            owners = [
                apply.url(
                    known[(str(w.applied.object["apiVersion"]), str(w.applied.object["kind"]))],
                    *w.key,
                )
                for w in workloads
            ]
            demo.delete(pods + made, claims, owners)
            demo.check_cleanup()
            stuck = [o for o in outcomes.values() if o.run is None]
            not_run = [
                f"pod {o.key[0]}/{o.key[1]} did not run"
                for o in sorted(stuck, key=lambda o: o.key)
                if o.key not in made  # a workload's pods are counted per workload
                and not (args.allow_pending and not o.reason.startswith("timed out"))
            ]
            short = shortfalls(workloads, pods_of, outcomes, allow_pending=args.allow_pending)
            demo.failures[:0] = short + not_run
            startup = ", ".join(f"{what} {s:.1f}s" for what, s in v1_cluster.timings)
    except (controlplane.ClusterError, DemoError) as error:
        out(f"== demo FAILED: {error}")
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    total = time.monotonic() - began
    out(f"== took {total:.1f}s: start-up {startup}; pods applied to running {ran_s:.1f}s")
    if demo.failures:
        out(f"== demo FAILED: {'; '.join(demo.failures)}")
        return 1
    pending = f", {len(stuck)} stayed Pending" if stuck else ""
    kubelets = ", real kubelets" if v1_cluster.kubelets.startswith("real") else ""
    out(
        f"== demo ok ({v1_cluster.kind.split(' (')[0]}{kubelets}): {len(ran)} pods ran{pending}; "
        "every device was cleaned up"
    )
    return 0
