"""The lifecycle model's own bookkeeping: what the cluster holds and owes, from the objects alone.

Nothing here comes from the controller's code: devices are read from the allocations' results by
the model's own reading of the device names (`gpu-<minor>`, `gpu-<minor>-mig-<profile>-<id>-
<start>`, `cpu-fallback`), the GPUs are the model's own hardware table (`lc_world.Gpu`), and what
fits is the model's own first fit. So the checks can disagree with the controller.

Holdings (`holdings`): a result with `consumedCapacity` takes that much memory and compute of its
GPU; one without takes the whole GPU (all its memory and compute); a MIG result takes its memory
slices. The NAS ledger is read the same way (`ledger_holdings`: an entry with `share` takes that
much, one without the whole GPU). Per GPU: memory and compute sums within what it has, MIG
placements apart, a MIG-mode GPU never given whole or shared, a GPU not in MIG mode never given a
MIG placement.

These are purely computational functions.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lc_world import SLICES_BY_PROFILE_ID, Gpu

Obj = dict[str, Any]

_GPU = re.compile(r"^gpu-(\d+)$")
_MIG = re.compile(r"^gpu-(\d+)-mig-[a-z0-9-]+-(\d+)-(\d+)$")
_UNITS = {"": 1, "k": 1000, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def quantity(text: Any) -> int:
    found = re.fullmatch(r"(\d+)([kMG]i?|)", str(text).strip())
    if found is None:
        raise ValueError(f"quantity {text!r} not understood by the model")
    return int(found.group(1)) * _UNITS[found.group(2)]


@dataclasses.dataclass(frozen=True)
class Use:
    """One claim's use of one GPU."""

    claim: str  # namespace/name
    uid: str
    memory: int = 0
    compute: int = 0
    whole: bool = False
    #: MIG memory slices [start, start+size).
    slices: tuple[int, int] | None = None
    foreign: bool = False


@dataclasses.dataclass(frozen=True)
class Problem:
    """Something held beyond what a GPU has: which GPU, which claims, what."""

    kind: str
    gpu: str  # node/gpu-<minor>
    claims: tuple[Use, ...]
    text: str

    @property
    def foreign(self) -> bool:
        return any(u.foreign for u in self.claims)


def claim_ref(claim: Obj) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def results_of(claim: Obj) -> list[Obj]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [
        x
        for x in (allocation.get("devices") or {}).get("results") or []
        if x.get("driver") == "gpu.drasat.io"
    ]


def is_foreign(claim: Obj, foreign: Mapping[str, list[Obj]]) -> bool:
    """Whether the claim's allocation is the one an allocator other than drasat wrote."""
    written = foreign.get(str(claim["metadata"].get("uid")))
    if written is None:
        return False
    now = [(x.get("pool"), x.get("device")) for x in results_of(claim)]
    return now == [(x.get("pool"), x.get("device")) for x in written]


def foreign_entry(use: Use, gpu: str, foreign: Mapping[str, list[Obj]]) -> bool:
    """Whether a ledger entry's use of `gpu` (node/gpu-<minor>) is that of an allocation another
    allocator wrote (its recorded write names that device), whatever the claim's status says
    now: the entry outlives the allocation by one cycle when that allocator gives it back after
    drasat's cycle (drasat's next settle removes it; `ledger-disagrees` bounds that)."""
    node, _, device = gpu.partition("/")
    return any(x.get("pool") == node and x.get("device") == device
               for x in foreign.get(use.uid, []))  # fmt: skip


def holdings(
    claims: Iterable[Obj], gpus: Mapping[str, Sequence[Gpu]], foreign: Mapping[str, list[Obj]]
) -> tuple[dict[tuple[str, int], list[Use]], list[str]]:
    """(node, minor) -> the claims' uses of that GPU, from the claims' statuses; and results the
    model cannot place (a device of no GPU it knows, on a node that exists)."""
    out: dict[tuple[str, int], list[Use]] = {}
    unknown: list[str] = []
    for claim in claims:
        ref, uid = claim_ref(claim), str(claim["metadata"].get("uid"))
        alien = is_foreign(claim, foreign)
        for result in results_of(claim):
            node, device = str(result.get("pool")), str(result.get("device"))
            if device == "cpu-fallback" or node not in gpus:
                continue  # unlimited; or the node is gone (its claims hold nothing real)
            use, minor = _result_use(ref, uid, device, result, gpus[node], alien)
            if use is None:
                unknown.append(f"{ref}: {node}/{device}")
                continue
            out.setdefault((node, minor), []).append(use)
    return out, unknown


def _result_use(
    ref: str, uid: str, device: str, result: Obj, gpus: Sequence[Gpu], foreign: bool
) -> tuple[Use | None, int]:
    by_minor = {g.minor: g for g in gpus}
    whole = _GPU.match(device)
    if whole is not None:
        gpu = by_minor.get(int(whole.group(1)))
        if gpu is None:
            return None, -1
        consumed = result.get("consumedCapacity")
        if consumed:
            memory = quantity(consumed.get("memory", 0))
            compute = quantity(consumed.get("compute", 0))
            # All its memory is the whole GPU, however the capacity is spelled.
            return Use(ref, uid, memory, compute, whole=memory >= gpu.memory,
                       foreign=foreign), gpu.minor  # fmt: skip
        return Use(ref, uid, gpu.memory, 100, whole=True, foreign=foreign), gpu.minor
    mig = _MIG.match(device)
    if mig is not None:
        gpu = by_minor.get(int(mig.group(1)))
        size = SLICES_BY_PROFILE_ID.get(int(mig.group(2)))
        if gpu is None or size is None:
            return None, -1
        start = int(mig.group(3))
        return Use(ref, uid, slices=(start, start + size), foreign=foreign), gpu.minor
    return None, -1


def ledger_holdings(
    nases: Iterable[Obj], gpus: Mapping[str, Sequence[Gpu]]
) -> tuple[dict[tuple[str, int], list[Use]], list[str]]:
    """The same from each node's NAS ledger (`allocatedClaims`)."""
    out: dict[tuple[str, int], list[Use]] = {}
    unknown: list[str] = []
    for nas in nases:
        node = str(nas["metadata"]["name"])
        if node not in gpus:
            continue
        by_uuid = {g.uuid: g for g in gpus[node]}
        for key, entry in ((nas.get("spec") or {}).get("allocatedClaims") or {}).items():
            info = entry.get("claimInfo") or {}
            ref = f"{info.get('namespace')}/{info.get('name')}"
            uid = str(info.get("uid"))
            share = entry.get("share")
            for device in (entry.get("gpu") or {}).get("devices") or []:
                gpu = by_uuid.get(device.get("uuid"))
                if gpu is None:
                    unknown.append(f"{node} {key}: GPU {device.get('uuid')}")
                    continue
                if share:
                    memory = int(share.get("memory") or 0)
                    compute = int(share.get("compute") or 0)
                    use = Use(ref, uid, memory, compute, whole=memory >= gpu.memory)
                else:
                    use = Use(ref, uid, gpu.memory, 100, whole=True)
                out.setdefault((node, gpu.minor), []).append(use)
            for device in (entry.get("mig") or {}).get("devices") or []:
                gpu = by_uuid.get(device.get("parentUUID"))
                place = device.get("placement") or {}
                if gpu is None:
                    unknown.append(f"{node} {key}: MIG parent {device.get('parentUUID')}")
                    continue
                start, size = int(place.get("start", 0)), int(place.get("size", 0))
                out.setdefault((node, gpu.minor), []).append(
                    Use(ref, uid, slices=(start, start + size))
                )
    return out, unknown


def problems(
    held: Mapping[tuple[str, int], list[Use]], gpus: Mapping[str, Sequence[Gpu]]
) -> list[Problem]:
    """Every GPU holding more than it has."""
    out: list[Problem] = []
    for (node, minor), uses in sorted(held.items()):
        gpu = next(g for g in gpus[node] if g.minor == minor)
        where = f"{node}/gpu-{minor}"
        migs = [u for u in uses if u.slices is not None]
        plain = [u for u in uses if u.slices is None]
        names = ", ".join(sorted({u.claim for u in uses}))
        if gpu.mig and plain:
            text = f"{where} is in MIG mode and given whole or shared to {names}"
            out.append(Problem("mig-gpu-given-whole", where, tuple(plain), text))
        if not gpu.mig and migs:
            text = f"{where} is not in MIG mode and holds MIG placements of {names}"
            out.append(Problem("mig-on-plain-gpu", where, tuple(migs), text))
        wholes = [u for u in plain if u.whole]
        if len({u.uid for u in plain}) > 1 and wholes:
            out.append(Problem("device-held-twice", where, tuple(plain),
                               f"{where} held by {names}, one of them whole"))  # fmt: skip
        else:
            memory = sum(u.memory for u in plain)
            compute = sum(u.compute for u in plain)
            if memory > gpu.memory or compute > 100:
                out.append(Problem("shares-over-capacity", where, tuple(plain),
                                   f"{where}: shares of {names} take {memory / 2**30:.1f} GiB of "
                                   f"{gpu.memory / 2**30:.1f} and {compute}% compute"))  # fmt: skip
        for i, a in enumerate(migs):
            for b in migs[i + 1 :]:
                assert a.slices is not None and b.slices is not None
                if a.slices[0] < b.slices[1] and b.slices[0] < a.slices[1]:
                    out.append(Problem("mig-overlap", where, (a, b),
                                       f"{where}: MIG slices {a.slices} of {a.claim} and "
                                       f"{b.slices} of {b.claim} overlap"))  # fmt: skip
    return out


# --- consumers -----------------------------------------------------------------------------------


def pod_done(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase", "Pending")
    return phase in ("Succeeded", "Failed")


def claim_names(pod: Obj) -> list[str | None]:
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    return [
        e.get("resourceClaimName") or statuses.get(e.get("name"))
        for e in (pod.get("spec") or {}).get("resourceClaims") or []
    ]


def live_consumers(claim: Obj, pods: Iterable[Obj]) -> list[Obj]:
    """Pods that use or will use the claim: they name it, exist, are not done and not being
    deleted."""
    name = claim["metadata"]["name"]
    return [
        p
        for p in pods
        if name in claim_names(p) and not pod_done(p) and not p["metadata"].get("deletionTimestamp")
    ]


def reserved_by_other(claim: Obj, pod: Obj, pods_by_uid: Mapping[str, Obj]) -> bool:
    """Whether another live, bound pod has the claim reserved (it pins the claim's node)."""
    for ref in (claim.get("status") or {}).get("reservedFor") or []:
        other = pods_by_uid.get(str(ref.get("uid")))
        if other is None or other["metadata"]["uid"] == pod["metadata"]["uid"]:
            continue
        if not pod_done(other) and (other.get("spec") or {}).get("nodeName"):
            return True
    return False


def allocated_node(claim: Obj) -> str | None:
    found = results_of(claim)
    return str(found[0]["pool"]) if found else None


# --- what fits: the model's own first fit ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Ask:
    """What one claim of a kind the model makes asks of one node."""

    whole: int = 0
    share: tuple[int, int] | None = None  # (memory bytes, compute %)
    mig: tuple[int, tuple[int, ...]] | None = None  # (memory slices, starts)
    anywhere: bool = False  # the CPU fallback (any number of claims)


class Free:
    """One node's GPUs as the holdings leave them; `take` takes an ask by first fit (a witness
    that it fits: never a fit that is not there)."""

    def __init__(self, gpus: Sequence[Gpu], uses: Mapping[int, Sequence[Use]]) -> None:
        self.gpus = list(gpus)
        self.memory = {g.minor: 0 for g in gpus}
        self.compute = {g.minor: 0 for g in gpus}
        self.whole = {g.minor: False for g in gpus}
        self.plain = {g.minor: 0 for g in gpus}
        self.slices: dict[int, set[int]] = {g.minor: set() for g in gpus}
        for minor, found in uses.items():
            for use in found:
                if use.slices is not None:
                    self.slices[minor] |= set(range(*use.slices))
                    continue
                self.plain[minor] += 1
                self.memory[minor] += use.memory
                self.compute[minor] += use.compute
                self.whole[minor] |= use.whole

    def take(self, ask: Ask) -> bool:
        if ask.anywhere:
            return True
        if ask.whole:
            empty = [g for g in self.gpus if not g.mig and not self.plain[g.minor]]
            if len(empty) < ask.whole:
                return False
            for gpu in empty[: ask.whole]:
                self.plain[gpu.minor] += 1
                self.whole[gpu.minor] = True
                self.memory[gpu.minor] = gpu.memory
                self.compute[gpu.minor] = 100
            return True
        if ask.share is not None:
            memory, compute = ask.share
            for gpu in self.gpus:
                m = gpu.minor
                if gpu.mig or self.whole[m]:
                    continue
                if self.memory[m] + memory <= gpu.memory and self.compute[m] + compute <= 100:
                    self.plain[m] += 1
                    self.memory[m] += memory
                    self.compute[m] += compute
                    return True
            return False
        if ask.mig is not None:
            size, starts = ask.mig
            for gpu in self.gpus:
                if not gpu.mig or self.plain[gpu.minor]:
                    continue
                for start in starts:
                    wanted = set(range(start, start + size))
                    if not wanted & self.slices[gpu.minor]:
                        self.slices[gpu.minor] |= wanted
                        return True
            return False
        return True


def free_on(
    node: str,
    gpus: Mapping[str, Sequence[Gpu]],
    held: Mapping[tuple[str, int], list[Use]],
    ignore: set[str],
) -> Free:
    """The node's free GPUs, the claims `ignore` (uids) not counted."""
    uses = {m: [u for u in found if u.uid not in ignore]
            for (n, m), found in held.items() if n == node}  # fmt: skip
    return Free(gpus[node], uses)
