"""The chart's RBAC is enough for what the controller and the node plugin really do, and no more.

The reference case runs through the real components: the in-process API server, the controller
app (leader election, the chart's policy ConfigMap), a node plugin (simulated NVML, real gRPC
sockets), the simulated scheduler, and a kubelet's prepare/unprepare calls. Each component talks
through a client that records every request. Every request must be allowed by the Roles and
ClusterRoles the chart binds to that component's ServiceAccount, and every rule the chart grants
must be used (or be listed below with the reason it was not needed in this run).
"""

from __future__ import annotations

import contextlib
import pathlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from chart_rendering import REPO, Manifest, Render

from drasat import loading
from drasat.api import crds
from drasat.classic import scheduler
from drasat.classic.controller import for_app
from drasat.controller.app import App, Options
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, configuration_for
from drasat.nodeplugin import mps, nvml
from drasat.nodeplugin.gen import dra_v1alpha3_pb2, dra_v1alpha3_pb2_grpc
from drasat.nodeplugin.nasstore import KubeNasStore
from drasat.nodeplugin.plugin import Config, NodePlugin
from drasat.testbed import simnvml
from drasat.testbed.sim import apiserver, kubeclient

NAMESPACE = "drasat"
#: Per-claim errors of a prepare that carried the controller's resource handles.
handle_errors: dict[str, str] = {}
NODE = "gpu-node-1"
#: Examples that between them use every kind of parameters (none, GPU, MIG).
EXAMPLES = [
    REPO / "deploy" / "examples" / "reference-cases" / "exclusive-gpus.yaml",
    REPO / "deploy" / "examples" / "reference-cases" / "shared-time-sliced-gpu.yaml",
    REPO / "deploy" / "examples" / "dynamic-mig" / "by-profile.yaml",
]

#: Grants this run does not exercise, and why they are still needed.
UNUSED_BUT_NEEDED: dict[tuple[str, str, str, str], str] = {
    ("controller", "", "events", "create"): "Events are written only when a claim cannot be placed",
    ("controller", "resource.k8s.io", "resourceclaims", "get"): "re-reads a claim only after a "
    "conflicting status write, which depends on timing",
    **{
        ("controller", group, kind, verb): "parameters come from an informer cache, with a get "
        "when an object is not cached yet; NVIDIA's groups are read on demand only"
        for group in ("gpu.drasat.io", "gpu.resource.nvidia.com")
        for kind in ("deviceclassparameters", "gpuclaimparameters", "migdeviceclaimparameters")
        for verb in ("get", "list", "watch")
    },
    ("node-plugin", "", "nodes", "get"): "the NAS ownerReference to the Node (design: NAS owned "
    "by the Node); not read by the plugin yet",
    ("node-plugin", "", "events", "create"): "a Warning Event on the NAS is written only when a "
    "checkpoint entry is unreadable (tests/nodeplugin/test_np_checkpoint.py)",
    ("node-plugin", "resource.k8s.io", "resourceclaims", "get"): "current (1.34+) kubelets name a "
    "claim only and the v1 DRAPlugin service reads its allocation results "
    "(tests/e2e/test_e2e_kubelet.py); this run is classic DRA",
}


@dataclass(frozen=True)
class Request:
    verb: str
    group: str
    resource: str  # plural, or plural/subresource
    namespace: str | None
    name: str | None


class Recording:
    """An Api that records each request and passes it to a real KubeClient."""

    def __init__(self, api: KubeClient) -> None:
        self.api = api
        self.requests: list[Request] = []
        self._lock = threading.Lock()

    def _note(self, verb: str, res: r.Resource, namespace: str | None, name: str | None) -> None:
        with self._lock:
            self.requests.append(Request(verb, res.group, res.plural, namespace, name))

    @staticmethod
    def _where(body: Manifest) -> tuple[str | None, str | None]:
        meta = body.get("metadata") or {}
        return meta.get("namespace"), meta.get("name")

    def get(self, resource: r.Resource, name: str, *, namespace: str | None = None) -> Any:
        self._note("get", resource, namespace, name)
        return self.api.get(resource, name, namespace=namespace)

    def list(self, resource: r.Resource, **kw: Any) -> Any:
        self._note("list", resource, kw.get("namespace"), None)
        return self.api.list(resource, **kw)

    def watch(self, resource: r.Resource, **kw: Any) -> Any:
        self._note("watch", resource, kw.get("namespace"), None)
        return self.api.watch(resource, **kw)

    def create(self, resource: r.Resource, body: Manifest, *, namespace: str | None = None) -> Any:
        self._note("create", resource, namespace or self._where(body)[0], None)
        return self.api.create(resource, body, namespace=namespace)

    def replace(self, resource: r.Resource, body: Manifest) -> Any:
        self._note("update", resource, *self._where(body))
        return self.api.replace(resource, body)

    def replace_status(self, resource: r.Resource, body: Manifest) -> Any:
        status = r.Resource(resource.group, resource.version, f"{resource.plural}/status",
                            resource.kind, resource.namespaced)  # fmt: skip
        self._note("update", status, *self._where(body))
        return self.api.replace_status(resource, body)

    def patch(self, resource: r.Resource, name: str, patch: Any, **kw: Any) -> Any:
        plural = resource.plural + (f"/{kw['subresource']}" if kw.get("subresource") else "")
        self._note("patch", r.Resource(resource.group, resource.version, plural, resource.kind),
                   kw.get("namespace"), name)  # fmt: skip
        return self.api.patch(resource, name, patch, **kw)

    def delete(
        self, resource: r.Resource, name: str, *, namespace: str | None = None,
        uid: str | None = None,
    ) -> None:  # fmt: skip
        self._note("delete", resource, namespace, name)
        self.api.delete(resource, name, namespace=namespace, uid=uid)

    def close(self) -> None:
        self.api.close()


# ---------------------------------------------------------------- what the chart grants


@dataclass(frozen=True)
class Rule:
    groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str]
    namespace: str | None  # None: cluster-wide (a ClusterRole bound by a ClusterRoleBinding)

    def allows(self, request: Request) -> bool:
        if self.namespace is not None and request.namespace != self.namespace:
            return False
        if self.names and request.name not in self.names:
            return False
        return (
            request.group in self.groups
            and request.resource in self.resources
            and request.verb in self.verbs
        )


def granted(manifests: list[Manifest], account: str) -> list[Rule]:
    """Rules of every role bound to ServiceAccount `account` of the release namespace."""
    roles = {(m["kind"], m["metadata"]["name"]): m for m in manifests if m["kind"].endswith("Role")}
    out: list[Rule] = []
    for binding in (m for m in manifests if m["kind"].endswith("RoleBinding")):
        subjects = {(s["kind"], s["name"]) for s in binding["subjects"]}
        if ("ServiceAccount", account) not in subjects:
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        namespace = binding["metadata"].get("namespace")
        for rule in role["rules"]:
            out.append(
                Rule(
                    frozenset(rule["apiGroups"]),
                    frozenset(rule["resources"]),
                    frozenset(rule["verbs"]),
                    frozenset(rule.get("resourceNames", [])),
                    namespace,
                )
            )
    return out


# ---------------------------------------------------------------- the run


KINDS = {
    "Namespace": r.Resource("", "v1", "namespaces", "Namespace", namespaced=False),
    "Pod": r.PODS,
    "ResourceClaimTemplate": r.RESOURCE_CLAIM_TEMPLATES,
    "ResourceClass": r.RESOURCE_CLASSES,
    "DeviceClassParameters": r.device_class_parameters(),
    "ConfigMap": r.CONFIGMAPS,
    "ResourceClaim": r.RESOURCE_CLAIMS,
    "GpuClaimParameters": r.gpu_claim_parameters(),
    "MigDeviceClaimParameters": r.mig_device_claim_parameters(),
}


def _until(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(what)


@contextlib.contextmanager
def _running(target: Callable[[threading.Event], Any]) -> Iterator[None]:
    stop = threading.Event()
    thread = threading.Thread(target=target, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(15)


def _claims(admin: KubeClient, namespace: str) -> list[Manifest]:
    return list(admin.list(r.RESOURCE_CLAIMS, namespace=namespace).items)


def _kubelet_call(
    socket: pathlib.Path, claims: list[Manifest], *, prepare: bool, handles: bool = False
) -> dict[str, str]:
    """NodePrepareResources / NodeUnprepareResources as a kubelet calls them: per-claim errors."""
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = dra_v1alpha3_pb2_grpc.NodeStub(channel)
        refs = [
            dra_v1alpha3_pb2.Claim(
                namespace=c["metadata"]["namespace"], name=c["metadata"]["name"],
                uid=c["metadata"]["uid"],
                resource_handle=(
                    c["status"]["allocation"]["resourceHandles"][0]["data"] if handles else ""
                ),
            )
            for c in claims
        ]  # fmt: skip
        if prepare:
            answer: Any = stub.NodePrepareResources(
                dra_v1alpha3_pb2.NodePrepareResourcesRequest(claims=refs), timeout=30
            )
        else:
            answer = stub.NodeUnprepareResources(
                dra_v1alpha3_pb2.NodeUnprepareResourcesRequest(claims=refs), timeout=30
            )
        return {uid: result.error for uid, result in answer.claims.items() if result.error}


@pytest.fixture(scope="module")
def recorded(render: Render) -> Iterator[tuple[list[Manifest], dict[str, list[Request]]]]:
    # A directory of our own (short socket paths, and not pruned by a concurrent pytest run).
    with tempfile.TemporaryDirectory(prefix="drasat-rbac-") as name:
        yield _run(render().manifests, pathlib.Path(name))


def _run(
    chart: list[Manifest], tmp: pathlib.Path
) -> tuple[list[Manifest], dict[str, list[Request]]]:
    handle_errors.clear()
    with apiserver.ApiServer.running(crds=crds.all_crds()) as server:
        admin = KubeClient(configuration_for(server.url), request_timeout=10)
        controller_api = Recording(KubeClient(configuration_for(server.url), request_timeout=10))
        plugin_api = Recording(KubeClient(configuration_for(server.url), request_timeout=10))
        # What `helm install` creates and the operator has: the namespace, the chart's class,
        # class parameters and policy ConfigMap, a GPU node.
        admin.create(KINDS["Namespace"], {"metadata": {"name": NAMESPACE}})
        for manifest in chart:
            if manifest["kind"] in ("ResourceClass", "DeviceClassParameters", "ConfigMap"):
                admin.create(KINDS[manifest["kind"]], manifest)
        admin.create(r.NODES, {"metadata": {"name": NODE}})

        fleet = simnvml.SimulatedNvml("3xT4,1xA100-40GB,mig=3")
        config = Config(
            node_name=NODE, namespace=NAMESPACE, cdi_root=tmp / "cdi",
            plugin_dir=tmp / "plugins", registry_dir=tmp / "registry", state_dir=tmp / "state",
            health_events=False,
        )  # fmt: skip
        plugin = NodePlugin(
            config,
            lib=nvml.NvmlDeviceLib(fleet, run=fleet.run),
            store=KubeNasStore(plugin_api, node=NODE, namespace=NAMESPACE),  # type: ignore[arg-type]
            mps_runner=mps.RecordingRunner(),
        )
        plugin.start()
        policy = next(m for m in chart if m["kind"] == "ConfigMap")["metadata"]["name"]
        app = App(
            Options(namespace=NAMESPACE, metrics_address="", policy_configmap=policy,
                    leader_elect=True, lease_duration_s=2.0, renew_deadline_s=1.5,
                    retry_period_s=0.2, resync_s=1.0),
            api=controller_api,  # type: ignore[arg-type]
            classic=for_app,
        )  # fmt: skip
        sim = scheduler.Scheduler(kubeclient.KubeClient(server.url), resync=0.5).start()
        try:
            with _running(app.run):
                documents = [d.data for e in EXAMPLES for d in loading.read_documents(e)]
                pods = [d for d in documents if d["kind"] == "Pod"]
                for document in sorted(documents, key=lambda d: d["kind"] == "Pod"):
                    admin.create(KINDS[document["kind"]], document)
                for pod in pods:
                    sim.wait_bound(pod["metadata"]["namespace"], pod["metadata"]["name"])
                namespaces = sorted({p["metadata"]["namespace"] for p in pods})
                claims = [c for n in namespaces for c in _claims(admin, n)]
                # A real kubelet passes the claim's resource handle; the plugin must understand
                # the controller's. Recorded here, asserted below.
                handle_errors.update(
                    _kubelet_call(config.dra_socket, claims, prepare=True, handles=True)
                )
                prepared = _kubelet_call(config.dra_socket, claims, prepare=True)
                assert not prepared, prepared
                unprepared = _kubelet_call(config.dra_socket, claims, prepare=False)
                assert not unprepared, unprepared
                for pod in pods:
                    meta = pod["metadata"]
                    admin.delete(r.PODS, meta["name"], namespace=meta["namespace"])
                for claim in claims:
                    # Claims made from templates are owned by their pod: the API server's
                    # garbage collection may delete them (and the controller deallocate them)
                    # before this line runs.
                    meta = claim["metadata"]
                    with contextlib.suppress(errors.NotFound):
                        admin.delete(r.RESOURCE_CLAIMS, meta["name"], namespace=meta["namespace"])
                _until(lambda: not any(_claims(admin, n) for n in namespaces),
                       "claims deallocated and gone")  # fmt: skip
        finally:
            sim.stop()
            plugin.stop()
            with contextlib.suppress(errors.KubeError):
                admin.close()
    return chart, {"controller": controller_api.requests, "node-plugin": plugin_api.requests}


def test_the_plugin_understands_the_controllers_resource_handle(
    recorded: tuple[list[Manifest], dict[str, list[Request]]],
) -> None:
    assert not handle_errors, handle_errors


@pytest.mark.parametrize("component", ["controller", "node-plugin"])
def test_every_request_is_allowed_by_the_charts_rbac(
    recorded: tuple[list[Manifest], dict[str, list[Request]]], component: str
) -> None:
    chart, requests = recorded
    rules = granted(chart, f"drasat-{component}")
    assert requests[component], f"the {component} made no request"
    denied = sorted({q for q in requests[component] if not any(u.allows(q) for u in rules)},
                    key=str)  # fmt: skip
    assert not denied, f"{component}: the chart's RBAC would deny {denied}"


@pytest.mark.parametrize("component", ["controller", "node-plugin"])
def test_every_grant_is_used(
    recorded: tuple[list[Manifest], dict[str, list[Request]]], component: str
) -> None:
    chart, requests = recorded
    unused = []
    for rule in granted(chart, f"drasat-{component}"):
        for group in rule.groups:
            for resource in rule.resources:
                for verb in rule.verbs:
                    used = any(
                        q.group == group and q.resource == resource and q.verb == verb
                        for q in requests[component]
                    )
                    if not used and (component, group, resource, verb) not in UNUSED_BUT_NEEDED:
                        unused.append((group, resource, verb))
    assert not unused, f"{component}: granted but never used: {unused}"
