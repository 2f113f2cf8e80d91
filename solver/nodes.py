"""The best placement of one pod on one node (the online mode's per-node subproblem).

A purely computational module: a small CP-SAT model of the pod forced onto the node, solved with
one worker (deterministic). Returns None when the pod cannot be placed there.
"""

from __future__ import annotations

from dataclasses import dataclass

from drasat.solver import extract, model, solving
from drasat.solver.extract import Chosen
from drasat.solver.inventory import NodeView
from drasat.solver.model import PodEntry
from drasat.solver.problem import Status
from drasat.solver.rules import Rules


@dataclass(frozen=True)
class NodeOutcome:
    chosen: dict[str, list[Chosen]]
    primary: int
    secondary: int
    optimal: bool


def best_on_node(
    entry: PodEntry, node: NodeView, rules: Rules, budget: solving.Budget
) -> NodeOutcome | None:
    one = PodEntry(entry.request, entry.priority, entry.claims, (node,))
    built = model.build([one], rules, force_placed=True)
    result = solving.solve(built, budget)
    if not result.has_solution:
        return None
    _, chosen = extract.placements(built, result, [one])[entry.key]
    return NodeOutcome(chosen, result.primary, result.secondary, result.status is Status.OPTIMAL)
