"""Smoke tests of the openb bound and batch benchmark (bench/openb_bound.py): tiny instances.

The bound is checked against exact optima (brute force over every placement of a few pods),
and against every replay policy and the batch result on a small synthetic cluster.
"""

from __future__ import annotations

import csv
import itertools
import pathlib

import numpy as np
import pytest
from openb_rows import PodRows, nodes_of, pods_of

from bench import openb, openb_bound, openb_sim, openb_trace


def _optimum(nodes: openb_trace.Nodes, pods: openb_trace.Pods) -> int:
    """The best GPU milli over every placement (each pod unplaced or on any node and GPUs)."""
    options: list[list[tuple[int, list[int]] | None]] = []
    for p in range(pods.count):
        n, m = int(pods.num_gpu[p]), int(pods.milli[p])
        mine: list[tuple[int, list[int]] | None] = [None]
        for node in range(nodes.count):
            gpus = range(int(nodes.gpus[node]))
            if n == 0 or m == 0:
                mine.append((node, []))
            elif m < 1000:
                mine += [(node, [g]) for g in gpus]
            else:
                mine += [(node, list(c)) for c in itertools.combinations(gpus, n)]
        options.append(mine)
    best = 0
    for where in itertools.product(*options):
        try:
            best = max(best, openb_bound.check(nodes, pods, list(where)))
        except AssertionError:
            continue
    return best


def test_dual_feasible_functions() -> None:
    # u^(1): above half a bin counts as a whole bin, exactly half as half, below as nothing.
    assert openb_bound.dff(600, 1000, 1) == (2, 2)
    assert openb_bound.dff(500, 1000, 1) == (1, 2)
    assert openb_bound.dff(400, 1000, 1) == (0, 2)
    assert openb_bound.dff(400, 1000, 0) == (400, 1000)
    # Any set of items that fits one bin keeps its weights within the full bin's, for every k.
    for k in openb_bound.DFF_KS:
        for sizes in itertools.combinations_with_replacement(range(50, 1001, 50), 3):
            if sum(sizes) <= 1000:
                weights = sum(openb_bound.dff(s, 1000, k)[0] for s in sizes)
                assert weights <= openb_bound.dff(1000, 1000, k)[1], (k, sizes)


@pytest.mark.parametrize(
    ("cluster", "rows", "expected"),
    [
        # Three 600-milli shares, one GPU: no two fit together; plain capacity would say 1000.
        ([(8000, 1000, 1, "T4")], [(1000, 10, 1, 600, "")] * 3, 600),
        # Two whole GPUs asked with 6 cores each on a 10-core node: CPU lets one in.
        ([(10000, 1000, 2, "T4")], [(6000, 10, 1, 1000, "")] * 2, 1000),
        # A pod only for V100M32 and a 2-GPU pod: each fits one node only.
        (
            [(8000, 1000, 1, "T4"), (8000, 1000, 2, "V100M32")],
            [(1000, 10, 1, 1000, "V100M32"), (1000, 10, 2, 1000, ""), (1000, 10, 1, 300, "T4")],
            2300,
        ),
    ],
)
def test_bound_is_exact_on_tiny_instances(
    cluster: list[tuple[int, int, int, str]], rows: PodRows, expected: int
) -> None:
    nodes, pods = nodes_of(cluster), pods_of(rows)
    assert _optimum(nodes, pods) == expected
    assert openb_bound.bound(nodes, pods, time_limit_s=5).bound_milli == expected


def test_bound_is_at_least_the_optimum_of_small_random_instances() -> None:
    rng = np.random.default_rng(5)
    kinds: PodRows = [
        (4000, 100, 1, 500, ""),
        (2000, 100, 1, 700, ""),
        (8000, 100, 1, 1000, ""),
        (8000, 100, 2, 1000, ""),
        (3000, 100, 1, 300, "T4"),
        (6000, 100, 0, 0, ""),
    ]
    nodes = nodes_of([(12000, 1000, 2, "T4"), (10000, 1000, 2, "G2")])
    for _ in range(3):
        pods = pods_of([kinds[int(k)] for k in rng.integers(len(kinds), size=4)])
        assert openb_bound.bound(nodes, pods, time_limit_s=5).bound_milli >= _optimum(nodes, pods)


CLUSTER = [
    (64000, 262144, 8, "G2"),
    (64000, 262144, 8, "G2"),
    (32000, 131072, 2, "T4"),
    (32000, 131072, 2, "T4"),
    (16000, 65536, 1, "V100M16"),
    (96000, 393216, 8, "G2"),
]
KINDS: PodRows = [
    (4000, 8000, 1, 500, ""),
    (2000, 4000, 1, 250, ""),
    (12000, 16000, 1, 1000, ""),
    (8000, 16000, 2, 1000, ""),
    (32000, 64000, 8, 1000, ""),
    (6000, 8000, 0, 0, ""),
    (3000, 6000, 1, 700, "T4|V100M16"),
]


def _arrived() -> tuple[openb_trace.Nodes, openb_trace.Pods, openb_trace.Pods]:
    nodes = nodes_of(CLUSTER)
    rng = np.random.default_rng(11)
    pods = pods_of([KINDS[int(k)] for k in rng.integers(len(KINDS), size=40)])
    order = openb_trace.arrival_order(pods, nodes.total_gpus * 1000, ratio=1.3, rng=rng)
    ordered = pods.take(order)
    count = openb_bound.arrived(ordered, nodes.total_gpus)
    return nodes, pods, ordered.take(np.arange(count))


def test_arrived_is_the_last_record_at_100_percent() -> None:
    nodes = nodes_of(CLUSTER)  # 29 GPUs: 1000 milli each is 3.4% of the cluster
    pods = pods_of([(1000, 10, 1, 1000, "")] * 40)
    count = openb_bound.arrived(pods, nodes.total_gpus)
    assert count == 29  # 29 GPUs arrived: 100%; 30 would be 103%
    assert openb_bound.arrived(pods, nodes.total_gpus, percent=50) == 14  # 48.3%; 15: 51.7%


def test_bound_covers_every_policy_and_the_batch_result() -> None:
    nodes, pods, mine = _arrived()
    relaxed = openb_bound.bound(nodes, mine, time_limit_s=10)
    assert relaxed.bound_milli <= min(relaxed.demand_milli, relaxed.capacity_milli)
    best: openb_bound.Online | None = None
    for name, cls in openb_sim.BASELINES.items():
        run = openb_bound.online(nodes, pods, mine, cls(), np.random.default_rng(0))
        assert openb_bound.check(nodes, mine, run.where) == run.end_milli, name
        assert run.end_milli <= relaxed.bound_milli, name
        if best is None or run.end_milli > best.end_milli:
            best = run
    assert best is not None
    result = openb_bound.batch(
        nodes, mine, best.where, seconds=8, solve_seconds=0.5, rng=np.random.default_rng(0)
    )
    assert best.end_milli <= result.milli <= relaxed.bound_milli
    assert result.solves > 0
    assert result.milli == openb_bound.check(nodes, mine, result.where)


def test_batch_places_pods_from_an_empty_start() -> None:
    nodes, _, mine = _arrived()
    relaxed = openb_bound.bound(nodes, mine, time_limit_s=10)
    empty: openb_bound.Assignment = [None] * mine.count
    result = openb_bound.batch(
        nodes, mine, empty, seconds=8, solve_seconds=0.5, rng=np.random.default_rng(0)
    )
    assert result.start_milli == 0 and result.improved > 0
    assert 0 < result.milli <= relaxed.bound_milli
    assert result.milli == openb_bound.check(nodes, mine, result.where)


def test_whole_batch_is_checked_and_within_the_bound() -> None:
    nodes, _, mine = _arrived()
    relaxed = openb_bound.bound(nodes, mine, time_limit_s=10)
    whole = openb_bound.whole_batch(nodes, mine, seconds=2)
    assert 0 < whole.milli <= relaxed.bound_milli
    # The batch model keeps each pod's best nodes only here: no bound is claimed for it.
    assert whole.best_bound is None or whole.best_bound >= whole.objective


def test_checker_rejects_an_overfull_gpu() -> None:
    nodes = nodes_of([(8000, 1000, 1, "T4")])
    pods = pods_of([(1000, 10, 1, 600, "")] * 2)
    with pytest.raises(AssertionError, match="share does not fit"):
        openb_bound.check(nodes, pods, [(0, [0]), (0, [0])])


def test_command_writes_the_table(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with (tmp_path / openb.NODE_LIST).open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["sn", "cpu_milli", "memory_mib", "gpu", "model"])
        for i, (cpu, mem, gpus, model) in enumerate(CLUSTER):
            out.writerow([f"node-{i}", cpu, mem, gpus, model])
    rng = np.random.default_rng(3)
    with (tmp_path / "openb_pod_list_default.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"])
        for i, k in enumerate(rng.integers(len(KINDS), size=40)):
            cpu, mem, n, m, spec = KINDS[int(k)]
            out.writerow([f"pod-{i:03d}", cpu, mem, n, m, spec])
    folder = tmp_path / "out"
    args = ["--traces", str(tmp_path), "--out", str(folder), "--quiet"]
    args += ["--bound-seconds", "5", "--batch-seconds", "3", "--solve-seconds", "0.3"]
    assert openb_bound.main(args) == 0
    (row,) = list(csv.DictReader((folder / "bound.csv").open()))
    assert float(row["FGD_end"]) <= float(row["batch"]) <= float(row["bound"]) <= 100
    assert f"wrote {folder}" in capsys.readouterr().out
