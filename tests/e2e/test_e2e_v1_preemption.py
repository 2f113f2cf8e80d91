"""Preemption for drasat's devices on the real control plane (issue 27 items 1 and 4).

drasat's controller runs against the real API server and kube-scheduler; simulated kubelets run
the pods through the node plugins. Pods get their priority from PriorityClasses through the API
server's Priority admission (`priorityClassName`). A high-priority pod whose GPU claim fits
nowhere evicts, through the Eviction API, the one lower-priority pod the solver chooses — the
smallest of those that free a GPU, not the first it finds — and runs on the GPU it freed; a pod
a PodDisruptionBudget protects is never the victim."""

from __future__ import annotations

import contextlib
import pathlib
import textwrap
from collections.abc import Iterator
from typing import Any

import allockit
import kubernetes
import pytest
import yaml
from kubecluster import wait_for
from kubeletkit import gpu_node
from kubernetes.client import ApiException
from slicekit import applied, unique

from drasat.api.groups import SCHEDULING_GATE
from drasat.testbed.controlplane import realcluster

pytestmark = pytest.mark.timeout(400)

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def allocator(
    kube_api: kubernetes.client.ApiClient, kube_cluster: realcluster.Cluster
) -> Iterator[allockit.Allocator]:
    with allockit.allocator(kube_api, kube_cluster) as found:
        yield found


@pytest.fixture(scope="module")
def priorities(kube_api: Any) -> Iterator[dict[str, str]]:
    """PriorityClasses low (10), mid (20) and high (1000), named uniquely for this run."""
    scheduling = kubernetes.client.SchedulingV1Api(kube_api)
    names = {level: unique(f"preempt-{level}") for level in ("low", "mid", "high")}
    for level, value in (("low", 10), ("mid", 20), ("high", 1000)):
        scheduling.create_priority_class({"metadata": {"name": names[level]}, "value": value})
    yield names
    for name in names.values():
        with contextlib.suppress(ApiException):
            scheduling.delete_priority_class(name)


def _manifest(tmp: pathlib.Path, namespace: str, pods: list[tuple[str, int, str, dict]]) -> Any:
    """A namespace, templates `gpu1` and `gpu2` (1 and 2 GPUs), and gated pods (name, GPUs,
    PriorityClass, labels)."""
    path = tmp / f"{namespace}.yaml"
    text = textwrap.dedent(f"""
        apiVersion: v1
        kind: Namespace
        metadata: {{name: {namespace}}}
        """)
    for count in (1, 2):
        text += textwrap.dedent(f"""
            ---
            apiVersion: resource.k8s.io/v1
            kind: ResourceClaimTemplate
            metadata: {{namespace: {namespace}, name: gpu{count}}}
            spec:
              spec:
                devices:
                  requests:
                  - {{name: gpu, exactly: {{deviceClassName: gpu.drasat.io,
                     allocationMode: ExactCount, count: {count}}}}}
            """)
    for name, count, priority, labels in pods:
        text += "---\n" + _pod(namespace, name, count, priority, labels)
    path.write_text(text)
    return path


def _pod(namespace: str, name: str, count: int, priority: str, labels: dict | None = None) -> str:
    return textwrap.dedent(f"""
        apiVersion: v1
        kind: Pod
        metadata: {{namespace: {namespace}, name: {name}, labels: {labels or {}}}}
        spec:
          priorityClassName: {priority}
          terminationGracePeriodSeconds: 1
          containers: [{{name: c, image: x, resources: {{claims: [{{name: gpu}}]}}}}]
          resourceClaims: [{{name: gpu, resourceClaimTemplateName: gpu{count}}}]
          schedulingGates: [{{name: {SCHEDULING_GATE}}}]
        """)


def _create(api: Any, namespace: str, text: str) -> None:
    kubernetes.client.CoreV1Api(api).create_namespaced_pod(namespace, yaml.safe_load(text))


def _running(node: Any, allocator: allockit.Allocator, namespace: str, name: str) -> Any:
    try:
        return node.wait_running(namespace, name, timeout=120)
    except AssertionError as error:
        raise AssertionError(f"{error}\ncontroller log:\n{allocator.text()[-6000:]}") from None


def _pods(api: Any, namespace: str) -> dict[str, Any]:
    listed = kubernetes.client.CoreV1Api(api).list_namespaced_pod(namespace).items
    return {p.metadata.name: p for p in listed}


def _events(api: Any, namespace: str, name: str, reason: str) -> list[str]:
    listed = kubernetes.client.CoreV1Api(api).list_namespaced_event(namespace).items
    return [e.message for e in listed
            if e.involved_object.name == name and e.reason == reason]  # fmt: skip


def test_the_smallest_lower_priority_pod_is_preempted_not_the_first(
    kube_api: Any, kube_cluster: realcluster.Cluster, allocator: allockit.Allocator,
    priorities: dict[str, str], tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    """4 GPUs: `big` (2 GPUs, low, created first), `small` (1 GPU, low) and `keep` (1 GPU,
    high). A high 1-GPU pod: evicting `big` or `small` frees a GPU, one victim either way, of
    equal priority; `small` holds fewer devices, so it goes; `keep` never (equal priority)."""
    namespace = "preempt-small"
    low, high = priorities["low"], priorities["high"]
    manifest = _manifest(
        tmp_path, namespace, [("big", 2, low, {}), ("small", 1, low, {}), ("keep", 1, high, {})]
    )
    node_name = unique("preempt")
    with (
        gpu_node(kube_api, kube_cluster, node_name, "4xT4", nas_namespace=allockit.NAMESPACE)
        as node,
        applied(kube_api, manifest),
    ):  # fmt: skip
        for name in ("big", "small", "keep"):
            node.wait_running(namespace, name)
        _create(kube_api, namespace, _pod(namespace, "urgent", 1, high))
        run = _running(node, allocator, namespace, "urgent")
        wait_for(lambda: "small" not in _pods(kube_api, namespace), timeout=60,
                 what="the victim to be gone")  # fmt: skip
        pods = _pods(kube_api, namespace)
        assert {"big", "keep", "urgent"} <= set(pods), sorted(pods)
        assert all(pods[p].metadata.deletion_timestamp is None for p in ("big", "keep"))
        (said,) = _events(kube_api, namespace, "urgent", "Preempting")
        wanted = f"evicted {namespace}/small (priority 10) to free the devices this pod "
        assert said.startswith(wanted + f"(priority 1000) needs on node {node_name}"), said
        assert "proven optimal" in said
        (victim,) = _events(kube_api, namespace, "small", "Preempted")
        assert f"for pod {namespace}/urgent (priority 1000)" in victim
        assert not _events(kube_api, namespace, "big", "Preempted")
        assert len([d for c in run.claims for d in run.prepared[c.uid]]) == 1
        allockit.consistent(kube_api, allocator)
        node.delete_pods(kube_api, namespace, "big", "keep", "urgent")
    allockit.consistent(kube_api, allocator)


def test_a_disruption_budget_is_respected(
    kube_api: Any, kube_cluster: realcluster.Cluster, allocator: allockit.Allocator,
    priorities: dict[str, str], tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    """2 GPUs: `guarded` (low, a PodDisruptionBudget allows no disruption) and `free` (mid). The
    cheapest victim would be `guarded` (lower priority); the budget keeps it, so `free` goes."""
    namespace = "preempt-pdb"
    low, mid, high = priorities["low"], priorities["mid"], priorities["high"]
    manifest = _manifest(
        tmp_path, namespace, [("guarded", 1, low, {"app": "guarded"}), ("free", 1, mid, {})]
    )
    policy = kubernetes.client.PolicyV1Api(kube_api)
    with (
        gpu_node(kube_api, kube_cluster, unique("preempt-pdb"), "2xT4",
                 nas_namespace=allockit.NAMESPACE) as node,
        applied(kube_api, manifest),
    ):  # fmt: skip
        for name in ("guarded", "free"):
            node.wait_running(namespace, name)
        budget = {
            "metadata": {"name": "keep-guarded", "namespace": namespace},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        }
        policy.create_namespaced_pod_disruption_budget(namespace, budget)
        # The status kube-controller-manager's disruption controller would write (the test
        # cluster does not run it): one healthy pod, one wanted, no disruption allowed.
        healthy = {"currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
        status = {"status": {"observedGeneration": 1, "disruptionsAllowed": 0, **healthy}}
        policy.patch_namespaced_pod_disruption_budget_status("keep-guarded", namespace, status)
        _create(kube_api, namespace, _pod(namespace, "urgent", 1, high))
        _running(node, allocator, namespace, "urgent")
        pods = _pods(kube_api, namespace)
        assert "free" not in pods or pods["free"].metadata.deletion_timestamp is not None
        assert pods["guarded"].metadata.deletion_timestamp is None
        (said,) = _events(kube_api, namespace, "urgent", "Preempting")
        assert f"evicted {namespace}/free (priority 20)" in said, said
        assert not _events(kube_api, namespace, "guarded", "Preempted")
        allockit.consistent(kube_api, allocator)
        node.delete_pods(kube_api, namespace, "guarded", "urgent")
    allockit.consistent(kube_api, allocator)


def _evict(api: Any, namespace: str, name: str, *, dry_run: bool) -> None:
    body: Obj = {"apiVersion": "policy/v1", "kind": "Eviction",
                 "metadata": {"name": name, "namespace": namespace}}  # fmt: skip
    if dry_run:
        body["deleteOptions"] = {"dryRun": ["All"]}
    kubernetes.client.CoreV1Api(api).create_namespaced_pod_eviction(name, namespace, body)


def test_a_plan_counts_a_budget_across_its_victims_which_dry_runs_do_not(
    kube_api: Any, kube_cluster: realcluster.Cluster, allocator: allockit.Allocator,
    priorities: dict[str, str], tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    """3 GPUs: `a` and `b` (low, one budget allowing 1 disruption) and `c` (mid). The real API
    server passes a dry-run eviction of each of `a` and `b` (a dry run spends no allowance), so
    only the plan can keep from choosing both: a high 2-GPU pod would cost least with `a` and
    `b`; the budget allows one of them, so `c` and one of them go, and no eviction is refused."""
    namespace = "preempt-budget-set"
    low, mid, high = priorities["low"], priorities["mid"], priorities["high"]
    labels = {"app": "x"}
    manifest = _manifest(
        tmp_path, namespace, [("a", 1, low, labels), ("b", 1, low, labels), ("c", 1, mid, {})]
    )
    policy = kubernetes.client.PolicyV1Api(kube_api)
    with (
        gpu_node(kube_api, kube_cluster, unique("preempt-set"), "3xT4",
                 nas_namespace=allockit.NAMESPACE) as node,
        applied(kube_api, manifest),
    ):  # fmt: skip
        for name in ("a", "b", "c"):
            node.wait_running(namespace, name)
        budget = {
            "metadata": {"name": "one-of-x", "namespace": namespace},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
        }
        policy.create_namespaced_pod_disruption_budget(namespace, budget)
        healthy = {"currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2}
        status = {"status": {"observedGeneration": 1, "disruptionsAllowed": 1, **healthy}}
        policy.patch_namespaced_pod_disruption_budget_status("one-of-x", namespace, status)
        for name in ("a", "b"):
            _evict(kube_api, namespace, name, dry_run=True)  # both pass: nothing spent
        _create(kube_api, namespace, _pod(namespace, "urgent", 2, high))
        _running(node, allocator, namespace, "urgent")
        pods = _pods(kube_api, namespace)
        gone = {p for p in ("a", "b", "c")
                if p not in pods or pods[p].metadata.deletion_timestamp is not None}  # fmt: skip
        assert "c" in gone and len(gone & {"a", "b"}) == 1, sorted(gone)
        assert not _events(kube_api, namespace, "urgent", "PreemptionRefused")
        allockit.consistent(kube_api, allocator)
        node.delete_pods(kube_api, namespace, *sorted(set(pods) - gone))
    allockit.consistent(kube_api, allocator)


def test_a_pod_group_is_disrupted_as_its_disruption_mode_says(
    kube_api: Any, kube_cluster: realcluster.Cluster, allocator: allockit.Allocator,
    priorities: dict[str, str], tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    """The Workload API of 1.37 (GenericWorkload on): a PodGroup without `disruptionMode` is
    served back with `single` (the default drasat reads as 'pod by pod') and the priority of its
    `priorityClassName` (Priority admission); `g0` and `g1` (low,
    1 GPU each) of a PodGroup with `disruptionMode: all` fill a 2-GPU node: a high 1-GPU pod
    evicts both (the group goes whole), not one."""
    namespace = "preempt-podgroup"
    low, high = priorities["low"], priorities["high"]
    manifest = _manifest(tmp_path, namespace, [])
    text = manifest.read_text()
    for name in ("g0", "g1"):
        pod = yaml.safe_load(_pod(namespace, name, 1, low))
        pod["spec"]["schedulingGroup"] = {"podGroupName": "team"}
        text += "---\n" + yaml.safe_dump(pod)
    manifest.write_text(text)
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    group = ("scheduling.k8s.io", "v1beta1", namespace, "podgroups")

    def pod_group(name: str, mode: Obj | None) -> Obj:
        # Its pods' class: kube-scheduler 1.37 schedules no pod whose priority is not its
        # group's ("all pods in a single pod group should have the same priority").
        spec: Obj = {"schedulingPolicy": {"basic": {}}, "priorityClassName": low}
        if mode is not None:
            spec["disruptionMode"] = mode
        body = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}  # fmt: skip
        return custom.create_namespaced_custom_object(*group, body)  # type: ignore[no-any-return]

    with (
        gpu_node(kube_api, kube_cluster, unique("preempt-pg"), "2xT4",
                 nas_namespace=allockit.NAMESPACE) as node,
        applied(kube_api, manifest),
    ):  # fmt: skip
        plain = pod_group("plain", None)["spec"]
        assert plain.get("disruptionMode") == {"single": {}}, plain
        assert plain.get("priority") == 10, plain  # Priority admission, from the class
        pod_group("team", {"all": {}})
        for name in ("g0", "g1"):
            node.wait_running(namespace, name)
        _create(kube_api, namespace, _pod(namespace, "urgent", 1, high))
        _running(node, allocator, namespace, "urgent")
        pods = _pods(kube_api, namespace)
        for name in ("g0", "g1"):
            assert name not in pods or pods[name].metadata.deletion_timestamp is not None, name
            assert _events(kube_api, namespace, name, "Preempted"), name
        allockit.consistent(kube_api, allocator)
        node.delete_pods(kube_api, namespace, "urgent")
    allockit.consistent(kube_api, allocator)
