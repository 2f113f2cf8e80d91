"""A simulated kube-scheduler for `resource.k8s.io/v1` pods, as 1.37's DynamicResources plugin
treats claims that someone else (drasat's controller) has already allocated.

It never allocates a claim: a pod whose claims are not all allocated waits (`reasons` says for
which). For a pod whose claims are allocated it does what kube-scheduler does:

- **PreFilter**: every claim must exist (template claims through
  `pod.status.resourceClaimStatuses`, owned by the pod), not be being deleted, and have room in
  `status.reservedFor` (256) unless already reserved for the pod;
- **Filter**: nodes that pass the pod's own filters (`scheduling.pod_fits_node`: unschedulable,
  `nodeName`, taints, `nodeSelector`, required node affinity) and match every claim's
  `status.allocation.nodeSelector`;
- **PostFilter**: when no node is left, one claim whose nodeSelector excluded a node the pod could
  otherwise use, reserved for nobody (or only this pod), is deallocated (`status.allocation` and
  `status.reservedFor` cleared) — kube-scheduler picks such a claim at random, this scheduler the
  first in the pod's order — and the pod waits;
- **PreBind**: the pod is added to each claim's `status.reservedFor` (with the claim's
  resourceVersion as precondition: a concurrent change means another pass); an allocation without
  `allocationTimestamp` gets one in the same write, as 1.37 does with its binding-condition gates
  on, which the API server refuses (an allocation is immutable once set), so such a pod stays
  pending with that 422 as its reason — the allocator must set the timestamp. Then the pod is bound
  through `pods/binding` to the first fitting node by name (kube-scheduler scores; the contract
  tests use one fitting node).

A pod carrying a scheduling gate is left alone (neither reserved nor bound) until its gates
are all lifted, as kube-scheduler's SchedulingGates plugin keeps it out of the queue.

Pods without claims are bound to the first node that fits them (`plain_pods`, on by default, as
the one default scheduler of a cluster). Pods naming another `schedulerName` are left alone.
Creating claims from templates and releasing `reservedFor` is the resourceclaim controller's work
(`drasat.testbed.sim.controllers`).
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Mapping
from typing import Any

from drasat.testbed.sim import actor, errors, kubeclient, scheduling

Obj = dict[str, Any]
_RES = ("resource.k8s.io", "v1")
DEFAULT_SCHEDULER = "default-scheduler"


def _claims(namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
    return kubeclient.path(*_RES, "resourceclaims", namespace=namespace, name=name, subresource=sub)


def _core(
    plural: str, namespace: str | None = None, name: str | None = None, sub: str | None = None
) -> str:
    return kubeclient.path("", "v1", plural, namespace=namespace, name=name, subresource=sub)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Pending(Exception):
    """The pod cannot be bound yet; the message says why (or what it waits for)."""


class PodScheduler(actor.WatchDrivenLoop):
    """The pass both simulated schedulers share, this v1 one and the classic wing's
    (`drasat.classic.scheduler`): each pod not bound yet, not being deleted and `_ours` is handed
    to `_schedule`, in namespace/name order. Its `Pending` reason or an API error is kept in
    `reasons` (the next pass tries again); a pod it bound goes into `bound`.

    Run `run_once()` yourself, or `start()` a background thread and `stop()` it."""

    def __init__(self, client: kubeclient.KubeClient, *, resync: float) -> None:
        super().__init__(client, resync=resync)
        self._progress = threading.Condition()
        #: Why each pending pod ((namespace, name)) has not been bound yet.
        self.reasons: dict[tuple[str, str], str] = {}
        #: Pods this scheduler bound, with their node.
        self.bound: dict[tuple[str, str], str] = {}

    def wait_bound(self, namespace: str, name: str, *, timeout: float = 30.0) -> str:
        """Wait until this scheduler bound the pod; its node. TimeoutError with the reason."""
        with self._progress:
            if self._progress.wait_for(lambda: (namespace, name) in self.bound, timeout):
                return self.bound[(namespace, name)]
        reason = self.reasons.get((namespace, name), "never seen")
        raise TimeoutError(f"pod {namespace}/{name} not bound after {timeout}s: {reason}")

    # --- what a scheduler says --------------------------------------------------------------

    def _before_pods(self, pods: list[Obj]) -> None:
        """Called once a pass, before the pending pods are looked at."""

    def _ours(self, pod: Obj) -> bool:
        """Whether this scheduler binds the pod (not yet bound, not being deleted)."""
        return True

    def _schedule(self, pod: Obj, nodes: list[Obj]) -> str | None:
        """Take the next step for one pending pod; the node when it was bound."""
        raise NotImplementedError

    # --- one pass -----------------------------------------------------------------------------

    def run_once(self) -> None:
        pods = self._client.list(_core("pods"))["items"]
        nodes = self._client.list(_core("nodes"))["items"]
        self._before_pods(pods)
        for pod in sorted(pods, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
            if (pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            if (pod.get("spec") or {}).get("schedulingGates"):
                continue  # kube-scheduler's SchedulingGates: not queued until every gate is gone
            if not self._ours(pod):
                continue
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            try:
                node = self._schedule(pod, nodes)
            except Pending as waiting:
                self._note(key, str(waiting))
                continue
            except errors.ApiError as exc:
                self._note(key, f"API error, will retry: {exc.code} {exc.message}")
                continue
            if node is not None:
                with self._progress:
                    self.reasons.pop(key, None)
                    self.bound[key] = node
                    self._progress.notify_all()

    def _note(self, key: tuple[str, str], reason: str) -> None:
        with self._progress:
            self.reasons[key] = reason
            self._progress.notify_all()

    def _bind(self, pod: Obj, node: str) -> None:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self._client.create(_core("pods", namespace, name, "binding"), binding)


class V1Scheduler(PodScheduler):
    """Run `run_once()` yourself, or `start()` a background thread and `stop()` it."""

    name = "sim-v1-scheduler"

    def __init__(
        self,
        client: kubeclient.KubeClient,
        *,
        resync: float = 1.0,
        plain_pods: bool = True,
        scheduler_name: str = DEFAULT_SCHEDULER,
        binding_conditions: bool = True,
    ) -> None:
        super().__init__(client, resync=resync)
        #: The DRADeviceBindingConditions and DRAResourceClaimDeviceStatus gates, which the
        #: session's real control plane turns on (every DRA gate): see `_reserve`.
        self._binding_conditions = binding_conditions
        self._plain_pods = plain_pods
        self._scheduler_name = scheduler_name
        #: Claims PostFilter deallocated, as `namespace/name`, in order.
        self.deallocated: list[str] = []

    def watched(self) -> list[tuple[str, Mapping[str, str]]]:
        return [(_core("pods"), {}), (_claims(), {}), (_core("nodes"), {})]

    def _ours(self, pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        return (spec.get("schedulerName") or DEFAULT_SCHEDULER) == self._scheduler_name

    def _schedule(self, pod: Obj, nodes: list[Obj]) -> str | None:
        entries = scheduling.pod_claims(pod)
        if not entries and not self._plain_pods:
            return None
        claims = self._pre_filter(pod)
        found = scheduling.filter_nodes(pod, nodes, claims)
        if not found.nodes:
            self._post_filter(pod, claims, found.unavailable)
        node = found.nodes[0]
        for claim in claims:
            self._reserve(pod, claim)
        self._bind(pod, node)
        return node

    def _pre_filter(self, pod: Obj) -> list[Obj]:
        """The pod's claims, all allocated and reservable; Pending otherwise."""
        namespace = pod["metadata"]["namespace"]
        statuses = scheduling.status_claim_names(pod)
        claims: list[Obj] = []
        unallocated: list[str] = []
        for entry in scheduling.pod_claims(pod):
            if entry.claim_name is not None:
                name = entry.claim_name
            elif entry.name in statuses:
                if statuses[entry.name] is None:
                    continue  # the resourceclaim controller found no claim is needed
                name = str(statuses[entry.name])
            else:
                raise Pending(
                    f"waiting for the claim of {entry.name!r} to be created from template "
                    f"{entry.template_name!r}"
                )
            try:
                claim = self._client.get(_claims(namespace, name))
            except errors.ApiError as exc:
                if exc.code == 404:
                    raise Pending(f"resourceclaim {name!r} not found") from None
                raise
            if claim["metadata"].get("deletionTimestamp"):
                raise Pending(f"resourceclaim {name!r} is being deleted")
            if entry.template_name is not None and not _owned_by(claim, pod):
                raise Pending(f"resourceclaim {name!r} was not created for the pod")
            status = claim.get("status") or {}
            if not status.get("allocation"):
                unallocated.append(name)
            elif not scheduling.reserved_for(claim, pod) and (
                len(status.get("reservedFor") or []) >= scheduling.RESERVED_FOR_MAX
            ):
                raise Pending(f"resourceclaim {name!r} in use")
            claims.append(claim)
        if unallocated:
            raise Pending(
                f"waiting for resourceclaims {unallocated} to be allocated (this scheduler "
                "allocates nothing: drasat's controller does)"
            )
        return claims

    def _post_filter(self, pod: Obj, claims: list[Obj], unavailable: list[int]) -> None:
        for index in unavailable:
            claim = claims[index]
            if not scheduling.can_deallocate(claim, pod):
                continue
            meta = claim["metadata"]
            patch = {
                "metadata": {"resourceVersion": meta["resourceVersion"]},
                "status": {"allocation": None, "reservedFor": None},
            }
            self._client.merge_patch(_claims(meta["namespace"], meta["name"], "status"), patch)
            self.deallocated.append(f"{meta['namespace']}/{meta['name']}")
            raise Pending(
                f"no node fits the pod and its claims' allocations; deallocated resourceclaim "
                f"{meta['name']!r}"
            )
        raise Pending("no node fits the pod and its claims' allocations")

    def _reserve(self, pod: Obj, claim: Obj) -> None:
        if scheduling.reserved_for(claim, pod):
            return
        meta = claim["metadata"]
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        patch: Obj = {
            "metadata": {"resourceVersion": meta["resourceVersion"]},
            "status": {"reservedFor": [*reserved, scheduling.pod_reference(pod)]},
        }
        if self._binding_conditions and not status["allocation"].get("allocationTimestamp"):
            # As kube-scheduler 1.37 with DRADeviceBindingConditions and
            # DRAResourceClaimDeviceStatus: it stamps an allocation that has no timestamp, and the
            # API server refuses that change of a set allocation (422), so the pod never binds.
            patch["status"]["allocation"] = {"allocationTimestamp": _now()}
        self._client.merge_patch(_claims(meta["namespace"], meta["name"], "status"), patch)


def _owned_by(claim: Obj, pod: Obj) -> bool:
    owners = claim["metadata"].get("ownerReferences") or []
    return any(o.get("uid") == pod["metadata"]["uid"] and o.get("controller") for o in owners)
