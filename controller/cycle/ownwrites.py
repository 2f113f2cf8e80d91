"""This process's memory of its own writes: what it wrote counts from the moment it is written,
not when the informers deliver it, so the next cycle never hands out a device this one just
wrote down, nor takes its own new status for a claim given back.

- `claims`: each claim this process allocated (`WrittenClaim`: its node, the status version
  written, its pods and ledger entries), until it is released, given back or repaired;
- `nases`: each node's NAS as this process last wrote it, until the informer's copy is as new;
- `released`: each claim this process deallocated, as it wrote it, until the informer's copy
  is as new (the next cycle neither counts its devices held nor writes its ledger entries back).

Only memory: the parts that write (`ledger.Ledger`, `allocationwrites`, `releasing`,
`repairing`) update it; no I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from drasat.api.nas import AllocatedDevices
from drasat.controller.statusledger import newer
from drasat.kube.client import Obj


@dataclass
class WrittenClaim:
    """A claim this process allocated: where, and the status version it wrote."""

    node: str
    version: str
    pods: set[str] = field(default_factory=set)
    #: Its ledger entries: what a node without a NAS counts until the informer sees the status.
    ledger: Mapping[str, AllocatedDevices] = field(default_factory=dict)
    #: The allocation written: what other drivers' devices (a NIC) it holds, counted until the
    #: informer sees the status (they have no ledger entries).
    allocation: Obj = field(default_factory=dict)

    def unseen_in(self, claim: Obj) -> bool:
        """Whether `claim` (the informer's copy) is older than the status this process wrote:
        the cache has not seen that write yet."""
        return newer(self.version, str(claim["metadata"].get("resourceVersion", "")))


class OwnWrites:
    """What this process wrote and the informers may not show yet."""

    def __init__(self) -> None:
        #: Claim uid -> the allocation this process wrote.
        self.claims: dict[str, WrittenClaim] = {}
        #: Node name -> its NAS as this process last wrote it.
        self.nases: dict[str, Obj] = {}
        #: Claim uid -> the claim as this process last wrote it when it deallocated it.
        self.released: dict[str, Obj] = {}

    def remember_claim(self, obj: Obj) -> None:
        """A claim this process deallocated counts as written from the moment it is written."""
        self.released[str(obj["metadata"].get("uid"))] = obj

    def claim_over(self, cached: Obj) -> Obj:
        """The claim as the cycle counts it: this process's deallocation while it is newer than
        the informer's copy (then forgotten: the informer has caught up)."""
        uid = str(cached["metadata"].get("uid"))
        mine = self.released.get(uid)
        if mine is None:
            return cached
        if _version_newer(mine, cached):
            return mine
        self.released.pop(uid, None)  # (the writes' threads ask too)
        return cached

    def forget_claims(self, live: set[str]) -> None:
        """Forget the deallocations of claims the informer no longer has (deleted)."""
        for uid in [u for u in self.released if u not in live]:
            del self.released[uid]

    def nas_over(self, cached: Obj) -> Obj:
        """The node's NAS as the cycle counts it: this process's last write while it is newer
        than the informer's copy (then forgotten: the informer has caught up)."""
        name = str(cached["metadata"]["name"])
        mine = self.nases.get(name)
        if mine is None:
            return cached
        if _version_newer(mine, cached):
            return mine
        del self.nases[name]
        return cached

    def known_nas(self, node: str, cached: Obj | None) -> Obj | None:
        """The node's NAS as this process last knew it (None: not known): its own last write,
        or the informer's copy if newer."""
        mine = self.nases.get(node)
        if mine is None or cached is None:
            return mine or cached
        return mine if _version_newer(mine, cached) else cached

    def remember_nas(self, obj: Obj) -> None:
        """Our own NAS writes count from the moment they are written, not when the informer
        sees them: the next cycle must not hand out a device this one just wrote down."""
        self.nases[str(obj["metadata"]["name"])] = obj

    def nas_versions(self) -> list[str]:
        """The resourceVersions of the NASes this process wrote (what a decision was made on)."""
        return [str(o["metadata"].get("resourceVersion", "")) for o in self.nases.values()]


def _version_newer(a: Obj, b: Obj) -> bool:
    return newer(
        str(a["metadata"].get("resourceVersion", "")), str(b["metadata"].get("resourceVersion", ""))
    )
