"""The simulated controller manager's workload controllers (`drasat.testbed.sim.controllers`)
against kube-controller-manager v1.37.2's deployment, replicaset and job controllers: the objects
and pods they make, their names, labels and owners, scaling, and Job completion counting.

On "real" the session control plane's kube-controller-manager runs those controllers; on "sim"
the simulated one runs. Pods are bound to this test's fake node by its nodeSelector; nothing runs
them, so the tests set their phase.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from contract import Backend
from kubecluster import create_fake_node, wait_for
from kubernetes.client import ApiException

from drasat.testbed.sim import controllers, kubeclient, v1scheduler

LABEL = "test.drasat.io/workloads"
#: rand.SafeEncodeString's alphabet: generated suffixes and pod-template-hash values.
SAFE = "[bcdfghjklmnpqrstvwxz2456789]"


@pytest.fixture
def workload_controllers(backend: Backend, request: pytest.FixtureRequest) -> Iterator[None]:
    if backend.sim:
        assert backend.server is not None
        url = backend.server.url
        with (
            v1scheduler.V1Scheduler(kubeclient.KubeClient(url), resync=0.2),
            controllers.ControllerManager(kubeclient.KubeClient(url), resync=0.2),
        ):
            yield
        return
    # The session's kube-controller-manager runs the workload controllers
    # (drasat.testbed.controlplane.realcluster.WORKLOAD_CONTROLLERS).
    request.getfixturevalue("kube_cluster")
    yield


@pytest.fixture
def node(backend: Backend) -> Iterator[str]:
    name = f"{backend.namespace}-w"
    create_fake_node(backend.api, name, labels={LABEL: backend.namespace})
    yield name
    with contextlib.suppress(ApiException):
        backend.core.delete_node(name)


def _template(backend: Backend, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "w"}},
        "spec": {
            "nodeSelector": {LABEL: backend.namespace},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            **spec,
        },
    }


def _live_pods(backend: Backend) -> list[Any]:
    pods = backend.core.list_namespaced_pod(backend.namespace).items
    return sorted(
        (p for p in pods if p.metadata.deletion_timestamp is None),
        key=lambda p: p.metadata.name,
    )


def _controller(obj: Any) -> Any:
    (owner,) = [o for o in obj.metadata.owner_references or [] if o.controller]
    return owner


@pytest.mark.usefixtures("workload_controllers")
def test_a_deployment_makes_a_replicaset_and_its_pods(backend: Backend, node: str) -> None:
    apps = kubernetes.client.AppsV1Api(backend.api)
    ns = backend.namespace
    deployment = apps.create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "w"}},
                "template": _template(backend),
            },
        },
    )
    sets = wait_for(
        lambda: apps.list_namespaced_replica_set(ns).items, timeout=30, what="a ReplicaSet"
    )
    (rs,) = sets
    digest = rs.metadata.labels["pod-template-hash"]
    assert re.fullmatch(f"{SAFE}{{1,10}}", digest), digest
    assert rs.metadata.name == f"web-{digest}"
    assert rs.metadata.labels == {"app": "w", "pod-template-hash": digest}
    assert rs.spec.selector.match_labels == {"app": "w", "pod-template-hash": digest}
    assert rs.spec.replicas == 2
    owner = _controller(rs)
    assert (owner.kind, owner.name, owner.uid) == ("Deployment", "web", deployment.metadata.uid)
    assert owner.block_owner_deletion is True

    pods = wait_for(
        lambda: (p := _live_pods(backend)) and len(p) == 2 and p, timeout=30, what="2 pods"
    )
    for pod in pods:
        assert re.fullmatch(f"web-{digest}-{SAFE}{{5}}", pod.metadata.name), pod.metadata.name
        assert pod.metadata.labels == {"app": "w", "pod-template-hash": digest}
        owner = _controller(pod)
        assert (owner.kind, owner.name, owner.uid) == (
            "ReplicaSet",
            rs.metadata.name,
            rs.metadata.uid,
        )
    bound = wait_for(
        lambda: all(p.spec.node_name for p in _live_pods(backend)), timeout=30, what="bound"
    )
    assert bound

    apps.patch_namespaced_deployment("web", ns, {"spec": {"replicas": 1}})
    wait_for(lambda: len(_live_pods(backend)) == 1, timeout=30, what="scaled to 1")
    wait_for(
        lambda: apps.read_namespaced_replica_set(rs.metadata.name, ns).spec.replicas == 1,
        timeout=30,
        what="the ReplicaSet scaled",
    )


@pytest.mark.usefixtures("workload_controllers")
def test_a_job_runs_completions_pods_parallelism_at_a_time(backend: Backend, node: str) -> None:
    batch = kubernetes.client.BatchV1Api(backend.api)
    ns, core = backend.namespace, backend.core
    job = batch.create_namespaced_job(
        ns,
        {
            "metadata": {"name": "train"},
            "spec": {
                "completions": 2,
                "parallelism": 1,
                "template": _template(backend, restartPolicy="Never"),
            },
        },
    )
    uid = job.metadata.uid

    def running() -> list[Any]:
        return [p for p in _live_pods(backend) if p.status.phase not in ("Succeeded", "Failed")]

    (first,) = wait_for(running, timeout=30, what="the first pod")
    assert re.fullmatch(f"train-{SAFE}{{5}}", first.metadata.name), first.metadata.name
    labels = first.metadata.labels
    assert labels["batch.kubernetes.io/job-name"] == labels["job-name"] == "train"
    assert labels["batch.kubernetes.io/controller-uid"] == labels["controller-uid"] == uid
    owner = _controller(first)
    assert (owner.kind, owner.name, owner.uid) == ("Job", "train", uid)

    def succeed(pod: Any) -> None:
        wait_for(lambda: core.read_namespaced_pod(pod.metadata.name, ns).spec.node_name)
        core.patch_namespaced_pod_status(pod.metadata.name, ns, {"status": {"phase": "Succeeded"}})

    succeed(first)
    (second,) = wait_for(
        lambda: [p for p in running() if p.metadata.name != first.metadata.name],
        timeout=30,
        what="the second pod",
    )
    succeed(second)

    def complete() -> Any:
        status = batch.read_namespaced_job_status("train", ns).status
        types = [c.type for c in status.conditions or [] if c.status == "True"]
        return "Complete" in types and status

    status = wait_for(complete, timeout=30, what="the Job complete")
    assert status.succeeded == 2 and not status.active
    assert [c.type for c in status.conditions] == ["SuccessCriteriaMet", "Complete"]
    assert len(core.list_namespaced_pod(ns).items) == 2  # no third pod
