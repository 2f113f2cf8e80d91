"""The node plugin's checkpoint: what it did to the node, in a local JSON file written atomically.

Every side effect of a prepare is recorded here right after it happens, before the next one, so a
restarted plugin knows what to complete or roll back. The file carries a checksum; a corrupt file
is moved aside (and logged) instead of stopping the plugin. Per-GPU settings that several claims
may hold at once (compute mode, time-slice, power, clocks, persistence) live in a ledger with the
value they had before the first holder changed them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drasat.api.nas import AllocatedDevices

log = logging.getLogger(__name__)

FILE_NAME = "checkpoint.json"
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
    path: str = ""  # cdi: spec file; mps: daemon directory


class ClaimRecord(_Model):
    uid: str
    namespace: str
    name: str
    status: ClaimStatus
    allocation: dict[str, Any]
    planned_migs: list[PlannedMig] = Field(default_factory=list)
    applied: list[AppliedStep] = Field(default_factory=list)
    cdi_devices: list[str] = Field(default_factory=list)

    def allocated(self) -> AllocatedDevices:
        return AllocatedDevices.model_validate(self.allocation)


class SettingHold(_Model):
    """A per-GPU setting changed by claims: its baseline and the claims that hold the new value."""

    baseline: str | int | bool | None
    value: str | int | bool | None
    holders: list[str] = Field(default_factory=list)


class CheckpointData(_Model):
    version: int = VERSION
    claims: dict[str, ClaimRecord] = Field(default_factory=dict)
    #: gpu uuid -> setting name -> hold
    settings: dict[str, dict[str, SettingHold]] = Field(default_factory=dict)


class Checkpoint:
    """The checkpoint file of one state directory. Thread-safe; every `save` is atomic."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME
        self.lock = threading.RLock()
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.data = self._load()

    def _load(self) -> CheckpointData:
        try:
            raw = self.path.read_text()
        except FileNotFoundError:
            return CheckpointData()
        try:
            envelope = json.loads(raw)
            body = envelope["data"]
            if envelope.get("checksum") != _checksum(body):
                raise ValueError("checksum mismatch")
            return CheckpointData.model_validate(body)
        except (ValueError, KeyError, TypeError, ValidationError) as error:
            aside = self.path.with_suffix(".corrupt")
            os.replace(self.path, aside)
            log.error("checkpoint %s is unreadable (%s); moved to %s", self.path, error, aside)
            return CheckpointData()

    def save(self) -> None:
        with self.lock:
            body = self.data.model_dump(mode="json")
            text = json.dumps({"checksum": _checksum(body), "data": body}, indent=1, sort_keys=True)
            write_atomic(self.path, text)

    def get(self, uid: str) -> ClaimRecord | None:
        with self.lock:
            return self.data.claims.get(uid)

    def put(self, record: ClaimRecord) -> None:
        with self.lock:
            self.data.claims[record.uid] = record
            self.save()

    def drop(self, uid: str) -> None:
        with self.lock:
            if self.data.claims.pop(uid, None) is not None:
                self.save()

    def records(self) -> list[ClaimRecord]:
        with self.lock:
            return list(self.data.claims.values())


def _checksum(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def write_atomic(path: Path, text: str, *, mode: int = 0o600) -> None:
    """Write a file so readers see the old or the new content, never a part (tmp + rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
