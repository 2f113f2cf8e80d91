"""Restart safety: state left by a crash between the NAS write and the status write is repaired."""

from __future__ import annotations

from collections.abc import Callable

from ctl_cluster import (
    NS,
    add_claim,
    add_class,
    add_node,
    allocated_node,
    claim,
    device_users,
    nas_claims,
    t4,
    wait,
)
from ctl_events import events_for

from drasat.api.nas import AllocatedDevices
from drasat.classic.controller import Controller
from drasat.controller import allocation
from drasat.kube import nasclient
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, Obj


def _devices(c: Obj, uuid: str) -> AllocatedDevices:
    return AllocatedDevices.model_validate(
        {"claimInfo": allocation.claim_info(c), "gpu": {"devices": [{"uuid": uuid}]}}
    )


def _put_in_nas(api: KubeClient, node: str, c: Obj, uuid: str) -> None:
    devices = {c["metadata"]["uid"]: _devices(c, uuid)}
    nasclient.update(api, namespace=NS, node=node, mutate=lambda o: allocation.nas_with(o, devices))


def _put_in_status(api: KubeClient, node: str, c: Obj, uuid: str) -> None:
    finalizer = {"metadata": {"finalizers": ["gpu.drasat.io/deletion-protection"]}}
    meta = c["metadata"]
    c = api.patch(r.RESOURCE_CLAIMS, meta["name"], finalizer, namespace=meta["namespace"])
    api.replace_status(
        r.RESOURCE_CLAIMS, allocation.with_allocation(c, node, _devices(c, uuid), shareable=True)
    )


def test_claim_in_nas_but_not_in_status_is_completed(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    gpu = t4(0)
    add_node(api, "node-1", [gpu, t4(1)])
    add_class(api)
    c = add_claim(api, "ns", "half-done", mode="Immediate")
    _put_in_nas(api, "node-1", c, gpu["gpu"]["uuid"])
    start_controller()
    done = wait(lambda: allocated_node(claim(api, "ns", "half-done")), what="completion")
    assert done == "node-1"
    entry = nas_claims(api)[c["metadata"]["uid"]]
    assert entry[1]["gpu"]["devices"][0]["uuid"] == gpu["gpu"]["uuid"]  # not allocated again
    assert len(nas_claims(api)) == 1
    assert (
        allocation.devices_from_status(claim(api, "ns", "half-done")).gpu.devices[0].uuid
        == (  # type: ignore[union-attr]
            gpu["gpu"]["uuid"]
        )
    )


def test_claim_in_status_but_not_in_nas_is_rewritten_when_its_gpu_is_free(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    gpu = t4(0)
    add_node(api, "node-1", [gpu])
    add_class(api)
    c = add_claim(api, "ns", "lost-entry")
    _put_in_status(api, "node-1", c, gpu["gpu"]["uuid"])
    start_controller()
    wait(lambda: c["metadata"]["uid"] in nas_claims(api), what="NAS repaired")
    wait(lambda: events_for(api, "ns", "lost-entry", "AllocationRepaired"), what="event")


def test_claim_in_status_whose_gpu_was_taken_is_reported_not_allocated_twice(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    gpu = t4(0)
    add_node(api, "node-1", [gpu])
    add_class(api)
    holder = add_claim(api, "ns", "holder")
    _put_in_nas(api, "node-1", holder, gpu["gpu"]["uuid"])
    _put_in_status(api, "node-1", holder, gpu["gpu"]["uuid"])
    c = add_claim(api, "ns", "stale")
    _put_in_status(api, "node-1", c, gpu["gpu"]["uuid"])
    start_controller()
    event = wait(lambda: events_for(api, "ns", "stale", "AllocationLost"), what="event")[0]
    assert "now used by claims" in event["message"]
    assert list(device_users(api).values()) == [[holder["metadata"]["uid"]]]


def test_nas_entries_of_deleted_claims_are_removed(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    gpu = t4(0)
    add_node(api, "node-1", [gpu])
    add_class(api)
    c = add_claim(api, "ns", "gone")
    _put_in_nas(api, "node-1", c, gpu["gpu"]["uuid"])
    api.delete(r.RESOURCE_CLAIMS, "gone", namespace="ns")
    start_controller()
    wait(lambda: not nas_claims(api), what="orphan removed")


def test_deallocation_requested_clears_status_and_nas(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-1", [t4(0)])
    add_class(api)
    add_claim(api, "ns", "c", mode="Immediate")
    start_controller()
    wait(lambda: allocated_node(claim(api, "ns", "c")), what="allocation")
    current = claim(api, "ns", "c")
    uid = current["metadata"]["uid"]
    # Immediate claims are allocated again after deallocation, so watch for the NAS to change.
    first = nas_claims(api)[uid][1]
    current["status"]["deallocationRequested"] = True
    api.replace_status(r.RESOURCE_CLAIMS, current)
    wait(lambda: not claim(api, "ns", "c")["status"].get("deallocationRequested"), what="cleared")
    again = wait(lambda: allocated_node(claim(api, "ns", "c")), what="allocated again")
    assert again == "node-1" and nas_claims(api)[uid][1] == first
