"""How an allocated device is shared between the containers/pods of one claim (NVIDIA's fields),
and a partial GPU that share claims of different pods take side by side (`GpuShare`)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator

from drasat.api.base import Spec
from drasat.api.quantity import Quantity


class SharingStrategy(StrEnum):
    TimeSlicing = "TimeSlicing"
    MPS = "MPS"


class TimeSlice(StrEnum):
    Default = "Default"
    Short = "Short"
    Medium = "Medium"
    Long = "Long"


class TimeSlicingConfig(Spec):
    timeSlice: TimeSlice | None = Field(
        None, description="Time-slice length: Default, Short, Medium or Long."
    )
    interval: TimeSlice | None = Field(None, description="Accepted spelling of timeSlice.")

    @model_validator(mode="after")
    def _one_spelling(self) -> TimeSlicingConfig:
        both = self.timeSlice is not None and self.interval is not None
        if both and self.timeSlice != self.interval:
            raise ValueError("timeSlice and interval disagree; set only one")
        return self

    @property
    def effective(self) -> TimeSlice:
        return self.timeSlice or self.interval or TimeSlice.Default


class MpsConfig(Spec):
    defaultActiveThreadPercentage: int | None = Field(
        None, ge=1, le=100, description="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for clients."
    )
    defaultPinnedDeviceMemoryLimit: Quantity | None = Field(
        None, description="Pinned device memory limit for every device of the claim."
    )
    defaultPerDevicePinnedMemoryLimit: dict[str, Quantity] | None = Field(
        None, description="Pinned memory limit per device, keyed by device index or UUID."
    )


class GpuSharing(Spec):
    strategy: SharingStrategy = Field(
        SharingStrategy.TimeSlicing, description="TimeSlicing (default) or MPS."
    )
    timeSlicingConfig: TimeSlicingConfig | None = None
    mpsConfig: MpsConfig | None = None

    @model_validator(mode="after")
    def _config_matches_strategy(self) -> GpuSharing:
        if self.strategy is SharingStrategy.TimeSlicing and self.mpsConfig is not None:
            raise ValueError("mpsConfig is set but strategy is TimeSlicing")
        if self.strategy is SharingStrategy.MPS and self.timeSlicingConfig is not None:
            raise ValueError("timeSlicingConfig is set but strategy is MPS")
        return self


def default_sharing() -> GpuSharing:
    """NVIDIA's default: time-slicing with the default slice."""
    return GpuSharing(
        strategy=SharingStrategy.TimeSlicing,
        timeSlicingConfig=TimeSlicingConfig(timeSlice=TimeSlice.Default),
    )


class GpuShare(Spec):
    """A partial GPU: a compute percentage and/or an amount of memory of one GPU."""

    compute: int | None = Field(None, ge=1, le=100, description="Percent of the GPU's compute.")
    memory: Quantity | None = Field(None, description="GPU memory this share needs, e.g. 8Gi.")

    @model_validator(mode="after")
    def _something(self) -> GpuShare:
        if self.compute is None and self.memory is None:
            raise ValueError("a share needs compute, memory or both")
        return self
