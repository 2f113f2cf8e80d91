"""Gang membership for the v1 controller: which pending pods are allocated all-or-nothing.

A gang is the pods of one namespace labelled `gpu.drasat.io/gang: NAME`, of which there are
`gpu.drasat.io/gang-size: N`. The Workload API (`scheduling.k8s.io` Workload and PodGroup) is
not read: kube-apiserver 1.37 serves it only behind the beta `GenericWorkload` gate, off by
default (docs/CONTROLLER.md, *Gangs*).

- A gang is placed only complete: while fewer than N of its pods exist, or one of them waits (a
  claim from a template not created yet, another owner's gate), none of its pods is tried, so
  none holds a device (`GangIncomplete`, a Normal Event on each pod).
- Its pending pods go into one cycle together (`batch`: the cap counts the gang whole) and into
  one solve as a `drasat.solver.Gang` (all-or-nothing, with the policy's `gangs` topology).
- Drasat's scheduling gate stays on every pod of the gang until every pod's claims are
  allocated, then it is lifted from all of them in the same cycle (`gates_held` keeps the gates
  of pods allocated before the rest; `to_ungate` lets no pod of an unfinished gang go).

A purely computational module over the cycle's snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from drasat.api.policy import AllocationPolicySpec
from drasat.controller import v1inputs
from drasat.kube.client import Obj
from drasat.solver import Gang
from drasat.v1.gangs import gang_key, incomplete, label_of

REASON_INCOMPLETE = "GangIncomplete"
REASON_PLACED = "GangAllocated"
REASON_ROLLED_BACK = "GangRolledBack"


@dataclass
class Plan:
    """This cycle's gangs."""

    #: Gang key (namespace/name) -> the solver's gang of its pods placed this cycle.
    gangs: dict[str, Gang] = field(default_factory=dict)
    #: Pod key -> its gang's key, for the pods placed this cycle.
    of_pod: dict[str, str] = field(default_factory=dict)
    #: Pod key -> why it is not tried this cycle (its gang is not complete, or a label is bad).
    held: dict[str, str] = field(default_factory=dict)
    #: Gang key -> pods whose claims are allocated and whose gate waits for the rest of the gang.
    gates_held: dict[str, list[Obj]] = field(default_factory=dict)
    #: Pod key -> the Warning for a bad label.
    invalid: dict[str, str] = field(default_factory=dict)


def plan(
    pods: Iterable[Obj],
    pending: Iterable[str],
    waiting: Mapping[str, str],
    to_ungate: Mapping[str, tuple[Obj, str]],
    policy: AllocationPolicySpec,
) -> Plan:
    """The gangs among the snapshot's pods. `pending`: keys of the pods with claims of drasat's
    to allocate; `waiting`: pods that cannot be tried yet, with why; `to_ungate`: pods whose
    claims are all allocated and that carry drasat's gate."""
    todo = set(pending)
    out = Plan()
    members: dict[str, list[Obj]] = {}
    sizes: dict[str, int] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in (
            "Succeeded",
            "Failed",
        ):
            continue
        found = label_of(pod)
        if found is None:
            continue
        key = v1inputs.pod_key(pod)
        if isinstance(found, str):
            out.invalid[key] = found
            out.held[key] = found
            continue
        name, size = found
        gang = gang_key(pod, name)
        members.setdefault(gang, []).append(pod)
        sizes[gang] = max(sizes.get(gang, 0), size)
    topology = policy.gangs
    for gang, pods_of in sorted(members.items()):
        keys = [v1inputs.pod_key(p) for p in pods_of]
        size = sizes[gang]
        mine = [k for k in keys if k in todo]
        why = None
        if len(pods_of) < size:
            why = incomplete(gang, len(pods_of), size)
        else:
            stuck = next((k for k in keys if k in waiting), None)
            if stuck is not None:
                why = (f"gang {gang}: pod {stuck} waits ({waiting[stuck]}): none of its pods is "
                       "allocated before all can be")  # fmt: skip
        if why is not None or mine:
            # Not finished: no pod of the gang is let go yet.
            out.gates_held[gang] = [to_ungate[k][0] for k in keys if k in to_ungate]
        if why is not None:
            out.held.update((k, why) for k in mine)
            continue
        if not mine:
            continue
        out.gangs[gang] = Gang(
            name=gang,
            pods=tuple(sorted(mine)),
            topology_key=topology.topologyKey,
            required=topology.required,
        )
        out.of_pod.update((k, gang) for k in mine)
    return out


def batch(ordered: Sequence[v1inputs.Pending], limit: int, gangs: Plan) -> list[v1inputs.Pending]:
    """The first pods in order, at most `limit`, a gang's pods all or none (a gang larger than
    the limit goes alone when it comes first)."""
    by_gang: dict[str, list[v1inputs.Pending]] = {}
    for item in ordered:
        gang = gangs.of_pod.get(item.input.key)
        if gang is not None:
            by_gang.setdefault(gang, []).append(item)
    out: list[v1inputs.Pending] = []
    taken: set[str] = set()
    for item in ordered:
        gang = gangs.of_pod.get(item.input.key)
        if gang is None:
            if len(out) < limit:
                out.append(item)
            continue
        if gang in taken:
            continue
        taken.add(gang)
        group = by_gang[gang]
        if len(out) + len(group) <= limit or not out:
            out.extend(group)
    return out


def whole(placed: Iterable[str], gangs: Plan) -> set[str]:
    """The gangs whose every pod of this cycle is in `placed`."""
    done = set(placed)
    return {name for name, gang in gangs.gangs.items() if all(p in done for p in gang.pods)}
