"""Preemption inside the v1 controller's cycle, on the in-process API server: plans are made over
the cycle's own placements, a freed device goes to the highest priority first, the allocation
held for a nominee keeps lower and equal priorities off it (a higher priority takes it), and a
controller that starts again reads the hold back from the pod. The simulated API server serves
no Eviction API: a recording proxy evicts by deleting the pod (the real one is
tests/e2e/test_e2e_v1_preemption.py)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import ctl_slices
import pytest
from ctl_cluster import NS, add_node, t4

from drasat.api import crds
from drasat.api.devicemodel import classes
from drasat.api.groups import NOMINATION_ANNOTATION, SCHEDULING_GATE
from drasat.api.policy import AllocationPolicySpec
from drasat.controller import explain
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, ObjectList, configuration_for
from drasat.kube.resources import Resource
from drasat.testbed.sim import apiserver

Obj = dict[str, Any]


class Evicting:
    """The API, with evictions recorded and done as deletes, and no PodDisruptionBudgets."""

    def __init__(self, api: KubeClient) -> None:
        self.api = api
        self.evicted: list[str] = []

    def create(self, resource: Resource, body: Obj, *, namespace: str | None = None) -> Obj:
        if resource.kind == "Eviction":
            name = body["metadata"]["name"]
            if (body.get("deleteOptions") or {}).get("dryRun"):
                return body  # checked, not done (no budgets here)
            self.evicted.append(f"{namespace}/{name}")
            self.api.delete(r.PODS, name, namespace=namespace)
            return body
        return self.api.create(resource, body, namespace=namespace)

    def list(self, resource: Resource, **kw: Any) -> ObjectList:
        if resource.kind == "PodDisruptionBudget":
            return ObjectList([], "1")
        return self.api.list(resource, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)


@pytest.fixture
def api() -> Iterator[KubeClient]:
    with apiserver.ApiServer.running(crds=crds.all_crds()) as running:
        client = KubeClient(configuration_for(running.url), request_timeout=10)
        for body in classes.device_classes():
            client.create(r.DEVICE_CLASSES_V1, body)
        yield client
        client.close()


@pytest.fixture
def controller(api: KubeClient) -> Iterator[Callable[..., tuple[V1Controller, Evicting]]]:
    made: list[V1Controller] = []

    def make() -> tuple[V1Controller, Evicting]:
        spec = AllocationPolicySpec()
        found = V1Controller(api, V1Config(namespace=NS, batch_window_s=0), policy=lambda: spec)
        proxy = Evicting(api)
        found.preemption.api = proxy  # type: ignore[assignment]
        found.start(sync_timeout_s=10, cycles=False)
        made.append(found)
        return found, proxy

    yield make
    for found in made:
        found.stop()


def _node(api: KubeClient, name: str, gpus: int) -> None:
    api.create(r.NODES, {"metadata": {"name": name},
                         "status": {"allocatable": {"cpu": "8", "memory": "32Gi",
                                                    "pods": "110"}}})  # fmt: skip
    devices = [t4(i) for i in range(gpus)]
    add_node(api, name, devices)
    ctl_slices.publish(api, name, devices)


def _pod(api: KubeClient, name: str, priority: int, gpus: int = 1) -> None:
    """A pod with a claim of its own (owned by it, as a template's claim is)."""
    pod = api.create(
        r.PODS,
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "priority": priority,
                "containers": [{"name": "c", "image": "x"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                "schedulingGates": [{"name": SCHEDULING_GATE}],
            },
        },
        namespace="default",
    )
    owner = {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod["metadata"]["uid"],
             "controller": True}  # fmt: skip
    api.create(
        r.RESOURCE_CLAIMS_V1,
        {
            "metadata": {"name": name, "namespace": "default", "ownerReferences": [owner]},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.drasat.io", "count": gpus}}]}},
        },
        namespace="default",
    )  # fmt: skip


def _bind(api: KubeClient, name: str, node: str) -> None:
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
               "target": {"apiVersion": "v1", "kind": "Node", "name": node}}  # fmt: skip
    api.create(Resource("", "v1", f"pods/{name}/binding", "Binding"), binding, namespace="default")


def _allocated(api: KubeClient, claim: str) -> bool:
    found = api.get(r.RESOURCE_CLAIMS_V1, claim, namespace="default")
    return bool((found.get("status") or {}).get("allocation"))


def _gone(api: KubeClient, name: str) -> None:
    """The pod's claim deleted too (the garbage collector's part), and the ledger settled."""
    for resource in (r.PODS, r.RESOURCE_CLAIMS_V1):
        with contextlib.suppress(errors.NotFound):
            api.delete(resource, name, namespace="default")


def _caught_up(ctl: V1Controller) -> None:
    """Wait until the controller's pod and claim informers hold what the API server holds: a
    cycle that ran before it saw a pod made a different (and right) decision for it."""
    deadline = time.monotonic() + 10
    for informer, resource in ((ctl.pods, r.PODS), (ctl.claims, r.RESOURCE_CLAIMS_V1)):
        while True:
            listed = ctl.api.list(resource, namespace="default").items
            want = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in listed}
            held = {o["metadata"]["name"]: o["metadata"]["resourceVersion"]
                    for o in informer.items()
                    if o["metadata"].get("namespace") == "default"}  # fmt: skip
            if held == want:
                break
            assert time.monotonic() < deadline, f"the informer never caught up: {held} {want}"
            time.sleep(0.02)


def _cycles(ctl: V1Controller, n: int = 2) -> None:
    for _ in range(n):
        _caught_up(ctl)
        ctl.cycle()
        time.sleep(0.15)


def test_a_plan_counts_only_what_the_cycle_left_free(
    api: KubeClient, controller: Callable[..., tuple[V1Controller, Evicting]]
) -> None:
    # n1: 2 T4s, v (priority 0) runs on one. In one cycle b (priority 10, 2 GPUs) is refused
    # and a (priority 5, 1 GPU) takes the free GPU: evicting v would free one GPU only, so b
    # evicts nobody (a plan over the GPUs as they were before a was placed evicted v in vain).
    _node(api, "n1", 2)
    _pod(api, "v", 0)
    ctl, proxy = controller()
    _cycles(ctl, 1)
    assert _allocated(api, "v")
    _bind(api, "v", "n1")
    _pod(api, "b", 10, gpus=2)
    _pod(api, "a", 5)
    _cycles(ctl)
    assert _allocated(api, "a") and not _allocated(api, "b")
    assert proxy.evicted == []


def test_a_freed_gpu_goes_to_the_higher_priority_pod_refused_before(
    api: KubeClient, controller: Callable[..., tuple[V1Controller, Evicting]]
) -> None:
    _node(api, "n1", 1)
    _pod(api, "blocker", 0)
    ctl, _ = controller()
    _cycles(ctl, 1)
    assert _allocated(api, "blocker")
    _pod(api, "hi", 1000)
    _cycles(ctl)  # refused: the blocker is not bound, so no preemption either
    assert not _allocated(api, "hi")
    time.sleep(0.01)
    _pod(api, "lo", 0)
    _gone(api, "blocker")
    _cycles(ctl, 3)
    assert _allocated(api, "hi") and not _allocated(api, "lo")


def test_the_nominee_gets_the_gpu_a_lower_pod_does_not_and_a_new_leader_knows(
    api: KubeClient, controller: Callable[..., tuple[V1Controller, Evicting]]
) -> None:
    _node(api, "n1", 1)
    _pod(api, "v", 0)
    ctl, proxy = controller()
    _cycles(ctl, 1)
    _bind(api, "v", "n1")
    _pod(api, "hi", 100)
    _cycles(ctl)
    assert proxy.evicted == ["default/v"]
    hi = api.get(r.PODS, "hi", namespace="default")
    assert NOMINATION_ANNOTATION in hi["metadata"]["annotations"]
    assert hi["status"]["nominatedNodeName"] == "n1"
    # A controller that starts now (a restart, a new leader) reads the hold from the pod: a
    # lower pod created before the preemptor is tried does not take the freed GPU.
    ctl.stop()
    ctl2, _ = controller()
    _pod(api, "lo", 50)
    _gone(api, "v")
    _cycles(ctl2, 3)
    assert _allocated(api, "hi") and not _allocated(api, "lo")


def test_a_higher_priority_pod_takes_what_is_held_for_a_lower_one(
    api: KubeClient, controller: Callable[..., tuple[V1Controller, Evicting]]
) -> None:
    _node(api, "n1", 1)
    _pod(api, "v", 0)
    ctl, proxy = controller()
    _cycles(ctl, 1)
    _bind(api, "v", "n1")
    _pod(api, "mid", 100)
    _cycles(ctl, 1)
    assert proxy.evicted == ["default/v"]
    _pod(api, "top", 200)
    _cycles(ctl, 3)
    assert _allocated(api, "top") and not _allocated(api, "mid")


def test_explain_says_what_preemption_did_and_plans_for_a_pod(
    api: KubeClient, controller: Callable[..., tuple[V1Controller, Evicting]]
) -> None:
    _node(api, "n1", 1)
    _pod(api, "v", 0)
    ctl, proxy = controller()
    _cycles(ctl, 1)
    _bind(api, "v", "n1")
    _pod(api, "big", 100, gpus=2)  # fits nowhere, even with v gone
    _cycles(ctl, 1)
    text = explain.explain(api, "default", "big", options=explain.Options(namespace=NS))
    assert "Preemption (NoPreemption" in text and "frees enough" in text, text
    _pod(api, "hi", 100)
    _cycles(ctl, 1)
    assert proxy.evicted == ["default/v"]
    text = explain.explain(api, "default", "hi", options=explain.Options(namespace=NS))
    assert "Preemption: drasat nominated it to node n1 (status.nominatedNodeName)" in text, text
    assert "it evicted default/v." in text
    assert "held against pods of priority 100 and lower" in text
