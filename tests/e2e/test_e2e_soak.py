"""The chaos soak's short form (issue 29): `bench.soak` on its own real control plane with four
nodes (one of each shape: MIG, shares, mixed MIG, no shares), two controller replicas and every
fault kind injected at least once while pods and claims of every kind come and go. Every promise
is checked at its checkpoints and at the end (no device, MIG slice or share capacity held twice,
ledgers and claims agree, nothing left of deleted claims, what fits runs, no stalled cycle, flat
memory); the long run and its figures are in docs/RELIABILITY.md ("Under faults")."""

from __future__ import annotations

import pathlib

import pytest

from bench import soak
from drasat.testbed.controlplane import binaries

pytestmark = pytest.mark.timeout(1200)


def test_the_short_soak_keeps_every_promise_under_every_fault(tmp_path: pathlib.Path) -> None:
    try:
        binaries.locate()
    except binaries.MissingBinaries as exc:
        pytest.fail(f"the real control plane is not built: {exc}", pytrace=False)
    config = soak.Config(
        ops=150,
        nodes=4,
        seed=29,
        fault_every=2.0,
        checkpoint_every=75,
        drain_every=150,
        fault_rounds=1,
        out=tmp_path,
    )
    result = soak.run_soak(config)
    report = soak.summary(result)
    expected = set(soak.KINDS) - set(result["skipped_kinds"])
    injected = {kind for kind, row in result["faults"].items() if row["injected"]}
    assert injected >= expected, report
    assert result["operations_total"] >= 150, report
    assert result["violations"] == [], report
