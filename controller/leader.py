"""Leader election with a coordination.k8s.io/v1 Lease, so two replicas never allocate at once.

`decide` is pure: given the Lease (or None), who we are and the time, it says whether to take,
renew or leave it. `LeaderElector` does the reads and writes (optimistic concurrency: two
candidates racing for the same Lease cannot both win a write). A leader that cannot renew within
`renew_deadline_s` stops leading on its own, before its lease can have expired for the others.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from drasat.kube import errors
from drasat.kube.client import Api
from drasat.kube.resources import LEASES

log = logging.getLogger(__name__)

Obj = dict[str, Any]

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def micro_time(t: datetime.datetime) -> str:
    return t.astimezone(datetime.UTC).strftime(_FORMAT)


def parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    for fmt in (_FORMAT, "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.datetime.strptime(text, fmt).replace(tzinfo=datetime.UTC)
        except ValueError:
            continue
    return None


@dataclass(frozen=True)
class Config:
    namespace: str
    name: str = "drasat-controller"
    identity: str = ""
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0


def decide(lease: Obj | None, *, identity: str, now: datetime.datetime, duration_s: float) -> str:
    """'create' (no lease), 'renew' (ours), 'take' (expired or free), or 'wait' (another's)."""
    if lease is None:
        return "create"
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    if holder == identity:
        return "renew"
    renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
    duration = float(spec.get("leaseDurationSeconds") or duration_s)
    if not holder or renewed is None or renewed + datetime.timedelta(seconds=duration) < now:
        return "take"
    return "wait"


def claimed(lease: Obj | None, *, config: Config, now: datetime.datetime, taking: bool) -> Obj:
    """The Lease body that makes us the holder (a pure function)."""
    body: Obj = dict(lease) if lease else {"metadata": {}}
    metadata = dict(body.get("metadata") or {})
    metadata.update({"name": config.name, "namespace": config.namespace})
    spec = dict(body.get("spec") or {})
    if taking or not spec.get("acquireTime"):
        spec["acquireTime"] = micro_time(now)
        if lease is not None:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
    spec.update(
        {
            "holderIdentity": config.identity,
            "leaseDurationSeconds": max(1, round(config.lease_duration_s)),
            "renewTime": micro_time(now),
        }
    )
    return {
        **body,
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": spec,
    }


class LeaderElector:
    def __init__(
        self,
        api: Api,
        config: Config,
        *,
        clock: Callable[[], datetime.datetime] = _now,
        on_change: Callable[[bool], None] = lambda leading: None,
    ) -> None:
        self.api = api
        self.config = config
        self._clock = clock
        self._on_change = on_change
        self._leading = False
        self._last_renew: datetime.datetime | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def leading(self) -> bool:
        """True only while the last successful renewal is within the renew deadline."""
        if not self._leading or self._last_renew is None:
            return False
        age = (self._clock() - self._last_renew).total_seconds()
        return age < self.config.renew_deadline_s

    def try_once(self) -> bool:
        """One acquire-or-renew attempt; returns whether we lead afterwards."""
        now = self._clock()
        try:
            try:
                lease: Obj | None = self.api.get(
                    LEASES, self.config.name, namespace=self.config.namespace
                )
            except errors.NotFound:
                lease = None
            action = decide(
                lease,
                identity=self.config.identity,
                now=now,
                duration_s=self.config.lease_duration_s,
            )
            if action == "wait":
                self._set(False)
                return False
            body = claimed(lease, config=self.config, now=now, taking=action == "take")
            if action == "create":
                self.api.create(LEASES, body, namespace=self.config.namespace)
            else:
                self.api.replace(LEASES, body)
        except errors.KubeError as error:
            log.info("leader election %s: %s", self.config.identity, error)
            if not self.leading:
                self._set(False)
            return self.leading
        self._last_renew = now
        self._set(True)
        return True

    def _set(self, leading: bool) -> None:
        if leading != self._leading:
            self._leading = leading
            log.info("%s %s leading", self.config.identity, "started" if leading else "stopped")
            self._on_change(leading)

    def run(self) -> None:
        """Try every retry period until `stop()`; on_change(True/False) as leadership changes."""
        while not self._stop.is_set():
            self.try_once()
            if self._leading and not self.leading:  # renew deadline passed
                self._set(False)
            self._stop.wait(self.config.retry_period_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, *, release: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        was_leading = self._leading
        self._set(False)  # stop writing before anyone else can take the lease
        if release and was_leading:
            self._release()

    def _release(self) -> None:
        try:
            lease = self.api.get(LEASES, self.config.name, namespace=self.config.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == self.config.identity:
                spec = dict(lease.get("spec") or {})
                spec.update({"holderIdentity": "", "leaseDurationSeconds": 1})
                self.api.replace(LEASES, {**lease, "spec": spec})
        except errors.KubeError as error:
            log.info("releasing the lease: %s", error)
