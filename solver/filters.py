"""Exact necessary conditions for a pod to fit on a node, each with the reason when it fails.

A purely computational module. These checks prune nodes before any CP-SAT model is built and name
the blocking constraint in user terms; a node that passes them may still fail in the model (claims
of one pod competing for the same GPUs, topology, budgets), which `explain.py` then asks CP-SAT
about. Every check only looks at one claim against the node's free state, so it is cheap.

The checks return an `Obstacle` (`reasons.py`): the pod's claims and the node are references,
so one obstacle serves every pod of the shape and node in the state; a `Blocker` binds it to
one node and one pod's claims, and renders their names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from drasat.solver import demand, model
from drasat.solver.demand import Claim, Kind
from drasat.solver.inventory import FULL_COMPUTE, GpuSlot, NodeView
from drasat.solver.problem import PodRequest
from drasat.solver.reasons import (
    BEST,
    GPUS,
    NODE,
    UNHEALTHY,
    ClaimRef,
    Names,
    NodeRef,
    Obstacle,
    Part,
    Text,
)
from drasat.solver.reasons import render as _render
from drasat.solver.rules import Rules


@dataclass(frozen=True)
class Blocker:
    """Why one node cannot take one pod: an obstacle bound to the node and the pod's claims.

    `key` groups the same obstacle over nodes; `node_text` is the per-node reason (the
    controller's UnsuitableNodes); `best`/`gpus` (how close this node came, e.g. free GPUs)
    write the cluster-wide sentence (`explain.sentences`).
    """

    obstacle: Obstacle
    names: Names

    @property
    def node(self) -> str:
        return self.names.node

    @property
    def key(self) -> tuple[object, ...]:
        return tuple(self.node if isinstance(part, NodeRef) else part for part in self.obstacle.key)

    @property
    def node_text(self) -> str:
        return _render(self.obstacle.node_text, self.names)

    @property
    def best(self) -> int:
        return self.obstacle.best

    @property
    def gpus(self) -> int:
        return self.obstacle.gpus

    def summary(self, best: int, gpus: int) -> str:
        return _render(self.obstacle.summary, self.names, best, gpus)


def _claim(index: int, *rest: Part) -> Text:
    """ "claim <the pod's claim at index>" followed by the rest."""
    return ("claim ", ClaimRef(index), *rest)


def _selector_text(claim: Claim) -> str:
    if claim.selector is None:
        return "any GPU" if claim.kind is not Kind.mig else claim.describe_mig()
    return f"selector {claim.selector.describe()}"


def claim_blocker(claim: Claim, index: int, node: NodeView, rules: Rules) -> Obstacle | None:
    """Why the claim (the pod's claim at `index`) alone cannot be satisfied on this node:
    selector, capacity, then policy."""
    if claim.kind is Kind.device:
        return _device_blocker(claim, index, node)
    fitting = [g for g in node.gpus if demand.device_fits(claim, g)]
    if not fitting:
        return _note_unhealthy(_no_match(claim, index, node))
    physical = _capacity_blocker(claim, index, fitting)
    if physical is not None:
        return _note_unhealthy(physical)
    allowed = [g for g in fitting if rules.blocking_rule(claim, g) is None]
    if _capacity_blocker(claim, index, allowed) is None:
        return None
    rule = next(r for g in fitting if (r := rules.blocking_rule(claim, g)) is not None)
    text = _claim(index, f": {rule}")
    return Obstacle(("rule", rule, ClaimRef(index)), (*text, " (node ", NODE, ")"), text)


def _device_blocker(claim: Claim, index: int, node: NodeView) -> Obstacle | None:
    """A device claim: enough of its devices free on the node (other drivers' devices)."""
    free = len(demand.device_choices(claim, node.amounts))
    if free >= claim.count:
        return None
    plural = "s" if claim.count > 1 else ""
    return Obstacle(
        ("devices", ClaimRef(index)),
        _claim(
            index,
            f": needs {claim.count} device{plural} of another driver; {free} that its "
            "selectors match free on node ",
            NODE,
        ),
        _claim(
            index,
            f": needs {claim.count} device{plural} of another driver on one node; at most ",
            BEST,
            " that its selectors match free on any node",
        ),
        best=free,
    )


def _note_unhealthy(obstacle: Obstacle) -> Obstacle:
    """The node's note on unhealthy GPUs after the per-node text (rendered for each node)."""
    return dataclasses.replace(obstacle, node_text=(*obstacle.node_text, UNHEALTHY))


def _no_match(claim: Claim, index: int, node: NodeView) -> Obstacle:
    if claim.kind is Kind.mig:
        text = _claim(index, f": {claim.describe_mig()}: no MIG-enabled GPU offers it")
    elif claim.selector is None:
        text = _claim(
            index, ": no matching GPU" if claim.allows_mig_gpu else ": no GPU without MIG"
        )
    else:
        text = _claim(index, f": selector {claim.selector.describe()} matches no GPU")
    if claim.kind is Kind.whole and not claim.allows_mig_gpu and _matches_mig_gpu(claim, node):
        text += (" (MIG-enabled GPUs go whole only to claims that select migEnabled=true)",)
    return Obstacle(("nomatch", ClaimRef(index)), (*text, " on node ", NODE), text)


def _matches_mig_gpu(claim: Claim, node: NodeView) -> bool:
    return any(
        g.mig_enabled and (claim.selector is None or claim.selector.matches(g.info))
        for g in node.gpus
    )


def _capacity_blocker(claim: Claim, index: int, gpus: Sequence[GpuSlot]) -> Obstacle | None:
    if claim.kind is Kind.whole:
        free = sum(1 for g in gpus if g.untouched)
        if free >= claim.count:
            return None
        plural = "s" if claim.count > 1 else ""
        selector = _selector_text(claim)
        return Obstacle(
            ("count", ClaimRef(index)),
            _claim(
                index,
                f": needs {claim.count} GPU{plural} ({selector}); "
                f"{free} of {len(gpus)} matching GPUs free on node ",
                NODE,
            ),
            _claim(
                index,
                f" ({selector}): needs {claim.count} GPU{plural} on one node; at most ",
                BEST,
                " free on any matching node",
            ),
            best=free,
            gpus=len(gpus),
        )
    if claim.kind is Kind.share:
        if any(model.share_fits(claim, g) for g in gpus):
            return None
        roomy = sum(1 for g in gpus if model.share_room(claim, g))
        if roomy:
            text = _claim(index, ": the matching GPUs with room hold shares of other namespaces")
            return Obstacle(
                ("share-namespace", ClaimRef(index)),
                (*text, f" ({roomy} on node ", NODE, ")"),
                (*text, " (", GPUS, " GPUs)"),
                gpus=roomy,
            )
        open_gpus = [g for g in gpus if not g.held_whole]
        # What a share that asks no compute is short of is memory: say which is free.
        if claim.share_compute:
            most = max((FULL_COMPUTE - g.share_compute_used for g in open_gpus), default=0)
            unit = "% compute"
        else:
            most = max((g.memory_mib - g.share_memory_used_mib for g in open_gpus), default=0)
            unit = "Mi memory"
        need = _claim(
            index,
            f": share compute {claim.share_compute}% memory {claim.share_memory_mib}Mi fits on "
            "none of the ",
        )
        return Obstacle(
            ("share", ClaimRef(index)),
            (
                *need,
                f"{len(gpus)} matching GPUs on node ",
                NODE,
                f" (at most {most}{unit} free)",
            ),
            (*need, GPUS, " matching GPUs (at most ", BEST, f"{unit} free on one)"),
            best=most,
            gpus=len(gpus),
        )
    if any(model.free_options(claim, g) for g in gpus):
        return None
    text = _claim(index, f": {claim.describe_mig()}: every placement overlaps existing MIG ")
    return Obstacle(
        ("mig", ClaimRef(index)),
        (*text, f"devices on the {len(gpus)} matching GPUs of node ", NODE),
        (*text, "devices on the ", GPUS, " matching GPUs"),
        gpus=len(gpus),
    )


def node_blocker(
    pod: PodRequest, claims: Sequence[Claim], node: NodeView, rules: Rules
) -> Obstacle | None:
    """The first necessary condition the node fails for this pod, or None."""
    if not node.ready:
        text = ("node ", NODE, f": {node.unready_reason or 'NAS NotReady'}")
        return Obstacle(("notready", NODE), text, text)
    if node.cpu_free_milli is not None and pod.cpu_milli > node.cpu_free_milli:
        return Obstacle(
            ("cpu",),
            ("node ", NODE, f": pod needs {pod.cpu_milli}m CPU, {node.cpu_free_milli}m free"),
            (f"needs {pod.cpu_milli}m CPU; at most ", BEST, "m free"),
            best=node.cpu_free_milli,
        )
    if node.memory_free_mib is not None and pod.memory_mib > node.memory_free_mib:
        return Obstacle(
            ("memory",),
            (
                "node ",
                NODE,
                f": pod needs {pod.memory_mib}Mi memory, {node.memory_free_mib}Mi free",
            ),
            (f"needs {pod.memory_mib}Mi memory; at most ", BEST, "Mi free"),
            best=node.memory_free_mib,
        )
    for index, claim in enumerate(claims):
        if claim.optional:
            continue  # an optional claim never keeps a pod off a node
        obstacle = claim_blocker(claim, index, node, rules)
        if obstacle is not None:
            return obstacle
    return None
