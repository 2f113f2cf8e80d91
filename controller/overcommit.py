"""Whether ledger entries on one node hold more of a GPU than it has: the one rule the v1
controller's three safety nets apply to what another allocator (kube-scheduler, a stale replica,
an admin) may have written beside drasat's decisions — before it writes an allocation, at the
ledger write, and when it settles the ledger with the claims' statuses.

On one GPU, entries of different claims over-commit it when:

- one holds it whole (a `gpu` entry without `share`) and the other uses it in any way;
- their MIG devices' memory slices overlap;
- one holds a share and the other a MIG device (a share runs on a GPU not in MIG mode);

and shares together over-commit it when their compute or memory sums exceed the GPU's
(`shares.overcommitted`, the sums the solver places shares by; a claim's own shares count too).
A MIG entry is counted by its placement whatever else it says: a share of a MIG device holds
the device. Entries of one claim never clash with each other (a claim's MIG devices and its
whole GPU are one tenant's).

Another driver's devices drasat allocates beside its GPUs (a NIC: `drasat.v1.otherdevices`)
have no ledger entries; claims' results over-commit one (`other_overcommits`) when two name a
device taken whole, or their draws on a capacity or shared counter exceed what its slices
publish.

This is a purely computational module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from drasat.api.devicemodel import shares
from drasat.api.nas import AllocatedDevices, AllocatedMigDevice
from drasat.api.sharing import GpuShare
from drasat.solver.nodemodel import Gpu
from drasat.v1 import otherdevices

Obj = dict[str, Any]


@dataclass(frozen=True)
class Overcommit:
    """Claims (uids, sorted) that together hold more of one GPU than it has, and why (`what`:
    how the device is named, "GPU <uuid>" unless another driver's device)."""

    gpu: str
    claims: tuple[str, ...]
    why: str
    what: str = ""

    @property
    def named(self) -> str:
        return self.what or f"GPU {self.gpu}"


@dataclass
class _Use:
    """What the entries hold of one GPU, by claim uid."""

    whole: list[str] = field(default_factory=list)
    shares: list[tuple[str, GpuShare]] = field(default_factory=list)
    migs: list[tuple[str, AllocatedMigDevice]] = field(default_factory=list)

    def users(self) -> list[str]:
        found = self.whole + [u for u, _ in self.shares] + [u for u, _ in self.migs]
        return sorted(set(found))


def _uses(entries: Iterable[AllocatedDevices]) -> dict[str, _Use]:
    out: dict[str, _Use] = {}
    for entry in entries:
        uid = entry.claimInfo.uid
        for gpu in entry.gpu.devices if entry.gpu else []:
            use = out.setdefault(gpu.uuid, _Use())
            if entry.share is None:
                use.whole.append(uid)
            else:
                use.shares.append((uid, entry.share))
        for mig in entry.mig.devices if entry.mig else []:
            out.setdefault(mig.parentUUID, _Use()).migs.append((uid, mig))
    return out


def _pairs(uuid: str, use: _Use) -> list[Overcommit]:
    found: dict[tuple[str, str], str] = {}

    def add(a: str, b: str, why: str) -> None:
        if a != b:
            found.setdefault((min(a, b), max(a, b)), why)

    for holder in use.whole:
        for other in use.users():
            add(holder, other, "held whole beside another claim")
    for i, (a, one) in enumerate(use.migs):
        for b, two in use.migs[i + 1 :]:
            if one.placement.overlaps(two.placement):
                add(a, b, "MIG devices on overlapping memory slices")
    for a, _ in use.shares:
        for b, _ in use.migs:
            add(a, b, "a share beside a MIG device")
    return [Overcommit(uuid, pair, why) for pair, why in sorted(found.items())]


def overcommits(entries: Iterable[AllocatedDevices], gpus: Mapping[str, Gpu]) -> list[Overcommit]:
    """Every over-commit of the entries on one node, by GPU uuid (`gpus`: the node's GPUs; one
    not among them has its shares checked by compute alone)."""
    out: list[Overcommit] = []
    for uuid, use in sorted(_uses(entries).items()):
        out.extend(_pairs(uuid, use))
        if use.shares:
            gpu = gpus.get(uuid)
            why = shares.overcommitted((s for _, s in use.shares), gpu.memoryBytes if gpu else None)
            if why is not None:
                holders = tuple(sorted({u for u, _ in use.shares}))
                out.append(Overcommit(uuid, holders, f"shares summing to {why}"))
    return out


def with_added(
    held: Mapping[str, AllocatedDevices],
    added: Mapping[str, AllocatedDevices],
    gpus: Mapping[str, Gpu],
) -> Overcommit | None:
    """The first over-commit that entries `added` (by ledger key; a key `held` has already is
    held) take part in beside `held`; None when they fit."""
    new = {k: e for k, e in added.items() if k not in held}
    mine = {e.claimInfo.uid for e in new.values()}
    for found in overcommits([*held.values(), *new.values()], gpus):
        if mine & set(found.claims):
            return found
    return None


def other_overcommits(
    claims: Iterable[tuple[str, Obj]], found: otherdevices.NodeOthers
) -> list[Overcommit]:
    """Claims (uid, claim) whose statuses together hold more of one of another driver's
    devices on a node (a NIC; `found`, as its slices publish it) than it has: a device taken
    whole named by two, or capacities or shared counters drawn beyond what is published."""
    by_key = {d.key: d for d in found.devices}
    drawn: dict[str, dict[str, int]] = {}
    for uid, claim in claims:
        allocated = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocated.get("devices") or {}).get("results") or []:
            if not isinstance(result, dict):
                continue
            device = by_key.get(
                f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
            )
            if device is None:
                continue
            for name, much in otherdevices.result_draws(device, result):
                by_claim = drawn.setdefault(name, {})
                by_claim[uid] = by_claim.get(uid, 0) + much
    out = []
    for name, by_claim in sorted(drawn.items()):
        has = found.amounts.get(name, 0)
        total = sum(by_claim.values())
        if total <= has or len(by_claim) < 2:
            continue
        holders = tuple(sorted(by_claim))
        kind, _, rest = name.partition("/")
        what = f"{kind} {rest}"
        why = (f"named by {len(holders)} claims" if kind == "device"
               else f"{total} held of {has}")  # fmt: skip
        out.append(Overcommit(rest, holders, why, what))
    return out
