"""Gangs: pods placed all-or-nothing in one CP-SAT model, with a topology over node labels.

A purely computational module. A `Gang` names pods of the problem. In the batch model each gang
has one boolean, and every member's `placed` literal equals it: every pod of the gang is placed
or none is, so none of its claims is allocated unless all are (a claim is allocated only where
one of its pods goes). Two gangs that each half fit are decided in the same model: one is placed
whole or neither, never half of each (no deadlock of devices held by incomplete gangs).

Topology (`Gang.topology_key`, from the policy's `gangs`): required, the gang takes one value of
the node label (a rack, an NVLink domain; `kubernetes.io/hostname`: one node) and nodes without
the label take none of it; preferred, each value it uses beyond the first costs
`DOMAIN_COST` in the secondary objective.

The online warm start places pods one by one and knows nothing of gangs: `whole` keeps only the
gangs it placed whole (within one value where required), so the hint and the batch's fallback to
it never hold half a gang.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ortools.sat.python import cp_model

from drasat.solver.problem import Gang, NodeState, PodPlacement

#: Secondary cost of each value of the topology key a preferred gang uses beyond its first:
#: above a node's binpack or spread cost of a few GPUs, so it decides before them.
DOMAIN_COST = 64


def node_domains(nodes: Sequence[NodeState], key: str | None) -> dict[str, str]:
    """Node -> its value of the label `key` (nodes without it are left out); {} without a key."""
    if key is None:
        return {}
    out = {}
    for node in nodes:
        value = dict(node.labels).get(key)
        if value is not None:
            out[node.name] = value
    return out


def of_pod(gangs: Sequence[Gang]) -> dict[str, Gang]:
    """Pod key -> its gang (a pod named by two gangs is the first's)."""
    out: dict[str, Gang] = {}
    for gang in gangs:
        for pod in gang.pods:
            out.setdefault(pod, gang)
    return out


def constrain(
    model: cp_model.CpModel,
    placed: Mapping[str, cp_model.IntVar],
    at: Mapping[tuple[str, str], cp_model.IntVar],
    secondary: list[tuple[int, cp_model.IntVar]],
    gangs: Sequence[Gang],
    nodes: Sequence[NodeState],
) -> dict[str, cp_model.IntVar]:
    """Add each gang's all-or-nothing and topology to a built model; gang name -> its literal."""
    out: dict[str, cp_model.IntVar] = {}
    for gang in gangs:
        whole = model.new_bool_var(f"gang_{gang.name}")
        out[gang.name] = whole
        if any(pod not in placed for pod in gang.pods):
            model.add(whole == 0)  # a member the problem does not hold: not placed at all
        for pod in gang.pods:
            if pod in placed:
                model.add(placed[pod] == whole)
        if gang.topology_key is None:
            continue
        domain_of = node_domains(nodes, gang.topology_key)
        used: dict[str, cp_model.IntVar] = {}
        for (pod, node), var in at.items():
            if pod not in gang.pods:
                continue
            value = domain_of.get(node)
            if value is None:
                if gang.required:
                    model.add(var == 0)
                continue
            if value not in used:
                used[value] = model.new_bool_var(f"gang_{gang.name}_in_{value}")
            model.add_implication(var, used[value])
        if gang.required:
            model.add(sum(used.values()) <= 1)
        else:
            secondary.extend((DOMAIN_COST, v) for v in used.values())
    return out


def whole(
    placements: Sequence[PodPlacement], gangs: Sequence[Gang], nodes: Sequence[NodeState]
) -> list[PodPlacement]:
    """The placements without those of gangs not placed whole (or, where the topology is
    required, not within one value of its key)."""
    node_of = {p.pod: p.node for p in placements}
    dropped: set[str] = set()
    for gang in gangs:
        if all(pod in node_of for pod in gang.pods) and _within(gang, node_of, nodes):
            continue
        dropped.update(gang.pods)
    return [p for p in placements if p.pod not in dropped]


def _within(gang: Gang, node_of: Mapping[str, str], nodes: Sequence[NodeState]) -> bool:
    if gang.topology_key is None or not gang.required:
        return True
    domain_of = node_domains(nodes, gang.topology_key)
    values = {domain_of.get(node_of[pod]) for pod in gang.pods}
    return len(values) == 1 and None not in values


def reasons(gang: Gang, pod: str, own: tuple[str, ...], in_problem: set[str]) -> tuple[str, ...]:
    """Why a pod of a gang not placed is not: the gang's rule first, then the pod's own reasons
    when it fits nowhere even alone (a pod that fits alone is held back by its gang only)."""
    where = ""
    if gang.topology_key is not None and gang.required:
        where = f" within one value of node label {gang.topology_key}"
    missing = [p for p in gang.pods if p not in in_problem]
    if missing:
        text = (f"gang {gang.name} is placed whole or not at all, and its pod {missing[0]} is not "
                "in this solve")  # fmt: skip
    else:
        text = (f"gang {gang.name} is placed whole or not at all: its {len(gang.pods)} pods do "
                f"not all fit together{where}")  # fmt: skip
    alone = tuple(r for r in own if not r.startswith("fits on node "))
    return (text, *alone)
