"""The whole system in one process, for `drasat demo`: every part real, only the hardware and
the cluster simulated.

`DemoCluster.running(cluster, policy_text)` starts, in this order: the in-process API server with
drasat's CRDs; what `helm install` and the cluster would hold (the namespace, the ResourceClass
`gpu.drasat.io` with its DeviceClassParameters, the policy ConfigMap, one Node per node); a node
plugin per node (simulated NVML fleet, real gRPC unix sockets, CDI specs and checkpoints in a
temporary directory); the controller; the simulated scheduler and controller manager (pods of
Deployments and Jobs); a simulated kubelet per node. On exit everything stops in reverse order
and the temporary directory is removed, also after an error.
"""

from __future__ import annotations

import contextlib
import logging
import pathlib
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from drasat import DRIVER_NAME
from drasat.api import catalog, crds
from drasat.api.cluster import Cluster, ClusterNode
from drasat.controller.app import App, Options
from drasat.controller.policy import CONFIGMAP_KEY
from drasat.kube.client import KubeClient as OfficialClient
from drasat.kube.client import configuration_for
from drasat.nodeplugin import mps, nvml
from drasat.nodeplugin.nasstore import KubeNasStore
from drasat.nodeplugin.plugin import Config, NodePlugin
from drasat.testbed import simnvml
from drasat.testbed.sim import apiserver, controllers, kubeclient, kubelet

if TYPE_CHECKING:  # the classic demo's parts load when it runs (a v1-only copy has none)
    from drasat.classic import scheduler

log = logging.getLogger(__name__)

Obj = dict[str, Any]
NAMESPACE = "drasat"
POLICY_CONFIGMAP = "drasat-policy"
CLASS_PARAMETERS = "drasat-gpu"


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


def describe(spec: simnvml.FleetSpec) -> str:
    """`2 × A100-40GB (MIG)` per product, in GPU order."""
    counts: dict[str, int] = {}
    for gpu in spec.gpus:
        label = gpu.product.key + (" (MIG)" if gpu.mig_enabled else "")
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{n} × {label}" for label, n in counts.items()) or "no GPUs"


class NodeKubelet(Protocol):
    """What the demo reads of a node's kubelet: the simulated one (`drasat.testbed.sim.kubelet`), or
    a real kubelet seen through its runtime's record (`drasat.cli.demov1.RealKubelet`)."""

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


class DemoCluster:
    """The parts, started; `client` is the admin's (simulated kubectl) API client."""

    def __init__(self, server: apiserver.ApiServer, tmp: pathlib.Path) -> None:
        self.server = server
        self.tmp = tmp
        self.client = kubeclient.KubeClient(server.url)
        self.nodes: list[SimNode] = []
        self.scheduler: scheduler.Scheduler | None = None
        self.controller_manager: controllers.ControllerManager | None = None
        self._official: list[OfficialClient] = []
        self._controller_stop = threading.Event()
        self._controller: threading.Thread | None = None

    @classmethod
    @contextlib.contextmanager
    def running(cls, cluster: Cluster, *, policy_text: str) -> Iterator[DemoCluster]:
        # Short socket paths (unix sockets allow ~100 bytes), in a directory of our own.
        with (
            tempfile.TemporaryDirectory(prefix="drasat-demo-") as tmp,
            apiserver.ApiServer.running(crds=crds.all_crds(), graceful_pod_deletion=True) as server,
        ):
            demo = cls(server, pathlib.Path(tmp))
            try:
                demo._install(cluster, policy_text)
                demo._start_nodes(cluster)
                demo._start_controller()
                # The demo's only scheduler: it also binds pods without claims.
                from drasat.classic.scheduler import Scheduler

                demo.scheduler = Scheduler(
                    kubeclient.KubeClient(server.url), resync=0.5, plain_pods=True
                ).start()
                # Pods of Deployments and Jobs; the classic scheduler makes classic claims.
                demo.controller_manager = controllers.ControllerManager(
                    kubeclient.KubeClient(server.url), resync=0.5, claims=False
                ).start()
                for node in demo.nodes:
                    node.kubelet = kubelet.Kubelet(
                        kubeclient.KubeClient(server.url),
                        node=node.name,
                        registry_dir=node.config.registry_dir,
                        cdi_root=node.config.cdi_root,
                        resync=0.5,
                    ).start()
                yield demo
            finally:
                demo._stop()

    def official_client(self) -> OfficialClient:
        client = OfficialClient(configuration_for(self.server.url), request_timeout=10)
        self._official.append(client)
        return client

    # --- start --------------------------------------------------------------------------------

    def _install(self, cluster: Cluster, policy_text: str) -> None:
        """What the Helm chart and the cluster hold before any user object."""
        core = kubeclient.path
        self.client.create(core("", "v1", "namespaces"), {"metadata": {"name": NAMESPACE}})
        self.client.create(
            core("gpu.drasat.io", "v1alpha1", "deviceclassparameters"),
            {
                "apiVersion": "gpu.drasat.io/v1alpha1",
                "kind": "DeviceClassParameters",
                "metadata": {"name": CLASS_PARAMETERS},
                "spec": {"sharable": True},
            },
        )
        self.client.create(
            core("resource.k8s.io", "v1alpha2", "resourceclasses"),
            {
                "apiVersion": "resource.k8s.io/v1alpha2",
                "kind": "ResourceClass",
                "metadata": {"name": DRIVER_NAME},
                "driverName": DRIVER_NAME,
                "parametersRef": {
                    "apiGroup": "gpu.drasat.io",
                    "kind": "DeviceClassParameters",
                    "name": CLASS_PARAMETERS,
                },
            },
        )
        self.client.create(
            core("", "v1", "configmaps", namespace=NAMESPACE),
            {
                "metadata": {"name": POLICY_CONFIGMAP, "namespace": NAMESPACE},
                "data": {CONFIGMAP_KEY: policy_text},
            },
        )
        for group in cluster.spec.nodes:
            for name in group.node_names():
                labels = {"kubernetes.io/hostname": name, **group.labels}
                self.client.create(
                    core("", "v1", "nodes"), {"metadata": {"name": name, "labels": labels}}
                )

    def _start_nodes(self, cluster: Cluster) -> None:
        for group in cluster.spec.nodes:
            for name in group.node_names():
                fleet = simnvml.SimulatedNvml(fleet_spec(cluster, group, name))
                base = self.tmp / name
                config = Config(
                    node_name=name,
                    namespace=NAMESPACE,
                    cdi_root=base / "cdi",
                    plugin_dir=base / "plugins",
                    registry_dir=base / "registry",
                    state_dir=base / "state",
                    health_events=False,
                    start_timeout_s=10.0,
                )
                plugin = NodePlugin(
                    config,
                    lib=nvml.NvmlDeviceLib(fleet, run=fleet.run),
                    store=KubeNasStore(self.official_client(), node=name, namespace=NAMESPACE),
                    mps_runner=mps.RecordingRunner(),
                )
                self.nodes.append(SimNode(name, fleet, config, plugin))  # stopped on exit
                plugin.start()

    def _start_controller(self) -> None:
        from drasat.classic.controller import for_app

        app = App(
            Options(
                namespace=NAMESPACE,
                metrics_address="",
                policy_configmap=POLICY_CONFIGMAP,
                resync_s=1.0,
            ),
            api=self.official_client(),
            classic=for_app,
        )
        self._controller = threading.Thread(
            target=app.run, args=(self._controller_stop,), name="demo-controller", daemon=True
        )
        self._controller.start()

    # --- stop ---------------------------------------------------------------------------------

    def _stop(self) -> None:
        """Stop every part that was started, in reverse order; each stop runs even if an
        earlier one failed (that failure is logged)."""
        steps: list[tuple[str, Any]] = [
            *((f"kubelet {n.name}", n.kubelet.stop) for n in self.nodes if n.kubelet),
        ]
        if self.controller_manager is not None:
            steps.append(("controller manager", self.controller_manager.stop))
        if self.scheduler is not None:
            steps.append(("scheduler", self.scheduler.stop))
        steps.append(("controller", self._stop_controller))
        steps.extend((f"node plugin {n.name}", n.plugin.stop) for n in reversed(self.nodes))
        steps.extend(("API client", c.close) for c in self._official)
        stop_parts(steps)

    def _stop_controller(self) -> None:
        stop_thread(self._controller_stop, self._controller, "the controller")


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
