"""The controller's metrics and logs say what a solve proved: its online decisions are optimal
per pod (among the pod's candidate nodes), never OPTIMAL for a whole set, and have no bound."""

from __future__ import annotations

import logging

import pytest
from checker import gpu_claim, make_node, pod
from ctl_classic import FAST
from ctl_kubefake import FakeApi

from drasat import policyfiles
from drasat.classic.controller import Controller
from drasat.solver import Problem, Status


def _sample(controller: Controller, name: str, labels: dict[str, str]) -> float | None:
    value = controller.metrics.registry.get_sample_value(name, labels)
    return None if value is None else float(value)


def test_solves_are_counted_and_logged_with_what_they_prove(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spread = policyfiles.shipped("spread").spec
    controller = Controller(FakeApi(), FAST, policy=lambda: spread)
    problem = Problem(
        nodes=(make_node("n2", "T4", count=2), make_node("n1", "T4", count=1)),
        pods=(pod("one", gpu_claim("one")),),
        policy=spread,
    )
    with caplog.at_level(logging.DEBUG, logger="drasat.classic.controller"):
        solution = controller._timed_solve(problem, feasibility=False, kind="selected")
    assert solution.status is Status.PER_POD_OPTIMAL
    name = "drasat_controller_solves_total"
    assert _sample(controller, name, {"kind": "selected", "status": "PER_POD_OPTIMAL"}) == 1
    assert _sample(controller, name, {"kind": "selected", "status": "OPTIMAL"}) is None
    (record,) = [r for r in caplog.records if r.getMessage().startswith("solve selected:")]
    message = record.getMessage()
    assert "PER_POD_OPTIMAL (each pod optimal among its candidate nodes" in message
    assert "no bound" in message and "gap" not in message
    assert record.__dict__["status"] == "PER_POD_OPTIMAL"
    assert record.__dict__["bound"] == "no bound"
