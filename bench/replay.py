"""Online replay of an arrival sequence through one placement policy, and the paper's metrics.

`replay` places each pod in arrival order (no departures) and records, after every pod, the
arrived GPU demand, the allocated GPU share and the cluster's fragmented GPU amount.
`by_arrival` turns that into the authors' discrete curve: at every arrived-demand percent
0..130, the mean allocation over the records whose arrival rounds to that percent.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Protocol, TextIO

import numpy as np

from bench.openb_sim import Cluster, Policy
from bench.openb_trace import (
    BoolArray,
    FloatArray,
    IntArray,
    Nodes,
    Pods,
    TargetWorkload,
    allowed_models,
)

PERCENTS = np.arange(0, 131)


class Progress(Protocol):
    def __call__(self, done: int, total: int) -> None: ...


class ProgressBar:
    """A one-line progress bar on stderr, redrawn at most every 1% (and at the end)."""

    def __init__(self, label: str, stream: TextIO = sys.stderr) -> None:
        self.label, self.stream = label, stream
        self.started = time.monotonic()
        self.shown = -1

    def __call__(self, done: int, total: int) -> None:
        percent = 100 * done // max(total, 1)
        if percent == self.shown and done != total:
            return
        self.shown = percent
        bar = "#" * (percent // 4)
        elapsed = time.monotonic() - self.started
        end = "\n" if done == total else ""
        self.stream.write(
            f"\r{self.label:<28} [{bar:<25}] {percent:3d}% {done}/{total} pods {elapsed:6.1f}s{end}"
        )
        self.stream.flush()


@dataclass(frozen=True)
class ReplayResult:
    """Per record (the empty cluster, then after each pod): cumulative values in milli-GPUs."""

    arrived_milli: IntArray
    used_milli: IntArray
    frag_milli: FloatArray
    placed: BoolArray  # per pod
    total_gpus: int
    wall_s: float
    decision_s: FloatArray  # per pod: time the policy took to choose
    #: per pod: this process's CPU time in that choice (what waiting for a shared core leaves out)
    decision_cpu_s: FloatArray


def replay(
    nodes: Nodes,
    pods: Pods,
    policy: Policy,
    target: TargetWorkload,
    rng: np.random.Generator,
    progress: Progress | None = None,
) -> ReplayResult:
    """Place `pods` in order with `policy`. Pure apart from the generator and `progress`."""
    cluster = Cluster(nodes, target)
    specs = tuple(sorted(set(pods.spec)))
    allowed = allowed_models(specs, nodes.models)
    spec_of = np.array([specs.index(s) for s in pods.spec], dtype=np.int64)
    demand = pods.total_milli
    arrived = np.zeros(pods.count + 1, dtype=np.int64)
    used = np.zeros(pods.count + 1, dtype=np.int64)
    frag = np.zeros(pods.count + 1, dtype=np.float64)
    frag[0] = cluster.frag.sum()
    placed = np.zeros(pods.count, dtype=np.bool_)
    decision = np.zeros(pods.count, dtype=np.float64)
    decision_cpu = np.zeros(pods.count, dtype=np.float64)
    started = time.monotonic()
    for p in range(pods.count):
        feasible = cluster.feasible(pods, p, allowed[spec_of[p]])
        if len(feasible):
            t0, c0 = time.perf_counter(), time.process_time()
            choice = policy.choose(cluster, pods, p, feasible, rng)
            decision[p] = time.perf_counter() - t0
            decision_cpu[p] = time.process_time() - c0
            if choice is not None:
                cluster.place(pods, p, *choice)
                placed[p] = True
        else:
            policy.unplaceable(cluster, pods, p)
        arrived[p + 1] = arrived[p] + demand[p]
        used[p + 1] = cluster.used_milli
        frag[p + 1] = cluster.frag.sum()
        if progress is not None:
            progress(p + 1, pods.count)
    return ReplayResult(
        arrived_milli=arrived,
        used_milli=used,
        frag_milli=frag,
        placed=placed,
        total_gpus=nodes.total_gpus,
        wall_s=time.monotonic() - started,
        decision_s=decision,
        decision_cpu_s=decision_cpu,
    )


def by_arrival(arrived_milli: IntArray, values_milli: FloatArray, total_gpus: int) -> FloatArray:
    """Mean of `values` (as % of the cluster's GPUs) at each arrived-demand percent 0..130.

    As the authors' analysis: arrival percents are rounded to integers, values to 2 decimals;
    a percent with no record takes the records within +-1; NaN when there are none. Pure.
    """
    arrival = np.round(arrived_milli / total_gpus / 10)
    value = np.round(values_milli / total_gpus / 10, 2)
    out = np.full(len(PERCENTS), np.nan)
    for i, x in enumerate(PERCENTS):
        picked = value[arrival == x]
        if picked.size == 0:
            picked = value[(arrival >= x - 1) & (arrival <= x + 1)]
        if picked.size:
            out[i] = round(float(picked.mean()), 2)
    return out
