"""The v1 controller's decision on a pod it could not place, kept where `drasat explain` reads
it: the pod's `NotAllocatable` Warning Event (the text users see in `kubectl describe pod`),
annotated with what the decision was made with (`gpu.drasat.io/decision`: the cycle, when, the
policy and its digest, the solver mode, and the resourceVersions it was decided from).

The same text decided again updates that one Event (count, lastTimestamp, the annotation), as
Kubernetes' own recorders fold repeats, so its annotation holds the latest decision: when what
it was decided from changed (at most once per `refresh_s`, so a busy cluster costs one write per
refused pod per `refresh_s`), and once per `keep_s` in any case (Events expire, an hour by
default). A new text is a new Event. `drasat explain` compares the recorded resourceVersions with
the live objects to tell whether the recorded decision is still the controller's answer.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from drasat.api.groups import DRIVER_NAME
from drasat.api.policy import AllocationPolicySpec
from drasat.controller import v1inputs
from drasat.kube import errors, events
from drasat.kube.client import Api, Obj
from drasat.kube.resources import EVENTS

log = logging.getLogger(__name__)

ANNOTATION = f"{DRIVER_NAME}/decision"
REASON = "NotAllocatable"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def policy_digest(policy: AllocationPolicySpec) -> str:
    """A short digest of a policy's content (the same policy read anywhere has the same one)."""
    text = json.dumps(policy.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def newest(versions: Iterable[str]) -> str:
    """The newest of some resourceVersions ("" for none). The API server's are etcd revisions,
    which it documents as opaque; numeric ones are compared as numbers (as the controller's
    ledger already does), others as text."""
    found = [v for v in versions if v]
    if not found:
        return ""
    return max(found, key=lambda v: (1, int(v), "") if v.isdigit() else (0, 0, v))


@dataclass(frozen=True)
class Basis:
    """What a decision was made from: the pod, its claims, and the inventory (the newest
    resourceVersion among drasat's ResourceSlices, NodeAllocationStates and DeviceClasses)."""

    pod: str
    claims: Mapping[str, str] = field(default_factory=dict)
    inventory: str = ""

    def changes(self, now: Basis) -> list[str]:
        """What changed between this basis and `now`, in words ([] when nothing did)."""
        out = []
        if self.pod != now.pod:
            out.append("the pod")
        for name in sorted(set(self.claims) | set(now.claims)):
            if self.claims.get(name) != now.claims.get(name):
                out.append(f"claim {name}")
        if self.inventory != now.inventory:
            out.append("drasat's devices or ledger (ResourceSlices, NodeAllocationStates) "
                       "or its DeviceClasses")  # fmt: skip
        return out


def _version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def basis(pod: Obj, claims: Iterable[Obj], inventory: Iterable[str]) -> Basis:
    """The basis of a decision on `pod` with `claims` (all of the pod's claims) over an
    inventory of these resourceVersions (`inventory_versions`)."""
    return Basis(
        pod=_version(pod),
        claims={v1inputs.claim_ref(c): _version(c) for c in claims},
        inventory=newest(inventory),
    )


def inventory_versions(snapshot: v1inputs.Snapshot) -> list[str]:
    """The resourceVersions of what every decision of a cycle reads besides the pod and its
    claims: drasat's ResourceSlices and NodeAllocationStates, and its DeviceClasses."""
    out = [p.resource_version for p in snapshot.nas.values()]
    out += [v for found in snapshot.published.values() for v in found.versions]
    out += [_version(c) for c in snapshot.claim_classes.values()]
    return out


def pod_claims(pod: Obj, snapshot: v1inputs.Snapshot) -> list[Obj]:
    """The pod's claims that exist, in spec order."""
    namespace = str((pod.get("metadata") or {}).get("namespace", ""))
    found = (snapshot.claims.get(f"{namespace}/{n}") for n in v1inputs.pod_claim_names(pod) if n)
    return [c for c in found if c is not None]


@dataclass(frozen=True)
class Decision:
    cycle: int
    #: When (UTC, RFC 3339 with microseconds).
    decided_at: str
    #: Where the policy in force came from ("default", a file, "ConfigMap ns/name key k").
    policy: str
    policy_digest: str
    #: The solver mode of the cycle (online or batch).
    mode: str
    basis: Basis
    #: Who decided: the controller's identity (its pod, with leader election).
    controller: str = ""

    def to_annotation(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: str) -> Decision | None:
        """The decision an Event's annotation holds; None when it is not one (never raises)."""
        try:
            data = json.loads(text)
            basis = data["basis"]
            return cls(
                cycle=int(data["cycle"]),
                decided_at=str(data["decided_at"]),
                policy=str(data["policy"]),
                policy_digest=str(data["policy_digest"]),
                mode=str(data["mode"]),
                basis=Basis(
                    pod=str(basis["pod"]),
                    claims={str(k): str(v) for k, v in dict(basis["claims"]).items()},
                    inventory=str(basis["inventory"]),
                ),
                controller=str(data.get("controller", "")),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def time(self) -> datetime.datetime | None:
        try:
            stamp = datetime.datetime.strptime(self.decided_at, TIME_FORMAT)
        except ValueError:
            return None
        return stamp.replace(tzinfo=datetime.UTC)


def stamp(now: datetime.datetime) -> str:
    return now.strftime(TIME_FORMAT)


@dataclass
class _Written:
    namespace: str
    name: str
    message: str
    count: int
    at: datetime.datetime
    basis: Basis


class DecisionLog:
    """Records each refused pod's decision as its NotAllocatable Event (module docstring).
    Never raises: a failed write is logged and retried with the next decision."""

    def __init__(
        self,
        api: Api,
        *,
        component: str,
        refresh_s: float = 10.0,
        keep_s: float = 1800.0,
        clock: Callable[[], datetime.datetime] = _now,
    ) -> None:
        self.api = api
        self.component = component
        self.refresh = datetime.timedelta(seconds=refresh_s)
        self.keep = datetime.timedelta(seconds=keep_s)
        self._clock = clock
        self._written: dict[str, _Written] = {}
        self._lock = threading.Lock()

    def record(self, pod: Obj, message: str, decision: Decision) -> bool:
        """Write the decision; True when an Event was created or updated."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        now = self._clock()
        with self._lock:
            known = self._written.get(uid)
        if known is not None and known.message == message:
            age = now - known.at
            if age < self.keep and (known.basis == decision.basis or age < self.refresh):
                return False
            if self._update(known, decision, now):
                return True
        return self._create(uid, pod, message, decision, now)

    def forget(self, keep: Iterable[str]) -> None:
        """Drop what is remembered of pods not in `keep` (uids): placed or gone."""
        wanted = set(keep)
        with self._lock:
            for uid in [u for u in self._written if u not in wanted]:
                del self._written[uid]

    def _create(self, uid: str, pod: Obj, message: str, decision: Decision, now: Any) -> bool:
        body = events.event(pod, "Warning", REASON, message, self.component, now)
        body["metadata"]["annotations"] = {ANNOTATION: decision.to_annotation()}
        try:
            written = self.api.create(EVENTS, body)
        except errors.KubeError as error:
            log.warning("could not record the decision on pod %s: %s", _ref(pod), error)
            return False
        meta = written.get("metadata") or body["metadata"]
        with self._lock:
            self._written[uid] = _Written(
                str(meta.get("namespace", "")), str(meta.get("name", "")), message, 1, now,
                decision.basis,
            )  # fmt: skip
        return True

    def _update(self, known: _Written, decision: Decision, now: datetime.datetime) -> bool:
        patch = {
            "metadata": {"annotations": {ANNOTATION: decision.to_annotation()}},
            "count": known.count + 1,
            "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        try:
            self.api.patch(EVENTS, known.name, patch, namespace=known.namespace)
        except errors.NotFound:
            return False  # expired: a new Event
        except errors.KubeError as error:
            log.warning("could not update the decision Event %s/%s: %s",
                        known.namespace, known.name, error)  # fmt: skip
            return False
        with self._lock:
            known.count += 1
            known.at = now
            known.basis = decision.basis
        return True


def _ref(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def recorded(found: Iterable[Obj]) -> list[tuple[Obj, Decision]]:
    """The decisions among Events (any order in, newest decision first out)."""
    out = []
    for event in found:
        annotations = (event.get("metadata") or {}).get("annotations") or {}
        if event.get("reason") != REASON or ANNOTATION not in annotations:
            continue
        decision = Decision.from_annotation(str(annotations[ANNOTATION]))
        if decision is not None:
            out.append((event, decision))
    return sorted(out, key=lambda pair: pair[1].decided_at, reverse=True)
