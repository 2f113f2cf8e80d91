"""The allocator's and the solver's memos across a controller's cycles (one SolverCache): a
node's reading of a pod's GPU limits is kept across solves whose target workloads differ (each
solve chooses its own from its pods), and answers as a fresh cache does, also for a node that
changed; a node's device index is made only where a placement is written."""

from __future__ import annotations

import dataclasses
from typing import Any

from v1kit import CLASSES, GPU, attr, claim, exactly, node, pod

from drasat import v1
from drasat.solver import Mode, SolveParams, inventory
from drasat.solver.cache import SolverCache

Obj = dict[str, Any]

H100 = exactly(GPU, attr("productName") + '.contains("H100")')


def _pods(prefix: str, count: int) -> list[v1.PodInput]:
    return [pod(f"{prefix}-{i}", claim(f"{prefix}-{i}", {"gpu": H100})) for i in range(count)]


def _placed(outcome: v1.Outcome) -> tuple[dict[str, str], dict[str, Obj]]:
    return outcome.placed, {u: a.allocation for u, a in outcome.allocations.items()}


def test_a_nodes_reading_of_a_pods_limits_outlives_the_workload_and_not_a_change() -> None:
    cluster = [node("n1", "H100", 2), node("n2", "H100", 2), node("n3", "H100", 2),
               node("t1", "T4", 2)]  # fmt: skip
    cache = SolverCache()

    def params(memo: SolverCache) -> SolveParams:
        return SolveParams(mode=Mode.online, cache=memo)

    first = v1.allocate(cluster, _pods("a", 1), CLASSES, params=params(cache))
    assert len(first.placed) == 1
    assert cache.row_states  # the target workload's rows were read (the term is on)
    before = dict(cache.limit_states)
    views = {name: view for name, (_, view) in cache.views.items()}
    # Two pods of the same claim: another target workload. Node n1 now has pods bound (its
    # state changed, its GPUs did not).
    busy = dataclasses.replace(cluster[0].state, cpu_milli=8000, used_cpu_milli=1000)
    changed = [dataclasses.replace(cluster[0], state=busy), *cluster[1:]]
    second = v1.allocate(changed, _pods("b", 2), CLASSES, params=params(cache))
    fresh = v1.allocate(changed, _pods("b", 2), CLASSES, params=params(SolverCache()))
    assert _placed(second) == _placed(fresh) and len(second.placed) == 2
    # The unchanged nodes were not read again for the limits: what the second solve added is
    # the changed node's reading (and of the states its placements made).
    unchanged = {views[n].exact_key for n in ("n2", "n3", "t1")}
    assert {k for k in before if k[1] in unchanged}
    added = set(cache.limit_states) - set(before)
    assert added and not {k for k in added if k[1] in unchanged}
    assert inventory.build_view(busy, cache).exact_key in {k[1] for k in added}
