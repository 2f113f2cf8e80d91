"""Checks of a Problem's consistency before solving: one clear InputError, never a traceback.

A purely computational module. The API models validate each object; what only shows across
objects is checked here: duplicate node names or pod keys, one claim uid with two different
specs, one GPU uuid on two nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from drasat.api.inputerrors import InputError
from drasat.solver import inventory
from drasat.solver.cache import SolverCache
from drasat.solver.problem import ClaimRequest, Problem


def check(problem: Problem, cache: SolverCache) -> dict[str, inventory.NodeView]:
    """Raise InputError naming the object and field when the problem contradicts itself.

    Returns the nodes' views by name, in node order (solving reuses them: at thousands of nodes
    each pass over them costs a millisecond).
    """
    # Cheap on the online path: the views (and their uuid sets) are memoized per node, and a
    # cluster whose uuid sets passed before (the next decision: one node's allocations changed,
    # not its GPUs) is not checked again.
    # inventory.view_of with its hit inlined: it runs for every node of every decision.
    memo = cache.views.get
    view_of = inventory.view_of
    by_name = {
        n.name: hit[1] if (hit := memo(n.name)) is not None and hit[0] is n else view_of(n, cache)
        for n in problem.nodes
    }
    if len(by_name) != len(problem.nodes):
        _duplicate_node(problem)
    views = by_name.values()
    key = tuple([v.uuids for v in views])
    if key not in cache.uuids_checked:
        if sum(len(v.uuids) for v in views) != len(frozenset().union(*(v.uuids for v in views))):
            _duplicate_gpu(views, {n.name: n.devices.source for n in problem.nodes})
        cache.put(cache.uuids_checked, key, True, UUIDS_CHECKED_SIZE)
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
