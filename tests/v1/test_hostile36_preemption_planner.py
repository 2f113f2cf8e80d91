"""Hostile review of the one preemption planner (`drasat.v1.preemption.plan_all`): defects
found, each xfail(strict) until it is fixed."""

from __future__ import annotations

from test_v1_preemption_planner import _running, _users
from v1kit import CLASSES, claim, exactly, node, pod

from drasat.solver import Gang
from drasat.v1 import preemption
from drasat.v1.preemption import Wanting


def test_a_gang_of_mixed_priorities_evicts_only_below_its_lowest_pod() -> None:
    # n1: 2 T4s held by a (priority 500) and b (priority -10). A gang of w0 (priority 0) and w1
    # (priority 1000): the gang's priority is 0 (`Wanting.priority`), so only b may go, and
    # one GPU is not enough for the gang: no plan, no victim.
    nodes, high = _running([node("n1", "T4", 2)], {"a": (claim("a", {"g": exactly()}),)},
                           priority=500)  # fmt: skip
    nodes, low = _running(nodes, {"b": (claim("b", {"g": exactly()}),)}, priority=-10)
    run = high + low
    w0 = pod("w0", claim("w0", {"g": exactly()}), priority=0)
    w1 = pod("w1", claim("w1", {"g": exactly()}), priority=1000)
    gang = Wanting((w0, w1), Gang("default/mixed", (w0.key, w1.key)))
    assert gang.priority == 0
    (plan,) = preemption.plan_all([gang], nodes, run, _users(run), CLASSES).plans
    assert "default/a" not in plan.victims, plan
