"""Builders for controller tests: nodes with GPUs, classes, claims, pods (the classic
scheduler of the classic tests is tests/classic/ctl_classic.py)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

from drasat.kube import errors, nasclient
from drasat.kube import resources as r
from drasat.kube.client import Api

Obj = dict[str, Any]
NS = "drasat"
CLASS = "gpu.drasat.io"

_uuid = itertools.count(1)


def t4(index: int) -> Obj:
    return {
        "gpu": {
            "index": index,
            "uuid": f"GPU-{next(_uuid):08d}-0000-0000-0000-000000000000",
            "minor": index,
            "memoryBytes": 16106127360,
            "productName": "Tesla T4",
            "architecture": "Turing",
            "cudaComputeCapability": "7.5",
        }
    }


def a100_mig(index: int) -> list[Obj]:
    """One A100-40GB in MIG mode and its profiles' placements."""
    gpu = {
        "gpu": {
            "index": index,
            "uuid": f"GPU-{next(_uuid):08d}-1111-0000-0000-000000000000",
            "minor": index,
            "migEnabled": True,
            "memoryBytes": 42949672960,
            "productName": "NVIDIA A100-SXM4-40GB",
            "architecture": "Ampere",
            "cudaComputeCapability": "8.0",
        }
    }
    parent = "NVIDIA A100-SXM4-40GB"
    return [
        gpu,
        {"mig": {"profile": "1g.5gb", "parentProductName": parent,
                 "placements": [{"start": s, "size": 1} for s in range(7)]}},
        {"mig": {"profile": "2g.10gb", "parentProductName": parent,
                 "placements": [{"start": s, "size": 2} for s in (0, 2, 4)]}},
        {"mig": {"profile": "3g.20gb", "parentProductName": parent,
                 "placements": [{"start": 0, "size": 4}, {"start": 4, "size": 4}]}},
    ]  # fmt: skip


def add_node(api: Api, name: str, devices: list[Obj], *, ready: bool = True) -> Obj:
    body = nasclient.new(namespace=NS, node=name)
    body["spec"]["allocatableDevices"] = devices
    body["status"] = "Ready" if ready else "NotReady"
    return api.create(r.NAS, body)


def add_class(
    api: Api, name: str = CLASS, *, driver: str = CLASS, params: str | None = None
) -> Obj:
    body: Obj = {"metadata": {"name": name}, "driverName": driver}
    if params:
        body["parametersRef"] = {"apiGroup": "gpu.drasat.io", "kind": "DeviceClassParameters",
                                 "name": params}  # fmt: skip
    return api.create(r.RESOURCE_CLASSES, body)


def add_params(
    api: Api, namespace: str, name: str, spec: Obj, kind: str = "GpuClaimParameters"
) -> Obj:
    resource = r.parameters("gpu.drasat.io", kind)
    assert resource is not None
    body: Obj = {"metadata": {"name": name}, "spec": spec}
    if resource.namespaced:
        body["metadata"]["namespace"] = namespace
    return api.create(resource, body)


def add_claim(
    api: Api,
    namespace: str,
    name: str,
    *,
    params: str | None = None,
    kind: str = "GpuClaimParameters",
    mode: str = "WaitForFirstConsumer",
    klass: str = CLASS,
) -> Obj:
    spec: Obj = {"resourceClassName": klass, "allocationMode": mode}
    if params:
        spec["parametersRef"] = {"apiGroup": "gpu.drasat.io", "kind": kind, "name": params}
    return api.create(r.RESOURCE_CLAIMS, {"metadata": {"name": name, "namespace": namespace},
                                          "spec": spec})  # fmt: skip


def add_pod(api: Api, namespace: str, name: str, claims: dict[str, str]) -> Obj:
    """A pod using ResourceClaims by name: entry name -> claim name."""
    return api.create(
        r.PODS,
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "containers": [{"name": "ctr", "image": "ubuntu:22.04",
                                "resources": {"claims": [{"name": e} for e in claims]}}],
                "resourceClaims": [{"name": e, "source": {"resourceClaimName": c}}
                                   for e, c in claims.items()],
            },
        },
    )  # fmt: skip


def wait(predicate: Callable[[], Any], *, timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except errors.KubeError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def claim(api: Api, namespace: str, name: str) -> Obj:
    return api.get(r.RESOURCE_CLAIMS, name, namespace=namespace)


def allocated_node(obj: Obj) -> str | None:
    allocation = (obj.get("status") or {}).get("allocation")
    if not allocation:
        return None
    term = allocation["availableOnNodes"]["nodeSelectorTerms"][0]
    return str(term["matchFields"][0]["values"][0])


def nas_claims(api: Api) -> dict[str, tuple[str, Obj]]:
    """claim uid -> (node, NAS entry) over every NAS."""
    out: dict[str, tuple[str, Obj]] = {}
    for obj in api.list(r.NAS, namespace=NS).items:
        for uid, entry in ((obj.get("spec") or {}).get("allocatedClaims") or {}).items():
            assert uid not in out, f"claim {uid} in two NAS objects"
            out[uid] = (obj["metadata"]["name"], entry)
    return out


def device_users(api: Api) -> dict[str, list[str]]:
    """GPU uuid (or parent/start for MIG) -> claim uids using it, from every NAS."""
    users: dict[str, list[str]] = {}
    for uid, (_node, entry) in nas_claims(api).items():
        for device in (entry.get("gpu") or {}).get("devices") or []:
            users.setdefault(device["uuid"], []).append(uid)
        for device in (entry.get("mig") or {}).get("devices") or []:
            start, size = device["placement"]["start"], device["placement"]["size"]
            for s in range(start, start + size):
                users.setdefault(f"{device['parentUUID']}/{s}", []).append(uid)
    return users


def corrupt(server: Any, name: str, change: Callable[[Obj], None]) -> None:
    """Change a stored object behind the server's back (it validates every normal write):
    what a newer component, or an older schema, might have left."""
    store = server.api.store._objects  # the simulator's storage: (group, plural) -> objects
    found = [o for objs in store.values() for (_, n), o in objs.items() if n == name]
    assert len(found) == 1, f"{len(found)} stored objects named {name}"
    change(found[0])
