"""On a cluster drasat's chart installed (real kubelets, a real container runtime): deleting the
node plugin's pod leaves the running MPS shares, their daemon and its limits as they were, and the
plugin's new pod adopts the daemon.

In `make test` it runs on the containerd cluster of the session's `deployed` fixture
(tests/e2e/containerdkit.py: two real kubelets on real containerd, the chart installed with the
images built here), which test_e2e_containerd.py shares: started once, stopped at the end. Given
an existing cluster instead, it runs there and starts none:

    scripts/kube-cluster up --kubelets 2 --runtime containerd --install   # prints a kubeconfig
    DRASAT_E2E_CLUSTER=<that kubeconfig> .venv/bin/pytest -q tests/e2e/test_e2e_cluster_mps.py

`DRASAT_E2E_CLUSTER_NAMESPACE` names the chart's namespace there (default `drasat`),
`DRASAT_E2E_PROBE_IMAGE` the workloads' image (default `localhost/drasat-probe:dev`, whose
command prints what the container sees and sleeps). The daemons are read through the MPS host's
own report (`kubectl exec <mps-host pod> -- drasat mps-host --status`), so the test works on any
node the cluster has.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

KUBECONFIG = os.environ.get("DRASAT_E2E_CLUSTER", "")
DRASAT_NAMESPACE = os.environ.get("DRASAT_E2E_CLUSTER_NAMESPACE", "drasat")
PROBE_IMAGE = os.environ.get("DRASAT_E2E_PROBE_IMAGE", "localhost/drasat-probe:dev")
RESOURCE = ("resource.k8s.io", "v1")
#: Two shares of one namespace (on one GPU: one daemon bounding both by the larger).
SHARES = {"share-a": ("30", "4Gi"), "share-b": ("50", "8Gi")}
PLUGIN = "app.kubernetes.io/component=node-plugin"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200), pytest.mark.containerd_cluster]


def _wait(what: str, check: Callable[[], Any], timeout: float = 300) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last!r})")


@pytest.fixture(scope="module")
def kubeconfig(request: pytest.FixtureRequest) -> str:
    """DRASAT_E2E_CLUSTER's, else the session's containerd cluster's (started if need be)."""
    if KUBECONFIG:
        return KUBECONFIG
    cluster, _ = request.getfixturevalue("deployed")
    return str(cluster.kubeconfig)


@pytest.fixture
def api(kubeconfig: str) -> Iterator[Any]:
    import kubernetes

    client = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    yield client
    client.close()


def _pods(core: Any, namespace: str, selector: str, node: str = "") -> list[Any]:
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return [p for p in pods if not node or p.spec.node_name == node]


def _ready(pod: Any) -> bool:
    statuses = pod.status.container_statuses or []
    return (
        pod.metadata.deletion_timestamp is None
        and bool(statuses)
        and all(s.ready for s in statuses)
    )


def _status(api: Any, node: str) -> list[dict[str, Any]]:
    """The MPS host's report of the node's daemons (`drasat mps-host --status` in its pod)."""
    import kubernetes
    from kubernetes.stream import stream

    core = kubernetes.client.CoreV1Api(api)
    (host,) = _pods(core, DRASAT_NAMESPACE, "app.kubernetes.io/component=mps-host", node)
    args = host.spec.containers[0].args
    state = next(a.split("=", 1)[1] for a in args if a.startswith("--state-dir="))
    out = stream(
        core.connect_get_namespaced_pod_exec,
        host.metadata.name,
        DRASAT_NAMESPACE,
        command=["drasat", "mps-host", "--state-dir", state, "--status"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    daemons: list[dict[str, Any]] = json.loads(out[out.index("{") :])["daemons"]
    return daemons


def _claim(name: str, compute: str, memory: str) -> dict[str, Any]:
    request = {
        "deviceClassName": "gpu.drasat.io",
        "capacity": {"requests": {"compute": compute, "memory": memory}},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "share", "exactly": request}]}},
    }


def _pod(name: str, claim: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "probe",
                    "image": PROBE_IMAGE,
                    "imagePullPolicy": "Never",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        },
    }


def test_deleting_the_node_plugins_pod_leaves_mps_shares_running(api: Any) -> None:
    import kubernetes

    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    plugins = _pods(core, DRASAT_NAMESPACE, PLUGIN)
    assert plugins, f"no node plugin pods in namespace {DRASAT_NAMESPACE}"
    node = sorted(p.spec.node_name for p in plugins)[0]
    namespace = f"mps-survives-{uuid.uuid4().hex[:6]}"

    def plugin_pods() -> list[Any]:
        return _pods(core, DRASAT_NAMESPACE, PLUGIN, node)

    def probes() -> list[Any]:
        return list(core.list_namespaced_pod(namespace).items)

    def our_daemons() -> list[dict[str, Any]]:
        return [d for d in _status(api, node) if d.get("scope", "").endswith(f":{namespace}")]

    def has_account() -> bool:
        accounts = core.list_namespaced_service_account(namespace).items
        return any(a.metadata.name == "default" for a in accounts)

    core.create_namespace({"metadata": {"name": namespace}})
    try:
        _wait("the namespace's default ServiceAccount", has_account, 60)
        for claim, (compute, memory) in SHARES.items():
            custom.create_namespaced_custom_object(
                *RESOURCE, namespace, "resourceclaims", _claim(claim, compute, memory)
            )
            core.create_namespaced_pod(namespace, _pod(f"probe-{claim}", claim, node))
        _wait("both probes running", lambda: len(probes()) == 2 and all(map(_ready, probes())))
        containers = {
            p.metadata.name: p.status.container_statuses[0].container_id for p in probes()
        }
        ours = our_daemons()
        assert ours and all(d["alive"] for d in ours), ours
        # Each node's plugin and MPS host have a state folder of their own (on the test bed's
        # nodes too, several on one machine): no other node's host knows of these daemons.
        names = {d["name"] for d in ours}
        for other in sorted({p.spec.node_name for p in plugins} - {node}):
            assert not [d for d in _status(api, other) if d["name"] in names], other
        for daemon in ours:  # one for both shares on one GPU (bounded by 50 %), else one each
            limit = daemon["limits"]["threadPercentage"]
            assert daemon["answers"]["get_default_active_thread_percentage"] == str(limit)

        (plugin,) = plugin_pods()
        core.delete_namespaced_pod(plugin.metadata.name, DRASAT_NAMESPACE)
        _wait("the old plugin pod gone", lambda: plugin.metadata.uid not in {
            p.metadata.uid for p in plugin_pods()})  # fmt: skip
        (new,) = _wait(
            "the plugin's new pod ready", lambda: [p for p in plugin_pods() if _ready(p)]
        )

        # The workloads kept running: the same containers, never restarted.
        for pod in probes():
            status = pod.status.container_statuses[0]
            assert pod.status.phase == "Running" and status.restart_count == 0, pod.metadata.name
            assert status.container_id == containers[pod.metadata.name]
        # Their daemon too: the same process, answering with the same limits.
        after = {d["name"]: d for d in our_daemons()}
        for daemon in ours:
            now = after[daemon["name"]]
            assert now["alive"] and now["pid"] == daemon["pid"], now
            assert now["answers"] == daemon["answers"]
        # The new plugin adopted it.
        log = core.read_namespaced_pod_log(new.metadata.name, DRASAT_NAMESPACE)
        for daemon in ours:
            adopted = re.compile(rf"MPS daemon {daemon['name']} \([^)]*\): adopted$", re.M)
            assert adopted.search(log), log[-3000:]
    finally:
        for pod in probes():
            with contextlib.suppress(kubernetes.client.ApiException):
                core.delete_namespaced_pod(pod.metadata.name, namespace)
        _wait("the probes gone", lambda: not probes(), 180)
        with contextlib.suppress(kubernetes.client.ApiException):
            core.delete_namespace(namespace)
    # Unprepared: the shares' daemon stopped and its folder removed.
    _wait("the shares' daemon stopped", lambda: not our_daemons(), 180)
