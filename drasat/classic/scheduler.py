"""A simulated classic DRA scheduler (resource.k8s.io/v1alpha2), plus the resourceclaim
controller duties that go with it, talking HTTP to the API server through `kubeclient`.

For each pending pod whose claims all belong to our drivers' classes it:
creates claims from templates (`<pod>-<podClaimName>`, owned by the pod) and records them in
pod.status.resourceClaimStatuses; waits for Immediate claims to be allocated; for
WaitForFirstConsumer claims creates the PodSchedulingContext (potentialNodes = existing nodes
that fit, at most 128), waits for the driver's unsuitableNodes, sets spec.selectedNode to the
first suitable node and waits for the allocation; then adds the pod to each claim's
status.reservedFor, binds the pod and deletes the PodSchedulingContext. It also drops pods
that are gone from reservedFor, so deleted pods' claims can be deallocated.

Every pass reads the state afresh (level-triggered), so it resumes after any error or restart.
Passes run when a watched object changes, or every `resync` seconds.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from drasat.api import groups
from drasat.testbed.sim import errors, kubeclient, scheduling
from drasat.testbed.sim.v1scheduler import Pending, PodScheduler

log = logging.getLogger(__name__)

Obj = dict[str, Any]
_RES = ("resource.k8s.io", "v1alpha2")
_WATCHED = (
    ("", "v1", "pods"),
    (*_RES, "resourceclaims"),
    (*_RES, "podschedulingcontexts"),
    ("", "v1", "nodes"),
)


def _res(
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    return kubeclient.path(*_RES, plural, namespace=namespace, name=name, subresource=subresource)


class Scheduler(PodScheduler):
    """Run `run_once()` yourself, or `start()` a background thread and `stop()` it."""

    name = "sim-scheduler"

    def __init__(
        self,
        client: kubeclient.KubeClient,
        *,
        driver_names: Iterable[str] = groups.DRIVER_NAMES,
        resync: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        plain_pods: bool = False,
    ) -> None:
        super().__init__(client, resync=resync)
        #: Also bind pods without claims (to the first node that fits), as the default
        #: scheduler would; off, they are left to another scheduler.
        self._plain_pods = plain_pods
        self._drivers = frozenset(driver_names)
        self._clock = clock
        #: The resource classes by name, read afresh each pass (`_before_pods`).
        self._classes: dict[str, Obj] = {}

    # --- lifecycle (start/stop/loop: actor.WatchDrivenLoop) ---------------------------------

    def watched(self) -> list[tuple[str, Mapping[str, str]]]:
        return [(kubeclient.path(g, v, plural), {}) for g, v, plural in _WATCHED]

    # --- one pass (run_once: PodScheduler) ----------------------------------------------------

    def _before_pods(self, pods: list[Obj]) -> None:
        """Read the classes and release gone pods from claims, before pending pods move on."""
        self._classes = {
            c["metadata"]["name"]: c for c in self._client.list(_res("resourceclasses"))["items"]
        }
        self._release_gone_pods(pods)

    def _schedule(self, pod: Obj, nodes: list[Obj]) -> str | None:
        """Take the next step for one pending pod; the node when it was bound."""
        entries = scheduling.pod_claims(pod)
        if not entries:
            if not self._plain_pods:
                return None  # the default scheduler's business
            fitting = scheduling.candidate_nodes(pod, nodes, [])
            if not fitting:
                raise Pending("no node fits the pod's nodeSelector")
            self._bind(pod, fitting[0])
            return fitting[0]
        # Look before writing: a pod with any claim of another driver's class is not ours.
        found = {entry.name: self._claim_or_template(pod, entry) for entry in entries}
        for existing, template in found.values():
            spec = (existing or {}).get("spec") or ((template or {}).get("spec") or {})["spec"]
            driver = (self._classes.get(spec.get("resourceClassName")) or {}).get("driverName")
            if driver not in self._drivers:
                return None
        claims = {
            entry.name: found[entry.name][0]
            or self._claim_from_template(pod, entry, found[entry.name][1])
            for entry in entries
        }
        self._record_claim_statuses(pod, entries)
        for claim in claims.values():
            self._check_usable(pod, claim)
        allocated = [c for c in claims.values() if (c.get("status") or {}).get("allocation")]
        immediate = [
            name
            for name, c in claims.items()
            if c["spec"].get("allocationMode") == "Immediate" and c not in allocated
        ]
        if immediate:
            raise Pending(f"waiting for Immediate claims {immediate} to be allocated")
        candidates = scheduling.candidate_nodes(pod, nodes, allocated)
        if not candidates:
            raise Pending("no node fits the pod's nodeSelector and allocated claims")
        pending = [name for name, c in claims.items() if c not in allocated]
        if pending:
            self._negotiate(pod, candidates, pending)
            return None
        node = self._chosen_node(pod, candidates)
        for claim in claims.values():
            self._reserve(pod, claim)
        self._bind(pod, node)
        return node

    def _claim_or_template(
        self, pod: Obj, entry: scheduling.PodClaim
    ) -> tuple[Obj | None, Obj | None]:
        """The pod's existing claim for an entry, or else the template to make it from."""
        namespace, pod_name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        name = entry.resolved_name(pod_name)
        try:
            claim = self._client.get(_res("resourceclaims", namespace, name))
        except errors.ApiError as exc:
            if exc.code != 404:
                raise
            if entry.template_name is None:
                raise Pending(f"claim {name!r} does not exist") from None
            return None, self._template(namespace, entry.template_name)
        if entry.template_name is not None:
            owners = claim["metadata"].get("ownerReferences") or []
            if not any(o.get("uid") == pod["metadata"]["uid"] for o in owners):
                raise Pending(f"claim {name!r} exists but was not created for this pod")
        return claim, None

    def _template(self, namespace: str, name: str) -> Obj:
        try:
            return self._client.get(_res("resourceclaimtemplates", namespace, name))
        except errors.ApiError as exc:
            if exc.code == 404:
                raise Pending(f"claim template {name!r} does not exist") from None
            raise

    def _claim_from_template(
        self, pod: Obj, entry: scheduling.PodClaim, template: Obj | None
    ) -> Obj:
        if template is None:  # pragma: no cover - _claim_or_template returns one of the two
            raise Pending(f"no claim and no template for {entry.name!r}")
        namespace = pod["metadata"]["namespace"]
        name = entry.resolved_name(pod["metadata"]["name"])
        meta = template["spec"].get("metadata") or {}
        body = {
            "apiVersion": "resource.k8s.io/v1alpha2",
            "kind": "ResourceClaim",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": meta.get("labels") or {},
                "annotations": {
                    **(meta.get("annotations") or {}),
                    "resource.kubernetes.io/pod-claim-name": entry.name,
                },
                "ownerReferences": [scheduling.owner_reference(pod)],
            },
            "spec": template["spec"]["spec"],
        }
        return self._client.create(_res("resourceclaims", namespace), body)

    def _record_claim_statuses(self, pod: Obj, entries: list[scheduling.PodClaim]) -> None:
        wanted = [
            {"name": e.name, "resourceClaimName": e.resolved_name(pod["metadata"]["name"])}
            for e in entries
            if e.template_name is not None
        ]
        if wanted and (pod.get("status") or {}).get("resourceClaimStatuses") != wanted:
            ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
            url = kubeclient.path("", "v1", "pods", namespace=ns, name=name, subresource="status")
            self._client.merge_patch(url, {"status": {"resourceClaimStatuses": wanted}})

    @staticmethod
    def _check_usable(pod: Obj, claim: Obj) -> None:
        name = claim["metadata"]["name"]
        if claim["metadata"].get("deletionTimestamp"):
            raise Pending(f"claim {name!r} is being deleted")
        status = claim.get("status") or {}
        if status.get("deallocationRequested"):
            raise Pending(f"claim {name!r} is being deallocated")
        others = [
            r for r in status.get("reservedFor") or [] if r.get("uid") != pod["metadata"]["uid"]
        ]
        allocation = status.get("allocation")
        if others and allocation and not allocation.get("shareable"):
            raise Pending(f"claim {name!r} is in use by {others[0].get('name')!r}")

    def _context_url(self, pod: Obj, *, collection: bool = False) -> str:
        namespace = pod["metadata"]["namespace"]
        if collection:
            return _res("podschedulingcontexts", namespace)
        return _res("podschedulingcontexts", namespace, pod["metadata"]["name"])

    def _negotiate(self, pod: Obj, candidates: list[str], pending: list[str]) -> None:
        potential = candidates[: scheduling.MAX_NODES]
        try:
            context = self._client.get(self._context_url(pod))
        except errors.ApiError as exc:
            if exc.code != 404:
                raise
            body = {
                "apiVersion": "resource.k8s.io/v1alpha2",
                "kind": "PodSchedulingContext",
                "metadata": {
                    "name": pod["metadata"]["name"],
                    "ownerReferences": [scheduling.owner_reference(pod)],
                },
                "spec": {"potentialNodes": potential},
            }
            self._client.create(self._context_url(pod, collection=True), body)
            raise Pending(
                "created the PodSchedulingContext; waiting for the driver's unsuitableNodes"
            ) from None
        if context["spec"].get("potentialNodes") != potential:
            self._client.merge_patch(
                self._context_url(pod), {"spec": {"potentialNodes": potential}}
            )
            raise Pending("updated potentialNodes; waiting for the driver")
        unsuitable = scheduling.unsuitable_by_claim(context)
        missing = [name for name in pending if name not in unsuitable]
        if missing:
            raise Pending(f"waiting for the driver to report unsuitableNodes for {missing}")
        suitable = scheduling.suitable_nodes(potential, unsuitable, pending)
        selected = context["spec"].get("selectedNode")
        if selected and selected in suitable:
            raise Pending(f"waiting for claims {pending} to be allocated on {selected!r}")
        if not suitable:
            raise Pending(f"every potential node is unsuitable for claims {pending}")
        self._client.merge_patch(self._context_url(pod), {"spec": {"selectedNode": suitable[0]}})
        raise Pending(f"selected node {suitable[0]!r}; waiting for allocation")

    def _chosen_node(self, pod: Obj, candidates: list[str]) -> str:
        with contextlib.suppress(errors.ApiError):
            selected = self._client.get(self._context_url(pod))["spec"].get("selectedNode")
            if selected in candidates:
                return str(selected)
        return candidates[0]

    def _reserve(self, pod: Obj, claim: Obj) -> None:
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        if any(r.get("uid") == pod["metadata"]["uid"] for r in reserved):
            return
        url = _res(
            "resourceclaims", claim["metadata"]["namespace"], claim["metadata"]["name"], "status"
        )
        patch = {
            "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
            "status": {"reservedFor": [*reserved, scheduling.pod_reference(pod)]},
        }
        self._client.merge_patch(url, patch)

    def _bind(self, pod: Obj, node: str) -> None:
        super()._bind(pod, node)
        with contextlib.suppress(errors.ApiError):
            self._client.delete(self._context_url(pod))

    def _release_gone_pods(self, pods: list[Obj]) -> None:
        """Remove pods that no longer exist or have finished from every claim's reservedFor."""
        # Done, as the resourceclaim controller sees it: finished, or deleted before it was
        # scheduled; a deleted pod on a node still runs until its kubelet removes it.
        running = {
            p["metadata"]["uid"]
            for p in pods
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not (p["metadata"].get("deletionTimestamp") and not p["spec"].get("nodeName"))
        }
        for claim in self._client.list(_res("resourceclaims"))["items"]:
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            kept = [r for r in reserved if r.get("resource") != "pods" or r.get("uid") in running]
            if len(kept) == len(reserved):
                continue
            url = _res(
                "resourceclaims",
                claim["metadata"]["namespace"],
                claim["metadata"]["name"],
                "status",
            )
            patch = {
                "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
                "status": {"reservedFor": kept or None},
            }
            with contextlib.suppress(errors.ApiError):  # changed meanwhile: next pass
                self._client.merge_patch(url, patch)
