"""Smoke tests of the openb replay through the controller's batch path (`--window K`)."""

from __future__ import annotations

import csv
import math
import pathlib
from collections.abc import Iterator

import numpy as np
import pytest
from openb_rows import nodes_of, pods_of

from bench import controller_batch, openb, openb_trace, replay
from drasat.solver import Problem, Solution, SolverCache

CLUSTER = [
    (64000, 262144, 8, "G2"),
    (32000, 131072, 2, "T4"),
    (48000, 196608, 4, "V100M32"),
]
KINDS = [
    (4000, 8000, 1, 500, ""),
    (8000, 16000, 1, 1000, ""),
    (8000, 16000, 2, 1000, ""),
    (16000, 32000, 4, 1000, "V100M32"),
    (3000, 6000, 1, 700, "T4|V100M32"),
    (6000, 8000, 0, 0, ""),
]


def _pods(count: int, seed: int) -> openb_trace.Pods:
    rng = np.random.default_rng(seed)
    return pods_of([KINDS[int(k)] for k in rng.integers(len(KINDS), size=count)])


@pytest.fixture
def counted() -> Iterator[list[int]]:
    """The batch solver wrapped: the window size of every call, in order."""
    sizes: list[int] = []

    def wrapper(problem: Problem, cache: SolverCache, limit: float | None) -> Solution:
        sizes.append(len(problem.pods))
        return controller_batch.solver_batch(problem, cache, limit)

    controller_batch.set_batch_solver(wrapper)
    yield sizes
    controller_batch.set_batch_solver(controller_batch.solver_batch)


@pytest.mark.parametrize("window", [1, 4, 16])
def test_a_window_is_one_batch_call_and_stays_within_capacity(
    window: int, counted: list[int]
) -> None:
    nodes = nodes_of(CLUSTER)
    pods = _pods(30, seed=5)
    rng = np.random.default_rng(42)
    order = openb_trace.arrival_order(pods, nodes.total_gpus * 1000, ratio=1.3, rng=rng)
    policy = controller_batch.factory(f"drasat@w{window}", time_limit_s=2.0)()
    # The replay's own capacity model checks every decision the solver returns.
    result = replay.replay(nodes, pods.take(order), policy, openb_trace.target_workload(pods), rng)
    assert 0 < result.used_milli[-1] <= nodes.total_gpus * 1000
    # Every arrival with a feasible node either came in a window or opened one.
    assert sum(counted) <= len(order)
    assert all(size <= window for size in counted)
    assert len(counted) >= math.ceil(result.placed.sum() / window)


def test_one_pod_windows_decide_as_online_placement() -> None:
    """A one-pod batch model has the online decision's objective over the same nodes: the same
    node for every pod and the same allocation after every pod; only which of a node's equal
    GPUs it takes may differ (CP-SAT's pick among symmetric optima)."""
    from bench import drasat_policy

    nodes = nodes_of(CLUSTER)
    pods = _pods(24, seed=9)
    picks: dict[str, list[tuple[int, list[int]] | None]] = {}
    used: dict[str, list[int]] = {}
    for name, make in (
        ("online", drasat_policy.factory("drasat", chunk=8)),
        ("w1", controller_batch.factory("drasat@w1", time_limit_s=2.0)),
    ):
        rng = np.random.default_rng(42)
        order = openb_trace.arrival_order(pods, nodes.total_gpus * 1000, ratio=1.3, rng=rng)
        policy = make()
        chosen: list[tuple[int, list[int]] | None] = []
        choose = policy.choose

        def recording(*args, choose=choose, chosen=chosen):  # type: ignore[no-untyped-def]
            decision = choose(*args)
            chosen.append(decision)
            return decision

        policy.choose = recording  # type: ignore[method-assign]
        result = replay.replay(
            nodes, pods.take(order), policy, openb_trace.target_workload(pods), rng
        )
        picks[name] = chosen
        used[name] = result.used_milli.tolist()
    assert [p and p[0] for p in picks["w1"]] == [p and p[0] for p in picks["online"]]
    assert [p and len(p[1]) for p in picks["w1"]] == [p and len(p[1]) for p in picks["online"]]
    assert used["w1"] == used["online"]


def test_window_names_and_errors() -> None:
    assert controller_batch.parse_name("drasat@w8") == ("drasat", 8)
    assert controller_batch.parse_name("drasat-local@w64") == ("drasat-local", 64)
    for bad in ("drasat@w0", "drasat@wx", "drasat@w"):
        with pytest.raises(SystemExit):
            controller_batch.parse_name(bad)
    with pytest.raises(SystemExit, match="unknown drasat policy"):
        controller_batch.factory("drasat-nope@w8")
    with pytest.raises(SystemExit, match="module:function"):
        controller_batch.load_batch_solver("nocolon")
    with pytest.raises(SystemExit, match="batch-solver"):
        controller_batch.load_batch_solver("bench.controller_batch:nothing_here")
    assert (
        controller_batch.load_batch_solver("bench.controller_batch:solver_batch")
        is controller_batch.solver_batch
    )


def test_command_runs_each_window(tmp_path: pathlib.Path) -> None:
    nodes = nodes_of(CLUSTER)
    pods = _pods(20, seed=2)
    with (tmp_path / openb.NODE_LIST).open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["sn", "cpu_milli", "memory_mib", "gpu", "model"])
        for i in range(nodes.count):
            row = [nodes.cpu_milli[i], nodes.memory_mib[i], nodes.gpus[i]]
            out.writerow([nodes.names[i], *row, nodes.models[nodes.model[i]]])
    with (tmp_path / "openb_pod_list_default.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"])
        for i in range(pods.count):
            row = [pods.cpu_milli[i], pods.memory_mib[i], pods.num_gpu[i], pods.milli[i]]
            out.writerow([pods.names[i], *row, pods.spec[i]])
    (tmp_path / "README.md").write_text("")
    result = tmp_path / "out"
    argv = ["--traces", str(tmp_path), "--policies", "FGD,drasat", "--window", "1", "8"]
    argv += ["--seeds", "42", "--batch-seconds", "1", "--out", str(result), "--quiet"]
    assert openb.main([*argv, "--no-plot"]) == 0
    rows = list(csv.DictReader((result / "summary.csv").open()))
    assert [r["policy"] for r in rows] == ["FGD", "drasat@w1", "drasat@w8"]
    table_png = tmp_path / "windows.png"
    assert controller_batch.main([str(result), "--plot", str(table_png)]) == 0
    assert table_png.stat().st_size > 0
    table = controller_batch.window_table(controller_batch.read_summaries([result]))
    header, _, row = table.splitlines()
    assert header.split(" | ")[3:9:3] == ["drasat@w1 unallocated", "drasat@w8 unallocated"]
    fgd = {r["policy"]: r for r in rows}["FGD"]["unallocated_at_100"]
    assert row.startswith(f"| default | {float(fgd):.2f} | {0.9 * float(fgd):.2f} |")
    with pytest.raises(SystemExit, match=r"no summary\.csv"):
        controller_batch.main([str(tmp_path / "nothing")])
    with pytest.raises(SystemExit, match="positive"):
        openb.main(["--traces", str(tmp_path), "--policies", "drasat", "--window", "0"])
