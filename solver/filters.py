"""Exact necessary conditions for a pod to fit on a node, each with the reason when it fails.

A purely computational module. These checks prune nodes before any CP-SAT model is built and name
the blocking constraint in user terms; a node that passes them may still fail in the model (claims
of one pod competing for the same GPUs, topology, budgets), which `explain.py` then asks CP-SAT
about. Every check only looks at one claim against the node's free state, so it is cheap.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from drasat.solver import demand, model
from drasat.solver.demand import Claim, Kind
from drasat.solver.inventory import FULL_COMPUTE, GpuSlot, NodeView
from drasat.solver.problem import PodRequest
from drasat.solver.rules import Rules


@dataclass(frozen=True)
class Blocker:
    """Why one node cannot take a pod.

    `key` groups the same obstacle over nodes; `node_text` is the per-node reason (the
    controller's UnsuitableNodes); `best` is how close this node came (e.g. free GPUs), used to
    write the cluster-wide sentence.
    """

    key: str
    node: str
    node_text: str
    #: The cluster-wide sentence; `{best}` and `{gpus}` take the best and the sum over nodes.
    summary: str
    best: int = 0
    gpus: int = 0


def _selector_text(claim: Claim) -> str:
    if claim.selector is None:
        return "any GPU" if claim.kind is not Kind.mig else claim.describe_mig()
    return f"selector {claim.selector.describe()}"


def claim_blocker(claim: Claim, node: NodeView, rules: Rules) -> Blocker | None:
    """Why the claim alone cannot be satisfied on this node: selector, capacity, then policy."""
    fitting = [g for g in node.gpus if demand.device_fits(claim, g)]
    if not fitting:
        return _note_unhealthy(_no_match(claim, node), node)
    physical = _capacity_blocker(claim, fitting, node.name)
    if physical is not None:
        return _note_unhealthy(physical, node)
    allowed = [g for g in fitting if rules.blocking_rule(claim, g) is None]
    if _capacity_blocker(claim, allowed, node.name) is None:
        return None
    rule = next(r for g in fitting if (r := rules.blocking_rule(claim, g)) is not None)
    text = f"claim {claim.ref}: {rule}"
    return Blocker(f"rule:{rule}:{claim.uid}", node.name, f"{text} (node {node.name})", text)


def _note_unhealthy(blocker: Blocker, node: NodeView) -> Blocker:
    if not node.unhealthy:
        return blocker
    note = f" ({len(node.unhealthy)} unhealthy GPUs not counted)"
    return dataclasses.replace(blocker, node_text=blocker.node_text + note)


def _no_match(claim: Claim, node: NodeView) -> Blocker:
    if claim.kind is Kind.mig:
        text = f"claim {claim.ref}: {claim.describe_mig()}: no MIG-enabled GPU offers it"
    elif claim.selector is None:
        text = f"claim {claim.ref}: no GPU without MIG"
    else:
        text = f"claim {claim.ref}: selector {claim.selector.describe()} matches no GPU"
    if claim.kind is Kind.whole and _matches_mig_gpu(claim, node):
        text += " (MIG-enabled GPUs go whole only to claims that select migEnabled=true)"
    return Blocker(f"nomatch:{claim.uid}", node.name, f"{text} on node {node.name}", text)


def _matches_mig_gpu(claim: Claim, node: NodeView) -> bool:
    return any(
        g.mig_enabled and (claim.selector is None or claim.selector.matches(g.info))
        for g in node.gpus
    )


def _capacity_blocker(claim: Claim, gpus: Sequence[GpuSlot], name: str) -> Blocker | None:
    if claim.kind is Kind.whole:
        free = sum(1 for g in gpus if g.untouched)
        if free >= claim.count:
            return None
        plural = "s" if claim.count > 1 else ""
        return Blocker(
            f"count:{claim.uid}",
            name,
            f"claim {claim.ref}: needs {claim.count} GPU{plural} ({_selector_text(claim)}); "
            f"{free} of {len(gpus)} matching GPUs free on node {name}",
            f"claim {claim.ref} ({_selector_text(claim)}): needs {claim.count} GPU{plural} on "
            "one node; at most {best} free on any matching node",
            best=free,
            gpus=len(gpus),
        )
    if claim.kind is Kind.share:
        if any(model.share_fits(claim, g) for g in gpus):
            return None
        open_gpus = [g for g in gpus if not g.held_whole]
        most = max((FULL_COMPUTE - g.share_compute_used for g in open_gpus), default=0)
        need = f"claim {claim.ref}: share compute {claim.share_compute}% memory "
        need += f"{claim.share_memory_mib}Mi fits on none of the"
        return Blocker(
            f"share:{claim.uid}",
            name,
            f"{need} {len(gpus)} matching GPUs on node {name} (at most {most}% compute free)",
            f"{need} {{gpus}} matching GPUs (at most {{best}}% compute free on one)",
            best=most,
            gpus=len(gpus),
        )
    if any(model.free_options(claim, g) for g in gpus):
        return None
    text = f"claim {claim.ref}: {claim.describe_mig()}: every placement overlaps existing MIG "
    return Blocker(
        f"mig:{claim.uid}",
        name,
        f"{text}devices on the {len(gpus)} matching GPUs of node {name}",
        text + "devices on the {gpus} matching GPUs",
        gpus=len(gpus),
    )


def node_blocker(
    pod: PodRequest, claims: Sequence[Claim], node: NodeView, rules: Rules
) -> Blocker | None:
    """The first necessary condition the node fails for this pod, or None."""
    if not node.ready:
        text = f"node {node.name}: {node.unready_reason or 'NAS NotReady'}"
        return Blocker(f"notready:{node.name}", node.name, text, text)
    if node.cpu_free_milli is not None and pod.cpu_milli > node.cpu_free_milli:
        text = f"node {node.name}: pod needs {pod.cpu_milli}m CPU, {node.cpu_free_milli}m free"
        return Blocker(
            "cpu",
            node.name,
            text,
            f"needs {pod.cpu_milli}m CPU; at most {{best}}m free",
            best=node.cpu_free_milli,
        )
    if node.memory_free_mib is not None and pod.memory_mib > node.memory_free_mib:
        text = (
            f"node {node.name}: pod needs {pod.memory_mib}Mi memory, {node.memory_free_mib}Mi free"
        )
        return Blocker(
            "memory",
            node.name,
            text,
            f"needs {pod.memory_mib}Mi memory; at most {{best}}Mi free",
            best=node.memory_free_mib,
        )
    for claim in claims:
        if claim.optional:
            continue  # an optional claim never keeps a pod off a node
        blocker = claim_blocker(claim, node, rules)
        if blocker is not None:
            return blocker
    return None
