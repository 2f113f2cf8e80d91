"""Each controller owns one SolverCache and passes it to every solve it runs."""

from __future__ import annotations

from collections.abc import Callable

from ctl_cluster import add_claim, add_class, add_node, allocated_node, claim, t4, wait

from drasat.classic.controller import Controller, default_solve
from drasat.kube.client import KubeClient
from drasat.solver import Problem, Solution, SolveParams, SolverCache


def test_every_solve_gets_the_controllers_own_cache(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    seen: list[SolveParams] = []

    def solve(problem: Problem, params: SolveParams) -> Solution:
        seen.append(params)
        return default_solve(problem, params)

    add_node(api, "node-1", [t4(0), t4(1)])
    add_class(api)
    controller = start_controller(solve=solve)
    for name in ("a", "b"):
        add_claim(api, "ns", name, mode="Immediate")
        wait(lambda n=name: allocated_node(claim(api, "ns", n)), what=f"allocation of {name}")
    assert seen
    assert isinstance(controller.solver_cache, SolverCache)
    assert all(p.cache is controller.solver_cache for p in seen)
    assert Controller(api).solver_cache is not controller.solver_cache  # one per controller
