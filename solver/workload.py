"""The target workload of the fragmentation term: which claim shapes the free capacity must serve.

A purely computational module (with memos). The target workload is the distribution of the GPU
claim shapes of the problem's pods: per class the per-GPU need (share compute %, or 100 for whole
GPUs), the GPU count, which GPUs it may use (its selector and the policy's eligibility rules),
and the pod's CPU and memory requests, weighted by how many pods ask for it. MIG claims are left
to the MIG part of the term (blocked placements); pods without GPU claims only matter through the
CPU and memory they take.

A node's fragmented capacity (the FGD measure, Weng et al., USENIX ATC '23) is, summed over the
classes and weighted by their frequency, the free GPU compute of the node's non-MIG GPUs that the
class cannot use: all of it when the class does not fit the node (no eligible GPUs with its need
free, fewer than its count, or not enough CPU or memory left), else the free compute on GPUs it
may not use or that have less than its need free. The fragmentation term charges a placement the
growth of that measure on its node, in percent of a GPU (rounded), so a share goes where it leaves
the least capacity that the expected claims cannot use (a 30 % share next to a 70 % one rather
than beside a 50 % one when 50 % claims are common), and CPU is not exhausted beside free GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from drasat.solver import demand
from drasat.solver.demand import Claim, Kind
from drasat.solver.inventory import FULL_COMPUTE, GpuSlot, NodeView, intern
from drasat.solver.problem import PodRequest

if TYPE_CHECKING:
    from drasat.solver.rules import Rules

#: Classes kept: the most frequent ones covering this share of the GPU pods (as the FGD paper's
#: target workload), at most MAX_CLASSES of them.
COVERAGE = 0.95
MAX_CLASSES = 64
#: Units of the cost per % of a GPU.
RESOLUTION = 1


@dataclass(frozen=True)
class WorkloadClass:
    claim: Claim  # a representative claim: eligibility (selector, namespace) is read from it
    need: int  # per-GPU compute %, FULL_COMPUTE for whole GPUs
    count: int
    cpu_milli: int
    memory_mib: int
    weight: int  # pods of this class


@dataclass(frozen=True)
class Workload:
    classes: tuple[WorkloadClass, ...]
    total: int  # sum of the weights
    #: intern(what the classes are): part of memo keys.
    id: int

    @classmethod
    def empty(cls) -> Workload:
        return cls((), 0, 0)

    @classmethod
    def of(cls, pods: Sequence[PodRequest]) -> Workload:
        claims: dict[tuple[object, ...], tuple[Claim, int, int, int, int]] = {}
        weights: dict[tuple[object, ...], int] = {}
        for pod in pods:
            gpu = [c for c in pod.claims if c.gpu is not None]
            if len(gpu) != 1 or any(c.mig is not None for c in pod.claims):
                continue
            claim = demand.normalize(gpu[0], pod)
            if claim.kind is Kind.mig or claim.optional or claim.request.gpu is None:
                continue
            need = FULL_COMPUTE if claim.kind is Kind.whole else claim.share_compute
            if need <= 0:
                continue
            count = claim.count if claim.kind is Kind.whole else 1
            spec = claim.request.gpu.model_dump_json(exclude_none=True, exclude={"count", "share"})
            key = (claim.namespace, spec, need, count, pod.cpu_milli)
            claims.setdefault(key, (claim, need, count, pod.cpu_milli, 0))
            weights[key] = weights.get(key, 0) + 1
        ranked = sorted(weights, key=lambda k: (-weights[k], repr(k)))
        everything = sum(weights.values())
        classes: list[WorkloadClass] = []
        covered = 0
        for shape in ranked:
            if len(classes) >= MAX_CLASSES or covered >= COVERAGE * everything:
                break
            claim, need, count, cpu, memory = claims[shape]
            classes.append(WorkloadClass(claim, need, count, cpu, memory, weights[shape]))
            covered += weights[shape]
        if not classes:
            return cls.empty()
        shapes = tuple((k, weights[k]) for k in ranked[: len(classes)])
        return cls(tuple(classes), covered, intern(shapes))

    def __bool__(self) -> bool:
        return bool(self.classes)


def _free(gpu: GpuSlot) -> int:
    if gpu.mig_enabled or gpu.held_whole:
        return 0
    return max(0, FULL_COMPUTE - gpu.share_compute_used)


_ELIGIBLE: dict[tuple[int, int, int], bool] = {}


def _eligible(workload: Workload, index: int, gpu: GpuSlot, rules: Rules) -> bool:
    key = (workload.id, index, gpu.state_id)
    found = _ELIGIBLE.get(key)
    if found is None:
        claim = workload.classes[index].claim
        found = demand.device_fits(claim, gpu) and rules.blocking_rule(claim, gpu) is None
        if len(_ELIGIBLE) > 65536:
            _ELIGIBLE.clear()
        _ELIGIBLE[key] = found
    return found


def fragmented(
    workload: Workload,
    node: NodeView,
    rules: Rules,
    free: Sequence[int],
    cpu_taken: int,
    memory_taken: int,
) -> int:
    """The node's fragmented compute (weighted by class counts, in % of a GPU) if its non-MIG
    GPUs had `free` compute left and the pod took `cpu_taken`/`memory_taken` more."""
    total_free = sum(free)
    if not total_free:
        return 0
    cpu = None if node.cpu_free_milli is None else node.cpu_free_milli - cpu_taken
    memory = None if node.memory_free_mib is None else node.memory_free_mib - memory_taken
    out = 0
    for index, c in enumerate(workload.classes):
        unusable = total_free
        if (cpu is None or cpu >= c.cpu_milli) and (memory is None or memory >= c.memory_mib):
            usable, fitting = 0, 0
            for gpu, left in zip(node.gpus, free, strict=True):
                if left >= c.need and left and _eligible(workload, index, gpu, rules):
                    usable += left
                    fitting += 1
            if fitting >= c.count:
                unusable = total_free - usable
        out += c.weight * unusable
    return out


def growth(
    workload: Workload,
    node: NodeView,
    rules: Rules,
    taken: dict[int, int],
    cpu_taken: int,
    memory_taken: int,
) -> int:
    """The fragmentation term's cost of a placement: growth of the node's fragmented compute in
    % of a GPU (weighted mean over the classes, rounded to an integer). `taken`: GPU position ->
    compute % the placement takes there."""
    before_free = [_free(g) for g in node.gpus]
    after_free = [
        max(0, f - taken.get(g.position, 0)) for g, f in zip(node.gpus, before_free, strict=True)
    ]
    before = _fragmented_memo(workload, node, rules, before_free)
    after = fragmented(workload, node, rules, after_free, cpu_taken, memory_taken)
    return round(RESOLUTION * (after - before) / workload.total)


_BEFORE: dict[tuple[int, int, int], int] = {}


def _fragmented_memo(workload: Workload, node: NodeView, rules: Rules, free: list[int]) -> int:
    key = (workload.id, node.canonical_key, rules.node_class_id(node.name))
    found = _BEFORE.get(key)
    if found is None:
        found = fragmented(workload, node, rules, free, 0, 0)
        if len(_BEFORE) > 65536:
            _BEFORE.clear()
        _BEFORE[key] = found
    return found
