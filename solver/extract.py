"""Reading a solved model back: pod -> node, claim -> the NAS allocatedClaims entry.

A purely computational module. Each new claim's entry is what the NodeAllocationState will hold:
claimInfo, gpu{devices[{uuid}], sharing} or mig{devices[{profile, parentUUID, placement}],
sharing}, `share` for partial GPUs, `optional: true` (and no devices when none was free) for
optional claims. Sharing is the claim's, or NVIDIA's default (time-slicing, default slice).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from drasat.api.nas import (
    AllocatedDevices,
    AllocatedGpu,
    AllocatedGpus,
    AllocatedMigDevice,
    AllocatedMigDevices,
    ClaimInfo,
    LifecycleStep,
    MigPlacement,
)
from drasat.api.policy import LifecycleAction
from drasat.solver.demand import Claim, Kind
from drasat.solver.inventory import NodeView
from drasat.solver.model import Built, DeviceVar, PodEntry
from drasat.solver.solving import Result


@dataclass(frozen=True)
class Chosen:
    """One device choice: a GPU (uuid) and, for MIG, the profile at a placement; for a device
    claim (`Kind.device`), another driver's device by its key in `uuid`."""

    uuid: str
    profile: str | None = None
    start: int = 0
    size: int = 0


def allocation(claim: Claim, chosen: Sequence[Chosen]) -> AllocatedDevices:
    """The NAS entry for a claim given its chosen devices (empty: an optional claim without)."""
    # A share names the ResourceClaim its shares belong to (`share_group`), as the caller's
    # ledger does: the next decision must see a claim's shares spread over several GPUs as one
    # (inventory._spread_shares), or another share of the namespace joins one of those GPUs.
    owner = claim.request.share_group if claim.kind is Kind.share else None
    info = ClaimInfo(namespace=claim.namespace, name=claim.request.name, uid=owner or claim.uid)
    optional = True if claim.optional else None
    if claim.kind is Kind.mig:
        devices = [
            AllocatedMigDevice(
                profile=c.profile or "",
                parentUUID=c.uuid,
                placement=MigPlacement(start=c.start, size=c.size),
            )
            for c in chosen
        ]
        return AllocatedDevices(
            claimInfo=info, mig=AllocatedMigDevices(devices=devices, sharing=claim.sharing)
        )
    share = claim.request.gpu.share if claim.request.gpu is not None else None
    return AllocatedDevices(
        claimInfo=info,
        gpu=AllocatedGpus(
            devices=[AllocatedGpu(uuid=c.uuid) for c in chosen], sharing=claim.sharing
        ),
        share=share,
        optional=optional,
    )


def with_lifecycle(
    entry: AllocatedDevices, actions: Sequence[LifecycleAction], node: NodeView
) -> AllocatedDevices:
    """The entry with the policy's init actions that apply to its devices (node plugin runs them).

    An action with a selector applies only when every GPU of the claim (the parent GPU for MIG
    devices) matches it; a claim with no device (optional, CPU-only) gets none.
    """
    uuids = [d.uuid for d in entry.gpu.devices] if entry.gpu is not None else []
    uuids += [d.parentUUID for d in entry.mig.devices] if entry.mig is not None else []
    gpus = [slot.info for slot in (node.by_uuid(u) for u in uuids) if slot is not None]
    if not gpus or not actions:
        return entry
    steps = [
        LifecycleStep(action=a.action.value, value=a.value)
        for a in actions
        if a.selector is None or all(a.selector.matches(g) for g in gpus)
    ]
    return entry.model_copy(update={"lifecycle": steps}) if steps else entry


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
