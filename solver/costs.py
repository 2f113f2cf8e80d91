"""The secondary objective's terms: one function per term, read by both solving paths.

A purely computational module. The CP-SAT model (`model.py`) puts each term on its variables as
a coefficient; the per-node enumeration of `nodes.py` adds the same terms up for the one pod it
places. Every term is linear in the model's variables, so a placement costs the same in both
(`tests/solver/test_solver_costs.py` checks it on random instances).

Per node (`node_use`, once when a new pod lands on it): binpack, its free GPUs; spread, its
used GPUs. Per pod on a node (`pod_on_node`): preferNode; the fragmentation term's share of the
pod's CPU and memory (`pod_workload`). Per GPU (`gpu_open` / `gpu_again`, once whatever new
claims use it): binpack opening an untouched GPU (and, without a target workload, the
fragmentation term's fixed OPEN_WHOLE_GPU); spread touching a used one again. Per MIG window
(`window_costs`, once it is blocked). Per device (`device_terms`): preferProduct,
minimizeMigWaste. Per claim, with a target workload: the growth of the node's fragmented
capacity its GPUs add beside its pod's CPU and memory (`claim_workload`).

The workload part (`workload.growth`, FGD's measure) reads the whole node, so it is split into
parts that add up to the growth of the whole placement exactly: the pod's (its CPU and memory,
no GPU: `pod_workload`) and its claim's given that (`claim_workload`: the growth with the
claim's GPUs and the pod's CPU and memory, less the growth with the CPU and memory alone). A
share or a one-GPU claim takes one device, so the model puts its part on that device's variable.
A claim of k > 1 whole GPUs takes untouched GPUs, and the growth depends only on how many of
each `whole_kind` it takes (which workload classes may use them): the model puts its part on
one variable per such `composition` of k (one kind: on the claim's own variable); the
enumeration prices each composition with the cheapest GPUs of each kind and keeps the best.
The claim's part is priced as if the claim were the only new one on the node (in a batch, every
claim beside only its own pod's CPU and memory).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from drasat.solver import workload
from drasat.solver.demand import Claim, Kind
from drasat.solver.inventory import FULL_COMPUTE, GpuSlot, MigOption, NodeView

if TYPE_CHECKING:
    from drasat.solver.rules import Rules

#: Fragmentation term without a target workload: opening an untouched non-MIG GPU.
OPEN_WHOLE_GPU = 8
#: preferNode / preferProduct: per pod off the preferred nodes, per device off the products.
PREFER = 8


# -- per node and per pod --------------------------------------------------------------------------


def node_use(node: NodeView, rules: Rules) -> int:
    """A node newly used by the new pods (once, however many land there): binpack, its free
    GPUs; spread, its used ones."""
    w = rules.weights
    free = sum(1 for g in node.gpus if g.untouched)
    return w.binpack * free + w.spread * (len(node.gpus) - free)


def pod_on_node(node: NodeView, rules: Rules) -> int:
    """Each new pod on the node: preferNode off the preferred nodes."""
    w = rules.weights
    if w.prefer_node and not rules.prefers_node(node.name):
        return w.prefer_node * PREFER
    return 0


def growth(
    node: NodeView, taken: dict[int, int], cpu_milli: int, memory_mib: int, rules: Rules
) -> int:
    """`workload.growth` of the node when new claims take `taken` (GPU position -> compute %)
    and the pod `cpu_milli`/`memory_mib`, unweighted; 0 without a target workload."""
    if not rules.workload or not (taken or cpu_milli or memory_mib):
        return 0  # nothing taken: no growth
    return workload.growth(rules.workload, node, rules, taken, cpu_milli, memory_mib)


def pod_workload(
    node: NodeView, cpu_milli: int, memory_mib: int, rules: Rules, alone: int | None = None
) -> int:
    """The fragmentation term of a pod's CPU and memory on the node (no GPU taken): capacity
    the target workload's classes can no longer use because the pod fills the node's CPU or
    memory. `alone`: that growth, when the caller has it."""
    if alone is None:
        alone = growth(node, {}, cpu_milli, memory_mib, rules)
    return rules.weights.fragmentation * alone


# -- per GPU and per device -------------------------------------------------------------------


def open_cost(gpu: GpuSlot, rules: Rules) -> int:
    """The fragmentation term's fixed cost of opening an untouched GPU: OPEN_WHOLE_GPU for a
    non-MIG GPU unless a target workload prices what the placement strands instead."""
    return 0 if gpu.mig_enabled or rules.workload else OPEN_WHOLE_GPU


def gpu_open(gpu: GpuSlot, rules: Rules) -> int:
    """An untouched GPU used by new claims (once): binpack, and the fixed `open_cost`."""
    if not gpu.untouched:
        return 0
    w = rules.weights
    return w.binpack + w.fragmentation * open_cost(gpu, rules)


def gpu_again(gpu: GpuSlot, rules: Rules) -> int:
    """A GPU already in use used again by new claims (once): spread."""
    return 0 if gpu.untouched else rules.weights.spread


def mig_waste(claim: Claim, option: MigOption, gpu: GpuSlot) -> int:
    """MIG by needs: slices above the smallest candidate of the product."""
    if claim.profile is not None:
        return 0
    sizes = [o.size + o.compute_slices for o in gpu.mig_options if claim.mig_fits(o)]
    return option.size + option.compute_slices - min(sizes)


def windows(gpu: GpuSlot) -> dict[tuple[int, int], int]:
    """Every distinct MIG window (start, size) of the GPU with its weight: the sizes of the
    (profile, placement) pairs it is, i.e. what blocking it costs the fragmentation term."""
    weight: dict[tuple[int, int], int] = {}
    for option in gpu.mig_options:
        key = (option.start, option.size)
        weight[key] = weight.get(key, 0) + option.size
    return weight


def window_costs(gpu: GpuSlot, rules: Rules) -> dict[tuple[int, int], int]:
    """Each MIG window of the GPU still free, with what blocking it costs (once, however many
    new devices block it). Empty off MIG GPUs or without the fragmentation term."""
    frag = rules.weights.fragmentation
    if not frag or not gpu.mig_enabled:
        return {}
    return {
        (start, size): frag * weight
        for (start, size), weight in sorted(windows(gpu).items())
        if not any(t in gpu.mig_occupied for t in range(start, start + size))
    }


def blocked(gpu: GpuSlot, option: MigOption | None, rules: Rules) -> int:
    """`window_costs` of the windows one new MIG instance blocks, alone on the GPU (or, None,
    taking the MIG GPU whole: every free window)."""
    return sum(
        cost
        for (start, size), cost in window_costs(gpu, rules).items()
        if option is None or (start < option.end and option.start < start + size)
    )


def device_terms(claim: Claim, gpu: GpuSlot, option: MigOption | None, rules: Rules) -> int:
    """Each device variable's own coefficient: preferProduct off the preferred products, and
    minimizeMigWaste for a MIG device."""
    w = rules.weights
    cost = 0
    if w.prefer_product and not rules.prefers_product(gpu):
        cost += w.prefer_product * PREFER
    if option is not None and w.mig_waste:
        cost += w.mig_waste * mig_waste(claim, option, gpu)
    return cost


def device(claim: Claim, gpu: GpuSlot, option: MigOption | None, rules: Rules) -> int:
    """The GPU's own terms for the claim taking this one device, alone on its GPU among the new
    claims: opening or touching the GPU again, the MIG windows it blocks, its device terms.
    Depends on the GPU's state only (the enumeration memoizes it per state)."""
    return (
        gpu_open(gpu, rules)
        + gpu_again(gpu, rules)
        + blocked(gpu, option, rules)
        + device_terms(claim, gpu, option, rules)
    )


def priced(claim: Claim, rules: Rules) -> bool:
    """Whether the claim's GPUs have a workload part (whole and share claims, with a target
    workload and the fragmentation term)."""
    kind = claim.kind
    return bool(rules.weights.fragmentation and rules.workload and kind in (Kind.whole, Kind.share))


def claim_workload(
    claim: Claim,
    node: NodeView,
    positions: Iterable[int],
    cpu_milli: int,
    memory_mib: int,
    rules: Rules,
    alone: int | None = None,
) -> int:
    """The fragmentation term of a whole or share claim taking the GPUs at `positions` of the
    node, beside its pod's CPU and memory: `placement_workload` less `pod_workload` (the
    growth with both, less the growth with the CPU and memory alone: `alone`, when the caller
    has it). 0 for MIG claims; MIG GPUs add nothing (the term's MIG part is `window_costs`)."""
    if not priced(claim, rules):
        return 0
    if alone is None:
        alone = growth(node, {}, cpu_milli, memory_mib, rules)
    whole = placement_workload(claim, node, positions, cpu_milli, memory_mib, rules, alone)
    return whole - pod_workload(node, cpu_milli, memory_mib, rules, alone)


def placement_workload(
    claim: Claim,
    node: NodeView,
    positions: Iterable[int],
    cpu_milli: int,
    memory_mib: int,
    rules: Rules,
    alone: int | None = None,
) -> int:
    """`pod_workload` plus `claim_workload`, the whole placement's fragmentation term: the
    node's growth with the pod's CPU and memory and the claim's GPUs at `positions` together.
    The enumeration adds this one number where the model adds the two parts."""
    taken: dict[int, int] = {}
    if priced(claim, rules):
        need = FULL_COMPUTE if claim.kind is Kind.whole else claim.share_compute
        taken = {p: need for p in positions if not node.gpus[p].mig_enabled}
    if not taken:
        return pod_workload(node, cpu_milli, memory_mib, rules, alone)
    return rules.weights.fragmentation * growth(node, taken, cpu_milli, memory_mib, rules)


def per_device(claim: Claim) -> bool:
    """Whether the claim's workload part sits on its device variables (one device per node:
    a share or one whole GPU), else on its compositions (`compositions`)."""
    return claim.kind is not Kind.whole or claim.count == 1


def whole_kind(gpu: GpuSlot, rules: Rules) -> tuple[object, ...]:
    """What the workload part reads of an untouched GPU a whole claim takes: nothing of a MIG
    GPU (outside the measure), else which of the workload's classes may use it."""
    if gpu.mig_enabled or not rules.workload:
        return ()
    return workload.eligible_row(rules.workload, gpu, rules)


def compositions(need: int, available: Sequence[int]) -> list[tuple[int, ...]]:
    """Every way to take `need` GPUs from kinds with `available` GPUs each: how many of each."""
    if not available:
        return [()] if need == 0 else []
    out: list[tuple[int, ...]] = []
    rest = sum(available[1:])
    for first in range(max(0, need - rest), min(need, available[0]) + 1):
        out.extend((first, *tail) for tail in compositions(need - first, available[1:]))
    return out
