"""What the v1 allocation loop decides from: the cluster as the informers hold it, turned into
the allocator's input (`drasat.v1`). Shared by the controller's cycle and `drasat explain`, so an
explanation is the decision the controller would make.

- a claim is ours when one of its requests names a DeviceClass whose selectors speak of
  drasat's driver (`gpu.drasat.io`);
- a pod is pending when it is not bound, not being deleted and not finished; its claims come
  from `spec.resourceClaims` (a template's claim by the name in `status.resourceClaimStatuses`,
  which the real resourceclaim controller writes);
- a pod waits (is not placed this cycle) while a claim it names does not exist yet;
- a pod whose claims are all allocated is the scheduler's; one with some allocated may only go
  where those are;
- candidate nodes: nodes with a Ready NAS of ours, that pass `v1.nodefit`, and that were not
  found unsuitable for the pod lately (the scheduler deallocated its claim there).

This is a purely computational module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drasat.api.groups import DRIVER_NAME
from drasat.controller import nodes as nas_nodes
from drasat.solver import NodeState
from drasat.v1 import Node, PodInput, devices, nodefit, results

Obj = dict[str, Any]


def claim_ref(claim: Obj) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def is_allocated(claim: Obj) -> bool:
    return bool((claim.get("status") or {}).get("allocation"))


def allocated_node(claim: Obj) -> str | None:
    """The node a claim's `status.allocation.nodeSelector` names by `metadata.name`."""
    selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for requirement in (term.get("matchFields") or []) + (term.get("matchExpressions") or []):
            values = requirement.get("values") or []
            if (
                requirement.get("key") in ("metadata.name", "kubernetes.io/hostname")
                and len(values) == 1
            ):
                return str(values[0])
    return None


def our_classes(classes: Iterable[Obj]) -> dict[str, Obj]:
    """The DeviceClasses whose selectors name drasat's driver, by name."""
    out = {}
    for device_class in classes:
        text = str((device_class.get("spec") or {}).get("selectors") or "")
        if DRIVER_NAME in text:
            out[str(device_class["metadata"]["name"])] = device_class
    return out


def _class_names(claim: Obj) -> set[str]:
    found = set()
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        exactly = request.get("exactly") or {}
        if exactly.get("deviceClassName"):
            found.add(str(exactly["deviceClassName"]))
        if request.get("deviceClassName"):  # v1beta1's shape
            found.add(str(request["deviceClassName"]))
        for sub in request.get("firstAvailable") or []:
            found.add(str(sub.get("deviceClassName", "")))
    return found


def is_ours(claim: Obj, ours: Mapping[str, Obj]) -> bool:
    return bool(_class_names(claim) & set(ours))


def pod_key(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def is_pending(pod: Obj) -> bool:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase", "Pending")
    return not spec.get("nodeName") and not meta.get("deletionTimestamp") and phase == "Pending"


def pod_claim_names(pod: Obj) -> list[str | None]:
    """The names of the pod's claims, in spec order; None for a template's claim not made yet."""
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    out: list[str | None] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        if entry.get("resourceClaimName"):
            out.append(str(entry["resourceClaimName"]))
        else:
            name = statuses.get(entry.get("name"))
            out.append(str(name) if name else None)
    return out


def reserved_pods(claim: Obj) -> set[str]:
    return {str(r.get("uid")) for r in (claim.get("status") or {}).get("reservedFor") or []}


@dataclass
class Snapshot:
    """The informer caches at the start of a cycle."""

    pods: Sequence[Obj]
    claims: Mapping[str, Obj]  # namespace/name -> claim
    classes: Mapping[str, Obj]  # ours, by name
    nodes: Mapping[str, Obj]  # Node objects by name
    nas: Mapping[str, nas_nodes.ParsedNas]  # by node name
    #: pod key -> nodes found unsuitable lately, with the scheduler's reason.
    unsuitable: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Pending:
    """A pod the cycle places, with its claims."""

    pod: Obj
    input: PodInput
    #: The claims to allocate (ours, unallocated).
    claims: tuple[Obj, ...]
    #: Why nodes were left out of its candidates (node -> reason), for its explanation.
    excluded: Mapping[str, str]


def pending_pods(
    snapshot: Snapshot, *, limit: int | None = None
) -> tuple[list[Pending], dict[str, str]]:
    """The pods to place this cycle (oldest first, at most `limit`) and the pods that wait, with
    why (a claim not created yet)."""
    waiting: dict[str, str] = {}
    out: list[Pending] = []
    bound = _bound_by_node(snapshot.pods)
    ordered = sorted(
        (p for p in snapshot.pods if is_pending(p)),
        key=lambda p: ((p.get("metadata") or {}).get("creationTimestamp", ""), pod_key(p)),
    )
    for pod in ordered:
        key = pod_key(pod)
        namespace = str(pod["metadata"].get("namespace", ""))
        names = pod_claim_names(pod)
        if not names:
            continue
        if None in names:
            waiting[key] = "a claim from a template is not created yet"
            continue
        claims = [snapshot.claims.get(f"{namespace}/{n}") for n in names]
        if any(c is None for c in claims):
            waiting[key] = "a claim it names does not exist"
            continue
        ours = [c for c in claims if c is not None and is_ours(c, snapshot.classes)]
        todo = tuple(c for c in ours if not is_allocated(c))
        if not todo:
            continue
        pinned = {allocated_node(c) for c in ours if is_allocated(c)}
        excluded = _excluded(pod, snapshot, bound, pinned)
        candidates = tuple(n for n in snapshot.nas if n not in excluded and n in snapshot.nodes)
        cpu, memory = nodefit.requests(pod)
        priority = int((pod.get("spec") or {}).get("priority") or 0)
        item = PodInput(key, namespace, todo, priority, cpu, memory, candidates)
        out.append(Pending(pod, item, todo, excluded))
        if limit is not None and len(out) >= limit:
            break
    return out, waiting


def _bound_by_node(pods: Iterable[Obj]) -> dict[str, list[Obj]]:
    out: dict[str, list[Obj]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            out.setdefault(str(node), []).append(pod)
    return out


def _excluded(
    pod: Obj, snapshot: Snapshot, bound: Mapping[str, list[Obj]], pinned: set[str | None]
) -> dict[str, str]:
    out: dict[str, str] = {}
    lately = snapshot.unsuitable.get(pod_key(pod), {})
    for name in snapshot.nas:
        node = snapshot.nodes.get(name)
        if node is None:
            out[name] = "no Node object"
            continue
        if pinned and name not in pinned:
            out[name] = "another claim of the pod is allocated on " + ", ".join(
                sorted(str(p) for p in pinned)
            )
            continue
        reason = nodefit.unfit(pod, node) or nodefit.full(
            nodefit.capacity(node, bound.get(name, []))
        )
        if reason is None and name in lately:
            reason = f"the scheduler could not bind the pod there lately: {lately[name]}"
        if reason is not None:
            out[name] = reason
    return out


def node_inputs(snapshot: Snapshot) -> list[Node]:
    """Every node with a NAS of ours and a Node object (a NAS left behind by a deleted node is
    not a node): its solver state (with cpu/memory from the Node and the pods bound there) and
    the devices its plugin publishes. A node reporting a GPU UUID an earlier node (by name)
    reports is left out: one GPU cannot be on two nodes, and the rest of the cluster must still
    be allocated."""
    bound = _bound_by_node(snapshot.pods)
    out = []
    seen: set[str] = set()
    for name, parsed in sorted(snapshot.nas.items()):
        state: NodeState = parsed.node
        node = snapshot.nodes.get(name)
        uuids = {gpu.uuid for gpu in state.nas.gpus()}
        if node is None or uuids & seen:
            continue
        seen |= uuids
        capacity = nodefit.capacity(node, bound.get(name, []))
        state = dataclasses.replace(
            state,
            cpu_milli=capacity.cpu_milli,
            memory_mib=capacity.memory_mib,
            used_cpu_milli=capacity.used_cpu_milli,
            used_memory_mib=capacity.used_memory_mib,
        )
        published = tuple(devices.drasat_devices(name, state.nas)) if state.ready else ()
        out.append(Node(state, published))
    return out


def ledger_of(claim: Obj, snapshot: Snapshot) -> tuple[str | None, dict[str, Any]]:
    """The node a claim is allocated on and the ledger entries its status stands for there."""
    node = allocated_node(claim)
    parsed = snapshot.nas.get(node or "")
    if node is None or parsed is None:
        return node, {}
    return node, results.ledger_from_status(claim, parsed.node.nas)
