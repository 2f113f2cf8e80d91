"""What the simulated scheduler decides, apart from how it talks to the server.

Purely computational: reading pod claims in both API shapes, node selectors, node choice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from drasat.api import nodefit

Obj = dict[str, Any]

#: Kubernetes caps PodSchedulingContext node lists at 128 entries.
MAX_NODES = 128


@dataclasses.dataclass(frozen=True)
class PodClaim:
    """One entry of pod.spec.resourceClaims: a claim by name, or one made from a template."""

    name: str
    claim_name: str | None
    template_name: str | None

    def resolved_name(self, pod_name: str) -> str:
        """The ResourceClaim this entry uses (`<pod>-<entry>` for a template)."""
        return self.claim_name or f"{pod_name}-{self.name}"


def pod_claims(pod: Mapping[str, Any]) -> list[PodClaim]:
    """The claims of a pod, in the 1.30 shape (`source: {...}`) or the 1.31+ one (flat)."""
    found = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        source = entry.get("source") or entry
        found.append(
            PodClaim(
                name=entry["name"],
                claim_name=source.get("resourceClaimName"),
                template_name=source.get("resourceClaimTemplateName"),
            )
        )
    return found


#: One implementation of kube-scheduler's node filters, shared with drasat's controller.
node_selector_matches = nodefit.node_selector_matches


def candidate_nodes(
    pod: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]], allocated: Sequence[Obj]
) -> list[str]:
    """Nodes (sorted by name) that match the pod's nodeSelector and every allocated claim."""
    wanted = (pod.get("spec") or {}).get("nodeSelector") or {}
    names = []
    for node in sorted(nodes, key=lambda n: str(n["metadata"]["name"])):
        labels = node["metadata"].get("labels") or {}
        if any(labels.get(key) != value for key, value in wanted.items()):
            continue
        if all(
            node_selector_matches(
                (c.get("status") or {}).get("allocation", {}).get("availableOnNodes"), node
            )
            for c in allocated
        ):
            names.append(str(node["metadata"]["name"]))
    return names


def suitable_nodes(
    potential: Sequence[str], unsuitable: Mapping[str, Iterable[str]], pending: Iterable[str]
) -> list[str]:
    """Potential nodes that no pending claim (by pod claim name) reported as unsuitable."""
    excluded = {node for claim in pending for node in unsuitable.get(claim, ())}
    return [node for node in potential if node not in excluded]


def unsuitable_by_claim(context: Mapping[str, Any]) -> dict[str, list[str]]:
    """status.resourceClaims of a PodSchedulingContext, by pod claim name."""
    entries = (context.get("status") or {}).get("resourceClaims") or []
    return {e["name"]: list(e.get("unsuitableNodes") or []) for e in entries}


def owner_reference(pod: Mapping[str, Any]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": pod["metadata"]["name"],
        "uid": pod["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_reference(pod: Mapping[str, Any]) -> Obj:
    """A ResourceClaimConsumerReference for status.reservedFor."""
    return {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}


# --- resource.k8s.io/v1: what kube-scheduler's node filters and DRA plugin decide -------------

#: ResourceClaimReservedForMaxSize of resource.k8s.io/v1: at most this many consumers.
RESERVED_FOR_MAX = 256
#: The resourceclaim controller's annotation on a claim it made from a template.
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


def status_claim_names(pod: Mapping[str, Any]) -> dict[str, str | None]:
    """pod.status.resourceClaimStatuses by pod claim name (None: no claim is needed)."""
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    return {s["name"]: s.get("resourceClaimName") for s in statuses if s.get("name")}


def pod_fits_node(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """kube-scheduler's filters before DynamicResources, as far as the simulator knows nodes:
    NodeUnschedulable, NodeName, TaintToleration (NoSchedule, NoExecute), NodeAffinity
    (nodeSelector and required node affinity); `drasat.api.nodefit.unfit`, the controller's
    own. No resource fit: simulated nodes have no allocatable cpu/memory."""
    return nodefit.unfit(pod, node) is None


@dataclasses.dataclass(frozen=True)
class Filtered:
    """What the filters found for one pod whose claims are all allocated."""

    #: Nodes (by name, sorted) where the pod and every claim's allocation fit.
    nodes: list[str]
    #: Indexes of claims whose allocation's nodeSelector did not match some node that passed
    #: the pod's own filters (kube-scheduler's `unavailableClaims`, PostFilter's candidates).
    unavailable: list[int]


def filter_nodes(
    pod: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]], claims: Sequence[Mapping[str, Any]]
) -> Filtered:
    """The nodes a pod with allocated claims may go to. As in kube-scheduler, the claims'
    `status.allocation.nodeSelector` is only checked on nodes that pass the earlier filters, so
    a claim counts as unavailable only where the pod could otherwise run."""
    fitting: list[str] = []
    unavailable: set[int] = set()
    for node in sorted(nodes, key=lambda n: str(n["metadata"]["name"])):
        if not pod_fits_node(pod, node):
            continue
        missing = {
            index
            for index, claim in enumerate(claims)
            if not node_selector_matches(
                ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector"), node
            )
        }
        unavailable |= missing
        if not missing:
            fitting.append(str(node["metadata"]["name"]))
    return Filtered(fitting, sorted(unavailable))


def reserved_for(claim: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    return any(r.get("uid") == pod["metadata"]["uid"] for r in reserved)


def can_deallocate(claim: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """PostFilter may deallocate a claim reserved for nobody, or only for this pod."""
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    return not reserved or (len(reserved) == 1 and reserved[0].get("uid") == pod["metadata"]["uid"])
