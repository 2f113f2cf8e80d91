"""Checks of a Problem's consistency before solving: one clear InputError, never a traceback.

A purely computational module. The API models validate each object; what only shows across
objects is checked here: duplicate node names or pod keys, one claim uid with two different
specs, one GPU uuid on two nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

from drasat.api.errors import InputError
from drasat.solver import inventory
from drasat.solver.problem import ClaimRequest, Problem


def check(problem: Problem) -> None:
    """Raise InputError naming the object and field when the problem contradicts itself."""
    nodes: set[str] = set()
    for number, node in enumerate(problem.nodes):
        if node.name in nodes:
            raise InputError(f"nodes[{number}]: node {node.name} is listed twice")
        nodes.add(node.name)
    # Cheap on the online path: the views (and their uuid sets) are memoized per node.
    views = [inventory.view_of(n) for n in problem.nodes]
    if sum(len(v.uuids) for v in views) != len(frozenset().union(*(v.uuids for v in views))):
        _duplicate_gpu(views)
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


def _duplicate_gpu(views: Sequence[inventory.NodeView]) -> None:
    owner: dict[str, str] = {}
    for view in views:
        for uuid in sorted(view.uuids):
            other = owner.setdefault(uuid, view.name)
            if other != view.name:
                raise InputError(
                    f"node {view.name}: spec.allocatableDevices gpu.uuid {uuid} is also on node "
                    f"{other}"
                )
