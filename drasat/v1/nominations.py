"""A preemptor's nomination: what is held for it while its victims leave, written on its pod
where a restarted controller, a new leader and the what-if read it back.

The annotation `gpu.drasat.io/nomination` on the preemptor's pod holds its node, priority,
victims, the claims they free (it waits while any is still allocated), the ledger entries of
the allocation planned for it (`held`) and what its other drivers' devices draw (`drawn`: a
NIC, by claim uid; they have no ledger entry); the pod's `status.nominatedNodeName` says the
node, as kube-scheduler's nominations do. A gang's pods each carry their own part with the
gang's key: they hold as one (`holds_of`). Purely computational.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from drasat.api.groups import NOMINATION_ANNOTATION
from drasat.api.nas import AllocatedDevices
from drasat.v1.gangs import Member, member_of
from drasat.v1.preemption import Draws, Hold

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]


def _pod_key(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


@dataclass(frozen=True)
class Nomination:
    """What is held for a preemptor pod (one per pod; a gang's pods share its `gang`)."""

    pod: str  # namespace/name
    uid: str
    node: str
    priority: int
    victims: tuple[str, ...]
    #: The claims its victims free (uids): while any is still allocated, it waits.
    freed: tuple[str, ...]
    #: node -> ledger key -> entry: the allocation planned for it.
    held: Mapping[str, Mapping[str, AllocatedDevices]]
    since: str
    gang: str | None = None
    #: node -> claim uid -> what the planned allocation's other drivers' devices draw.
    drawn: Mapping[str, Mapping[str, Draws]] = dataclasses.field(default_factory=dict)

    def annotation(self) -> str:
        return json.dumps(
            {
                "node": self.node,
                "priority": self.priority,
                "victims": list(self.victims),
                "freed": list(self.freed),
                "held": {
                    node: {
                        k: e.model_dump(mode="json", exclude_none=True) for k, e in found.items()
                    }
                    for node, found in self.held.items()
                },
                "since": self.since,
                **({"gang": self.gang} if self.gang else {}),
                **(
                    {
                        "drawn": {
                            node: {uid: [list(d) for d in draws] for uid, draws in found.items()}
                            for node, found in self.drawn.items()
                        }
                    }
                    if self.drawn
                    else {}
                ),
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def of_pod(cls, pod: Obj) -> Nomination | None:
        """The pod's nomination as written on it; None without one, or when unreadable (said)."""
        meta = pod.get("metadata") or {}
        text = (meta.get("annotations") or {}).get(NOMINATION_ANNOTATION)
        if not text:
            return None
        try:
            found = json.loads(text)
            held = {
                str(node): {str(k): AllocatedDevices.model_validate(e) for k, e in entries.items()}
                for node, entries in found["held"].items()
            }
            drawn = {
                str(node): {str(uid): tuple((str(n), int(m)) for n, m in draws)
                            for uid, draws in claims.items()}
                for node, claims in (found.get("drawn") or {}).items()
            }  # fmt: skip
            return cls(
                _pod_key(pod),
                str(meta.get("uid", "")),
                str(found["node"]),
                int(found["priority"]),
                tuple(str(v) for v in found.get("victims") or ()),
                tuple(str(c) for c in found.get("freed") or ()),
                held,
                str(found.get("since", "")),
                found.get("gang"),
                drawn,
            )
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            log.warning("pod %s: annotation %s is not drasat's nomination (%s); ignored",
                        _pod_key(pod), NOMINATION_ANNOTATION, error)  # fmt: skip
            return None


def believed(
    pod: Obj,
    own_claims: Collection[str],
    pod_groups: Mapping[str, Obj] | None,
    *,
    priority: int | None = None,
) -> Nomination | None:
    """The nomination written on the pod as far as the cluster vouches for it; None without one.
    A tenant may write annotations on its own pod, never its status: the annotation counts only
    where the pod's `status.nominatedNodeName` (which only the controller writes) names the same
    node; then `checked`."""
    found = Nomination.of_pod(pod)
    if found is None or (pod.get("status") or {}).get("nominatedNodeName") != found.node:
        return None
    return checked(found, pod, own_claims, pod_groups, priority=priority)


def checked(
    found: Nomination,
    pod: Obj,
    own_claims: Collection[str],
    pod_groups: Mapping[str, Obj] | None,
    *,
    priority: int | None = None,
) -> Nomination:
    """The nomination as far as the cluster vouches for it: the pod's own priority (`priority`,
    else `spec.priority`, which admission sets from its PriorityClass), devices held only on its
    node and only for its own claims (`own_claims`: their uids), a gang only the pod's real one
    (by `pod_groups`, as `gangs.member_of` reads them). The annotation is the pod's, which its
    tenant can write: nothing in it is believed that cannot be checked against objects the
    tenant cannot forge."""
    held = {
        node: {k: e for k, e in entries.items() if e.claimInfo.uid in own_claims}
        for node, entries in found.held.items()
        if node == found.node
    }
    drawn = {
        node: {uid: d for uid, d in draws.items() if uid in own_claims}
        for node, draws in found.drawn.items()
        if node == found.node
    }
    member = member_of(pod, pod_groups)
    gang = found.gang if isinstance(member, Member) and member.gang == found.gang else None
    if priority is None:
        priority = int((pod.get("spec") or {}).get("priority") or 0)
    return dataclasses.replace(found, priority=priority, held=held, drawn=drawn, gang=gang)


def holds_of(nominations: Iterable[Nomination]) -> list[Hold]:
    """The holds of the nominations: a gang's pods hold as one (none holds against another)."""
    by_owner: dict[str, list[Nomination]] = {}
    for found in nominations:
        by_owner.setdefault(found.gang or found.pod, []).append(found)
    out = []
    for owner, members in sorted(by_owner.items()):
        held: dict[str, dict[str, AllocatedDevices]] = {}
        drawn: dict[str, dict[str, Draws]] = {}
        for member in members:
            for node, entries in member.held.items():
                held.setdefault(node, {}).update(entries)
            for node, draws in member.drawn.items():
                drawn.setdefault(node, {}).update(draws)
        priority = min(m.priority for m in members)
        out.append(Hold(owner, frozenset(m.pod for m in members), priority, held, drawn))
    return out
