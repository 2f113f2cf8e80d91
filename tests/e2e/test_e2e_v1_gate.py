"""drasat's scheduling gate on the real control plane (issue 24).

Pods that use drasat's claims are created with the gate `gpu.drasat.io/allocation` (admission
puts it there; here the tests write it themselves, as admission would, so they do not depend on
it). kube-scheduler never tries a gated pod; drasat's controller allocates its claims, then lifts
its gate, and the scheduler binds the pod at its first try. Covered: gated pods bind, with every
allocation drasat's; the resourceclaim controller makes a gated pod's claims from templates (so
drasat sees them); pods of another driver are let go at once; another owner's gate (Kueue's) is
left alone and holds drasat back; a refused pod stays gated, with its reason on the pod and in
`drasat explain`, and `PodScheduled=False/SchedulingGated` as `kubectl describe` shows it; a
controller restarted with gated pods picks them up; and without a DeviceTaintRule (the default
of 1.34-1.36, which serve the kind only behind a feature gate) every gated pod is still
allocated by drasat.

`test_creation_to_bound_gated_vs_ungated` prints the path's time for one pod each way (not
asserted; the numbers are in docs/PERFORMANCE.md's timeline)."""

from __future__ import annotations

import contextlib
import pathlib
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import allockit
import drasatprocess
import kubernetes
import pytest
from kubecluster import wait_for
from kubeletkit import gpu_node
from kubernetes.client import ApiException
from slicekit import applied, unique

from drasat.api.groups import SCHEDULING_GATE
from drasat.controller import explain
from drasat.kube.client import KubeClient, load_configuration
from drasat.testbed.controlplane import realcluster

pytestmark = pytest.mark.timeout(400)

RESOURCE = ("resource.k8s.io", "v1")
KUEUE = "kueue.x-k8s.io/admission"
OTHER_DRIVER = "other.example.com"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def allocator(
    kube_api: kubernetes.client.ApiClient, kube_cluster: realcluster.Cluster
) -> Iterator[allockit.Allocator]:
    with allockit.allocator(kube_api, kube_cluster) as found:
        yield found


def _node(api: Any, kube: realcluster.Cluster, prefix: str, fleet: str) -> Any:
    return gpu_node(api, kube, unique(prefix), fleet, nas_namespace=allockit.NAMESPACE)


def _manifest(tmp: pathlib.Path, namespace: str, pods: str, device_class: str = "gpu.drasat.io",
              count: int = 1) -> pathlib.Path:  # fmt: skip
    """A namespace, a template `one` of `count` devices of `device_class`, and the pods."""
    path = tmp / f"{namespace}.yaml"
    path.write_text(textwrap.dedent(f"""
        apiVersion: v1
        kind: Namespace
        metadata: {{name: {namespace}}}
        ---
        apiVersion: resource.k8s.io/v1
        kind: ResourceClaimTemplate
        metadata: {{namespace: {namespace}, name: one}}
        spec:
          spec:
            devices:
              requests:
              - {{name: gpu, exactly: {{deviceClassName: {device_class}, allocationMode: ExactCount,
                 count: {count}}}}}""") + textwrap.dedent(pods))  # fmt: skip
    return path


def _pod(namespace: str, name: str, gates: tuple[str, ...] = (SCHEDULING_GATE,),
         claims: bool = True) -> str:  # fmt: skip
    gated = f"schedulingGates: [{', '.join(f'{{name: {g}}}' for g in gates)}]" if gates else ""
    uses = ", resources: {claims: [{name: gpu}]}" if claims else ""
    claim = "resourceClaims: [{name: gpu, resourceClaimTemplateName: one}]" if claims else ""
    return f"""
        ---
        apiVersion: v1
        kind: Pod
        metadata: {{namespace: {namespace}, name: {name}}}
        spec:
          containers: [{{name: c, image: x{uses}}}]
          {claim}
          {gated}"""


def _read(api: Any, namespace: str, name: str) -> Obj:
    pod: Obj = kubernetes.client.CoreV1Api(api).read_namespaced_pod(name, namespace).to_dict()
    return pod


def _gates(api: Any, namespace: str, name: str) -> list[str]:
    return [g["name"] for g in _read(api, namespace, name)["spec"].get("scheduling_gates") or []]


def _bound(api: Any, namespace: str, name: str) -> str | None:
    node: str | None = _read(api, namespace, name)["spec"].get("node_name")
    return node


def _condition(api: Any, namespace: str, name: str) -> tuple[str, str] | None:
    """PodScheduled's status and reason (what `kubectl describe pod` shows)."""
    for found in _read(api, namespace, name)["status"].get("conditions") or []:
        if found["type"] == "PodScheduled":
            return found["status"], found["reason"]
    return None


def _claims_of(api: Any, namespace: str) -> list[Obj]:
    custom = kubernetes.client.CustomObjectsApi(api)
    found: list[Obj] = custom.list_namespaced_custom_object(*RESOURCE, namespace, "resourceclaims")[
        "items"
    ]
    return found


def _events(api: Any, namespace: str, name: str, reason: str) -> list[str]:
    listed = kubernetes.client.CoreV1Api(api).list_namespaced_event(namespace).items
    return [e.message for e in listed
            if e.involved_object.name == name and e.reason == reason]  # fmt: skip


def _stays(check: Any, seconds: float) -> bool:
    """Whether `check()` holds all along `seconds` (something that must not happen)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not check():
            return False
        time.sleep(0.2)
    return True


def test_gated_pods_bind_with_drasats_allocation(
    kube_api: Any, kube_cluster: realcluster.Cluster, allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    namespace = "gate-bind"
    manifest = _manifest(tmp_path, namespace, _pod(namespace, "p1") + _pod(namespace, "p2"))
    with (
        _node(kube_api, kube_cluster, "gate", "2xT4") as node,
        applied(kube_api, manifest) as pods,
    ):
        runs = [node.wait_running(namespace, p["metadata"]["name"]) for p in pods]
        devices = sorted(d.device_name for run in runs for c in run.claims
                         for d in run.prepared[c.uid])  # fmt: skip
        assert devices == ["gpu-0", "gpu-1"]
        for pod in ("p1", "p2"):
            assert _gates(kube_api, namespace, pod) == []
        # The resourceclaim controller made the gated pods' claims; drasat allocated them.
        made = _claims_of(kube_api, namespace)
        assert len(made) == 2
        assert all(f"{namespace}/{c['metadata']['name']}" in allocator.allocated() for c in made)
        assert "scheduling gate gpu.drasat.io/allocation lifted" in allocator.text()
        allockit.consistent(kube_api, allocator)
        node.delete_pods(kube_api, namespace, "p1", "p2")
    allockit.consistent(kube_api, allocator)


@pytest.fixture(scope="module")
def other_driver(kube_api: Any) -> Iterator[str]:
    """A DeviceClass of another driver (no node publishes its devices)."""
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    body = {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": OTHER_DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{OTHER_DRIVER}"'}}]},
    }  # fmt: skip
    with contextlib.suppress(ApiException):
        custom.create_cluster_custom_object(*RESOURCE, "deviceclasses", body)
    yield OTHER_DRIVER
    with contextlib.suppress(ApiException):
        custom.delete_cluster_custom_object(*RESOURCE, "deviceclasses", OTHER_DRIVER)


def test_pods_of_another_driver_are_let_go_at_once(
    kube_api: Any, kube_cluster: realcluster.Cluster, allocator: allockit.Allocator,
    other_driver: str, tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    namespace = "gate-other"
    pods = _pod(namespace, "theirs") + _pod(namespace, "no-claims", claims=False)
    manifest = _manifest(tmp_path, namespace, pods, device_class=other_driver)
    with _node(kube_api, kube_cluster, "gate-o", "1xT4"), applied(kube_api, manifest):
        for pod in ("theirs", "no-claims"):
            wait_for(lambda p=pod: not _gates(kube_api, namespace, p), timeout=10,
                     what=f"drasat to let {pod} go")  # fmt: skip
        # Now kube-scheduler's: the pod without claims binds; the other driver's claim is not
        # drasat's to allocate (and no node has its devices).
        wait_for(lambda: _bound(kube_api, namespace, "no-claims"), timeout=30)
        assert not any(c.get("status", {}).get("allocation")
                       for c in _claims_of(kube_api, namespace))  # fmt: skip
        allockit.consistent(kube_api, allocator)


def test_another_owners_gate_is_left_alone(
    kube_api: Any, kube_cluster: realcluster.Cluster, allocator: allockit.Allocator,
    other_driver: str, tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    namespace = "gate-kueue"
    pods = _pod(namespace, "queued", (KUEUE, SCHEDULING_GATE))
    manifest = _manifest(tmp_path, namespace, pods)
    with (
        _node(kube_api, kube_cluster, "gate-k", "1xT4") as node,
        applied(kube_api, manifest),
    ):
        wait_for(lambda: _claims_of(kube_api, namespace), timeout=30, what="the pod's claim")
        # Kueue holds the pod: drasat gives it no device and touches no gate.
        assert _stays(lambda: _gates(kube_api, namespace, "queued") == [KUEUE, SCHEDULING_GATE]
                      and not _claims_of(kube_api, namespace)[0].get("status"), 3)  # fmt: skip
        # Kueue admits it: drasat allocates, lifts its own gate, the pod runs.
        core = kubernetes.client.CoreV1Api(kube_api)
        gates = [{"op": "replace", "path": "/spec/schedulingGates",
                  "value": [{"name": SCHEDULING_GATE}]}]  # fmt: skip
        core.patch_namespaced_pod("queued", namespace, gates)
        node.wait_running(namespace, "queued")
        assert _gates(kube_api, namespace, "queued") == []
        allockit.consistent(kube_api, allocator)
        node.delete_pods(kube_api, namespace, "queued")

    # A Kueue-held pod with nothing for drasat: drasat's gate goes, Kueue's stays.
    namespace = "gate-kueue-other"
    manifest = _manifest(tmp_path, namespace, _pod(namespace, "queued", (SCHEDULING_GATE, KUEUE)),
                         device_class=other_driver)  # fmt: skip
    with applied(kube_api, manifest):
        wait_for(lambda: _gates(kube_api, namespace, "queued") == [KUEUE], timeout=10,
                 what="drasat to lift its own gate only")  # fmt: skip


def test_a_refused_pod_stays_gated_with_its_reason(
    kube_api: Any, kube_cluster: realcluster.Cluster, allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    namespace = "gate-refused"
    manifest = _manifest(tmp_path, namespace, _pod(namespace, "greedy"), count=3)
    with _node(kube_api, kube_cluster, "gate-r", "2xT4"), applied(kube_api, manifest):
        wait_for(lambda: _events(kube_api, namespace, "greedy", "NotAllocatable"), timeout=30,
                 what=f"the refusal's Event\n{allocator.text()[-3000:]}")  # fmt: skip
        (text,) = _events(kube_api, namespace, "greedy", "NotAllocatable")
        assert f"held by drasat's scheduling gate {SCHEDULING_GATE}" in text
        assert _gates(kube_api, namespace, "greedy") == [SCHEDULING_GATE]
        # What kubectl describe shows (kube-scheduler's own condition for a gated pod).
        assert _condition(kube_api, namespace, "greedy") == ("False", "SchedulingGated")
        client = KubeClient(load_configuration(str(kube_cluster.kubeconfig)))
        try:
            said = explain.explain(
                client, namespace, "greedy", options=explain.Options(namespace=allockit.NAMESPACE)
            )
        finally:
            client.close()
        assert f"held by drasat's scheduling gate {SCHEDULING_GATE}" in said, said
        allockit.consistent(kube_api, allocator)


def test_a_restarted_controller_picks_up_gated_pods(
    kube_api: Any, kube_cluster: realcluster.Cluster, allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    namespace = "gate-restart"
    manifest = _manifest(tmp_path, namespace, _pod(namespace, "p1") + _pod(namespace, "p2"))
    drasatprocess.stop(allocator.process)
    try:
        with (
            _node(kube_api, kube_cluster, "gate-s", "2xT4") as node,
            applied(kube_api, manifest),
        ):
            # No controller: the gate stays, and kubectl describe says why the pod waits.
            wait_for(lambda: _condition(kube_api, namespace, "p1") == ("False", "SchedulingGated"),
                     timeout=30, what="PodScheduled=False/SchedulingGated")  # fmt: skip
            assert _gates(kube_api, namespace, "p1") == [SCHEDULING_GATE]
            allocator.restart()
            for pod in ("p1", "p2"):
                node.wait_running(namespace, pod)
                assert _gates(kube_api, namespace, pod) == []
            allockit.consistent(kube_api, allocator)
            node.delete_pods(kube_api, namespace, "p1", "p2")
    finally:
        if allocator.process.poll() is not None:
            allocator.restart()
    allockit.consistent(kube_api, allocator)


def _timed_pod(namespace: str, name: str, gates: tuple[str, ...]) -> Obj:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one"}],
            "schedulingGates": [{"name": g} for g in gates],
        },
    }


def _bound_after(api: Any, namespace: str, names: list[str], started: float) -> list[float]:
    """Seconds from `started` until each pod was seen bound (polled every 10 ms)."""
    took: dict[str, float] = {}
    deadline = started + 120
    while len(took) < len(names):
        assert time.monotonic() < deadline, f"not bound: {sorted(set(names) - set(took))}"
        for pod in kubernetes.client.CoreV1Api(api).list_namespaced_pod(namespace).items:
            if pod.metadata.name in names and pod.spec.node_name and pod.metadata.name not in took:
                took[pod.metadata.name] = time.monotonic() - started
        time.sleep(0.01)
    return sorted(took.values())


def test_creation_to_bound_gated_vs_ungated(
    kube_api: Any, kube_cluster: realcluster.Cluster, allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    """Creation -> bound, gated and not (printed, not asserted): one pod at a time on an idle
    cluster, then bursts of 8 pods created together on 8 GPUs."""
    core = kubernetes.client.CoreV1Api(kube_api)
    namespace = "gate-timing"
    manifest = _manifest(tmp_path, namespace, "")
    kinds = (("gated", (SCHEDULING_GATE,)), ("ungated", ()))
    single: dict[str, list[float]] = {"gated": [], "ungated": []}
    burst: dict[str, list[float]] = {"gated": [], "ungated": []}
    with _node(kube_api, kube_cluster, "gate-t", "8xT4") as node, applied(kube_api, manifest):
        for round_ in range(3):
            for kind, gates in kinds:
                name = f"{kind}-{round_}"
                started = time.monotonic()
                core.create_namespaced_pod(namespace, _timed_pod(namespace, name, gates))
                single[kind] += _bound_after(kube_api, namespace, [name], started)
                node.delete_pods(kube_api, namespace, name)
        for round_ in range(2):
            for kind, gates in kinds:
                names = [f"{kind}-b{round_}-{i}" for i in range(8)]
                # Every GPU free again (the last burst's claims released), so none waits.
                wait_for(lambda: not allockit.ledgers(kube_api).get(node.name), timeout=60,
                         what="the last burst's claims released")  # fmt: skip
                started = time.monotonic()
                for name in names:
                    core.create_namespaced_pod(namespace, _timed_pod(namespace, name, gates))
                burst[kind] += _bound_after(kube_api, namespace, names, started)
                node.delete_pods(kube_api, namespace, *names)
    for kind in single:
        print(f"creation -> bound, {kind}, one pod: "
              + ", ".join(f"{s:.2f}s" for s in single[kind]))  # fmt: skip
        found = sorted(burst[kind])
        print(f"creation -> bound, {kind}, bursts of 8: p50 {found[len(found) // 2]:.2f}s, "
              f"max {found[-1]:.2f}s (" + ", ".join(f"{s:.2f}" for s in found) + ")")  # fmt: skip
    allockit.consistent(kube_api, allocator)


def test_churn_gated_vs_ungated(
    kube_api: Any, kube_cluster: realcluster.Cluster, allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    """Creation -> bound under a light churn (printed, not asserted): 24 pods, one every 0.5 s,
    each deleted 1.5 s after it is bound, on 8 GPUs (never more than about 4 in use, so no pod
    waits for a device: the time is the path's)."""
    core = kubernetes.client.CoreV1Api(kube_api)
    namespace = "gate-churn"
    manifest = _manifest(tmp_path, namespace, "")
    kinds = (("gated", (SCHEDULING_GATE,)), ("ungated", ()))
    took: dict[str, list[float]] = {}
    with _node(kube_api, kube_cluster, "gate-c", "8xT4"), applied(kube_api, manifest):
        for kind, gates in kinds:
            created: dict[str, float] = {}
            bound: dict[str, float] = {}
            deleted: set[str] = set()
            start = time.monotonic()
            while len(bound) < 24:
                now = time.monotonic()
                assert now - start < 120, f"{kind}: {24 - len(bound)} pods not bound"
                if len(created) < 24 and now - start >= 0.5 * len(created):
                    name = f"{kind}-{len(created)}"
                    core.create_namespaced_pod(namespace, _timed_pod(namespace, name, gates))
                    created[name] = time.monotonic()
                for pod in core.list_namespaced_pod(namespace).items:
                    name = pod.metadata.name
                    if name in created and pod.spec.node_name and name not in bound:
                        bound[name] = time.monotonic()
                for name, at in bound.items():
                    if name not in deleted and time.monotonic() - at > 1.5:
                        core.delete_namespaced_pod(name, namespace)
                        deleted.add(name)
                time.sleep(0.01)
            took[kind] = sorted(bound[n] - created[n] for n in bound)
            for name in set(created) - deleted:
                core.delete_namespaced_pod(name, namespace)
            wait_for(lambda: not core.list_namespaced_pod(namespace).items, timeout=60,
                     what="the churn's pods deleted")  # fmt: skip
    for kind, found in took.items():
        p50, p90 = found[len(found) // 2], found[int(len(found) * 0.9)]
        print(f"churn creation -> bound, {kind}: p50 {p50:.2f}s, p90 {p90:.2f}s, "
              f"max {found[-1]:.2f}s")  # fmt: skip
    allockit.consistent(kube_api, allocator)


def test_without_a_taint_rule_gated_pods_are_drasats(
    kube_api: Any, kube_cluster: realcluster.Cluster, allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    """No DeviceTaintRule: nothing keeps kube-scheduler's allocator off drasat's devices but the
    gate (what a 1.34-1.36 cluster with default settings offers: the kind is behind a feature
    gate and runtime-config there). 1.37's scheduler cannot run with the kind switched off (the
    gate is GA and its informer never syncs), so the controller runs here with
    `--no-device-taint` and the rule deleted: the same cluster from drasat's side."""
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    drasatprocess.stop(allocator.process)
    custom.delete_cluster_custom_object(*RESOURCE, "devicetaintrules", "drasat-allocator")
    allocator.restart("--no-device-taint")
    try:
        namespace = "gate-no-taint"
        pods = "".join(_pod(namespace, f"p{i}") for i in range(3))
        manifest = _manifest(tmp_path, namespace, pods)
        with (
            _node(kube_api, kube_cluster, "gate-n", "3xT4") as node,
            applied(kube_api, manifest),
        ):
            for i in range(3):
                node.wait_running(namespace, f"p{i}")
            # Every allocation of drasat's devices is drasat's own: kube-scheduler's allocator
            # never saw a gated pod, and no taint kept it off.
            allockit.consistent(kube_api, allocator)
            node.delete_pods(kube_api, namespace, *(f"p{i}" for i in range(3)))
    finally:
        allocator.restart()  # with its DeviceTaintRule again, for the tests after this one
        wait_for(lambda: _taint_rule_back(custom), timeout=60, what="the DeviceTaintRule")
    allockit.consistent(kube_api, allocator)


def _taint_rule_back(custom: Any) -> bool:
    try:
        custom.get_cluster_custom_object(*RESOURCE, "devicetaintrules", "drasat-allocator")
    except ApiException:
        return False
    return True
