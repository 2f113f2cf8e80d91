"""Checks of a Problem's consistency before solving: one clear InputError, never a traceback.

A purely computational module. The API models validate each object; what only shows across
objects is checked here: duplicate node names or pod keys, one claim uid with two different
specs, one GPU uuid on two nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import compress
from operator import is_not

from drasat.api.inputerrors import InputError
from drasat.solver import inventory
from drasat.solver.cache import SolverCache
from drasat.solver.problem import ClaimRequest, NodeState, Problem


def check(problem: Problem, cache: SolverCache) -> dict[str, inventory.NodeView]:
    """Raise InputError naming the object and field when the problem contradicts itself.

    Returns the nodes' views by name, in node order (solving reuses them: at thousands of nodes
    each pass over them costs a millisecond).
    """
    by_name = _views(problem, cache)
    pods: set[str] = set()
    claims: dict[str, tuple[ClaimRequest, str]] = {}
    for pod in problem.pods:
        if pod.key in pods:
            raise InputError(f"pod {pod.key} is listed twice")
        pods.add(pod.key)
        for claim in pod.claims:
            seen = claims.setdefault(claim.uid, (claim, pod.key))
            if seen[0] != claim:
                raise InputError(
                    f"pod {pod.key}: claim uid {claim.uid} ({claim.namespace}/{claim.name}) "
                    f"differs from the claim with that uid in pod {seen[1]}"
                )
    return by_name


@dataclass(frozen=True)
class Checked:
    """A cluster whose node views were made and whose GPU uuids were found distinct
    (`SolverCache.checked`): the nodes as given, and their views by name (never changed once
    made)."""

    nodes: tuple[NodeState, ...]
    views: dict[str, inventory.NodeView]


def _views(problem: Problem, cache: SolverCache) -> dict[str, inventory.NodeView]:
    """The nodes' views by name, in node order, once their names and GPU uuids are known
    distinct. The online path's next solve is the last one's cluster with a node or two
    changed (a new NodeState for each node placed on): only those are looked at again, and
    only when their GPUs changed is the whole cluster checked again."""
    last = cache.checked
    if last is not None and len(last.nodes) == len(problem.nodes):
        # Compared in C: at thousands of nodes a Python loop over them costs more.
        pairs = zip(problem.nodes, last.nodes, strict=True)
        changed = list(compress(pairs, map(is_not, problem.nodes, last.nodes)))
        if len(changed) <= _FEW_CHANGED:
            views = dict(last.views)
            for node, before in changed:
                view = inventory.view_of(node, cache)
                if node.name != before.name or view.uuids != views[before.name].uuids:
                    break  # another node there, or other GPUs: the whole check below
                views[node.name] = view
            else:
                if changed:
                    cache.checked = Checked(problem.nodes, views)
                return dict(views)
    # Cheap on the online path: the views (and their uuid sets) are memoized per node, and a
    # cluster whose uuid sets passed before is not checked again.
    # inventory.view_of with its hit inlined: it runs for every node.
    memo = cache.views.get
    view_of = inventory.view_of
    by_name = {
        n.name: hit[1] if (hit := memo(n.name)) is not None and hit[0] is n else view_of(n, cache)
        for n in problem.nodes
    }
    if len(by_name) != len(problem.nodes):
        _duplicate_node(problem)
    views_now = by_name.values()
    key = tuple([v.uuids for v in views_now])
    if key not in cache.uuids_checked:
        total = len(frozenset().union(*(v.uuids for v in views_now)))
        if sum(len(v.uuids) for v in views_now) != total:
            _duplicate_gpu(views_now, {n.name: n.devices.source for n in problem.nodes})
        cache.put(cache.uuids_checked, key, True, UUIDS_CHECKED_SIZE)
    cache.checked = Checked(problem.nodes, by_name)
    return dict(by_name)


#: Nodes changed since the last check that are looked at one by one (more: the whole check).
_FEW_CHANGED = 64

#: Entries of SolverCache.uuids_checked (tuples of uuid sets, one per node, in order, known to
#: hold no uuid twice) kept before the table starts afresh.
UUIDS_CHECKED_SIZE = 16


def _duplicate_node(problem: Problem) -> None:
    nodes: set[str] = set()
    for number, node in enumerate(problem.nodes):
        if node.name in nodes:
            raise InputError(f"nodes[{number}]: node {node.name} is listed twice")
        nodes.add(node.name)


def _duplicate_gpu(views: Iterable[inventory.NodeView], sources: Mapping[str, str]) -> None:
    """Raise InputError naming the GPU, both nodes and where each node's devices were read."""
    owner: dict[str, str] = {}
    for view in views:
        for uuid in sorted(view.uuids):
            other = owner.setdefault(uuid, view.name)
            if other != view.name:
                raise InputError(
                    f"node {view.name}: gpu.uuid {uuid} (its {sources[view.name]}) is also on "
                    f"node {other} (its {sources[other]})"
                )
