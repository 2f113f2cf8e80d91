"""Prepare and unprepare claims: retry-safe, idempotent, recorded step by step in the checkpoint.

Prepare sets up a claim's plan (`plan.DevicePlan`): for a v1 kubelet, made from the
ResourceClaim's allocation results by `v1claims`; for a claim in NAS `spec.allocatedClaims`, or
given by its resource handle, converted from that classic entry here (`_classic_plan`):
1. a completed prepare answers its CDI ids again; an interrupted one is rolled back first;
2. the plan is checked against what NVML shows (devices on this node, MIG placements);
3. the claim is recorded as started, then every side effect is recorded as soon as it is done:
   MIG devices created at the allocated placement, per-GPU settings held (compute mode,
   time-slice, lifecycle init actions), the MPS daemon, the CDI spec;
4. `preparedClaims` in the NAS is written, then the record is marked completed.
Any failure undoes what the record lists (and destroys MIG devices at the planned placements that
no record owns), so nothing half-made is left; the error goes to the claim.

Unprepare undoes the record in reverse, removes the CDI spec and the NAS entry, then verifies the
GPUs are back at their baseline (no MIG device of the claim left, released settings restored);
when verification fails the record is kept, the claim gets an error, and the next call retries.
Per-GPU settings are reference-counted: a second claim on a GPU may hold the same value, a
different value is refused, and the baseline returns when the last holder lets go. The first
holder's record, with the baseline, is written before the setting is changed, so a restart at any
point knows the value to restore.

Start-up (`reconcile`) finishes interrupted work, adopts or restarts MPS daemons, and looks for
MIG devices no claim owns: by default it only reports them (a log line and the NAS
`spec.orphanMigDevices`, which the allocator treats as taken); `destroy-own` destroys those the
checkpoint marks as made by the plugin, `destroy-all` every one.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from drasat.api import handles
from drasat.api.devicemodel import names, shares
from drasat.api.inputerrors import describe_validation_error, show
from drasat.api.nas import (
    AllocatedDevices,
    ClaimInfo,
    MigPlacement,
    NodeAllocationState,
    OrphanMigDevice,
    PreparedDevices,
    PreparedGpu,
    PreparedGpus,
    PreparedMigDevice,
    PreparedMigDevices,
)
from drasat.api.policy import LifecycleActionName
from drasat.api.quantity import to_bytes
from drasat.api.sharing import GpuShare, SharingStrategy, TimeSlice
from drasat.nodeplugin import cdi, checkpoint, mps
from drasat.nodeplugin import metrics as nodemetrics
from drasat.nodeplugin.checkpoint import (
    AppliedStep,
    ClaimRecord,
    ClaimStatus,
    CreatedMig,
    PlannedMig,
)
from drasat.nodeplugin.devicelib import (
    ComputeMode,
    DeviceError,
    DeviceLib,
    GpuDevice,
    GpuInstance,
    GpuLostError,
    MigDevice,
    MigProfileInfo,
)
from drasat.nodeplugin.nasstore import NasError, NasStore
from drasat.nodeplugin.plan import DevicePlan

log = logging.getLogger(__name__)


class ClaimError(Exception):
    """Preparing or unpreparing one claim failed; `str()` goes into the claim's `error`."""


@dataclass(frozen=True)
class ClaimRef:
    uid: str
    namespace: str = ""
    name: str = ""
    resource_handle: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})" if self.name else self.uid


#: A claim UID as the API server makes them (a UUID), with room to spare; the UID names the
#: claim's checkpoint entry and CDI spec file, so nothing else (`/`, NUL, 5,000 characters) is
#: let through to them.
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _bad_ref(claim: ClaimRef) -> str:
    """Why the kubelet's claim reference cannot be a Kubernetes claim ("" when it can)."""
    if not claim.uid:
        return "claim without a uid"
    if not _UID.fullmatch(claim.uid):
        return f"claim uid {show(claim.uid)} is not a Kubernetes UID"
    if len(claim.namespace) > 63 or len(claim.name) > 253:
        return f"claim {show(claim.namespace)}/{show(claim.name)}: name too long for Kubernetes"
    if not (claim.namespace + claim.name).isprintable():
        return f"claim {show(claim.namespace)}/{show(claim.name)}: not a Kubernetes name"
    return ""


def check_ref(claim: ClaimRef) -> None:
    """ClaimError when the kubelet's claim reference cannot be a Kubernetes claim."""
    problem = _bad_ref(claim)
    if problem:
        raise ClaimError(problem)


class Setting(StrEnum):
    """Per-GPU settings a claim may hold."""

    computeMode = "computeMode"
    timeSlice = "timeSlice"
    powerLimitWatts = "powerLimitWatts"
    lockedClocksMHz = "lockedClocksMHz"
    persistenceMode = "persistenceMode"


class OrphanPolicy(StrEnum):
    """What start-up does with MIG devices that no claim prepared here owns (`--orphan-mig`)."""

    #: keep every one; a log line and an entry in the NAS `spec.orphanMigDevices` each
    report = "report"
    #: destroy those the checkpoint marks as made by this plugin; report the others
    destroy_own = "destroy-own"
    #: destroy every one, other tenants' too
    destroy_all = "destroy-all"

    @classmethod
    def parse(cls, text: str) -> OrphanPolicy:
        """The policy a flag names; `destroy`, its earlier spelling that destroyed every orphan,
        still means destroy-all."""
        return cls.destroy_all if text == "destroy" else cls(text)


@dataclass(frozen=True)
class Fault:
    """Test hook: raise after a named prepare/unprepare step (simulates a crash)."""

    step: str
    error: BaseException


class ProcessExit(BaseException):
    """A Fault error that ends the process at once, as a SIGKILL would (crash tests)."""

    def __init__(self, code: int = 137) -> None:
        super().__init__(code)
        self.code = code


SettingValue = str | int | bool | None


class DeviceState:
    """The node's prepared claims. Thread-safe: claims run in parallel, each one serially."""

    def __init__(
        self,
        *,
        lib: DeviceLib,
        store: NasStore,
        checkpoint: checkpoint.Checkpoint,
        cdi: cdi.CdiWriter,
        mps: mps.MpsManager,
        orphans: OrphanPolicy = OrphanPolicy.report,
        proc_root: Path = Path("/proc"),
        metrics: nodemetrics.Metrics | None = None,
    ) -> None:
        self.lib = lib
        self.metrics = metrics or nodemetrics.Metrics()
        self.metrics.count_unreadable(lambda: len(checkpoint.unreadable))
        self.proc_root = proc_root
        self.store = store
        self.checkpoint = checkpoint
        self.cdi = cdi
        self.mps = mps
        self.orphans = orphans
        self.faults: list[Fault] = []
        #: Per-claim locks with the number of callers holding or waiting on each; an entry goes
        #: when its last caller leaves, so the table does not grow with every claim ever seen.
        self._claim_locks: dict[str, tuple[threading.Lock, int]] = {}
        self._locks_lock = threading.Lock()
        self._settings_lock = threading.RLock()
        #: MIG placements of prepares in flight, by claim, from the overlap check until the
        #: prepare ends: two prepares of one placement cannot both pass the check and then
        #: undo each other's device.
        self._mig_lock = threading.Lock()
        self._shares_lock = threading.Lock()
        self._reserved: dict[str, list[PlannedMig]] = {}
        self._gpus: list[GpuDevice] | None = None
        #: GPUs that fell off the bus (the health monitor's finding; lost ones at discovery too).
        self.lost: frozenset[str] = frozenset()
        self.mps.adopt_users(self._mps_users())

    # -- helpers -----------------------------------------------------------------------------

    @contextmanager
    def _claim_lock(self, uid: str) -> Iterator[None]:
        with self._locks_lock:
            lock, users = self._claim_locks.get(uid, (threading.Lock(), 0))
            self._claim_locks[uid] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._locks_lock:
                lock, users = self._claim_locks[uid]
                if users == 1:
                    del self._claim_locks[uid]
                else:
                    self._claim_locks[uid] = (lock, users - 1)

    def gpus(self) -> list[GpuDevice]:
        """The node's GPUs, discovered once. A GPU found lost (it answers nothing) is named from
        the last complete discovery saved in the checkpoint; one never seen before is left out
        (nothing can be published or prepared for it)."""
        if self._gpus is None:
            found = self.lib.gpus()
            if any(g.lost and not g.uuid for g in found):
                found = self._name_lost(found)
            else:
                self._save_gpus(found)
            self._gpus = found
        return self._gpus

    def _save_gpus(self, found: list[GpuDevice]) -> None:
        body = [{**dataclasses.asdict(g), "nvlink_peers": list(g.nvlink_peers)} for g in found]
        if self.checkpoint.read_gpus() != body:
            self.checkpoint.write_gpus(body)

    def _name_lost(self, found: list[GpuDevice]) -> list[GpuDevice]:
        saved = {}
        for body in self.checkpoint.read_gpus():
            try:
                gpu = GpuDevice(**{**body, "nvlink_peers": tuple(body.get("nvlink_peers", ()))})
            except TypeError:
                continue
            saved[gpu.index] = gpu
        named = []
        for gpu in found:
            if gpu.lost and not gpu.uuid:
                known = saved.get(gpu.index)
                if known is None:
                    log.error("GPU %d fell off the bus and was never seen: left out", gpu.index)
                    continue
                gpu = dataclasses.replace(known, lost=True)
            named.append(gpu)
        return named

    def _gpu(self, uuid: str) -> GpuDevice | None:
        return next((g for g in self.gpus() if g.uuid == uuid), None)

    def _mps_users(self) -> dict[str, set[str]]:
        """Daemon name -> the claims whose records hold it."""
        users: dict[str, set[str]] = {}
        for record in self.checkpoint.records():
            for step in record.applied:
                if step.kind == "mps" and step.path:
                    users.setdefault(Path(step.path).name, set()).add(record.uid)
        return users

    def _step(self, name: str) -> None:
        for fault in list(self.faults):
            if fault.step == name:
                self.faults.remove(fault)
                if isinstance(fault.error, ProcessExit):
                    log.critical("fault injection: exiting after step %s", name)
                    os._exit(fault.error.code)
                raise fault.error

    def _record_step(self, record: ClaimRecord, step: AppliedStep, name: str) -> None:
        record.applied.append(step)
        self.checkpoint.put(record)
        self._step(name)

    # -- prepare -----------------------------------------------------------------------------

    def prepare(
        self,
        claim: ClaimRef,
        plan: DevicePlan | None = None,
        devices: Mapping[str, Any] | None = None,
    ) -> list[str]:
        """Prepare one claim; its CDI device ids. Raises ClaimError.

        `plan`: what to set up for the claim when the caller knows it (a v1 claim's results,
        resolved on this node by v1claims); otherwise it comes from the NAS or the claim's
        resource handle. `devices`: a v1 claim's allocation for this driver as its
        ResourceClaim has it (`{results, config}`): each result gets its own CDI device, and the
        record keeps it, so a re-prepare can answer without reading the claim (`prepared`)."""
        check_ref(claim)
        with self._claim_lock(claim.uid):
            try:
                return self._prepare_claim(claim, plan, dict(devices or {}))
            except (DeviceError, NasError, OSError) as error:
                raise ClaimError(f"prepare {claim}: {error}") from error

    def prepared(self, uid: str) -> ClaimRecord | None:
        """The claim's record when its prepare completed here (its CDI ids and results), while
        its checkpoint entry is readable."""
        record = self.checkpoint.get(uid)
        if record is None or record.status is not ClaimStatus.PrepareCompleted:
            return None
        return None if self.checkpoint.quarantined(uid) is not None else record

    def _check_readable(self, claim: ClaimRef) -> None:
        """ClaimError while the claim's checkpoint entry is unreadable and kept for an operator:
        what the claim set up here is unknown, so it is neither prepared again nor undone."""
        entry = self.checkpoint.quarantined(claim.uid)
        if entry is not None:
            raise ClaimError(
                f"claim {claim}: {entry.describe()}; what it set up on this node (MIG devices, "
                "settings, MPS daemon) is left as it is until an operator checks it and removes "
                "the file"
            )

    def _prepare_claim(
        self, claim: ClaimRef, given: DevicePlan | None, devices: dict[str, Any]
    ) -> list[str]:
        self._check_readable(claim)
        record = self.checkpoint.get(claim.uid)
        if record is not None and record.status is ClaimStatus.PrepareCompleted:
            if given is None or _devices_of(record.allocated()) == _devices_of(given):
                return list(record.cdi_devices)
            # The claim was deallocated and allocated again (same uid) to other devices without
            # an unprepare here: no pod uses the old devices any more, so they are given back
            # and the new ones prepared, instead of answering a spec for devices it lost.
            log.warning(
                "claim %s: prepared here for other devices than it is allocated now; "
                "unpreparing those first",
                claim,
            )
            self._undo_prepared(record, claim)
            record = None
        if record is not None:
            log.warning("claim %s: finishing an interrupted %s", claim, record.status.value)
            self._rollback(record)
            self._remove_prepared(record.uid)  # it may have been written just before the crash
        plan, source = (given, "claim") if given is not None else self._allocation(claim)
        refusal = plan.refusal()
        if refusal is not None:
            raise ClaimError(f"claim {claim}: {refusal}")
        namespace = claim.namespace or plan.namespace
        name = claim.name or plan.name
        planned = self._plan_migs(ClaimRef(claim.uid, namespace, name), plan)
        try:  # the placements stay reserved until the prepare is done or undone
            return self._prepare_planned(claim, plan, source, planned, devices)
        finally:
            self._unreserve(claim.uid)

    def _prepare_planned(
        self,
        claim: ClaimRef,
        plan: DevicePlan,
        source: str,
        planned: list[PlannedMig],
        devices: dict[str, Any],
    ) -> list[str]:
        record = ClaimRecord(
            uid=claim.uid,
            namespace=claim.namespace or plan.namespace,
            name=claim.name or plan.name,
            status=ClaimStatus.PrepareStarted,
            allocation=plan.record(),
            planned_migs=planned,
            source=source,
            devices=devices,
        )
        self._check_gpus(plan)
        with self._shares_lock:  # two shares of one GPU are checked one after the other
            self._check_share_room(record, plan)
            self.checkpoint.put(record)
        self._step("recorded")
        try:
            return self._prepare(record, plan)
        except ClaimError:
            self._undo_failed_prepare(record)
            raise
        except (DeviceError, NasError, OSError, ValueError) as error:
            self._undo_failed_prepare(record)
            raise ClaimError(f"prepare {claim}: {error}") from error
        except Exception as error:  # a bug: still leave nothing half-made
            log.exception("claim %s: unexpected error while preparing", claim)
            self._undo_failed_prepare(record)
            raise ClaimError(f"prepare {claim}: internal error: {error!r}") from error

    def _undo_failed_prepare(self, record: ClaimRecord) -> None:
        try:
            self._rollback(record)
        except (DeviceError, OSError, NasError) as error:
            log.error("claim %s: rollback incomplete (%s); retried on next call", record.uid, error)

    def _allocation(self, claim: ClaimRef) -> tuple[DevicePlan, str]:
        """A classic claim's plan, from its NAS entry or resource handle, and where it came from
        ("nas" or "handle")."""
        handle = self._handle_allocation(claim)
        try:
            allocation = self.store.allocated_claim(claim.uid)
        except NasError as error:
            raise ClaimError(f"claim {claim}: {error}") from error
        source = "nas"
        if allocation is None and handle is not None:
            allocation, source = handle, "handle"
        if allocation is None:
            raise ClaimError(
                f"claim {claim} is not allocated on node {self.store.node}: no entry in "
                f"NodeAllocationState {self.store.namespace}/{self.store.node} "
                "spec.allocatedClaims"
            )
        info = allocation.claimInfo
        if claim.namespace and (info.namespace, info.name) != (claim.namespace, claim.name):
            raise ClaimError(
                f"claim {claim}: NAS allocatedClaims names it {info.namespace}/{info.name}"
            )
        return _classic_plan(allocation), source

    @staticmethod
    def _handle_allocation(claim: ClaimRef) -> AllocatedDevices | None:
        """A resource handle, when given, is the claim's devices (api.handles; the NAS wins)."""
        if not claim.resource_handle.strip():
            return None
        info = ClaimInfo(namespace=claim.namespace, name=claim.name, uid=claim.uid)
        try:
            return handles.decode(claim.resource_handle, info)
        except ValidationError as error:
            message = describe_validation_error(error)
            raise ClaimError(f"claim {claim}: resource handle: {message}") from None
        except ValueError as error:
            raise ClaimError(f"claim {claim}: {error}") from None

    def _check_gpus(self, plan: DevicePlan) -> None:
        for uuid in plan.gpus:
            if self._gpu(uuid) is None:
                known = ", ".join(g.uuid for g in self.gpus()) or "none"
                raise ClaimError(f"allocated GPU {uuid} is not on this node (it has: {known})")
        for uuid in plan.parents():
            if uuid in self.lost or getattr(self._gpu(uuid), "lost", False):
                raise ClaimError(
                    f"allocated GPU {uuid} fell off the bus (NVML_ERROR_GPU_IS_LOST, XID 79): "
                    "it needs a reset before anything can use it"
                )

    def _check_share_room(self, record: ClaimRecord, plan: DevicePlan) -> None:
        """A share's MPS limits, beside those of the shares recorded here on the same GPUs, hold
        no more of a GPU than it has (`shares.overcommitted`: compute percentages and pinned
        memory summed, the sums the allocator places shares by); ClaimError naming the others.
        An allocation that says otherwise (two allocators, a stale ledger) would run its
        tenants past the GPU."""
        if plan.share is None:
            return
        mine = _share_takes(record.uid, plan)
        others: dict[str, list[tuple[str, GpuShare]]] = {}
        for other in self.checkpoint.records():
            if other.uid == record.uid:
                continue
            try:
                their = other.allocated()
            except ValidationError:
                continue
            if their.share is None:
                continue
            for uuid, take in _share_takes(other.uid, their).items():
                ref = f"{other.namespace}/{other.name} ({other.uid})"
                others.setdefault(uuid, []).append((ref, take))
        for uuid, take in mine.items():
            beside = others.get(uuid, [])
            gpu = self._gpu(uuid)
            why = shares.overcommitted(
                [take, *(t for _, t in beside)], gpu.memory_bytes if gpu is not None else None
            )
            if why is not None:
                holders = ", ".join(sorted(ref for ref, _ in beside))
                raise ClaimError(
                    f"claim {record.namespace}/{record.name}: its share of GPU {uuid} beside "
                    f"the shares prepared here (claims {holders}) would hold more than the GPU "
                    f"has: {why}"
                )

    def _plan_migs(self, claim: ClaimRef, plan: DevicePlan) -> list[PlannedMig]:
        """The claim's MIG devices resolved against NVML, checked free and reserved for it (the
        caller unreserves them when the prepare ends)."""
        with self._mig_lock:
            planned = self._resolve_migs(claim, plan)
            if planned:
                self._reserved[claim.uid] = planned
            return planned

    def _unreserve(self, uid: str) -> None:
        with self._mig_lock:
            self._reserved.pop(uid, None)

    def _resolve_migs(self, claim: ClaimRef, plan: DevicePlan) -> list[PlannedMig]:
        planned = []
        for device in plan.migs:
            parent = self._gpu(device.parent_uuid)
            if parent is None:
                raise ClaimError(f"MIG parent GPU {device.parent_uuid} is not on this node")
            if not parent.mig_enabled:
                raise ClaimError(f"MIG parent GPU {device.parent_uuid} is not in MIG mode")
            profiles = {p.name: p for p in self.lib.mig_profiles(parent.uuid)}
            profile = profiles.get(device.profile)
            if profile is None:
                raise ClaimError(
                    f"MIG profile {device.profile} does not exist on {parent.product_name} "
                    f"{parent.uuid} (it has: {', '.join(sorted(profiles))})"
                )
            where = (device.start, device.size)
            if where not in profile.placements:
                raise ClaimError(
                    f"MIG {device.profile} cannot be placed at start {where[0]} size {where[1]} "
                    f"on {parent.uuid} (possible: {list(profile.placements)})"
                )
            self._check_free(claim, parent, device.profile, where, profiles)
            planned.append(
                PlannedMig(
                    parent_uuid=parent.uuid,
                    profile=device.profile,
                    gi_profile_id=profile.gi_profile_id,
                    start=where[0],
                    size=where[1],
                )
            )
        return planned

    def _check_free(
        self,
        claim: ClaimRef,
        parent: GpuDevice,
        profile: str,
        where: tuple[int, int],
        profiles: dict[str, MigProfileInfo],
    ) -> None:
        """ClaimError naming the MIG device in use on the GPU (and its claim), or the placement
        another prepare in flight reserved, that the placement overlaps. (Two devices of one
        claim that overlap are NVML's error at the second create, which rolls back the first.)
        Called under the MIG lock."""
        start, end = where[0], where[0] + where[1]
        by_id = {p.gi_profile_id: p.name for p in profiles.values()}
        what = f"MIG {profile} at start {start} size {where[1]} on {parent.uuid}"
        for uid, plans in self._reserved.items():
            for plan in plans:
                if uid == claim.uid or plan.parent_uuid != parent.uuid:
                    continue
                if plan.start < end and start < plan.start + plan.size:
                    record = self.checkpoint.get(uid)
                    holder = f"claim {record.namespace}/{record.name} ({uid})" if record else uid
                    raise ClaimError(
                        f"{what} overlaps MIG {plan.profile} at start {plan.start} size "
                        f"{plan.size}, being prepared for {holder}"
                    )
        owners = {
            (s.gpu, s.gi_id): r
            for r in self.checkpoint.records()
            for s in r.applied
            if s.kind == "mig" and s.gi_id is not None
        }
        for gi in self.lib.gpu_instances(parent.uuid):
            if not (gi.start < end and start < gi.start + gi.size):
                continue
            name = by_id.get(gi.profile_id, f"profile {gi.profile_id}")
            device = (
                names.mig_name(parent.minor, name, gi.profile_id, gi.start)
                if gi.profile_id in by_id
                else f"GPU instance {gi.gi_id}"
            )
            owner = owners.get((parent.uuid, gi.gi_id))
            holder = f"claim {owner.namespace}/{owner.name} ({owner.uid})" if owner else "no claim"
            raise ClaimError(
                f"{what} overlaps MIG device {device} ({name} at start {gi.start} size "
                f"{gi.size}, GPU instance {gi.gi_id}) in use by {holder}"
            )

    def _prepare(self, record: ClaimRecord, plan: DevicePlan) -> list[str]:
        migs = self._create_migs(record)
        gpu_uuids = list(plan.gpus)
        visible = gpu_uuids + [m.uuid for m in migs]
        mps_env = self._apply_sharing(record, plan, gpu_uuids, visible)
        self._apply_lifecycle(record, plan, gpu_uuids or [m.parent_uuid for m in migs])
        edits = self._edits(record, plan, gpu_uuids, migs, mps_env)
        own = self._device_edits(record, plan, gpu_uuids, migs, mps_env)
        # Resolved before anything is written (cdi mode toolkit: the toolkit's device names).
        parents = [self._gpu(u) for u in gpu_uuids + [m.parent_uuid for m in migs]]
        device_ids = self.cdi.device_ids(record.uid, [g.minor for g in parents if g])
        device_cdi = {
            name: self.cdi.ids_of(record.uid, name, minors) for name, (_, minors) in own.items()
        }
        path = self.cdi.write(record.uid, edits, {name: e for name, (e, _) in own.items()})
        # Saved with the next write (the completion): every rollback removes the claim's spec
        # by its uid, recorded or not.
        record.applied.append(AppliedStep(kind="cdi", path=str(path)))
        self._step("cdi")
        prepared = _record_prepared(record)
        self.store.set_prepared(record.uid, prepared)
        self._step("nas")
        record.status = ClaimStatus.PrepareCompleted
        record.cdi_devices = device_ids
        record.device_cdi = device_cdi
        self.checkpoint.put(record)
        log.info("claim %s/%s (%s) prepared", record.namespace, record.name, record.uid)
        return list(record.cdi_devices)

    def _create_migs(self, record: ClaimRecord) -> list[MigDevice]:
        created = []
        if record.planned_migs:
            # Marked before they exist: a device found later that no claim owns is the plugin's
            # own only if marked, whatever became of the claim's record.
            self.checkpoint.mark_created(
                CreatedMig(
                    claim=record.uid,
                    gpu=p.parent_uuid,
                    start=p.start,
                    gi_profile_id=p.gi_profile_id,
                    profile=p.profile,
                )
                for p in record.planned_migs
            )
        for plan in record.planned_migs:
            try:
                device = self.lib.create_mig_device(
                    plan.parent_uuid, gi_profile_id=plan.gi_profile_id, start=plan.start
                )
            except DeviceError as error:
                raise ClaimError(
                    f"claim {record.namespace}/{record.name}: cannot create MIG {plan.profile} "
                    f"at start {plan.start} on {plan.parent_uuid}: {error}"
                ) from error
            self._step("mig-created")
            step = AppliedStep(
                kind="mig",
                gpu=plan.parent_uuid,
                mig_uuid=device.uuid,
                gi_id=device.gi_id,
                ci_id=device.ci_id,
                profile=plan.profile,
                start=device.start,
                size=device.size,
            )
            self._record_step(record, step, "mig-recorded")
            created.append(device)
        return created

    def _apply_sharing(
        self, record: ClaimRecord, plan: DevicePlan, gpu_uuids: list[str], visible: list[str]
    ) -> dict[str, str]:
        """Hold the sharing's settings and start (or join) its MPS daemon; the MPS client
        environment of the claim ({} without MPS)."""
        share, sharing = plan.share, plan.sharing
        strategy = sharing.strategy if sharing is not None else None
        if share is not None and sharing is None:
            strategy = SharingStrategy.MPS  # a share is enforced by MPS unless told otherwise
        if strategy is SharingStrategy.TimeSlicing:
            assert sharing is not None
            config = sharing.timeSlicingConfig
            level = config.effective if config is not None else TimeSlice.Default
            for uuid in gpu_uuids:  # time-slices do not apply to MIG devices
                self._hold(record, uuid, Setting.computeMode, ComputeMode.Default.value)
                self._hold(record, uuid, Setting.timeSlice, level.value)
        elif strategy is SharingStrategy.MPS:
            limits = _mps_limits(record.uid, plan, visible)
            mps.client_env(limits)  # checks the limits before anything is changed
            for uuid in gpu_uuids:
                self._hold(record, uuid, Setting.computeMode, ComputeMode.ExclusiveProcess.value)
            # The claim's own daemon; shares, which the hardware makes use the GPU's one MPS
            # server, share theirs with the shares of their own namespace only, and it bounds
            # every one of them by the largest (each GPU gets a memory limit, all of it at most,
            # so a later share's can only widen it).
            shared = share is not None
            scope = mps.namespace_scope(record.namespace) if shared else mps.claim_scope(record.uid)
            daemon_limits = limits
            if shared:
                whole = {u: g.memory_bytes for u in gpu_uuids if (g := self._gpu(u)) is not None}
                pinned = {i: whole[d] for i, d in enumerate(visible) if d in whole}
                pinned.update(limits.pinned_limit_bytes)
                daemon_limits = mps.MpsLimits(
                    limits.claim_uid, limits.devices, limits.thread_percentage, pinned
                )
            name = self.mps.acquire(record.uid, tuple(visible), scope=scope, limits=daemon_limits)
            # Saved with the next write: every rollback releases the claim's daemon, recorded or
            # not (a daemon nobody holds is stopped by the release and by start-up's sweep).
            record.applied.append(AppliedStep(kind="mps", path=str(self.mps.daemon_dir(name))))
            self._step("mps")
            # A claim's own daemon enforces exactly its limits; a shares daemon may bound a share
            # more loosely (now or after a larger share joins), so a share's clients also get
            # their own part in their environment, which narrows them within their namespace.
            return mps.client_env(limits, None if shared else self.mps.enforced(name))
        return {}

    def _apply_lifecycle(self, record: ClaimRecord, plan: DevicePlan, gpus: list[str]) -> None:
        """Device initialisation: the class's config or the policy's init actions (a claim's own
        is refused before it gets here, `deviceconfig.refusals`). Every action changes the whole
        GPU, so it runs only on the GPUs the claim holds whole and alone; on the parent of a MIG
        slice or a GPU with shares, where other tenants' work runs, it is not applied (a log
        line says so) and holds nothing, so it never blocks another claim either."""
        settings = []
        for step in plan.lifecycle or ():
            try:
                action = LifecycleActionName(step.action)
            except ValueError:
                known = ", ".join(a.value for a in LifecycleActionName)
                raise ClaimError(
                    f"lifecycle action {step.action!r} is not in the fixed vocabulary ({known})"
                ) from None
            settings.append(_lifecycle_setting(action, step.value))
        if not settings:
            return
        alone = self._held_alone(record, plan)
        skipped = [uuid for uuid in dict.fromkeys(gpus) if uuid not in alone]
        if skipped:
            log.warning(
                "claim %s/%s (%s): lifecycle %s not applied to %s: the claim does not hold the "
                "GPU whole and alone (a MIG slice, a share, or another claim on it)",
                record.namespace,
                record.name,
                record.uid,
                ", ".join(step.action for step in plan.lifecycle or ()),
                ", ".join(skipped),
            )
        for setting, value in settings:
            for uuid in alone:
                self._hold(record, uuid, setting, value)

    def _held_alone(self, record: ClaimRecord, plan: DevicePlan) -> list[str]:
        """The GPUs the claim holds whole and alone: its whole GPUs, none when it is a share or
        holds MIG devices, less any GPU another claim prepared here uses."""
        if plan.share is not None or plan.mig_claim:
            return []
        others: set[str] = set()
        for other in self.checkpoint.records():
            if other.uid != record.uid:
                others.update(other.allocated().parents())
        return [uuid for uuid in dict.fromkeys(plan.gpus) if uuid not in others]

    def _edits(
        self,
        record: ClaimRecord,
        plan: DevicePlan,
        gpu_uuids: list[str],
        migs: list[MigDevice],
        mps_env: dict[str, str],
    ) -> cdi.ClaimEdits:
        visible = gpu_uuids + [m.uuid for m in migs]
        parents = [self._gpu(u) for u in gpu_uuids + [m.parent_uuid for m in migs]]
        # Checked present on the host: a missing node fails the prepare, naming it.
        driver = self.cdi.driver
        nodes = [
            n for g in dict.fromkeys(parents) if g is not None for n in driver.gpu_nodes(g.minor)
        ]
        for mig in migs:
            parent = self._gpu(mig.parent_uuid)
            assert parent is not None  # checked when planned
            nodes += driver.mig_nodes(minor=parent.minor, gi_id=mig.gi_id, ci_id=mig.ci_id)
        env = {"DRASAT_CLAIM_UID": record.uid, **_visible_env(visible)}
        mounts: list[cdi.Mount] = []
        daemon = next((Path(s.path) for s in record.applied if s.kind == "mps"), None)
        if daemon is not None:
            # The claim's own daemon (a share's: its namespace's on the GPU), its pipes and the
            # shared memory MPS clients and server exchange, which the client finds in /dev/shm.
            env.update(mps_env)
            mounts.append(cdi.Mount(str(daemon / "pipe"), mps.CONTAINER_PIPE_DIR))
            mounts.append(cdi.Mount(str(daemon / "shm"), mps.CONTAINER_SHM_DIR))
        if plan.share is not None:
            if plan.share.compute is not None:
                env["DRASAT_GPU_SHARE_COMPUTE"] = str(plan.share.compute)
            if plan.share.memory is not None:
                env["DRASAT_GPU_SHARE_MEMORY"] = str(to_bytes(plan.share.memory))
        if not visible:
            return cdi.ClaimEdits(env=env)
        # The control nodes and the driver's files are every spec's (cdi.CdiWriter adds them).
        return cdi.ClaimEdits(env=env, device_nodes=tuple(nodes), mounts=tuple(mounts))

    def _device_edits(
        self,
        record: ClaimRecord,
        plan: DevicePlan,
        gpu_uuids: list[str],
        migs: list[MigDevice],
        mps_env: dict[str, str],
    ) -> dict[str, tuple[cdi.ClaimEdits, list[int]]]:
        """A v1 claim's devices (its allocation results' device names) -> each one's own CDI
        edits and the minors of the GPUs it uses; {} for a classic claim (no results).

        A device's edits are its own nodes and the claim-wide ones (MPS mounts and limits, share
        limits, the claim's UID); its visible-devices environment lists the devices of its
        request(s), in the claim's order: a container gets the CDI devices of the requests it
        names, and CDI environment variables do not add up (the last device's value wins), so
        each device of a request says all of that request's."""
        if not record.results():
            return {}
        gpus = {u: g for u in gpu_uuids if (g := self._gpu(u)) is not None}
        by_name: dict[str, tuple[list[str], list[MigDevice], list[int]]] = {}
        for uuid, gpu in gpus.items():
            by_name[names.gpu_name(gpu.minor)] = ([uuid], [], [gpu.minor])
        for planned, mig in zip(record.planned_migs, migs, strict=True):
            parent = self._gpu(mig.parent_uuid)
            assert parent is not None  # checked when planned
            name = names.mig_name(
                parent.minor, planned.profile, planned.gi_profile_id, planned.start
            )
            by_name[name] = ([], [mig], [parent.minor])
        requests: dict[str, set[str]] = {}  # device name -> the requests it was allocated for
        for result in record.results():
            requests.setdefault(str(result["device"]), set()).add(str(result["request"]))
        order = gpu_uuids + [m.uuid for m in migs]
        uuids_of = {d: [*u, *(m.uuid for m in ms)] for d, (u, ms, _) in by_name.items()}
        out: dict[str, tuple[cdi.ClaimEdits, list[int]]] = {}
        for name, wanted in requests.items():
            uuids, own_migs, minors = by_name.get(name, ([], [], []))
            own = self._edits(record, plan, uuids, own_migs, mps_env)
            peers = {u for d, r in requests.items() if r & wanted for u in uuids_of.get(d, [])}
            env = dict(own.env)
            if uuids or own_migs:
                env.update(_visible_env([u for u in order if u in peers]))
            out[name] = (dataclasses.replace(own, env=env), minors)
        return out

    # -- per-GPU settings (reference-counted holds) ------------------------------------------

    def _hold(self, record: ClaimRecord, gpu: str, setting: Setting, value: SettingValue) -> None:
        with self._settings_lock:
            with self.checkpoint.lock:
                ledger = self.checkpoint.data.settings.setdefault(gpu, {})
                hold = ledger.get(setting.value)
                before = hold.model_copy(deep=True) if hold is not None else None
                change = True
                if hold is not None and hold.value != value and hold.holders:
                    if hold.holders != [record.uid]:
                        raise ClaimError(
                            f"GPU {gpu}: {setting.value} is {hold.value} for claim(s) "
                            f"{', '.join(hold.holders)}; this claim needs {value}"
                        )
                    # The claim's own later step wins: a policy lifecycle action applied after
                    # the claim's sharing setup (e.g. ExclusiveProcess over time-slicing's Default).
                    hold.value = value
                elif hold is None or not hold.holders:
                    baseline = self._read_setting(gpu, setting)
                    hold = checkpoint.SettingHold(baseline=baseline, value=value)
                    ledger[setting.value] = hold
                else:
                    change = False  # held at this value already: joining changes nothing
                if record.uid not in hold.holders:
                    hold.holders.append(record.uid)
                step = AppliedStep(
                    kind="hold",
                    gpu=gpu,
                    setting=setting,
                    baseline=hold.baseline,
                    value=value,
                )
            if change:
                # The hold, with the baseline, is on disk before the GPU leaves the baseline: a
                # crash in between leaves a record whose undo writes the baseline back. (Under
                # the settings lock, so no other claim joins a value not yet written.)
                self._record_step(record, step, "hold")
                try:
                    self._write_setting(gpu, setting, value)
                except Exception:
                    held = before is not None and bool(before.holders)
                    restore = before.value if before is not None and held else hold.baseline
                    self._withdraw_hold(gpu, setting, before, restore)
                    raise
                return
        # The record is the ledger's persistence (rebuilt from the records at start); joining
        # writes the claim's own file only, outside the shared locks.
        self._record_step(record, step, "hold")

    def _withdraw_hold(
        self,
        gpu: str,
        setting: Setting,
        before: checkpoint.SettingHold | None,
        restore: SettingValue,
    ) -> None:
        """A hold whose write failed goes back to what the ledger had before (under the settings
        lock, so no other claim joins a value the GPU does not have), and the GPU to `restore`
        (the write may have got part of the way)."""
        with self.checkpoint.lock:
            ledger = self.checkpoint.data.settings.setdefault(gpu, {})
            if before is None or not before.holders:
                ledger.pop(setting.value, None)
            else:
                ledger[setting.value] = before
            if not ledger:
                self.checkpoint.data.settings.pop(gpu, None)
        try:
            self._write_setting(gpu, setting, restore)
        except DeviceError as error:
            log.error("GPU %s: cannot set %s back after a failed write: %s", gpu, setting, error)

    def _release(self, uid: str, gpu: str, setting: str) -> None:
        with self._settings_lock, self.checkpoint.lock:
            ledger = self.checkpoint.data.settings.get(gpu, {})
            hold = ledger.get(setting)
            if hold is None or uid not in hold.holders:
                return
            if hold.holders == [uid]:
                try:
                    self._write_setting(gpu, Setting(setting), hold.baseline)
                except GpuLostError as error:  # what was set went with the GPU
                    log.warning("GPU %s: %s not set back: %s", gpu, setting, error)
                del ledger[setting]
                if not ledger:
                    self.checkpoint.data.settings.pop(gpu, None)
            else:
                hold.holders.remove(uid)
            # Nothing to write: the claim's record drops the hold with its next write; a crash
            # before that leaves the claim a holder at start, and its undo releases again.

    def _read_setting(self, gpu: str, setting: Setting) -> SettingValue:
        current = self.lib.settings(gpu)
        values: dict[Setting, SettingValue] = {
            Setting.computeMode: current.compute_mode.value if current.compute_mode else None,
            Setting.timeSlice: current.time_slice.value if current.time_slice else None,
            Setting.powerLimitWatts: current.power_limit_watts,
            Setting.lockedClocksMHz: current.locked_clocks_mhz,
            Setting.persistenceMode: current.persistence_mode,
        }
        return values[setting]

    def _write_setting(self, gpu: str, setting: Setting, value: SettingValue) -> None:
        writers: dict[Setting, Callable[[], None]] = {
            Setting.computeMode: lambda: self.lib.set_compute_mode(
                gpu, ComputeMode(str(value or ComputeMode.Default))
            ),
            Setting.timeSlice: lambda: self.lib.set_time_slice(
                gpu, TimeSlice(str(value or TimeSlice.Default))
            ),
            Setting.powerLimitWatts: lambda: self.lib.set_power_limit(
                gpu, None if value is None else int(value)
            ),
            Setting.lockedClocksMHz: lambda: self.lib.lock_clocks(
                gpu, None if value is None else int(value)
            ),
            Setting.persistenceMode: lambda: self.lib.set_persistence_mode(
                gpu, True if value is None else bool(value)
            ),
        }
        writers[setting]()

    # -- rollback / unprepare ----------------------------------------------------------------

    def _rollback(self, record: ClaimRecord) -> None:
        """Undo every recorded step in reverse, plus what may exist unrecorded (a crash right
        after making it): MIG devices at the planned places, the claim's MPS daemon."""
        self._undo_steps(record)
        self._destroy_unrecorded_migs(record)
        self.mps.release(record.uid)
        self.checkpoint.drop(record.uid)
        self.checkpoint.unmark_created(record.uid)

    def _undo_steps(self, record: ClaimRecord) -> None:
        for step in reversed(list(record.applied)):
            if step.kind == "cdi":
                self.cdi.remove(record.uid)
            elif step.kind == "mps":
                self.mps.release(record.uid)
            elif step.kind == "hold":
                self._release(record.uid, step.gpu, step.setting)
            elif step.kind == "mig":
                self._destroy_mig(record, step)
            record.applied.remove(step)
            if step.kind == "mig":
                # A destroyed instance's id can be reused by the next create: stop owning it now.
                # The other undos are idempotent per claim (its spec file, its daemon directory,
                # its name among a setting's holders), so redoing them after a crash is harmless
                # and their record is saved with the next write.
                self.checkpoint.put(record)
            self._step(f"undo-{step.kind}")
        self.cdi.remove(record.uid)

    def _destroy_mig(self, record: ClaimRecord, step: AppliedStep) -> None:
        assert step.gi_id is not None
        if (step.gpu, step.gi_id) in self._owned_migs(besides=record.uid):
            return  # gone already; the id now belongs to another claim's instance
        try:
            gi = self.lib.gpu_instance(step.gpu, step.gi_id)
        except GpuLostError as error:  # its MIG devices went with it
            log.warning(
                "claim %s: MIG device %s not destroyed: %s", record.uid, step.mig_uuid, error
            )
            return
        if gi is not None and gi.start == step.start:
            self.lib.destroy_mig_device(step.gpu, gi_id=step.gi_id, ci_id=step.ci_id)

    def _owned_migs(self, *, besides: str) -> set[tuple[str, int]]:
        return {
            (s.gpu, s.gi_id)
            for r in self.checkpoint.records()
            if r.uid != besides
            for s in r.applied
            if s.kind == "mig" and s.gi_id is not None
        }

    def _destroy_unrecorded_migs(self, record: ClaimRecord) -> None:
        """Destroy the MIG devices at the claim's planned placements that it made but did not
        record (a crash in between): only those marked as made for this claim, never another
        claim's device at the same place."""
        owned = self._owned_migs(besides=record.uid)
        for plan in record.planned_migs:
            mark = self.checkpoint.created(plan.parent_uuid, plan.start, plan.gi_profile_id)
            if mark is None or mark.claim != record.uid:
                continue
            for gi in self.lib.gpu_instances(plan.parent_uuid):
                at_plan = (gi.start, gi.profile_id) == (plan.start, plan.gi_profile_id)
                if at_plan and (plan.parent_uuid, gi.gi_id) not in owned:
                    log.warning(
                        "claim %s: destroying unrecorded GPU instance %d on %s",
                        record.uid,
                        gi.gi_id,
                        plan.parent_uuid,
                    )
                    self.lib.destroy_mig_device(plan.parent_uuid, gi_id=gi.gi_id, ci_id=None)

    def unprepare(self, claim: ClaimRef) -> None:
        """Undo a prepare; nothing to do when the claim is not prepared. Raises ClaimError."""
        if _bad_ref(claim):
            return  # prepare refuses such a claim: nothing of it can be prepared
        with self._claim_lock(claim.uid):
            try:
                self._unprepare_claim(claim)
            except (DeviceError, NasError, OSError) as error:
                raise ClaimError(f"unprepare {claim}: {error}") from error

    def _unprepare_claim(self, claim: ClaimRef) -> None:
        self._check_readable(claim)
        record = self.checkpoint.get(claim.uid)
        if record is None:
            self.cdi.remove(claim.uid)
            self._remove_prepared(claim.uid)
            return
        self._undo_prepared(record, claim)

    def _undo_prepared(self, record: ClaimRecord, claim: ClaimRef) -> None:
        record.status = ClaimStatus.UnprepareStarted
        self.checkpoint.put(record)
        migs = [s for s in record.applied if s.kind == "mig"]
        holds = [s for s in record.applied if s.kind == "hold"]
        self._undo_steps(record)
        self._step("undone")
        self._remove_prepared(record.uid)
        self._verify_baseline(record, migs, holds)
        self.checkpoint.drop(record.uid)
        self.checkpoint.unmark_created(record.uid)
        log.info("claim %s unprepared", claim)

    def _remove_prepared(self, uid: str) -> None:
        self.store.set_prepared(uid, None)

    def _verify_baseline(
        self, record: ClaimRecord, migs: list[AppliedStep], holds: list[AppliedStep]
    ) -> None:
        problems = []
        owned = self._owned_migs(besides=record.uid)
        # A lost GPU has nothing left to verify: what was set on it went with it.
        migs = [s for s in migs if s.gpu not in self.lost]
        holds = [s for s in holds if s.gpu not in self.lost]
        for step in migs:
            assert step.gi_id is not None
            try:
                gi = self.lib.gpu_instance(step.gpu, step.gi_id)
            except GpuLostError:
                continue
            if gi is not None and gi.start == step.start and (step.gpu, gi.gi_id) not in owned:
                problems.append(
                    f"MIG device {step.mig_uuid} ({step.profile} at {step.start}) "
                    f"still exists on {step.gpu}"
                )
        with self.checkpoint.lock:
            ledger = self.checkpoint.data.settings
            for step in holds:
                hold = ledger.get(step.gpu, {}).get(step.setting)
                if hold is not None and hold.holders:
                    continue  # other claims still hold it
                try:
                    problem = self._baseline_problem(step)
                except GpuLostError:
                    continue
                if problem:
                    problems.append(problem)
        if problems:
            record.applied = [*migs, *holds]  # the next unprepare cleans up and checks again
            self.checkpoint.put(record)
            raise ClaimError(f"cleanup of {record.uid} not verified: {'; '.join(problems)}")

    def _baseline_problem(self, step: AppliedStep) -> str:
        setting = Setting(step.setting)
        current = self._read_setting(step.gpu, setting)
        expected: SettingValue = step.baseline  # what the GPU had before the first holder
        if expected is None and setting is Setting.computeMode:
            expected = ComputeMode.Default.value
        if expected is None and setting is Setting.timeSlice:
            expected = TimeSlice.Default.value
        if expected is None and setting is Setting.powerLimitWatts:
            expected = self.lib.settings(step.gpu).default_power_limit_watts
        if current is not None and current != expected:
            return f"{step.gpu} {setting.value} is {current}, baseline {expected}"
        return ""

    # -- start-up reconciliation and garbage collection --------------------------------------

    def reconcile(self) -> list[str]:
        """Finish interrupted work, adopt MIG devices of prepared claims, handle orphans.

        Never raises for what it finds: returns what it did or reports, one line each."""
        report = self._report_unreadable()
        report.extend(self._restore_orphan_holds())
        for record in self.checkpoint.records():
            if record.status is ClaimStatus.PrepareCompleted:
                report.extend(self._check_adopted(record))
                continue
            try:
                if record.status is ClaimStatus.UnprepareStarted:
                    self.unprepare(ClaimRef(record.uid, record.namespace, record.name))
                    report.append(f"finished interrupted unprepare of {record.uid}")
                else:
                    with self._claim_lock(record.uid):
                        self._rollback(record)
                    report.append(f"rolled back interrupted prepare of {record.uid}")
            except (ClaimError, DeviceError, OSError, NasError) as error:
                report.append(f"could not finish {record.uid}: {error}")
        report.extend(self.ensure_mps_daemons())
        if self._kept_claims():
            report.append(
                "MPS daemons no claim holds are kept: a claim whose checkpoint entry is "
                "unreadable may use one"
            )
        else:
            report.extend(
                f"stopped MPS daemon {name}: no claim holds it" for name in self.mps.sweep()
            )
        report.extend(self._handle_orphans())
        report.extend(self._sync_nas())
        for line in report:
            log.warning("reconcile: %s", line)
        return report

    def ensure_mps_daemons(self) -> list[str]:
        """Every MPS daemon a claim holds runs with its limits (`MpsManager.ensure_all`); one
        line per daemon. One found not running (its MPS host or the daemon itself died; the
        claims' running clients lost their server) or whose limits had changed is reported: an
        error line, a Warning Event on the NAS and the metrics."""
        lines, down = [], 0
        for found in self.mps.ensure_all():
            line = found.line()
            lines.append(line)
            if found.outcome is mps.Outcome.adopted:
                continue
            log.error("%s", line)
            self.metrics.mps_daemon_problems.labels(found.outcome.name).inc()
            down += found.outcome is mps.Outcome.down
            reason = {
                mps.Outcome.down: "MpsDaemonDown",
                mps.Outcome.restarted: "MpsDaemonRestarted",
                mps.Outcome.limits_restored: "MpsDaemonLimitsRestored",
            }[found.outcome]
            self.store.warn(reason, line)
        self.metrics.mps_daemons_down.set(down)
        return lines

    def _kept_claims(self) -> bool:
        return any(e.kind in ("claim", "claims") for e in self.checkpoint.unreadable)

    def _report_unreadable(self) -> list[str]:
        """Name the claims of unreadable checkpoint entries where something else knows them (the
        NAS, CDI specs, MIG marks), then report each entry: a line, a Warning Event on the NAS,
        the metric."""
        if not self.checkpoint.unreadable:
            return []
        known: set[str] = set(self.cdi.claim_uids())
        known.update(mark.claim for mark in self.checkpoint.created_migs.values())
        try:
            spec = self.store.read().spec
            known.update(spec.preparedClaims)
            known.update(spec.allocatedClaims)
        except NasError as error:
            log.warning("cannot read the NAS to name unreadable checkpoint entries: %s", error)
        self.checkpoint.identify(known)
        lines = []
        for entry in self.checkpoint.unreadable:
            self.metrics.checkpoint_read_failures.labels(entry.kind).inc()
            line = f"{entry.describe()}; kept for an operator"
            if entry.kind in ("claim", "claims"):
                line += (
                    ": its claim is neither prepared again nor unprepared, and nothing it may "
                    "hold (MPS daemons, MIG devices, preparedClaims entries) is taken for "
                    "nobody's, until the file is removed"
                )
            self.store.warn("CheckpointEntryUnreadable", line)
            lines.append(line)
        return lines

    def _restore_orphan_holds(self) -> list[str]:
        """Set back the settings an earlier version's ledger held for claims with no record."""
        lines = []
        for gpu, setting, hold in self.checkpoint.orphan_holds:
            with self._settings_lock, self.checkpoint.lock:
                held = self.checkpoint.data.settings.get(gpu, {}).get(setting)
                if held is not None and held.holders:
                    continue
                try:
                    self._write_setting(gpu, Setting(setting), hold.baseline)
                except (DeviceError, ValueError) as error:
                    lines.append(f"cannot restore {setting} of {gpu} to {hold.baseline}: {error}")
                    continue
            lines.append(
                f"restored {setting} of {gpu} to its baseline {hold.baseline} (held for "
                f"{', '.join(hold.holders)} in an earlier version's ledger, no record left)"
            )
        self.checkpoint.orphan_holds.clear()
        return lines

    def _check_adopted(self, record: ClaimRecord) -> list[str]:
        """A prepared claim keeps its MIG devices; say so when one has gone (e.g. a GPU reset)."""
        lines = []
        for step in record.applied:
            if step.kind != "mig" or step.gi_id is None:
                continue
            try:
                gi = self.lib.gpu_instance(step.gpu, step.gi_id)
            except GpuLostError:
                lines.append(
                    f"prepared claim {record.uid}: its MIG device {step.mig_uuid} is on "
                    f"{step.gpu}, which fell off the bus"
                )
                continue
            if gi is None or gi.start != step.start:
                lines.append(
                    f"prepared claim {record.uid}: its MIG device {step.mig_uuid} "
                    f"({step.profile} at {step.start} on {step.gpu}) is gone"
                )
        return lines

    def _unowned_instances(self) -> list[tuple[GpuDevice, GpuInstance]]:
        """GPU instances no claim's record owns or plans (an in-flight prepare's are planned
        before they are made)."""
        owned = self._owned_migs(besides="")
        planned = {
            (p.parent_uuid, p.start, p.gi_profile_id)
            for r in self.checkpoint.records()
            for p in r.planned_migs
            if r.status is not ClaimStatus.PrepareCompleted
        }
        found = []
        for gpu in self.gpus():
            if not gpu.mig_enabled or gpu.lost or gpu.uuid in self.lost:
                continue
            try:
                instances = self.lib.gpu_instances(gpu.uuid)
            except GpuLostError:
                continue
            for gi in instances:
                if (gpu.uuid, gi.gi_id) in owned or (
                    gpu.uuid,
                    gi.start,
                    gi.profile_id,
                ) in planned:
                    continue
                found.append((gpu, gi))
        return found

    def _orphan_entry(self, gpu: GpuDevice, gi: GpuInstance) -> OrphanMigDevice:
        profiles = {p.gi_profile_id: p.name for p in self.lib.mig_profiles(gpu.uuid)}
        mark = self.checkpoint.created(gpu.uuid, gi.start, gi.profile_id)
        return OrphanMigDevice(
            parentUUID=gpu.uuid,
            giId=gi.gi_id,
            profile=profiles.get(gi.profile_id, ""),
            placement=MigPlacement(start=gi.start, size=gi.size),
            createdByDrasat=mark is not None,
        )

    def _handle_orphans(self) -> list[str]:
        """Apply the orphan policy to every MIG device no claim owns; report those kept."""
        lines = []
        kept = []
        for gpu, gi in self._unowned_instances():
            entry = self._orphan_entry(gpu, gi)
            mark = self.checkpoint.created(gpu.uuid, gi.start, gi.profile_id)
            what = (
                f"orphan MIG device {entry.profile or f'profile {gi.profile_id}'} "
                f"(GPU instance {gi.gi_id}, start {gi.start} size {gi.size}) on {gpu.uuid}, "
                + (f"made by drasat for claim {mark.claim}" if mark else "not made by drasat")
            )
            destroy = self.orphans is OrphanPolicy.destroy_all or (
                self.orphans is OrphanPolicy.destroy_own and mark is not None
            )
            keeper = self._kept_owner(mark)
            if destroy and keeper:
                lines.append(f"{what}: kept ({keeper})")
                kept.append(entry)
                continue
            if not destroy:
                lines.append(f"{what}: kept (--orphan-mig={self.orphans.value})")
                kept.append(entry)
                continue
            try:
                self.lib.destroy_mig_device(gpu.uuid, gi_id=gi.gi_id, ci_id=None)
            except DeviceError as error:
                lines.append(f"{what}: cannot destroy: {error}")
                kept.append(entry)
                continue
            lines.append(f"destroyed {what}")
            if mark is not None:
                self.checkpoint.forget_created(gpu.uuid, gi.start, gi.profile_id)
        lines.extend(self._report_orphans(kept))
        return lines

    def _kept_owner(self, mark: CreatedMig | None) -> str:
        """Why a MIG device no record owns may still be a claim's ("" when it cannot be): its
        claim's checkpoint entry, or one whose claim is unknown, is unreadable."""
        if mark is not None and self.checkpoint.quarantined(mark.claim) is not None:
            return f"the checkpoint entry of claim {mark.claim} is unreadable"
        unknown = self.checkpoint.unknown_entries()
        if unknown:
            return f"{len(unknown)} unreadable checkpoint entries of unknown claims"
        return ""

    def refresh_orphans(self) -> list[str]:
        """Bring the NAS `spec.orphanMigDevices` up to date (destroys nothing): devices destroyed
        by hand since start-up leave it, so their slices are free again."""
        kept = [self._orphan_entry(gpu, gi) for gpu, gi in self._unowned_instances()]
        return self._report_orphans(kept)

    def _report_orphans(self, kept: list[OrphanMigDevice]) -> list[str]:
        def mutate(nas: NodeAllocationState) -> bool:
            if nas.spec.orphanMigDevices == kept:
                return False
            nas.spec.orphanMigDevices = kept
            return True

        try:
            self.store.update(mutate)
        except NasError as error:
            return [f"cannot report orphan MIG devices in the NAS: {error}"]
        return []

    def _sync_nas(self) -> list[str]:
        done = {
            r.uid: r for r in self.checkpoint.records() if r.status is ClaimStatus.PrepareCompleted
        }
        lines: list[str] = []
        # An unreadable entry's claim keeps its entry; when one cannot be named, every entry stays.
        keep_all = bool(self.checkpoint.unknown_entries())

        def mutate(nas: NodeAllocationState) -> bool:
            lines.clear()
            prepared = nas.spec.preparedClaims
            for uid in [u for u in prepared if u not in done]:
                if keep_all or self.checkpoint.quarantined(uid) is not None:
                    continue
                del prepared[uid]
                lines.append(f"removed stale preparedClaims entry {uid}")
            for uid, record in done.items():
                if uid not in prepared:
                    prepared[uid] = _record_prepared(record)
                    lines.append(f"restored preparedClaims entry {uid}")
            return bool(lines)

        try:
            self.store.update(mutate)
        except NasError as error:
            return [f"cannot sync preparedClaims: {error}"]
        return lines

    def garbage_collect(self) -> list[str]:
        """Unprepare claims that are prepared here but no longer allocated to this node.

        Claims prepared from their resource handle alone, or from a v1 ResourceClaim, are left
        to the kubelet's unprepare."""
        try:
            allocated = set(self.store.read().spec.allocatedClaims)
        except NasError as error:
            log.warning("garbage collection skipped: %s", error)
            return []
        collected = []
        for record in self.checkpoint.records():
            done = record.status is ClaimStatus.PrepareCompleted
            if record.uid in allocated or not done or record.source != "nas":
                continue
            try:
                self.unprepare(ClaimRef(record.uid, record.namespace, record.name))
                collected.append(record.uid)
            except ClaimError as error:
                log.error("garbage collection of %s failed: %s", record.uid, error)
        return collected


def _mps_limits(uid: str, plan: DevicePlan, visible: list[str]) -> mps.MpsLimits:
    config = plan.sharing.mpsConfig if plan.sharing is not None else None
    threads = config.defaultActiveThreadPercentage if config else None
    pinned: dict[int, int] = {}
    if config and config.defaultPinnedDeviceMemoryLimit is not None:
        limit = to_bytes(config.defaultPinnedDeviceMemoryLimit)
        pinned = dict.fromkeys(range(len(visible)), limit)
    for key, value in (
        (config.defaultPerDevicePinnedMemoryLimit if config else None) or {}
    ).items():
        index = visible.index(key) if key in visible else int(key) if key.isdigit() else -1
        if not 0 <= index < len(visible):
            raise ClaimError(f"MPS pinned memory limit for unknown device {key!r}")
        pinned[index] = to_bytes(value)
    share = plan.share
    if share is not None:
        threads = share.compute if share.compute is not None else threads
        if share.memory is not None:
            pinned = dict.fromkeys(range(len(visible)), to_bytes(share.memory))
    return mps.MpsLimits(uid, tuple(visible), threads, pinned)


def _share_takes(uid: str, plan: DevicePlan) -> dict[str, GpuShare]:
    """GPU uuid -> what a share claim's MPS limits give it of that GPU: its active thread
    percentage where its share limits compute (none: a memory-only share takes no compute, as
    the allocator counts it), its pinned memory limit there."""
    limits = _mps_limits(uid, plan, list(plan.gpus))
    compute = limits.thread_percentage if plan.share is not None and plan.share.compute else None
    out = {}
    for index, uuid in enumerate(plan.gpus):
        memory = limits.pinned_limit_bytes.get(index)
        if compute is None and memory is None:
            continue
        out[uuid] = GpuShare(compute=compute, memory=None if memory is None else str(memory))
    return out


def _lifecycle_setting(action: LifecycleActionName, value: Any) -> tuple[Setting, SettingValue]:
    try:
        if action is LifecycleActionName.setComputeMode:
            return Setting.computeMode, ComputeMode(str(value)).value
        if action is LifecycleActionName.setTimeSlice:
            return Setting.timeSlice, TimeSlice(str(value)).value
        if action is LifecycleActionName.setPowerLimitWatts:
            return Setting.powerLimitWatts, int(value)
        if action is LifecycleActionName.lockGpuClocksMHz:
            return Setting.lockedClocksMHz, int(value)
        if str(value) not in ("Enabled", "Disabled"):
            raise ValueError(value)
        return Setting.persistenceMode, str(value) == "Enabled"
    except (ValueError, TypeError):
        raise ClaimError(f"lifecycle action {action.value}: bad value {value!r}") from None


def _devices_of(plan: DevicePlan) -> tuple[Any, ...]:
    """What a claim holds on the node, for telling a re-prepare of the same devices (whatever
    the order, or a configuration written differently) from one of others."""
    gpus = sorted(plan.gpus)
    migs = sorted((d.parent_uuid, d.profile, d.start, d.size) for d in plan.migs)
    share = plan.share.model_dump() if plan.share is not None else None
    return (gpus, migs, share)


def _classic_plan(allocated: AllocatedDevices) -> DevicePlan:
    """The plan of a classic claim's NAS entry or resource handle (the classic CRD model stops
    here)."""
    return DevicePlan.from_entry(allocated)


def _record_prepared(record: ClaimRecord) -> PreparedDevices:
    migs = [s for s in record.applied if s.kind == "mig"]
    if migs:
        return PreparedDevices(
            mig=PreparedMigDevices(
                devices=[
                    PreparedMigDevice(
                        uuid=s.mig_uuid,
                        profile=s.profile,
                        parentUUID=s.gpu,
                        placement=MigPlacement(start=s.start or 0, size=s.size or 1),
                        giId=s.gi_id,
                        ciId=s.ci_id,
                    )
                    for s in migs
                ]
            )
        )
    uuids = record.allocated().gpus
    return PreparedDevices(gpu=PreparedGpus(devices=[PreparedGpu(uuid=u) for u in uuids]))


def _visible_env(visible: list[str]) -> dict[str, str]:
    """The environment that says which GPUs and MIG devices (UUIDs) a container has.

    `NVIDIA_VISIBLE_DEVICES` is `void`, as in the specs of NVIDIA's toolkit and DRA driver: the
    spec gives the container its devices, and where nvidia-container-runtime is the node's
    runtime (the GPU operator's default) a list of devices there makes its hook inject them
    again with every utility program the image asks for (the MPS programs among them, which
    containers do not get here) and, for `all` (what CUDA images set), every GPU of the node.
    The devices are named in drasat's own variable."""
    env = {
        "NVIDIA_VISIBLE_DEVICES": "void",
        "DRASAT_GPU_ALLOCATED": "true" if visible else "false",
        "DRASAT_GPU_COUNT": str(len(visible)),
    }
    if visible:
        env["DRASAT_GPU_UUIDS"] = ",".join(visible)
    return env
