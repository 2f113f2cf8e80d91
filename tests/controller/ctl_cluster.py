"""Builders for controller tests: nodes with GPUs, classes, claims, pods, and a classic scheduler.

`Scheduler.schedule` plays kube-scheduler's classic DRA part for one pod: it creates the
PodSchedulingContext with potentialNodes, waits for unsuitableNodes of every claim of ours, sets
selectedNode to the first suitable node, waits for the claims' allocation and reserves them.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from drasat.classic.controller import Config
from drasat.kube import errors, nas
from drasat.kube import resources as r
from drasat.kube.client import Api

Obj = dict[str, Any]
NS = "drasat"
CLASS = "gpu.drasat.io"

_uuid = itertools.count(1)

#: A controller that reacts within test timescales.
FAST = Config(
    namespace="drasat",
    workers=2,
    resync_s=1.0,
    policy_poll_s=0.2,
    retry_backoff_s=(0.02, 0.5),
    watch_timeout_s=5,
    hold_ttl_s=10.0,
)


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
    body = nas.new(namespace=NS, node=name)
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


class Scheduler:
    """kube-scheduler's classic DRA dance, for tests (one pod at a time per call)."""

    def __init__(self, api: Api, nodes: list[str], *, timeout: float = 20.0) -> None:
        self.api, self.nodes, self.timeout = api, nodes, timeout

    def schedule(
        self, namespace: str, pod: str, entries: list[str], *, stop: threading.Event | None = None
    ) -> str | None:
        """Returns the node; raises AssertionError when no node becomes suitable in time; None
        when `stop` is set first."""
        pod_obj = self.api.get(r.PODS, pod, namespace=namespace)
        self.api.create(r.POD_SCHEDULING_CONTEXTS, {
            "metadata": {"name": pod, "namespace": namespace, "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod,
                 "uid": pod_obj["metadata"]["uid"]}]},
            "spec": {"potentialNodes": list(self.nodes)},
        })  # fmt: skip
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if stop is not None and stop.is_set():
                return None
            node = self._pick(namespace, pod, entries)
            if node is None:
                time.sleep(0.02)
                continue
            if self._select_and_wait(namespace, pod, node, pod_obj):
                return node
        raise AssertionError(f"pod {namespace}/{pod} not scheduled in {self.timeout}s")

    def _pick(self, namespace: str, pod: str, entries: list[str]) -> str | None:
        """Like kube-scheduler: allocated claims restrict nodes by availableOnNodes; the driver
        answers (unsuitableNodes) for the others."""
        pod_obj = self.api.get(r.PODS, pod, namespace=namespace)
        by_entry = {e["name"]: e["source"]["resourceClaimName"]
                    for e in pod_obj["spec"]["resourceClaims"]}  # fmt: skip
        allowed = set(self.nodes)
        open_entries = []
        for entry in entries:
            node = allocated_node(self.api.get(r.RESOURCE_CLAIMS, by_entry[entry],
                                               namespace=namespace))  # fmt: skip
            if node is None:
                open_entries.append(entry)
            else:
                allowed &= {node}
        context = self.api.get(r.POD_SCHEDULING_CONTEXTS, pod, namespace=namespace)
        statuses = {c["name"]: c for c in (context.get("status") or {}).get("resourceClaims") or []}
        if not all(e in statuses for e in open_entries):
            return None
        bad = {n for e in open_entries for n in statuses[e].get("unsuitableNodes") or []}
        good = [n for n in self.nodes if n not in bad and n in allowed]
        return good[0] if good else None

    def _select_and_wait(self, namespace: str, pod: str, node: str, pod_obj: Obj) -> bool:
        context = self.api.get(r.POD_SCHEDULING_CONTEXTS, pod, namespace=namespace)
        context["spec"]["selectedNode"] = node
        try:
            self.api.replace(r.POD_SCHEDULING_CONTEXTS, context)
        except errors.Conflict:
            return False
        names = [e["source"]["resourceClaimName"] for e in pod_obj["spec"]["resourceClaims"]]
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            claims = [self.api.get(r.RESOURCE_CLAIMS, n, namespace=namespace) for n in names]
            nodes = {allocated_node(c) for c in claims}
            if None not in nodes:
                if nodes != {node}:
                    raise AssertionError(f"{pod}: claims on {nodes}, selected {node}")
                for c in claims:
                    self._reserve(c, pod_obj)
                return True
            context = self.api.get(r.POD_SCHEDULING_CONTEXTS, pod, namespace=namespace)
            statuses = (context.get("status") or {}).get("resourceClaims") or []
            if any(node in (s.get("unsuitableNodes") or []) for s in statuses):
                return False  # the controller refused the selected node: pick again
            time.sleep(0.02)
        return False

    def _reserve(self, claim_obj: Obj, pod_obj: Obj) -> None:
        for _ in range(20):
            status = claim_obj.setdefault("status", {})
            reserved = status.setdefault("reservedFor", [])
            uid = pod_obj["metadata"]["uid"]
            if any(x.get("uid") == uid for x in reserved):
                return
            reserved.append({"resource": "pods", "name": pod_obj["metadata"]["name"], "uid": uid})
            try:
                self.api.replace_status(r.RESOURCE_CLAIMS, claim_obj)
                return
            except errors.Conflict:
                meta = claim_obj["metadata"]
                claim_obj = self.api.get(
                    r.RESOURCE_CLAIMS, meta["name"], namespace=meta["namespace"]
                )
        raise AssertionError("could not reserve")


def corrupt(server: Any, name: str, change: Callable[[Obj], None]) -> None:
    """Change a stored object behind the server's back (it validates every normal write):
    what a newer component, or an older schema, might have left."""
    store = server.api.store._objects  # the simulator's storage: (group, plural) -> objects
    found = [o for objs in store.values() for (_, n), o in objs.items() if n == name]
    assert len(found) == 1, f"{len(found)} stored objects named {name}"
    change(found[0])
