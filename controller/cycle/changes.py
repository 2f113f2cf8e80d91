"""What changed since the last settle, so a cycle settles only the nodes and claims it touches.

Settling every node's ledger against every claim costs each cycle time in proportion to the
fleet (about 2 s at 2,000 nodes), also when nothing changed: each resync, each unrelated event.
A node or claim whose objects are all as the last settle saw them settles to the same answer, so
`Changes.scope` compares each object's resourceVersion (claims, pods, NASes as the cycle counts
them, Nodes) and this process's own claim writes with the last settle's, and names what to settle
again (`Scope`):

- a changed, new or gone claim; the claims a changed, new or gone pod names; the claims allocated
  on a node whose NAS or Node object changed, and those in that NAS's ledger before or after;
  a claim whose write this process remembers changed;
- the nodes where those claims are allocated or held in a ledger, before or after, and the
  nodes whose NAS changed.

A safety net: every `full_every` settles, after a settle in which a write or a lookup failed (it
is retried at once, as before), and whenever the scope cannot be told, every node and claim is
settled (`scope` answers None). Only memory and resourceVersions here: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from drasat.controller import v1inputs
from drasat.controller.cycle.ownwrites import WrittenClaim
from drasat.kube.client import Obj

#: A full settle at least this often (in settles): with the default 10 s resync, an idle
#: controller settles everything at least every 5 minutes whatever the versions say.
FULL_EVERY = 30


@dataclass(frozen=True)
class Scope:
    """What one settle covers: claim uids and node names (the rest are as last settled)."""

    claims: frozenset[str]
    nodes: frozenset[str]

    def claims_of(self, claims: Iterable[Obj]) -> list[Obj]:
        return [c for c in claims if _uid(c) in self.claims]


@dataclass(frozen=True)
class _Seen:
    """The objects the last settle read, by key."""

    claims: Mapping[str, Obj]  # uid -> claim
    pods: Mapping[str, Obj]  # uid -> pod
    nas: Mapping[str, tuple[str, frozenset[str]]]  # node -> (NAS version, ledger's claim uids)
    nodes: Mapping[str, Obj]  # node -> Node
    own: Mapping[str, tuple[int, str, str]]  # claim uid -> the write this process remembers


class Changes:
    """The last settle's view, and the scope of the next (module docstring)."""

    def __init__(self, full_every: int = FULL_EVERY) -> None:
        self._full_every = max(1, full_every)
        self._seen: _Seen | None = None
        self._since_full = 0
        self._pending: _Seen | None = None
        #: How many settles ran, and how many of them were full (for tests and metrics).
        self.settles = 0
        self.full_settles = 0

    def scope(self, snapshot: v1inputs.Snapshot, own: Mapping[str, WrittenClaim]) -> Scope | None:
        """What the settle of `snapshot` covers (None: everything); `settled` records it."""
        before = self._seen
        seen = _view(snapshot, own, before)
        self._pending = seen
        self.settles += 1
        if before is None or self._since_full + 1 >= self._full_every:
            self._since_full = 0
            self.full_settles += 1
            return None
        self._since_full += 1
        return _diff(before, seen, snapshot)

    def settled(self, failed: bool) -> None:
        """The settle of the last `scope` ended; `failed`: a write or lookup of it failed, so
        the next settle covers everything (it retries what failed, as every settle did)."""
        self._seen = None if failed else self._pending
        self._pending = None

    def forget(self) -> None:
        """The next settle covers everything (a cycle stopped in the middle of one)."""
        self._seen = None
        self._pending = None


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


def _version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def _view(
    snapshot: v1inputs.Snapshot, own: Mapping[str, WrittenClaim], before: _Seen | None
) -> _Seen:
    known = before.nas if before is not None else {}
    nas: dict[str, tuple[str, frozenset[str]]] = {}
    for name, parsed in snapshot.nas.items():
        version = parsed.resource_version
        seen = known.get(name)
        if version and seen is not None and seen[0] == version:
            nas[name] = seen  # the same NAS: the same ledger
        elif parsed.from_statuses:
            nas[name] = (version, frozenset())
        else:
            ledger = parsed.entries.values()
            nas[name] = (version, frozenset(e.claimInfo.uid for e in ledger))
    return _Seen(
        claims={_uid(c): c for c in snapshot.claims.values()},
        pods={_uid(p): p for p in snapshot.pods},
        nas=nas,
        nodes=dict(snapshot.nodes),
        own={uid: (id(w), w.node, w.version) for uid, w in own.items()},
    )


def _changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> set[str]:
    """Keys new, gone or whose version differs. An object without a resourceVersion is always
    counted changed (its version tells nothing)."""
    out = set(before.keys() ^ after.keys())
    for key, value in after.items():
        old = before.get(key)
        if old is None:
            continue
        if isinstance(value, dict):
            version = _version(value)
            if value is not old and (not version or version != _version(old)):
                out.add(key)
        elif isinstance(value, tuple) and value and value[0] == "":
            out.add(key)  # a NAS without a resourceVersion
        elif value != old:
            out.add(key)
    return out


def _claim_nodes(claim: Obj | None) -> set[str]:
    node = v1inputs.allocated_node(claim) if claim is not None else None
    return {node} if node else set()


def _diff(before: _Seen, after: _Seen, snapshot: v1inputs.Snapshot) -> Scope:
    claims: set[str] = set()
    nodes: set[str] = set()
    for uid in _changed(before.claims, after.claims):
        claims.add(uid)
        nodes |= _claim_nodes(before.claims.get(uid)) | _claim_nodes(after.claims.get(uid))
    changed_pods = _changed(before.pods, after.pods)
    if changed_pods:
        by_ref = {v1inputs.claim_ref(c): _uid(c) for c in after.claims.values()}
        for uid in changed_pods:
            for pod in (before.pods.get(uid), after.pods.get(uid)):
                if pod is None:
                    continue
                namespace = str(pod["metadata"].get("namespace", ""))
                for name in _pod_claims(pod):
                    found = by_ref.get(f"{namespace}/{name}")
                    if found is not None:
                        claims.add(found)
    for uid in _changed(before.own, after.own):
        claims.add(uid)
        for written in (before.own.get(uid), after.own.get(uid)):
            if written is not None:
                nodes.add(written[1])
    changed_nas = _changed(before.nas, after.nas)
    changed_nodes = _changed(before.nodes, after.nodes)
    for name in changed_nas:
        nodes.add(name)
        for ledger in (before.nas.get(name), after.nas.get(name)):
            if ledger is not None:
                claims |= ledger[1]
    touched = changed_nas | changed_nodes
    if touched:
        for uid, claim in after.claims.items():
            if _claim_nodes(claim) & touched:
                claims.add(uid)
    # The nodes of the claims in scope: where they are allocated and where a ledger holds them.
    if claims:
        for uid in claims:
            nodes |= _claim_nodes(before.claims.get(uid)) | _claim_nodes(after.claims.get(uid))
        for name, (_, held) in after.nas.items():
            if not held.isdisjoint(claims):
                nodes.add(name)
    return Scope(frozenset(claims), frozenset(nodes))


def _pod_claims(pod: Obj) -> list[str]:
    """The claim names a pod refers to (`releasing.claim_users` reads the same)."""
    names = [n for n in v1inputs.pod_claim_names(pod) if n]
    extended = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get(
        "resourceClaimName"
    )
    if extended:
        names.append(str(extended))
    return names
