"""`drasat explain`: the v1 controller's own decision on a pod, or exactly why there is none.

- A bound pod: the node, and for each claim of drasat's where it is allocated and by whom.
- A pending pod the controller does not place now: why (a claim not created yet, scheduling
  gates of another owner, a claim that is kube-scheduler's, ...), as the controller's cycle
  decides it; a pod that drasat's own scheduling gate holds is told so, and what lifts the gate.
- A pending pod of the controller's: the decision the controller recorded (`controller.decisions`:
  the pod's NotAllocatable Event with its cycle, time, policy and mode), with its age, and whether
  anything it was decided from (the pod, its claims, drasat's ResourceSlices, NodeAllocationStates
  and DeviceClasses) changed since. When none is recorded, or the recorded one is stale, a second
  part, labelled as such, is a what-if made here: the controller's allocation (`v1inputs`,
  `drasat.v1.allocate`) over the live cluster, read once, with the controller's policy and mode
  and the other pending pods; it lacks the controller's memory of nodes where kube-scheduler
  gave a claim back lately, and writes nothing.
"""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass

from drasat import v1
from drasat.api.groups import DRIVER_NAME, FINALIZER, SCHEDULING_GATE
from drasat.api.policy import AllocationPolicySpec
from drasat.controller import decisions, leader, nasnodes, policy, v1inputs
from drasat.controller.cycle import allocating
from drasat.controller.drivers import Published
from drasat.controller.statusledger import ledgers_from_statuses
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import Api, Obj
from drasat.solver import Mode, SolveParams
from drasat.v1.nominations import Nomination

_CONFIGMAP_SOURCE = re.compile(r"^ConfigMap (?P<namespace>[^/ ]+)/(?P<name>\S+) key (?P<key>\S+)$")


@dataclass(frozen=True)
class Options:
    """Where drasat's objects are, and how the controller runs (for the what-if)."""

    #: drasat's namespace: NodeAllocationStates, the Lease, the policy ConfigMap.
    namespace: str = "drasat"
    #: The controller's policy, when its decision does not say where to read it (a file inside
    #: the controller's pod cannot be read from here).
    policy_file: str | None = None
    policy_configmap: str | None = None
    policy_key: str = policy.CONFIGMAP_KEY
    #: The solver mode; None: the recorded decision's, else online (the controller's default).
    mode: str | None = None
    lease: str = "drasat-controller"
    batch_max: int = 64
    #: The drivers whose classes the controller allocates (its `--driver`).
    drivers: tuple[str, ...] = (DRIVER_NAME,)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def snapshot(
    api: Api, *, namespace: str, drivers: tuple[str, ...] = (DRIVER_NAME,)
) -> v1inputs.Snapshot:
    """The cluster as the controller's informers hold it, read once."""
    claims = {
        f"{c['metadata']['namespace']}/{c['metadata']['name']}": c
        for c in api.list(r.RESOURCE_CLAIMS_V1).items
    }
    parsed = {}
    for obj in api.list(r.NAS, namespace=namespace).items:
        found = nasnodes.parse(obj)
        parsed[found.node.name] = found
    found_slices = api.list(r.RESOURCE_SLICES_V1).items
    published = Published(drivers).read(found_slices)
    parsed |= ledgers_from_statuses(published, claims.values(), parsed, {}, drivers)
    classes = api.list(r.DEVICE_CLASSES_V1).items
    ours = v1inputs.our_classes(classes, drivers)
    others, others_held = v1inputs.other_devices(found_slices, claims.values(), ours, drivers)
    return v1inputs.Snapshot(
        pods=api.list(r.PODS).items,
        claims=claims,
        classes=ours,
        nodes={str(n["metadata"]["name"]): n for n in api.list(r.NODES).items},
        nas=parsed,
        published=published,
        device_classes={str(c["metadata"]["name"]): c for c in classes},
        others=others,
        others_held=others_held,
    )


class PodNotFound(LookupError):
    """The pod to explain does not exist (`drasat explain` exits 1, as kubectl does)."""


def explain(
    api: Api,
    pod_namespace: str,
    pod_name: str,
    *,
    options: Options | None = None,
    now: datetime.datetime | None = None,
) -> str:
    """What `drasat explain` prints for one pod; PodNotFound when there is none."""
    options = options or Options()
    key = f"{pod_namespace}/{pod_name}"
    try:
        pod = api.get(r.PODS, pod_name, namespace=pod_namespace)
    except errors.NotFound:
        raise PodNotFound(f"pod {key} not found") from None
    found = snapshot(api, namespace=options.namespace, drivers=options.drivers)
    found.pods = [p for p in found.pods if v1inputs.pod_key(p) != key] + [pod]
    claims = decisions.pod_claims(pod, found)
    if (pod.get("spec") or {}).get("nodeName"):
        held = _allocated(claims, options.drivers) or [
            f"  it holds no claim of {' or '.join(options.drivers)}"
        ]
        return "\n".join([f"pod {key} is bound to node {pod['spec']['nodeName']}:", *held])
    pending, waiting = v1inputs.pending_pods(found)
    gated = v1inputs.has_our_gate(pod)
    if key in waiting:
        held_by = (
            f"; drasat's scheduling gate {SCHEDULING_GATE} holds it meanwhile" if gated else ""
        )
        return (f"pod {key} waits; drasat's controller does not place it now: {waiting[key]}"
                f"{held_by}")  # fmt: skip
    item = next((p for p in pending if p.input.key == key), None)
    if item is None:
        lift = (f"; drasat's controller lifts its scheduling gate {SCHEDULING_GATE} at its next "
                "cycle (a gate that stays means no controller runs)") if gated else ""  # fmt: skip
        held = _allocated(claims, options.drivers)
        if held:
            return "\n".join([f"pod {key} is pending; its claims of drasat's are allocated "
                              f"(kube-scheduler binds the pod where they are){lift}:",
                              *held])  # fmt: skip
        return (
            f"pod {key} has no unallocated claim of drasat's classes "
            f"({', '.join(sorted(found.classes)) or 'none installed'}): kube-scheduler handles it"
            f"{lift}"
        )
    return _decision(api, pod, item, pending, found, options, now or _now())


def _allocated(claims: list[Obj], drivers: tuple[str, ...] = (DRIVER_NAME,)) -> list[str]:
    """A line per claim with results of the drivers drasat allocates (its own, NVIDIA's)."""
    out = []
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        found = (allocation.get("devices") or {}).get("results") or []
        ours = [r for r in found if isinstance(r, dict) and r.get("driver") in drivers]
        if not ours:
            continue
        devices = ", ".join(f"{x.get('request')}={x.get('device')}" for x in ours)
        node = v1inputs.allocated_node(claim) or "?"
        out.append(f"  claim {v1inputs.claim_ref(claim)}: {devices} on node {node}, allocated "
                   f"by {_allocator(claim)}")  # fmt: skip
    return out


def _allocator(claim: Obj) -> str:
    """Who wrote the claim's allocation: drasat's controller when the claim carries its finalizer
    (added before it allocates, and by nothing else), else the API server's field manager of
    `status.allocation` (kube-scheduler's is `kube-scheduler`)."""
    meta = claim.get("metadata") or {}
    if FINALIZER in (meta.get("finalizers") or []):
        return "drasat's controller"
    for entry in meta.get("managedFields") or []:
        fields = json.dumps(entry.get("fieldsV1") or {})
        if entry.get("subresource") == "status" and '"f:allocation"' in fields:
            return str(entry.get("manager") or "?")
    return "another allocator (kube-scheduler, for a pod it saw without drasat's gate, or an admin)"


def _decision(
    api: Api,
    pod: Obj,
    item: v1inputs.Pending,
    pending: list[v1inputs.Pending],
    found: v1inputs.Snapshot,
    options: Options,
    now: datetime.datetime,
) -> str:
    key = item.input.key
    uid = str((pod.get("metadata") or {}).get("uid", ""))
    listed = api.list(
        r.EVENTS,
        namespace=str(pod["metadata"]["namespace"]),
        field_selector=f"involvedObject.uid={uid}",
    ).items
    recorded = decisions.recorded(
        e for e in listed if (e.get("involvedObject") or {}).get("uid") == uid
    )
    live = decisions.basis(
        pod, decisions.pod_claims(pod, found), decisions.inventory_versions(found)
    )
    lines: list[str] = []
    decision = None
    if recorded:
        event, decision = recorded[0]
        when = decision.time()
        age = _age(now - when) if when is not None else "at an unknown time"
        lines.append(
            f"drasat's controller decided in cycle {decision.cycle}, {age} ago (policy "
            f"{decision.policy}, digest {decision.policy_digest}; {decision.mode} mode):"
        )
        lines.append(f"  pod {key} fits nowhere: {event.get('message', '')}")
        changed = decision.basis.changes(live)
        if not changed:
            lines.append(
                "Nothing it decided from has changed since (the pod, its claims, drasat's "
                "devices, ledger and classes): this is its current decision."
            )
            lines.extend(preempting(pod, listed, found, now))
            return "\n".join(lines)
        lines.append(f"This decision is stale: {', '.join(changed)} changed since; the "
                     "controller decides again in its next cycle.")  # fmt: skip
    else:
        lines.append(_no_decision(api, key, options))
    lines.extend(preempting(pod, listed, found, now))
    lines.extend(_what_if(api, item, pending, found, options, decision))
    return "\n".join(lines)


#: The Events of drasat's preemption on a preemptor (`controller.preemption`).
_PREEMPTION_REASONS = ("Preempting", "PreemptionRefused", "NoPreemption")


def preempting(
    pod: Obj, events: list[Obj], found: v1inputs.Snapshot, now: datetime.datetime
) -> list[str]:
    """What preemption did or plans for a pending pod: its nomination (what is held for it,
    and what it waits for), else the controller's last word on preempting for it."""
    nomination = Nomination.of_pod(pod)
    if nomination is not None:
        allocated = {
            str(c["metadata"].get("uid", ""))
            for c in found.claims.values()
            if v1inputs.is_allocated(c)
        }
        victims = ", ".join(nomination.victims) or "nobody (pods already leaving free enough)"
        held = sorted({e.claimInfo.name for entries in nomination.held.values()
                       for e in entries.values()})  # fmt: skip
        lines = [
            f"Preemption: drasat nominated it to node {nomination.node} "
            f"(status.nominatedNodeName) at {nomination.since}, priority {nomination.priority}"
            + (f", for gang {nomination.gang}" if nomination.gang else "")
            + f": it evicted {victims}.",
            f"  The allocation planned for it (claims {', '.join(held) or 'none'}) is held "
            f"against pods of priority {nomination.priority} and lower until it is placed.",
        ]
        waiting = [u for u in nomination.freed if u in allocated]
        if waiting:
            lines.append(f"  It waits: {len(waiting)} claim(s) its victims held are still "
                         "allocated (being given back); it does not preempt again "
                         "meanwhile.")  # fmt: skip
        else:
            lines.append("  Its victims' claims are given back: it is placed at the next cycle, "
                         "unless a pod of higher priority took the devices (then it plans "
                         "again).")  # fmt: skip
        return lines
    said = [e for e in events if e.get("reason") in _PREEMPTION_REASONS]
    if not said:
        return []
    last = max(said, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    stamp = str(last.get("lastTimestamp") or last.get("eventTime") or "")
    age = ""
    try:
        when = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        age = f", {_age(now - when)} ago"
    except ValueError:
        pass
    return [f"Preemption ({last.get('reason')}{age}): {last.get('message', '')}"]


def _no_decision(api: Api, key: str, options: Options) -> str:
    try:
        lease: Obj | None = api.get(r.LEASES, options.lease, namespace=options.namespace)
    except errors.KubeError:
        lease = None
    if lease is not None:
        verdict = leader.decide(lease, identity="drasat explain", now=_now(), duration_s=15.0)
        holder = (lease.get("spec") or {}).get("holderIdentity")
        if verdict == "wait" and holder:
            return f"drasat's controller ({holder}) has not tried pod {key} yet (no decision)."
    return (
        f"No drasat controller has written a decision for pod {key} (and none holds the Lease "
        f"{options.namespace}/{options.lease}; a controller without leader election holds none)."
    )


def _what_if(
    api: Api,
    item: v1inputs.Pending,
    pending: list[v1inputs.Pending],
    found: v1inputs.Snapshot,
    options: Options,
    decision: decisions.Decision | None,
) -> list[str]:
    spec, source, problem = _policy(api, options, decision)
    digest = decisions.policy_digest(spec)
    mode = options.mode or (decision.mode if decision is not None else Mode.online.value)
    batch = pending[: options.batch_max]
    if item not in batch:
        batch = [*batch[:-1], item]
    lines = [
        "",
        "What-if now (made by drasat explain, not the controller's decision): the controller's "
        f"allocation over the cluster as it is, policy {source} (digest {digest}), {mode} mode, "
        f"with {len(batch)} pending pod(s) of drasat's, without the controller's memory of "
        "nodes where kube-scheduler gave a claim back lately:",
    ]
    if problem:
        lines.append(f"  ({problem})")
    if decision is not None and decision.policy_digest != digest:
        lines.append(f"  (the controller decided with policy digest {decision.policy_digest}: "
                     "not this one)")  # fmt: skip
    try:
        outcome = v1.allocate(
            v1inputs.node_inputs(found),
            [p.input for p in batch],
            found.claim_classes,
            policy=spec,
            params=SolveParams(mode=Mode(mode)),
        )
    except Exception as error:  # the what-if is extra: its failure never hides the decision
        lines.append(f"  the what-if failed: {type(error).__name__}: {error}")
        return lines
    key = item.input.key
    if key in outcome.placed:
        lines.append(f"  pod {key} would go to node {outcome.placed[key]}:")
        uids = {str(c["metadata"].get("uid")) for c in item.claims}
        for placed in outcome.allocations.values():
            if placed.uid not in uids:
                continue
            devices = ", ".join(
                f"{d['request']}={d['device']}" for d in placed.allocation["devices"]["results"]
            )
            lines.append(f"    claim {placed.namespace}/{placed.name}: {devices}")
    else:
        reasons = outcome.refused.get(key, ())
        lines.append(f"  pod {key} would fit nowhere: {allocating.explanation(item, reasons)}")
    return lines


def _policy(
    api: Api, options: Options, decision: decisions.Decision | None
) -> tuple[AllocationPolicySpec, str, str]:
    """The controller's policy: (spec, where it was read, a problem reading it or "")."""
    found: policy.PolicySource | None = None
    if options.policy_file:
        found = policy.PolicySource.from_file(options.policy_file)
    elif options.policy_configmap:
        found = policy.PolicySource.from_configmap(
            api, namespace=options.namespace, name=options.policy_configmap, key=options.policy_key
        )
    elif decision is not None and (match := _CONFIGMAP_SOURCE.match(decision.policy)):
        found = policy.PolicySource.from_configmap(
            api, namespace=match["namespace"], name=match["name"], key=match["key"]
        )
    elif decision is not None and decision.policy != "default":
        return (
            AllocationPolicySpec(),
            "default",
            f"the controller's policy is {decision.policy}, which cannot be read from here: "
            "give it with --policy-file",
        )
    if found is None:
        return AllocationPolicySpec(), "default", ""
    found.poll()
    return found.current(), found.source, found.last_error


def _age(delta: datetime.timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
