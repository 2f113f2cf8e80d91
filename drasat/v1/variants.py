"""The ways a pod's v1 claims can be satisfied, in order of preference, as solver claims.

Each request of a claim offers options: its alternatives (`exactly`, or each `firstAvailable`
entry in order), each split by the kind of device its selectors match (whole GPUs, then MIG
devices by profile, smallest first, and for a request of several MIG devices any matching
profiles, then the CPU fallback), `allocationMode: All` split by how
many devices a node has, a share split by what it consumes of each GPU (what it leaves out it
takes as the published capacity's default says: all of the memory, none of the compute). An
option carries the very devices it may use (selectors evaluated per device, MIG placements
included), so the solver never takes a device the request's selectors reject.

A claim's `matchAttribute` and `distinctAttribute` constraints go to the solver as
DeviceConstraints over the devices' values of the attribute, evaluated on the devices it
chooses, as upstream's allocator evaluates them: a device without the attribute is never used
for a request the constraint covers. A request's several shares take distinct devices.

A pod's variants are the combinations of its requests' options, ordered by how far they are from
everyone's first choice, at most `MAX_VARIANTS`. This is a purely computational module.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drasat.api import nodefit
from drasat.api.devicemodel import shares
from drasat.api.quantity import base_units, to_bytes
from drasat.api.sharing import GpuShare
from drasat.solver import ClaimRequest, DeviceConstraint, DeviceDemand, GpuDemand, MigDemand
from drasat.solver.problem import DeviceKey
from drasat.v1 import cel, otherdevices, publisheddevices
from drasat.v1.publisheddevices import Published
from drasat.v1.requests import ALL, Alternative, AttributeConstraint, Claim
from drasat.v1.slices import BLOCKING_EFFECTS

#: The most variants tried for one pod; the rest are not (said in the refusal).
MAX_VARIANTS = 16


@dataclass(frozen=True)
class Option:
    """One way to satisfy one request on some nodes."""

    claim: Claim
    request: str
    alternative: Alternative
    kind: str
    count: int = 1
    profile: str | None = None
    share: GpuShare | None = None
    #: The devices it may use: the selectors match them, they hold the attributes of the
    #: claim's constraints that cover the request, and their capacity covers the request's.
    devices: tuple[Published, ...] = ()
    #: The nodes it is limited to; None: any node with one of its devices.
    nodes: frozenset[str] | None = None
    #: Whole GPUs: the request asks for MIG mode (`Devices.asks_mig_mode`) and some eligible
    #: GPU is in it (published whole, consuming all its counters), so the solver may give it
    #: whole; otherwise it keeps whole claims off MIG-enabled GPUs.
    mig_gpus: bool = False
    #: Derived data of `devices` (eligible GPUs, placements, constraint values), shared by the
    #: copies of an option rebound to another claim of the same spec (`dataclasses.replace`
    #: keeps it), so that a thousand claims of one template compute it once; an option made
    #: with other devices gets a fresh one (`_with`).
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def eligible(self) -> frozenset[str]:
        """GPU UUIDs (MIG: parents) it may use (one object for the copies of the option: the
        solver's memo keys compare it by identity first)."""
        found = self.memo.get("eligible")
        if found is None:
            found = self.memo["eligible"] = frozenset(str(d.gpu_uuid) for d in self.devices)
        return found

    @property
    def placements(self) -> frozenset[tuple[str, str, int]]:
        """MIG: the (parent UUID, profile, start) devices it may take (one object, as
        `eligible`)."""
        found = self.memo.get("placements")
        if found is None:
            found = frozenset(
                (str(d.gpu_uuid), str(d.profile), int(d.start or 0)) for d in self.devices
            )
            self.memo["placements"] = found
        return found

    @property
    def constraints(self) -> tuple[tuple[int, AttributeConstraint], ...]:
        """The claim's constraints (by index) that cover this option's devices."""
        return tuple(
            (i, c)
            for i, c in enumerate(self.claim.constraints)
            if c.covers(self.request, self.alternative.result_name)
        )


@dataclass(frozen=True)
class Variant:
    """One combination: the solver claims of the pod and what each stands for."""

    claims: tuple[ClaimRequest, ...]
    #: solver claim uid -> the option it places.
    options: Mapping[str, Option]
    #: Requests satisfied by the CPU fallback: (option, nodes that offer it).
    fallback: tuple[Option, ...] = ()
    nodes: frozenset[str] | None = None
    label: str = ""


@dataclass
class Devices:
    """Every published device, by node, with the selectors' memo."""

    by_node: Mapping[str, Sequence[Published]]
    _matched: dict[tuple[object, ...], list[Published]] = field(default_factory=dict)
    _failing: dict[tuple[object, ...], frozenset[str]] = field(default_factory=dict)
    _mig_mode: dict[tuple[object, ...], bool] = field(default_factory=dict)
    #: Each node with its layout: the kinds (`Published.kind_id`) of its devices in order.
    _layouts: list[tuple[str, Sequence[Published], tuple[int, ...]]] | None = None

    def _with_layouts(self) -> list[tuple[str, Sequence[Published], tuple[int, ...]]]:
        """The nodes with their layouts, read once: most nodes of a cluster publish the same
        kinds in the same order (one GPU model, one MIG mode), so a selector that does not
        read which device it is gets one answer per layout, not one per device."""
        if self._layouts is None:
            self._layouts = [
                (node, devices, tuple([d.kind_id for d in devices]))
                for node, devices in self.by_node.items()
            ]
        return self._layouts

    def matching(self, alternative: Alternative) -> list[Published]:
        """The devices the alternative's selectors admit (the class's, then the request's).

        A selector that fails on a device is no "no match" to kube-scheduler's allocator: it
        fails the claim when its search reaches that device, which it does in the order a node
        publishes its devices, once the devices before it did not do. So a node's devices after
        the first one a selector fails on are left out: placed on the ones before it, the claim
        is what upstream allocates; needing more, it is refused there as upstream fails it."""
        key = tuple(s.expression for s in alternative.selectors)
        found = self._matched.get(key)
        if found is None:
            if any(s.by_identity for s in alternative.selectors):
                found, failing = self._match_each(alternative)
            else:
                found, failing = self._match_by_layout(alternative)
            self._matched[key] = found
            self._failing[key] = frozenset(failing)
        return found

    def _match_each(self, alternative: Alternative) -> tuple[list[Published], set[str]]:
        """`matching` device by device (a selector reads which device it is)."""
        found: list[Published] = []
        failing: set[str] = set()
        for node, node_devices in self.by_node.items():
            for d in node_devices:
                result = cel.evaluate_all(alternative.selectors, d.driver, d.device, d.kind_id)
                if isinstance(result, cel.Failure):
                    failing.add(node)
                    break
                if result is True:
                    found.append(d)
        return found, failing

    def _match_by_layout(self, alternative: Alternative) -> tuple[list[Published], set[str]]:
        """`matching` where devices of one kind get one answer (evaluated on the first device
        of the kind met, in node order): per layout, which positions match and whether one
        fails, then each node's devices at those positions, in node order."""
        by_kind: dict[int, bool | cel.Failure] = {}
        #: layout -> (positions of the matching devices before any failing one, whether one
        #: fails).
        by_layout: dict[tuple[int, ...], tuple[tuple[int, ...], bool]] = {}
        found: list[Published] = []
        failing: set[str] = set()
        for node, node_devices, layout in self._with_layouts():
            answer = by_layout.get(layout)
            if answer is None:
                positions: list[int] = []
                fails = False
                for position, kind in enumerate(layout):
                    result = by_kind.get(kind)
                    if result is None:
                        d = node_devices[position]
                        result = cel.evaluate_all(alternative.selectors, d.driver, d.device, kind)
                        by_kind[kind] = result
                    if isinstance(result, cel.Failure):
                        fails = True
                        break
                    if result is True:
                        positions.append(position)
                answer = by_layout[layout] = (tuple(positions), fails)
            positions_of, fails = answer
            if fails:
                failing.add(node)
            found.extend([node_devices[i] for i in positions_of])
        return found, failing

    def failing(self, alternative: Alternative) -> frozenset[str]:
        """The nodes where one of the alternative's selectors fails on some device."""
        self.matching(alternative)
        return self._failing[tuple(s.expression for s in alternative.selectors)]

    def asks_mig_mode(self, alternative: Alternative, gpus: Sequence[Published]) -> bool:
        """Whether the alternative asks for a GPU in MIG mode: its selectors admit one of these
        MIG-enabled GPUs and not the same GPU out of MIG mode (`migEnabled` false). The one rule
        by which a GPU in MIG mode goes whole, on drasat's devices and NVIDIA's alike, as a
        classic claim asks `migEnabled: true` (`claimspec.selects_mig_mode`): a container
        handed a MIG-mode GPU with no GPU instance cannot run CUDA on it. A device whose driver
        publishes no `migEnabled` (NVIDIA's) cannot be asked for so."""
        key = tuple(s.expression for s in alternative.selectors)
        # Devices of one kind hold the same attributes, and the memo answers per kind: the
        # first device of each kind stands for the others, unless a selector reads which
        # device it is (then each device answers for itself).
        each = any(s.by_identity for s in alternative.selectors)
        kinds: set[int] = set()
        for d in gpus:
            if d.kind_id in kinds:
                continue
            if not each:
                kinds.add(d.kind_id)
            if d.attribute("migEnabled") is not True:
                continue
            memo: tuple[object, ...] = (
                (key, d.kind_id, d.pool, d.name) if each else (key, d.kind_id)
            )
            found = self._mig_mode.get(memo)
            if found is None:
                attributes = d.device.get("attributes") or {}
                out_of_mig = {k: {"bool": False} for k in attributes
                              if k.rpartition("/")[2] == "migEnabled"}  # fmt: skip
                twin = {**d.device, "attributes": {**attributes, **out_of_mig}}
                found = cel.evaluate_all(alternative.selectors, d.driver, twin) is not True
                self._mig_mode[memo] = found
            if found:
                return True
        return False


def _nodes_of(found: Sequence[Published]) -> frozenset[str]:
    return frozenset(d.pool for d in found)


def _has_attributes(found: Sequence[Published], constraints: Sequence[str]) -> list[Published]:
    """The devices that hold every attribute (upstream: a device without it fails the
    constraint)."""
    if not constraints:
        return list(found)
    return [d for d in found if all(d.typed(a) is not None for a in constraints)]


def _capacity_of(device: Published, name: str) -> int | None:
    """A published capacity in its base unit, however big (one over 64 bits, kept as its text,
    covers any request)."""
    entry = (device.device.get("capacity") or {}).get(name)
    if not isinstance(entry, dict) or "value" not in entry:
        return None
    return base_units(str(entry["value"]))


def default_consumed(device: Published, name: str) -> int:
    """What a request that leaves capacity `name` out consumes of the device: its request
    policy's default, else all of it (upstream's `fillEmptyRequest`); 0 when not published."""
    entry = (device.device.get("capacity") or {}).get(name)
    if not isinstance(entry, dict):
        return 0
    default = (entry.get("requestPolicy") or {}).get("default")
    return to_bytes(str(default if default is not None else entry.get("value", 0)))


def _fits_capacity(found: Sequence[Published], capacity: Mapping[str, int]) -> list[Published]:
    """The devices whose published capacity covers each capacity request (upstream skips a
    device that lacks a requested capacity or has too little of it)."""
    # A device's kind holds its capacities' values (`cel.kind_key`): one answer per kind.
    by_kind: dict[int, bool] = {}
    out = []
    for d in found:
        fits = by_kind.get(d.kind_id)
        if fits is None:
            values = [_capacity_of(d, name) for name in capacity]
            fits = all(
                v is not None and v >= capacity[n] for v, n in zip(values, capacity, strict=True)
            )
            by_kind[d.kind_id] = fits
        if fits:
            out.append(d)
    return out


def request_options(claim: Claim, request_index: int, catalog: Devices) -> list[Option]:
    """Every option of one request, best first."""
    request = claim.requests[request_index]
    out: list[Option] = []
    #: Nodes where an earlier entry's selectors fail on a device: upstream's search fails the
    #: claim there rather than try the next `firstAvailable` entry.
    stopped: frozenset[str] = frozenset()
    for alternative in request.alternatives:
        base = Option(claim, request.name, alternative, publisheddevices.GPU)
        attributes = [c.attribute for _, c in base.constraints]
        failing = catalog.failing(alternative)
        # `All` evaluates every device of the node first: any failure fails the claim there.
        left_out = stopped | failing if alternative.mode == ALL else stopped
        matched = [d for d in catalog.matching(alternative) if d.pool not in left_out]
        stopped |= failing
        all_set = _all_set(alternative, matched) if alternative.mode == ALL else []
        if all_set:
            stopped |= _constraint_errors(base, all_set, catalog)
        found = _has_attributes(matched, attributes)
        by_kind: dict[str, list[Published]] = {
            publisheddevices.GPU: [],
            publisheddevices.MIG: [],
            publisheddevices.OTHER: [],
            publisheddevices.FALLBACK: [],
        }
        for d in found:
            bucket = by_kind.get(d.kind)
            if bucket is not None:
                bucket.append(d)
        gpus = by_kind[publisheddevices.GPU]
        migs = by_kind[publisheddevices.MIG]
        others = by_kind[publisheddevices.OTHER]
        fallbacks = by_kind[publisheddevices.FALLBACK]
        mig_mode = catalog.asks_mig_mode(alternative, gpus)
        options = _gpu_options(base, gpus, mig_mode) + _mig_options(base, migs)
        options += _other_options(base, others)
        if alternative.mode == ALL:
            options = _whole_sets(options, all_set)
        out.extend(options)
        if fallbacks and not _constrained_across(base):
            out.append(
                _with(
                    base,
                    kind=publisheddevices.FALLBACK,
                    count=0,
                    devices=tuple(fallbacks),
                    nodes=_nodes_of(fallbacks),
                )
            )
    return out


def _all_set(alternative: Alternative, matched: Sequence[Published]) -> list[Published]:
    """The devices upstream's `allocationMode: All` takes on each node: every device the
    selectors match whose published capacity covers the request (the CPU fallback aside)."""
    found = [d for d in matched if d.kind != publisheddevices.FALLBACK]
    capacity = dict(alternative.capacity)
    return _fits_capacity(found, capacity) if capacity else found


def all_entry_errors(
    claim: Claim, request: str, alternative: Alternative, catalog: Devices
) -> list[str]:
    """The nodes (sorted) where a claim constraint refuses a device of this `All` entry, which
    fails the claim there (`_constraint_errors`); none for another mode."""
    if alternative.mode != ALL:
        return []
    base = Option(claim, request, alternative, publisheddevices.GPU)
    return sorted(
        _constraint_errors(base, _all_set(alternative, catalog.matching(alternative)), catalog)
    )


def _constraint_errors(
    base: Option, all_set: Sequence[Published], catalog: Devices
) -> frozenset[str]:
    """The nodes where upstream's allocator fails the claim on this `All` entry's own devices
    rather than try the next `firstAvailable` entry. It takes the node's `All` set in order,
    each device as one it must have (`allocateDevice` with `must` set, called by `allocateOne`
    in k8s.io/dynamic-resource-allocation structured/internal/incubating/
    allocator_incubating.go; stable's is alike): a claim constraint refusing one (the
    attribute missing, a second value for `matchAttribute`, a repeated one for
    `distinctAttribute`) is an error, which `allocateOne`'s loop over the subrequests returns
    at once, not a failure it moves on from. A device refused before that check (an
    untolerated taint, counters the set's earlier devices used up) is such a failure: no
    error. Which devices other claims hold is not known here: the node is taken as free."""
    constraints = [c for _, c in base.constraints]
    if not constraints:
        return frozenset()
    by_node: dict[str, list[Published]] = {}
    for d in all_set:
        by_node.setdefault(d.pool, []).append(d)
    out = set()
    for node, devices in by_node.items():
        limits = _counter_limits(catalog.by_node.get(node) or ())
        seen: list[list[tuple[str, object]]] = [[] for _ in constraints]
        drawn: dict[tuple[str, str], int] = {}
        for d in devices:
            if not _tolerated(d, base.alternative.tolerations):
                break
            for counter, amount in _drawn_counters(d).items():
                drawn[counter] = drawn.get(counter, 0) + amount
            if any(drawn[c] > limits.get(c, 0) for c in _drawn_counters(d)):
                break
            values = [d.typed(c.attribute) for c in constraints]
            if not all(_admits(c, s, v) for c, s, v in zip(constraints, seen, values, strict=True)):
                out.add(node)
                break
            for s, v in zip(seen, values, strict=True):
                if v is not None:
                    s.append(v)
    return frozenset(out)


def _admits(
    constraint: AttributeConstraint, seen: Sequence[tuple[str, object]], value: object
) -> bool:
    """Whether the constraint takes a device of this typed value after devices of `seen`."""
    if value is None:
        return False
    if constraint.distinct:
        return value not in seen
    return not seen or value == seen[0]


def _drawn_counters(device: Published) -> dict[tuple[str, str], int]:
    """(counter set, counter) -> what the device draws of it."""
    out = {}
    for entry in device.device.get("consumesCounters") or []:
        for name, counter in (entry.get("counters") or {}).items():
            out[(str(entry.get("counterSet")), str(name))] = base_units(
                str((counter or {}).get("value", "0"))
            )
    return out


def _counter_limits(devices: Sequence[Published]) -> dict[tuple[str, str], int]:
    """Each counter's amount, as the most one device of the node draws of it: the whole GPU
    draws its counter set in full (drasat's slices and NVIDIA's alike)."""
    out: dict[tuple[str, str], int] = {}
    for d in devices:
        for counter, amount in _drawn_counters(d).items():
            out[counter] = max(out.get(counter, 0), amount)
    return out


def _whole_sets(options: list[Option], all_set: Sequence[Published]) -> list[Option]:
    """The `All` options limited to the nodes where they take every device of the node's
    `All` set (upstream fails the request on a node where one of them cannot be taken: it
    lacks a constraint's attribute, or it is of another kind than the others)."""
    totals: dict[str, int] = {}
    for d in all_set:
        totals[d.pool] = totals.get(d.pool, 0) + 1
    out = []
    for option in options:
        per_node: dict[str, int] = {}
        for d in option.devices:
            per_node[d.pool] = per_node.get(d.pool, 0) + 1
        candidates = option.nodes if option.nodes is not None else frozenset(per_node)
        nodes = frozenset(n for n in candidates if per_node.get(n, 0) == totals.get(n, 0))
        if nodes:
            out.append(_with(option, nodes=nodes))
    return out


def _constrained_across(option: Option) -> bool:
    """Whether a constraint ties this request's devices to other devices: the CPU fallback is
    not placed by the solver, which enforces the constraints, so it is left out then."""
    return any(
        any(
            c.covers(r.name, a.result_name)
            for r in option.claim.requests
            if r.name != option.request
            for a in r.alternatives
        )
        for _, c in option.constraints
    )


def _gpu_options(base: Option, gpus: list[Published], mig_mode: bool) -> list[Option]:
    if not gpus:
        return []
    capacity = dict(base.alternative.capacity)
    if not capacity:
        return _whole_options(base, gpus, mig_mode)
    gpus = _fits_capacity(gpus, capacity)
    shareable = [d for d in gpus if d.device.get("allowMultipleAllocations")]
    # A device that takes one allocation is allocated whole, whatever the request asks of it.
    exclusive = [d for d in gpus if not d.device.get("allowMultipleAllocations")]
    return _share_options(base, shareable, capacity) + _whole_options(base, exclusive, mig_mode)


def _counts(base: Option, found: list[Published]) -> list[tuple[int, frozenset[str] | None]]:
    """(devices per solver claim, nodes): the request's count, or for `All` one entry per
    number of matching devices a node has (those nodes), most first."""
    if base.alternative.mode != ALL:
        return [(base.alternative.count, None)]
    per_node: dict[str, int] = {}
    for d in found:
        per_node[d.pool] = per_node.get(d.pool, 0) + 1
    by_count: dict[int, set[str]] = {}
    for node, n in per_node.items():
        by_count.setdefault(n, set()).add(node)
    return [(n, frozenset(nodes)) for n, nodes in sorted(by_count.items(), reverse=True)]


def _whole_options(base: Option, gpus: list[Published], mig_mode: bool) -> list[Option]:
    if not gpus:
        return []
    return [
        _with(base, count=n, devices=tuple(gpus), nodes=nodes, mig_gpus=mig_mode)
        for n, nodes in _counts(base, gpus)
    ]


def _share_options(
    base: Option, gpus: list[Published], capacity: Mapping[str, int]
) -> list[Option]:
    """A share consumes what it asks and, of each capacity it leaves out, the device's request
    policy default (upstream's allocator does the same): drasat's devices default to all of
    the memory and none of the compute. One option per distinct consumption."""
    if not gpus:
        return []
    taken: dict[tuple[int, int], list[Published]] = {}
    for d in gpus:
        memory = capacity.get(shares.MEMORY, default_consumed(d, shares.MEMORY))
        compute = capacity.get(shares.COMPUTE, default_consumed(d, shares.COMPUTE))
        taken.setdefault((memory, compute), []).append(d)
    return [
        _with(
            base,
            count=n,
            share=GpuShare(compute=compute or None, memory=memory),
            devices=tuple(found),
            nodes=nodes,
        )
        for (memory, compute), found in sorted(taken.items())
        for n, nodes in _counts(base, found)
    ]


def _mig_options(base: Option, migs: list[Published]) -> list[Option]:
    """One option per profile, smallest first (the devices of one request alike where they
    can be); then, when the request takes several devices and its selectors admit several
    profiles, one option of every matching device, any profile (upstream takes any devices
    the selectors match: two on a GPU whose free ones are a 3g and a 2g are those two)."""
    if not migs:
        return []
    by_profile: dict[str, list[Published]] = {}
    for d in migs:
        by_profile.setdefault(str(d.profile), []).append(d)

    def size(profile: str) -> tuple[int, str]:
        return _capacity_of(by_profile[profile][0], "memory") or 0, profile

    # `All`: every placement of the profile on the node, as many MIG devices (`_whole_sets`
    # keeps the nodes where they are all the node's matching devices; overlapping placements
    # then fail in the solver, as they exhaust upstream's counters).
    out = [
        _with(
            base,
            kind=publisheddevices.MIG,
            count=n,
            profile=profile,
            devices=tuple(by_profile[profile]),
            nodes=nodes,
        )
        for profile in sorted(by_profile, key=size)
        for n, nodes in _counts(base, by_profile[profile])
    ]
    several = base.alternative.mode == ALL or base.alternative.count > 1
    if several and len(by_profile) > 1:
        out += [
            _with(base, kind=publisheddevices.MIG, count=n, devices=tuple(migs), nodes=nodes)
            for n, nodes in _counts(base, migs)
        ]
    return out


def _other_options(base: Option, others: list[Published]) -> list[Option]:
    """Other drivers' devices the request may take: those whose taints it tolerates and whose
    capacity (and request policy) admits what it asks (`otherdevices.draws`)."""
    alternative = base.alternative
    requested = dict(alternative.capacity)
    usable = [
        d
        for d in others
        if _tolerated(d, alternative.tolerations) and otherdevices.draws(d, requested) is not None
    ]
    if not usable:
        return []
    return [
        _with(base, kind=publisheddevices.OTHER, count=n, devices=tuple(usable), nodes=nodes)
        for n, nodes in _counts(base, usable)
    ]


def _tolerated(device: Published, tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the request tolerates every taint of the device that keeps allocations off it
    (upstream's allocator skips a device with a NoSchedule or NoExecute taint the request does
    not tolerate)."""
    return all(
        taint.get("effect") not in BLOCKING_EFFECTS or nodefit.tolerates(list(tolerations), taint)
        for taint in device.device.get("taints") or []
    )


def _with(base: Option, **changes: Any) -> Option:
    """A copy of `base` with `changes`. Other devices get their own memo: what it holds is
    derived from the devices (sibling options of one request, a profile or a consumption each,
    once shared the first one's placements and eligible GPUs)."""
    if "devices" in changes:
        changes["memo"] = {}
    return dataclasses.replace(base, **changes)


# -- variants ------------------------------------------------------------------------------------


def claim_variants(claim: Claim, catalog: Devices) -> list[list[Option]]:
    """The claim's combinations of request options (each a list, one option per request),
    best first; none when some request has no option."""
    per_request: list[list[Option]] = []
    for i in range(len(claim.requests)):
        options = request_options(claim, i, catalog)
        if not options:
            return []
        per_request.append(options)
    return [[per_request[i][k] for i, k in enumerate(combo)] for combo in _ranked(per_request)]


def _ranked(per_request: Sequence[Sequence[Option]]) -> list[tuple[int, ...]]:
    combos = itertools.islice(
        itertools.product(*(range(len(o)) for o in per_request)), MAX_VARIANTS * 8
    )
    return sorted(combos, key=lambda c: (sum(c), c))[:MAX_VARIANTS]


# -- solver claims -------------------------------------------------------------------------------


def _value(device: Published, attribute: str) -> str:
    typed = device.typed(attribute)
    assert typed is not None  # options hold only devices with their constraints' attributes
    return f"{typed[0]}:{typed[1]}"


def _device_key(device: Published) -> DeviceKey:
    if device.kind == publisheddevices.MIG:
        return (str(device.gpu_uuid), device.profile, device.start)
    if device.kind == publisheddevices.OTHER:
        return (device.key, None, None)
    return (str(device.gpu_uuid), None, None)


def choices(option: Option) -> tuple[tuple[str, otherdevices.Draws], ...]:
    """An option of other drivers' devices: each device by key and what taking it draws (one
    object for the copies of the option, as `eligible`)."""
    found = option.memo.get("choices")
    if found is None:
        requested = dict(option.alternative.capacity)
        found = tuple((d.key, otherdevices.draws(d, requested) or ()) for d in option.devices)
        option.memo["choices"] = found
    return found


def device_constraints(option: Option) -> tuple[DeviceConstraint, ...]:
    """The solver's form of the claim's constraints covering the option, plus, for several
    shares of one request, that they take distinct devices (upstream never gives one request
    one device twice)."""
    out = []
    for index, constraint in option.constraints:
        memo_key = f"values/{constraint.attribute}"
        values = option.memo.get(memo_key)
        if values is None:
            values = tuple(
                sorted((_device_key(d), _value(d, constraint.attribute)) for d in option.devices)
            )
            option.memo[memo_key] = values
        out.append(
            DeviceConstraint(
                key=f"{option.claim.uid}/constraints[{index}]",
                distinct=constraint.distinct,
                values=values,
                label=f"{constraint.label} ({constraint.field}) cannot hold on the free devices",
            )
        )
    if option.share is not None and option.count > 1:
        values = sorted((_device_key(d), str(d.gpu_uuid)) for d in option.devices)
        out.append(
            DeviceConstraint(
                key=f"{option.claim.uid}/{option.request}/distinct",
                distinct=True,
                values=tuple(values),
                label=f"request {option.request} needs {option.count} distinct devices",
            )
        )
    return tuple(out)


def solver_claims(options: Sequence[Option]) -> tuple[list[ClaimRequest], dict[str, Option]]:
    """The solver claims of some options (fallbacks excluded) and what each stands for."""
    claims: list[ClaimRequest] = []
    meaning: dict[str, Option] = {}
    evenly = _evenly_shares(options)
    for o in options:
        if o.kind == publisheddevices.FALLBACK:
            continue
        extra = evenly.get(o.claim.uid) if o.share is not None else None
        for uid, request in _solver_claims(o, () if extra is None else (extra,)):
            claims.append(request)
            meaning[uid] = o
    return claims, meaning


def share_compute(share: GpuShare) -> int | None:
    """The compute limit the node plugin gives a share (None: no limit; 100 at most)."""
    return min(100, share.compute) if share.compute else None


def _evenly_shares(options: Sequence[Option]) -> dict[str, DeviceConstraint]:
    """claim uid -> an `evenly` constraint over its shares' GPUs, for a claim of several shares
    with a compute limit below 100%: the node plugin gives a claim's shares on one GPU the sum
    of their limits, and one limit to all of the claim's GPUs, so each GPU it uses must hold as
    many of its shares."""
    by_claim: dict[str, list[Option]] = {}
    for o in options:
        if o.share is not None:
            by_claim.setdefault(o.claim.uid, []).append(o)
    out = {}
    for uid, shares_of_claim in by_claim.items():
        limits = {share_compute(o.share) for o in shares_of_claim if o.share is not None}
        several = sum(o.count for o in shares_of_claim) > 1
        if several and limits and all(limit is not None and limit < 100 for limit in limits):
            found = {_device_key(d): str(d.gpu_uuid) for o in shares_of_claim for d in o.devices}
            values = sorted(found.items())
            out[uid] = DeviceConstraint(
                key=f"{uid}/shares-evenly",
                distinct=False,
                evenly=True,
                values=tuple(values),
                label="shares spread evenly over their GPUs (one compute limit per claim)",
            )
    return out


def _solver_claims(
    o: Option, extra: tuple[DeviceConstraint, ...] = ()
) -> list[tuple[str, ClaimRequest]]:
    label = o.claim.name if len(o.claim.requests) == 1 else f"{o.claim.name}/{o.request}"
    base = f"{o.claim.uid}/{o.request}"
    constraints = device_constraints(o) + extra
    if o.kind == publisheddevices.OTHER:
        wanted = DeviceDemand(count=o.count, choices=choices(o))
        request = ClaimRequest(
            base, o.claim.namespace, label, device=wanted, constraints=constraints
        )
        return [(base, request)]
    if o.kind == publisheddevices.GPU and o.share is None:
        # v1 publishes MIG-enabled GPUs whole too: the solver gives those of the eligible set
        # whole only to a request that asks for MIG mode.
        spec = GpuDemand(count=o.count, mig_mode_gpus_allowed=o.mig_gpus)
        request = ClaimRequest(
            base, o.claim.namespace, label, gpu=spec, eligible=o.eligible, constraints=constraints
        )
        return [(base, request)]
    out = []
    for i in range(o.count):
        # One share or MIG device per solver claim; a lone share keeps the request's key.
        uid = base if o.share is not None and o.count == 1 else f"{base}#{i}"
        if o.share is not None:
            gpu = GpuDemand(count=1, share=o.share)
            request = ClaimRequest(
                uid,
                o.claim.namespace,
                label,
                gpu=gpu,
                eligible=o.eligible,
                share_group=o.claim.uid,
                constraints=constraints,
            )
        else:
            mig = MigDemand(profile=o.profile)
            request = ClaimRequest(
                uid,
                o.claim.namespace,
                label,
                mig=mig,
                eligible=o.eligible,
                placements=o.placements,
                constraints=constraints,
            )
        out.append((uid, request))
    return out
