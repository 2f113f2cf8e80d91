"""Place pods' `resource.k8s.io/v1` claims with the solver: the one translation the controller
and the what-if share.

`allocate` reads every claim (`requests`), lists each pod's variants (`variants`), and solves in
rounds: round r gives every pod still unplaced its r-th variant (its first choice first) and
solves those pods together in one solver call, over the nodes as the earlier rounds left them.
So a pod's first choices compete for the devices before anyone's second choice, and each round
is one exact solve, not a device-by-device search. The solver's placements become each claim's
`status.allocation` and ledger entries (`results`).

One pod never stops the others: an unexpected error reading a pod's claims or writing its
allocation refuses that pod; a solver call that raises is split in halves, solved apart, down to
the pods that make it raise, which are refused (`Outcome.failed`). This is a purely
computational module.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drasat.api.inputerrors import one_line
from drasat.api.nas import AllocatedDevices
from drasat.api.policy import AllocationPolicySpec
from drasat.solver import (
    Gang,
    NodeState,
    PodPlacement,
    PodRequest,
    Problem,
    Solution,
    SolveParams,
)
from drasat.v1 import cel, nasinventory, otherdevices, publisheddevices, results
from drasat.v1.publisheddevices import Published
from drasat.v1.requests import ALL, Alternative, Claim, ClaimError, read_claim
from drasat.v1.variants import (
    MAX_VARIANTS,
    Devices,
    Option,
    all_entry_errors,
    choices,
    claim_variants,
    solver_claims,
)

Obj = dict[str, Any]
Solve = Callable[[Problem, SolveParams], Solution]


@dataclass(frozen=True)
class Node:
    """A node as the allocator sees it: the solver's view and its published devices."""

    state: NodeState
    devices: tuple[Published, ...]

    def __post_init__(self) -> None:
        # A node read from a NodeAllocationState (the what-if's compact cluster) has no
        # published devices in its model: they are the ones given here, so the solver's answer
        # names them as it names a node's read from slices (`results` writes from them).
        if publisheddevices.unidentified(self.state.devices):
            devices = publisheddevices.identified(self.state.devices, self.devices)
            object.__setattr__(self, "state", dataclasses.replace(self.state, devices=devices))


def with_other_devices(
    node: Node, found: otherdevices.NodeOthers | None, used: Mapping[str, int] | None = None
) -> Node:
    """The node with other drivers' devices beside its GPUs (`otherdevices`): their published
    devices, and what is left of their amounts once `used` (what allocated claims hold,
    `otherdevices.held`) is taken out. A node that is not ready offers none."""
    if found is None or not found.devices or not node.state.ready:
        return node
    state = dataclasses.replace(node.state, amounts=otherdevices.left(found, used or {}))
    return Node(state, (*node.devices, *found.devices))


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
    #: Other drivers' devices it took (no ledger entry: their ledger is the claim's status):
    #: what they draw on the node's amounts, and the solver claims that took them.
    drawn: tuple[tuple[str, int], ...] = ()
    device_claims: frozenset[str] = frozenset()


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
    #: pod key -> the error that refused it (also in `refused`): drasat's fault, not the
    #: pod's request; the caller reports it as such.
    failed: dict[str, str] = field(default_factory=dict)
    #: Pods whose later choices of devices were not tried: `params.deadline` passed first.
    untried: int = 0

    def fail(self, pod: str, doing: str, error: Exception) -> None:
        text = one_line(f"internal error {doing}: {type(error).__name__}: {error}")
        self.failed[pod] = text
        self.refused[pod] = (text,)


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
    gangs: Sequence[Gang] = (),
) -> Outcome:
    """Place the pods' claims; pods that fit nowhere are refused with the solver's reasons.

    `gangs`: pods placed all-or-nothing (`drasat.solver.gangs`); a round's solve holds the gangs
    with a pod in it, so a gang whose pods are not all in a round is placed in none of it.

    One pod never stops the others: an error while reading its claims, in a solver call that
    holds it, or while writing its allocation refuses that pod (`Outcome.failed` says which)
    and the rest are placed as if it were not there."""
    from drasat.solver import solve as default_solve

    run = _Round(
        states={n.state.name: n.state for n in nodes},
        published={n.state.name: n.devices for n in nodes},
        by_key={p.key: p for p in pods},
        policy=policy or AllocationPolicySpec(),
        params=params or SolveParams(),
        solve=solve or default_solve,
        gangs=tuple(gangs),
    )
    catalog = Devices({n.state.name: n.devices for n in nodes})
    pending = _read_pods(pods, classes, catalog, run.outcome)
    for round_number in range(MAX_VARIANTS):
        todo = {k: v[round_number] for k, v in pending.items() if round_number < len(v)}
        if not todo:
            break
        deadline = run.params.deadline
        if round_number and deadline is not None and time.monotonic() >= deadline:
            # The caller's time is up: the pods left keep the reasons their last round gave.
            run.outcome.untried = len(todo)
            for key in todo:
                run.outcome.refused[key] = (
                    *run.outcome.refused.get(key, ()),
                    f"its choices of devices after the {_ordinal(round_number)} were not tried "
                    "(the time limit ran out)",
                )
            break
        run.place(todo)
        for key in run.outcome.placed:
            pending.pop(key, None)
        for key in run.outcome.failed:
            pending.pop(key, None)
    outcome = run.outcome
    for key in outcome.placed:
        outcome.refused.pop(key, None)
    return outcome


def pod_variants(
    pod: PodInput, nodes: Sequence[Node], classes: Mapping[str, Obj]
) -> list[list[Option]]:
    """The ways the pod's claims can be met on these nodes, best first, as `allocate` tries
    them (its claims read as it reads them: a claim it cannot read raises)."""
    catalog = Devices({n.state.name: n.devices for n in nodes})
    return _pod_variants(pod, classes, catalog, {}, {})


def _ordinal(n: int) -> str:
    return {1: "first", 2: "second", 3: "third"}.get(n, f"{n}th")


def _read_pods(
    pods: Sequence[PodInput], classes: Mapping[str, Obj], catalog: Devices, outcome: Outcome
) -> dict[str, list[list[Option]]]:
    """Each pod's variants, best first; pods that cannot be placed as written are refused."""
    pending: dict[str, list[list[Option]]] = {}
    read: dict[str, Claim] = {}
    shapes: dict[str, list[list[Option]]] = {}
    for pod in pods:
        try:
            pending[pod.key] = _pod_variants(pod, classes, catalog, read, shapes)
        except (ClaimError, _NoDevice) as error:
            outcome.refused[pod.key] = (str(error),)
        except Exception as error:  # one pod's bad input never stops the others
            outcome.fail(pod.key, "reading its claims", error)
    return pending


#: Said when a request's class matches no device of the cluster at all: which drivers the
#: cluster's devices are of (a claim of another driver's class cannot be placed there).
PUBLISHES = "the cluster publishes devices of {drivers} only"


class _NoDevice(Exception):
    """No published device matches some request of the claim."""

    def __init__(self, claim: Claim, catalog: Devices) -> None:
        super().__init__(f"claim {claim.ref}: {_no_device(claim, catalog)}")


@dataclass
class _Round:
    """The nodes as the placements so far left them, and the outcome being written."""

    states: dict[str, NodeState]
    #: Node -> its published devices (the CPU fallback and other drivers' devices are written
    #: from them; GPUs and MIG devices from the solver's answer).
    published: Mapping[str, tuple[Published, ...]]
    by_key: Mapping[str, PodInput]
    policy: AllocationPolicySpec
    params: SolveParams
    solve: Solve
    gangs: tuple[Gang, ...] = ()
    outcome: Outcome = field(default_factory=lambda: Outcome())

    def place(self, todo: Mapping[str, list[Option]]) -> None:
        """Solve these pods together; when the solver raises, solve each half apart, down to
        the pods that make it raise, which are refused."""
        groups = [list(todo)]
        while groups:
            keys = groups.pop(0)
            try:
                solution, variants = _solve_round(
                    {k: todo[k] for k in keys},
                    self.by_key,
                    self.states,
                    self.policy,
                    self.params,
                    self.solve,
                    tuple(g for g in self.gangs if any(p in keys for p in g.pods)),
                )
            except Exception as error:
                if len(keys) == 1:
                    self.outcome.fail(keys[0], "solving", error)
                else:
                    half = len(keys) // 2
                    groups[:0] = [keys[:half], keys[half:]]
                continue
            self.record(solution, variants)

    def record(
        self, solution: Solution, variants: Mapping[str, tuple[list[Option], dict[str, Option]]]
    ) -> None:
        outcome = self.outcome
        outcome.solutions.append(solution)
        touched: dict[str, None] = {}
        for placement in solution.placements:
            options, meaning = variants[placement.pod]
            try:
                _record(
                    outcome,
                    placement.pod,
                    placement.node,
                    options,
                    meaning,
                    placement,
                    self.published[placement.node],
                )
            except Exception as error:
                outcome.placed.pop(placement.pod, None)
                outcome.fail(placement.pod, "writing its allocation", error)
                continue
            touched[placement.node] = None
        # Each node once, with every allocation on it (one pass over them, not one per pod).
        here: dict[str, list[ClaimAllocation]] = {node: [] for node in touched}
        for allocation in outcome.allocations.values():
            if allocation.node in here:
                here[allocation.node].append(allocation)
        for node, allocations in here.items():
            self.states[node] = with_allocations(self.states[node], allocations)
        for rejection in solution.unplaced:
            outcome.refused[rejection.pod] = rejection.reasons


def _pod_variants(
    pod: PodInput,
    classes: Mapping[str, Obj],
    catalog: Devices,
    read: dict[str, Claim],
    shapes: dict[str, list[list[Option]]],
) -> list[list[Option]]:
    per_claim = []
    for obj in pod.claims:
        uid = claim_key(obj)
        if uid not in read:
            read[uid] = read_claim(obj, classes)
        per_claim.append(_claim_options(read[uid], obj, catalog, shapes))
    combos: list[tuple[int, list[Option]]] = []
    _combine(per_claim, 0, [], 0, combos)
    combos.sort(key=lambda item: item[0])
    return [options for _, options in combos[:MAX_VARIANTS]]


def _claim_options(
    claim: Claim, obj: Obj, catalog: Devices, shapes: dict[str, list[list[Option]]]
) -> list[list[Option]]:
    """The claim's preparable variants. Claims of one spec (the claims of one template) have
    the same variants but for the claim they name: worked out once per spec and rebound, so
    a thousand pods of a template cost one search of the devices, not a thousand. A claim
    without any is worked out again (its error names it)."""
    shape = json.dumps(obj.get("spec"), sort_keys=True, default=str)
    found = shapes.get(shape)
    if found is None:
        variants = claim_variants(claim, catalog)
        if not variants:
            raise _NoDevice(claim, catalog)
        found = results.preparable(claim, variants)
        shapes[shape] = found
    if found and found[0] and found[0][0].claim is not claim:
        found = [[dataclasses.replace(o, claim=claim) for o in options] for options in found]
    return found


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


#: An `All` entry a claim constraint refuses (`variants.all_entry_errors`).
ERRS = "allocationMode All: a claim constraint refuses one of its devices"
ERRS_WHY = (
    "which fails the claim there, as in kube-scheduler's allocator (no later firstAvailable "
    "entry is tried)"
)


def _no_device(claim: Claim, catalog: Devices) -> str:
    """Why the claim has no way to be met: per request with a cause (every request when none
    has), the first cause that left it without devices (the class, a selector that matched none
    of what the ones before it admitted or failed on a device, the count or capacity asked);
    with constraints, that their attributes are needed too."""
    parts, caused = [], []
    for request in claim.requests:
        for alternative in request.alternatives:
            text = f"request {alternative.result_name} (class {alternative.device_class})"
            cause = first_cause(alternative, catalog)
            if not cause and (nodes := all_entry_errors(claim, request.name, alternative, catalog)):
                more = " and more" if len(nodes) > 3 else ""
                cause = f"{ERRS} on {', '.join(nodes[:3])}{more}, {ERRS_WHY}"
            parts.append(f"{text}: {cause}" if cause else text)
            if cause:
                caused.append(parts[-1])
    # A request some device meets is no cause: naming it sends the user after the wrong one.
    text = "no published device matches " + "; ".join(caused or parts)
    if any(ERRS in part for part in caused):
        return text
    if any(a.mode == ALL for r in claim.requests for a in r.alternatives):
        text += (
            " (allocationMode All: on no node can all the matching devices be taken together;"
            " drasat's node plugin prepares whole GPUs or shares of one size in a claim, not both)"
        )
    if claim.constraints:
        text += " with the attributes of " + ", ".join(c.label for c in claim.constraints)
    return text


def first_cause(alternative: Alternative, catalog: Devices) -> str:
    """What excluded the last candidate devices of one way to meet a request, in the order
    kube-scheduler's allocator checks them: the class's selectors, then the request's one by
    one, then the count and capacity asked; "" when each step left some device (the claim's
    constraints, or the combination, are then the cause)."""
    drivers = sorted({d.driver for found in catalog.by_node.values() for d in found})
    admitted: list[Published] = []
    for end in range(alternative.class_selectors, len(alternative.selectors) + 1):
        step = dataclasses.replace(alternative, selectors=alternative.selectors[:end])
        found = catalog.matching(step)
        failure = _failure(step, admitted if end > alternative.class_selectors else None, catalog)
        if failure:
            return failure
        if found:
            admitted = found
            continue
        if end == alternative.class_selectors:
            cause = f"no device of the cluster is of class {alternative.device_class}"
            return f"{cause}; {PUBLISHES.format(drivers=', '.join(drivers))}" if drivers else cause
        index = end - 1 - alternative.class_selectors
        selector = alternative.selectors[end - 1]
        return (
            f"selectors[{index}] {selector.expression!r} matches none of the {len(admitted)} "
            f"device(s) of the class"
        )
    if alternative.capacity:
        asked = ", ".join(f"{name} {value}" for name, value in alternative.capacity)
        return (
            f"{len(admitted)} device(s) match its selectors; none offers the capacity asked "
            f"({asked})"
        )
    chosen = {id(d) for d in admitted}
    most = max(
        (sum(1 for d in found if id(d) in chosen) for found in catalog.by_node.values()),
        default=0,
    )
    if alternative.mode != ALL and alternative.count > most:
        return (
            f"it asks for {alternative.count} devices; at most {most} of the devices matching "
            "its selectors are on one node"
        )
    return ""


def _failure(step: Alternative, admitted: list[Published] | None, catalog: Devices) -> str:
    """The error of the step's last selector on the first device it fails on (of those the
    selectors before it admitted; None: the class's selectors, over every device)."""
    if not step.selectors or not catalog.failing(step):
        return ""
    last = step.selectors[-1]
    devices = (
        admitted
        if admitted is not None
        else [d for found in catalog.by_node.values() for d in found]
    )
    for device in devices:
        result = cel.evaluate_all(step.selectors, device.driver, device.device)
        if isinstance(result, cel.Failure):
            return f"{last.expression!r} failed on device {device.name}: {result.message}"
    return ""


def _solve_round(
    todo: Mapping[str, list[Option]],
    by_key: Mapping[str, PodInput],
    states: Mapping[str, NodeState],
    policy: AllocationPolicySpec,
    params: SolveParams,
    run: Solve,
    gangs: tuple[Gang, ...] = (),
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
    problem = Problem(
        nodes=tuple(states.values()), pods=tuple(requests), policy=policy, gangs=gangs
    )
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
    placement: PodPlacement,
    published: Sequence[Published],
) -> None:
    outcome.placed[pod] = node
    placed = placement.allocations
    by_claim: dict[str, list[tuple[Option, str | None]]] = {}
    for option in options:
        if option.kind == publisheddevices.FALLBACK:
            by_claim.setdefault(option.claim.uid, []).append((option, None))
    for uid, option in meaning.items():
        by_claim.setdefault(option.claim.uid, []).append((option, uid))
    for claim_uid, entries in by_claim.items():
        if claim_uid in outcome.allocations:
            continue  # a claim shared by pods, written with the first
        claim = entries[0][0].claim
        found: list[Obj] = []
        ledger: dict[str, AllocatedDevices] = {}
        result_names: dict[str, str] = {}
        drawn: list[tuple[str, int]] = []
        device_claims: set[str] = set()
        for option, solver_uid in entries:
            if solver_uid is not None and solver_uid in placement.devices:
                keys = placement.devices[solver_uid]
                found.extend(results.other_results(option, keys, published))
                draws = dict(choices(option))
                drawn.extend(d for key in keys for d in draws[key])
                device_claims.add(solver_uid)
                continue
            if solver_uid is None:
                found.extend(results.fallback_results(option, published))
                key = f"{claim_uid}/{option.request}"
                ledger[key] = results.fallback_entry(option)
                result_names[key] = option.alternative.result_name
                continue
            uid = solver_uid
            entry = placed.get(uid)
            if entry is None:
                continue  # placed for another pod of this claim already
            found.extend(results.device_results(option, entry))
            # The solver names the entry after its own claim (`<uid>/<request>`); the ledger
            # names the ResourceClaim, as the classic one does.
            named = dataclasses.replace(
                entry, namespace=claim.namespace, name=claim.name, uid=claim.uid
            )
            ledger[uid] = nasinventory.entry_of(named)
            result_names[uid] = option.alternative.result_name
        if not found:
            continue
        config = results.configs(claim.config, results.class_configs([o for o, _ in entries]))
        ledger = results.with_configs(ledger, config, result_names)
        outcome.allocations[claim_uid] = ClaimAllocation(
            uid=claim_uid,
            namespace=claim.namespace,
            name=claim.name,
            node=node,
            allocation=results.allocation(node, found, config),
            ledger=ledger,
            drawn=tuple(drawn),
            device_claims=frozenset(device_claims),
        )


def with_allocations(state: NodeState, allocations: Iterable[ClaimAllocation]) -> NodeState:
    """The node with these claims placed on it: their entries added to its allocatedClaims, and
    what their other drivers' devices draw taken from its amounts (once per claim: a claim
    already taken there, shared by several pods, draws nothing again)."""
    entries: dict[str, AllocatedDevices] = {}
    amounts = dict(state.amounts)
    device_claims = set(state.device_claims)
    for allocation in allocations:
        entries.update(allocation.ledger)
        if not allocation.device_claims <= device_claims:
            for name, much in allocation.drawn:
                amounts[name] -= much
            device_claims |= allocation.device_claims
    return dataclasses.replace(
        state,
        ledger=state.ledger.with_allocated(nasinventory.allocations_of(entries)),
        amounts=tuple(amounts.items()),
        device_claims=frozenset(device_claims),
    )
