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

Reading is confined per entry: a claim file that cannot be read (truncated, bad checksum, not a
record, a directory, EACCES, EIO) costs that entry only. It is listed in `unreadable` (with the
claim's uid when it can be told: the file is named after a hash of the uid, and a damaged file
often still holds it), left in place when the read failed (a later start reads it again) or moved
to `<name>.corrupt` when its content is bad, and kept there for an operator: a `.corrupt` file is
listed again at every start until it is removed, because what the claim did to the node (an MPS
daemon, a compute mode, a MIG device) outlives its record. Earlier formats are migrated: the
single `checkpoint.json` of the first version (split into claim files, then kept as
`checkpoint.json.migrated`), and `settings.json` (its holds, baselines included, folded into the
holders' records).

A claim record carries its format's `version` (`VERSION`). Version 2 keeps a v1 claim's
allocation as its ResourceClaim has it (`devices`: `status.allocation.devices` with our results
and configuration, the shape of the API), where version 1 (records without `version`) kept a
reduced copy of the results (`results`: request, pool, device, share_id). A version-1 record is
upgraded when it is read (`upgrade`; the reduced results become API results of this driver, the
fields version 1 did not keep stay absent) and written back in the new format; a record of a
newer version than this plugin's is left in place and listed as unreadable (a downgrade must not
lose what the newer plugin recorded), as NVIDIA's kubelet plugin converts its checkpoint to its
latest version when read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drasat.api.groups import DRIVER_NAME
from drasat.nodeplugin.plan import DevicePlan

log = logging.getLogger(__name__)

#: The format of a claim record (see the module docstring; a record without one is version 1).
VERSION = 2
#: The first version's single checkpoint file (in the state directory), migrated at load.
LEGACY_FILE = "checkpoint.json"


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
    version: int = VERSION
    uid: str
    namespace: str
    name: str
    status: ClaimStatus
    #: The claim's plan (`DevicePlan.record()`: what the prepare sets up here), a v1 claim's too.
    allocation: dict[str, Any]
    planned_migs: list[PlannedMig] = Field(default_factory=list)
    #: "nas": the allocation came from NAS allocatedClaims; "handle": from the resource handle;
    #: "claim": from a v1 ResourceClaim's allocation results (v1claims)
    source: str = "nas"
    applied: list[AppliedStep] = Field(default_factory=list)
    cdi_devices: list[str] = Field(default_factory=list)
    #: A v1 claim's CDI ids of each allocated device, by device name (empty: a classic claim, or
    #: one prepared before devices had their own CDI device: each answered `cdi_devices`).
    device_cdi: dict[str, list[str]] = Field(default_factory=dict)
    #: A v1 claim's allocation for this driver as its ResourceClaim has it (`{results, config}`
    #: of `status.allocation.devices`): what it was prepared from and the kubelet answered, so a
    #: re-prepare can answer while the ResourceClaim cannot be read. Empty for a classic claim.
    devices: dict[str, Any] = Field(default_factory=dict)

    def allocated(self) -> DevicePlan:
        """The claim's plan; ValidationError when the record's is none."""
        return DevicePlan.from_record(self.allocation)

    def results(self) -> list[dict[str, Any]]:
        """A v1 claim's allocation results (API fields: request, driver, pool, device, ...)."""
        return list(self.devices.get("results") or [])


class NewerFormat(ValueError):
    """A record written by a newer plugin (a downgrade): left in place, not moved aside."""


def upgrade(body: Any) -> tuple[Any, bool]:
    """A claim record's body in today's format, and whether it had to change.

    Version 1 (no `version`): its reduced `results` ({request, pool, device, share_id}) become
    `devices.results` as the API writes them (driver: ours; `shareID` when set). NewerFormat for
    a version above VERSION; anything else is left to validation."""
    if not isinstance(body, dict):
        return body, False
    version = body.get("version", 1)
    if isinstance(version, int) and version > VERSION:
        raise NewerFormat(
            f"written by a newer node plugin (format {version}, this one reads up to {VERSION})"
        )
    if version != 1:
        return body, False
    upgraded = {k: v for k, v in body.items() if k != "results"}
    results = []
    for old in body.get("results") or []:
        result = {"request": old.get("request"), "driver": DRIVER_NAME}
        result.update(pool=old.get("pool"), device=old.get("device"))
        if old.get("share_id"):
            result["shareID"] = old["share_id"]
        results.append(result)
    upgraded["devices"] = {"results": results} if results else {}
    upgraded["version"] = 2
    return upgraded, True


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


@dataclass(frozen=True)
class Unreadable:
    """A checkpoint entry that could not be read, and where it is kept for an operator."""

    path: Path  # where it is now: in place (the read failed) or moved aside (`.corrupt`)
    why: str
    uid: str = ""  # the claim it belongs to, when it can be told ("": unknown)
    kind: str = "claim"  # "claim" | "claims" (the directory) | "created-migs" | "settings"

    def describe(self) -> str:
        whose = f"claim {self.uid}" if self.uid else f"a {self.kind} entry"
        return f"checkpoint entry {self.path} of {whose} is unreadable ({self.why})"


#: A claim file's name: the first 32 hex digits of the SHA-256 of the claim's uid.
def claim_file_stem(uid: str) -> str:
    return hashlib.sha256(uid.encode()).hexdigest()[:32]


#: The uid of a claim record, from its text (the allocation's claimInfo comes first in the sorted
#: JSON, so a truncated file usually still has it).
_UID_IN_TEXT = re.compile(r'"uid": "([A-Za-z0-9][A-Za-z0-9._-]{0,127})"')


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
        self.gpus_path = self.root / "gpus.json"
        self.legacy_path = state_dir / LEGACY_FILE
        self.durable = durable
        self.lock = threading.RLock()
        self._paths: dict[str, Path] = {}
        self._file_locks = [threading.Lock() for _ in range(64)]
        #: Entries that could not be read, kept for an operator (see the module docstring).
        self.unreadable: list[Unreadable] = []
        #: Holds of an earlier `settings.json` none of whose holders has a record: the setting
        #: is still changed on the GPU; start-up sets its baseline back.
        self.orphan_holds: list[tuple[str, str, SettingHold]] = []
        self.claims_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.data = self._load()
        self.created_migs = self._load_created_migs()

    def _load(self) -> CheckpointData:
        data = CheckpointData()
        self._migrate_legacy_file()
        try:
            entries = sorted(self.claims_dir.iterdir())
        except OSError as error:
            self._unreadable(Unreadable(self.claims_dir, _os_error(error), kind="claims"))
            entries = []
        for path in entries:
            if path.suffix == ".corrupt":
                self._unreadable(self._kept_aside(path))
            elif path.suffix == ".json" and not path.name.startswith("."):
                record = self._load_claim(path)
                if record is not None:
                    data.claims[record.uid] = record
        self._migrate_settings_file(data)
        data.settings = ledger(data.claims.values())
        return data

    def _load_claim(self, path: Path) -> ClaimRecord | None:
        """One claim file's record; None when it cannot be read (listed in `unreadable`)."""
        try:
            text = path.read_text()
        except OSError as error:  # a directory, EACCES, EIO: left in place, read again next time
            self._unreadable(Unreadable(path, _os_error(error), _uid_of(path, "")))
            return None
        try:
            body, upgraded = upgrade(_unwrap(text))
            record = ClaimRecord.model_validate(body)
        except NewerFormat as error:  # kept as it is for the plugin that wrote it
            self._unreadable(Unreadable(path, str(error), _uid_of(path, text)))
            return None
        except (ValueError, KeyError, TypeError) as error:  # ValidationError is a ValueError
            uid = _uid_of(path, text)
            self._unreadable(Unreadable(_move_aside(path, _why(error)), _why(error), uid))
            return None
        if upgraded:
            self._write(path, record.model_dump(mode="json"))
            log.info("checkpoint: claim %s's record upgraded to format %d", record.uid, VERSION)
        return record

    def _kept_aside(self, path: Path) -> Unreadable:
        """A `.corrupt` claim file an earlier start moved aside: still the operator's to clear."""
        try:
            text = path.read_text()
        except OSError:
            text = ""
        return Unreadable(path, "moved aside by an earlier start", _uid_of(path, text))

    def _unreadable(self, entry: Unreadable) -> None:
        self.unreadable.append(entry)
        log.error("%s; kept for an operator", entry.describe())

    def identify(self, uids: Iterable[str]) -> None:
        """Name the claims of unreadable entries whose file names match one of `uids` (claims
        known elsewhere: the NAS, CDI specs, MIG marks)."""
        with self.lock:
            stems = {claim_file_stem(uid): uid for uid in uids}
            self.unreadable = [
                e if e.uid or e.kind != "claim" else _with_uid(e, stems.get(_stem(e.path), ""))
                for e in self.unreadable
            ]

    def quarantined(self, uid: str) -> Unreadable | None:
        """The unreadable entry of this claim while it is kept (an operator removing the file
        lifts it)."""
        with self.lock:
            stem = claim_file_stem(uid)
            for entry in list(self.unreadable):
                if entry.kind != "claim" or (entry.uid != uid and _stem(entry.path) != stem):
                    continue
                if not _exists(entry.path):
                    self.unreadable.remove(entry)
                    log.warning("%s: removed by an operator; no longer kept", entry.describe())
                    continue
                return entry
            return None

    def unknown_entries(self) -> list[Unreadable]:
        """Unreadable entries of claims that cannot be named (nothing of the node can be taken
        for nobody's while they exist)."""
        with self.lock:
            return [e for e in self.unreadable if e.kind in ("claim", "claims") and not e.uid]

    def _load_created_migs(self) -> dict[str, CreatedMig]:
        body = self._read_entry(self.migs_path, "created-migs")
        if body is None:
            return {}
        try:
            entries = [CreatedMig.model_validate(e) for e in body]
        except (ValidationError, TypeError) as error:
            self._unreadable(
                Unreadable(
                    _move_aside(self.migs_path, _why(error)), _why(error), kind="created-migs"
                )
            )
            return {}
        return {e.key(): e for e in entries}

    def _read_entry(self, path: Path, kind: str) -> Any:
        """A file's checked body; None when missing or unreadable (listed, moved aside when its
        content is bad)."""
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        except OSError as error:
            self._unreadable(Unreadable(path, _os_error(error), kind=kind))
            return None
        try:
            return _unwrap(text)
        except (ValueError, KeyError, TypeError) as error:
            self._unreadable(Unreadable(_move_aside(path, _why(error)), _why(error), kind=kind))
            return None

    def _migrate_legacy_file(self) -> None:
        """Split the first version's single `checkpoint.json` into claim files (its settings
        ledger becomes a `settings.json`, folded in next), then keep it as `.migrated`."""
        body = self._read_entry(self.legacy_path, "legacy")
        if body is None:
            return
        claims = body.get("claims") if isinstance(body, dict) else None
        settings = body.get("settings") if isinstance(body, dict) else None
        for uid, raw in (claims or {}).items():
            path = self._claim_path(str(uid))
            if not path.exists():  # a newer record of the claim wins
                self._write(path, raw)
        if settings and not self.settings_path.exists():
            self._write(self.settings_path, settings)
        os.replace(self.legacy_path, self.legacy_path.with_name(LEGACY_FILE + ".migrated"))
        log.warning("checkpoint: migrated %s (%d claims)", self.legacy_path, len(claims or {}))

    def read_gpus(self) -> list[dict[str, Any]]:
        """The GPUs of the last complete discovery (`write_gpus`): who a GPU found lost at start
        was. [] when none is saved or the file is unreadable (reported)."""
        body = self._read_entry(self.gpus_path, "gpus")
        return [g for g in body if isinstance(g, dict)] if isinstance(body, list) else []

    def write_gpus(self, gpus: list[dict[str, Any]]) -> None:
        with self.lock:
            self._write(self.gpus_path, gpus)

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
        """Fold an earlier version's `settings.json` into its holders' records, then remove it.

        Each holder's hold step gets the ledger's baseline and value (the earliest format kept
        the baseline in the ledger only); a holder whose record lacks the step (the version
        before this one wrote the ledger first, then the record) gets one. A hold none of whose
        holders has a record is kept in `orphan_holds`, for start-up to restore."""
        body = self._read_entry(self.settings_path, "settings")
        if body is None:
            return
        try:
            legacy = CheckpointData.model_validate({"settings": body}).settings
        except ValidationError as error:
            why = _why(error)
            self._unreadable(Unreadable(_move_aside(self.settings_path, why), why, kind="settings"))
            return
        changed: set[str] = set()
        for gpu, holds in legacy.items():
            for setting, hold in holds.items():
                holders = [data.claims[u] for u in hold.holders if u in data.claims]
                if not holders:
                    self.orphan_holds.append((gpu, setting, hold))
                for record in holders:
                    steps = [
                        s
                        for s in record.applied
                        if (s.kind, s.gpu, s.setting) == ("hold", gpu, setting)
                    ]
                    if not steps:
                        steps = [AppliedStep(kind="hold", gpu=gpu, setting=setting)]
                        record.applied.append(steps[0])
                    for step in steps:
                        step.baseline, step.value = hold.baseline, hold.value
                    changed.add(record.uid)
        for uid in sorted(changed):
            self._write(self._claim_path(uid), data.claims[uid].model_dump(mode="json"))
        self.settings_path.unlink(missing_ok=True)

    def _write(self, path: Path, body: Any) -> None:
        write_atomic(path, _envelope(body), durable=self.durable)

    def _claim_path(self, uid: str) -> Path:
        path = self._paths.get(uid)
        if path is None:
            path = self.claims_dir / f"{claim_file_stem(uid)}.json"
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


def _unwrap(text: str) -> Any:
    """The checked body of a checkpoint file's text; ValueError/KeyError/TypeError when not."""
    envelope = json.loads(text)
    body = envelope["data"]
    if envelope.get("checksum") != _checksum(body):
        raise ValueError("checksum mismatch")
    return body


def _why(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return f"not a checkpoint record: {error.error_count()} error(s), first: " + str(
            error.errors()[0].get("msg", "")
        )
    return f"{type(error).__name__}: {error}"


def _os_error(error: OSError) -> str:
    return f"{type(error).__name__}: {error.strerror or error}"


def _stem(path: Path) -> str:
    return path.name.split(".", 1)[0]


def _uid_of(path: Path, text: str) -> str:
    """The claim uid a damaged record still names, when its file name agrees ("" otherwise)."""
    for match in _UID_IN_TEXT.finditer(text):
        if claim_file_stem(match.group(1)) == _stem(path):
            return match.group(1)
    return ""


def _with_uid(entry: Unreadable, uid: str) -> Unreadable:
    return Unreadable(entry.path, entry.why, uid, entry.kind) if uid else entry


def _exists(path: Path) -> bool:
    try:
        return path.exists() or path.is_symlink()
    except OSError:
        return True  # cannot tell: still kept


def _move_aside(path: Path, why: str) -> Path:
    """Move a file with bad content to `<name>.corrupt` (kept for an operator); where it is now
    (in place when it cannot be moved)."""
    aside = path.with_suffix(".corrupt")
    count = 0
    while aside.exists():  # an earlier one of the same entry stays too
        count += 1
        aside = path.with_suffix(f".{count}.corrupt")
    try:
        os.replace(path, aside)
    except OSError as error:
        log.error("checkpoint file %s (%s) cannot be moved aside: %s", path, why, error)
        return path
    log.error("checkpoint file %s is unreadable (%s); moved to %s", path, why, aside)
    return aside


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
