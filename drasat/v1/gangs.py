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

A purely computational module.
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


def incomplete(gang: str, found: int, size: int) -> str:
    """Why a gang's pods are not tried."""
    return f"gang {gang} has {found} of its {size} pods: none of them is allocated before all exist"


def of_pods(
    pods: Iterable[tuple[str, Obj]], policy: AllocationPolicySpec
) -> tuple[list[Gang], dict[str, str]]:
    """The complete gangs among `(pod key, pod)` (every pod listed is to be placed), and the pods
    held back with why: a gang with fewer pods than its size, or a bad label. The what-if's
    reading (the controller's `controller.gangs.plan` also weighs pods that wait and pods
    already allocated)."""
    members: dict[str, list[str]] = {}
    sizes: dict[str, int] = {}
    held: dict[str, str] = {}
    for key, pod in pods:
        found = label_of(pod)
        if found is None:
            continue
        if isinstance(found, str):
            held[key] = found
            continue
        name, size = found
        gang = gang_key(pod, name)
        members.setdefault(gang, []).append(key)
        sizes[gang] = max(sizes.get(gang, 0), size)
    out = []
    for gang, keys in members.items():
        if len(keys) < sizes[gang]:
            held.update((k, incomplete(gang, len(keys), sizes[gang])) for k in keys)
            continue
        out.append(Gang(gang, tuple(keys), policy.gangs.topologyKey, policy.gangs.required))
    return out, held


def placed_text(gang: Gang, nodes: Mapping[str, str]) -> str:
    """A gang allocated whole: where its pods went."""
    where = ", ".join(f"{pod.rpartition('/')[2]} on {nodes[pod]}" for pod in gang.pods)
    text = f"gang {gang.name}: all {len(gang.pods)} pods allocated together ({where})"
    if gang.topology_key is not None:
        text += f"; policy gangs.topologyKey {gang.topology_key}"
    return text
