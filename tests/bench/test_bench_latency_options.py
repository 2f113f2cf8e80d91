"""Smoke tests of bench/latency.py's options and bench/batch_whatif.py on tiny clusters."""

from __future__ import annotations

import json
import pathlib
import random

from bench import batch_whatif, latency, solver_online


def test_potential_nodes_restrict_each_problem_to_k_nodes() -> None:
    run = solver_online.run_detailed(6, 0.5, 5, mix="whole", potential_nodes=2)
    assert [d.nodes for d in run] == [2] * 5
    assert [d.nodes for d in solver_online.run_detailed(6, 0.5, 2)] == [6, 6]


def test_mixes_draw_only_their_shapes() -> None:
    mig = solver_online._pods(random.Random(1), 20, mix="mig")
    assert all(len(p.claims) == 1 and p.claims[0].mig is not None for p in mig)
    whole = solver_online._pods(random.Random(1), 20, mix="whole")
    for pod in whole:
        (claim,) = pod.claims
        assert claim.gpu is not None and claim.gpu.share is None
    multi = solver_online._pods(random.Random(1), 40, mix="multi")
    assert any(len(p.claims) == 2 for p in multi)
    assert all(len(p.claims) == 1 for p in solver_online._pods(random.Random(1), 40))


def test_steady_state_departures_keep_a_full_cluster_accepting() -> None:
    # 4 nodes at 90%: without departures the cluster fills up and later pods are rejected.
    filling = solver_online.run_detailed(4, 0.9, 30, mix="whole")
    steady = solver_online.run_detailed(4, 0.9, 30, mix="whole", steady=True)
    assert sum(not d.placed for d in steady) < sum(not d.placed for d in filling)


def test_latency_main_with_mixes_candidates_and_plot(tmp_path: pathlib.Path) -> None:
    plot = tmp_path / "latency_nodes.png"
    args = ["--nodes", "6", "--occupancy", "0.5", "--decisions", "3", "--warmup", "1"]
    args += ["--mix", "mig", "whole", "--potential-nodes", "0", "4", "--same-process"]
    assert latency.main([*args, "--out", str(tmp_path), "--plot", str(plot)]) == 0
    rows = json.loads((tmp_path / "latency.json").read_text())
    assert [(r["mix"], r["nodes"], r["candidates"]) for r in rows] == [
        ("mig", 6, "all"),
        ("mig", 6, 4),
        ("whole", 6, "all"),
        ("whole", 6, 4),
    ]
    assert all(r["decisions"] == 3 and r["peak_rss_mib"] > 0 for r in rows)
    assert all(0 <= r["cpu_p50_ms"] <= r["cpu_p99_ms"] for r in rows)
    assert plot.stat().st_size > 0
    # K at least the cluster's size is every node: one row, not two.
    again = ["--nodes", "3", "--occupancy", "0.5", "--decisions", "2", "--potential-nodes", "0"]
    assert latency.main([*again, "4", "--same-process", "--out", str(tmp_path)]) == 0
    assert len(json.loads((tmp_path / "latency.json").read_text())) == 1


def test_latency_fresh_process_reports_its_own_peak_rss() -> None:
    config = latency.Config(3, 0.5, "single", 0, decisions=2, warmup=0)
    row = latency.measure_fresh(config)
    assert row["decisions"] == 2 and int(str(row["peak_rss_mib"])) > 0
    best = latency.best_of([row | {"p99_ms": 9.0}, row | {"p99_ms": 2.0}])
    assert best["p99_ms"] == 2.0 and best["p99_runs_ms"] == "9.0 / 2.0"


def test_batch_whatif_tiny(tmp_path: pathlib.Path) -> None:
    args = ["--nodes", "4", "--claims", "3", "--time-limit", "0.2", "--same-process"]
    assert batch_whatif.main([*args, "--out", str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "batch.json").read_text())
    assert row["pods"] == 3 and row["claims"] == 3 and 0 <= row["placed"] <= 3
    assert row["status"] in ("OPTIMAL", "FEASIBLE") and float(row["batch_cpu_s"]) >= 0
