"""50 pods negotiating at once on a small cluster: no device promised twice, all that fit run."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ctl_classic import FAST, Scheduler
from ctl_cluster import (
    add_claim,
    add_class,
    add_node,
    add_pod,
    claim,
    device_users,
    nas_claims,
    t4,
    wait,
)

from drasat.classic.controller import Controller
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, configuration_for
from drasat.testbed.sim import apiserver

PODS = 50
NODES = 4
GPUS_PER_NODE = 8  # 32 GPUs for 50 one-GPU pods


def test_fifty_pods_at_once_get_distinct_gpus_until_the_cluster_is_full(
    server: apiserver.ApiServer, api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    names = [f"node-{i}" for i in range(NODES)]
    for name in names:
        add_node(api, name, [t4(g) for g in range(GPUS_PER_NODE)])
    add_class(api)
    for i in range(PODS):
        add_claim(api, "load", f"c{i}")
        add_pod(api, "load", f"p{i}", {"gpu": f"c{i}"})
    controller = start_controller()
    stop = threading.Event()

    def one(i: int) -> str | None:
        client = KubeClient(configuration_for(server.url), request_timeout=10)
        try:
            return Scheduler(client, names, timeout=60).schedule(
                "load", f"p{i}", ["gpu"], stop=stop
            )
        finally:
            client.close()

    started = time.monotonic()
    with ThreadPoolExecutor(PODS) as pool:
        futures = [pool.submit(one, i) for i in range(PODS)]
        capacity = NODES * GPUS_PER_NODE
        wait(lambda: len(nas_claims(api)) >= capacity, timeout=60, what="cluster full")
        time.sleep(0.5)  # let any over-allocation show
        stop.set()
        placed = [f.result() for f in futures]
    elapsed = time.monotonic() - started
    in_nas = nas_claims(api)
    assert len(in_nas) == capacity, f"{len(in_nas)} allocated in {elapsed:.1f}s"
    assert all(len(users) == 1 for users in device_users(api).values()), "a GPU used twice"
    allocated = 0
    for i in range(PODS):
        c = claim(api, "load", f"c{i}")
        uid = c["metadata"]["uid"]
        if uid in in_nas:
            allocated += 1
            node = c["status"]["allocation"]["availableOnNodes"]["nodeSelectorTerms"][0]
            assert node["matchFields"][0]["values"] == [in_nas[uid][0]]
        else:
            assert not (c.get("status") or {}).get("allocation")
    assert allocated == capacity
    assert sum(p is not None for p in placed) == capacity
    # No tentative hold outlives its claim's allocation: none leaks.
    wait(lambda: len(controller.holds) == 0, timeout=5, what="holds released")


def _status(api: KubeClient, pod: str) -> list[str] | None:
    context = api.get(r.POD_SCHEDULING_CONTEXTS, pod, namespace="ns")
    claims = (context.get("status") or {}).get("resourceClaims")
    return list(claims[0]["unsuitableNodes"]) if claims else None


def test_two_pods_negotiating_for_one_gpu_are_not_both_promised_it_until_the_hold_expires(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-1", [t4(0)])
    add_class(api)
    now = [1000.0]
    controller = start_controller(hold_clock=lambda: now[0])
    for pod in ("a", "b"):
        add_claim(api, "ns", f"{pod}-gpu")
        add_pod(api, "ns", pod, {"gpu": f"{pod}-gpu"})
        api.create(r.POD_SCHEDULING_CONTEXTS, {"metadata": {"name": pod, "namespace": "ns"},
                                               "spec": {"potentialNodes": ["node-1"]}})  # fmt: skip
        wait(lambda p=pod: _status(api, p) is not None, what=f"{pod} answered")
    assert _status(api, "a") == [] and _status(api, "b") == ["node-1"]
    assert len(controller.holds) == 1
    now[0] += FAST.hold_ttl_s + 1  # a's scheduler went quiet: its hold expires
    for _ in range(20):  # read-modify-write: the controller may write b's status in between
        context = api.get(r.POD_SCHEDULING_CONTEXTS, "b", namespace="ns")
        context["spec"]["potentialNodes"] = ["node-1", "node-2"]  # any change: b is looked at
        try:
            api.replace(r.POD_SCHEDULING_CONTEXTS, context)
            break
        except errors.Conflict:
            continue
    else:
        raise AssertionError("b's scheduling context kept changing under the test")
    wait(lambda: _status(api, "b") == ["node-2"], what="b promised node-1 after a's hold expired")


def test_a_pods_holds_end_with_its_scheduling_context(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-1", [t4(0)])
    add_class(api)
    controller = start_controller()
    add_claim(api, "ns", "a-gpu")
    add_pod(api, "ns", "a", {"gpu": "a-gpu"})
    api.create(r.POD_SCHEDULING_CONTEXTS, {"metadata": {"name": "a", "namespace": "ns"},
                                           "spec": {"potentialNodes": ["node-1"]}})  # fmt: skip
    wait(lambda: _status(api, "a") == [], what="a answered")
    assert len(controller.holds) == 1
    api.delete(r.POD_SCHEDULING_CONTEXTS, "a", namespace="ns")
    wait(lambda: len(controller.holds) == 0, timeout=5, what="hold dropped")
