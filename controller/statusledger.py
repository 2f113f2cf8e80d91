"""The ledger of a node without drasat's node plugin (NVIDIA's driver publishes its devices):
read from the claims' statuses, since no NodeAllocationState is kept there.

drasat's own nodes record each allocation twice, in the claim's `status.allocation` and in the
node's NAS (`allocatedClaims`, which its node plugin prepares from). A node of another driver has
no NAS and needs none: the status is the truth, so the node's ledger is every allocated claim's
results of that node's devices, translated into drasat's terms (the result names NVIDIA's device;
the solver counts GPUs by UUID and MIG placements by parent, profile and start), read by the one
rule `results.ledger_from_status`. The claims this controller allocated whose new status the
informer has not delivered yet count from their write (as a NAS write does): the next cycle never
hands their devices out again.

This is a purely computational module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from drasat.api.groups import DRIVER_NAME
from drasat.api.nas import AllocatedDevices
from drasat.controller import drivers, nasnodes, v1inputs
from drasat.solver import Ledger, NodeState
from drasat.v1 import nasinventory, results, slices

Obj = dict[str, Any]


class Write(Protocol):
    """What the controller remembers of a claim status it wrote."""

    @property
    def node(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def ledger(self) -> Mapping[str, AllocatedDevices]: ...

    @property
    def allocation(self) -> Obj: ...


def newer(a: str, b: str) -> bool:
    """Whether resourceVersion `a` is newer than `b` (opaque strings compare as different)."""
    try:
        return int(a) > int(b)
    except ValueError:
        return a != b


def with_own_writes(claims: Iterable[Obj], written: Mapping[str, Write]) -> list[Obj]:
    """The claims as their statuses count: a claim whose status this process wrote and the
    informer has not delivered yet counts by that write, as does a written claim the cache does
    not hold yet (what other drivers' devices, a NIC, are held: they have no ledger entries)."""
    out: list[Obj] = []
    seen: set[str] = set()
    for claim in claims:
        meta = claim.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        seen.add(uid)
        mine = written.get(uid)
        if (
            mine is not None
            and mine.allocation
            and newer(mine.version, str(meta.get("resourceVersion", "")))
        ):
            status = {**(claim.get("status") or {}), "allocation": mine.allocation}
            claim = {**claim, "status": status}
        out.append(claim)
    for uid, mine in written.items():
        if uid not in seen and mine.allocation:
            out.append({"metadata": {"uid": uid}, "status": {"allocation": mine.allocation}})
    return out


def in_drasat_terms(claim: Obj, read: slices.V1Node) -> Obj:
    """The claim with the results naming the node's published devices renamed to drasat's
    device names under drasat's driver (what `results.ledger_from_status` reads); the others
    are kept as they are (and skipped by it)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    found = (allocation.get("devices") or {}).get("results") or []
    names = {(d.driver, d.pool, d.name): name for name, d in read.devices.items()}
    renamed = []
    for result in found:
        name = names.get((result.get("driver"), result.get("pool"), result.get("device")))
        if name is not None:
            result = {**result, "driver": DRIVER_NAME, "device": name}
        renamed.append(result)
    devices = {**(allocation.get("devices") or {}), "results": renamed}
    return {
        **claim,
        "status": {**claim["status"], "allocation": {**allocation, "devices": devices}},
    }


def entries(claim: Obj, read: slices.V1Node) -> dict[str, AllocatedDevices]:
    """The ledger entries the claim's status stands for on the node whose devices are `read`."""
    if not v1inputs.is_allocated(claim):
        return {}
    return results.ledger_from_status(in_drasat_terms(claim, read), read.state.devices)


def status_entries_on(claim: Obj, found: slices.NodeDevices) -> dict[str, AllocatedDevices]:
    """`entries` on a node whose devices may not be readable (then none)."""
    return entries(claim, found.read) if found.read is not None else {}


def kept_from_statuses(name: str, found: slices.NodeDevices, configured: Iterable[str]) -> bool:
    """Whether a node without a NAS has its ledger read from the claims' statuses: its devices
    are of another driver than drasat's (or drasat's is not allocated here at all)."""
    return drivers.driver_of(found) != DRIVER_NAME or DRIVER_NAME not in tuple(configured)


def ledgers_from_statuses(
    published: Mapping[str, slices.NodeDevices],
    claims: Iterable[Obj],
    nas: Mapping[str, nasnodes.ParsedNas],
    written: Mapping[str, Write],
    configured: Iterable[str] = drivers.DEFAULT,
) -> dict[str, nasnodes.ParsedNas]:
    """A ledger (a NAS-shaped `ParsedNas`, `from_statuses`) for every node that publishes
    devices of a configured driver other than drasat's and has no NAS: its inventory, and the
    entries of every claim allocated there, by its status or, while the informer has not seen
    it yet, by this process's own write (`written`: claim uid -> the write)."""
    configured = tuple(configured)
    wanted = {
        name: found
        for name, found in published.items()
        if name not in nas and kept_from_statuses(name, found, configured)
    }
    if not wanted:
        return {}
    held: dict[str, dict[str, AllocatedDevices]] = {name: {} for name in wanted}
    seen: set[str] = set()
    for claim in claims:
        meta = claim.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        mine = written.get(uid)
        if mine is not None and newer(mine.version, str(meta.get("resourceVersion", ""))):
            continue  # the cache has not seen our status write yet: counted below
        seen.add(uid)
        node = v1inputs.allocated_node(claim)
        found = wanted.get(node or "")
        if node is None or found is None or found.read is None:
            continue
        held[node].update(entries(claim, found.read))
    for uid, write in written.items():
        if uid not in seen and write.node in held:
            held[write.node].update(write.ledger)
    out = {}
    for name, found in wanted.items():
        record: dict[str, AllocatedDevices] = {}
        if found.read is None:
            state = NodeState(
                name=name, ready=False,
                unready_reason=f"its ResourceSlices cannot be used: {found.problem}",
            )  # fmt: skip
        else:
            record = held[name]
            ledger = Ledger(allocated=nasinventory.allocations_of(record))
            state = NodeState(name=name, devices=found.read.state.devices, ledger=ledger)
        out[name] = nasnodes.ParsedNas(state, "", from_statuses=True, entries=record)
    return out
