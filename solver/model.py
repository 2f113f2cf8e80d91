"""The CP-SAT placement model: pods with claims on candidate nodes' GPUs.

One builder serves every mode: batch (all pods, all nodes), online (one pod on one node, forced),
and explanations (one pod on its candidate nodes, each rule behind an assumption literal).

Stages, in CP-SAT's usual order: data (eligible devices per claim) -> variables -> constraints ->
objective. Solving and reading values live in `solving.py` and `extract.py`.

Other drivers' devices (a device claim, `DeviceDemand`) are literals of their own (`UnitVar`):
a claim takes `count` of them on its node, what they draw on the node's amounts stays within
what is left (`amounts`), and a claim's `matchAttribute`/`distinctAttribute` constraints read
them beside its GPUs (a GPU and a NIC on one PCIe root). They carry no cost.

Objective, lexicographic: first maximize placed pods weighted by `1 + priority - lowest priority`
(then optional claims that got devices), then minimize the policy's weighted costs. Each cost
term is computed by one function of `costs.py`, which the per-node enumeration (`nodes.py`) adds
up too, so both price a placement alike:
- binpack: a node newly used costs its free GPUs before; a GPU opened (untouched before) costs 1;
- spread: a node newly used costs its used GPUs before; a touched GPU touched again costs 1; each
  extra new pod on one node costs 1 (model only: the enumeration places one pod);
- fragmentation: with a target workload (`workload.py`, the problem's claim shapes) each pod
  costs the growth of its node's fragmented capacity (free compute the expected claims cannot
  use, % of a GPU) that its CPU and memory cause, and each whole or share claim the growth its
  GPUs add beside them (`costs.pod_workload`, `costs.claim_workload`: on the device variable of
  a one-device claim, on one variable per composition by GPU kind for k > 1 whole GPUs,
  `whole_workload`); without one, an untouched
  non-MIG GPU opened costs 8; on a MIG GPU every (profile, placement)
  that was free and becomes blocked costs its size in memory slices (so 1g devices go where they
  block fewest large placements, e.g. slice 6, keeping 4g/3g/7g at 0 possible);
- preferNode / preferProduct: 8 per pod off the preferred nodes / per device off the products;
- minimizeMigWaste: MIG by needs, slices above the smallest candidate of the product;
- topology Preferred: 8 per extra NUMA node / per pair not linked by NVLink (model only: the
  enumeration does not take such claims).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from drasat.solver import costs, demand, reasons
from drasat.solver.claimspec import Requirement
from drasat.solver.demand import Claim, Kind
from drasat.solver.inventory import FULL_COMPUTE, GpuSlot, MigOption, NodeView
from drasat.solver.problem import DeviceConstraint, DeviceKey, PodRequest
from drasat.solver.rules import Rules


class OutOfTime(Exception):
    """Building the model (or its input) was not done by the caller's deadline."""


@dataclass(frozen=True)
class PodEntry:
    """A pod to place: its new claims (not yet allocated anywhere) and its candidate nodes."""

    request: PodRequest
    priority: int
    claims: tuple[Claim, ...]
    nodes: tuple[NodeView, ...]

    @property
    def key(self) -> str:
        return self.request.key


@dataclass
class DeviceVar:
    """One way a claim can take (part of) one GPU: whole/share (option None) or a MIG option."""

    claim: Claim
    gpu: GpuSlot
    option: MigOption | None
    var: cp_model.IntVar


@dataclass
class UnitVar:
    """A device claim (`Kind.device`) taking one of another driver's devices on one node."""

    claim: Claim
    node: str
    key: str
    draws: demand.Draws
    var: cp_model.IntVar


@dataclass
class Built:
    model: cp_model.CpModel
    at: dict[tuple[str, str], cp_model.IntVar]  # (pod, node)
    placed: dict[str, cp_model.IntVar]  # pod
    claim_at: dict[tuple[str, str], cp_model.IntVar]  # (claim uid, node)
    devices: dict[str, list[DeviceVar]]  # claim uid -> its device vars
    got: dict[tuple[str, str], cp_model.IntVar]  # optional claim (uid, node) -> has devices
    primary: list[tuple[int, cp_model.IntVar]]
    secondary: list[tuple[int, cp_model.IntVar]]
    #: Device claim uid -> its literals, one per device it may take (other drivers' devices).
    units: dict[str, list[UnitVar]] = field(default_factory=dict)
    #: Assumption literal -> the rule it enforces, in user terms (explain mode); claims and
    #: nodes it names are ids in the label (reasons.py), never spelled into its text.
    assumptions: dict[int, reasons.Label] = field(default_factory=dict)
    #: Primary weight of placing each pod, and of an optional claim getting its devices.
    pod_weight: dict[str, int] = field(default_factory=dict)
    got_weight: int = 0

    def primary_expr(self) -> cp_model.LinearExprT:
        return cp_model.LinearExpr.weighted_sum(
            [v for _, v in self.primary], [c for c, _ in self.primary]
        )

    def secondary_expr(self) -> cp_model.LinearExprT:
        return cp_model.LinearExpr.weighted_sum(
            [v for _, v in self.secondary], [c for c, _ in self.secondary]
        )

    def secondary_bound(self) -> int:
        return sum(abs(c) for c, _ in self.secondary)


@dataclass(frozen=True)
class PrimaryLevels:
    """Weights of the primary objective, three levels each outweighing all below it:
    placed pods by `1 + priority - lowest priority`, then optional claims with devices, then
    (among equal choices) earlier pods in the problem's order."""

    lowest: int
    pods: int
    order_total: int
    got: int
    unit: int

    @classmethod
    def of(cls, priorities: Sequence[int], optional_claims: int) -> PrimaryLevels:
        n = len(priorities)
        order_total = n * (n + 1) // 2
        got = order_total + 1
        unit = (optional_claims + 1) * got
        return cls(min(priorities, default=0), n, order_total, got, unit)

    def pod(self, priority: int, index: int) -> int:
        return (1 + priority - self.lowest) * self.unit + (self.pods - index)


def share_fits(claim: Claim, gpu: GpuSlot) -> bool:
    return (
        share_room(claim, gpu)
        and all(namespace == claim.namespace for namespace in gpu.share_namespaces)
        and claim.namespace not in gpu.spread_share_namespaces
    )


def share_room(claim: Claim, gpu: GpuSlot) -> bool:
    """Whether the GPU has the compute and memory the share needs, whoever shares it."""
    return (
        not gpu.mig_enabled
        and not gpu.held_whole
        and gpu.share_compute_used + claim.share_compute <= FULL_COMPUTE
        and gpu.share_memory_used_mib + claim.share_memory_mib <= gpu.memory_mib
    )


def free_options(claim: Claim, gpu: GpuSlot) -> list[MigOption]:
    partner = claim.paired_with
    return [
        o
        for o in gpu.mig_options
        if claim.mig_fits(o) and claim.placement_allowed(gpu, o) and gpu.option_free(o, partner)
    ]


def _free_ways(claim: Claim, gpu: GpuSlot) -> list[MigOption | None]:
    if claim.kind is Kind.whole:
        return [None] if gpu.untouched else []
    if claim.kind is Kind.share:
        return [None] if share_fits(claim, gpu) else []
    return list(free_options(claim, gpu))


def claim_shape(claim: Claim) -> tuple[object, bool]:
    """What eligibility reads of a claim (its namespace and spec), and whether it names GPUs
    by index or uuid (then GPUs in equal states still differ)."""
    spec = claim.request.gpu or claim.request.mig or claim.request.device
    assert spec is not None
    text = spec.key()
    names_gpus = demand.names_gpu(claim.selector) or claim.request.eligible is not None
    # The sets themselves (hashable; one object for the claims of one template): sorting
    # thousands of uuids per claim is most of a large v1 model's build.
    placements = claim.request.placements
    names_gpus = names_gpus or placements is not None
    return (claim.namespace, claim.kind.value, text, claim.request.eligible, placements), names_gpus


class _Builder:
    def __init__(
        self,
        entries: Sequence[PodEntry],
        rules: Rules,
        *,
        force_placed: bool,
        explain: bool,
        deadline: float | None = None,
    ) -> None:
        self.entries = entries
        self.rules = rules
        self.explain = explain
        self.force_placed = force_placed
        self.deadline = deadline
        self.m = cp_model.CpModel()
        self.built = Built(self.m, {}, {}, {}, {}, {}, [], [])
        self.rule_literals: dict[reasons.Label, cp_model.IntVar] = {}
        self.claims: dict[str, Claim] = {}
        self.claim_pods: dict[str, list[PodEntry]] = {}
        self.claim_nodes: dict[str, dict[str, NodeView]] = {}
        for entry in entries:
            for claim in entry.claims:
                self.claims.setdefault(claim.uid, claim)
                self.claim_pods.setdefault(claim.uid, []).append(entry)
                nodes = self.claim_nodes.setdefault(claim.uid, {})
                for node in entry.nodes:
                    nodes.setdefault(node.name, node)
        self._shapes: dict[str, tuple[int, bool]] = {}
        self._ways_memo: dict[object, tuple[str | None, list[MigOption | None]]] = {}
        #: (node, CPU, memory) -> the node's workload growth from that CPU and memory alone.
        self._alone: dict[tuple[str, int, int], int] = {}
        self.nodes: dict[str, NodeView] = {}
        self._on_node: dict[str, list[tuple[PodEntry, cp_model.IntVar]]] | None = None
        for entry in entries:
            for node in entry.nodes:
                self.nodes.setdefault(node.name, node)

    def on_time(self) -> None:
        """Raise OutOfTime once the deadline has passed (checked once per pod, claim, GPU and
        node: a model of tens of thousands of pods takes longer to build than a caller's
        whole time limit)."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise OutOfTime

    def rule(self, rule: str | reasons.Label) -> cp_model.IntVar | None:
        """The assumption literal enforcing a rule (explain mode), else None: always enforced."""
        if not self.explain:
            return None
        label = (rule,) if isinstance(rule, str) else rule
        literal = self.rule_literals.get(label)
        if literal is None:
            literal = self.m.new_bool_var(f"rule_{len(self.rule_literals)}")
            self.rule_literals[label] = literal
            self.built.assumptions[literal.index] = label
        return literal

    # -- variables ------------------------------------------------------------------------------

    def pod_variables(self) -> None:
        b = self.built
        for entry in self.entries:
            self.on_time()
            at = []
            for node in entry.nodes:
                var = self.m.new_bool_var(f"at_{entry.key}_{node.name}")
                b.at[(entry.key, node.name)] = var
                at.append(var)
            placed = self.m.new_bool_var(f"placed_{entry.key}")
            b.placed[entry.key] = placed
            self.m.add(sum(at) == placed)
            if self.force_placed:
                self.m.add(placed == 1)

    def claim_variables(self) -> None:
        b = self.built
        for uid, claim in self.claims.items():
            self.on_time()
            node_vars = []
            for name, node in self.claim_nodes[uid].items():
                here = self.m.new_bool_var(f"claim_{claim.ref}_{name}")
                b.claim_at[(uid, name)] = here
                node_vars.append(here)
                users = [b.at[(p.key, name)] for p in self.claim_pods[uid] if (p.key, name) in b.at]
                for user in users:
                    self.m.add_implication(user, here)
                # Allocated only where one of its pods goes.
                self.m.add(here <= sum(users))
                devices_here = here
                if claim.optional:
                    devices_here = self.m.new_bool_var(f"got_{claim.ref}_{name}")
                    b.got[(uid, name)] = devices_here
                    self.m.add_implication(devices_here, here)
                self.device_variables(claim, node, devices_here)
            self.m.add_at_most_one(node_vars)
            pods = self.claim_pods[uid]
            if not claim.request.shareable and len(pods) > 1:
                # A claim of a non-sharable class serves one pod.
                self.m.add_at_most_one(b.placed[p.key] for p in pods)

    def device_variables(self, claim: Claim, node: NodeView, devices_here: cp_model.IntVar) -> None:
        if claim.kind is Kind.device:
            self.unit_variables(claim, node, devices_here)
            return
        vars_here: list[DeviceVar] = []
        for gpu in node.gpus:
            blocked_by, ways = self._ways(claim, gpu)
            if blocked_by is not None and not self.explain:
                continue
            for option in ways:
                tag = "" if option is None else f"_{option.profile}@{option.start}"
                var = self.m.new_bool_var(f"x_{claim.ref}_{gpu.node}_{gpu.position}{tag}")
                if blocked_by is not None:
                    literal = self.rule(blocked_by)
                    self.m.add(var == 0).only_enforce_if(literal)  # type: ignore[arg-type]
                vars_here.append(DeviceVar(claim, gpu, option, var))
        self.built.devices.setdefault(claim.uid, []).extend(vars_here)
        count = claim.count if claim.kind is Kind.whole else 1
        self.m.add(cp_model.LinearExpr.sum([d.var for d in vars_here]) == count * devices_here)
        if claim.kind is Kind.whole and claim.count > 1 and claim.request.gpu is not None:
            self.topology(claim, vars_here, devices_here)
        if costs.priced(claim, self.rules) and not costs.per_device(claim):
            self.whole_workload(claim, node, vars_here, devices_here)

    def unit_variables(self, claim: Claim, node: NodeView, devices_here: cp_model.IntVar) -> None:
        """A device claim takes `count` distinct devices among its choices the node has room
        for now (`amounts` bounds them together with the other claims)."""
        units = [
            UnitVar(claim, node.name, key, draws, self.m.new_bool_var(f"u_{claim.ref}_{key}"))
            for key, draws in demand.device_choices(claim, node.amounts)
        ]
        self.built.units.setdefault(claim.uid, []).extend(units)
        c = self.m.add(
            cp_model.LinearExpr.sum([u.var for u in units]) == claim.count * devices_here
        )
        literal = self.rule(("claim ", reasons.ClaimId(claim.uid), f": needs {_devices(claim)}"))
        if literal is not None:
            c.only_enforce_if(literal)

    def amounts(self) -> None:
        """What the devices taken draw on each amount of a node stays within what is left."""
        per_amount: dict[tuple[str, str], list[tuple[int, cp_model.IntVar]]] = {}
        for units in self.built.units.values():
            for u in units:
                for name, much in u.draws:
                    per_amount.setdefault((u.node, name), []).append((much, u.var))
        for (node, name), terms in per_amount.items():
            left = self.nodes[node].amounts.get(name, 0)
            if sum(much for much, _ in terms) <= left:
                continue
            weighted = cp_model.LinearExpr.weighted_sum(
                [v for _, v in terms], [m for m, _ in terms]
            )
            self.m.add(weighted <= left)

    def _ways(self, claim: Claim, gpu: GpuSlot) -> tuple[str | None, list[MigOption | None]]:
        """(policy rule forbidding it or None, ways the claim can take the GPU); memoized by
        claim shape and GPU state, as pods with equal claims see the same GPUs."""
        shape = self._shapes.get(claim.uid)
        if shape is None:
            spec, names_gpus = claim_shape(claim)
            # By its interned number: claims of equal shape may hold equal sets of thousands of
            # uuids in distinct objects, which a memo key would compare on every lookup.
            shape = self._shapes[claim.uid] = (self.rules.cache.intern(spec), names_gpus)
        identity = gpu.identity() if shape[1] or claim.paired_with is not None else ()
        key = (shape, gpu.state_id, self.rules.node_class_id(gpu.node), identity)
        found = self._ways_memo.get(key)
        if found is None:
            found = (None, [])
            if demand.device_fits(claim, gpu):
                found = (self.rules.blocking_rule(claim, gpu), _free_ways(claim, gpu))
            self._ways_memo[key] = found
        return found

    def topology(
        self, claim: Claim, vars_here: list[DeviceVar], devices_here: cp_model.IntVar
    ) -> None:
        spec = claim.request.gpu.topology if claim.request.gpu is not None else None
        if spec is None:
            return
        w = self.rules.weights.topology
        if spec.same_numa_node is not None:
            groups: dict[object, list[DeviceVar]] = {}
            for d in vars_here:
                # A GPU without a NUMA node is a group of its own (GpuSlot is not hashable).
                numa = d.gpu.info.numaNode
                key = numa if numa is not None else ("gpu", d.gpu.node, d.gpu.position)
                groups.setdefault(key, []).append(d)
            used = []
            for number, members in enumerate(groups.values()):
                u = self.m.new_bool_var(f"numa_{claim.ref}_{members[0].gpu.node}_{number}")
                for d in members:
                    self.m.add_implication(d.var, u)
                used.append(u)
            if spec.same_numa_node is Requirement.Required:
                c = self.m.add(sum(used) <= 1)
                literal = self.rule(
                    ("claim ", reasons.ClaimId(claim.uid), ": topology sameNUMANode is Required")
                )
                if literal is not None:
                    c.only_enforce_if(literal)
            else:
                self.built.secondary.extend((w, u) for u in used)
        if spec.same_nvlink_domain is not None:
            for a, b in itertools.combinations(vars_here, 2):
                if _linked(a.gpu, b.gpu):
                    continue
                if spec.same_nvlink_domain is Requirement.Required:
                    c = self.m.add(a.var + b.var <= 1)
                    literal = self.rule(
                        (
                            "claim ",
                            reasons.ClaimId(claim.uid),
                            ": topology sameNVLinkDomain is Required",
                        )
                    )
                    if literal is not None:
                        c.only_enforce_if(literal)
                else:
                    v = self.m.new_bool_var(f"nolink_{claim.ref}_{a.gpu.position}_{b.gpu.position}")
                    self.m.add(v >= a.var + b.var - 1)
                    self.built.secondary.append((w, v))

    # -- constraints ----------------------------------------------------------------------------

    def pairing(self) -> None:
        """A MIG claim with gpuClaimName goes on the GPU its paired GPU claim holds whole."""
        b = self.built
        for uid, claim in self.claims.items():
            if claim.paired_with is None:
                continue
            if claim.paired_with not in self.claims:
                # The GPU claim is allocated already: only the GPU it holds will do.
                for d in b.devices.get(uid, []):
                    if d.gpu.held_by != (claim.paired_with,):
                        self.m.add(d.var == 0)
                continue
            partner = {d.gpu.uuid: d.var for d in b.devices.get(claim.paired_with, [])}
            for d in b.devices.get(uid, []):
                holder = partner.get(d.gpu.uuid)
                if holder is None:
                    self.m.add(d.var == 0)
                else:
                    self.m.add_implication(d.var, holder)

    def same_gpu(self) -> None:
        """Claims sharing a `same_gpu` key use one GPU: each takes a device on a GPU exactly
        when the first of them does (a MIG claim takes one device, so its literals on one GPU
        sum to 0 or 1)."""
        groups: dict[str, list[str]] = {}
        for uid, claim in self.claims.items():
            if claim.request.same_gpu is not None:
                groups.setdefault(claim.request.same_gpu, []).append(uid)
        for members in groups.values():
            on = [self._per_gpu(uid) for uid in members]
            for other in on[1:]:
                for gpu in set(on[0]) | set(other):
                    self.m.add(sum(on[0].get(gpu, [])) == sum(other.get(gpu, [])))

    def device_constraints(self) -> None:
        """Claims sharing a DeviceConstraint key: on their node, the devices they take have one
        value (match) or pairwise different values (distinct); a device without a value is
        never taken."""
        groups: dict[str, list[tuple[Claim, DeviceConstraint]]] = {}
        for claim in self.claims.values():
            for constraint in claim.request.constraints:
                groups.setdefault(constraint.key, []).append((claim, constraint))
        for key, members in groups.items():
            per_node = self._valued(members)
            first, constraint = members[0]
            literal = self.rule(("claim ", reasons.ClaimId(first.uid), f": {constraint.label}"))
            for node, by_value in per_node.items():
                if constraint.evenly:
                    self._evenly(f"{key}_{node}", by_value, literal)
                elif constraint.distinct:
                    self._distinct(by_value, literal)
                else:
                    self._one_value(f"{key}_{node}", by_value, literal)

    def _valued(
        self, members: Sequence[tuple[Claim, DeviceConstraint]]
    ) -> dict[str, dict[str, list[cp_model.IntVar]]]:
        """node -> value -> the members' device literals with that value; literals of devices
        without a value are fixed to 0."""
        out: dict[str, dict[str, list[cp_model.IntVar]]] = {}
        for claim, constraint in members:
            values = constraint.value_of()
            taken = [
                (device_key(d), d.gpu.node, d.var) for d in self.built.devices.get(claim.uid, [])
            ]
            taken += [
                ((u.key, None, None), u.node, u.var) for u in self.built.units.get(claim.uid, [])
            ]
            for key, node, var in taken:
                value = values.get(key)
                if value is None:
                    self.m.add(var == 0)
                    continue
                out.setdefault(node, {}).setdefault(value, []).append(var)
        return out

    def _distinct(
        self, by_value: dict[str, list[cp_model.IntVar]], literal: cp_model.IntVar | None
    ) -> None:
        for literals in by_value.values():
            if len(literals) > 1:
                c = self.m.add(cp_model.LinearExpr.sum(literals) <= 1)
                if literal is not None:
                    c.only_enforce_if(literal)

    def _evenly(
        self,
        tag: str,
        by_value: dict[str, list[cp_model.IntVar]],
        literal: cp_model.IntVar | None,
    ) -> None:
        if len(by_value) < 2:
            return
        most = sum(len(literals) for literals in by_value.values())
        each = self.m.new_int_var(1, most, f"each_{tag}")
        for number, literals in enumerate(by_value.values()):
            used = self._any(literals, f"used_{tag}_{number}")
            enforced = [used] if literal is None else [used, literal]
            self.m.add(cp_model.LinearExpr.sum(literals) == each).only_enforce_if(enforced)

    def _one_value(
        self,
        tag: str,
        by_value: dict[str, list[cp_model.IntVar]],
        literal: cp_model.IntVar | None,
    ) -> None:
        if len(by_value) < 2:
            return
        chosen = []
        for number, literals in enumerate(by_value.values()):
            value = self.m.new_bool_var(f"value_{tag}_{number}")
            for d in literals:
                self.m.add_implication(d, value)
            chosen.append(value)
        c = self.m.add(cp_model.LinearExpr.sum(chosen) <= 1)
        if literal is not None:
            c.only_enforce_if(literal)

    def share_groups(self) -> None:
        """The shares of one ResourceClaim (`share_group`) spread over several GPUs of a node
        take GPUs no other share claim of their namespace uses, existing or new (the node
        plugin's MPS daemon serves one set of GPUs per namespace)."""
        groups: dict[str, list[DeviceVar]] = {}
        claims: dict[str, int] = {}
        for uid, claim in self.claims.items():
            if claim.kind is Kind.share and claim.request.share_group is not None:
                group = claim.request.share_group
                groups.setdefault(group, []).extend(self.built.devices.get(uid, []))
                claims[group] = claims.get(group, 0) + 1
        # The other shares of each GPU by namespace, looked up per GPU (not a pass over every
        # share of the model for every group, node and GPU: quadratic in the shares).
        shares: dict[tuple[str, int, str], list[DeviceVar]] = {}
        for ds in self.built.devices.values():
            for d in ds:
                if d.claim.kind is Kind.share:
                    where = (d.gpu.node, d.gpu.position, d.claim.namespace)
                    shares.setdefault(where, []).append(d)
        for number, (group, members) in enumerate(groups.items()):
            if claims[group] < 2:
                # One share claim takes one GPU: the group never spreads, and every constraint
                # below holds with `spread` 0 (v1 gives every share claim a group of its own).
                continue
            per_node: dict[str, list[DeviceVar]] = {}
            for d in members:
                per_node.setdefault(d.gpu.node, []).append(d)
            for node, here in per_node.items():
                self._spread_alone(f"{number}_{node}", here, shares)

    def _spread_alone(
        self,
        tag: str,
        members: list[DeviceVar],
        shares: dict[tuple[str, int, str], list[DeviceVar]],
    ) -> None:
        by_gpu: dict[int, list[DeviceVar]] = {}
        for d in members:
            by_gpu.setdefault(d.gpu.position, []).append(d)
        if len(by_gpu) < 2:
            return
        group = members[0].claim.request.share_group
        namespace = members[0].claim.namespace
        used = {
            position: self._any([d.var for d in ds], f"grp_{tag}_{position}")
            for position, ds in by_gpu.items()
        }
        spread = self.m.new_bool_var(f"spread_{tag}")
        self.m.add(cp_model.LinearExpr.sum(list(used.values())) - 1 <= len(used) * spread)
        for position, ds in by_gpu.items():
            gpu = ds[0].gpu
            if namespace in gpu.share_namespaces:
                self.m.add(used[position] + spread <= 1)
            others = [
                d.var
                for d in shares.get((gpu.node, position, namespace), [])
                if d.claim.request.share_group != group
            ]
            for other in others:
                self.m.add(other + used[position] + spread <= 2)

    def _per_gpu(self, uid: str) -> dict[tuple[str, int], list[cp_model.IntVar]]:
        out: dict[tuple[str, int], list[cp_model.IntVar]] = {}
        for d in self.built.devices.get(uid, []):
            out.setdefault((d.gpu.node, d.gpu.position), []).append(d.var)
        return out

    def gpu_capacity(self) -> None:
        per_gpu: dict[tuple[str, int], list[DeviceVar]] = {}
        for devices in self.built.devices.values():
            for d in devices:
                per_gpu.setdefault((d.gpu.node, d.gpu.position), []).append(d)
        for devices in per_gpu.values():
            self.on_time()
            self._one_gpu(devices[0].gpu, devices)

    def _one_gpu(self, gpu: GpuSlot, devices: list[DeviceVar]) -> None:
        whole = [d for d in devices if d.claim.kind is Kind.whole]
        shares = [d for d in devices if d.claim.kind is Kind.share]
        migs = [d for d in devices if d.claim.kind is Kind.mig]
        exclusive = [d.var for d in whole]
        if shares:
            weighted = cp_model.LinearExpr.weighted_sum
            share_vars = [d.var for d in shares]
            compute = weighted(share_vars, [d.claim.share_compute for d in shares])
            self.m.add(compute <= FULL_COMPUTE - gpu.share_compute_used)
            memory = weighted(share_vars, [d.claim.share_memory_mib for d in shares])
            self.m.add(memory <= gpu.memory_mib - gpu.share_memory_used_mib)
            if whole:
                # Shared or held whole, not both: one flag for "shared" keeps this linear.
                exclusive.append(self._any(share_vars, f"shared_{gpu.node}_{gpu.position}"))
            self._one_namespace(gpu, shares)
        if len(exclusive) > 1:
            self.m.add_at_most_one(exclusive)
        occupied: dict[int, cp_model.IntVar] = {}
        if migs:
            # One boolean per memory slice, the sum of the MIG literals covering it: no two
            # instances overlap, and the costs below read 8 literals instead of every option.
            for t, covering in sorted(_slice_groups(migs).items()):
                if len(covering) == 1:
                    occupied[t] = covering[0]
                    continue
                occupied[t] = self.m.new_bool_var(f"slice_{gpu.node}_{gpu.position}_{t}")
                self.m.add(cp_model.LinearExpr.sum(covering) == occupied[t])
            media = [d.var for d in migs if d.option is not None and d.option.media_extensions]
            if len(media) > 1:
                self.m.add_at_most_one(media)
            for w in whole:
                foreign = [d.var for d in migs if d.claim.paired_with != w.claim.uid]
                if foreign:
                    self.m.add(sum(foreign) == 0).only_enforce_if(w.var)
        self._gpu_costs(gpu, whole, shares, migs, occupied)

    def _one_namespace(self, gpu: GpuSlot, shares: list[DeviceVar]) -> None:
        """The new shares on a GPU are of one namespace (existing ones: `share_fits`)."""
        by_namespace: dict[str, list[cp_model.IntVar]] = {}
        for d in shares:
            by_namespace.setdefault(d.claim.namespace, []).append(d.var)
        if len(by_namespace) < 2:
            return
        tag = f"{gpu.node}_{gpu.position}"
        flags = [
            self._any(literals, f"ns_{tag}_{number}")
            for number, literals in enumerate(by_namespace.values())
        ]
        self.m.add(cp_model.LinearExpr.sum(flags) <= 1)

    def node_capacity(self) -> None:
        for name, node in self.nodes.items():
            self.on_time()
            pods = self._pods_on().get(name, [])
            for free, resource in ((node.cpu_free_milli, "cpu"), (node.memory_free_mib, "memory")):
                if free is None:
                    continue
                terms = [(_need(e, resource), v) for e, v in pods if _need(e, resource) > 0]
                if terms:
                    c = self.m.add(sum(n * v for n, v in terms) <= free)
                    literal = self.rule(("node ", reasons.NodeId(name), ": cpu/memory"))
                    if literal is not None:
                        c.only_enforce_if(literal)

    def _pods_on(self) -> dict[str, list[tuple[PodEntry, cp_model.IntVar]]]:
        """Node -> its pods' `at` literals, in the pods' order (one pass over the pairs, not
        one over every pod per node)."""
        if self._on_node is None:
            self._on_node = {}
            for entry in self.entries:
                for node in {n.name: n for n in entry.nodes}.values():
                    var = self.built.at[(entry.key, node.name)]
                    self._on_node.setdefault(node.name, []).append((entry, var))
        return self._on_node

    def budgets(self) -> None:
        b = self.built
        namespaces = sorted({c.namespace for c in self.claims.values()})
        for namespace in namespaces:
            mine = [d for uid, ds in b.devices.items() for d in ds]
            mine = [d for d in mine if d.claim.namespace == namespace]
            for limit in self.rules.limits_for(namespace):
                literal = self.rule(limit.label)
                if limit.gpus_left is not None:
                    gpus = [d.var for d in mine if d.claim.kind is not Kind.mig]
                    c = self.m.add(sum(gpus) <= limit.gpus_left)
                    if literal is not None:
                        c.only_enforce_if(literal)
                if limit.mig_slices_left is not None:
                    slices = [(d.option.size, d.var) for d in mine if d.option is not None]
                    c = self.m.add(sum(s * v for s, v in slices) <= limit.mig_slices_left)
                    if literal is not None:
                        c.only_enforce_if(literal)
            for budget in self.rules.reservation_budgets(namespace):
                touched: dict[tuple[str, int], list[cp_model.IntVar]] = {}
                for d in mine:
                    if d.gpu.untouched and demand.reservation_covers(budget.reservation, d.gpu):
                        touched.setdefault((d.gpu.node, d.gpu.position), []).append(d.var)
                if not touched:
                    continue
                flags = []
                for (node, position), vars_on_gpu in touched.items():
                    flag = self.m.new_bool_var(f"touch_{budget.reservation.name}_{node}_{position}")
                    for v in vars_on_gpu:
                        self.m.add_implication(v, flag)
                    flags.append(flag)
                c = self.m.add(sum(flags) <= budget.left)
                literal = self.rule(budget.label)
                if literal is not None:
                    c.only_enforce_if(literal)

    # -- objective ------------------------------------------------------------------------------

    def _gpu_costs(
        self,
        gpu: GpuSlot,
        whole: list[DeviceVar],
        shares: list[DeviceVar],
        migs: list[DeviceVar],
        occupied: dict[int, cp_model.IntVar],
    ) -> None:
        sec = self.built.secondary
        tag = f"{gpu.node}_{gpu.position}"
        # Groups of literals of which at most one is true, covering every use of the GPU:
        # a flag above each group's sum is 1 whenever the GPU is used (few, linear constraints).
        groups = [[d.var for d in whole], *([v] for v in occupied.values())]
        groups += [[d.var] for d in shares]
        opening = costs.gpu_open(gpu, self.rules)
        if opening:
            sec.append((opening, self._flag_over(groups, f"open_{tag}")))
        again = costs.gpu_again(gpu, self.rules)
        if again:
            sec.append((again, self._flag_over(groups, f"again_{tag}")))
        self._mig_fragmentation(gpu, whole, occupied)
        node = self.nodes[gpu.node]
        for d in (*whole, *shares, *migs):
            cost = costs.device_terms(d.claim, gpu, d.option, self.rules)
            if costs.priced(d.claim, self.rules) and costs.per_device(d.claim):
                cost += self._claim_workload(d.claim, node, [gpu.position])
            if cost:
                sec.append((cost, d.var))

    def _claim_workload(self, claim: Claim, node: NodeView, positions: list[int]) -> int:
        """costs.claim_workload beside the claim's pod's CPU and memory (`_pod_of`)."""
        cpu, memory = self._pod_of(claim)
        key = (node.name, cpu, memory)
        alone = self._alone.get(key)
        if alone is None:
            alone = costs.growth(node, {}, cpu, memory, self.rules)
            self._alone[key] = alone
        return costs.claim_workload(claim, node, positions, cpu, memory, self.rules, alone)

    def whole_workload(
        self,
        claim: Claim,
        node: NodeView,
        vars_here: list[DeviceVar],
        devices_here: cp_model.IntVar,
    ) -> None:
        """The workload part of a claim of k > 1 whole GPUs on the node: it depends only on how
        many GPUs of each `costs.whole_kind` the claim takes, so one boolean per composition
        (its sum is the claim's variable here) carries the part (`costs.py`)."""
        kinds: dict[tuple[object, ...], list[DeviceVar]] = {}
        for d in vars_here:
            kinds.setdefault(costs.whole_kind(d.gpu, self.rules), []).append(d)
        groups = list(kinds.values())
        ways = []
        for counts in costs.compositions(claim.count, [len(g) for g in groups]):
            taken = [d.gpu.position for n, g in zip(counts, groups, strict=True) for d in g[:n]]
            ways.append((counts, self._claim_workload(claim, node, taken)))
        sec = self.built.secondary
        if len(ways) == 1:
            if ways[0][1]:
                sec.append((ways[0][1], devices_here))
            return
        if not ways or all(cost == 0 for _, cost in ways):
            return
        tag = f"{claim.ref}_{node.name}"
        chosen = [self.m.new_bool_var(f"kinds_{tag}_{i}") for i in range(len(ways))]
        self.m.add(cp_model.LinearExpr.sum(chosen) == devices_here)
        for i, group in enumerate(groups):
            taken_here = cp_model.LinearExpr.sum([d.var for d in group])
            picked = cp_model.LinearExpr.weighted_sum(chosen, [counts[i] for counts, _ in ways])
            self.m.add(taken_here == picked)
        sec.extend((cost, z) for (_, cost), z in zip(ways, chosen, strict=True) if cost)

    def _pod_of(self, claim: Claim) -> tuple[int, int]:
        """The CPU and memory its device terms are priced beside: its pod's, when one pod of
        the model uses it; none when several do (each pod's own are priced per pod)."""
        pods = self.claim_pods[claim.uid]
        if len(pods) != 1:
            return 0, 0
        return pods[0].request.cpu_milli, pods[0].request.memory_mib

    def _mig_fragmentation(
        self, gpu: GpuSlot, whole: list[DeviceVar], occupied: dict[int, cp_model.IntVar]
    ) -> None:
        for (start, size), cost in costs.window_costs(gpu, self.rules).items():
            span = range(start, start + size)
            groups = [[occupied[t]] for t in span if t in occupied] + [[d.var] for d in whole]
            if not groups:
                continue
            blocked = self._flag_over(groups, f"block_{gpu.node}_{gpu.position}_{start}_{size}")
            self.built.secondary.append((cost, blocked))

    def _flag_over(self, groups: list[list[cp_model.IntVar]], name: str) -> cp_model.IntVar:
        """A boolean at least the sum of each group (each an at-most-one): 1 whenever one of
        the literals is; costs only push it down."""
        flag = self.m.new_bool_var(name)
        for group in groups:
            if len(group) == 1:
                self.m.add_implication(group[0], flag)
            elif group:
                self.m.add(cp_model.LinearExpr.sum(group) <= flag)
        return flag

    def _any(self, literals: Iterable[cp_model.IntVar], name: str) -> cp_model.IntVar:
        """A boolean that is 1 whenever one of the literals is (costs only push it down)."""
        return self._flag_over([[v] for v in dict.fromkeys(literals)], name)

    def node_costs(self) -> None:
        w = self.rules.weights
        b = self.built
        workload_memo: dict[tuple[int, int], int] = {}
        for name, node in self.nodes.items():
            self.on_time()
            here = self._pods_on().get(name, [])
            pods = [v for _, v in here]
            use = costs.node_use(node, self.rules)
            if use:
                b.secondary.append((use, self._any(pods, f"use_{name}")))
            if w.spread and len(pods) > 1:
                extra = self.m.new_int_var(0, len(pods), f"extra_{name}")
                self.m.add(extra >= sum(pods) - 1)
                b.secondary.append((w.spread, extra))
            each = costs.pod_on_node(node, self.rules)
            workload_memo.clear()
            for entry, v in here:
                request = entry.request
                shape = (request.cpu_milli, request.memory_mib)
                cpu_memory = workload_memo.get(shape)
                if cpu_memory is None:
                    cpu_memory = costs.pod_workload(node, *shape, self.rules)
                    workload_memo[shape] = cpu_memory
                if each + cpu_memory:
                    b.secondary.append((each + cpu_memory, v))

    def primary(self) -> None:
        b = self.built
        levels = PrimaryLevels.of([e.priority for e in self.entries], len(b.got))
        for index, entry in enumerate(self.entries):
            weight = levels.pod(entry.priority, index)
            b.pod_weight[entry.key] = weight
            b.primary.append((weight, b.placed[entry.key]))
        b.got_weight = levels.got
        b.primary.extend((levels.got, v) for v in b.got.values())

    def build(self) -> Built:
        self.pod_variables()
        self.claim_variables()
        self.pairing()
        self.same_gpu()
        self.device_constraints()
        self.share_groups()
        self.gpu_capacity()
        self.amounts()
        self.node_capacity()
        self.budgets()
        self.node_costs()
        self.primary()
        return self.built


def _slice_groups(migs: list[DeviceVar]) -> dict[int, list[cp_model.IntVar]]:
    """Memory slice -> the MIG literals covering it (at most one of them is true)."""
    groups: dict[int, list[cp_model.IntVar]] = {}
    for d in migs:
        assert d.option is not None
        for t in d.option.slices():
            groups.setdefault(t, []).append(d.var)
    return groups


def device_key(d: DeviceVar) -> DeviceKey:
    """The device a literal takes, as DeviceConstraint names it."""
    if d.option is None:
        return (d.gpu.info.uuid, None, None)
    return (d.gpu.info.uuid, d.option.profile, d.option.start)


def _devices(claim: Claim) -> str:
    """A device claim's need in words (a model rule's label)."""
    return f"{claim.count} device{'s' if claim.count > 1 else ''} of its request free on the node"


def _need(entry: PodEntry, resource: str) -> int:
    return entry.request.cpu_milli if resource == "cpu" else entry.request.memory_mib


def _linked(a: GpuSlot, b: GpuSlot) -> bool:
    return b.uuid in (a.info.nvlinkPeers or []) or a.uuid in (b.info.nvlinkPeers or [])


def build(
    entries: Sequence[PodEntry],
    rules: Rules,
    *,
    force_placed: bool = False,
    explain: bool = False,
    deadline: float | None = None,
) -> Built:
    """Compile the pods into a CP-SAT model. Pure: the model is returned, not solved.

    `deadline` (`time.monotonic()`): raise OutOfTime when building is not done by then."""
    builder = _Builder(entries, rules, force_placed=force_placed, explain=explain,
                       deadline=deadline)  # fmt: skip
    return builder.build()
