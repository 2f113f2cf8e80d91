"""The secondary objective's terms: one function per term, read by both solving paths.

A purely computational module. The CP-SAT model (`model.py`) puts each term on its variables as
a coefficient; the per-node enumeration of `nodes.py` adds the same terms up for the one pod it
places. Every term is linear in the model's variables, so a placement costs the same in both.

Per node (`node_use`, once when a new pod lands on it): binpack, its free GPUs; spread, its
used GPUs. Per pod on a node (`pod_on_node`): preferNode; the fragmentation term's share of the
pod's CPU and memory (`pod_workload`). Per GPU (`gpu_open` / `gpu_again`, once whatever new
claims use it): binpack opening an untouched GPU (and, without a target workload, the
fragmentation term's fixed OPEN_WHOLE_GPU); spread touching a used one again. Per MIG window
(`window_costs`, once it is blocked). Per device (`device_terms`): preferProduct,
minimizeMigWaste; with a target workload, the growth of the node's fragmented capacity the
device adds beside its pod's CPU and memory (`device_workload`).

The workload part (`workload.growth`, FGD's measure) is not linear in what a placement takes: it
is split into the pod's part (its CPU and memory, no GPU: `pod_workload`) and each device's
part given that (`device_workload` = growth with the device and the pod's CPU and memory, minus
growth with the CPU and memory alone). For a pod taking one device (a share, one whole GPU, a
MIG device) the parts add up to the growth of the whole placement exactly; for a pod taking
k > 1 whole GPUs they add up each GPU's growth as if it were the pod's only one (so a claim
that leaves a class of n-GPU pods without room on the node is charged that once per GPU).
"""

from __future__ import annotations

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


def pod_workload(node: NodeView, cpu_milli: int, memory_mib: int, rules: Rules) -> int:
    """The fragmentation term of a pod's CPU and memory on the node (no GPU taken): capacity
    the target workload's classes can no longer use because the pod fills the node's CPU or
    memory."""
    frag = rules.weights.fragmentation
    if not frag or not rules.workload or not (cpu_milli or memory_mib):
        return 0  # nothing taken: no growth
    return frag * workload.growth(rules.workload, node, rules, {}, cpu_milli, memory_mib)


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


def device_workload(
    claim: Claim, node: NodeView, gpu: GpuSlot, cpu_milli: int, memory_mib: int, rules: Rules
) -> int:
    """The fragmentation term of a whole or share device beside its pod's CPU and memory: the
    node's growth with both, less `pod_workload`'s growth with the CPU and memory alone. 0 for
    MIG devices and MIG GPUs (the term's MIG part is `window_costs`)."""
    frag = rules.weights.fragmentation
    if not frag or not rules.workload or gpu.mig_enabled or claim.kind is Kind.mig:
        return 0
    need = FULL_COMPUTE if claim.kind is Kind.whole else claim.share_compute
    grown = workload.growth(
        rules.workload, node, rules, {gpu.position: need}, cpu_milli, memory_mib
    )
    if cpu_milli or memory_mib:
        grown -= workload.growth(rules.workload, node, rules, {}, cpu_milli, memory_mib)
    return frag * grown
