"""Preemption for `resource.k8s.io/v1` claims: the one planner the controller and the what-if
both run, over the cluster as the cycle's placements left it.

`plan_all` takes the refused pods that may preempt (`Wanting`: a pod, or a gang's pods as one),
highest priority first, and gives each a `Plan`: the victims, where its pods go, and the
allocation its fit check found (`Plan.held`: its devices, the victims' and the free ones it
counted on). Each plan's allocation is held against every later plan (`Hold`, held against
lower and equal priorities, as kube-scheduler holds a nominated pod's request), its victims
leave (their devices not held are free to later plans, at no cost), and the budgets they spend
are spent: two preemptors never count one device, one victim or one disruption twice.

One plan for one pod (`plan`) turns the cluster into the solver's question
(`drasat.solver.preemption.choose`): the running pods of lower priority that hold drasat's
devices on the preemptor's candidate nodes are the candidates, a running gang one unit (all its
running pods or none); whether the preemptor fits once a set of them is gone is answered by the
allocator itself (`allocate` on that node, with the freed claims' ledger entries and the
victims' CPU and memory taken off), so what preemption frees is exactly what allocation uses —
whole GPUs, MIG placements, share capacity. A claim is freed only when every pod using it is a
victim and it does not outlive its pods (`lasting`: a standalone claim nobody deallocates). The
solver's search knows each node's devices (`devices`), so it proposes only sets that free a
place for them. A gang preempts as one: its pods are planned one after the other, each over the
nodes the ones before it left, and the gang gets one plan, or none and no victim.

Purely computational.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from drasat.api.nas import AllocatedDevices
from drasat.api.policy import AllocationPolicySpec
from drasat.solver import Gang, Problem, Solution, SolveParams
from drasat.solver import preemption as choice
from drasat.solver.inventory import share_memory_mib
from drasat.solver.ledger import Allocation
from drasat.v1 import nasinventory, publisheddevices
from drasat.v1.allocate import (
    Node,
    Outcome,
    PodInput,
    allocate,
    pod_variants,
    with_allocations,
)

Obj = dict[str, object]
Solve = Callable[[Problem, SolveParams], Solution]
MiB = 2**20

#: Ledger keys of devices held for a preemptor while its victims leave (never a real claim's).
NOMINATED_PREFIX = "nominated:"
#: What a claim's other drivers' devices (a NIC) draw on its node's amounts
#: (`drasat.v1.otherdevices`): ((amount, how much), ...). They have no ledger entry.
Draws = tuple[tuple[str, int], ...]


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
    #: Its gang (namespace/name). None: no gang.
    unit: str | None = None
    #: Its gang's minimum member count: the members running above it go one by one as any
    #: pod; the whole gang goes (at its lowest member's priority) only when fewer would be
    #: left. 0: the whole gang or none of it (a minimum not known).
    minimum: int = 0


@dataclass(frozen=True)
class Wanting:
    """A preemptor: one pod, or the pods of a gang, planned as one."""

    pods: tuple[PodInput, ...]
    gang: Gang | None = None

    @classmethod
    def of(cls, pod: PodInput) -> Wanting:
        return cls((pod,))

    @property
    def key(self) -> str:
        return self.gang.name if self.gang is not None else self.pods[0].key

    @property
    def priority(self) -> int:
        """A gang's is its lowest pod's: it preempts only pods below every one of its pods."""
        return min(p.priority for p in self.pods)


@dataclass(frozen=True)
class Plan:
    #: The preemptor's key (a pod's, or a gang's).
    preemptor: str
    #: Where the preemptor goes once the victims are gone (a gang: its first pod's node);
    #: None: nowhere (`reason`).
    node: str | None
    victims: tuple[str, ...] = ()
    #: The claims the victims free (uids): no other plan counts them free.
    freed: tuple[str, ...] = ()
    proven: bool = True
    checks: int = 0
    reason: str = ""
    priority: int = 0
    #: pod key -> its node (one for a pod, each of a gang's).
    pods: Mapping[str, str] = field(default_factory=dict)
    #: node -> the ledger entries of the allocation the fit check found: what is held for it.
    held: Mapping[str, Mapping[str, AllocatedDevices]] = field(default_factory=dict)
    #: node -> claim uid -> what that allocation's other drivers' devices draw: held too.
    drawn: Mapping[str, Mapping[str, Draws]] = field(default_factory=dict)

    @property
    def waits(self) -> bool:
        """It fits once pods already leaving are gone: nobody is evicted, it waits for them."""
        return self.node is not None and not self.victims


@dataclass(frozen=True)
class Hold:
    """Devices held for a preemptor: against pods of its priority or lower, not its own."""

    preemptor: str
    pods: frozenset[str]
    priority: int
    held: Mapping[str, Mapping[str, AllocatedDevices]]
    #: node -> claim uid -> other drivers' devices held (what they draw on the amounts).
    drawn: Mapping[str, Mapping[str, Draws]] = field(default_factory=dict)

    @classmethod
    def of(cls, plan: Plan) -> Hold:
        return cls(plan.preemptor, frozenset(plan.pods), plan.priority, plan.held, plan.drawn)


@dataclass(frozen=True)
class Planned:
    plans: tuple[Plan, ...] = ()
    #: Every hold after the plans: those given, then each plan's.
    holds: tuple[Hold, ...] = ()


def plan_all(
    wanting: Sequence[Wanting],
    nodes: Sequence[Node],
    running: Iterable[Running],
    users: Mapping[str, frozenset[str]],
    classes: Mapping[str, Obj],
    *,
    policy: AllocationPolicySpec | None = None,
    budgets: Mapping[str, int] | None = None,
    holds: Sequence[Hold] = (),
    lasting: frozenset[str] = frozenset(),
    drawn: Mapping[str, Draws] | None = None,
    params: SolveParams | None = None,
    solve: Solve | None = None,
) -> Planned:
    """Each preemptor's plan, highest priority first (then as given), every plan made over what
    the ones before it hold, evict and spend. `nodes`: the cluster as the cycle left it (the
    claims of pods already leaving taken off: they are free, unless held); `holds`: the devices
    already held for nominated preemptors; `lasting`: claims that stay allocated when their
    pods leave; `drawn`: claim uid -> what its other drivers' devices draw (a victim's NIC is
    freed with its claim). Past `params.deadline` (the what-if's; the controller sets none) no
    more plans are made."""
    policy = policy or AllocationPolicySpec()
    if not policy.preemption.enabled:
        return Planned((), tuple(holds))
    state = _State(
        {n.state.name: n for n in nodes},
        [r for r in running],
        dict(budgets or {}),
        list(holds),
        dict(drawn or {}),
    )
    out = []
    ordered = sorted(enumerate(wanting), key=lambda item: (-item[1].priority, item[0]))
    for _, want in ordered:
        if (
            params is not None
            and params.deadline is not None
            and time.monotonic() >= params.deadline
        ):
            break  # the what-if's time limit holds for the whole run: the rest are not planned
        found = _plan_unit(want, state, users, classes, policy, lasting, params, solve)
        out.append(found)
        if found.node is not None:
            state.commit(found)
    return Planned(tuple(out), tuple(state.holds))


@dataclass
class _State:
    """The cluster as the plans so far leave it."""

    nodes: dict[str, Node]
    running: list[Running]
    budgets: dict[str, int]
    holds: list[Hold]
    drawn: dict[str, Draws] = field(default_factory=dict)

    def commit(self, found: Plan) -> None:
        gone = set(found.victims)
        freed = set(found.freed)
        by_node: dict[str, list[Running]] = {}
        for r in self.running:
            if r.key in gone:
                by_node.setdefault(r.node, []).append(r)
                for name in r.budgets:
                    if name in self.budgets:
                        self.budgets[name] -= 1
        for name, pods in by_node.items():
            self.nodes[name] = without(self.nodes[name], freed, pods, self.drawn)
        self.running = [r for r in self.running if r.key not in gone]
        self.holds.append(Hold.of(found))


def _plan_unit(
    want: Wanting,
    state: _State,
    users: Mapping[str, frozenset[str]],
    classes: Mapping[str, Obj],
    policy: AllocationPolicySpec,
    lasting: frozenset[str],
    params: SolveParams | None,
    solve: Solve | None,
) -> Plan:
    """One preemptor's plan over the state (not changed): a pod's, or a gang's pod by pod."""
    if want.gang is None:
        pod = want.pods[0]
        nodes = holding(list(state.nodes.values()), state.holds, pod.priority, pod.key)
        return plan(pod, nodes, state.running, users, classes, policy=policy,
                    budgets=state.budgets, lasting=lasting, drawn=state.drawn, params=params,
                    solve=solve)  # fmt: skip
    # A gang: each pod over what the ones before it leave; all planned, or nothing.
    trial = _State(dict(state.nodes), list(state.running), dict(state.budgets), list(state.holds),
                   state.drawn)  # fmt: skip
    domain: str | None = None
    victims: list[str] = []
    freed: list[str] = []
    pods: dict[str, str] = {}
    held: dict[str, dict[str, AllocatedDevices]] = {}
    took: dict[str, dict[str, Draws]] = {}
    proven, checks = True, 0
    by_domain = _domains(state.nodes.values(), want.gang)
    for pod in sorted(want.pods, key=lambda p: p.key):
        nodes = holding(list(trial.nodes.values()), trial.holds, want.priority, pod.key)
        # A gang preempts at its priority (its lowest pod's), never at a member's own: a
        # high-priority member would otherwise evict pods above the gang's priority.
        pod = dataclasses.replace(pod, priority=want.priority)
        if domain is not None:
            pod = dataclasses.replace(pod, candidate_nodes=_within(pod, by_domain[domain]))
        found = plan(pod, nodes, trial.running, users, classes, policy=policy,
                     budgets=trial.budgets, lasting=lasting, drawn=trial.drawn, params=params,
                     solve=solve)  # fmt: skip
        checks += found.checks
        proven = proven and found.proven
        if found.node is None:
            return Plan(want.key, None, proven=proven, checks=checks, priority=want.priority,
                        reason=f"gang {want.key}: pod {pod.key}: {found.reason}; a gang "
                        "preempts for all its pods or for none")  # fmt: skip
        if want.gang.required and want.gang.topology_key is not None and domain is None:
            domain = next((d for d, names in by_domain.items() if found.node in names), None)
            if domain is None:
                return Plan(want.key, None, proven=proven, checks=checks,
                            priority=want.priority,
                            reason=f"gang {want.key}: node {found.node} has no label "
                            f"{want.gang.topology_key}")  # fmt: skip
        victims += found.victims
        freed += found.freed
        pods.update(found.pods)
        for node, entries in found.held.items():
            held.setdefault(node, {}).update(entries)
        for node, draws in found.drawn.items():
            took.setdefault(node, {}).update(draws)
        trial.commit(dataclasses.replace(found, priority=want.priority))
    return Plan(
        want.key,
        pods[sorted(pods)[0]],
        tuple(sorted(set(victims))),
        tuple(sorted(set(freed))),
        proven,
        checks,
        priority=want.priority,
        pods=pods,
        held=held,
        drawn=took,
    )


def _domains(nodes: Iterable[Node], gang: Gang) -> dict[str, frozenset[str]]:
    if gang.topology_key is None:
        return {}
    out: dict[str, set[str]] = {}
    for node in nodes:
        value = dict(node.state.labels).get(gang.topology_key)
        if value is not None:
            out.setdefault(value, set()).add(node.state.name)
    return {k: frozenset(v) for k, v in out.items()}


def _within(pod: PodInput, names: frozenset[str]) -> tuple[str, ...]:
    allowed = names if pod.candidate_nodes is None else names & set(pod.candidate_nodes)
    return tuple(sorted(allowed))


def plan(
    preemptor: PodInput,
    nodes: Sequence[Node],
    running: Iterable[Running],
    users: Mapping[str, frozenset[str]],
    classes: Mapping[str, Obj],
    *,
    policy: AllocationPolicySpec | None = None,
    budgets: Mapping[str, int] | None = None,
    lasting: frozenset[str] = frozenset(),
    drawn: Mapping[str, Draws] | None = None,
    params: SolveParams | None = None,
    solve: Solve | None = None,
) -> Plan:
    """The victims that let `preemptor` fit, chosen by the solver, or why there are none.

    `users`: claim uid -> the keys of every pod using it (a claim is freed only when all are
    victims); `budgets`: PodDisruptionBudget name -> the disruptions it allows now; `lasting`:
    claims that stay allocated when their pods leave (evicting their pods frees nothing);
    `drawn`: claim uid -> what its other drivers' devices draw (freed with the claim)."""
    policy = policy or AllocationPolicySpec()
    by_node = {n.state.name: n for n in nodes}
    allowed = set(by_node) if preemptor.candidate_nodes is None else set(preemptor.candidate_nodes)
    running = list(running)
    whole: set[str] = set()
    while True:
        found = _plan_once(preemptor, by_node, allowed, running, users, classes, policy,
                           budgets, lasting, drawn, params, solve, frozenset(whole))  # fmt: skip
        broken = _broken_gangs(found, running, whole)
        if not broken:
            return found if not whole else dataclasses.replace(found, proven=False)
        # Its members above the minimum were taken one by one, and too many: that gang goes
        # whole or not at all; planned again.
        whole |= broken


def _plan_once(
    preemptor: PodInput,
    by_node: Mapping[str, Node],
    allowed: set[str],
    running: list[Running],
    users: Mapping[str, frozenset[str]],
    classes: Mapping[str, Obj],
    policy: AllocationPolicySpec,
    budgets: Mapping[str, int] | None,
    lasting: frozenset[str],
    drawn: Mapping[str, Draws] | None,
    params: SolveParams | None,
    solve: Solve | None,
    whole: frozenset[str],
) -> Plan:
    """One plan, each gang in `whole` (or with none above its minimum) one unit."""
    settings = policy.preemption
    everyone = as_victims(running, whole)
    pods = _candidates(preemptor, everyone, allowed, by_node, users, lasting)

    def freed(victims: frozenset[str]) -> set[str]:
        return {
            uid
            for key in victims
            for uid in pods[key].claims
            if uid not in lasting and users.get(uid, frozenset({key})) <= victims
        }

    answers: dict[tuple[str, frozenset[str]], Outcome] = {}

    def fits(node: str, victims: frozenset[str]) -> bool:
        gone = [pods[k] for k in victims if pods[k].node == node]
        state = without(by_node[node], freed(victims), gone, drawn or {})
        alone = dataclasses.replace(preemptor, candidate_nodes=(node,))
        outcome = allocate([state], [alone], classes, policy=policy, params=params, solve=solve)
        answers[(node, victims)] = outcome
        return preemptor.key in outcome.placed

    # Pods already leaving (the caller took their claims off) may free enough: no victim then.
    nodes_here = [by_node[n] for n in sorted(allowed & set(by_node))]
    if nodes_here:
        now = allocate(nodes_here, [preemptor], classes, policy=policy, params=params, solve=solve)
        if preemptor.key in now.placed:
            where = now.placed[preemptor.key]
            return Plan(preemptor.key, where, priority=preemptor.priority,
                        reason="it fits without victims (devices being freed)",
                        pods={preemptor.key: where}, held=_held(now),
                        drawn=_drawn(now))  # fmt: skip
    units = _whole_units(pods, everyone)
    candidates = [
        choice.Candidate(
            key=p.key,
            node=p.node,
            priority=p.priority,
            devices=_devices(by_node[p.node], p.claims) if p.node in by_node else 0,
            budgets=p.budgets,
            unit=p.unit,
        )
        for p in pods.values()
        if p.unit is None or p.unit in units
    ]
    here = sorted({c.node for c in candidates if c.node in allowed})
    devices = {}
    for name in here:
        found_devices = _node_devices(by_node[name], preemptor, classes, users, pods, lasting)
        if found_devices is not None:
            devices[name] = found_devices
    found = choice.choose(
        preemptor.priority,
        [c for c in candidates if c.node in allowed or c.unit is not None],
        fits,
        max_victims=settings.maxVictims,
        budgets=budgets,
        order=settings.minimize,
        devices=devices,
        nodes=here,
    )
    if found.node is None:
        return Plan(preemptor.key, None, proven=found.proven, checks=found.checks,
                    reason=found.reason, priority=preemptor.priority)  # fmt: skip
    outcome = answers[(found.node, frozenset(found.victims))]
    return Plan(
        preemptor.key,
        found.node,
        found.victims,
        tuple(sorted(freed(frozenset(found.victims)))),
        found.proven,
        found.checks,
        priority=preemptor.priority,
        pods={preemptor.key: found.node},
        held=_held(outcome),
        drawn=_drawn(outcome),
    )


def as_victims(running: Sequence[Running], whole: frozenset[str] = frozenset()) -> list[Running]:
    """The running pods as victims: a gang's members above its minimum are pods like any other
    (each at its own priority); a gang with none above it (or in `whole`) is one unit at its
    lowest member's priority, as it preempts: one high-priority member shields no other."""
    members: dict[str, list[Running]] = {}
    for r in running:
        if r.unit is not None:
            members.setdefault(r.unit, []).append(r)
    out = []
    for r in running:
        if r.unit is None:
            out.append(r)
            continue
        mine = members[r.unit]
        if r.unit not in whole and r.minimum > 0 and len(mine) > r.minimum:
            out.append(dataclasses.replace(r, unit=None))
        else:
            out.append(dataclasses.replace(r, priority=min(m.priority for m in mine)))
    return out


def _broken_gangs(found: Plan, running: Iterable[Running], whole: set[str]) -> set[str]:
    """The gangs the plan takes members of one by one, leaving some but fewer than their
    minimum."""
    members: dict[str, list[Running]] = {}
    for r in running:
        if r.unit is not None and r.unit not in whole:
            members.setdefault(r.unit, []).append(r)
    victims = set(found.victims)
    out = set()
    for unit, mine in members.items():
        gone = sum(1 for m in mine if m.key in victims)
        if 0 < gone < len(mine) and len(mine) - gone < mine[0].minimum:
            out.add(unit)
    return out


def _candidates(
    preemptor: PodInput,
    running: Sequence[Running],
    allowed: set[str],
    by_node: Mapping[str, Node],
    users: Mapping[str, frozenset[str]],
    lasting: frozenset[str],
) -> dict[str, Running]:
    """The pods of lower priority that could free something: on a candidate node (or a gang's
    member elsewhere whose gang has a pod on one) and holding a claim that can be freed."""
    lower = [r for r in running if r.priority < preemptor.priority and r.node in by_node]
    units_here = {r.unit for r in lower if r.unit is not None and r.node in allowed}
    out = {}
    for r in lower:
        if r.unit is None and (r.node not in allowed or not r.claims):
            continue
        if r.unit is not None and r.unit not in units_here:
            continue
        if r.unit is None and all(uid in lasting for uid in r.claims):
            continue  # its claims stay when it leaves: evicting it frees nothing
        out[r.key] = r
    return out


def _whole_units(pods: Mapping[str, Running], running: Sequence[Running]) -> set[str]:
    """The gangs every running pod of which is a candidate (a gang with a pod of the
    preemptor's priority or above, or off the cluster's nodes, is never a victim)."""
    members: dict[str, set[str]] = {}
    for r in running:
        if r.unit is not None:
            members.setdefault(r.unit, set()).add(r.key)
    return {unit for unit, keys in members.items() if keys <= pods.keys()}


def _held(outcome: Outcome) -> dict[str, dict[str, AllocatedDevices]]:
    out: dict[str, dict[str, AllocatedDevices]] = {}
    for allocation in outcome.allocations.values():
        out.setdefault(allocation.node, {}).update(allocation.ledger)
    return out


def _drawn(outcome: Outcome) -> dict[str, dict[str, Draws]]:
    """node -> claim uid -> what the allocation's other drivers' devices draw."""
    out: dict[str, dict[str, Draws]] = {}
    for allocation in outcome.allocations.values():
        if allocation.drawn:
            out.setdefault(allocation.node, {})[allocation.uid] = tuple(allocation.drawn)
    return out


def holding(nodes: Sequence[Node], holds: Iterable[Hold], priority: int, pod: str) -> list[Node]:
    """The nodes as a pod of `priority` sees them: the devices held for each preemptor of that
    priority or higher are taken (never its own)."""
    return with_holds(nodes, applicable(holds, priority, {pod}))


def applicable(holds: Iterable[Hold], priority: int, pods: Iterable[str]) -> list[Hold]:
    """The holds against pods of `priority` (lower and equal priorities are held against; a
    higher priority takes what is held), but for the holds of these pods themselves."""
    mine = set(pods)
    return [h for h in holds if h.priority >= priority and not (h.pods & mine)
            and h.preemptor not in mine]  # fmt: skip


def with_holds(nodes: Sequence[Node], holds: Iterable[Hold]) -> list[Node]:
    """The nodes with these holds' devices taken."""
    held: dict[str, dict[str, AllocatedDevices]] = {}
    took: dict[str, dict[str, Draws]] = {}
    for found in holds:
        for node, entries in found.held.items():
            held.setdefault(node, {}).update(entries)
        for node, draws in found.drawn.items():
            took.setdefault(node, {}).update(draws)
    return [
        hold(n, held.get(n.state.name, {}), took.get(n.state.name, {}))
        if n.state.name in held or n.state.name in took else n
        for n in nodes
    ]  # fmt: skip


def hold_groups(
    pods: Sequence[PodInput], holds: Sequence[Hold], gangs: Iterable[Gang] = ()
) -> list[tuple[list[PodInput], list[Hold]]]:
    """The pods in groups that see the same holds, each with those holds, in the pods' order
    (a gang's pods in one group, which sees what any of them sees but the gang's own holds).
    The caller places the groups one after the other, each over what the ones before left."""
    if not holds:
        return [(list(pods), [])] if pods else []
    of_gang = {p: g for g in gangs for p in g.pods}
    members: dict[str, list[PodInput]] = {}
    for pod in pods:
        if pod.key in of_gang:
            members.setdefault(of_gang[pod.key].name, []).append(pod)
    groups: dict[frozenset[str], list[PodInput]] = {}
    seen: dict[frozenset[str], list[Hold]] = {}
    done: set[str] = set()
    for pod in pods:
        if pod.key in done:
            continue
        gang = of_gang.get(pod.key)
        unit = members[gang.name] if gang is not None else [pod]
        keys = {p.key for p in unit}
        found = applicable(holds, min(p.priority for p in unit), keys)
        key = frozenset(h.preemptor for h in found)
        groups.setdefault(key, []).extend(unit)
        seen[key] = found
        done |= keys
    return [(group, seen[key]) for key, group in groups.items()]


def placed_on(nodes: Sequence[Node], outcome: Outcome, pods: Sequence[PodInput]) -> list[Node]:
    """The nodes with the outcome's placed pods on them (their claims' ledger entries and other
    drivers' devices, their CPU and memory): what the next group or plan sees."""
    by_key = {p.key: p for p in pods}
    placed: dict[str, list[PodInput]] = {}
    for key, name in outcome.placed.items():
        if key in by_key:
            placed.setdefault(name, []).append(by_key[key])
    out = []
    for node in nodes:
        here = placed.get(node.state.name, [])
        if not here:
            out.append(node)
            continue
        uids = {str(c["metadata"].get("uid", "")) for pod in here for c in pod.claims}
        mine = [outcome.allocations[u] for u in sorted(uids) if u in outcome.allocations]
        state = dataclasses.replace(
            with_allocations(node.state, mine),
            used_cpu_milli=node.state.used_cpu_milli + sum(p.cpu_milli for p in here),
            used_memory_mib=node.state.used_memory_mib + sum(p.memory_mib for p in here),
        )
        out.append(dataclasses.replace(node, state=state))
    return out


def outlives_its_pods(claim: Obj) -> bool:
    """Whether an allocated claim stays allocated when every pod using it has left, so that
    evicting them frees nothing: a claim that no pod owns (a standalone claim, not one made
    from the pod's template, which the garbage collector deletes with it) and that does not
    carry kube-scheduler's finalizer (with which the resourceclaim controller deallocates it).
    A standalone claim drasat allocated is given back by drasat's own settle: the controller
    leaves those out (`drasat.controller.preemption.lasting_claims`)."""
    meta = claim.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    owners = meta.get("ownerReferences")
    for owner in owners if isinstance(owners, list) else []:
        if isinstance(owner, dict) and owner.get("kind") == "Pod" and owner.get("controller"):
            return False
    finalizers = meta.get("finalizers")
    return DELETE_PROTECTION not in (finalizers if isinstance(finalizers, list) else [])


#: kube-scheduler's finalizer on the claims it allocates: the resourceclaim controller
#: deallocates such a claim once no pod uses it.
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"


def checked(count: int) -> str:
    """How many victim sets the allocator was asked about, in words."""
    return f"{count} set checked" if count == 1 else f"{count} sets checked"


def without(
    node: Node,
    claims: set[str],
    pods: Sequence[Running] = (),
    drawn: Mapping[str, Draws] | None = None,
) -> Node:
    """The node with these claims' ledger entries (and status holds) and prepared devices gone,
    what their other drivers' devices draw (`drawn`, by claim uid: a NIC) given back to its
    amounts, and these pods' CPU and memory given back."""
    ledger = node.state.ledger
    entries = {key: entry for key, entry in ledger.allocated.items() if entry.uid not in claims}
    # The node plugin's record of a claim it prepared goes when the victim's pod stops.
    prepared = {k: v for k, v in ledger.prepared.items() if k not in claims}
    amounts = dict(node.state.amounts)
    for uid in claims:
        for name, much in (drawn or {}).get(uid, ()):
            if name in amounts:
                amounts[name] += much
    state = dataclasses.replace(
        node.state,
        ledger=dataclasses.replace(ledger, allocated=entries, prepared=prepared),
        amounts=tuple(amounts.items()),
        used_cpu_milli=max(node.state.used_cpu_milli - sum(p.cpu_milli for p in pods), 0),
        used_memory_mib=max(node.state.used_memory_mib - sum(p.memory_mib for p in pods), 0),
    )
    return dataclasses.replace(node, state=state)


def _taken_by(node: Node, claims: Iterable[str]) -> dict[str, Allocation]:
    """What these claims hold on the node, by ledger key."""
    wanted = set(claims)
    return {k: e for k, e in node.state.ledger.allocated.items() if e.uid in wanted}


def entries_of(node: Node, claims: Iterable[str]) -> dict[str, AllocatedDevices]:
    """The ledger entries these claims hold on the node, as `hold` takes them back."""
    return nasinventory.entries_of(_taken_by(node, claims))


def hold(
    node: Node,
    held: Mapping[str, AllocatedDevices],
    drawn: Mapping[str, Draws] | None = None,
) -> Node:
    """The node with devices held for a preemptor (the allocation planned for it, kept taken so
    no other pod takes them), its other drivers' devices (`drawn`, by claim uid) taken from the
    amounts: entries of a claim already in the ledger are not added twice, nor what it draws."""
    present = {e.uid for e in node.state.ledger.allocated.values()}
    extra = {
        NOMINATED_PREFIX + key: nasinventory.allocation_of(entry)
        for key, entry in held.items()
        if entry.claimInfo.uid not in present
    }
    taken = [d for uid, d in (drawn or {}).items() if uid not in present]
    if not extra and not taken:
        return node
    amounts = dict(node.state.amounts)
    for draws in taken:
        for name, much in draws:
            if name in amounts:
                amounts[name] = max(0, amounts[name] - much)
    state = dataclasses.replace(
        node.state,
        ledger=node.state.ledger.with_allocated(extra),
        amounts=tuple(amounts.items()),
    )
    return dataclasses.replace(node, state=state)


def _devices(node: Node, claims: Sequence[str]) -> int:
    """How many devices these claims hold on the node (whole GPUs, shares, MIG devices)."""
    count = 0
    for entry in _taken_by(node, claims).values():
        count += len(entry.gpus) + len(entry.migs)
    return count


def _node_devices(
    node: Node,
    preemptor: PodInput,
    classes: Mapping[str, Obj],
    users: Mapping[str, frozenset[str]],
    pods: Mapping[str, Running],
    lasting: frozenset[str],
) -> choice.Devices | None:
    """The node's GPUs, what each claim there holds of them and who frees it, and the
    preemptor's needs by way its claims can be met (None: its claims cannot be read)."""
    ledger = node.state.ledger
    inventory = node.state.devices
    gpus = tuple(choice.Gpu(g.uuid, (g.memoryBytes or 0) // MiB) for g in inventory.gpus if g.uuid)
    sizes = {(m.parentProductName, m.profile): {p.start: p.size for p in m.placements}
             for m in inventory.mig_profiles}  # fmt: skip
    product = {g.uuid: g.productName for g in inventory.gpus}

    def holders(uid: str) -> frozenset[str] | None:
        found = users.get(uid)
        if uid in lasting or not found or not found <= pods.keys():
            return None
        return found

    holds: list[choice.Hold] = []
    for entry in ledger.allocated.values():
        who = holders(entry.uid)
        holds.extend(_holds(entry, who))
    for uid, prepared in ledger.prepared.items():
        if any(e.uid == uid for e in ledger.allocated.values()):
            continue
        who = holders(uid)
        for uuid in prepared.gpus:
            holds.append(choice.Hold(uuid, who, whole=True))
        for mig in prepared.migs:
            slices = frozenset(range(mig.start, mig.end))
            holds.append(choice.Hold(mig.parent, who, slices=slices, media=mig.media_extensions))
    for orphan in ledger.orphans:
        slices = frozenset(range(orphan.start, orphan.end))
        holds.append(choice.Hold(orphan.parent, None, slices=slices))
    try:
        variants = pod_variants(preemptor, [node], classes)
    except Exception:  # its claims are refused when read: the allocator says why
        return None
    here = {g.uuid for g in gpus}
    ways = []
    for options in variants:
        if any(o.kind == publisheddevices.OTHER for o in options):
            # Another driver's device (a NIC) is not among the search's device facts: the node
            # is searched without them, every set cut by the fit check, which frees a victim's
            # NIC with its claim (`without`, `drawn`).
            return None
        needs = []
        for option in options:
            if option.kind == publisheddevices.FALLBACK:
                continue
            if option.kind == publisheddevices.MIG:
                # One need has one media flag: a way of several profiles (`profile` None)
                # offers only its placements without media extensions, so a plan never counts
                # a media engine it does not check.
                media = option.profile is not None and _media(option.profile)
                placements = frozenset(
                    (gpu, start, sizes.get((product.get(gpu, ""), profile), {}).get(start, 0))
                    for gpu, profile, start in option.placements
                    if gpu in here and (option.profile is not None or not _media(profile))
                )  # fmt: skip
                needs.append(choice.Need(choice.Need.MIG, option.count, placements=placements,
                                         media=media))  # fmt: skip
            elif option.share is not None:
                needs.append(choice.Need(choice.Need.SHARE, option.count,
                                         gpus=option.eligible & here,
                                         compute=option.share.compute or 0,
                                         memory_mib=share_memory_mib(option.share)))  # fmt: skip
            else:
                needs.append(choice.Need(choice.Need.GPU, option.count,
                                         gpus=option.eligible & here))  # fmt: skip
        ways.append(tuple(needs))
    return choice.Devices(gpus, tuple(holds), tuple(ways))


def _holds(entry: Allocation, who: frozenset[str] | None) -> list[choice.Hold]:
    out = []
    for uuid in entry.gpus:
        if entry.share is not None:
            out.append(choice.Hold(uuid, who, compute=entry.share.compute or 0,
                                   memory_mib=share_memory_mib(entry.share)))  # fmt: skip
        else:
            out.append(choice.Hold(uuid, who, whole=True))
    for mig in entry.migs:
        slices = frozenset(range(mig.start, mig.end))
        out.append(choice.Hold(mig.parent, who, slices=slices, media=mig.media_extensions))
    return out


def _media(profile: str) -> bool:
    return profile.endswith("+me")
