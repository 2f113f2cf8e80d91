"""Preemption for `resource.k8s.io/v1` claims: which running pods a refused pod would evict.

`plan` turns the cluster into the solver's question (`drasat.solver.preemption.choose`): the
running pods of lower priority that hold drasat's devices on the preemptor's candidate nodes are
the candidates; whether the preemptor fits once a set of them is gone is answered by the
allocator itself (`allocate` on that node, with the freed claims' ledger entries and the
victims' CPU and memory taken off), so what preemption frees is exactly what allocation uses —
whole GPUs, MIG placements, share capacity. A claim shared by several pods is freed only when
every pod using it is a victim. Shared by the controller and the what-if; purely computational.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from drasat.api.devicemodel.classes import GPU_CLASS
from drasat.api.nas import AllocatedDevices
from drasat.api.policy import AllocationPolicySpec
from drasat.solver import Problem, Solution, SolveParams
from drasat.solver import preemption as choice
from drasat.v1.allocate import Node, PodInput, allocate

Obj = dict[str, object]
Solve = Callable[[Problem, SolveParams], Solution]

#: Ledger keys of devices held for a preemptor while its victims leave (never a real claim's).
NOMINATED_PREFIX = "nominated:"


@dataclass(frozen=True)
class Running:
    """A pod that runs (or is bound) on a node and holds drasat's claims there."""

    key: str  # namespace/name
    node: str
    priority: int
    #: The uids of its claims allocated on `node` with drasat's devices.
    claims: tuple[str, ...]
    cpu_milli: int = 0
    memory_mib: int = 0
    #: The PodDisruptionBudgets that select it.
    budgets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    preemptor: str
    #: Where the preemptor goes once the victims are gone; None: nowhere (`reason`).
    node: str | None
    victims: tuple[str, ...] = ()
    #: The claims the victims free (uids): their devices are held for the preemptor.
    freed: tuple[str, ...] = ()
    proven: bool = True
    checks: int = 0
    reason: str = ""


def plan(
    preemptor: PodInput,
    nodes: Sequence[Node],
    running: Iterable[Running],
    users: Mapping[str, frozenset[str]],
    classes: Mapping[str, Obj],
    *,
    policy: AllocationPolicySpec | None = None,
    budgets: Mapping[str, int] | None = None,
    params: SolveParams | None = None,
    solve: Solve | None = None,
) -> Plan:
    """The victims that let `preemptor` fit, chosen by the solver, or why there are none.

    `users`: claim uid -> the keys of every pod using it (a claim is freed only when all are
    victims); `budgets`: PodDisruptionBudget name -> the disruptions it allows now."""
    policy = policy or AllocationPolicySpec()
    settings = policy.preemption
    by_node = {n.state.name: n for n in nodes}
    allowed = set(by_node) if preemptor.candidate_nodes is None else set(preemptor.candidate_nodes)
    pods = {
        p.key: p
        for p in running
        if p.priority < preemptor.priority and p.node in allowed and p.node in by_node and p.claims
    }
    candidates = [
        choice.Candidate(
            key=p.key,
            node=p.node,
            priority=p.priority,
            devices=_devices(by_node[p.node], p.claims),
            budgets=p.budgets,
            gpus=_gpus(entries_of(by_node[p.node], p.claims).values()),
        )
        for p in pods.values()
    ]

    def freed(victims: frozenset[str]) -> set[str]:
        return {
            uid
            for key in victims
            for uid in pods[key].claims
            if users.get(uid, frozenset({key})) <= victims
        }

    def fits(node: str, victims: frozenset[str]) -> bool:
        gone = [pods[k] for k in victims]
        state = without(by_node[node], freed(victims), gone)
        alone = dataclasses.replace(preemptor, candidate_nodes=(node,))
        outcome = allocate([state], [alone], classes, policy=policy, params=params, solve=solve)
        return preemptor.key in outcome.placed

    # Pods already leaving (the caller took their claims off) may free enough: no victim then.
    nodes_here = [by_node[n] for n in sorted(allowed & set(by_node))]
    if nodes_here:
        now = allocate(nodes_here, [preemptor], classes, policy=policy, params=params, solve=solve)
        if preemptor.key in now.placed:
            return Plan(preemptor.key, now.placed[preemptor.key],
                        reason="it fits without victims (devices being freed)")  # fmt: skip
    found = choice.choose(
        preemptor.priority,
        candidates,
        fits,
        max_victims=settings.maxVictims,
        budgets=budgets,
        order=settings.minimize,
        whole=_whole(
            preemptor, [by_node[n] for n in sorted({p.node for p in pods.values()})], pods, users
        ),
    )
    if found.node is None:
        return Plan(preemptor.key, None, proven=found.proven, checks=found.checks,
                    reason=found.reason)  # fmt: skip
    return Plan(
        preemptor.key,
        found.node,
        found.victims,
        tuple(sorted(freed(frozenset(found.victims)))),
        found.proven,
        found.checks,
    )


def checked(count: int) -> str:
    """How many victim sets the allocator was asked about, in words."""
    return f"{count} set checked" if count == 1 else f"{count} sets checked"


def without(node: Node, claims: set[str], pods: Sequence[Running] = ()) -> Node:
    """The node with these claims' ledger entries (and status holds) and prepared devices gone,
    and these pods' CPU and memory given back."""
    entries = {
        key: entry
        for key, entry in node.state.nas.allocatedClaims.items()
        if entry.claimInfo.uid not in claims
    }
    # The node plugin's record of a claim it prepared goes when the victim's pod stops.
    prepared = {k: v for k, v in node.state.nas.preparedClaims.items() if k not in claims}
    state = dataclasses.replace(
        node.state,
        nas=node.state.nas.model_copy(
            update={"allocatedClaims": entries, "preparedClaims": prepared}
        ),
        used_cpu_milli=max(node.state.used_cpu_milli - sum(p.cpu_milli for p in pods), 0),
        used_memory_mib=max(node.state.used_memory_mib - sum(p.memory_mib for p in pods), 0),
    )
    return dataclasses.replace(node, state=state)


def entries_of(node: Node, claims: Iterable[str]) -> dict[str, AllocatedDevices]:
    """The ledger entries these claims hold on the node, as `hold` takes them back."""
    wanted = set(claims)
    return {
        key: entry
        for key, entry in node.state.nas.allocatedClaims.items()
        if entry.claimInfo.uid in wanted
    }


def hold(node: Node, held: Mapping[str, AllocatedDevices]) -> Node:
    """The node with devices held for a preemptor (its victims' ledger entries, kept after
    they leave so no other pod takes them): entries of a claim still in the ledger are not
    added twice."""
    present = {e.claimInfo.uid for e in node.state.nas.allocatedClaims.values()}
    extra = {
        NOMINATED_PREFIX + key: entry
        for key, entry in held.items()
        if entry.claimInfo.uid not in present
    }
    if not extra:
        return node
    entries = {**node.state.nas.allocatedClaims, **extra}
    state = dataclasses.replace(
        node.state, nas=node.state.nas.model_copy(update={"allocatedClaims": entries})
    )
    return dataclasses.replace(node, state=state)


def _devices(node: Node, claims: Sequence[str]) -> int:
    """How many devices these claims hold on the node (whole GPUs, shares, MIG devices)."""
    count = 0
    for entry in entries_of(node, claims).values():
        count += len(entry.gpu.devices) if entry.gpu else 0
        count += len(entry.mig.devices) if entry.mig else 0
    return count


def whole_gpus_needed(claims: Sequence[Obj]) -> int:
    """How many whole GPUs the claims need, when that is all they ask: every request `exactly`
    of drasat's GPU class, by count, without capacity (a share). 0 when anything else is asked
    (a share, MIG, firstAvailable, All): then no count of whole GPUs is necessary."""
    need = 0
    for claim in claims:
        spec = claim.get("spec")
        devices = spec.get("devices") if isinstance(spec, dict) else None
        requests = devices.get("requests") if isinstance(devices, dict) else None
        if not isinstance(requests, list) or not requests:
            return 0
        for request in requests:
            exactly = request.get("exactly") if isinstance(request, dict) else None
            if not isinstance(exactly, dict) or exactly.get("deviceClassName") != GPU_CLASS:
                return 0
            if (
                exactly.get("capacity")
                or exactly.get("allocationMode", "ExactCount") != "ExactCount"
            ):
                return 0
            count = exactly.get("count", 1)
            if not isinstance(count, int) or count < 1:
                return 0
            need += count
    return need


def _whole(
    preemptor: PodInput,
    nodes: Sequence[Node],
    pods: Mapping[str, Running],
    users: Mapping[str, frozenset[str]],
) -> choice.WholeGpus | None:
    """What the preemptor needs of whole GPUs, and what each node has free or could free."""
    need = whole_gpus_needed(preemptor.claims)
    if not need:
        return None
    free: dict[str, int] = {}
    freeable: dict[str, frozenset[str]] = {}
    for node in nodes:
        nas = node.state.nas
        gpus = {d.gpu.uuid for d in nas.allocatableDevices if d.gpu is not None}
        holders: dict[str, set[str]] = {}  # GPU -> the claims that hold it
        for entry in nas.allocatedClaims.values():
            for gpu in _gpus([entry]):
                holders.setdefault(gpu, set()).add(entry.claimInfo.uid)
        for uid, prepared in nas.preparedClaims.items():
            found = [d.uuid for d in prepared.gpu.devices] if prepared.gpu else []
            found += [d.parentUUID for d in prepared.mig.devices] if prepared.mig else []
            for gpu in found:
                holders.setdefault(gpu, set()).add(uid)
        free[node.state.name] = len(gpus - set(holders))
        # A GPU can be freed when every pod using every claim on it is a candidate here.
        freeable[node.state.name] = frozenset(
            gpu
            for gpu, claims in holders.items()
            if all(users.get(c, frozenset({"?"})) <= pods.keys() for c in claims)
        )
    return choice.WholeGpus(need, free, freeable)


def _gpus(entries: Iterable[AllocatedDevices]) -> frozenset[str]:
    """The GPUs ledger entries touch (whole, shared, or a MIG device's parent)."""
    out: set[str] = set()
    for entry in entries:
        if entry.gpu is not None:
            out.update(d.uuid for d in entry.gpu.devices)
        if entry.mig is not None:
            out.update(d.parentUUID for d in entry.mig.devices)
    return frozenset(out)
