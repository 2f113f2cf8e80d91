"""What the node plugin sets up for one claim on this node: the claim's plan (`DevicePlan`).

Both kubelet generations prepare from a plan. A v1 claim's is made from its ResourceClaim's
allocation results and opaque configuration (`v1claims`); a classic claim's from its NAS
`allocatedClaims` entry or its resource handle, converted where the preparer reads them
(`state`). The classic CRD model stays at that edge: nothing of a v1 claim passes through it.

The checkpoint keeps a claim's plan in its record (`ClaimRecord.allocation`) in the JSON shape
records have had since format 1: `claimInfo`, `gpu` or `mig` (`devices`, `sharing`), `share`,
`optional`, `lifecycle`. The models below are that shape, the checkpoint's own: `record()` writes
it and `from_record` reads it, so the format does not change with the plugin's types (or with
the CRD the shape was first taken from).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field, model_validator

from drasat.api import limits
from drasat.api.base import Spec
from drasat.api.sharing import GpuShare, GpuSharing, SharingStrategy


@dataclass(frozen=True)
class MigSlot:
    """A MIG device the claim gets: `profile` made at `start` (`size` memory slices) on the GPU
    `parent_uuid`."""

    profile: str
    parent_uuid: str
    start: int
    size: int


@dataclass(frozen=True)
class Step:
    """A lifecycle (device initialisation) action of the fixed vocabulary, with its value."""

    action: str
    value: str | int | None = None


@dataclass(frozen=True)
class DevicePlan:
    """One claim's devices on this node and how they are set up.

    `gpus` are GPUs the claim holds whole (alone, or shared by its own sharing) or, with
    `share`, shares of; `migs` the MIG devices to make. `mig_claim` says which of the two kinds
    the claim is (a claim of either kind may have no device: the `optional` claim that ran
    without one). `sharing` is the claim's sharing of its devices, `share` its share limits
    (compute %, memory, enforced by MPS), `lifecycle` the cluster's init actions."""

    namespace: str
    name: str
    uid: str
    gpus: tuple[str, ...] = ()
    migs: tuple[MigSlot, ...] = ()
    mig_claim: bool = False
    sharing: GpuSharing | None = None
    share: GpuShare | None = None
    optional: bool | None = None
    lifecycle: tuple[Step, ...] | None = None

    def refusal(self) -> str | None:
        """Why no node may set this plan up, whatever its hardware (None: nothing). The rule
        for every kubelet generation: the classic entry and a v1 claim's results both become a
        plan, and the preparer asks it before it changes anything."""
        timesliced = (
            self.sharing is not None and self.sharing.strategy is SharingStrategy.TimeSlicing
        )
        if self.share is not None and timesliced:
            gpus = ", ".join(self.gpus) or "its GPU"
            return (
                f"the claim is a share of {gpus}: a share runs under MPS, which enforces its "
                "limits; sharing strategy TimeSlicing would set the time-slice of the whole GPU, "
                "which other claims use too"
            )
        return None

    def parents(self) -> list[str]:
        """The GPUs the claim uses, whole or by a MIG device, each once in the claim's order."""
        return list(dict.fromkeys([*self.gpus, *(m.parent_uuid for m in self.migs)]))

    def record(self) -> dict[str, Any]:
        """The plan as the checkpoint record keeps it; ValidationError when it cannot be one
        (e.g. more devices than a claim may have)."""
        holder: dict[str, Any] = {"sharing": self.sharing}
        if self.mig_claim:
            migs = [
                _Mig(
                    profile=m.profile,
                    parentUUID=m.parent_uuid,
                    placement=_Placement(start=m.start, size=m.size),
                )
                for m in self.migs
            ]
            holders: dict[str, Any] = {"mig": _Migs(devices=migs, **holder)}
        else:
            holders = {"gpu": _Gpus(devices=[_Gpu(uuid=u) for u in self.gpus], **holder)}
        lifecycle = (
            None
            if self.lifecycle is None
            else [_Step(action=s.action, value=s.value) for s in self.lifecycle]
        )
        return _Record(
            claimInfo=_ClaimInfo(namespace=self.namespace, name=self.name, uid=self.uid),
            share=self.share,
            optional=self.optional,
            lifecycle=lifecycle,
            **holders,
        ).dump()

    @classmethod
    def from_record(cls, body: Any) -> DevicePlan:
        """The plan a checkpoint record keeps (`record()`); ValidationError when it is none."""
        return cls.from_entry(_Record.model_validate(body))

    @classmethod
    def from_entry(cls, entry: Any) -> DevicePlan:
        """The plan of an entry in the NAS-entry shape (`claimInfo`, `gpu` or `mig` with their
        devices and sharing, `share`, `optional`, `lifecycle`): a checkpoint record, or the
        classic edge's entry (`state._classic_plan`), read by this one rule."""
        info = entry.claimInfo
        holder = entry.gpu or entry.mig
        lifecycle = entry.lifecycle
        return cls(
            namespace=info.namespace,
            name=info.name,
            uid=info.uid,
            gpus=tuple(d.uuid for d in entry.gpu.devices) if entry.gpu else (),
            migs=tuple(
                MigSlot(d.profile, d.parentUUID, d.placement.start, d.placement.size)
                for d in (entry.mig.devices if entry.mig else [])
            ),
            mig_claim=entry.mig is not None,
            sharing=holder.sharing if holder is not None else None,
            share=entry.share,
            optional=entry.optional,
            lifecycle=None
            if lifecycle is None
            else tuple(Step(s.action, s.value) for s in lifecycle),
        )


# -- the record's shape (checkpoint formats 1 and 2) -------------------------------------------


class _ClaimInfo(Spec):
    namespace: str
    name: str
    uid: str


class _Gpu(Spec):
    uuid: str


class _Gpus(Spec):
    devices: list[_Gpu] = Field(default_factory=list, max_length=limits.MAX_DEVICES_PER_CLAIM)
    sharing: GpuSharing | None = None


class _Placement(Spec):
    start: int = Field(ge=0, le=7)
    size: int = Field(ge=1, le=8)


class _Mig(Spec):
    profile: str
    parentUUID: str
    placement: _Placement


class _Migs(Spec):
    devices: list[_Mig] = Field(default_factory=list, max_length=limits.MAX_DEVICES_PER_CLAIM)
    sharing: GpuSharing | None = None


class _Step(Spec):
    action: str
    value: str | int | None = None


class _Record(Spec):
    claimInfo: _ClaimInfo
    gpu: _Gpus | None = None
    mig: _Migs | None = None
    share: GpuShare | None = None
    optional: bool | None = None
    lifecycle: list[_Step] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> _Record:
        if (self.gpu is None) == (self.mig is None):
            raise ValueError("an allocated claim holds exactly one of gpu or mig")
        return self
