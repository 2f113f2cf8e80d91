"""Another driver's device (a NIC) drasat allocates has two allocators: a NIC held by two
claims must be refused, reported and repaired as a GPU is.

drasat allocates the NIC of a claim it takes (a GPU and a NIC), while kube-scheduler still
allocates every claim of the NIC alone (the NIC carries no allocator taint: one allocator per
device holds for GPUs only). Two decisions of the same instant (the race issue 35 reproduced for
GPUs on the real 1.37 control plane) then leave one NIC in two claims' statuses. For a GPU the
safety nets catch this (`overcommit`, `Repairer.clashes`: a DeviceClash Event, and one claim's
pods evicted once both are reserved); for the NIC nothing does: `overcommit` counts GPUs only."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import ctl_slices
import test_v1controller_nvidia as nvidia
from ctl_cluster import add_node, t4
from test_v1controller_other_drivers import NIC, _claim, _nic_class, _nics, _pod, _results
from test_v1controller_trust import _event_objects

from drasat.api.groups import DRIVER_NAME
from drasat.controller.v1controller import V1Controller
from drasat.kube import resources as r
from drasat.kube.client import KubeClient
from drasat.kube.resources import Resource

Obj = dict[str, Any]

api, controller = nvidia.api, nvidia.controller


def _bind(api: KubeClient, claim: str, pod: str, node: str) -> None:
    """What kube-scheduler and the kubelet write: the claim reserved for the pod, the pod bound
    and running."""
    found = api.get(r.PODS, pod, namespace="default")
    body = api.get(r.RESOURCE_CLAIMS_V1, claim, namespace="default")
    ref = {"resource": "pods", "name": pod, "uid": found["metadata"]["uid"]}
    body["status"] = {**body["status"], "reservedFor": [ref]}
    api.replace_status(r.RESOURCE_CLAIMS_V1, body)
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
               "target": {"apiVersion": "v1", "kind": "Node", "name": node}}  # fmt: skip
    api.create(Resource("", "v1", f"pods/{pod}/binding", "Binding"), binding, namespace="default")
    found = api.get(r.PODS, pod, namespace="default")
    found["status"] = {**(found.get("status") or {}), "phase": "Running"}
    api.replace_status(r.PODS, found)


def test_a_nic_held_by_two_reserved_claims_is_reported_and_repaired(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    allocatable = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    api.create(r.NODES, {"metadata": {"name": "n1"}, "status": {"allocatable": allocatable}})
    devices = [t4(0), t4(1)]
    add_node(api, "n1", devices)
    ctl_slices.publish(api, "n1", devices)
    _nic_class(api)
    _nics(api, "n1", {"nic-0": "pci0000:00"})
    ctl = controller(DRIVER_NAME)
    _claim(api, "mine", DRIVER_NAME, same_root=False)
    _pod(api, "p-mine", "mine")
    assert nvidia._settled(ctl, lambda: _results(api, "mine"))
    assert ("nic", NIC, "n1", "nic-0") in _results(api, "mine")
    _bind(api, "mine", "p-mine", "n1")
    # kube-scheduler's decision of the same instant for a claim of the NIC alone: nic-0 too.
    _claim(api, "theirs", None, same_root=False)
    _pod(api, "q", "theirs")
    body = api.get(r.RESOURCE_CLAIMS_V1, "theirs", namespace="default")
    body["status"] = {"allocation": {
        "devices": {"results": [{"request": "nic", "driver": NIC, "pool": "n1",
                                 "device": "nic-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]},
    }}  # fmt: skip
    api.replace_status(r.RESOURCE_CLAIMS_V1, body)
    _bind(api, "theirs", "q", "n1")
    for _ in range(10):
        ctl.cycle()
        time.sleep(0.05)
    mine = api.get(r.RESOURCE_CLAIMS_V1, "mine", namespace="default")
    theirs = api.get(r.RESOURCE_CLAIMS_V1, "theirs", namespace="default")
    both_hold = all(
        any(x.get("device") == "nic-0" for x in
            ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []))
        for c in (mine, theirs)
    )  # fmt: skip
    pods = {p["metadata"]["name"] for p in api.list(r.PODS, namespace="default").items
            if not p["metadata"].get("deletionTimestamp")}  # fmt: skip
    clash = _event_objects(api, "DeviceClash")
    assert clash or not both_hold or pods != {"p-mine", "q"}, (
        "nic-0 is held by two reserved claims (two tenants on one NIC); drasat, which allocated "
        "one of them, neither reports nor repairs it"
    )


def test_a_nic_drasat_just_wrote_is_not_handed_out_again_before_the_informer_sees_it(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    """Two T4s and one NIC; claims `a` and `b` each ask a GPU and a NIC. drasat writes `a`
    (gpu, nic-0); the next cycle runs before the claims informer delivers that write (the cache
    still holds `a` unallocated: informer lag, which the GPUs' ledger covers by counting this
    process's own writes). `b` must be refused (no NIC left), but drasat hands nic-0 out again:
    the NICs held are read from the cached statuses alone (`v1inputs.other_devices`), without
    this process's own writes."""
    allocatable = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    api.create(r.NODES, {"metadata": {"name": "n1"}, "status": {"allocatable": allocatable}})
    devices = [t4(0), t4(1)]
    add_node(api, "n1", devices)
    ctl_slices.publish(api, "n1", devices)
    _nic_class(api)
    _nics(api, "n1", {"nic-0": "pci0000:00"})
    ctl = controller(DRIVER_NAME)
    _claim(api, "a", DRIVER_NAME, same_root=False)
    _claim(api, "b", DRIVER_NAME, same_root=False)
    _pod(api, "p-a", "a")
    deadline = time.monotonic() + 10
    while len(ctl.claims.items()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    stale = ctl.claims.items()  # both unallocated, as the cache holds them before a's write
    assert nvidia._settled(ctl, lambda: _results(api, "a"))
    _bind(api, "a", "p-a", "n1")
    _pod(api, "p-b", "b")
    deadline = time.monotonic() + 10
    while len(ctl.pods.items()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    ctl.claims.items = lambda: [c for c in stale]  # type: ignore[method-assign]
    for _ in range(2):
        ctl.cycle()
    assert ("nic", NIC, "n1", "nic-0") not in _results(api, "b"), (
        f"nic-0 handed out twice: a {_results(api, 'a')}, b {_results(api, 'b')}"
    )


def test_a_claim_whose_nic_slices_vanished_is_refused_for_its_nic_not_its_gpu(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    """Two free T4s; the NIC class exists but the NIC driver's slices are gone (its plugin
    restarting). The claim of a GPU and a NIC cannot be placed, and the reason must say so of
    the NIC; drasat says 'no published device matches request gpu (class gpu.drasat.io)',
    which is false (both T4s match and are free) and sends the user after the wrong request."""
    allocatable = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    api.create(r.NODES, {"metadata": {"name": "n1"}, "status": {"allocatable": allocatable}})
    devices = [t4(0), t4(1)]
    add_node(api, "n1", devices)
    ctl_slices.publish(api, "n1", devices)
    _nic_class(api)
    ctl = controller(DRIVER_NAME)
    _claim(api, "a", DRIVER_NAME, same_root=False)
    _pod(api, "p-a", "a")
    assert nvidia._settled(ctl, lambda: "default/p-a" in ctl.explanations)
    why = ctl.explanations["default/p-a"]
    assert "nic" in why, why
    assert "no published device matches request gpu" not in why, why


def test_an_nvidia_gpu_held_by_two_reserved_claims_is_reported_and_repaired(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    """drasat allocating for NVIDIA's driver (`--driver gpu.nvidia.com`). `mine` holds an
    NVIDIA T4 (drasat's write); `theirs` names the same T4 (kube-scheduler's decision of the
    same instant for a claim tolerating the allocator taint in an exempted namespace, or an
    admin's write), both reserved by running pods. On drasat's own devices this is reported
    (DeviceClash) and repaired by evicting one claim's pods; on NVIDIA's nothing happens:
    `v1inputs.status_entries`, which `Repairer.clashes` reads, keeps only claims with results
    of drasat's own driver."""
    nvidia._publish(api, "nv-t4", "t4")
    ctl = controller()
    nvidia._claim(api, "mine", nvidia._gpu())
    nvidia._pod(api, "p-mine", "mine")
    assert nvidia._settled(ctl, lambda: nvidia._allocation(api, "mine"))
    _bind(api, "mine", "p-mine", "t4")
    held = nvidia._allocation(api, "mine")
    nvidia._claim(api, "theirs", nvidia._gpu(tolerations=[{"operator": "Exists"}]))
    nvidia._pod(api, "q", "theirs")
    body = api.get(r.RESOURCE_CLAIMS_V1, "theirs", namespace="default")
    body["status"] = {"allocation": held}
    api.replace_status(r.RESOURCE_CLAIMS_V1, body)
    _bind(api, "theirs", "q", "t4")
    for _ in range(10):
        ctl.cycle()
        time.sleep(0.05)
    live = {p["metadata"]["name"] for p in api.list(r.PODS, namespace="default").items
            if not p["metadata"].get("deletionTimestamp")}  # fmt: skip
    clash = _event_objects(api, "DeviceClash")
    assert clash or live != {"p-mine", "q"}, (
        f"{held['devices']['results']} held by two reserved claims (two tenants on one GPU); "
        "drasat neither reports nor repairs it on NVIDIA's devices"
    )
