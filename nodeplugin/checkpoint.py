"""The node plugin's checkpoint: what it did to the node, in a local JSON file written atomically.

Every side effect of a prepare is recorded here right after it happens, before the next one, so a
restarted plugin knows what to complete or roll back. The file carries a checksum; a corrupt file
is moved aside (and logged) instead of stopping the plugin. Per-GPU settings that several claims
may hold at once (compute mode, time-slice, power, clocks, persistence) live in a ledger with the
value they had before the first holder changed them. The ledger is not a file of its own: every
holder's record carries its hold (setting, value, baseline), and the ledger is rebuilt from the
records at load, so holding a setting costs the claim's own write only; the hold is written
before the setting is changed, so its baseline is on disk before the GPU leaves it. (A
`settings.json` left by an earlier version is read once, folded into the records, and removed.)

`created-migs.json` marks the MIG devices the plugin makes, by placement, before it makes them
and until they are destroyed: a MIG device found at start that no claim owns is the plugin's own
(for `--orphan-mig=destroy-own`) only when it is marked there, so another tenant's never is.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drasat.api.nas import AllocatedDevices

log = logging.getLogger(__name__)

VERSION = 1


class ClaimStatus(StrEnum):
    PrepareStarted = "PrepareStarted"
    PrepareCompleted = "PrepareCompleted"
    UnprepareStarted = "UnprepareStarted"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PlannedMig(_Model):
    """A MIG device the prepare will create (from the allocation, resolved against NVML)."""

    parent_uuid: str
    profile: str
    gi_profile_id: int
    start: int
    size: int


class AppliedStep(_Model):
    """One side effect already done for a claim, with what undoing it needs."""

    kind: str  # "mig" | "hold" | "mps" | "cdi"
    gpu: str = ""  # parent GPU UUID (mig, hold)
    mig_uuid: str = ""
    gi_id: int | None = None
    ci_id: int | None = None
    profile: str = ""
    start: int | None = None
    size: int | None = None
    setting: str = ""  # hold: which setting
    baseline: str | int | bool | None = None  # hold: the value before the first holder
    value: str | int | bool | None = None  # hold: the value held
    path: str = ""  # cdi: spec file; mps: daemon directory


class ClaimRecord(_Model):
    uid: str
    namespace: str
    name: str
    status: ClaimStatus
    allocation: dict[str, Any]
    planned_migs: list[PlannedMig] = Field(default_factory=list)
    #: "nas": the allocation came from NAS allocatedClaims; "handle": from the resource handle;
    #: "claim": from a v1 ResourceClaim's allocation results (v1claims)
    source: str = "nas"
    applied: list[AppliedStep] = Field(default_factory=list)
    cdi_devices: list[str] = Field(default_factory=list)

    def allocated(self) -> AllocatedDevices:
        return AllocatedDevices.model_validate(self.allocation)


class SettingHold(_Model):
    """A per-GPU setting changed by claims: its baseline and the claims that hold the new value."""

    baseline: str | int | bool | None
    value: str | int | bool | None
    holders: list[str] = Field(default_factory=list)


class CreatedMig(_Model):
    """A MIG device the plugin makes (or made) for a claim, by where it is."""

    claim: str
    gpu: str
    start: int
    gi_profile_id: int
    profile: str = ""

    def key(self) -> str:
        return _mig_key(self.gpu, self.start, self.gi_profile_id)


def _mig_key(gpu: str, start: int, gi_profile_id: int) -> str:
    return f"{gpu}/{start}/{gi_profile_id}"


class CheckpointData(_Model):
    version: int = VERSION
    claims: dict[str, ClaimRecord] = Field(default_factory=dict)
    #: gpu uuid -> setting name -> hold
    settings: dict[str, dict[str, SettingHold]] = Field(default_factory=dict)


class Checkpoint:
    """The checkpoint of one state directory: one file per claim; the settings ledger in memory.

    Thread-safe. Every write is atomic (temporary file + rename), so a killed plugin leaves the old
    or the new content. Files are not fsync'ed by default: what they describe (MIG instances,
    compute modes, MPS daemons, CDI specs under /var/run) does not survive a reboot either, and a
    process crash keeps written pages; `durable=True` adds fsync for hosts that want it.
    """

    def __init__(self, state_dir: Path, *, durable: bool = False) -> None:
        self.root = state_dir / "checkpoint"
        self.claims_dir = self.root / "claims"
        self.settings_path = self.root / "settings.json"
        self.migs_path = self.root / "created-migs.json"
        self.durable = durable
        self.lock = threading.RLock()
        self._paths: dict[str, Path] = {}
        self._file_locks = [threading.Lock() for _ in range(64)]
        self.claims_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.data = self._load()
        self.created_migs = self._load_created_migs()

    def _load(self) -> CheckpointData:
        data = CheckpointData()
        for path in sorted(self.claims_dir.glob("*.json")):
            body = _read(path)
            if body is None:
                continue
            try:
                record = ClaimRecord.model_validate(body)
            except ValidationError as error:
                _move_aside(path, str(error))
                continue
            data.claims[record.uid] = record
        self._migrate_settings_file(data)
        data.settings = ledger(data.claims.values())
        return data

    def _load_created_migs(self) -> dict[str, CreatedMig]:
        body = _read(self.migs_path)
        if body is None:
            return {}
        try:
            entries = [CreatedMig.model_validate(e) for e in body]
        except (ValidationError, TypeError) as error:
            _move_aside(self.migs_path, str(error))
            return {}
        return {e.key(): e for e in entries}

    def mark_created(self, entries: Iterable[CreatedMig]) -> None:
        """Mark MIG devices as the plugin's own before they are made (one write)."""
        with self.lock:
            new = {e.key(): e for e in entries}
            if all(self.created_migs.get(k) == e for k, e in new.items()):
                return
            self.created_migs.update(new)
            self._write_created_migs()

    def unmark_created(self, claim: str) -> None:
        """Forget the MIG devices made for `claim` (destroyed, or never made)."""
        with self.lock:
            gone = [k for k, e in self.created_migs.items() if e.claim == claim]
            if not gone:
                return
            for key in gone:
                del self.created_migs[key]
            self._write_created_migs()

    def forget_created(self, gpu: str, start: int, gi_profile_id: int) -> None:
        """Forget one MIG device's mark (it was destroyed)."""
        with self.lock:
            if self.created_migs.pop(_mig_key(gpu, start, gi_profile_id), None) is not None:
                self._write_created_migs()

    def created(self, gpu: str, start: int, gi_profile_id: int) -> CreatedMig | None:
        """The mark of the MIG device at this placement, when the plugin made it."""
        with self.lock:
            return self.created_migs.get(_mig_key(gpu, start, gi_profile_id))

    def _write_created_migs(self) -> None:
        if not self.created_migs:
            self.migs_path.unlink(missing_ok=True)
            return
        body = [e.model_dump(mode="json") for _, e in sorted(self.created_migs.items())]
        self._write(self.migs_path, body)

    def _migrate_settings_file(self, data: CheckpointData) -> None:
        """Fold an earlier version's `settings.json` into its holders' records, then remove it."""
        body = _read(self.settings_path)
        if body is None:
            return
        try:
            legacy = CheckpointData.model_validate({"settings": body}).settings
        except ValidationError as error:
            _move_aside(self.settings_path, str(error))
            return
        for gpu, holds in legacy.items():
            for setting, hold in holds.items():
                for uid in hold.holders:
                    record = data.claims.get(uid)
                    if record is None:
                        continue
                    for step in record.applied:
                        if (step.kind, step.gpu, step.setting) == ("hold", gpu, setting):
                            step.value = hold.value
                    self._write(self._claim_path(uid), record.model_dump(mode="json"))
        self.settings_path.unlink(missing_ok=True)

    def _write(self, path: Path, body: Any) -> None:
        write_atomic(path, _envelope(body), durable=self.durable)

    def _claim_path(self, uid: str) -> Path:
        path = self._paths.get(uid)
        if path is None:
            path = self.claims_dir / f"{hashlib.sha256(uid.encode()).hexdigest()[:32]}.json"
            self._paths[uid] = path
        return path

    def get(self, uid: str) -> ClaimRecord | None:
        with self.lock:
            return self.data.claims.get(uid)

    def _file_lock(self, uid: str) -> threading.Lock:
        """Serializes the writes of one claim's file; claims in other stripes write in parallel
        (the shared lock only guards the in-memory data, not the file system's latency)."""
        return self._file_locks[hash(uid) % len(self._file_locks)]

    def put(self, record: ClaimRecord) -> None:
        with self._file_lock(record.uid):
            with self.lock:
                self.data.claims[record.uid] = record
                text = _envelope(record.model_dump(mode="json"))
                path = self._claim_path(record.uid)
            write_atomic(path, text, durable=self.durable)

    def drop(self, uid: str) -> None:
        with self._file_lock(uid):
            with self.lock:
                existed = self.data.claims.pop(uid, None) is not None
                path = self._claim_path(uid)
                self._paths.pop(uid, None)
            if existed:
                path.unlink(missing_ok=True)

    def records(self) -> list[ClaimRecord]:
        with self.lock:
            return list(self.data.claims.values())


def ledger(records: Iterable[ClaimRecord]) -> dict[str, dict[str, SettingHold]]:
    """The settings ledger the records describe: gpu -> setting -> hold with its holders.

    A record's later hold of the same setting wins (a policy lifecycle action over the claim's
    sharing setup); the first record to hold a setting gives its baseline and value."""
    settings: dict[str, dict[str, SettingHold]] = {}
    for record in records:
        held: dict[tuple[str, str], AppliedStep] = {}
        for step in record.applied:
            if step.kind == "hold":
                held[(step.gpu, step.setting)] = step
        for (gpu, setting), step in held.items():
            holds = settings.setdefault(gpu, {})
            hold = holds.get(setting)
            if hold is None:
                hold = holds[setting] = SettingHold(baseline=step.baseline, value=step.value)
            elif hold.value != step.value:
                log.error(
                    "checkpoint: claims %s and %s hold %s of %s at %r and %r; keeping %r",
                    ", ".join(hold.holders),
                    record.uid,
                    setting,
                    gpu,
                    hold.value,
                    step.value,
                    hold.value,
                )
            hold.holders.append(record.uid)
    return settings


def _read(path: Path) -> Any:
    """The body of a checkpoint file; None when missing or corrupt (moved aside, logged)."""
    try:
        envelope = json.loads(path.read_text())
        body = envelope["data"]
        if envelope.get("checksum") != _checksum(body):
            raise ValueError("checksum mismatch")
        return body
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as error:
        _move_aside(path, str(error))
        return None


def _move_aside(path: Path, why: str) -> None:
    aside = path.with_suffix(".corrupt")
    os.replace(path, aside)
    log.error("checkpoint file %s is unreadable (%s); moved to %s", path, why, aside)


def _checksum(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _envelope(body: Any) -> str:
    """`json.dumps({"checksum": ..., "data": body}, sort_keys=True)`, serializing `body` once."""
    data = json.dumps(body, sort_keys=True)
    checksum = hashlib.sha256(data.encode()).hexdigest()
    return f'{{"checksum": "{checksum}", "data": {data}}}'


def write_atomic(path: Path, text: str, *, mode: int = 0o600, durable: bool = False) -> None:
    """Write a file so readers see the old or the new content, never a part (tmp + rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as handle:
        handle.write(text)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)
    if durable:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
