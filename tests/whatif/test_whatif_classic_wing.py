"""The classic what-if lives in the classic wing (drasat.classic.whatif, issue 25): without it,
classic manifests are a clear error naming the package, and a v1 run does not need it."""

from __future__ import annotations

import sys
from typing import Any

import pytest

CLASSIC = "deploy/examples/reference-cases"
V1 = "deploy/examples/v1-reference-cases"
LAB = "deploy/examples/clusters/lab.yaml"


def test_classic_manifests_without_the_wing_are_a_clear_error(
    run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "drasat.classic.whatif", None)  # import raises ImportError
    result = run_cli("--cluster", LAB, "-f", CLASSIC)
    assert result.code == 2
    assert "no classic wing (the drasat.classic package)" in result.err
    assert "Traceback" not in result.err


def test_a_v1_run_needs_no_classic_module(run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m.startswith("drasat.classic")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "drasat.classic", None)
    result = run_cli("--cluster", LAB, "-f", V1)
    assert result.code == 0, result.err
    assert result.out.startswith("POD")
    assert not any(m.startswith("drasat.classic.") for m in sys.modules)
