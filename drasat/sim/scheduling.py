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
