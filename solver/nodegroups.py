"""The best node for a pod among thousands, without a pass over every node for every pod.

Equal nodes share one evaluation (`nodes.py`: its memo key is the pod's shape, the node's
policy class and the node's state as the shape reads it). The online pass places one pod at a
time and each placement changes one node, so the candidates of one (shape, candidate set) are
kept grouped by that key, and the groups where the pod fits are kept ranked by their evaluation
(the same for every node of a group: a pure function of the key) and their first node in node
order. A decision evaluates only the groups it has not met before, and only the nodes placed on
since the groups' last use move. The answer is a pass over every node's: the best (primary,
-secondary), ties to the node listed first; optimal when every group's evaluation is (each
node's is its group's).

Groups outlive a solve: the caller's SolverCache keeps them (`SolverCache.take_groups`), and the
next solve over the same candidates in the same order moves only the nodes whose exact state
(`NodeView.exact_key`, an interned number: equal numbers, equal states) is not the one their
key was read from.

A purely computational module; the groups live in the placement's state (`placement._State`)
during a solve.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter, ne

from drasat.solver import nodes, solving
from drasat.solver.inventory import NodeView
from drasat.solver.rules import Rules

#: A node's evaluation's memo key (`nodes.memo_key`).
Key = tuple[int, int, int]

_name = attrgetter("name")
_exact_key = attrgetter("exact_key")


@dataclass
class Groups:
    """One (shape, candidate set)'s nodes grouped by their evaluation's memo key."""

    #: The candidates' names, in node order (a position is an index here).
    names: list[str]
    #: Name -> position.
    where: dict[str, int]
    #: Position -> the exact state (`NodeView.exact_key`) its key was read from: what a node's
    #: memo key depends on besides its name (held as a number, not as the view, so that kept
    #: groups do not keep old views alive).
    states: list[int]
    #: Position -> the node's memo key when last seen.
    keys: list[Key]
    #: Memo key -> positions, smallest first. A node that moved to another key stays in its old
    #: heap until it comes to the top there (then it is dropped: its key no longer matches).
    heaps: dict[Key, list[int]] = field(default_factory=dict)
    #: Memo key -> the evaluation of its nodes (for the groups met since it was made).
    evaluations: dict[Key, nodes.Evaluation] = field(default_factory=dict)
    #: Groups not evaluated yet.
    pending: set[Key] = field(default_factory=set)
    #: Groups whose evaluation is not proven (a per-node model ran out of time).
    unproven: set[Key] = field(default_factory=set)
    #: The groups where the pod fits, best first: (-primary, secondary, first position, key).
    #: An entry whose group no longer starts at that position is dropped when it comes to the
    #: top (the group's new first position has its own entry).
    ranking: list[tuple[int, int, int, Key]] = field(default_factory=list)
    #: The change log (`placement._State.changed`) these groups follow, and how much of it is
    #: applied.
    log: list[str] | None = None
    applied: int = 0

    @classmethod
    def of(
        cls, shape: nodes.PodShape, views: Sequence[NodeView], rules: Rules, log: list[str]
    ) -> Groups:
        """The groups of `views` as they are now, `log` the state's change log so far."""
        names = [v.name for v in views]
        keys = nodes.memo_keys(shape, views, rules)
        states = [v.exact_key for v in views]
        groups = cls(names, {n: i for i, n in enumerate(names)}, states, keys)
        groups.log, groups.applied = log, len(log)
        for position, key in enumerate(keys):
            groups.heaps.setdefault(key, []).append(position)  # in order: already a heap
        groups.pending.update(groups.heaps)
        return groups

    @property
    def size(self) -> int:
        """How many nodes the groups hold (what the cache's bound counts)."""
        return len(self.names)

    def update(
        self,
        shape: nodes.PodShape,
        views: Mapping[str, NodeView],
        changed: list[str],
        rules: Rules,
    ) -> None:
        """Move the nodes placed on since the last update (`changed`: the state's log, the one
        these groups follow: `of`, `adopt`)."""
        for name in changed[self.applied :]:
            position = self.where.get(name)
            if position is not None:  # else not a candidate
                self._move(position, views[name], nodes.memo_key(shape, views[name], rules))
        self.applied = len(changed)

    def adopt(
        self,
        shape: nodes.PodShape,
        candidates: Sequence[NodeView],
        changed: list[str],
        rules: Rules,
    ) -> bool:
        """Groups kept from an earlier solve, for this solve's `candidates` (in node order) and
        its change log: every node whose state is not the one last seen moves. False (and
        nothing changed): they were made over other candidates or in another order."""
        # Compared in C: at thousands of nodes a Python loop over them is most of a decision.
        if list(map(_name, candidates)) != self.names:
            return False
        now = map(_exact_key, candidates)
        moved = list(compress(range(len(candidates)), map(ne, self.states, now)))
        for position in moved:
            view = candidates[position]
            self._move(position, view, nodes.memo_key(shape, view, rules))
        self.log, self.applied = changed, len(changed)
        return True

    def _move(self, position: int, view: NodeView, key: Key) -> None:
        self.states[position] = view.exact_key
        old = self.keys[position]
        if key == old:
            return
        self.keys[position] = key
        first = self._first(key)  # None: a new group
        heapq.heappush(self.heaps.setdefault(key, []), position)
        if key not in self.evaluations:
            self.pending.add(key)
        elif first is None or position < first:
            self._rank(key, position)
        # The old group: its first node may have left it.
        first = self._first(old)
        if first is None:
            del self.heaps[old]
            self.evaluations.pop(old, None)
            self.pending.discard(old)
            self.unproven.discard(old)
        elif first > position and old in self.evaluations:
            self._rank(old, first)

    def _first(self, key: Key) -> int | None:
        """The group's first position, dropping the entries of nodes that moved."""
        heap = self.heaps.get(key)
        while heap and self.keys[heap[0]] != key:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def _rank(self, key: Key, first: int) -> None:
        evaluation = self.evaluations[key]
        if evaluation.picks is not None:
            heapq.heappush(self.ranking, (-evaluation.primary, evaluation.secondary, first, key))

    def best(
        self,
        shape: nodes.PodShape,
        views: Mapping[str, NodeView],
        rules: Rules,
        budget: solving.Budget,
    ) -> tuple[NodeView | None, nodes.Evaluation | None, bool]:
        """The best node of the groups for the pod, its evaluation, and whether every
        evaluation was proven (see the module docstring). The groups must be up to date
        (`update`); `views`: the nodes' views now, by name."""
        for key in sorted(self.pending):
            first = self._first(key)
            if first is None:
                continue
            view = views[self.names[first]]
            if nodes.cannot_fit(shape, view):  # most groups, once the cluster fills up
                evaluation = nodes.DOES_NOT_FIT
            else:
                evaluation = nodes.evaluate(shape, view, rules, budget, key)
            self.evaluations[key] = evaluation
            if not evaluation.optimal:
                self.unproven.add(key)
            self._rank(key, first)
        self.pending.clear()
        optimal = True
        for key in list(self.unproven):
            if self._first(key) is None:
                self.unproven.discard(key)
            else:
                optimal = False
        if len(self.ranking) > 2 * len(self.heaps) + 64:
            self._compact()
        ranking = self.ranking
        while ranking:
            _, _, position, key = ranking[0]
            if self._first(key) == position:
                return views[self.names[position]], self.evaluations[key], optimal
            heapq.heappop(ranking)
        return None, None, optimal

    def _compact(self) -> None:
        """The ranking afresh: one entry per fitting group (the entries of groups whose first
        node moved pile up over a long life)."""
        self.ranking = []
        for key in list(self.heaps):
            first = self._first(key)
            if first is None:
                del self.heaps[key]
                self.evaluations.pop(key, None)
            elif key in self.evaluations:
                evaluation = self.evaluations[key]
                if evaluation.picks is not None:
                    self.ranking.append((-evaluation.primary, evaluation.secondary, first, key))
        heapq.heapify(self.ranking)
