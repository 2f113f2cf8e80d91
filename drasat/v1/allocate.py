"""Place pods' `resource.k8s.io/v1` claims with the solver: the one translation the controller
and the what-if share.

`allocate` reads every claim (`requests`), lists each pod's variants (`variants`), and solves in
rounds: round r gives every pod still unplaced its r-th variant (its first choice first) and
solves those pods together in one solver call, over the nodes as the earlier rounds left them.
So a pod's first choices compete for the devices before anyone's second choice, and each round
is one exact solve, not a device-by-device search. The solver's placements become each claim's
`status.allocation` and ledger entries (`results`). This is a purely computational module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drasat.api.nas import AllocatedDevices
from drasat.api.policy import AllocationPolicySpec
from drasat.solver import NodeState, PodRequest, Problem, Solution, SolveParams
from drasat.v1 import devices, results
from drasat.v1.devices import Published
from drasat.v1.requests import Claim, ClaimError, read_claim
from drasat.v1.variants import MAX_VARIANTS, Devices, Option, claim_variants, solver_claims

Obj = dict[str, Any]
Solve = Callable[[Problem, SolveParams], Solution]


@dataclass(frozen=True)
class Node:
    """A node as the allocator sees it: the solver's view and its published devices."""

    state: NodeState
    devices: tuple[Published, ...]


@dataclass(frozen=True)
class PodInput:
    key: str  # namespace/name
    namespace: str
    #: The pod's claims that still need an allocation (ResourceClaim objects).
    claims: tuple[Obj, ...]
    priority: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    #: Nodes the pod may go to (node selector, affinity, taints, resources); None: any.
    candidate_nodes: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ClaimAllocation:
    uid: str
    namespace: str
    name: str
    node: str
    #: `status.allocation`, as kube-scheduler would write it.
    allocation: Obj
    #: The NAS `allocatedClaims` entries it stands for, by key (`<uid>/<request>[#i]`).
    ledger: Mapping[str, AllocatedDevices]


@dataclass
class Outcome:
    #: pod key -> node.
    placed: dict[str, str] = field(default_factory=dict)
    #: claim uid -> its allocation.
    allocations: dict[str, ClaimAllocation] = field(default_factory=dict)
    #: pod key -> why not, in user terms.
    refused: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Every round's solution (status, bound, time).
    solutions: list[Solution] = field(default_factory=list)


def claim_key(claim: Obj) -> str:
    return str((claim.get("metadata") or {}).get("uid", ""))


def allocate(
    nodes: Sequence[Node],
    pods: Sequence[PodInput],
    classes: Mapping[str, Obj],
    *,
    policy: AllocationPolicySpec | None = None,
    params: SolveParams | None = None,
    solve: Solve | None = None,
) -> Outcome:
    """Place the pods' claims; pods that fit nowhere are refused with the solver's reasons."""
    from drasat.solver import solve as default_solve

    run = solve or default_solve
    params = params or SolveParams()
    policy = policy or AllocationPolicySpec()
    outcome = Outcome()
    catalog = Devices({n.state.name: n.devices for n in nodes})
    lookup = {n.state.name: devices.index(n.devices) for n in nodes}
    states = {n.state.name: n.state for n in nodes}
    pending: dict[str, list[list[Option]]] = {}
    by_key = {p.key: p for p in pods}
    read: dict[str, Claim] = {}
    for pod in pods:
        try:
            pending[pod.key] = _pod_variants(pod, classes, catalog, read)
        except ClaimError as error:
            outcome.refused[pod.key] = (str(error),)
            continue
        if not pending[pod.key]:
            outcome.refused[pod.key] = (_no_device(pod, read),)
            del pending[pod.key]
    for round_number in range(MAX_VARIANTS):
        todo = {k: v[round_number] for k, v in pending.items() if round_number < len(v)}
        if not todo:
            break
        solution, variants = _solve_round(todo, by_key, states, policy, params, run)
        outcome.solutions.append(solution)
        for placement in solution.placements:
            options, meaning = variants[placement.pod]
            _record(
                outcome,
                placement.pod,
                placement.node,
                options,
                meaning,
                placement.allocations,
                lookup[placement.node],
            )
            states[placement.node] = _with_ledger(states[placement.node], outcome, placement.pod)
            pending.pop(placement.pod, None)
        for rejection in solution.unplaced:
            outcome.refused[rejection.pod] = rejection.reasons
    for key in outcome.placed:
        outcome.refused.pop(key, None)
    return outcome


def _pod_variants(
    pod: PodInput, classes: Mapping[str, Obj], catalog: Devices, read: dict[str, Claim]
) -> list[list[Option]]:
    per_claim = []
    for obj in pod.claims:
        uid = claim_key(obj)
        if uid not in read:
            read[uid] = read_claim(obj, classes)
        per_claim.append(claim_variants(read[uid], catalog))
        if not per_claim[-1]:
            return []
    combos: list[tuple[int, list[Option]]] = []
    _combine(per_claim, 0, [], 0, combos)
    combos.sort(key=lambda item: item[0])
    return [options for _, options in combos[:MAX_VARIANTS]]


def _combine(
    per_claim: list[list[list[Option]]],
    i: int,
    prefix: list[Option],
    rank: int,
    out: list[tuple[int, list[Option]]],
) -> None:
    if len(out) >= MAX_VARIANTS * 4:
        return
    if i == len(per_claim):
        out.append((rank, prefix))
        return
    for k, options in enumerate(per_claim[i]):
        _combine(per_claim, i + 1, prefix + options, rank + k, out)


def _no_device(pod: PodInput, read: Mapping[str, Claim]) -> str:
    parts = []
    for obj in pod.claims:
        claim = read.get(claim_key(obj))
        if claim is None:
            continue
        for request in claim.requests:
            for alternative in request.alternatives:
                errors = [s.error for s in alternative.selectors if s.error]
                text = f"request {alternative.result_name} (class {alternative.device_class})"
                if errors:
                    text += f": {errors[0]}"
                parts.append(text)
        return f"claim {claim.ref}: no published device matches " + "; ".join(parts)
    return "no published device matches the pod's claims"


def _solve_round(
    todo: Mapping[str, list[Option]],
    by_key: Mapping[str, PodInput],
    states: Mapping[str, NodeState],
    policy: AllocationPolicySpec,
    params: SolveParams,
    run: Solve,
) -> tuple[Solution, dict[str, tuple[list[Option], dict[str, Option]]]]:
    requests = []
    variants = {}
    for key, options in todo.items():
        pod = by_key[key]
        claims, meaning = solver_claims(options)
        candidates = _candidates(pod, options, states)
        requests.append(
            PodRequest(
                key=key,
                namespace=pod.namespace,
                claims=tuple(claims),
                priority=pod.priority,
                cpu_milli=pod.cpu_milli,
                memory_mib=pod.memory_mib,
                candidate_nodes=candidates,
            )
        )
        variants[key] = (options, meaning)
    problem = Problem(nodes=tuple(states.values()), pods=tuple(requests), policy=policy)
    return run(problem, params), variants


def _candidates(
    pod: PodInput, options: Sequence[Option], states: Mapping[str, NodeState]
) -> tuple[str, ...] | None:
    allowed: set[str] | None = set(pod.candidate_nodes) if pod.candidate_nodes is not None else None
    for option in options:
        if option.nodes is not None:
            allowed = set(option.nodes) if allowed is None else allowed & option.nodes
    if allowed is None:
        return None
    return tuple(n for n in states if n in allowed)


def _record(
    outcome: Outcome,
    pod: str,
    node: str,
    options: Sequence[Option],
    meaning: Mapping[str, Option],
    placed: Mapping[str, AllocatedDevices],
    lookup: Mapping[tuple[object, ...], Published],
) -> None:
    outcome.placed[pod] = node
    by_claim: dict[str, list[tuple[Option, str | None]]] = {}
    for option in options:
        if option.kind == devices.FALLBACK:
            by_claim.setdefault(option.claim.uid, []).append((option, None))
    for uid, option in meaning.items():
        by_claim.setdefault(option.claim.uid, []).append((option, uid))
    for claim_uid, entries in by_claim.items():
        if claim_uid in outcome.allocations:
            continue  # a claim shared by pods, written with the first
        claim = entries[0][0].claim
        found: list[Obj] = []
        ledger: dict[str, AllocatedDevices] = {}
        for option, solver_uid in entries:
            if solver_uid is None:
                found.extend(results.device_results(option, None, lookup))
                ledger[f"{claim_uid}/{option.request}"] = results.fallback_entry(option)
                continue
            uid = solver_uid
            entry = placed.get(uid)
            if entry is None:
                continue  # placed for another pod of this claim already
            found.extend(results.device_results(option, entry, lookup))
            # The solver names the entry after its own claim (`<uid>/<request>`); the ledger
            # names the ResourceClaim, as the classic one does.
            ledger[uid] = entry.model_copy(update={"claimInfo": results.claim_info(claim)})
        if not found:
            continue
        config = results.configs(claim.config, _class_configs(entries))
        ledger = results.with_configs(ledger, config)
        outcome.allocations[claim_uid] = ClaimAllocation(
            uid=claim_uid,
            namespace=claim.namespace,
            name=claim.name,
            node=node,
            allocation=results.allocation(node, found, config),
            ledger=ledger,
        )


def _class_configs(
    entries: Sequence[tuple[Option, str | None]],
) -> list[tuple[str, list[str], Obj]]:
    out: list[tuple[str, list[str], Obj]] = []
    seen: dict[str, tuple[list[str], tuple[Obj, ...]]] = {}
    for option, _ in entries:
        alternative = option.alternative
        names, _configs = seen.setdefault(alternative.device_class, ([], alternative.class_config))
        if alternative.result_name not in names:
            names.append(alternative.result_name)
    for class_name, (requests_using, class_config) in seen.items():
        for config in class_config:
            out.append((class_name, requests_using, config))
    return out


def _with_ledger(state: NodeState, outcome: Outcome, pod: str) -> NodeState:
    """The node with the claims just placed there added to its allocatedClaims."""
    entries = dict(state.nas.allocatedClaims)
    for allocation in outcome.allocations.values():
        if allocation.node == state.name:
            entries.update(allocation.ledger)
    nas = state.nas.model_copy(update={"allocatedClaims": entries})
    return dataclasses.replace(state, nas=nas)
