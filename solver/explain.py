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
from drasat.solver.rules import Rules


def model_blocker(entry: PodEntry, node: NodeView, rules: Rules, budget: solving.Budget) -> Blocker:
    """Why the node's model has no solution for the pod (the filters passed)."""
    one = PodEntry(entry.request, entry.priority, entry.claims, (node,))
    built = model.build([one], rules, force_placed=True, explain=True)
    labels = solving.core(built, budget)
    if labels:
        text = "; ".join(sorted(set(labels)))
        numa = _numa_detail(entry, node, rules, labels)
        if numa is not None:
            best, detail = numa
            return Blocker(
                f"rules:{text}",
                node.name,
                f"{text}; {best} {detail} (node {node.name})",
                f"{text}; at most {{best}} {detail}",
                best=best,
            )
        return Blocker(f"rules:{text}", node.name, f"{text} (node {node.name})", text)
    refs = ", ".join(c.ref for c in entry.claims if not c.optional)
    text = f"claims {refs} do not fit together in what is free"
    return Blocker("together", node.name, f"{text} on node {node.name}", text + " on any node")


def _numa_detail(
    entry: PodEntry, node: NodeView, rules: Rules, labels: Sequence[str]
) -> tuple[int, str] | None:
    """For a Required sameNUMANode in the core: the most free matching GPUs on one NUMA node."""
    for claim in entry.claims:
        if f"claim {claim.ref}: topology sameNUMANode is Required" not in labels:
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
    """One sentence per distinct obstacle, most common first; node counts when not all nodes."""
    groups: dict[str, list[Blocker]] = {}
    for blocker in blockers:
        groups.setdefault(blocker.key, []).append(blocker)
    ordered = sorted(groups.values(), key=lambda g: (-len(g), g[0].key))
    out = []
    for group in ordered:
        first = group[0]
        # Plain replacement, not str.format: summaries quote user text (globs, names).
        best, gpus = max(b.best for b in group), sum(b.gpus for b in group)
        text = first.summary.replace("{best}", str(best)).replace("{gpus}", str(gpus))
        if len(group) == 1 and candidates > 1 and first.node not in text:
            text += f" (node {first.node})"
        elif 1 < len(group) < candidates:
            text += f" (on {len(group)} of {candidates} candidate nodes)"
        out.append(text)
    return tuple(out)
