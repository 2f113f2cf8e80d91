"""pytest plugin: one real Kubernetes control plane for every test that asks for it.

`kube_cluster` (session) starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager
v1.37.2 from the cache `scripts/kube-build` fills (`make test` builds it first) and stops them at
the end of the session, also when tests fail or the run is interrupted; the components die with
the test process even if it is killed. A missing binary fails the tests that need it with the
command to run: they never skip silently. When such a test fails, the last lines of every
component's log are added to its report. `classic_kube_cluster` (session) is the same with
Kubernetes v1.30.14 and classic DRA (`scripts/kube-build classic`).

`kube_api` (session): the official client's ApiClient for the cluster administrator.
`kube_namespace`: a fresh namespace for one test (its `default` ServiceAccount exists, so pods
are admitted), deleted after it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import kubernetes
import pytest
from kubernetes.client import ApiException

from drasat.testbed.controlplane import binaries, realcluster

_CLUSTERS_KEY = pytest.StashKey[list[realcluster.Cluster]]()


def _terminate(signum: int, _frame: FrameType | None) -> None:
    # SIGTERM (a CI timeout, `kill`): unwind like Ctrl-C so the session fixture stops the cluster.
    raise SystemExit(128 + signum)


def _session_cluster(
    request: pytest.FixtureRequest, folder: Path, *, classic: bool
) -> Iterator[realcluster.Cluster]:
    try:
        bin_dir = binaries.locate(classic=classic)
    except binaries.MissingBinaries as exc:
        pytest.fail(f"the real control plane is not built: {exc}", pytrace=False)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        started = realcluster.Cluster.start(directory=folder, bin_dir=bin_dir, die_with_parent=True)
    except realcluster.ClusterError as exc:
        signal.signal(signal.SIGTERM, previous)
        pytest.fail(f"the real control plane did not start: {exc}", pytrace=False)
    request.config.stash.setdefault(_CLUSTERS_KEY, []).append(started)
    try:
        yield started
    finally:
        started.stop()
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="session")
def kube_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[realcluster.Cluster]:
    yield from _session_cluster(request, tmp_path_factory.mktemp("kube-cluster"), classic=False)


@pytest.fixture(scope="session")
def classic_kube_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[realcluster.Cluster]:
    """Kubernetes v1.30.14 with classic DRA (`resource.k8s.io/v1alpha2`), for classic e2e tests."""
    yield from _session_cluster(request, tmp_path_factory.mktemp("kube-classic"), classic=True)


@pytest.fixture(scope="session")
def kube_api(kube_cluster: realcluster.Cluster) -> Iterator[kubernetes.client.ApiClient]:
    client = kubernetes.config.new_client_from_config(config_file=str(kube_cluster.kubeconfig))
    with client:
        yield client


def wait_for(check: Any, timeout: float = 30.0, interval: float = 0.1, what: str = "") -> Any:
    """Poll `check()` until it returns something truthy; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or check}")
        time.sleep(interval)


def exists(read: Callable[..., object], *args: Any) -> bool:
    """Whether `read(*args)` (a client's read_* call) finds its object: False on a 404; any other
    API error is raised."""
    try:
        read(*args)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


@pytest.fixture
def kube_namespace(kube_api: kubernetes.client.ApiClient) -> Iterator[str]:
    core = kubernetes.client.CoreV1Api(kube_api)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})

    wait_for(
        lambda: exists(core.read_namespaced_service_account, "default", name),
        what=f"the default ServiceAccount of namespace {name}",
    )
    yield name
    with contextlib.suppress(ApiException):
        core.delete_namespace(name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    fixtures = getattr(item, "fixturenames", ())
    if report.failed and {"kube_cluster", "classic_kube_cluster"} & set(fixtures):
        for started in item.config.stash.get(_CLUSTERS_KEY, []):
            report.sections.append(("kube-cluster logs", started.logs(lines=30)))
    return report


def kubectl_env(kube_cluster: realcluster.Cluster) -> dict[str, str]:
    """Environment for a subprocess (kubectl, drasat) to reach the cluster as administrator."""
    return {**os.environ, "KUBECONFIG": str(kube_cluster.kubeconfig)}


def service_account_token(
    api: kubernetes.client.ApiClient,
    namespace: str,
    account: str,
    *,
    bound_pod: tuple[str, str] | None = None,
    seconds: int = 3600,
) -> str:
    """A TokenRequest's token for the ServiceAccount `namespace/account`, valid `seconds`; bound
    to the pod `bound_pod` (name, uid) if given: the token then carries the pod's node name, as
    the one the kubelet projects into a DaemonSet pod does."""
    spec: dict[str, Any] = {"expirationSeconds": seconds}
    if bound_pod is not None:
        name, uid = bound_pod
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}
    done = kubernetes.client.CoreV1Api(api).create_namespaced_service_account_token(
        account, namespace, {"spec": spec}
    )
    return str(done.status.token)


def fake_node(
    name: str,
    *,
    cpu: str = "64",
    memory: str = "512Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node with no kubelet behind it: capacity and allocatable (cpu, memory, pods), Ready, so the
    real scheduler binds pods to it (no node-lifecycle controller runs to mark it NotReady)."""
    resources = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake"}
            ],
        },
    }


def create_fake_node(api: kubernetes.client.ApiClient, name: str, **options: Any) -> Any:
    """Create `fake_node(name, ...)`, set its status (the node's own subresource) and lift the
    `node.kubernetes.io/not-ready` taint the TaintNodesByCondition admission plugin puts on every
    new node (the node-lifecycle controller would, once the node reports Ready)."""
    core = kubernetes.client.CoreV1Api(api)
    body = fake_node(name, **options)
    core.create_node(body)
    core.patch_node_status(name, {"status": body["status"]})
    return core.patch_node(name, {"spec": {"taints": None}})


def install_crds(
    api: kubernetes.client.ApiClient, crds: Iterable[dict[str, Any]], timeout: float = 60.0
) -> list[Any]:
    """Create each CustomResourceDefinition unless one of that name exists (409 is fine: the
    cluster lives for the whole session and several test modules install drasat's CRDs), then wait
    until every one is Established, and return them as the server holds them.

    CRDs are never deleted by tests: another module of the same session may be using them."""
    extensions = kubernetes.client.ApiextensionsV1Api(api)
    names = []
    for crd in crds:
        names.append(crd["metadata"]["name"])
        try:
            extensions.create_custom_resource_definition(crd)
        except ApiException as exc:
            if exc.status != 409:
                raise

    def established(name: str) -> Any:
        held = extensions.read_custom_resource_definition(name)
        conditions = {c.type: c.status for c in (held.status.conditions or [])}
        accepted = conditions.get("NamesAccepted") == "True"
        return held if accepted and conditions.get("Established") == "True" else None

    return [
        wait_for(functools.partial(established, n), timeout, what=f"CRD {n} Established")
        for n in names
    ]
