"""MIG paired with a GPU claim, Immediate allocation, optional claims, class parameters."""

from __future__ import annotations

import json
from collections.abc import Callable

from ctl_classic import Scheduler
from ctl_cluster import (
    a100_mig,
    add_claim,
    add_class,
    add_node,
    add_params,
    add_pod,
    allocated_node,
    claim,
    nas_claims,
    t4,
    wait,
)

from drasat.classic.controller import Controller
from drasat.kube.client import KubeClient


def test_mig_claim_paired_with_its_gpu_claim_lands_on_that_gpu(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-t4", [t4(0)])
    add_node(api, "node-a100", a100_mig(0))
    add_class(api)
    add_params(api, "ml", "mig-gpu", {"selector": {"migEnabled": True}})
    add_params(api, "ml", "small", {"profile": "1g.5gb", "gpuClaimName": "gpu"},
               kind="MigDeviceClaimParameters")  # fmt: skip
    add_claim(api, "ml", "gpu", params="mig-gpu")
    add_claim(api, "ml", "mig", params="small", kind="MigDeviceClaimParameters")
    add_pod(api, "ml", "trainer", {"gpu": "gpu", "mig": "mig"})
    start_controller()
    node = Scheduler(api, ["node-t4", "node-a100"]).schedule("ml", "trainer", ["gpu", "mig"])
    assert node == "node-a100"
    gpu_claim, mig_claim = claim(api, "ml", "gpu"), claim(api, "ml", "mig")
    entries = nas_claims(api)
    gpu_uuid = entries[gpu_claim["metadata"]["uid"]][1]["gpu"]["devices"][0]["uuid"]
    mig_device = entries[mig_claim["metadata"]["uid"]][1]["mig"]["devices"][0]
    assert mig_device["parentUUID"] == gpu_uuid and mig_device["profile"] == "1g.5gb"
    handle = json.loads(mig_claim["status"]["allocation"]["resourceHandles"][0]["data"])
    assert handle["node"] == "node-a100" and handle["mig"]["devices"][0]["profile"] == "1g.5gb"


def test_immediate_claim_is_placed_by_the_solver_without_a_pod(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-1", [t4(0)], ready=False)
    add_node(api, "node-2", [t4(0)])
    add_class(api)
    add_claim(api, "ns", "now", mode="Immediate")
    start_controller()
    node = wait(lambda: allocated_node(claim(api, "ns", "now")), what="allocation")
    assert node == "node-2"  # node-1's NAS is NotReady


def test_immediate_claim_that_fits_nowhere_waits_with_an_event(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-1", [t4(0)])
    add_class(api)
    add_params(api, "ns", "two", {"count": 2})
    add_claim(api, "ns", "big", params="two", mode="Immediate")
    start_controller()
    from ctl_events import events_for

    wait(lambda: events_for(api, "ns", "big", "Unschedulable"), what="event")
    assert allocated_node(claim(api, "ns", "big")) is None


def test_optional_claim_without_a_free_gpu_still_lets_the_pod_schedule(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-1", [t4(0)])
    add_class(api)
    add_claim(api, "ns", "taken", mode="Immediate")
    add_params(api, "ns", "soft", {"optional": True})
    add_claim(api, "ns", "maybe", params="soft")
    add_pod(api, "ns", "cpu-ok", {"gpu": "maybe"})
    start_controller()
    wait(lambda: allocated_node(claim(api, "ns", "taken")), what="the only GPU taken")
    assert Scheduler(api, ["node-1"]).schedule("ns", "cpu-ok", ["gpu"]) == "node-1"
    maybe = claim(api, "ns", "maybe")
    entry = nas_claims(api)[maybe["metadata"]["uid"]][1]
    assert entry["gpu"]["devices"] == [] and entry["optional"] is True


def test_class_parameters_make_claims_unshareable(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-1", [t4(0)])
    from drasat.kube import resources as r

    api.create(r.device_class_parameters(), {"metadata": {"name": "exclusive"},
                                             "spec": {"sharable": False}})  # fmt: skip
    add_class(api, params="exclusive")
    add_claim(api, "ns", "c", mode="Immediate")
    start_controller()
    wait(lambda: allocated_node(claim(api, "ns", "c")), what="allocation")
    assert claim(api, "ns", "c")["status"]["allocation"]["shareable"] is False


def test_claims_of_other_drivers_are_left_alone(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-1", [t4(0)])
    add_class(api, "other", driver="gpu.resource.nvidia.com")
    add_class(api)
    add_claim(api, "ns", "theirs", mode="Immediate", klass="other")
    add_claim(api, "ns", "ours", mode="Immediate")
    start_controller()
    wait(lambda: allocated_node(claim(api, "ns", "ours")), what="our claim")
    theirs = claim(api, "ns", "theirs")
    assert "status" not in theirs or not theirs["status"].get("allocation")
    assert not theirs["metadata"].get("finalizers")
