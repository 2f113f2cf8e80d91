"""bench/preemption_plan.py's fleet and plan, on two nodes: the numbers it prints in
docs/CONTROLLER.md come from the same calls."""

from __future__ import annotations

from bench import preemption_plan
from drasat import v1
from drasat.v1 import preemption


def test_a_full_fleet_gives_a_proven_plan() -> None:
    nodes, running = preemption_plan.fleet(2)
    assert sum(len(n.state.ledger.allocated) for n in nodes) == len(running)
    users = {r.claims[0]: frozenset({r.key}) for r in running}
    for want in (1, 3):
        pod = v1.PodInput("bench/hi", "bench", (preemption_plan._claim("hi", want),), 100)
        found = preemption.plan(pod, nodes, running, users, preemption_plan.CLASSES)
        assert found.node is not None and found.victims and found.proven
        assert found.checks == 1


def test_full_mig_and_share_fleets_give_proven_plans() -> None:
    for kind, claim, victims in (
        ("mig", preemption_plan._profile_claim("hi", "3g.20gb"), 3),
        ("shares", preemption_plan._share_claim("hi", 50), 2),
    ):
        nodes, running = preemption_plan.filled(3, kind)
        assert sum(len(n.state.ledger.allocated) for n in nodes) == len(running)
        users = {r.claims[0]: frozenset({r.key}) for r in running}
        pod = v1.PodInput("bench/hi", "bench", (claim,), 100)
        found = preemption.plan(pod, nodes, running, users, preemption_plan.CLASSES)
        assert len(found.victims) == victims and found.proven and found.checks == 1, kind
