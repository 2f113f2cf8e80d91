"""Reading a solved model back: pod -> node, claim -> what it takes (`ledger.Allocation`).

A purely computational module. Each new claim's allocation is what the node's ledger will hold:
the claim's namespace, name and uid, its GPUs (whole, or a `share` of each) or MIG devices
(parent, profile, placement), its sharing, `optional` (and no devices when none was free) for
optional claims. Sharing is the claim's, or NVIDIA's default (time-slicing, default slice).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from drasat.api.policy import LifecycleAction
from drasat.solver.demand import Claim, Kind
from drasat.solver.inventory import NodeView
from drasat.solver.ledger import Allocation, InitStep, MigTaken
from drasat.solver.model import Built, DeviceVar, PodEntry
from drasat.solver.nodemodel import PublishedDevice
from drasat.solver.solving import Result


@dataclass(frozen=True)
class Chosen:
    """One device choice: a GPU (uuid) and, for MIG, the profile at a placement; for a device
    claim (`Kind.device`), another driver's device by its key in `uuid`."""

    uuid: str
    profile: str | None = None
    start: int = 0
    size: int = 0


def allocation(claim: Claim, chosen: Sequence[Chosen]) -> Allocation:
    """What a claim takes given its chosen devices (empty: an optional claim without)."""
    # A share names the ResourceClaim its shares belong to (`share_group`), as the caller's
    # ledger does: the next decision must see a claim's shares spread over several GPUs as one
    # (inventory._spread_shares), or another share of the namespace joins one of those GPUs.
    owner = claim.request.share_group if claim.kind is Kind.share else None
    namespace, name, uid = claim.namespace, claim.request.name, owner or claim.uid
    if claim.kind is Kind.mig:
        migs = tuple(MigTaken(c.uuid, c.profile or "", c.start, c.size) for c in chosen)
        return Allocation(namespace, name, uid, mig=True, migs=migs, sharing=claim.sharing)
    share = claim.request.gpu.share if claim.request.gpu is not None else None
    return Allocation(
        namespace,
        name,
        uid,
        gpus=tuple(c.uuid for c in chosen),
        share=share,
        sharing=claim.sharing,
        optional=claim.optional,
    )


def with_devices(entry: Allocation, node: NodeView) -> Allocation:
    """The allocation naming the published devices it takes, as the node's model carries them
    (`nodemodel.Gpu.device`, `Gpu.mig_devices`): the edge writes its result from these. None
    named when the node's model lacks any of them (a node read from a NodeAllocationState)."""
    found: list[PublishedDevice | None] = []
    if entry.mig:
        for mig in entry.migs:
            slot = node.by_uuid(mig.parent)
            found.append(
                None if slot is None else slot.info.mig_devices.get((mig.profile, mig.start))
            )
    else:
        for uuid in entry.gpus:
            slot = node.by_uuid(uuid)
            found.append(None if slot is None else slot.info.device)
    named = [d for d in found if d is not None]
    if not named or len(named) < len(found):
        return entry
    return replace(entry, devices=tuple(named))


def with_lifecycle(
    entry: Allocation, actions: Sequence[LifecycleAction], node: NodeView
) -> Allocation:
    """The allocation with the policy's init actions that apply to its devices (the node plugin
    runs them).

    An action with a selector applies only when every GPU of the claim (the parent GPU for MIG
    devices) matches it; a claim with no device (optional, CPU-only) gets none.
    """
    gpus = [slot.info for slot in (node.by_uuid(u) for u in entry.parents) if slot is not None]
    if not gpus or not actions:
        return entry
    steps = tuple(
        InitStep(action=a.action.value, value=a.value)
        for a in actions
        if a.selector is None or all(a.selector.matches(g) for g in gpus)
    )
    return replace(entry, lifecycle=steps) if steps else entry


def chosen_of(device: DeviceVar) -> Chosen:
    option = device.option
    if option is None:
        return Chosen(device.gpu.uuid)
    return Chosen(device.gpu.uuid, option.profile, option.start, option.size)


def placements(
    built: Built, result: Result, entries: Sequence[PodEntry]
) -> dict[str, tuple[str, dict[str, list[Chosen]]]]:
    """pod -> (node, claim uid -> chosen devices) for every placed pod, claims once each."""
    out: dict[str, tuple[str, dict[str, list[Chosen]]]] = {}
    emitted: set[str] = set()
    for entry in entries:
        if not result.value(built.placed[entry.key]):
            continue
        node = next(n.name for n in entry.nodes if result.value(built.at[(entry.key, n.name)]))
        claims: dict[str, list[Chosen]] = {}
        for claim in entry.claims:
            if claim.uid in emitted:
                continue
            emitted.add(claim.uid)
            claims[claim.uid] = [
                chosen_of(d)
                for d in built.devices.get(claim.uid, [])
                if d.gpu.node == node and result.value(d.var)
            ] + [
                Chosen(u.key)
                for u in built.units.get(claim.uid, [])
                if u.node == node and result.value(u.var)
            ]
        out[entry.key] = (node, claims)
    return out
