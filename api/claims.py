"""Claim and class parameters: GpuClaimParameters, MigDeviceClaimParameters, DeviceClassParameters.

Field names follow NVIDIA's classic driver so its manifests port by renaming the group. drasat's
additions: `optional`, `share` and `topology` on GPU claims, and MIG claims stated by needs.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from drasat.api import groups, limits
from drasat.api.base import Object, Spec
from drasat.api.quantity import Quantity
from drasat.api.selectors import GpuSelector
from drasat.api.sharing import GpuShare, GpuSharing


class Requirement(StrEnum):
    Preferred = "Preferred"
    Required = "Required"


class Topology(Spec):
    """Placement of the GPUs of one claim relative to each other (count > 1)."""

    sameNVLinkDomain: Requirement | None = Field(
        None, description="All GPUs of the claim linked by NVLink with each other."
    )
    sameNUMANode: Requirement | None = Field(None, description="All GPUs on one NUMA node.")


class GpuClaimParametersSpec(Spec):
    count: int = Field(1, ge=1, le=limits.MAX_DEVICES_PER_CLAIM, description="Number of GPUs.")
    selector: GpuSelector | None = Field(None, description="Which GPUs qualify.")
    sharing: GpuSharing | None = Field(None, description="How the claim's users share its GPUs.")
    optional: bool = Field(
        False,
        description="Soft request: allocate GPUs if possible, else allocate no device and let "
        "the pod run CPU-only.",
    )
    share: GpuShare | None = Field(
        None, description="A partial GPU; share claims of different pods may sit on one GPU."
    )
    topology: Topology | None = None

    @model_validator(mode="after")
    def _share_is_one_gpu(self) -> GpuClaimParametersSpec:
        if self.share is not None and self.count != 1:
            raise ValueError("a share claim takes part of one GPU: count must be 1")
        return self


class GpuClaimParameters(Object):
    kind: Literal["GpuClaimParameters"] = "GpuClaimParameters"
    apiVersion: str = groups.PARAMS_API_VERSION
    spec: GpuClaimParametersSpec = Field(default_factory=GpuClaimParametersSpec)


class MigDeviceClaimParametersSpec(Spec):
    profile: str | None = Field(None, description="MIG profile, e.g. 1g.10gb or 3g.40gb.")
    sharing: GpuSharing | None = None
    gpuClaimName: str | None = Field(
        None, description="A GPU claim of the same pod whose GPU must host this MIG device."
    )
    memory: Quantity | None = Field(
        None, description="Needs instead of a profile: at least this much memory."
    )
    computeSlices: int | None = Field(
        None, ge=1, le=7, description="Needs instead of a profile: at least this many slices."
    )

    @model_validator(mode="after")
    def _profile_or_needs(self) -> MigDeviceClaimParametersSpec:
        needs = self.memory is not None or self.computeSlices is not None
        if self.profile is None and not needs:
            raise ValueError("set profile, or state needs with memory and/or computeSlices")
        if self.profile is not None and needs:
            raise ValueError("set either profile or needs (memory/computeSlices), not both")
        return self


class MigDeviceClaimParameters(Object):
    kind: Literal["MigDeviceClaimParameters"] = "MigDeviceClaimParameters"
    apiVersion: str = groups.PARAMS_API_VERSION
    spec: MigDeviceClaimParametersSpec


class DeviceClassParametersSpec(Spec):
    sharable: bool = Field(True, description="Whether claims of this class may be shared by pods.")


class DeviceClassParameters(Object):
    kind: Literal["DeviceClassParameters"] = "DeviceClassParameters"
    apiVersion: str = groups.PARAMS_API_VERSION
    spec: DeviceClassParametersSpec = Field(default_factory=DeviceClassParametersSpec)
