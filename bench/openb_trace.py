"""The openb trace (Alibaba cluster-trace-gpu-v2023) as arrays, and the FGD paper's workload.

Reads the node and pod CSVs from a path given on the command line (they are never committed),
builds the arrival sequence the FGD authors' simulator replays (their pods shuffled with the seed,
then tuned up to a multiple of the cluster's GPU capacity by appending pods sampled with
replacement from the same list), and the "target workload" (the most popular pod classes and their
frequencies) that FGD measures fragmentation against. Pure functions over arrays, except `read_*`.
"""

from __future__ import annotations

import csv
import pathlib
import re
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

MILLI = 1000

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class Nodes:
    """GPU nodes: capacity of each, GPU model as an index into `models`."""

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    gpus: IntArray
    model: IntArray
    models: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.names)

    @property
    def total_gpus(self) -> int:
        return int(self.gpus.sum())


@dataclass(frozen=True)
class Pods:
    """Tasks: `milli` is the share of each GPU (1000 for whole GPUs, 0 for CPU-only tasks)."""

    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    num_gpu: IntArray
    milli: IntArray
    spec: tuple[str, ...]  # gpu_spec: allowed models joined by "|", "" for any

    @property
    def count(self) -> int:
        return len(self.names)

    @property
    def total_milli(self) -> IntArray:
        """GPU demand of each pod in milli-GPUs."""
        return self.milli * self.num_gpu

    def take(self, index: IntArray) -> Pods:
        return Pods(
            names=tuple(self.names[i] for i in index),
            cpu_milli=self.cpu_milli[index],
            memory_mib=self.memory_mib[index],
            num_gpu=self.num_gpu[index],
            milli=self.milli[index],
            spec=tuple(self.spec[i] for i in index),
        )


def read_nodes(path: pathlib.Path) -> Nodes:
    """openb_node_list_gpu_node.csv: `sn,cpu_milli,memory_mib,gpu,model`."""
    with path.open(newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: r["sn"])
    models = tuple(sorted({r["model"] for r in rows}))
    return Nodes(
        names=tuple(r["sn"] for r in rows),
        cpu_milli=np.array([int(r["cpu_milli"]) for r in rows], dtype=np.int64),
        memory_mib=np.array([int(r["memory_mib"]) for r in rows], dtype=np.int64),
        gpus=np.array([int(r["gpu"]) for r in rows], dtype=np.int64),
        model=np.array([models.index(r["model"]) for r in rows], dtype=np.int64),
        models=models,
    )


def _gpu_milli(num_gpu: int, gpu_milli: int) -> int:
    """Share of each GPU, as the authors' converter writes it: clipped to (0, 1000]."""
    if num_gpu == 0:
        return 0
    return min(max(gpu_milli, 0), MILLI)


def read_pods(path: pathlib.Path) -> Pods:
    """openb_pod_list_*.csv, sorted by name (the simulator's canonical order)."""
    with path.open(newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: r["name"])
    spec = tuple("|".join(s for s in (r.get("gpu_spec") or "").split("|") if s) for r in rows)
    num_gpu = [int(r["num_gpu"]) for r in rows]
    return Pods(
        names=tuple(r["name"] for r in rows),
        cpu_milli=np.array([int(r["cpu_milli"]) for r in rows], dtype=np.int64),
        memory_mib=np.array([int(r["memory_mib"]) for r in rows], dtype=np.int64),
        num_gpu=np.array(num_gpu, dtype=np.int64),
        milli=np.array(
            [_gpu_milli(n, int(r["gpu_milli"])) for n, r in zip(num_gpu, rows, strict=True)],
            dtype=np.int64,
        ),
        spec=spec,
    )


def allowed_models(specs: tuple[str, ...], models: tuple[str, ...]) -> BoolArray:
    """[len(specs), len(models)]: may a pod with this gpu_spec use a GPU of this model."""
    out = np.ones((len(specs), len(models)), dtype=np.bool_)
    for i, spec in enumerate(specs):
        wanted = {s for s in spec.split("|") if s}
        if wanted:
            out[i] = [m in wanted for m in models]
    return out


def arrival_order(
    pods: Pods,
    capacity_milli: int,
    *,
    ratio: float,
    rng: np.random.Generator,
    shuffle: bool = True,
) -> IntArray:
    """Indices into `pods` in arrival order, tuned to `ratio` x the cluster's GPU capacity.

    As the authors' simulator: the list (sorted by name) is shuffled, then pods sampled at random
    from it are appended while the demand stays within the target (their check adds the pod's
    per-GPU milli, not its total, before appending), or random pods are removed while it is above.
    Pure given the generator's state.
    """
    order = np.arange(pods.count, dtype=np.int64)
    if shuffle:
        order = rng.permutation(order)
    demand = pods.total_milli
    total = int(demand.sum())
    target = ratio * capacity_milli
    if total > target:
        kept = list(order)
        while total > target and kept:
            gone = kept.pop(int(rng.integers(len(kept))))
            total -= int(demand[gone])
        return np.array(kept, dtype=np.int64)
    extra: list[int] = []
    while True:
        pick = int(rng.integers(pods.count))
        if total + int(pods.milli[pick]) > target:
            break
        total += int(demand[pick])
        extra.append(pick)
    return np.concatenate([order, np.array(extra, dtype=np.int64)])


@dataclass(frozen=True)
class TargetWorkload:
    """The FGD paper's target workload: typical pod classes and the share of pods in each."""

    cpu_milli: IntArray
    milli: IntArray
    num_gpu: IntArray
    spec: tuple[str, ...]
    freq: FloatArray

    @property
    def count(self) -> int:
        return len(self.spec)


def target_workload(pods: Pods, *, popularity: float = 0.95) -> TargetWorkload:
    """The most popular classes (cpu, gpu milli, gpu count, gpu_spec) covering `popularity`.

    CPU-only pods count (the authors' runs involve them); memory does not define a class. Classes
    are taken by decreasing count (ties: larger resources first) until they cover the share, then
    their frequencies are renormalised to 1. Pure.
    """
    counts: dict[tuple[int, int, int, str], int] = {}
    for i in range(pods.count):
        key = (
            int(pods.cpu_milli[i]),
            int(pods.milli[i]),
            int(pods.num_gpu[i]),
            pods.spec[i],
        )
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    chosen: list[tuple[tuple[int, int, int, str], int]] = []
    covered = 0
    for key, n in ranked:
        if covered >= popularity * pods.count:
            break
        chosen.append((key, n))
        covered += n
    return TargetWorkload(
        cpu_milli=np.array([k[0] for k, _ in chosen], dtype=np.int64),
        milli=np.array([k[1] for k, _ in chosen], dtype=np.int64),
        num_gpu=np.array([k[2] for k, _ in chosen], dtype=np.int64),
        spec=tuple(k[3] for k, _ in chosen),
        freq=np.array([n / covered for _, n in chosen], dtype=np.float64),
    )


_ROW = re.compile(r"^\|\s*([a-z0-9]+)\s*\|((?:\s*[0-9.]+\s*\|)+)\s*$")


def published_figures(readme: pathlib.Path) -> dict[str, dict[str, float]]:
    """The calibration table of the traces' README: pod list -> policy -> allocation % at 100%.

    Returns {} when the file or the table is missing.
    """
    if not readme.is_file():
        return {}
    header: list[str] = []
    table: dict[str, dict[str, float]] = {}
    for line in readme.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == "pod list":
            header = cells[1:]
            continue
        match = _ROW.match(line.strip())
        if header and match:
            values = [float(v) for v in match.group(2).strip().strip("|").split("|")]
            table[match.group(1)] = dict(zip(header, values, strict=False))
    return table
