"""`drasat demo --classic`: classic DRA (`resource.k8s.io/v1alpha2`, Kubernetes 1.27-1.31) in one
process on an embedded example, watched like kubectl; `drasat.cli.demo` runs it for `--classic`.

`DemoCluster.running(cluster, policy_text)` starts, in this order: the in-process API server with
drasat's CRDs; what `helm install` and the cluster would hold (the namespace, the ResourceClass
`gpu.drasat.io` with its DeviceClassParameters, the policy ConfigMap, one Node per node); a node
plugin per node (simulated NVML fleet, real gRPC unix sockets, CDI specs and checkpoints in a
temporary directory); the classic controller; the simulated classic scheduler and controller
manager (pods of Deployments and Jobs); a simulated kubelet per node (classic flavour). On exit
everything stops in reverse order and the temporary directory is removed, also after an error.

The run applies the manifests (checked first with the classic what-if's own messages), prints each
pod going Pending -> Running with its "log" (the environment its container gets from the CDI
spec), the NodeAllocationState view, then deletes the workloads, pods and claims and checks every
node is clean again.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import tempfile
from collections.abc import Iterator, Sequence
from typing import TextIO

from drasat import DRIVER_NAME, loading
from drasat.api import cluster as cluster_api
from drasat.api import crds
from drasat.api.cluster import Cluster
from drasat.classic import scheduler
from drasat.classic.controller import for_app
from drasat.classic.whatif import manifests as whatif_manifests
from drasat.controller.app import App, Options
from drasat.controller.policy import CONFIGMAP_KEY
from drasat.kube.client import KubeClient as OfficialClient
from drasat.kube.client import configuration_for
from drasat.nodeplugin import mps, nvml
from drasat.nodeplugin.nasstore import KubeNasStore
from drasat.nodeplugin.plugin import Config, NodePlugin
from drasat.testbed import democluster, simnvml
from drasat.testbed.democluster import CLASS_PARAMETERS, NAMESPACE, POLICY_CONFIGMAP, SimNode
from drasat.testbed.demoshow import (
    Key,
    Obj,
    Out,
    Workload,
    created,
    devices_text,
    env_line,
    owner_urls,
    sharing_text,
    shortfalls,
    table,
    wanted_pods,
    workload_pods,
)
from drasat.testbed.sim import (
    apiserver,
    apply,
    controllers,
    errors,
    garbage,
    kubeclient,
    kubelet,
    scheduling,
)
from drasat.testbed.sim.kubelet import PodRun
from drasat.whatif import clusternodes


class DemoCluster(democluster.ClusterParts):
    """The parts, started; `client` is the admin's (simulated kubectl) API client."""

    def __init__(self, server: apiserver.ApiServer, tmp: pathlib.Path) -> None:
        super().__init__(
            kubeclient.KubeClient(server.url),
            lambda: OfficialClient(configuration_for(server.url), request_timeout=10),
        )
        self.server = server
        self.tmp = tmp

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
                demo.scheduler = scheduler.Scheduler(
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
                fleet = simnvml.SimulatedNvml(democluster.fleet_spec(cluster, group, name))
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
        self._run_controller(app)


class Demo(democluster.DemoSteps):
    cluster: DemoCluster

    # --- phases -------------------------------------------------------------------------------

    def show_cluster(self, source: str) -> None:
        self.out.phase(f"cluster ({source}): {len(self.cluster.nodes)} nodes")
        rows = [["NODE", "GPUS", "NAS"]]
        for node in sorted(self.cluster.nodes, key=lambda n: n.name):
            nas = self.cluster.nas(node.name)
            status = nas.status.value if nas is not None and nas.status else "missing"
            rows.append([node.name, democluster.describe(node.fleet.spec), status])
            if status != "Ready":
                self.failures.append(f"node {node.name}: NAS {status} after the plugin started")
        for line in table(rows):
            self.out(line)

    def apply(self, title: str, documents: list[loading.Document]) -> list[apply.Applied]:
        self.out.phase(f"applying {title}")
        applied = apply.apply(self.client, documents, known=apply.kinds(crds.all_crds()))
        for item in applied:
            self.out(f"{item.ref} {'created' if item.created else 'unchanged'}")
        return applied

    def _show_run(self, run: PodRun) -> None:
        for claim in run.claims:
            self.out(f"  log [{claim.name}]: {env_line(run.claim_env(claim.uid))}")

    def _pod(self, key: Key) -> Obj | None:
        try:
            return self.client.get(kubeclient.path("", "v1", "pods", namespace=key[0], name=key[1]))
        except errors.ApiError as error:
            if error.code == 404:
                return None
            raise

    def _claim_names(self, key: Key) -> list[str]:
        pod = self._pod(key)
        return [e.resolved_name(key[1]) for e in scheduling.pod_claims(pod)] if pod else []

    def _refusal(self, key: Key) -> str | None:
        """The newest Warning Event of the controller on one of the pod's claims."""
        names = set(self._claim_names(key))
        if not names:
            return None
        events = self.client.list(kubeclient.path("", "v1", "events", namespace=key[0]))["items"]
        found = [
            e
            for e in events
            if e.get("type") == "Warning"
            and (e.get("involvedObject") or {}).get("kind") == "ResourceClaim"
            and (e.get("involvedObject") or {}).get("name") in names
        ]
        if not found:
            return None
        newest = max(found, key=lambda e: int(e["metadata"].get("resourceVersion") or 0))
        claim = newest["involvedObject"]["name"]
        return f"Warning {newest.get('reason')} on claim {claim}: {newest.get('message')}"

    def workload_pods(self, workloads: list[Workload]) -> dict[str, list[Key]]:
        return workload_pods(self.client, self.out, self.until, workloads)

    def show_allocations(self) -> None:
        self.out.phase("allocations (NodeAllocationState)")
        for node in sorted(self.cluster.nodes, key=lambda n: n.name):
            nas = self.cluster.nas(node.name)
            if nas is None:
                self.out(f"node {node.name}: no NodeAllocationState")
                continue
            allocated, prepared = nas.spec.allocatedClaims, nas.spec.preparedClaims
            self.out(f"node {node.name}: {len(allocated)} allocated, {len(prepared)} prepared")
            if not allocated:
                continue
            index = {d.gpu.uuid: d.gpu.index for d in nas.spec.allocatableDevices if d.gpu}
            rows = [["CLAIM", "DEVICES", "SHARING", "PODS", "PREPARED"]]
            entries = sorted(
                allocated.items(), key=lambda i: (i[1].claimInfo.namespace, i[1].claimInfo.name)
            )
            for uid, entry in entries:
                info = entry.claimInfo
                consumers = self._consumers(info.namespace, info.name)
                rows.append(
                    [
                        f"{info.namespace}/{info.name}",
                        devices_text(entry, index),
                        sharing_text(entry, len(consumers)),
                        ",".join(consumers) or "-",
                        "yes" if uid in prepared else "no",
                    ]
                )
            for line in table(rows):
                self.out(line)

    def delete(
        self, pods: list[Key], claims: list[Key], ran: set[Key], owners: Sequence[str] = ()
    ) -> None:
        """Delete the workloads (`owners`: their URLs; their pods go with them), the pods and
        the claims, and report what is left."""
        namespaces = sorted({k[0] for k in pods} | {k[0] for k in claims})
        existing = sorted(
            (c["metadata"]["namespace"], c["metadata"]["name"])
            for ns in namespaces
            for c in self._claims(ns)
        )
        if owners:
            self.out.phase("deleting workloads")
            for url in owners:  # first, or their controllers would replace the pods
                self._delete(url)
        self.out.phase("deleting pods")
        for key in sorted(pods):
            self._delete(kubeclient.path("", "v1", "pods", namespace=key[0], name=key[1]))
        gone = self.until(lambda: all(self._pod(k) is None for k in pods))
        for key in sorted(pods):
            state = "Running" if key in ran else "Pending"
            if self._pod(key) is None:
                self.out(f"pod {key[0]}/{key[1]}  {state} -> deleted")
            else:
                self.out(f"pod {key[0]}/{key[1]}  {state} -> still there: {self._why(key)}")
        if not gone:
            self.failures.append(f"pods not deleted within {self.timeout:g}s")
        self.out.phase("deleting claims")
        for key in claims:
            self._delete(kubeclient.path(*_CLAIMS, namespace=key[0], name=key[1]))

        def claims_gone() -> bool:
            garbage.collect(self.client, namespaces)  # the garbage collector's orphan sweep
            return not [c for ns in namespaces for c in self._claims(ns)]

        left = self.until(claims_gone)
        still = {
            (c["metadata"]["namespace"], c["metadata"]["name"])
            for ns in namespaces
            for c in self._claims(ns)
        }
        self.show_claims_left(existing, claims, still)
        if not left:
            self.failures.append(f"claims not deallocated within {self.timeout:g}s")

    def _consumers(self, namespace: str, name: str) -> list[str]:
        """The pods a claim is reserved for (status.reservedFor)."""
        try:
            claim = self.client.get(kubeclient.path(*_CLAIMS, namespace=namespace, name=name))
        except errors.ApiError as error:
            if error.code == 404:
                return []
            raise
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        return sorted(str(r.get("name")) for r in reserved if r.get("resource") == "pods")

    def _delete(self, url: str) -> None:
        try:
            self.client.delete(url)
        except errors.ApiError as error:
            if error.code != 404:
                raise

    def _claims(self, namespace: str) -> list[Obj]:
        items: list[Obj] = self.client.list(kubeclient.path(*_CLAIMS, namespace=namespace))["items"]
        return items


_CLAIMS = ("resource.k8s.io", "v1alpha2", "resourceclaims")


def check_manifests(
    cluster: cluster_api.Cluster, source: str, documents: Sequence[loading.Document]
) -> None:
    """Reject bad manifests before anything starts, with the what-if's own messages.

    The what-if compiler knows the claim kinds, references and MIG profiles the cluster offers,
    so an example with a mistake (a profile its GPUs lack, a missing parameters object) fails in
    the demo with exactly the line `drasat whatif` prints for it, and exit 2.
    """
    described = loading.Document(source, 1, cluster.model_dump(mode="json", exclude_none=True))
    nodes = clusternodes.load([described])
    whatif_manifests.compile_manifests(
        documents, offered_profiles=nodes.offered_profiles(), existing_uids=nodes.existing_uids()
    )


def run(
    args: argparse.Namespace,
    stream: TextIO,
    sources: list[tuple[str, list[loading.Document]]],
    cluster: cluster_api.Cluster,
    source: str,
    policy: tuple[list[loading.Document], str, str],
) -> int:
    """The classic demo on the manifests of `sources` (`policy`: the manifests without the
    AllocationPolicy, its text and its name); the exit code."""
    out = Out(stream)
    documents, policy_text, policy_name = policy
    check_manifests(cluster, source, documents)
    kept = {id(d) for d in documents}
    with DemoCluster.running(cluster, policy_text=policy_text) as demo_cluster:
        demo = Demo(demo_cluster, out, args.timeout)
        demo.show_cluster(source)
        out(f"policy: {policy_name}")
        applied = []
        for title, docs in sources:
            applied += demo.apply(title, [d for d in docs if id(d) in kept])
        pods = created(applied, "Pod")
        claims = created(applied, "ResourceClaim")
        workloads = [
            Workload(a, n)
            for a in applied
            if a.created and (n := wanted_pods(a.object)) is not None
        ]
        pods_of = demo.workload_pods(workloads)
        made = sorted({k for w in workloads for k in pods_of.get(w.uid, [])})
        outcomes = demo.wait_pods(pods + made)
        demo.show_allocations()
        ran = {k for k, o in outcomes.items() if o.run is not None}
        owners = owner_urls(workloads, apply.kinds(crds.all_crds()))
        demo.delete(pods + made, claims, ran, owners)
        demo.check_cleanup()
        stuck = [o for o in outcomes.values() if o.run is None and o.key not in made]
        for outcome in sorted(stuck, key=lambda o: o.key):
            if args.allow_pending and not outcome.reason.startswith("timed out"):
                continue
            demo.failures.insert(0, f"pod {outcome.key[0]}/{outcome.key[1]} did not run")
        short = shortfalls(workloads, pods_of, outcomes, allow_pending=args.allow_pending)
        demo.failures[:0] = short
        stuck = [o for o in outcomes.values() if o.run is None]
    if demo.failures:
        out(f"== demo FAILED: {'; '.join(demo.failures)}")
        return 1
    pending = f", {len(stuck)} stayed Pending" if stuck else ""
    out(f"== demo ok: {len(ran)} pods ran{pending}; every device was cleaned up")
    return 0
