"""bench/controller_scale.py: its arguments and its table (the run itself needs a control plane)."""

from __future__ import annotations

import pytest

from bench import controller_scale


def test_node_counts_ascending() -> None:
    assert controller_scale.parse_args(["--nodes", "10,20"]).nodes == [10, 20]
    for bad in ("20,10", "10,10", "x", "0,5"):
        with pytest.raises(SystemExit):
            controller_scale.parse_args(["--nodes", bad])


def test_summary_row() -> None:
    step = {
        "nodes": 250,
        "sync_s": 7.7,
        "rss_mib": 120.5,
        "first_cycle_s": 9.98,
        "idle_cycle_s": 0.4,
        "busy_cycles": [[1.0, 0.25], [3.0, 0.75]],
        "busy_cycle_p50_s": 1.0,
        "busy_cycle_p99_s": 3.0,
        "solve_share": 0.25,
        "pods": 128,
    }
    table = controller_scale.summary({"steps": [step]})
    assert table.splitlines()[-1] == "| 250 | — | 7.7 | 120.5 | 9.98 | 0.4 | 1.0 / 3.0 (64) | 25% |"
    step |= {"full_settle_every": 30, "idle_cycle_p50_s": 0.08}
    table = controller_scale.summary({"steps": [step]})
    assert table.splitlines()[-1] == (
        "| 250 | 30 | 7.7 | 120.5 | 9.98 | 0.4; 0.08 | 1.0 / 3.0 (64) | 25% |"
    )
