"""drasat.v1.cel against kube-scheduler's CEL (k8s.io/dynamic-resource-allocation/cel v0.37.2,
through drasat-oracle): random selectors over every attribute and capacity of random nodes'
devices evaluate the same on every device, errors included (a missing key's error word for word).

An expression upstream does not compile cannot be in a claim (the API server compiles selectors
on create), so only the ones it compiles are compared; each must compile in drasat too."""

from __future__ import annotations

from typing import Any

import celgen
import fleet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oraclekit import Oracle, examples

from drasat.v1 import cel

Obj = dict[str, Any]


def _drasat(expression: str, devices: list[tuple[str, Obj]]) -> list[Obj]:
    selector = cel.compile_selector(expression)
    out = []
    for driver, device in devices:
        result = selector.evaluate(driver, device)
        out.append(
            {"error": result.message} if isinstance(result, cel.Failure) else {"match": result}
        )
    return out


def _past_the_cost_limit(expression: str) -> bool:
    try:
        cel.compile_selector(expression)
    except cel.SelectorError as error:
        return cel.TOO_COMPLEX in str(error)
    return False


def _same(mine: Obj, theirs: Obj) -> bool:
    if "match" in theirs:
        return mine == theirs
    if "error" not in mine:
        return False
    # Messages are compared where kube-scheduler's words reach the user as the reason.
    if str(theirs["error"]).startswith("no such key:"):
        return bool(mine["error"] == theirs["error"])
    return True


@settings(
    max_examples=examples(800),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    node=fleet.node_cases(max_gpus=2),
    expressions=st.lists(celgen.expressions(), min_size=1, max_size=3),
)
def test_selectors_evaluate_as_kube_scheduler_evaluates_them(
    oracle: Oracle, node: fleet.NodeCase, expressions: list[str]
) -> None:
    devices = [(fleet.DRIVER, d) for d in fleet.build(node).published()]
    answers = oracle.ask_many(
        [
            {
                "op": "cel",
                "expression": e,
                "devices": [{"driver": d, "device": x} for d, x in devices],
            }
            for e in expressions
        ]
    )
    for expression, upstream in zip(expressions, answers, strict=True):
        if not upstream["compiles"] or _past_the_cost_limit(expression):
            continue  # neither can be in a claim: the API server refuses both
        mine = _drasat(expression, devices)
        for (_, device), m, theirs in zip(devices, mine, upstream["results"], strict=True):
            assert _same(m, theirs), (expression, device["name"], m, theirs)


def _compiles(expression: str) -> str | None:
    """None where drasat compiles the selector, else why not. A selector past the API server's
    cost estimate compiles (upstream's compiler does not refuse it; its validation does)."""
    try:
        cel.compile_selector(expression)
    except cel.SelectorError as error:
        return None if cel.TOO_COMPLEX in str(error) else str(error)
    return None


@settings(
    max_examples=examples(1500),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(expressions=st.lists(celgen.with_mistakes(), min_size=1, max_size=8))
def test_a_selector_compiles_where_the_api_server_compiles_it(
    oracle: Oracle, expressions: list[str]
) -> None:
    """The API server compiles (and type checks) every selector of a claim, template or class
    when it is created and refuses the object when one does not compile: drasat refuses exactly
    those, so the what-if refuses what `kubectl apply` would and places what it would accept."""
    answers = oracle.ask_many([{"op": "cel", "expression": e, "devices": []} for e in expressions])
    for expression, upstream in zip(expressions, answers, strict=True):
        refused = _compiles(expression)
        assert (refused is None) == upstream["compiles"], (
            expression,
            refused,
            upstream.get("compileError"),
        )
