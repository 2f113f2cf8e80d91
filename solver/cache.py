"""The solver's memo tables, owned by whoever calls it: `SolveParams(cache=SolverCache())`.

A long-running caller keeps one SolverCache for its lifetime (the controller: one per Controller;
the benchmarks and replays: one per run), so that a decision reuses what earlier decisions
computed about nodes that did not change; a one-shot caller (the what-if) passes none and each
solve gets a fresh one. Nothing is kept at module level: two callers never share a table unless
they pass the same object.

What is kept (each table says in its module what its key is): node views per node name
(`inventory`), interned numbers for memo keys, per-node evaluations and their blockers and
per-GPU ways (`nodes`), uuid sets known to be distinct (`validate`), the policy's node classes
and reservation counts (`rules`), the fragmentation term's explicit workloads, supply,
eligibility rows and node measures (`workload`), and the online pass's node groups
(`nodegroups`). Every key is structural: built from the values a result is computed from
(tuples of fields, interned numbers standing for such tuples), never from a text test; a value
is a pure function of its key, so whichever solve computed an entry, it is what any other would
have computed. The one exception is the node groups: state that a solve moves node by node, so
they are never shared — a solve takes them out and gives them back when its pass is done.

Concurrent solves (the controller re-checks a decision outside its decision lock) may share one
cache. Safety rests on three rules:

- values are immutable once stored (frozen dataclasses, tuples, ints): a reader never sees one
  half-built or changed later;
- reads are single dict/set lookups, atomic in CPython; every write that is more than one step
  (drop the table when full, then insert; look up a number, else draw one and record it) holds
  `lock`;
- two solves may compute the same entry at once: both compute the same value (a pure function of
  the key), and the second write replaces the first with an equal one.

Interned numbers are drawn from one process-wide counter, so a number stands for one value
whatever cache drew it: structures numbered by one cache (node views, workloads) can meet
another cache's tables only as misses, never as a wrong hit.
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from drasat.solver.inventory import MigOption, NodeView
    from drasat.solver.nodegroups import Groups
    from drasat.solver.nodes import Evaluation
    from drasat.solver.problem import NodeState
    from drasat.solver.reasons import Obstacle
    from drasat.solver.validate import Checked
    from drasat.solver.workload import Workload

K = TypeVar("K")
V = TypeVar("V")

#: Source of interned numbers for every cache of the process (next() on it is atomic; it is
#: drawn under a cache's lock). Never reused: see the module docstring.
_NUMBERS = itertools.count(1)

#: Default bound of each table: when full it starts afresh (entries are recomputed on demand).
TABLE_SIZE = 65536
#: Interned values kept before the table starts afresh (numbers are never reused, so entries
#: keyed by old numbers simply stop matching).
INTERNED_SIZE = 1 << 20
#: Bound of `SolverCache.eligibility`: one entry per node and set of limits a cycle's pods hold
#: (thousands of nodes times a few eligible sets, past TABLE_SIZE, which emptied the table in
#: the middle of every pass over the nodes).
ELIGIBILITY_SIZE = 1 << 18
#: Large values kept by identity (`SolverCache.intern_large`): a few per claim template.
_LARGE_SIZE = 4096
#: Nodes the kept online groups may hold in all (each (pod shape, candidate set) holds one entry
#: per candidate, about 200 bytes): some 200 pod shapes at a thousand nodes, 50 at 5,000.
GROUP_NODES = 1 << 18


class SolverCache:
    """Memo tables for `drasat.solver.solve`; see the module docstring."""

    def __init__(self) -> None:
        #: Held for every write that takes more than one step.
        self.lock = threading.Lock()
        self.interned: dict[object, int] = {}
        #: Node name -> (its latest NodeState, kept alive by the entry; its view).
        self.views: dict[str, tuple[NodeState, NodeView]] = {}
        #: (pod shape, policy node class, node state) -> the node's evaluation for the pod.
        self.evaluations: dict[tuple[int, int, int], Evaluation] = {}
        #: The same key -> why the pod does not fit the node (None: no blocker found).
        self.blockers: dict[tuple[int, int, int], Obstacle | None] = {}
        #: (pod shape's limits, node exact state, node class or 0) -> the node's state as a
        #: pod limited to some GPUs reads it (`nodes._state`).
        self.eligibility: dict[tuple[int, int, int], int] = {}
        #: (pod shape's limits without the workload, node exact state) -> the node's GPUs as
        #: those limits read them; (workload, policy, node exact state, node class) -> its
        #: GPUs' workload eligibility rows (`nodes._limits_state`, `nodes._rows_state`).
        self.limit_states: dict[tuple[int, int], int] = {}
        self.row_states: dict[tuple[object, ...], int] = {}
        #: (interned eligible set, interned placements, interned constraint values) -> a claim's
        #: limits by uuid (`nodes._eligibility`).
        self.limits: dict[tuple[object, ...], Any] = {}
        #: (pod shape, GPU state, node class, GPU identity or ()) -> ways a claim takes the GPU.
        self.gpu_ways: dict[tuple[object, ...], tuple[tuple[int, int, MigOption | None], ...]] = {}
        #: The cluster of the last full check (`validate.Checked`): the next solve's nodes are
        #: compared with it by identity.
        self.checked: Checked | None = None
        #: Tuples of uuid sets (one per node, in order) known to hold no uuid twice.
        self.uuids_checked: dict[tuple[frozenset[str], ...], bool] = {}
        #: Policy fingerprint -> node name -> Rules.node_class (and its interned number).
        self.node_classes: dict[str, dict[str, tuple[bool, ...]]] = {}
        self.node_class_ids: dict[str, dict[str, int]] = {}
        #: (reservation, node, node state) -> untouched GPUs it covers there.
        self.untouched_covered: dict[tuple[str, str, int], int] = {}
        #: Fragmentation term (`workload`): supply per node group and per cluster, eligibility
        #: rows per GPU, the node's measure before a placement.
        self.supply: dict[tuple[object, ...], tuple[int, ...]] = {}
        self.cluster_supply: dict[tuple[object, ...], tuple[int, ...]] = {}
        self.rows: dict[tuple[object, ...], tuple[bool, ...]] = {}
        #: (workload, policy, node state, node class) -> the node's measure before a placement.
        self.before: dict[tuple[int, str, int, int], int] = {}
        #: id(value) -> (the value, its interned number), for `intern_large`.
        self.large: dict[int, tuple[object, int]] = {}
        #: Explicit target workloads (`workload.Workload.from_shapes`): by the shapes' id (the
        #: entry holds them) and by their serialized fields.
        self.workloads: dict[int, tuple[object, Workload]] = {}
        self.workloads_by_text: dict[tuple[str, ...], Workload] = {}
        #: (pod shape, candidate nodes) -> the online pass's node groups (`nodegroups.Groups`):
        #: mutable, so a solve takes them out (`take_groups`) and gives them back when done
        #: (`keep_groups`); a concurrent solve meanwhile finds none and builds its own.
        self.groups: dict[tuple[int, tuple[str, ...] | None], Groups] = {}
        #: Nodes those groups hold in all.
        self.groups_held = 0

    def intern(self, value: object) -> int:
        """A small number standing for a hashable value, the same for equal values (memo keys)."""
        found = self.interned.get(value)
        if found is not None:
            return found
        with self.lock:
            found = self.interned.get(value)
            if found is None:
                if len(self.interned) >= INTERNED_SIZE:
                    self.interned.clear()
                found = next(_NUMBERS)
                self.interned[value] = found
        return found

    def intern_large(self, value: object) -> int:
        """intern() of a large immutable value met again as the same object (a v1 claim's set of
        eligible GPUs or its constraint's values, thousands of entries, one object for the claims
        of a template): found by identity, neither hashed again (a tuple keeps no hash) nor
        compared entry by entry with an equal one. The entry holds the value, so its id is not
        reused while the entry stands."""
        found = self.large.get(id(value))
        if found is not None and found[0] is value:
            return found[1]
        number = self.intern(value)
        self.put(self.large, id(value), (value, number), size=_LARGE_SIZE)
        return number

    def put(self, table: dict[K, V], key: K, value: V, size: int = TABLE_SIZE) -> V:
        """Store an immutable value (the table starts afresh when full); returns it."""
        with self.lock:
            if len(table) >= size and key not in table:
                table.clear()
            table[key] = value
        return value

    def take_groups(self, key: tuple[int, tuple[str, ...] | None]) -> Groups | None:
        """The groups kept for `key`, taken out of the cache (None: none kept)."""
        with self.lock:  # two solves never take the same groups
            found = self.groups.pop(key, None)
            if found is not None:
                self.groups_held -= found.size
        return found

    def keep_groups(self, made: dict[tuple[int, tuple[str, ...] | None], Groups]) -> None:
        """Give groups back for the next solve; the oldest go when they hold more than
        GROUP_NODES nodes in all."""
        with self.lock:
            for key, groups in made.items():
                replaced = self.groups.pop(key, None)
                if replaced is not None:
                    self.groups_held -= replaced.size
                self.groups[key] = groups
                self.groups_held += groups.size
            while self.groups_held > GROUP_NODES:
                oldest = next(iter(self.groups))
                self.groups_held -= self.groups.pop(oldest).size

    def class_tables(
        self, fingerprint: str, *, fresh: bool = False
    ) -> tuple[dict[str, tuple[bool, ...]], dict[str, int]]:
        """The policy's node-class tables (`Rules`); `fresh`: drop every policy's first."""
        with self.lock:
            if fresh:
                self.node_classes.clear()
                self.node_class_ids.clear()
            return (
                self.node_classes.setdefault(fingerprint, {}),
                self.node_class_ids.setdefault(fingerprint, {}),
            )


def fresh(cache: SolverCache | None) -> SolverCache:
    """The caller's cache, or a new one (one-shot callers)."""
    return cache if cache is not None else SolverCache()
