"""Tentative choices: devices promised to a claim on a node while its pod negotiates.

When the controller tells the scheduler a node is suitable for a pod, the devices it would use
there are held for a TTL, and fed to every other claim's problem as taken. A hold is dropped when
its claim is allocated, deallocated or deleted, and expires otherwise; the clock is injected.

`Writes` is the other in-memory fact: which claims an allocation write (or a repair) is under way
for, so that no second decision allocates them meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from drasat.api.nas import AllocatedDevices


@dataclass(frozen=True)
class Hold:
    claim_uid: str
    node: str
    devices: AllocatedDevices
    expires: float


class Holds:
    def __init__(self, *, ttl_s: float = 30.0, clock: Callable[[], float] = time.monotonic):
        self.ttl_s = ttl_s
        self._clock = clock
        self._holds: dict[tuple[str, str], Hold] = {}
        self._lock = threading.Lock()

    def hold(self, claim_uid: str, node: str, devices: AllocatedDevices) -> None:
        """Hold `devices` for the claim on `node` (its holds on other nodes are released: a
        claim negotiates one preferred node at a time)."""
        with self._lock:
            self._expire()
            for key in [k for k in self._holds if k[0] == claim_uid]:
                del self._holds[key]
            expires = self._clock() + self.ttl_s
            self._holds[(claim_uid, node)] = Hold(claim_uid, node, devices, expires)

    def drop(self, claim_uid: str) -> None:
        """The claim was allocated, deallocated or deleted."""
        with self._lock:
            for key in [k for k in self._holds if k[0] == claim_uid]:
                del self._holds[key]

    def by_node(
        self, *, excluding: frozenset[str] = frozenset()
    ) -> dict[str, dict[str, AllocatedDevices]]:
        """node -> claim uid -> held devices, leaving out the holds of `excluding` claims."""
        with self._lock:
            self._expire()
            out: dict[str, dict[str, AllocatedDevices]] = {}
            for hold in self._holds.values():
                if hold.claim_uid not in excluding:
                    out.setdefault(hold.node, {})[hold.claim_uid] = hold.devices
            return out

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._holds)

    def claims(self) -> set[str]:
        with self._lock:
            self._expire()
            return {uid for uid, _ in self._holds}

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, h in self._holds.items() if h.expires <= now]:
            del self._holds[key]


class Writes:
    """Claims whose allocation is being written or repaired: one writer per claim at a time.

    A decision registers the claims it is about to allocate (under the decision lock, in the same
    step as its ownership check) and releases them when its status writes are done, whatever the
    outcome; resync registers a claim while it repairs its NAS entries. Until then the claim is
    owned by that write for everyone else, even before its NAS entry exists: the NAS cache shows
    a claim only once its write has landed, and a hold cannot say "this claim", only "these
    devices". Unlike a hold, a registration never expires: it lasts exactly as long as the write.
    """

    def __init__(self) -> None:
        self._nodes: dict[str, str] = {}
        self._lock = threading.Lock()

    def begin(self, claims: dict[str, str]) -> bool:
        """Register claim uid -> node ('' when no node yet); False (nothing registered) when any
        of them is registered already."""
        with self._lock:
            if any(uid in self._nodes for uid in claims):
                return False
            self._nodes.update(claims)
            return True

    def end(self, uids: Iterable[str]) -> None:
        with self._lock:
            for uid in uids:
                self._nodes.pop(uid, None)

    def node(self, uid: str) -> str | None:
        """The node the claim is being written to ('' for a repair); None when no write runs."""
        with self._lock:
            return self._nodes.get(uid)

    def __len__(self) -> int:
        with self._lock:
            return len(self._nodes)
