"""Gang membership from pod labels, shared by the controller (`controller.gangs`) and the
what-if: the pods of one namespace labelled `gpu.drasat.io/gang: NAME` form a gang of
`gpu.drasat.io/gang-size: N` pods, allocated all-or-nothing (`drasat.solver.gangs`).

A purely computational module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
