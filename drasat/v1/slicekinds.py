"""The `resource.k8s.io/v1` ResourceSlice and DeviceTaintRule as pydantic models: what the
controller and the what-if read of the devices a driver publishes (`drasat.v1.slices`).

Read leniently beyond the fields the device model uses, so a newer driver's or server's extra
fields do not stop a reader; an attribute holds exactly one value, a quantity parses. This is a
purely computational module.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, NotRequired

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, field_validator
from typing_extensions import TypedDict

from drasat.api import limits
from drasat.api.base import Object, Spec
from drasat.api.quantity import base_units as unbounded
from drasat.api.quantity import to_bytes

#: API limits (`pkg/apis/resource/types.go`).
MAX_DEVICES_PER_SLICE = 128
MAX_COUNTER_SETS = 8


class Strict(Spec):
    """A v1 struct checked field by field (unknown fields refused, as the API server does)."""


class Open(BaseModel):
    """A v1 struct of which only some fields matter here; the rest are kept unchecked."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


# ResourceSlices: lenient beyond what the device model reads.


#: One value of `int`, `bool`, `string` or `version` (`Device.attributes` checks there is
#: exactly one: once per device, not per attribute). A plain dict, not a model: a MIG fleet's
#: slices hold hundreds of thousands of attributes, and a model each was most of the time
#: their first read took (`bench.slice_read`).
DeviceAttribute = TypedDict(  # noqa: UP013 (its keys `int` and `bool` would shadow the types)
    "DeviceAttribute",
    {
        "int": NotRequired[int | None],
        "bool": NotRequired[bool | None],
        "string": NotRequired[str | None],
        "version": NotRequired[str | None],
    },
)
DeviceAttribute.__pydantic_config__ = ConfigDict(  # type: ignore[attr-defined]
    extra="forbid", str_max_length=limits.MAX_STRING
)


#: Slices repeat few distinct quantities thousands of times (every MIG device's `1`).
_bytes = functools.lru_cache(maxsize=4096, typed=True)(to_bytes)
_unbounded = functools.lru_cache(maxsize=4096, typed=True)(unbounded)


def _parses(value: int | str) -> int | str:
    """A well-formed quantity, however big (the API server accepts `10E`, over 64 bits): only
    a quantity drasat reads must fit 64 bits, checked where it is read (`amount`)."""
    _unbounded(value)
    return value


#: A capacity or counter: `{value}` and, kept unchecked, what else v1 says of it
#: (`requestPolicy`). A plain dict, as `DeviceAttribute`.
class Quantity(TypedDict):
    value: Annotated[StrictInt | str, AfterValidator(_parses)]


Quantity.__pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[attr-defined]


def amount(quantity: Quantity) -> int:
    """The quantity in its base unit (bytes, or a plain count); raises ValueError when it is
    over 64 bits."""
    return _bytes(quantity["value"])


def base_units(value: int | str) -> int:
    """A quantity's value (`4864Mi`, `7`) in its base unit; raises ValueError when it does not
    parse or is over 64 bits."""
    return _bytes(value)


class CounterConsumption(Strict):
    counterSet: str
    counters: dict[str, Quantity]


class DeviceTaint(Open):
    key: str
    value: str | None = None
    effect: str


class Device(Open):
    name: str = Field(min_length=1, max_length=limits.MAX_NAMESPACE)
    attributes: dict[str, DeviceAttribute] = Field(default_factory=dict)
    capacity: dict[str, Quantity] = Field(default_factory=dict)
    consumesCounters: list[CounterConsumption] | None = None
    taints: list[DeviceTaint] | None = None
    allowMultipleAllocations: bool | None = None

    @field_validator("attributes", mode="before")
    @classmethod
    def _one_value_each(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for name, attribute in value.items():
                if not isinstance(attribute, dict) or (
                    len(attribute) == 1 and None not in attribute.values()
                ):
                    continue  # not a mapping (refused by the type), or one value: the usual case
                if sum(v is not None for v in attribute.values()) != 1:
                    raise ValueError(
                        f"{name}: exactly one of int, bool, string or version must be set"
                    )
        return value

    @field_validator("capacity", mode="before")
    @classmethod
    def _bare_quantities(cls, value: Any) -> Any:
        # v1alpha3 (1.31) wrote a capacity as a bare quantity; later versions as {value}.
        if isinstance(value, dict) and any(isinstance(v, int | str) for v in value.values()):
            return {k: {"value": v} if isinstance(v, int | str) else v for k, v in value.items()}
        return value


class CounterSet(Strict):
    name: str
    counters: dict[str, Quantity]


class ResourcePool(Strict):
    name: str = Field(min_length=1, max_length=limits.MAX_NAME)
    generation: int = Field(0, ge=0)
    resourceSliceCount: int = Field(1, ge=1)


class ResourceSliceSpec(Open):
    driver: str = Field(min_length=1, max_length=limits.MAX_NAME)
    pool: ResourcePool
    nodeName: str | None = None
    devices: list[Device] = Field(default_factory=list, max_length=MAX_DEVICES_PER_SLICE)
    sharedCounters: list[CounterSet] | None = Field(None, max_length=MAX_COUNTER_SETS)


class ResourceSlice(Object):
    spec: ResourceSliceSpec


# DeviceTaintRules: taints put on published devices by selector (1.37: resource.k8s.io/v1).


class DeviceTaintSelector(Open):
    driver: str | None = None
    pool: str | None = None
    device: str | None = None

    def selects(self, driver: str, pool: str, device: str) -> bool:
        """Every field given must match; none given: every device."""
        wanted = ((self.driver, driver), (self.pool, pool), (self.device, device))
        return all(given in (None, actual) for given, actual in wanted)


class DeviceTaintRuleSpec(Open):
    deviceSelector: DeviceTaintSelector | None = None
    taint: DeviceTaint


class DeviceTaintRule(Object):
    spec: DeviceTaintRuleSpec
    status: dict[str, Any] | None = None
