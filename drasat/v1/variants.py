"""The ways a pod's v1 claims can be satisfied, in order of preference, as solver claims.

Each request of a claim offers options: its alternatives (`exactly`, or each `firstAvailable`
entry in order), each split by the kind of device its selectors match (whole GPUs, then MIG
devices by profile, smallest first, then the CPU fallback), `allocationMode: All` split by how
many devices a node has, a share that leaves memory out split by GPU memory size (what it leaves
out it takes whole, as the published capacity's default says). A claim's `matchAttribute`
constraints are honoured in the solver where it can (`numaNode` within one request: topology
sameNUMANode Required; MIG devices on one parent GPU: the solver's `same_gpu`) and otherwise
by splitting the devices by the attribute's value.

A pod's variants are the combinations of its requests' options, ordered by how far they are from
everyone's first choice, at most `MAX_VARIANTS`. This is a purely computational module.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drasat.api.claims import (
    GpuClaimParametersSpec,
    GpuShare,
    MigDeviceClaimParametersSpec,
    Requirement,
    Topology,
)
from drasat.api.devicemodel import shares
from drasat.api.quantity import to_bytes
from drasat.api.selectors import GpuSelector
from drasat.solver import ClaimRequest
from drasat.v1 import devices
from drasat.v1.devices import Published
from drasat.v1.requests import ALL, Alternative, Claim, ClaimError, MatchAttribute

#: The most variants tried for one pod; the rest are not (said in the refusal).
MAX_VARIANTS = 16
#: The most values of one matchAttribute that are tried.
MAX_VALUES = 8

_SAME_GPU = ("parentUUID", "uuid", "parentMinor", "parentIndex")
_NUMA = "numaNode"


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
    #: GPU UUIDs (MIG: parents) the option may use.
    eligible: frozenset[str] = frozenset()
    #: The nodes it is limited to; None: any node with an eligible device.
    nodes: frozenset[str] | None = None
    numa: bool = False
    #: MIG devices with the same key go on one parent GPU (the solver's `same_gpu`).
    same_gpu: str | None = None
    #: Whole GPUs: some eligible GPU is MIG-enabled (published whole, consuming all its
    #: counters), so the solver must not keep whole claims off MIG-enabled GPUs.
    mig_gpus: bool = False


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

    def matching(self, alternative: Alternative) -> list[Published]:
        key = tuple(s.expression for s in alternative.selectors)
        found = self._matched.get(key)
        if found is None:
            found = [
                d
                for node_devices in self.by_node.values()
                for d in node_devices
                if all(s.matches(d.driver, d.device) for s in alternative.selectors)
            ]
            self._matched[key] = found
        return found


def _nodes_of(found: Sequence[Published]) -> frozenset[str]:
    return frozenset(d.pool for d in found)


def _by_value(found: Sequence[Published], attribute: str | None, value: object) -> list[Published]:
    if attribute is None:
        return list(found)
    return [d for d in found if d.attribute(attribute) == value]


def request_options(
    claim: Claim,
    request_index: int,
    catalog: Devices,
    restrict: Callable[[Sequence[Published]], list[Published]],
    *,
    numa: bool,
) -> list[Option]:
    """Every option of one request, best first."""
    request = claim.requests[request_index]
    out: list[Option] = []
    for alternative in request.alternatives:
        found = restrict(catalog.matching(alternative))
        gpus = [d for d in found if d.kind == devices.GPU]
        migs = [d for d in found if d.kind == devices.MIG]
        fallbacks = [d for d in found if d.kind == devices.FALLBACK]
        base = Option(claim, request.name, alternative, devices.GPU)
        out.extend(_gpu_options(base, gpus, numa))
        out.extend(_mig_options(base, migs))
        if fallbacks:
            out.append(
                Option(
                    claim,
                    request.name,
                    alternative,
                    devices.FALLBACK,
                    0,
                    nodes=_nodes_of(fallbacks),
                )
            )
    return out


def _gpu_options(base: Option, gpus: list[Published], numa: bool) -> list[Option]:
    if not gpus:
        return []
    alternative = base.alternative
    eligible = frozenset(str(d.gpu_uuid) for d in gpus)
    capacity = dict(alternative.capacity)
    if capacity:
        compute = capacity.get(shares.COMPUTE, 100)
        if shares.MEMORY in capacity:
            share = GpuShare(compute=compute or None, memory=capacity[shares.MEMORY])
            if compute == 0:
                share = GpuShare(memory=capacity[shares.MEMORY])
            return [_with(base, count=1, share=share, eligible=eligible)]
        # No memory asked: the published default, all of it; one option per memory size.
        sizes: dict[int, set[str]] = {}
        for d in gpus:
            memory = to_bytes(
                str(d.device.get("capacity", {}).get(shares.MEMORY, {}).get("value", 0))
            )
            sizes.setdefault(memory, set()).add(str(d.gpu_uuid))
        return [
            _with(
                base,
                count=1,
                share=GpuShare(compute=compute or None, memory=memory),
                eligible=frozenset(uuids),
            )
            for memory, uuids in sorted(sizes.items())
        ]
    if alternative.mode == ALL:
        per_node: dict[str, set[str]] = {}
        for d in gpus:
            per_node.setdefault(d.pool, set()).add(str(d.gpu_uuid))
        by_count: dict[int, set[str]] = {}
        for node, uuids in per_node.items():
            by_count.setdefault(len(uuids), set()).add(node)
        mig_gpus = any(d.attribute("migEnabled") is True for d in gpus)
        return [
            _with(
                base,
                count=n,
                eligible=eligible,
                nodes=frozenset(nodes),
                numa=numa,
                mig_gpus=mig_gpus,
            )
            for n, nodes in sorted(by_count.items(), reverse=True)
        ]
    mig_gpus = any(d.attribute("migEnabled") is True for d in gpus)
    return [_with(base, count=alternative.count, eligible=eligible, numa=numa, mig_gpus=mig_gpus)]


def _mig_options(base: Option, migs: list[Published]) -> list[Option]:
    if not migs:
        return []
    if base.alternative.mode == ALL:
        raise ClaimError(
            base.claim.ref,
            f"request {base.request}",
            "allocationMode All over MIG devices is not supported (their placements overlap)",
        )
    by_profile: dict[str, list[Published]] = {}
    for d in migs:
        by_profile.setdefault(str(d.profile), []).append(d)

    def size(profile: str) -> tuple[int, str]:
        memory = by_profile[profile][0].device.get("capacity", {}).get("memory", {})
        return to_bytes(str(memory.get("value", 0))), profile

    return [
        _with(
            base,
            kind=devices.MIG,
            count=base.alternative.count,
            profile=profile,
            eligible=frozenset(str(d.gpu_uuid) for d in by_profile[profile]),
        )
        for profile in sorted(by_profile, key=size)
    ]


def _with(base: Option, **changes: Any) -> Option:
    return dataclasses.replace(base, **changes)


# -- constraints ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """How each constraint is met: in the solver (numa, same GPU) or by a value."""

    numa: frozenset[str]
    same_gpu: tuple[frozenset[str], ...]
    values: tuple[tuple[MatchAttribute, object], ...]


def _plans(claim: Claim, catalog: Devices) -> list[_Plan]:
    numa: set[str] = set()
    same_gpu: list[frozenset[str]] = []
    split: list[MatchAttribute] = []
    names = [r.name for r in claim.requests]
    for constraint in claim.constraints:
        covered = [n for n in names if constraint.covers(n)]
        bare = constraint.attribute.rpartition("/")[2]
        if bare == _NUMA and len(covered) == 1:
            numa.add(covered[0])
        elif bare in _SAME_GPU and len(covered) > 1:
            same_gpu.append(frozenset(covered))
        elif len(covered) > 1 or _multi(claim, covered[0]):
            split.append(constraint)
    choices: list[list[tuple[MatchAttribute, object]]] = []
    for constraint in split:
        values: list[object] = []
        for request in claim.requests:
            if not constraint.covers(request.name):
                continue
            for alternative in request.alternatives:
                for d in catalog.matching(alternative):
                    value = d.attribute(constraint.attribute)
                    if value is not None and value not in values:
                        values.append(value)
        if not values:
            raise ClaimError(
                claim.ref,
                f"{constraint.field}.matchAttribute",
                f"no device the requests can use has attribute {constraint.attribute!r}",
            )
        choices.append([(constraint, v) for v in sorted(values, key=str)[:MAX_VALUES]])
    return [
        _Plan(frozenset(numa), tuple(same_gpu), tuple(combo))
        for combo in itertools.islice(itertools.product(*choices), MAX_VARIANTS)
    ]


def _multi(claim: Claim, request: str) -> bool:
    found = next(r for r in claim.requests if r.name == request)
    return any(a.count > 1 or a.mode == ALL for a in found.alternatives)


# -- variants ------------------------------------------------------------------------------------


def claim_variants(claim: Claim, catalog: Devices) -> list[list[Option]]:
    """The claim's combinations of request options (each a list, one option per request),
    best first."""
    out: list[tuple[int, list[Option]]] = []
    for plan_rank, plan in enumerate(_plans(claim, catalog)):
        per_request: list[list[Option]] = []
        for i, request in enumerate(claim.requests):
            values = [(c, v) for c, v in plan.values if c.covers(request.name)]

            def restrict(
                found: Sequence[Published],
                values: list[tuple[MatchAttribute, object]] = values,
            ) -> list[Published]:
                out_found = list(found)
                for constraint, value in values:
                    out_found = _by_value(out_found, constraint.attribute, value)
                return out_found

            options = request_options(claim, i, catalog, restrict, numa=request.name in plan.numa)
            if not options:
                per_request = []
                break
            per_request.append(options)
        if not per_request:
            continue
        for combo in _ranked(per_request):
            rank = sum(combo) + plan_rank
            chosen = [per_request[i][k] for i, k in enumerate(combo)]
            out.append((rank, _pair(chosen, plan)))
    out.sort(key=lambda item: item[0])
    return [options for _, options in out[:MAX_VARIANTS]]


def _ranked(per_request: Sequence[Sequence[Option]]) -> list[tuple[int, ...]]:
    combos = itertools.islice(
        itertools.product(*(range(len(o)) for o in per_request)), MAX_VARIANTS * 8
    )
    return sorted(combos, key=lambda c: (sum(c), c))[:MAX_VARIANTS]


def _pair(chosen: list[Option], plan: _Plan) -> list[Option]:
    for group in plan.same_gpu:
        members = [o for o in chosen if o.request in group and o.kind == devices.MIG]
        if len(members) < 2:
            continue
        key = f"{members[0].claim.uid}/{'+'.join(sorted(group))}"
        common = frozenset.intersection(*(o.eligible for o in members))
        chosen = [_with(o, same_gpu=key, eligible=common) if o in members else o for o in chosen]
    return chosen


def solver_claims(options: Sequence[Option]) -> tuple[list[ClaimRequest], dict[str, Option]]:
    """The solver claims of some options (fallbacks excluded) and what each stands for."""
    claims: list[ClaimRequest] = []
    meaning: dict[str, Option] = {}
    for o in options:
        if o.kind == devices.FALLBACK:
            continue
        label = o.claim.name if len(o.claim.requests) == 1 else f"{o.claim.name}/{o.request}"
        if o.kind == devices.GPU:
            topology = (
                Topology(sameNUMANode=Requirement.Required) if o.numa and o.count > 1 else None
            )
            # The solver keeps whole claims off MIG-enabled GPUs unless the selector names
            # `migEnabled: true` somewhere; v1 publishes those GPUs whole too, and the eligible
            # set already says which GPUs the request admits.
            either = GpuSelector(
                orExpression=[GpuSelector(migEnabled=True), GpuSelector(migEnabled=False)]
            )
            spec = GpuClaimParametersSpec(
                count=o.count,
                share=o.share,
                topology=topology,
                selector=either if o.mig_gpus and o.share is None else None,
            )
            uid = f"{o.claim.uid}/{o.request}"
            claims.append(
                ClaimRequest(uid, o.claim.namespace, label, gpu=spec, eligible=o.eligible)
            )
            meaning[uid] = o
            continue
        for i in range(o.count):
            uid = f"{o.claim.uid}/{o.request}#{i}"
            mig = MigDeviceClaimParametersSpec(profile=o.profile)
            claims.append(
                ClaimRequest(
                    uid, o.claim.namespace, label, mig=mig, eligible=o.eligible, same_gpu=o.same_gpu
                )
            )
            meaning[uid] = o
    return claims, meaning
