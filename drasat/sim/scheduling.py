"""What the simulated scheduler decides, apart from how it talks to the server.

Purely computational: reading pod claims in both API shapes, node selectors, node choice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

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


def _requirement(expression: Mapping[str, Any], value: str | None) -> bool:
    operator = expression.get("operator")
    values = expression.get("values") or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            number, bound = int(value), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def node_selector_matches(selector: Mapping[str, Any] | None, node: Mapping[str, Any]) -> bool:
    """A v1 NodeSelector: terms are ORed, expressions and fields within a term ANDed."""
    if not selector:
        return True
    labels = (node.get("metadata") or {}).get("labels") or {}
    fields = {"metadata.name": (node.get("metadata") or {}).get("name")}
    for term in selector.get("nodeSelectorTerms") or []:
        expressions = term.get("matchExpressions") or []
        by_field = term.get("matchFields") or []
        if not expressions and not by_field:
            continue
        if all(_requirement(e, labels.get(e.get("key"))) for e in expressions) and all(
            _requirement(f, fields.get(f.get("key"))) for f in by_field
        ):
            return True
    return False


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


def _tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key")
        if toleration.get("operator") == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def pod_fits_node(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """kube-scheduler's filters before DynamicResources, as far as the simulator knows nodes:
    NodeUnschedulable, NodeName, TaintToleration (NoSchedule, NoExecute), NodeAffinity
    (nodeSelector and required node affinity). No resource fit: simulated nodes have no
    allocatable cpu/memory."""
    spec = pod.get("spec") or {}
    meta = node.get("metadata") or {}
    node_spec = node.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    if node_spec.get("unschedulable") and not _tolerates(
        tolerations, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    ):
        return False
    if spec.get("nodeName") and spec["nodeName"] != meta.get("name"):
        return False
    for taint in node_spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(
            tolerations, taint
        ):
            return False
    labels = meta.get("labels") or {}
    wanted = spec.get("nodeSelector") or {}
    if any(labels.get(key) != value for key, value in wanted.items()):
        return False
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return node_selector_matches(affinity, node)


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
