"""Explanations: why a pod fits on no node, in user terms naming the blocking constraint.

A purely computational module. Per node, a Blocker comes from the cheap exact checks in
`filters.py`, or, when those pass but the node's model is infeasible, from CP-SAT: the node's model
is rebuilt with every rule (reservations, namespace limits, allowed products, topology, node
capacity) behind an assumption literal, and `sufficient_assumptions_for_infeasibility()` names the
rules that together block it. Per pod, the nodes' blockers are grouped into sentences.
"""

from __future__ import annotations

from collections.abc import Sequence

from drasat.solver import demand, model, solving
from drasat.solver.filters import Blocker
from drasat.solver.inventory import NodeView
from drasat.solver.model import PodEntry
from drasat.solver.reasons import (
    BEST,
    NODE,
    ClaimId,
    ClaimsRef,
    Label,
    Obstacle,
    Part,
    Text,
    from_label,
    names_node,
    sort_key,
)
from drasat.solver.rules import Rules

_NUMA_REQUIRED = ": topology sameNUMANode is Required"


def model_blocker(
    entry: PodEntry, node: NodeView, rules: Rules, budget: solving.Budget
) -> Obstacle:
    """Why the node's model has no solution for the pod (the filters passed). The pod's claims
    and the node are references (see reasons.py)."""
    one = PodEntry(entry.request, entry.priority, entry.claims, (node,))
    built = model.build([one], rules, force_placed=True, explain=True)
    labels = solving.core(built, budget)
    if labels:
        uids = [c.uid for c in entry.claims]
        texts = sorted({from_label(label, uids, node.name) for label in labels}, key=sort_key)
        text = _joined(texts)
        numa = _numa_detail(entry, node, rules, labels)
        if numa is not None:
            best, detail = numa
            return Obstacle(
                ("rules", text),
                (*text, f"; {best} {detail} (node ", NODE, ")"),
                (*text, "; at most ", BEST, f" {detail}"),
                best=best,
            )
        return Obstacle(("rules", text), (*text, " (node ", NODE, ")"), text)
    together = ClaimsRef(tuple(i for i, c in enumerate(entry.claims) if not c.optional))
    text = (together, " do not fit together in what is free")
    return Obstacle(("together",), (*text, " on node ", NODE), (*text, " on any node"))


def _joined(texts: Sequence[Text]) -> Text:
    out: list[Part] = []
    for text in texts:
        out.extend(["; "] if out else [])
        out.extend(text)
    return tuple(out)


def _numa_detail(
    entry: PodEntry, node: NodeView, rules: Rules, labels: Sequence[Label]
) -> tuple[int, str] | None:
    """For a Required sameNUMANode in the core: the most free matching GPUs on one NUMA node."""
    for claim in entry.claims:
        if ("claim ", ClaimId(claim.uid), _NUMA_REQUIRED) not in labels:
            continue
        per_numa: dict[object, int] = {}
        for gpu in node.gpus:
            usable = gpu.untouched and demand.device_fits(claim, gpu)
            if usable and rules.blocking_rule(claim, gpu) is None:
                key = gpu.info.numaNode if gpu.info.numaNode is not None else ("gpu", gpu.uuid)
                per_numa[key] = per_numa.get(key, 0) + 1
        return max(per_numa.values(), default=0), "free matching GPUs share a NUMA node"
    return None


def sentences(blockers: Sequence[Blocker], candidates: int) -> tuple[str, ...]:
    """One sentence per distinct obstacle, most common first; node counts when not all nodes.
    Rendered here, with the names of the pod's claims and of the nodes."""
    groups: dict[tuple[object, ...], list[Blocker]] = {}
    for blocker in blockers:
        groups.setdefault(blocker.key, []).append(blocker)
    ordered = sorted(groups.values(), key=lambda g: (-len(g), repr(g[0].key)))
    out = []
    for group in ordered:
        first = group[0]
        best, gpus = max(b.best for b in group), sum(b.gpus for b in group)
        text = first.summary(best, gpus)
        if len(group) == 1 and candidates > 1 and not names_node(first.obstacle.summary):
            text += f" (node {first.node})"
        elif 1 < len(group) < candidates:
            text += f" (on {len(group)} of {candidates} candidate nodes)"
        out.append(text)
    return tuple(out)
