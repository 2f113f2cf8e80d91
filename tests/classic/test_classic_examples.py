"""The repository's example manifests, end to end: the in-process API server, the simulated
classic scheduler (drasat.classic.scheduler) and the controller, as a user would apply them."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ctl_cluster import NS, a100_mig, add_class, add_node, claim, device_users, nas_claims, t4

from drasat import loading
from drasat.classic import scheduler
from drasat.classic.controller import Controller
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, Obj
from drasat.testbed.sim import apiserver, kubeclient

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"

KINDS = {
    ("v1", "Namespace"): r.Resource("", "v1", "namespaces", "Namespace", namespaced=False),
    ("v1", "Pod"): r.PODS,
    ("resource.k8s.io/v1alpha2", "ResourceClaim"): r.RESOURCE_CLAIMS,
    ("resource.k8s.io/v1alpha2", "ResourceClaimTemplate"): r.RESOURCE_CLAIM_TEMPLATES,
    ("resource.k8s.io/v1alpha2", "ResourceClass"): r.RESOURCE_CLASSES,
    ("gpu.drasat.io/v1alpha1", "GpuClaimParameters"): r.gpu_claim_parameters(),
    ("gpu.drasat.io/v1alpha1", "MigDeviceClaimParameters"): r.mig_device_claim_parameters(),
    ("gpu.drasat.io/v1alpha1", "DeviceClassParameters"): r.device_class_parameters(),
}


def apply(api: KubeClient, path: Path) -> list[Obj]:
    """Create every object of a manifest file (pods last); returns the pods."""
    documents = [d.data for d in loading.read_documents(path)]
    pods = [d for d in documents if d["kind"] == "Pod"]
    for document in [d for d in documents if d["kind"] != "Pod"] + pods:
        resource = KINDS[(document["apiVersion"], document["kind"])]
        with contextlib.suppress(errors.AlreadyExists):
            api.create(resource, document)
    return pods


@pytest.fixture
def sim_scheduler(server: apiserver.ApiServer) -> Iterator[scheduler.Scheduler]:
    with scheduler.Scheduler(kubeclient.KubeClient(server.url), resync=0.5) as running:
        yield running


def _node(api: KubeClient, name: str) -> None:
    api.create(r.NODES, {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}})


def _bound(sim: scheduler.Scheduler, pods: list[Obj]) -> dict[str, str]:
    return {
        p["metadata"]["name"]: sim.wait_bound(p["metadata"]["namespace"], p["metadata"]["name"],
                                              timeout=30)
        for p in pods
    }  # fmt: skip


def test_reference_case_exclusive_gpus(
    api: KubeClient,
    start_controller: Callable[..., Controller],
    sim_scheduler: scheduler.Scheduler,
) -> None:
    _node(api, "gpu-node-1")
    add_node(api, "gpu-node-1", [t4(0), t4(1)])
    add_class(api)
    start_controller()
    pods = apply(api, EXAMPLES / "reference-cases" / "exclusive-gpus.yaml")
    assert set(_bound(sim_scheduler, pods).values()) == {"gpu-node-1"}
    in_nas = nas_claims(api)
    assert len(in_nas) == 2
    assert sorted(len(u) for u in device_users(api).values()) == [1, 1]
    assert {e["claimInfo"]["namespace"] for _, e in in_nas.values()} == {"gpu-test1"}


def test_reference_case_shared_time_sliced_gpu(
    api: KubeClient,
    start_controller: Callable[..., Controller],
    sim_scheduler: scheduler.Scheduler,
) -> None:
    _node(api, "gpu-node-1")
    add_node(api, "gpu-node-1", [t4(0), t4(1)])
    add_class(api)
    start_controller()
    pods = apply(api, EXAMPLES / "reference-cases" / "shared-time-sliced-gpu.yaml")
    assert set(_bound(sim_scheduler, pods).values()) == {"gpu-node-1"}
    shared = claim(api, "gpu-test2", "shared-gpu")
    assert len(shared["status"]["reservedFor"]) == 2
    ((_node_name, entry),) = nas_claims(api).values()
    assert len(entry["gpu"]["devices"]) == 1
    assert entry["gpu"]["sharing"]["timeSlicingConfig"]["timeSlice"] == "Long"


def test_example_mig_devices_with_their_parent_gpu(
    api: KubeClient,
    start_controller: Callable[..., Controller],
    sim_scheduler: scheduler.Scheduler,
) -> None:
    for name, devices in (("t4-node", [t4(0)]), ("a100-node", a100_mig(0))):
        _node(api, name)
        add_node(api, name, devices)
    add_class(api)
    start_controller()
    pods = apply(api, EXAMPLES / "mig-with-parent-gpu" / "paired.yaml")
    assert set(_bound(sim_scheduler, pods).values()) == {"a100-node"}
    entries = [e for _, e in nas_claims(api).values()]
    parents = {d["parentUUID"] for e in entries for d in (e.get("mig") or {}).get("devices", [])}
    gpus = {d["uuid"] for e in entries for d in (e.get("gpu") or {}).get("devices", [])}
    assert parents and parents == gpus


def test_example_optional_gpu(
    api: KubeClient,
    start_controller: Callable[..., Controller],
    sim_scheduler: scheduler.Scheduler,
) -> None:
    _node(api, "cpu-node")
    add_node(api, "cpu-node", [])
    add_class(api)
    start_controller()
    pods = apply(api, EXAMPLES / "optional-gpu" / "optional.yaml")
    _bound(sim_scheduler, pods)
    for _, entry in nas_claims(api).values():
        assert entry.get("optional") is True and entry["gpu"]["devices"] == []
    handles = [json.loads(c["status"]["allocation"]["resourceHandles"][0]["data"])
               for c in api.list(r.RESOURCE_CLAIMS).items]  # fmt: skip
    assert handles and all(h["node"] == "cpu-node" for h in handles)
    assert NS == "drasat"
