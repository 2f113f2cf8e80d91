"""What the v1 allocation loop decides from: the cluster as the informers hold it, turned into
the allocator's input (`drasat.v1`). Shared by the controller's cycle and `drasat explain`, so an
explanation is the decision the controller would make.

- a claim is ours when one of its requests names a DeviceClass whose selectors speak of
  drasat's driver (`gpu.drasat.io`), whether or not it tolerates drasat's allocator taint (one
  allocator per device; only a claim asking for admin access alone is kube-scheduler's);
- a pod is pending when it is not bound, not being deleted and not finished; its claims come
  from `spec.resourceClaims` (a template's claim by the name in `status.resourceClaimStatuses`,
  which the real resourceclaim controller writes);
- a pod waits (is not placed this cycle) while a claim it names does not exist yet, and while it
  carries a scheduling gate of another owner (Kueue's, ...): devices given now would sit idle;
- drasat's own gate (`SCHEDULING_GATE`, set by admission) does not make a pod wait: it is what
  keeps kube-scheduler off the pod until drasat has allocated; `to_ungate` says which gated pods
  drasat lets go now (every claim of drasat's allocated, or none to allocate);
- a pod whose claims are all allocated is the scheduler's; one with some allocated may only go
  where those are;
- the devices are what each node publishes: the complete pools of drasat's ResourceSlices
  (`drasat.v1.slices`; devices with a NoSchedule/NoExecute taint other than drasat's allocator
  taint are not allocated); the NAS is the ledger of allocated and prepared claims;
- candidate nodes: nodes with a Ready NAS of ours and usable slices, that pass `v1.nodefit`,
  and that were not found unsuitable for the pod lately (the scheduler deallocated its claim
  there).

This is a purely computational module.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drasat.api import nodefit
from drasat.api.groups import DRIVER_NAME, SCHEDULING_GATE
from drasat.controller import allocation, nasnodes
from drasat.solver import NodeState
from drasat.v1 import Node, PodInput, otherdevices, results, slices, with_other_devices

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


def our_classes(classes: Iterable[Obj], drivers: Iterable[str] = (DRIVER_NAME,)) -> dict[str, Obj]:
    """The DeviceClasses whose selectors name a driver drasat allocates (its own by default;
    `drasat controller --driver`, `controller.drivers`), by name."""
    wanted = tuple(drivers)
    out = {}
    for device_class in classes:
        text = str((device_class.get("spec") or {}).get("selectors") or "")
        if any(driver in text for driver in wanted):
            out[str(device_class["metadata"]["name"])] = device_class
    return out


def _requests(claim: Obj) -> list[Mapping[str, Any]]:
    """The claim's requests that are objects (what the API server's schema guarantees; anything
    else is skipped here rather than stop a cycle, and refused when the claim is read)."""
    spec = _object(claim.get("spec"))
    return [
        r for r in _array(_object(spec.get("devices")).get("requests")) if isinstance(r, Mapping)
    ]


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _array(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _alternatives(request: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """`exactly` (or a v1beta1 request itself) and each `firstAvailable` entry."""
    found = [_object(request.get("exactly")), request]
    return found + [s for s in _array(request.get("firstAvailable")) if isinstance(s, Mapping)]


def _class_names(claim: Obj) -> set[str]:
    found = set()
    for request in _requests(claim):
        for alternative in _alternatives(request):
            if alternative.get("deviceClassName"):
                found.add(str(alternative["deviceClassName"]))
    return found


def is_ours(claim: Obj, ours: Mapping[str, Obj]) -> bool:
    return bool(_class_names(claim) & set(ours))


#: The taint drasat's DeviceTaintRule puts on every device of its driver (`taintrule`).
ALLOCATOR_TAINT = {"key": f"{DRIVER_NAME}/allocator", "value": "drasat", "effect": "NoSchedule"}


def tolerates_allocator_taint(claim: Obj) -> bool:
    """Whether a request of the claim (any `exactly` or `firstAvailable` alternative) tolerates
    the allocator taint: kube-scheduler's allocator may then hand it drasat's devices, if its
    pod reaches kube-scheduler before drasat allocates it."""
    return any(_tolerates(a) for r in _requests(claim) for a in _alternatives(r))


def _tolerates(alternative: Mapping[str, Any]) -> bool:
    tolerations = [t for t in _array(alternative.get("tolerations")) if isinstance(t, Mapping)]
    return bool(tolerations) and nodefit.tolerates(tolerations, ALLOCATOR_TAINT)


def admin_access_only(claim: Obj, ours: Mapping[str, Obj]) -> bool:
    """Whether every request of the claim that names a class of ours asks for admin access
    (`exactly.adminAccess`) and tolerates the allocator taint. Admin access holds no device (the
    device stays with the claims that hold it; upstream's allocator counts it as using nothing)
    and the API server admits it only in namespaces an administrator labelled
    `resource.kubernetes.io/admin-access`; drasat's allocator does not give it, so such a claim
    is left to kube-scheduler's, as its toleration asks."""
    found = [
        r
        for r in _requests(claim)
        if any(a.get("deviceClassName") in ours for a in _alternatives(r))
    ]
    return bool(found) and all(
        _object(r.get("exactly")).get("adminAccess") is True
        and _tolerates(_object(r.get("exactly")))
        for r in found
    )


def allocates(claim: Obj, ours: Mapping[str, Obj]) -> bool:
    """Whether drasat allocates the claim: it names a class of ours. Whether its requests
    tolerate the allocator taint does not matter: kube-scheduler's allocator must never hand out
    a device drasat allocates too (the two would pick the same device at the same instant), and
    a tenant must not take its claims out of drasat's policy (`namespaceLimits`) with a
    toleration. The scheduling gate keeps kube-scheduler off the claim's pod until drasat has
    allocated it. Only a claim asking for admin access alone is kube-scheduler's
    (`admin_access_only`)."""
    return is_ours(claim, ours) and not admin_access_only(claim, ours)


def names_our_driver(claim: Obj) -> bool:
    """Whether the claim's `status.allocation` has a result of drasat's driver (whoever wrote
    it)."""
    return bool(our_results(claim))


def our_results(claim: Obj) -> list[Obj]:
    allocated = (claim.get("status") or {}).get("allocation") or {}
    found = (allocated.get("devices") or {}).get("results") or []
    return [r for r in found if isinstance(r, dict) and r.get("driver") == DRIVER_NAME]


def settles(claim: Obj, ours: Mapping[str, Obj]) -> bool:
    """Whether the claim's ledger entries and finalizer are drasat's to keep: it carries our
    finalizer, its status names our driver, or its class is ours. Not the class alone: a claim
    whose DeviceClass was deleted keeps its devices and finalizer until it is released."""
    return allocation.has_finalizer(claim) or names_our_driver(claim) or is_ours(claim, ours)


def pod_key(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def is_pending(pod: Obj) -> bool:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase", "Pending")
    return not spec.get("nodeName") and not meta.get("deletionTimestamp") and phase == "Pending"


def pod_done(pod: Obj) -> bool:
    """Whether a pod will never use its claims again: it finished (Succeeded, Failed), or it
    was deleted before it was bound to a node. The resourceclaim controller's test before it
    drops the pod from a claim's `reservedFor`."""
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase", "Pending")
    unbound = not (pod.get("spec") or {}).get("nodeName")
    return phase in ("Succeeded", "Failed") or bool(meta.get("deletionTimestamp") and unbound)


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
    nas: Mapping[str, nasnodes.ParsedNas]  # by node name
    #: pod key -> nodes found unsuitable lately, with the scheduler's reason.
    unsuitable: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: What each node publishes of drasat's driver, read from its ResourceSlices (the source
    #: kube-scheduler reads; `drasat.v1.slices`): the devices the cycle allocates. The NAS is
    #: the ledger of allocated and prepared claims only.
    published: Mapping[str, slices.NodeDevices] = field(default_factory=dict)
    #: Every DeviceClass by name, drasat's or not: a claim drasat takes may ask for another
    #: driver's devices beside its GPUs (empty: `classes` only).
    device_classes: Mapping[str, Obj] = field(default_factory=dict)
    #: What each node publishes of other drivers' devices (`drasat.v1.otherdevices`), and what
    #: allocated claims hold of them by their statuses (node -> amount -> held).
    others: Mapping[str, otherdevices.NodeOthers] = field(default_factory=dict)
    others_held: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: The PodGroups (`scheduling.k8s.io`) by namespace/name where the API server serves them
    #: (gangs: `drasat.v1.gangs.member_of`); None: not served, gangs come from labels only.
    pod_groups: Mapping[str, Obj] | None = None

    @property
    def claim_classes(self) -> dict[str, Obj]:
        """The classes a claim drasat takes is read against: every class (drasat's win)."""
        return {**self.device_classes, **self.classes}


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
    room: _Room | None = None  # worked out for the first pod that needs it (none: idle)
    #: `_fit_key` -> (excluded, candidates) of the pods that ask that of a node.
    alike: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {}
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
        found = [snapshot.claims.get(f"{namespace}/{n}") for n in names]
        claims = [c for c in found if c is not None]
        if len(claims) < len(found):
            waiting[key] = "a claim it names does not exist"
            continue
        todo = tuple(c for c in claims if allocates(c, snapshot.classes) and not is_allocated(c))
        if not todo:
            theirs = next((c for c in claims if is_ours(c, snapshot.classes)
                           and not is_allocated(c)), None)  # fmt: skip
            if theirs is not None:
                waiting[key] = (f"claim {claim_ref(theirs)} asks for admin access and "
                                "tolerates drasat's allocator taint: kube-scheduler "
                                "allocates it")  # fmt: skip
            continue
        others = others_gates(pod)
        if others:
            # kube-scheduler does not consider a gated pod: devices given now would sit idle
            # until that owner lets it go (then drasat allocates and lifts its own gate).
            waiting[key] = f"it has scheduling gates ({', '.join(others)})"
            continue
        # Every allocated claim of the pod, of any driver, pins it to the nodes its
        # allocation's node selector selects.
        pinned = [c for c in claims if is_allocated(c)]
        if room is None:
            room = _nodes_room(snapshot)
        if pinned or key in snapshot.unsuitable:
            excluded = _excluded(pod, snapshot, room, pinned)
            candidates = _candidates(snapshot, excluded)
        else:
            # Pods that ask the same of a node (no claim pinned, nothing unsuitable lately) get
            # the same nodes: worked out once a cycle per kind of pod, not per pod.
            fit = _fit_key(pod)
            if fit not in alike:
                excluded = _excluded(pod, snapshot, room, pinned)
                alike[fit] = (excluded, _candidates(snapshot, excluded))
            excluded, candidates = alike[fit]
        cpu, memory = nodefit.requests(pod)
        priority = int((pod.get("spec") or {}).get("priority") or 0)
        item = PodInput(key, namespace, todo, priority, cpu, memory, candidates)
        out.append(Pending(pod, item, todo, excluded))
        if limit is not None and len(out) >= limit:
            break
    return out, waiting


def gate_names(pod: Obj) -> list[str]:
    """The pod's scheduling gates, in order."""
    gates = _array(_object(pod.get("spec")).get("schedulingGates"))
    return [str(g.get("name", "")) for g in gates if isinstance(g, Mapping)]


def has_our_gate(pod: Obj) -> bool:
    """Whether drasat's scheduling gate holds the pod back from kube-scheduler."""
    return SCHEDULING_GATE in gate_names(pod)


def others_gates(pod: Obj) -> list[str]:
    """The pod's scheduling gates that are not drasat's (never touched by drasat)."""
    return [g for g in gate_names(pod) if g != SCHEDULING_GATE]


def to_ungate(snapshot: Snapshot) -> dict[str, tuple[Obj, str]]:
    """The pending pods carrying drasat's gate that drasat lets go now, by pod key, with why:
    every claim of the pod exists and none is left for drasat to allocate (all of drasat's are
    allocated, or the pod has none: another driver's claims, claims kube-scheduler allocates,
    extended resources only). Admission gates every pod with claims when it cannot read a
    template's class, so a pod of another driver is let go at the first cycle that sees it.
    A pod whose claim does not exist yet keeps the gate until it does (its class decides). The
    other owners' gates stay as they are."""
    out: dict[str, tuple[Obj, str]] = {}
    for pod in snapshot.pods:
        if not is_pending(pod) or not has_our_gate(pod):
            continue
        namespace = str(pod["metadata"].get("namespace", ""))
        names = pod_claim_names(pod)
        if None in names:
            continue
        found = [snapshot.claims.get(f"{namespace}/{n}") for n in names]
        claims = [c for c in found if c is not None]
        if len(claims) < len(found):
            continue
        if any(allocates(c, snapshot.classes) and not is_allocated(c) for c in claims):
            continue
        if any(allocates(c, snapshot.classes) for c in claims):
            why = "its claims of drasat's are allocated"
        else:
            why = "it has no claim drasat allocates"
        out[pod_key(pod)] = (pod, why)
    return out


def _selects(claim: Obj, node: Obj) -> bool:
    """Whether an allocated claim may be used on the node (its allocation's node selector; none:
    every node)."""
    selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector")
    return nodefit.node_selector_matches(selector, node)


def _bound_by_node(pods: Iterable[Obj]) -> dict[str, list[Obj]]:
    out: dict[str, list[Obj]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            out.setdefault(str(node), []).append(pod)
    return out


@dataclass(frozen=True)
class _Room:
    """What every pod of a cycle is checked against on each node, found once a cycle (not once
    per pod and node: the pods bound to a node are summed once)."""

    #: Every node with drasat's ledger or slices, by name, in name order; the value: why its
    #: devices cannot be allocated (None: they can).
    nodes: Mapping[str, str | None]
    #: Node name -> its allocatable cpu/memory/pods and what its bound pods take.
    capacity: Mapping[str, nodefit.Capacity]


def _nodes_room(snapshot: Snapshot) -> _Room:
    bound = _bound_by_node(snapshot.pods)
    problems: dict[str, str | None] = {}
    capacity: dict[str, nodefit.Capacity] = {}
    for name in sorted(set(snapshot.nas) | set(snapshot.published)):
        node = snapshot.nodes.get(name)
        if node is None:
            problems[name] = "no Node object"
            continue
        problems[name] = inventory_problem(snapshot, name)
        if problems[name] is None:
            capacity[name] = nodefit.capacity(node, bound.get(name, []))
    return _Room(problems, capacity)


def _fit_key(pod: Obj) -> str:
    """What `nodefit.unfit` reads of the pod: pods with one key are fit for the same nodes."""
    spec = pod.get("spec") or {}
    asked = [spec.get(f) for f in ("nodeName", "nodeSelector", "affinity", "tolerations")]
    return json.dumps(asked, sort_keys=True, default=str)


def _candidates(snapshot: Snapshot, excluded: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(n for n in snapshot.nas if n not in excluded and n in snapshot.nodes)


def _excluded(pod: Obj, snapshot: Snapshot, room: _Room, pinned: Sequence[Obj]) -> dict[str, str]:
    out: dict[str, str] = {}
    lately = snapshot.unsuitable.get(pod_key(pod), {})
    for name, unusable in room.nodes.items():
        if unusable is not None:
            out[name] = unusable
            continue
        node = snapshot.nodes[name]
        elsewhere = next((c for c in pinned if not _selects(c, node)), None)
        if elsewhere is not None:
            there = allocated_node(elsewhere)
            out[name] = f"claim {claim_ref(elsewhere)} of the pod is allocated " + (
                f"on {there}" if there else "on other nodes"
            )
            continue
        reason = nodefit.unfit(pod, node) or nodefit.full(room.capacity[name])
        if reason is None and name in lately:
            reason = f"the scheduler could not bind the pod there lately: {lately[name]}"
        if reason is not None:
            out[name] = reason
    return out


def inventory_problem(snapshot: Snapshot, name: str) -> str | None:
    """Why the node's devices cannot be allocated by drasat (None: they can): drasat needs its
    published devices (complete, readable ResourceSlices) and its ledger (the NAS)."""
    if name not in snapshot.nas:
        return "no NodeAllocationState (drasat's ledger there; its node plugin creates it)"
    found = snapshot.published.get(name)
    if found is None:
        return f"no ResourceSlice of {DRIVER_NAME} (drasat's node plugin publishes none there)"
    if found.read is None:
        return f"its ResourceSlices cannot be used: {found.problem}"
    return None


class NodeInputs:
    """What `node_inputs` built for each node, kept from one cycle to the next: a node whose
    ledger and slice reading are the same objects as last cycle (the NAS parsed again only when
    its version changes, the slices read again only when they change) and whose capacity and
    labels are equal gets the very `Node` it got then. The solver keeps its view of a node
    (`inventory.view_of`) and the allocator its matching of selectors per node by the
    identity of these objects, so an unchanged node is not looked at again (at 2,000 nodes,
    rebuilding every view took about a third of a busy cycle). Each call keeps only the nodes
    it built: a node gone is forgotten."""

    def __init__(self) -> None:
        #: Node name -> (the ledger state, the slice reading, (capacity, labels), the Node).
        self._kept: dict[str, tuple[NodeState, object, tuple[object, ...], Node]] = {}


def node_inputs(snapshot: Snapshot, memo: NodeInputs | None = None) -> list[Node]:
    """Every node with drasat's ledger (a NAS), a Node object (a NAS left behind by a deleted
    node is not a node) and usable ResourceSlices: its solver state (the devices its slices
    publish, with their health and taints; the NAS's allocated and prepared claims; cpu/memory
    from the Node and the pods bound there) and the published devices. A node publishing a GPU
    UUID an earlier node (by name) publishes is left out: one GPU cannot be on two nodes, and
    the rest of the cluster must still be allocated. `memo`: the last call's nodes, handed out
    again where nothing they were built from changed (`NodeInputs`)."""
    bound = _bound_by_node(snapshot.pods)
    out = []
    seen: set[str] = set()
    kept = memo._kept if memo is not None else {}
    keep: dict[str, tuple[NodeState, object, tuple[object, ...], Node]] = {}
    for name, parsed in sorted(snapshot.nas.items()):
        node = snapshot.nodes.get(name)
        found = snapshot.published.get(name)
        if node is None or found is None or found.read is None:
            continue
        inventory = found.read.state.devices
        uuids = {g.uuid for g in inventory.gpus}
        if uuids & seen:
            continue
        seen |= uuids
        capacity = nodefit.capacity(node, bound.get(name, []))
        ledger: NodeState = parsed.node
        # A gang's topology (the policy's `gangs.topologyKey`) is a node label.
        labels = tuple(sorted(((node.get("metadata") or {}).get("labels") or {}).items()))
        facts = (capacity, labels)
        before = kept.get(name)
        if before is not None and before[0] is ledger and before[1] is found.read:
            built = before[3] if before[2] == facts else None
        else:
            built = None
        if built is None:
            state = dataclasses.replace(
                ledger,
                devices=inventory,
                cpu_milli=capacity.cpu_milli,
                memory_mib=capacity.memory_mib,
                used_cpu_milli=capacity.used_cpu_milli,
                used_memory_mib=capacity.used_memory_mib,
                labels=labels,
            )
            published = tuple(found.read.devices.values()) if state.ready else ()
            built = Node(state, published)
        if memo is not None:
            keep[name] = (ledger, found.read, facts, built)
        held = snapshot.others_held.get(name)
        out.append(with_other_devices(built, snapshot.others.get(name), held))
    if memo is not None:
        memo._kept = keep
    return out


def other_devices(
    found: Iterable[Obj],
    claims: Iterable[Obj],
    ours: Mapping[str, Obj],
    drivers: Iterable[str],
) -> tuple[dict[str, otherdevices.NodeOthers], dict[str, dict[str, int]]]:
    """Other drivers' devices (any driver but the ones drasat allocates as GPUs, `drivers`) by
    node, from the ResourceSlices `found`, and what the `claims` hold of them (their statuses:
    those drivers keep no NAS). Read only when a claim drasat allocates and has not allocated
    yet names a class not of `ours` (a NIC beside its GPU): other drivers' slices are parsed
    for the cycles that need them, not every cycle."""
    claims = list(claims)
    if not any(asks_other_devices(c, ours) for c in claims):
        return {}, {}
    others = otherdevices.read(found, frozenset(drivers))
    if not others:
        return {}, {}
    return others, otherdevices.held(claims, others)


def asks_other_devices(claim: Obj, ours: Mapping[str, Obj]) -> bool:
    """Whether drasat is to allocate the claim and it also names a class not of `ours`."""
    if is_allocated(claim) or not allocates(claim, ours):
        return False
    return bool(_class_names(claim) - set(ours))


class StatusLedgers:
    """What `ledger_of` found, by claim and NAS version, kept from one cycle to the next: reading
    a status into ledger entries builds models (about 0.2 ms a claim, so 1 s a cycle at 4,000
    allocated claims without it). An answer is reused only while neither the claim nor its
    node's NAS changed; what a cycle did not ask for is dropped at the next `rotate`."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, ...], dict[str, Any]] = {}
        self._used: dict[tuple[str, ...], dict[str, Any]] = {}

    def get(self, claim: Obj, node: str, parsed: nasnodes.ParsedNas) -> dict[str, Any]:
        meta = claim.get("metadata") or {}
        version = str(meta.get("resourceVersion") or "")
        if not version or not parsed.resource_version:
            return results.ledger_from_status(claim, parsed.node.devices)
        key = (str(meta.get("uid", "")), version, node, parsed.resource_version)
        found = self._used.get(key)
        if found is None:
            found = self._kept.get(key)
            if found is None:
                found = results.ledger_from_status(claim, parsed.node.devices)
            self._used[key] = found
        return found

    def rotate(self) -> None:
        """A cycle ended: keep what it used, forget the rest."""
        self._kept, self._used = self._used, {}


def ledger_of(
    claim: Obj, snapshot: Snapshot, memo: StatusLedgers | None = None
) -> tuple[str | None, dict[str, Any]]:
    """The node a claim is allocated on and the ledger entries its status stands for there (the
    caller does not change them: `memo` may hand the same ones out again)."""
    node = allocated_node(claim)
    parsed = snapshot.nas.get(node or "")
    if node is None or parsed is None:
        return node, {}
    if memo is not None:
        return node, memo.get(claim, node, parsed)
    return node, results.ledger_from_status(claim, parsed.node.devices)


def status_entries(
    snapshot: Snapshot, memo: StatusLedgers | None = None
) -> dict[str, dict[str, tuple[Obj, dict[str, Any]]]]:
    """node -> claim uid -> (claim, the ledger entries its status stands for there), for every
    allocated claim with a result of drasat's driver, whoever allocated it, and every claim
    held in a ledger built from the claims' statuses (a node of another driver drasat allocates
    for, NVIDIA's: its results name that driver)."""
    out: dict[str, dict[str, tuple[Obj, dict[str, Any]]]] = {}
    from_statuses: dict[str, dict[str, dict[str, Any]]] = {}
    for name, parsed in snapshot.nas.items():
        if parsed.from_statuses:
            by_uid = from_statuses.setdefault(name, {})
            for key, entry in parsed.entries.items():
                by_uid.setdefault(entry.claimInfo.uid, {})[key] = entry
    for claim in snapshot.claims.values():
        uid = str((claim.get("metadata") or {}).get("uid", ""))
        if not names_our_driver(claim):
            node = allocated_node(claim)
            held = from_statuses.get(node or "", {}).get(uid)
            if node is not None and held:
                out.setdefault(node, {})[uid] = (claim, held)
            continue
        node, entries = ledger_of(claim, snapshot, memo)
        if node is not None and entries:
            out.setdefault(node, {})[uid] = (claim, entries)
    return out


def with_status_holds(snapshot: Snapshot, memo: StatusLedgers | None = None) -> Snapshot:
    """The snapshot with every allocated claim's devices held in its node's state, as the claim's
    status names them: a claim allocated by kube-scheduler (or written back by anyone) holds its
    devices from the moment the informer sees it, not one ledger settle later, and a ledger entry
    naming other devices than the status never makes the status's devices look free."""
    by_node = status_entries(snapshot, memo)
    nas = dict(snapshot.nas)
    for node, held in by_node.items():
        parsed = nas.get(node)
        if parsed is None:
            continue
        ledger = parsed.entries
        extra: dict[str, Any] = {}
        for uid, (_, entries) in held.items():
            in_ledger = [e for e in ledger.values() if e.claimInfo.uid == uid]
            if allocation.device_ids(in_ledger) == allocation.device_ids(entries.values()):
                continue
            for key, entry in entries.items():
                extra[nasnodes.HELD_PREFIX + key] = entry
        if extra:
            nas[node] = nasnodes.with_entries(parsed, {**ledger, **extra})
    return dataclasses.replace(snapshot, nas=nas)
