"""A problem that contradicts itself is a clear InputError, not a traceback."""

from __future__ import annotations

import dataclasses

import pytest
from checker import gpu_claim, make_node, pod

from drasat.api.inputerrors import InputError
from drasat.solver import Problem, solve


def test_duplicate_node_names() -> None:
    problem = Problem(nodes=(make_node("n1", "T4"), make_node("n1", "L4")), pods=())
    with pytest.raises(InputError, match=r"nodes\[1\]: node n1 is listed twice"):
        solve(problem)


def test_gpu_uuid_on_two_nodes() -> None:
    first = make_node("n1", "T4")
    second = dataclasses.replace(first, name="n2")
    with pytest.raises(
        InputError, match=r"gpu\.uuid GPU-n1-0 \(its spec\.allocatableDevices\) is also on node n1"
    ):
        solve(Problem(nodes=(first, second), pods=()))


def test_duplicate_pods_and_conflicting_claims() -> None:
    nodes = (make_node("n1", "T4"),)
    with pytest.raises(InputError, match="pod default/p is listed twice"):
        solve(Problem(nodes=nodes, pods=(pod("p", gpu_claim("c")), pod("p", gpu_claim("d")))))
    one, two = gpu_claim("c"), gpu_claim("c", count=2)
    with pytest.raises(InputError, match=r"claim uid uid-default-c .* differs"):
        solve(Problem(nodes=nodes, pods=(pod("a", one), pod("b", two))))
