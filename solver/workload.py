"""The target workload of the fragmentation term: which claim shapes the free capacity must serve.

A purely computational module (with memos, in the caller's SolverCache). A workload class is a
GPU claim shape: the per-GPU need (share compute %, or 100 for whole GPUs), the GPU count, which
GPUs it may use (its selector and the policy's eligibility rules), and the pod's CPU and memory
requests, with a weight (how common it is). Where it comes from (`placement.solve` picks the
first that is given):

1. the policy: the fragmentation term's `workload` list (`from_shapes`);
2. the solver input: `Problem.workload` (`from_shapes`) — the controller passes `estimate(...)`
   of the claims the cluster holds and the pending ones; the openb bench passes the trace's
   class distribution;
3. the problem's own pods (`of`): the most frequent shapes covering 95% of its GPU pods.

MIG claims are left to the MIG part of the term (blocked placements); pods without GPU claims
only matter through the CPU and memory they take.

A node's fragmented capacity (the FGD measure, Weng et al., USENIX ATC '23) is, summed over the
classes and weighted by their frequency, the free GPU compute of the node's non-MIG GPUs that the
class cannot use: all of it when the class does not fit the node (no eligible GPUs with its need
free, fewer than its count, or not enough CPU or memory left), else the free compute on GPUs it
may not use or that have less than its need free. The fragmentation term charges a placement the
growth of that measure on its node, in percent of a GPU (rounded), so a share goes where it leaves
the least capacity that the expected claims cannot use (a 30 % share next to a 70 % one rather
than beside a 50 % one when 50 % claims are common), and CPU is not exhausted beside free GPUs.

Scarcity (`Workload.scaled_by_supply`): FGD weights each class by its frequency alone, so capacity
stranded for a class that may use only a few GPUs (a product selector, a namespace confined by
allowedProducts or kept off reserved GPUs) counts no more than capacity stranded for one that may
use any GPU, and packing then fills the scarce GPUs with claims that could have gone anywhere.
Each class's weight is multiplied by (the most non-MIG GPUs of the solve's nodes that any class
may use / those it may use) ** SCARCITY_POWER: the share of its options a stranded GPU takes,
times how crowded they are, relative to the least constrained class. On the
openb gpuspec33 list this took the unallocated GPUs at 100% arrival from 13.52% to 7.03% (seed
42; 10 seeds: 7.12%, FGD 12.18%); power 1 gave 8.49%. Lists without selectors are unchanged
(docs/PERFORMANCE.md).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from drasat.api.policy import AllocationPolicySpec, WorkloadShape
from drasat.api.selectors import GpuSelector
from drasat.api.sharing import GpuShare
from drasat.solver import demand
from drasat.solver.cache import SolverCache, fresh
from drasat.solver.claimspec import GpuDemand, selects_mig_mode
from drasat.solver.demand import Claim, Kind
from drasat.solver.inventory import FULL_COMPUTE, GpuSlot, NodeView
from drasat.solver.problem import ClaimRequest, PodRequest

if TYPE_CHECKING:
    from drasat.solver.rules import Rules

#: Classes kept: the most frequent ones covering this share of the GPU pods (as the FGD paper's
#: target workload), at most MAX_CLASSES of them.
COVERAGE = 0.95
MAX_CLASSES = 64
#: % of a GPU per unit of the cost. FGD's integer score, 100 x sigmoid(growth / 1000 milli-GPU),
#: moves by one point per ~4% of a GPU near zero growth, and its ties go to the first node in
#: order; at 4% per unit the term ties as often and binpack and node order break the ties. On
#: the openb default list (seed 42, FGD's target) 1%: 5.05% of the GPUs unallocated at 100%
#: arrival, 2%: 5.21, 4%: 4.59, 8%: 4.86 (docs/PERFORMANCE.md).
GRANULARITY = 4
#: `estimate` gives weights in these units of the covered total (per mille): a distribution
#: that barely moves keeps its weights, and so the memo keys of every cost computed with it.
ESTIMATE_SCALE = 1000
#: A class that may use only a share s of the GPUs the least constrained class may use (by its
#: selector, allowedProducts, reservations) counts (1 / s) ** SCARCITY_POWER times its weight:
#: stranding capacity for it costs more the fewer GPUs it has to go to (the share of its options
#: lost) and the more it crowds them.
SCARCITY_POWER = 2


@dataclass(frozen=True)
class WorkloadClass:
    claim: Claim  # a representative claim: eligibility (selector, namespace) is read from it
    need: int  # per-GPU compute %, FULL_COMPUTE for whole GPUs
    count: int
    cpu_milli: int
    memory_mib: int
    weight: int  # pods of this class
    #: What the measure sums the class's unusable capacity with: `weight`, times its scarcity
    #: once `Workload.scaled_by_supply` has counted the GPUs it may use.
    scaled: int


@dataclass(frozen=True)
class Workload:
    classes: tuple[WorkloadClass, ...]
    total: int  # sum of the weights
    #: intern(what the classes are): part of memo keys.
    id: int
    #: Some class selects GPUs by uuid (so which GPUs it may use is read GPU by GPU).
    names_uuid: bool = False
    #: Some class selects GPUs by index or uuid (a node's measure depends on which GPU is free).
    names_gpus: bool = False

    @classmethod
    def empty(cls) -> Workload:
        return cls((), 0, 0)

    @classmethod
    def of(cls, pods: Sequence[PodRequest], cache: SolverCache | None = None) -> Workload:
        """The estimate from a problem's pods: shapes covering COVERAGE of its GPU pods.
        `cache` numbers its `id` (equal workloads of one cache share memo entries)."""
        # As FGD's classes, memory does not define a class nor is it checked (CPU is).
        return cls._build(((pod, 1) for pod in pods), COVERAGE, fresh(cache), memory=False)

    @classmethod
    def from_shapes(
        cls, shapes: Sequence[WorkloadShape], cache: SolverCache | None = None
    ) -> Workload:
        """An explicit workload (policy or solver input): every shape, the heaviest MAX_CLASSES
        if there are more. Memoized: a long-running caller passes the same shapes to every
        solve (the same object: not even serialized again)."""
        cache = fresh(cache)
        known = cache.workloads.get(id(shapes))
        if known is not None and known[0] is shapes:
            return known[1]
        # The shapes' fields, serialized (equal text: equal shapes); a key, never searched.
        text = tuple(s.model_dump_json() for s in shapes)
        made = cache.workloads_by_text.get(text)
        if made is None:
            entries = ((_pod_of(i, s), s.weight) for i, s in enumerate(shapes))
            made = cls._build(entries, 1.0, cache, memory=True)
            cache.put(cache.workloads_by_text, text, made, _WORKLOADS_SIZE)
        # The entry holds the shapes, so their id is not reused while it stands.
        cache.put(cache.workloads, id(shapes), (shapes, made), _WORKLOADS_SIZE)
        return made

    @classmethod
    def _build(
        cls,
        entries: Iterable[tuple[PodRequest, int]],
        coverage: float,
        cache: SolverCache,
        *,
        memory: bool,
    ) -> Workload:
        claims: dict[tuple[object, ...], tuple[Claim, int, int, int, int]] = {}
        weights: dict[tuple[object, ...], int] = {}
        for pod, weight in entries:
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
            spec = claim.request.gpu.key(leave_out=("count", "share"))
            memory_mib = pod.memory_mib if memory else 0
            key = (claim.namespace, spec, need, count, pod.cpu_milli, memory_mib)
            claims.setdefault(key, (claim, need, count, pod.cpu_milli, memory_mib))
            weights[key] = weights.get(key, 0) + weight
        ranked = sorted(weights, key=lambda k: (-weights[k], repr(k)))
        everything = sum(weights.values())
        classes: list[WorkloadClass] = []
        covered = 0
        for shape in ranked:
            if len(classes) >= MAX_CLASSES or covered >= coverage * everything:
                break
            claim, need, count, cpu, memory_mib = claims[shape]
            weight = weights[shape]
            classes.append(WorkloadClass(claim, need, count, cpu, memory_mib, weight, weight))
            covered += weight
        if not classes:
            return cls.empty()
        # The number stands for what the memo tables read of each class (`eligible_row`,
        # supply): its key, its weight, and the GPUs its claim may use, which a v1 claim's
        # selectors decide without changing its key (one interned number per eligible set).
        shapes = tuple(
            (k, weights[k], _eligible_id(c.claim, cache))
            for k, c in zip(ranked[: len(classes)], classes, strict=True)
        )
        by_uuid = any(
            _names_uuid(c.claim.selector) or c.claim.request.eligible is not None for c in classes
        )
        by_gpu = any(c.claim.names_gpus for c in classes)
        return cls(tuple(classes), covered, cache.intern(shapes), by_uuid, by_gpu)

    def __bool__(self) -> bool:
        return bool(self.classes)

    def scaled_by_supply(self, views: Collection[NodeView], rules: Rules) -> Workload:
        """The workload with each class weighted by its scarcity relative to the others: (the
        most non-MIG GPUs a class may use / those this one may use) ** SCARCITY_POWER. Scarcity
        is relative, so a workload of one class, or without selectors, allowedProducts or
        reservations, is unchanged (and the nodes are not walked)."""
        if len(self.classes) < 2 or not any(_restricted(c.claim, rules) for c in self.classes):
            return self
        eligible = _supply(self, views, rules)
        most = max(eligible)
        classes = tuple(
            dataclasses.replace(c, scaled=_scaled(c.weight, most, usable))
            for c, usable in zip(self.classes, eligible, strict=True)
        )
        if all(c.scaled == c.weight for c in classes):
            return self
        scaled_id = rules.cache.intern((self.id, tuple(c.scaled for c in classes)))
        return Workload(classes, self.total, scaled_id, self.names_uuid, self.names_gpus)


def _eligible_id(claim: Claim, cache: SolverCache) -> int:
    """The claim's eligible set as a number (0: any GPU)."""
    eligible = claim.request.eligible
    return 0 if eligible is None else cache.intern_large(eligible)


#: Workloads kept per cache (`Workload.from_shapes`): one per policy or caller's list.
_WORKLOADS_SIZE = 64


def _pod_of(index: int, shape: WorkloadShape) -> PodRequest:
    """A stand-in pod with one claim of the shape (eligibility is read from its claim)."""
    # A shape's selector takes MIG-mode GPUs where it asks for migEnabled: true. The measure
    # reads GPUs without MIG only, so this keeps no more than the class's key (`GpuDemand.key`).
    mig_mode = selects_mig_mode(shape.selector)
    spec = GpuDemand(
        count=shape.count,
        selector=shape.selector,
        share=shape.share,
        mig_mode_gpus_allowed=mig_mode,
    )
    name = f"workload-{index}"
    request = ClaimRequest(uid=name, namespace=shape.namespace, name=name, gpu=spec)
    return PodRequest(
        key=f"{shape.namespace}/{name}",
        namespace=shape.namespace,
        claims=(request,),
        cpu_milli=shape.cpu_milli,
        memory_mib=shape.memory_mib,
    )


def policy_shapes(policy: AllocationPolicySpec) -> tuple[WorkloadShape, ...]:
    """The shapes the policy's fragmentation terms list (empty: the policy names none)."""
    return tuple(s for term in policy.objective if term.workload for s in term.workload)


def select(
    policy: AllocationPolicySpec,
    given: Sequence[WorkloadShape] | None,
    pods: Sequence[PodRequest],
    cache: SolverCache | None = None,
) -> Workload:
    """The target workload of one solve: the policy's list, else the solver input, else the
    estimate from the problem's pods."""
    listed = policy_shapes(policy)
    if listed:
        return Workload.from_shapes(listed, cache)
    if given:
        return Workload.from_shapes(given, cache)
    return Workload.of(pods, cache)


#: What `estimate` counts: (namespace, GPU count, per-GPU compute %; 100 for whole GPUs).
ShapeKey = tuple[str, int, int]


def pending_shapes(pods: Iterable[PodRequest]) -> Counter[ShapeKey]:
    """The GPU claim shapes of pods still to place (MIG devices and shares without a compute
    percentage left out), counted as the classic wing counts a NAS's (`allocated_shapes` in
    drasat/classic/clusterworkload.py)."""
    found: Counter[ShapeKey] = Counter()
    for pod in pods:
        for request in pod.claims:
            spec = request.gpu
            if spec is None or spec.optional:
                continue
            if spec.share is not None:
                if spec.share.compute:
                    found[(request.namespace, 1, spec.share.compute)] += 1
                continue
            found[(request.namespace, spec.count, FULL_COMPUTE)] += 1
    return found


def estimate(counts: Counter[ShapeKey]) -> tuple[WorkloadShape, ...]:
    """A workload from counted shapes: the most frequent covering COVERAGE of them (at most
    MAX_CLASSES), weighted in ESTIMATE_SCALE units of what they cover (at least 1 each)."""
    ranked = sorted(counts, key=lambda k: (-counts[k], k))
    everything = sum(counts.values())
    chosen: list[ShapeKey] = []
    covered = 0
    for key in ranked:
        if len(chosen) >= MAX_CLASSES or covered >= COVERAGE * everything:
            break
        chosen.append(key)
        covered += counts[key]
    out: list[WorkloadShape] = []
    for namespace, count, need in chosen:
        weight = max(1, round(ESTIMATE_SCALE * counts[(namespace, count, need)] / covered))
        share = None if need >= FULL_COMPUTE else GpuShare(compute=need)
        out.append(WorkloadShape(count=count, share=share, namespace=namespace, weight=weight))
    return tuple(out)


def _restricted(claim: Claim, rules: Rules) -> bool:
    """Whether the class may be kept off some GPU by its selector or the policy's rules. A
    class that may take MIG-mode GPUs whole counts as selecting (a classic one asks for them
    in its selector; a v1 one's eligible set admits one)."""
    return (
        claim.selector is not None
        or claim.allows_mig_gpu
        or bool(rules.hard_reservations)
        or demand.allowed_products(claim.namespace, rules.policy) is not None
    )


def _scaled(weight: int, most: int, usable: int) -> int:
    if not usable or usable >= most:
        # The least constrained; or one no GPU can serve, which costs the same on every node.
        return weight
    return round(weight * (most / usable) ** SCARCITY_POWER)


#: SolverCache.supply: (workload id, policy, node hardware, node class) -> non-MIG GPUs each
#: class may use. SolverCache.cluster_supply: (workload id, policy, node names, their hardware)
#: -> what `_supply` found: the next decision sees the same nodes with other allocations, and
#: need not walk them (5 ms at 5,000 nodes); this many clusters are kept:
_CLUSTER_SUPPLY_SIZE = 64


def _supply(workload: Workload, views: Collection[NodeView], rules: Rules) -> tuple[int, ...]:
    """How many of the nodes' non-MIG GPUs each class may use (whatever is taken).

    Nodes of one hardware and policy class count alike, so each such group is read once (a
    selector on GPU uuids reads every node)."""
    # A uuid selector (of a class, or a reservation's) reads GPU by GPU: hardware keys hold
    # each GPU's index, not its uuid.
    by_uuid = workload.names_uuid or rules.names_gpus
    cache = rules.cache
    cluster: tuple[object, ...] = ()
    if not by_uuid:
        names = tuple([v.name for v in views])
        cluster = (workload.id, rules.fingerprint, names, tuple([v.hardware_key for v in views]))
        known = cache.cluster_supply.get(cluster)
        if known is not None:
            return known
    groups: Counter[tuple[int, int]] = Counter()
    sample: dict[tuple[int, int], NodeView] = {}
    for view in views:
        key = (id(view) if by_uuid else view.hardware_key, rules.node_class_id(view.name))
        groups[key] += 1
        sample.setdefault(key, view)
    eligible = [0] * len(workload.classes)
    for key, nodes in groups.items():
        memo = (workload.id, rules.fingerprint, *key)
        found = None if by_uuid else cache.supply.get(memo)
        if found is None:
            rows = [eligible_row(workload, g, rules) for g in sample[key].gpus if not g.mig_enabled]
            found = tuple(sum(row[i] for row in rows) for i in range(len(workload.classes)))
            if not by_uuid:
                cache.put(cache.supply, memo, found)
        for i, n in enumerate(found):
            eligible[i] += nodes * n
    found_all = tuple(eligible)
    if cluster:
        cache.put(cache.cluster_supply, cluster, found_all, _CLUSTER_SUPPLY_SIZE)
    return found_all


def _names_uuid(selector: GpuSelector | None) -> bool:
    if selector is None:
        return False
    parts = [*(selector.andExpression or ()), *(selector.orExpression or ())]
    return selector.uuid is not None or any(_names_uuid(s) for s in parts)


def _free(gpu: GpuSlot) -> int:
    if gpu.mig_enabled or gpu.held_whole:
        return 0
    return max(0, FULL_COMPUTE - gpu.share_compute_used)


def eligible_row(workload: Workload, gpu: GpuSlot, rules: Rules) -> tuple[bool, ...]:
    """Which classes may use the GPU by their selectors and the policy's rules, whatever is taken
    of it. Memoized (SolverCache.rows) by what the GPU is (its index included) and its node's
    policy class (reservations name nodes), and by its uuid only when some class or reservation
    selects GPUs by uuid."""
    node_class = rules.node_class_id(gpu.node)
    key = (
        workload.id,
        rules.fingerprint,
        gpu.hardware_id,
        node_class,
        gpu.uuid if workload.names_uuid or rules.names_gpus else "",
    )
    rows = rules.cache.rows
    found = rows.get(key)
    if found is None:
        found = tuple(
            demand.device_fits(c.claim, gpu) and rules.blocking_rule(c.claim, gpu) is None
            for c in workload.classes
        )
        rules.cache.put(rows, key, found)
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
    # Only GPUs with something free count for any class: their rows, and their free compute.
    lefts = [left for left in free if left]
    rows = [
        eligible_row(workload, g, rules) for g, left in zip(node.gpus, free, strict=True) if left
    ]
    # Most nodes hold one kind of GPU: then a class may use all of them or none.
    alike = rows[0] if all(row == rows[0] for row in rows) else None
    for index, c in enumerate(workload.classes):
        unusable = total_free
        if (cpu is None or cpu >= c.cpu_milli) and (memory is None or memory >= c.memory_mib):
            usable, fitting = 0, 0
            if alike is None:
                for row, left in zip(rows, lefts, strict=True):
                    if left >= c.need and row[index]:
                        usable += left
                        fitting += 1
            elif alike[index]:
                for left in lefts:
                    if left >= c.need:
                        usable += left
                        fitting += 1
            if fitting >= c.count:
                unusable = total_free - usable
        out += c.scaled * unusable
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
    compute % the placement takes there. In GRANULARITY units."""
    before_free = [_free(g) for g in node.gpus]
    after_free = [
        max(0, f - taken.get(g.position, 0)) for g, f in zip(node.gpus, before_free, strict=True)
    ]
    before = _fragmented_memo(workload, node, rules, before_free)
    after = fragmented(workload, node, rules, after_free, cpu_taken, memory_taken)
    return round((after - before) / (GRANULARITY * workload.total))


def _fragmented_memo(workload: Workload, node: NodeView, rules: Rules, free: list[int]) -> int:
    """`fragmented` before a placement, memoized (SolverCache.before) by the node's free state:
    with GPU identities when a class or reservation names GPUs by index or uuid; and by the
    policy, whose rules say which classes may use which GPUs (it may change between cycles)."""
    exact = workload.names_gpus or rules.names_gpus
    state = node.exact_key if exact else node.canonical_key
    key = (workload.id, rules.fingerprint, state, rules.node_class_id(node.name))
    found = rules.cache.before.get(key)
    if found is None:
        found = rules.cache.put(
            rules.cache.before, key, fragmented(workload, node, rules, free, 0, 0)
        )
    return found
