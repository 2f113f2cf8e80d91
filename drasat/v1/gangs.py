"""Gang membership, shared by the controller (`controller.gangs`) and the what-if: which gang a
pod is in and how many of its pods must be placed together (its minimum), from

- **the Workload API**, where the API server serves it (`scheduling.k8s.io/v1beta1`, beta in
  Kubernetes 1.37 behind the `GenericWorkload` gate): a pod whose `spec.schedulingGroup
  .podGroupName` names a PodGroup of its namespace with a gang policy (`spec.schedulingPolicy
  .gang.minCount`) is in that gang, whose minimum is `minCount`; a PodGroup with the basic policy
  makes no gang (its pods go one by one, as kube-scheduler places them);
- **pod labels** otherwise: the pods of one namespace labelled `gpu.drasat.io/gang: NAME` form a
  gang whose minimum is `gpu.drasat.io/gang-size: N`.

A gang's first `minimum` pods are allocated all-or-nothing (`drasat.solver.gangs`), as
kube-scheduler admits a group once `minCount` of its pods fit together.

`step` is the rule, one for the controller (`controller.gangs`, cycle after cycle) and the
what-if (`drasat.whatif.v1run`, which plays those cycles out). A purely computational module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from drasat.api.groups import GANG_LABEL, GANG_SIZE_LABEL
from drasat.api.policy import AllocationPolicySpec
from drasat.solver import Gang

Obj = Mapping[str, Any]


def label_of(pod: Obj) -> tuple[str, int] | str | None:
    """The pod's gang (name, size); a text naming the label when the labels are not valid;
    None: the pod is in no gang."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    name = labels.get(GANG_LABEL)
    if name is None:
        return None
    size = labels.get(GANG_SIZE_LABEL)
    ref = f"pod {meta.get('namespace', '')}/{meta.get('name', '')}"
    if size is None:
        return f"{ref}: label {GANG_LABEL} needs label {GANG_SIZE_LABEL} (how many pods)"
    if not str(size).isdigit() or int(size) < 1:
        return f"{ref}: label {GANG_SIZE_LABEL}: {size!r} is not a positive integer"
    return str(name), int(size)


def gang_key(pod: Obj, name: str) -> str:
    """namespace/name: a gang is one namespace's."""
    return f"{(pod.get('metadata') or {}).get('namespace', '')}/{name}"


#: The prefix of a PodGroup's gang key (namespace/podgroup/name): a PodGroup and a label gang of
#: one name are two gangs.
POD_GROUP_KEY = "podgroup/"


@dataclass(frozen=True)
class Member:
    """A pod's gang: its key (namespace/name; a PodGroup's namespace/podgroup/name) and how many
    of its pods are placed together (0: the PodGroup it names does not exist yet)."""

    gang: str
    minimum: int
    #: Where the membership comes from, in words (for the Events).
    source: str

    @property
    def pod_group(self) -> bool:
        """Whether the gang is a PodGroup's (kube-scheduler schedules it as one)."""
        return self.gang.partition("/")[2].startswith(POD_GROUP_KEY)


def pod_group_name(pod: Obj) -> str | None:
    """The PodGroup the pod names (`spec.schedulingGroup.podGroupName`), if any."""
    group = (pod.get("spec") or {}).get("schedulingGroup") or {}
    name = group.get("podGroupName")
    return str(name) if name else None


def member_of(pod: Obj, pod_groups: Mapping[str, Obj] | None) -> Member | str | None:
    """The pod's gang; a text naming the field when it is not valid; None: in no gang.
    `pod_groups`: the PodGroups by namespace/name where the API server serves them, else None
    (then only the labels count: a server without the Workload API drops the pod field)."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace", ""))
    name = pod_group_name(pod) if pod_groups is not None else None
    if name is not None:
        assert pod_groups is not None
        key = f"{namespace}/{POD_GROUP_KEY}{name}"
        source = f"PodGroup {namespace}/{name}"
        group = pod_groups.get(f"{namespace}/{name}")
        if group is None:
            return Member(key, 0, source)
        policy = (group.get("spec") or {}).get("schedulingPolicy") or {}
        gang = policy.get("gang")
        if gang is None:
            return None  # the basic policy: no all-or-nothing
        count = gang.get("minCount")
        if not isinstance(count, int) or count < 1:
            return (f"{source}: spec.schedulingPolicy.gang.minCount: {count!r} is not a "
                    "positive integer")  # fmt: skip
        return Member(key, count, f"{source} (gang, minCount {count})")
    found = label_of(pod)
    if found is None or isinstance(found, str):
        return found
    return Member(gang_key(pod, found[0]), found[1], f"label {GANG_LABEL}={found[0]}")


def pod_group_of(pod: Obj, pod_groups: Mapping[str, Obj] | None) -> Obj | None:
    """The PodGroup the pod names, where the API server serves them and it exists."""
    name = pod_group_name(pod) if pod_groups is not None else None
    if name is None:
        return None
    assert pod_groups is not None
    return pod_groups.get(f"{(pod.get('metadata') or {}).get('namespace', '')}/{name}")


def disrupted_whole(group: Obj) -> bool:
    """Whether a PodGroup says its pods are disrupted only together (`spec.disruptionMode.all`);
    `single` (the API server's default) says each pod may be disrupted on its own."""
    mode = (group.get("spec") or {}).get("disruptionMode") or {}
    return isinstance(mode, Mapping) and mode.get("all") is not None


def unit_of(pod: Obj, pod_groups: Mapping[str, Obj] | None) -> tuple[str | None, int]:
    """The key of the pod's gang as a preemption's victim and its minimum (0: the whole gang or
    none of it); (None, 0): the pod is a victim on its own. As kube-scheduler's preemption reads
    a PodGroup (`pkg/scheduler/framework/preemption`, 1.37): `disruptionMode.all` makes the
    group one victim, whatever its minCount; `single` (the default) makes each pod one, even
    below minCount — the group's owner said its pods may go one by one. A label gang (no API
    to say either) goes pod by pod down to its minimum and whole below it."""
    group = pod_group_of(pod, pod_groups)
    if group is not None:  # its scheduling policy (gang or basic) does not matter here
        namespace = (pod.get("metadata") or {}).get("namespace", "")
        key = f"{namespace}/{POD_GROUP_KEY}{pod_group_name(pod)}"
        return (key, 0) if disrupted_whole(group) else (None, 0)
    found = member_of(pod, pod_groups)
    if not isinstance(found, Member):
        return None, 0
    # A PodGroup named and not there (yet): nothing says it may be split.
    return found.gang, found.minimum


def priority_of(pod: Obj, pod_groups: Mapping[str, Obj] | None) -> int:
    """The pod's priority in preemption: its PodGroup's `spec.priority` (0 when unset) where it
    names one that exists, as kube-scheduler's preemption ranks a grouped pod, preemptor or
    victim (`GetPodPriority`, `PodGroupPriority`); else its own `spec.priority`."""
    group = pod_group_of(pod, pod_groups)
    if group is not None:
        value = (group.get("spec") or {}).get("priority")
        return value if isinstance(value, int) else 0
    return int((pod.get("spec") or {}).get("priority") or 0)


def never_preempts(pod: Obj, pod_groups: Mapping[str, Obj] | None) -> bool:
    """`preemptionPolicy: Never`: the PodGroup's where it sets one (gate
    PodGroupPreemptionPolicy), else the pod's."""
    group = pod_group_of(pod, pod_groups)
    policy = ((group or {}).get("spec") or {}).get("preemptionPolicy")
    if policy is None:
        policy = (pod.get("spec") or {}).get("preemptionPolicy")
    return policy == "Never"


def incomplete(gang: str, found: int, size: int) -> str:
    """Why a gang's pods are not tried."""
    return f"gang {gang} has {found} of its {size} pods: none of them is allocated before all exist"


#: The phases of a pod that is done: it counts in no gang.
FINISHED_PHASES = ("Succeeded", "Failed")


@dataclass
class Reading:
    """The gangs among some pods (`read`)."""

    #: Gang key -> its live pods, (pod key, pod).
    members: dict[str, list[tuple[str, Obj]]]
    #: Gang key -> its membership (the largest minimum its pods say).
    gangs: dict[str, Member]
    #: Pod key -> why its gang fields are not valid (it waits: a Warning in the controller).
    invalid: dict[str, str]


def read(pods: Iterable[tuple[str, Obj]], pod_groups: Mapping[str, Obj] | None) -> Reading:
    """The gangs of `(pod key, pod)` (`member_of`); a pod being deleted or finished is in none."""
    out = Reading({}, {}, {})
    for key, pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in (
            FINISHED_PHASES
        ):
            continue
        found = member_of(pod, pod_groups)
        if found is None:
            continue
        if isinstance(found, str):
            out.invalid[key] = found
            continue
        out.members.setdefault(found.gang, []).append((key, pod))
        known = out.gangs.get(found.gang)
        if known is None or found.minimum > known.minimum:
            out.gangs[found.gang] = found
    return out


@dataclass(frozen=True)
class Step:
    """What one gang's pods still to allocate do now (`step`)."""

    #: At least `minimum` of its pods are allocated: its other pods go one by one.
    admitted: bool
    #: The pods allocated now all-or-nothing: its first pods (by key) up to the minimum.
    quorum: tuple[str, ...]
    #: Pods to allocate that are not tried now, with why (`later` among them).
    held: Mapping[str, str]
    #: The pods past the minimum: they go one by one once the quorum is allocated.
    later: tuple[str, ...]


def step(member: Member, keys: Iterable[str], pending: Iterable[str],
         waiting: Mapping[str, str]) -> Step:  # fmt: skip
    """The rule for one gang (`member`, its pods' `keys`): which of its `pending` pods (claims to
    allocate) go together now, which wait and why. `waiting`: pods that cannot be tried yet, with
    why. A pod neither pending nor waiting is allocated. A gang is tried only when `minimum` of
    its pods exist and can be tried; until `minimum` are allocated its first pods up to the
    minimum go together and the rest after them; then it is admitted (as kube-scheduler admits a
    PodGroup once `minCount` of its pods fit) and its other pods go one by one."""
    gang, least = member.gang, member.minimum
    keys = sorted(keys)
    todo = set(pending)
    mine = [k for k in keys if k in todo]
    placed = [k for k in keys if k not in todo and k not in waiting]
    ready = [k for k in keys if k not in waiting]
    why = None
    if least == 0:
        why = (f"gang {gang}: {member.source} does not exist yet: none of its pods is "
               "allocated before it does")  # fmt: skip
    elif len(keys) < least:
        why = incomplete(gang, len(keys), least)
    elif len(ready) < least:
        stuck = next(k for k in keys if k in waiting)
        why = (f"gang {gang}: pod {stuck} waits ({waiting[stuck]}): none of its pods is "
               "allocated before all can be")  # fmt: skip
    if why is not None:
        return Step(False, (), {k: why for k in mine}, ())
    if len(placed) >= least:
        return Step(True, (), {}, ())
    quorum = tuple(mine[: least - len(placed)])
    later = tuple(mine[len(quorum) :])
    text = (f"gang {gang} ({member.source}): its first {least} pods are allocated together "
            "first; this pod goes after them")  # fmt: skip
    return Step(False, quorum, {k: text for k in later}, later)


def solver_gang(name: str, pods: Iterable[str], policy: AllocationPolicySpec) -> Gang:
    """The solver's all-or-nothing gang of `pods`, with the policy's gang topology."""
    topology = policy.gangs
    return Gang(name=name, pods=tuple(pods), topology_key=topology.topologyKey,
                required=topology.required)  # fmt: skip


def placed_text(gang: Gang, nodes: Mapping[str, str]) -> str:
    """A gang allocated whole: where its pods went."""
    where = ", ".join(f"{pod.rpartition('/')[2]} on {nodes[pod]}" for pod in gang.pods)
    text = f"gang {gang.name}: all {len(gang.pods)} pods allocated together ({where})"
    if gang.topology_key is not None:
        text += f"; policy gangs.topologyKey {gang.topology_key}"
    return text
