"""The best node for a pod among thousands, without a pass over every node for every pod.

Equal nodes share one evaluation (`nodes.py`: its memo key is the pod's shape, the node's
policy class and the node's state as the shape reads it). The online pass places one pod at a
time and each placement changes one node, so the candidates of one (shape, candidate set) are
kept grouped by that key: a decision evaluates one node per group (its first in node order), and
only the nodes placed on since the group's last use move. The answer is a pass over every node's:
the best (primary, -secondary), ties to the node listed first; optimal when every group's
evaluation is (each node's is its group's).

A purely computational module; the groups live in the placement's state (`placement._State`).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from drasat.solver import nodes, solving
from drasat.solver.inventory import NodeView
from drasat.solver.rules import Rules


@dataclass
class Groups:
    """One (shape, candidate set)'s nodes grouped by their evaluation's memo key."""

    #: The candidates' names, in node order (a position is an index here).
    names: list[str]
    #: Name -> position.
    where: dict[str, int]
    #: Position -> the node's memo key when last seen.
    keys: list[tuple[int, int, int]]
    #: Memo key -> positions, smallest first. A node that moved to another key stays in its old
    #: heap until it comes to the top there (then it is dropped: its key no longer matches).
    heaps: dict[tuple[int, int, int], list[int]] = field(default_factory=dict)
    #: How many entries of the state's change log (`placement._State.changed`) are applied.
    applied: int = 0

    @classmethod
    def of(
        cls, shape: nodes.PodShape, views: Sequence[NodeView], rules: Rules, applied: int
    ) -> Groups:
        names = [v.name for v in views]
        keys = [nodes.memo_key(shape, v, rules) for v in views]
        groups = cls(names, {n: i for i, n in enumerate(names)}, keys, applied=applied)
        for position, key in enumerate(keys):
            groups.heaps.setdefault(key, []).append(position)  # in order: already a heap
        return groups

    def update(
        self,
        shape: nodes.PodShape,
        views: Mapping[str, NodeView],
        changed: Sequence[str],
        rules: Rules,
    ) -> None:
        """Move the nodes placed on since the last update (`changed`: the state's log)."""
        for name in changed[self.applied :]:
            position = self.where.get(name)
            if position is None:
                continue  # not a candidate
            key = nodes.memo_key(shape, views[name], rules)
            if key != self.keys[position]:
                self.keys[position] = key
                heapq.heappush(self.heaps.setdefault(key, []), position)
        self.applied = len(changed)

    def firsts(self) -> list[int]:
        """The first position of each group, dropping the entries of nodes that moved."""
        out = []
        for key in list(self.heaps):
            heap = self.heaps[key]
            while heap and self.keys[heap[0]] != key:
                heapq.heappop(heap)
            if heap:
                out.append(heap[0])
            else:
                del self.heaps[key]
        return out


def best(
    shape: nodes.PodShape,
    groups: Groups,
    views: Mapping[str, NodeView],
    rules: Rules,
    budget: solving.Budget,
) -> tuple[NodeView | None, nodes.Evaluation | None, bool]:
    """The best node of the groups for the pod, its evaluation, and whether every evaluation
    was proven (see the module docstring). `groups` must be up to date (`Groups.update`)."""
    found: tuple[int, int, int, NodeView, nodes.Evaluation] | None = None
    optimal = True
    for position in groups.firsts():
        view = views[groups.names[position]]
        evaluation = nodes.evaluate(shape, view, rules, budget)
        optimal = optimal and evaluation.optimal
        if evaluation.picks is None:
            continue
        rank = (evaluation.primary, -evaluation.secondary, -position)
        if found is None or rank > found[:3]:
            found = (*rank, view, evaluation)
    if found is None:
        return None, None, optimal
    return found[3], found[4], optimal
