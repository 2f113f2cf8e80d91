"""Gang membership for the v1 controller: which pending pods are allocated all-or-nothing.

A gang is the pods of one namespace that name one PodGroup with a gang policy
(`spec.schedulingGroup.podGroupName`; the Workload API, where the API server serves it: its
minimum is the PodGroup's `minCount`), or else that carry one `gpu.drasat.io/gang: NAME` label
(its minimum: `gpu.drasat.io/gang-size: N`) (`drasat.v1.gangs.member_of`). Which of its pods go
when is `drasat.v1.gangs.step`, the rule the what-if plays out too.

- A gang is placed only when its minimum can be: while fewer than that many of its pods exist and
  can be tried (a claim from a template not created yet, another owner's gate, its PodGroup not
  created yet), none of its pods is tried, so none holds a device (`GangIncomplete`, a Normal
  Event on each pod).
- Until `minimum` of its pods are allocated, the first pods (by name) that make up the minimum go
  into one cycle together (`batch`: the cap counts the gang whole) and into one solve as a
  `drasat.solver.Gang` (all-or-nothing, with the policy's `gangs` topology); its other pending
  pods wait for them. Once `minimum` are allocated the gang is admitted, as kube-scheduler admits
  a PodGroup once `minCount` of its pods fit: the pods past the minimum go one by one.
- Drasat's scheduling gate stays on every allocated pod of the gang until `minimum` are
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
from drasat.v1.gangs import read, solver_gang, step

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
    #: Pod key -> (pod, why): pods of an admitted PodGroup whose claims are not allocated yet
    #: but whose gate is lifted now: kube-scheduler schedules a PodGroup only once every pod of it
    #: is ungated (drasat allocates their claims when devices free; until then kube-scheduler
    #: finds them unschedulable).
    ungate_early: dict[str, tuple[Obj, str]] = field(default_factory=dict)


def plan(
    pods: Iterable[Obj],
    pending: Iterable[str],
    waiting: Mapping[str, str],
    to_ungate: Mapping[str, tuple[Obj, str]],
    policy: AllocationPolicySpec,
    pod_groups: Mapping[str, Obj] | None = None,
) -> Plan:
    """The gangs among the snapshot's pods. `pending`: keys of the pods with claims of drasat's
    to allocate; `waiting`: pods that cannot be tried yet, with why; `to_ungate`: pods whose
    claims are all allocated and that carry drasat's gate; `pod_groups`: the PodGroups by
    namespace/name where the API server serves them (None: labels only)."""
    todo = set(pending)
    out = Plan()
    by_key = {v1inputs.pod_key(p): p for p in pods}
    found = read(by_key.items(), pod_groups)
    out.invalid.update(found.invalid)
    out.held.update(found.invalid)
    for gang, pods_of in sorted(found.members.items()):
        member = found.gangs[gang]
        keys = sorted(k for k, _ in pods_of)
        now = step(member, keys, todo, waiting)
        if now.admitted:
            # Its other pods go one by one.
            if member.pod_group:
                for key, _ in pods_of:
                    pod = by_key[key]
                    if key in todo and v1inputs.has_our_gate(pod):
                        out.ungate_early[key] = (pod, (
                            f"{member.minimum} pods of gang {gang} are allocated: kube-scheduler "
                            "schedules a PodGroup only once every pod of it is ungated; drasat "
                            "allocates this pod's claims when devices free"))  # fmt: skip
            continue
        # Not admitted yet: no pod of the gang is let go.
        out.gates_held[gang] = [to_ungate[k][0] for k in keys if k in to_ungate]
        out.held.update(now.held)
        if now.quorum:
            out.gangs[gang] = solver_gang(gang, now.quorum, policy)
            out.of_pod.update((k, gang) for k in now.quorum)
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
