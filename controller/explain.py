"""`drasat explain`: why drasat's controller places a pod where it does, or nowhere.

It reads the live cluster once (the same objects the controller's informers hold), builds the same
input (`v1inputs`) and runs the same allocation for that one pod, writing nothing. The text is
the Warning the controller records on the pod when it refuses it.
"""

from __future__ import annotations

from drasat import v1
from drasat.controller import nodes, v1controller, v1inputs
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import Api
from drasat.solver import SolveParams


def snapshot(api: Api, *, namespace: str) -> v1inputs.Snapshot:
    claims = {
        f"{c['metadata']['namespace']}/{c['metadata']['name']}": c
        for c in api.list(r.RESOURCE_CLAIMS_V1).items
    }
    parsed = {}
    for obj in api.list(r.NAS, namespace=namespace).items:
        found = nodes.parse(obj)
        parsed[found.node.name] = found
    return v1inputs.Snapshot(
        pods=api.list(r.PODS).items,
        claims=claims,
        classes=v1inputs.our_classes(api.list(r.DEVICE_CLASSES_V1).items),
        nodes={str(n["metadata"]["name"]): n for n in api.list(r.NODES).items},
        nas=parsed,
    )


def explain(api: Api, pod_namespace: str, pod_name: str, *, namespace: str) -> str:
    """One paragraph: where the pod is or would go, or why nowhere."""
    try:
        pod = api.get(r.PODS, pod_name, namespace=pod_namespace)
    except errors.NotFound:
        return f"pod {pod_namespace}/{pod_name} not found"
    key = f"{pod_namespace}/{pod_name}"
    if (pod.get("spec") or {}).get("nodeName"):
        return f"pod {key} is bound to node {pod['spec']['nodeName']}"
    found = snapshot(api, namespace=namespace)
    found.pods = [p for p in found.pods if v1inputs.pod_key(p) != key] + [pod]
    pending, waiting = v1inputs.pending_pods(found)
    if key in waiting:
        return f"pod {key} waits: {waiting[key]}"
    item = next((p for p in pending if p.input.key == key), None)
    if item is None:
        return (
            f"pod {key} has no unallocated claim of drasat's classes "
            f"({', '.join(sorted(found.classes)) or 'none installed'}): kube-scheduler handles it"
        )
    outcome = v1.allocate(
        v1inputs.node_inputs(found), [item.input], found.classes, params=SolveParams()
    )
    if key in outcome.placed:
        node = outcome.placed[key]
        lines = [f"pod {key} fits on node {node}:"]
        for placed in outcome.allocations.values():
            devices = ", ".join(
                f"{d['request']}={d['device']}" for d in placed.allocation["devices"]["results"]
            )
            lines.append(f"  claim {placed.namespace}/{placed.name}: {devices}")
        return "\n".join(lines)
    reasons = outcome.refused.get(key, ())
    return f"pod {key} fits nowhere: " + v1controller.explanation(item, reasons)
