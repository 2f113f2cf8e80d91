"""End to end through the in-process API server: the two reference cases and their neighbours."""

from __future__ import annotations

from collections.abc import Callable

from ctl_classic import Scheduler
from ctl_cluster import (
    add_claim,
    add_class,
    add_node,
    add_params,
    add_pod,
    allocated_node,
    claim,
    device_users,
    nas_claims,
    t4,
    wait,
)

from drasat.classic.controller import Controller
from drasat.kube.client import KubeClient


def test_two_pods_each_get_their_own_exclusive_gpu(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-a", [t4(0), t4(1)])
    add_class(api)
    start_controller()
    scheduler = Scheduler(api, ["node-a"])
    for pod in ("pod1", "pod2"):
        add_claim(api, "gpu-test1", f"{pod}-gpu")
        add_pod(api, "gpu-test1", pod, {"gpu": f"{pod}-gpu"})
        assert scheduler.schedule("gpu-test1", pod, ["gpu"]) == "node-a"
    claims = [claim(api, "gpu-test1", f"{p}-gpu") for p in ("pod1", "pod2")]
    in_nas = nas_claims(api)
    uids = [c["metadata"]["uid"] for c in claims]
    assert set(uids) <= set(in_nas)
    gpus = [in_nas[u][1]["gpu"]["devices"][0]["uuid"] for u in uids]
    assert gpus[0] != gpus[1]
    for c in claims:
        assert c["status"]["driverName"] == "gpu.drasat.io"
        assert "gpu.drasat.io/deletion-protection" in c["metadata"]["finalizers"]
        handle = c["status"]["allocation"]["resourceHandles"][0]
        assert handle["driverName"] == "gpu.drasat.io" and "GPU-" in handle["data"]
    assert all(len(users) == 1 for users in device_users(api).values())


def test_two_pods_share_one_time_sliced_gpu(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-a", [t4(0), t4(1)])
    add_class(api)
    add_params(api, "gpu-test2", "shared-gpu", {"count": 1, "sharing": {
        "strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}}})  # fmt: skip
    add_claim(api, "gpu-test2", "shared-gpu", params="shared-gpu")
    start_controller()
    scheduler = Scheduler(api, ["node-a"])
    for pod in ("pod1", "pod2"):
        add_pod(api, "gpu-test2", pod, {"shared-gpu": "shared-gpu"})
        assert scheduler.schedule("gpu-test2", pod, ["shared-gpu"]) == "node-a"
    shared = claim(api, "gpu-test2", "shared-gpu")
    assert len(shared["status"]["reservedFor"]) == 2
    assert shared["status"]["allocation"]["shareable"] is True
    entry = nas_claims(api)[shared["metadata"]["uid"]][1]
    assert len(entry["gpu"]["devices"]) == 1
    assert entry["gpu"]["sharing"]["timeSlicingConfig"]["timeSlice"] == "Long"
    assert len(nas_claims(api)) == 1


def test_deleting_a_claim_deallocates_it_and_releases_the_finalizer(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-a", [t4(0)])
    add_class(api)
    add_claim(api, "ns", "c1", mode="Immediate")
    start_controller()
    uid = wait(lambda: allocated_node(claim(api, "ns", "c1")) and claim(api, "ns", "c1")[
        "metadata"]["uid"], what="allocation")  # fmt: skip
    assert uid in nas_claims(api)
    from drasat.kube import resources as r

    api.delete(r.RESOURCE_CLAIMS, "c1", namespace="ns")
    wait(lambda: uid not in nas_claims(api), what="NAS entry removed")
    wait(lambda: not api.list(r.RESOURCE_CLAIMS, namespace="ns").items, what="claim gone")
