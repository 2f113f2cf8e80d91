"""Cluster state, fragmentation and the FGD paper's placement policies, vectorised with numpy.

The replay harness only: these policies are baselines to compare drasat against, implemented from
the paper's definitions and the semantics of its authors' simulator (score plugins, ties broken at
random, GPU chosen inside the node by the plugin's own rule). None of this is product code.

Units: CPU in milli-cores, memory in MiB, GPU in milli-GPUs (1000 = one GPU).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bench.openb_trace import (
    MILLI,
    BoolArray,
    FloatArray,
    IntArray,
    Nodes,
    Pods,
    TargetWorkload,
    allowed_models,
)

MAX_SPEC_CPU = 128_000  # the simulator's normalisation constants
MAX_SPEC_GPU = 8_000
MAX_SCORE = 100


def _trunc(values: FloatArray) -> IntArray:
    """Go's int64(float): truncation toward zero."""
    return np.trunc(values).astype(np.int64)


@dataclass
class Cluster:
    """Free resources of every node, kept with the per-node fragmentation w.r.t. a target."""

    nodes: Nodes
    target: TargetWorkload
    cpu_left: IntArray = field(init=False)
    mem_left: IntArray = field(init=False)
    gpu_left: IntArray = field(init=False)  # [nodes, max gpus]; absent GPUs hold 0
    tags: IntArray = field(init=False)  # [nodes, 5]: GPU pods per class share,1,2,4,8+ GPUs
    target_access: BoolArray = field(init=False)  # [nodes, classes]: GPU class may use node
    frag: FloatArray = field(init=False)  # [nodes]: fragmented milli-GPUs (expected)
    count: IntArray = field(init=False)  # [nodes, classes]: GPUs with enough free share
    small: IntArray = field(init=False)  # [nodes, classes]: free share on GPUs below the need
    total: IntArray = field(init=False)  # [nodes]: free GPU share
    used_milli: int = 0

    def __post_init__(self) -> None:
        n = self.nodes.count
        width = max(int(self.nodes.gpus.max(initial=1)), 1)
        self.cpu_left = self.nodes.cpu_milli.copy()
        self.mem_left = self.nodes.memory_mib.copy()
        self.gpu_left = np.where(
            np.arange(width)[None, :] < self.nodes.gpus[:, None], MILLI, 0
        ).astype(np.int64)
        self.tags = np.zeros((n, 5), dtype=np.int64)
        allowed = allowed_models(self.target.spec, self.nodes.models)  # [classes, models]
        self.target_access = allowed[:, self.nodes.model].T & (self.target.milli > 0)[None, :]
        self.refresh()

    def refresh(self) -> None:
        """Recompute the per-node caches from the free resources (after editing them)."""
        rows = np.arange(self.nodes.count)
        self.count, self.small, self.total = self.class_stats(rows)
        self.frag = self.node_frag(rows)

    # -- fragmentation (the paper's definition, Sec. 3) ---------------------------------------

    def class_stats(self, rows: IntArray) -> tuple[IntArray, IntArray, IntArray]:
        """Per node and target class: GPUs with enough left, milli on GPUs too small, total."""
        gl = self.gpu_left[rows]
        enough = gl[:, None, :] >= self.target.milli[None, :, None]
        count = enough.sum(axis=2)
        small = np.where(enough, 0, gl[:, None, :]).sum(axis=2)
        return count, small, gl.sum(axis=1)

    def frag_value(
        self,
        count: IntArray,
        small: IntArray,
        total: IntArray,
        cpu_left: IntArray,
        access: BoolArray,
    ) -> FloatArray:
        """Expected fragmented milli-GPUs: sum over classes of freq x what that class cannot use.

        A class that fits the node (model, enough GPUs, enough CPU) cannot use the GPUs whose
        free share is below its per-GPU need; a class that does not fit (or needs no GPU) cannot
        use any of the node's free GPU share. Shapes broadcast over leading axes; last is class.
        """
        t = self.target
        fits = access & (count >= t.num_gpu) & (cpu_left[..., None] >= t.cpu_milli)
        unusable = np.where(fits, small, total[..., None])
        # Summed along the contiguous class axis, row by row: equal rows give bit-equal sums,
        # so a placement that changes nothing scores exactly sigmoid(0) (a matmul may not).
        result: FloatArray = (unusable * t.freq).sum(axis=-1)
        return result

    def node_frag(self, rows: IntArray) -> FloatArray:
        count, small, total = self.class_stats(rows)
        return self.frag_value(count, small, total, self.cpu_left[rows], self.target_access[rows])

    # -- feasibility and placement -------------------------------------------------------------

    def feasible(self, pods: Pods, p: int, allowed: BoolArray) -> IntArray:
        """Nodes that can host pod p now: CPU, memory, GPU model, enough free GPU share."""
        ok = (self.cpu_left >= pods.cpu_milli[p]) & (self.mem_left >= pods.memory_mib[p])
        n, m = int(pods.num_gpu[p]), int(pods.milli[p])
        if n > 0 and m > 0:
            ok &= allowed[self.nodes.model]
            if m < MILLI:
                ok &= (self.gpu_left >= m).any(axis=1)
            else:
                ok &= (self.gpu_left == MILLI).sum(axis=1) >= n
        found: IntArray = np.flatnonzero(ok).astype(np.int64)
        return found

    def place(self, pods: Pods, p: int, node: int, gpus: list[int]) -> None:
        m = int(pods.milli[p])
        self.cpu_left[node] -= pods.cpu_milli[p]
        self.mem_left[node] -= pods.memory_mib[p]
        for g in gpus:
            self.gpu_left[node, g] -= m
            assert self.gpu_left[node, g] >= 0, "over-committed GPU"
        self.used_milli += m * len(gpus)
        tag = gpu_tag(int(pods.num_gpu[p]), m)
        if tag >= 0:
            self.tags[node, tag] += 1
        row = np.array([node])
        count, small, total = self.class_stats(row)
        self.count[node], self.small[node], self.total[node] = count[0], small[0], total[0]
        self.frag[node] = self.node_frag(row)[0]


def gpu_tag(num_gpu: int, milli: int) -> int:
    """GpuClustering's affinity class of a pod: -1 CPU-only, 0 share, 1..4 = 1, 2, 4, 8+ GPUs."""
    if num_gpu == 0 or milli == 0:
        return -1
    if milli < MILLI:
        return 0
    return {1: 1, 2: 2, 4: 3}.get(num_gpu, 4)


def first_free_gpus(cluster: Cluster, node: int, n: int) -> list[int]:
    """Whole GPUs: the lowest-index fully free ones (the simulator's exclusive allocation)."""
    return [int(g) for g in np.flatnonzero(cluster.gpu_left[node] == MILLI)[:n]]


def best_fit_gpu(cluster: Cluster, node: int, milli: int) -> int:
    """Partial GPU: the one with the least free share that still fits (lowest index on ties)."""
    left = cluster.gpu_left[node]
    return int(np.argmin(np.where(left >= milli, left, MILLI + 1)))


def pick_max(
    scores: IntArray, nodes: IntArray, rng: np.random.Generator, *, random_ties: bool
) -> int:
    """The node of highest score. Ties: the first in node order, or uniformly at random.

    Upstream kube-scheduler's selectHost samples ties at random; the authors' simulator builds on
    their own fork of it, and their published figures are matched by first-in-order ties (see
    docs/PERFORMANCE.md), so that is the default of the replay.
    """
    best = np.flatnonzero(scores == scores.max())
    pick = int(rng.integers(len(best))) if random_ties else 0
    return int(nodes[best[pick]])


# -- the paper's baselines ---------------------------------------------------------------------


class Policy:
    """Chooses a node and GPUs for pod p among the feasible nodes (non-empty)."""

    name = "policy"

    def __init__(self, *, random_ties: bool = False) -> None:
        self.random_ties = random_ties

    def choose(
        self, cluster: Cluster, pods: Pods, p: int, feasible: IntArray, rng: np.random.Generator
    ) -> tuple[int, list[int]] | None:
        """(node, GPU indices), or None to leave the pod unplaced."""
        raise NotImplementedError

    def unplaceable(self, cluster: Cluster, pods: Pods, p: int) -> None:
        """Told of a pod no node can host (a policy with its own state may check it agrees)."""

    def gpus_for(self, cluster: Cluster, pods: Pods, p: int, node: int) -> list[int]:
        """GPUs inside the chosen node: best fit for partial GPUs, first free for whole ones."""
        n, m = int(pods.num_gpu[p]), int(pods.milli[p])
        if n == 0 or m == 0:
            return []
        if m < MILLI:
            return [best_fit_gpu(cluster, node, m)]
        return first_free_gpus(cluster, node, n)


class ScoredPolicy(Policy):
    def scores(self, cluster: Cluster, pods: Pods, p: int, feasible: IntArray) -> IntArray:
        raise NotImplementedError

    def choose(
        self, cluster: Cluster, pods: Pods, p: int, feasible: IntArray, rng: np.random.Generator
    ) -> tuple[int, list[int]]:
        node = pick_max(
            self.scores(cluster, pods, p, feasible), feasible, rng, random_ties=self.random_ties
        )
        return node, self.gpus_for(cluster, pods, p, node)


class RandomFit(Policy):
    """Random-fit: any feasible node; a random fitting GPU for partial-GPU pods."""

    name = "Random"

    def choose(
        self, cluster: Cluster, pods: Pods, p: int, feasible: IntArray, rng: np.random.Generator
    ) -> tuple[int, list[int]]:
        node = int(feasible[int(rng.integers(len(feasible)))])
        n, m = int(pods.num_gpu[p]), int(pods.milli[p])
        if 0 < m < MILLI and n > 0:
            fits = np.flatnonzero(cluster.gpu_left[node] >= m)
            return node, [int(fits[int(rng.integers(len(fits)))])]
        return node, self.gpus_for(cluster, pods, p, node)


class DotProduct(ScoredPolicy):
    """Tetris' dot product of free and requested (CPU, GPU), normalised by the largest node.

    As the authors' plugin scores it: 1 - dot/2, so the node whose free vector aligns least with
    the request wins (it packs).
    """

    name = "DotProd"

    def scores(self, cluster: Cluster, pods: Pods, p: int, feasible: IntArray) -> IntArray:
        cpu = cluster.cpu_left[feasible] / MAX_SPEC_CPU * (pods.cpu_milli[p] / MAX_SPEC_CPU)
        gpu_free = cluster.gpu_left[feasible].sum(axis=1) / MAX_SPEC_GPU
        gpu = gpu_free * (pods.total_milli[p] / MAX_SPEC_GPU)
        return _trunc(MAX_SCORE * (1 - (cpu + gpu) / 2))


class BestFit(ScoredPolicy):
    """Best-fit: least weighted free CPU and GPU left after placing (weights 0.5/0.5)."""

    name = "BestFit"

    def scores(self, cluster: Cluster, pods: Pods, p: int, feasible: IntArray) -> IntArray:
        return bestfit_scores(cluster, pods, p, feasible)


def bestfit_scores(cluster: Cluster, pods: Pods, p: int, feasible: IntArray) -> IntArray:
    cpu = (cluster.cpu_left[feasible] - pods.cpu_milli[p]) / MAX_SPEC_CPU
    gpu = (cluster.gpu_left[feasible].sum(axis=1) - pods.total_milli[p]) / MAX_SPEC_GPU
    return _trunc((1.0 - (0.5 * cpu + 0.5 * gpu)) * MAX_SCORE)


class GpuClustering(ScoredPolicy):
    """Keep pods of one GPU class together: nodes holding only this class, then mixed, then
    empty, then other classes; within a band the fuller node wins."""

    name = "GpuClustering"

    def scores(self, cluster: Cluster, pods: Pods, p: int, feasible: IntArray) -> IntArray:
        tag = gpu_tag(int(pods.num_gpu[p]), int(pods.milli[p]))
        if tag < 0:
            return np.zeros(len(feasible), dtype=np.int64)
        tags = cluster.tags[feasible]
        classes = (tags > 0).sum(axis=1)
        has = tags[:, tag] > 0
        band = np.where(has, np.where(classes == 1, 75, 50), np.where(classes == 0, 25, 0))
        fill = (MAX_SCORE // 4) * (MAX_SPEC_GPU - cluster.gpu_left[feasible].sum(axis=1))
        result: IntArray = fill // MAX_SPEC_GPU + band
        return result


class GpuPacking(ScoredPolicy):
    """Prefer partially used GPUs, then free GPUs on used nodes, then free nodes."""

    name = "GpuPacking"

    def scores(self, cluster: Cluster, pods: Pods, p: int, feasible: IntArray) -> IntArray:
        n, m = int(pods.num_gpu[p]), int(pods.milli[p])
        if n == 0 or m == 0:
            return np.zeros(len(feasible), dtype=np.int64)
        left = cluster.gpu_left[feasible]
        free = (left == MILLI).sum(axis=1)
        idle_node = free == cluster.nodes.gpus[feasible]
        idle_score = np.maximum(MAX_SCORE // 3 - free, free)
        if m >= MILLI:
            used_score = np.full(len(feasible), max(MAX_SCORE // 2 - n, MAX_SCORE // 3))
        else:
            tight = np.where(left >= m, left, MILLI + 1).min(axis=1)
            shared = np.maximum(MAX_SCORE - (tight * 100 // MILLI) // 10, MAX_SCORE // 2)
            new_gpu = max(MAX_SCORE // 2 - 1, MAX_SCORE // 3)
            used_score = np.where(tight == MILLI, new_gpu, shared)
        result: IntArray = np.where(idle_node, idle_score, used_score).astype(np.int64)
        return result


class FragmentationGradientDescent(Policy):
    """FGD: place where the expected fragmentation w.r.t. the target workload grows least.

    Score = sigmoid((frag before - frag after) / 1000) x 100, truncated to an integer as the
    authors' plugin does; for partial-GPU pods every fitting GPU is tried and the best kept.
    """

    name = "FGD"

    def choose(
        self, cluster: Cluster, pods: Pods, p: int, feasible: IntArray, rng: np.random.Generator
    ) -> tuple[int, list[int]]:
        scores, gpu = fgd_scores(cluster, pods, p, feasible)
        node = pick_max(scores, feasible, rng, random_ties=self.random_ties)
        n, m = int(pods.num_gpu[p]), int(pods.milli[p])
        if 0 < m < MILLI and n > 0:
            return node, [int(gpu[int(np.flatnonzero(feasible == node)[0])])]
        return node, self.gpus_for(cluster, pods, p, node)


def _sigmoid_score(delta: FloatArray) -> IntArray:
    x = np.clip(delta / 1000.0, -700.0, 700.0)
    return _trunc(1.0 / (1.0 + np.exp(-x)) * MAX_SCORE)


def fgd_scores(
    cluster: Cluster, pods: Pods, p: int, feasible: IntArray
) -> tuple[IntArray, IntArray]:
    """FGD node scores of pod p on the feasible nodes, and the GPU it would take on each
    (partial-GPU pods; -1 otherwise). Pure."""
    t = cluster.target
    c, n, m = int(pods.cpu_milli[p]), int(pods.num_gpu[p]), int(pods.milli[p])
    count, small, total = cluster.count[feasible], cluster.small[feasible], cluster.total[feasible]
    cpu_after = cluster.cpu_left[feasible] - c
    access = cluster.target_access[feasible]
    before = cluster.frag_value(count, small, total, cluster.cpu_left[feasible], access)
    if n == 0 or m == 0 or m >= MILLI:
        # CPU-only or whole GPUs: the taken GPUs were fully free, so each class sees n fewer
        # GPUs with enough share and nothing new below its need.
        taken = n if m >= MILLI else 0
        after = cluster.frag_value(count - taken, small, total - taken * m, cpu_after, access)
        return _sigmoid_score(before - after), np.full(len(feasible), -1, dtype=np.int64)
    # Partial GPU: try the GPUs that fit; GPUs of equal free share give equal outcomes (only the
    # node's multiset of free shares matters), so each distinct value is tried once, on its
    # lowest-index GPU. GPU j's free share goes from L to L - m.
    left = cluster.gpu_left[feasible]  # [F, G]
    width = left.shape[1]
    earlier = np.tril(np.ones((width, width), dtype=np.bool_), k=-1)  # [j, j'] : j' < j
    repeat = ((left[:, :, None] == left[:, None, :]) & earlier[None]).any(axis=2)
    row, col = np.nonzero((left >= m) & ~repeat)  # candidates, row-major: by node then GPU
    value = left[row, col]
    need = t.milli[None, :]
    was, now = value[:, None], (value - m)[:, None]
    count_c = count[row] - (was >= need) + (now >= need)
    small_c = small[row] - np.where(was < need, was, 0) + np.where(now < need, now, 0)
    after = cluster.frag_value(count_c, small_c, total[row] - m, cpu_after[row], access[row])
    cand = _sigmoid_score(before[row] - after)
    scores = np.full(len(feasible), -1, dtype=np.int64)
    np.maximum.at(scores, row, cand)
    gpu = np.full(len(feasible), width, dtype=np.int64)
    np.minimum.at(gpu, row, np.where(cand == scores[row], col, width))  # first best GPU
    return scores, gpu


BASELINES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (
        RandomFit,
        DotProduct,
        GpuClustering,
        GpuPacking,
        BestFit,
        FragmentationGradientDescent,
    )
}
