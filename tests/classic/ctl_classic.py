"""The classic controller's test pieces: a fast Config and a classic scheduler.

`Scheduler.schedule` plays kube-scheduler's classic DRA part for one pod: it creates the
PodSchedulingContext with potentialNodes, waits for unsuitableNodes of every claim of ours, sets
selectedNode to the first suitable node, waits for the claims' allocation and reserves them.
"""

from __future__ import annotations

import threading
import time

from ctl_cluster import Obj, allocated_node

from drasat.classic.controller import Config
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import Api

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
