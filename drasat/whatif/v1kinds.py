"""The `resource.k8s.io/v1` objects the what-if reads, as pydantic models, and the older versions
(`v1beta1`, `v1beta2`) converted to the v1 shape first.

Claims, templates and DeviceClasses are checked strictly where placement depends on them (a
mistyped `deviceClassName` or `matchAttribute` would silently change the answer, as `kubectl
apply` would refuse it); ResourceSlices and status are read leniently beyond the fields the
device model uses, so a newer driver's or server's extra fields do not stop a run.

Conversion (`to_v1`) follows the API's own: `v1beta1` requests carry the exact request's fields
(`deviceClassName`, `selectors`, `allocationMode`, `count`, `adminAccess`, `tolerations`,
`capacity`) at the top level where v1 has them under `exactly`; `v1beta1` devices hold their
fields under `basic`; `v1beta2` is v1's shape. This is a purely computational module.
"""

from __future__ import annotations

import copy
import functools
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from drasat.api import limits
from drasat.api.base import Object, ObjectMeta, Spec
from drasat.api.quantity import to_bytes

Obj = dict[str, Any]

GROUP = "resource.k8s.io"
V1 = f"{GROUP}/v1"
#: Versions read and converted to v1 (1.32's v1beta1, 1.33's v1beta2, 1.34's v1).
VERSIONS = (V1, f"{GROUP}/v1beta2", f"{GROUP}/v1beta1")
#: The fields of v1's ExactDeviceRequest that v1beta1 keeps on the request itself.
EXACT_FIELDS = (
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
)
#: API limits (`pkg/apis/resource/types.go`).
MAX_REQUESTS = 32
MAX_SUBREQUESTS = 8
MAX_SELECTORS = 32
MAX_CONSTRAINTS = 32
MAX_CONFIGS = 32
MAX_CEL = 10 * 1024
MAX_DEVICES_PER_SLICE = 128
MAX_COUNTER_SETS = 8


def to_v1(data: Obj) -> Obj:
    """A claim, template, class or slice of any read version, in v1's shape (a copy where it
    changes; v1 and v1beta2 share the rest with `data`). Pure."""
    version = str(data.get("apiVersion", ""))
    if version != f"{GROUP}/v1beta1":
        return {**data, "apiVersion": V1}
    out = copy.deepcopy(data)
    out["apiVersion"] = V1
    kind = out.get("kind")
    spec = out.get("spec")
    if kind == "ResourceClaimTemplate" and isinstance(spec, dict):
        spec = spec.get("spec")
    if kind in ("ResourceClaim", "ResourceClaimTemplate") and isinstance(spec, dict):
        devices = spec.get("devices")
        requests = devices.get("requests") if isinstance(devices, dict) else None
        for request in requests if isinstance(requests, list) else []:
            if isinstance(request, dict) and "firstAvailable" not in request:
                exact = {k: request.pop(k) for k in EXACT_FIELDS if k in request}
                request["exactly"] = exact
    if kind == "ResourceSlice" and isinstance(spec, dict):
        for device in spec.get("devices") or []:
            if isinstance(device, dict) and isinstance(device.get("basic"), dict):
                device.update(device.pop("basic"))
    return out


class Strict(Spec):
    """A v1 struct checked field by field (unknown fields refused, as the API server does)."""


class Open(BaseModel):
    """A v1 struct of which only some fields matter here; the rest are kept unchecked."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class CELSelector(Strict):
    expression: str = Field(min_length=1, max_length=MAX_CEL)


class DeviceSelector(Strict):
    cel: CELSelector


class AllocationMode(StrEnum):
    ExactCount = "ExactCount"
    All = "All"


class Toleration(Strict):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    tolerationSeconds: int | None = None


class CapacityRequirements(Strict):
    requests: dict[str, int | str] | None = None

    @field_validator("requests")
    @classmethod
    def _quantities(cls, value: dict[str, int | str] | None) -> dict[str, int | str] | None:
        for quantity in (value or {}).values():
            to_bytes(quantity)
        return value


class ExactDeviceRequest(Strict):
    deviceClassName: str = Field(min_length=1, max_length=limits.MAX_NAME)
    selectors: list[DeviceSelector] | None = Field(None, max_length=MAX_SELECTORS)
    allocationMode: AllocationMode | None = None
    count: int | None = Field(None, ge=1, le=limits.MAX_DEVICES_PER_CLAIM)
    adminAccess: bool | None = None
    tolerations: list[Toleration] | None = Field(None, max_length=16)
    capacity: CapacityRequirements | None = None

    @model_validator(mode="after")
    def _count_with_mode(self) -> ExactDeviceRequest:
        if self.allocationMode is AllocationMode.All and self.count is not None:
            raise ValueError("count: must not be set with allocationMode All")
        return self


class DeviceSubRequest(ExactDeviceRequest):
    name: str = Field(min_length=1, max_length=limits.MAX_NAMESPACE)


class DeviceRequest(Strict):
    name: str = Field(min_length=1, max_length=limits.MAX_NAMESPACE)
    exactly: ExactDeviceRequest | None = None
    firstAvailable: list[DeviceSubRequest] | None = Field(
        None, min_length=1, max_length=MAX_SUBREQUESTS
    )

    @model_validator(mode="after")
    def _one_form(self) -> DeviceRequest:
        if (self.exactly is None) == (self.firstAvailable is None):
            raise ValueError("exactly one of exactly or firstAvailable must be set")
        return self

    def alternatives(self) -> list[tuple[str, ExactDeviceRequest]]:
        """(result request name, request) of each way to satisfy it: `req` or `req/sub`."""
        if self.exactly is not None:
            return [(self.name, self.exactly)]
        return [(f"{self.name}/{sub.name}", sub) for sub in self.firstAvailable or []]


class DeviceConstraint(Strict):
    requests: list[str] | None = None
    matchAttribute: str | None = None
    distinctAttribute: str | None = None

    @model_validator(mode="after")
    def _one_rule(self) -> DeviceConstraint:
        if (self.matchAttribute is None) == (self.distinctAttribute is None):
            raise ValueError("exactly one of matchAttribute or distinctAttribute must be set")
        return self


class OpaqueDeviceConfiguration(Strict):
    driver: str = Field(min_length=1, max_length=limits.MAX_NAME)
    parameters: dict[str, Any]


class DeviceClaimConfiguration(Strict):
    requests: list[str] | None = None
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClaim(Strict):
    requests: list[DeviceRequest] = Field(default_factory=list, max_length=MAX_REQUESTS)
    constraints: list[DeviceConstraint] | None = Field(None, max_length=MAX_CONSTRAINTS)
    config: list[DeviceClaimConfiguration] | None = Field(None, max_length=MAX_CONFIGS)

    @model_validator(mode="after")
    def _names(self) -> DeviceClaim:
        names = [r.name for r in self.requests]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"requests: request name {name!r} is used twice")
        known = set(names) | {a for r in self.requests for a, _ in r.alternatives()}
        listed: list[tuple[str, list[str] | None]] = [
            (f"constraints[{i}]", c.requests) for i, c in enumerate(self.constraints or [])
        ]
        listed += [(f"config[{i}]", c.requests) for i, c in enumerate(self.config or [])]
        for path, requests in listed:
            for name in requests or []:
                if name not in known:
                    raise ValueError(f"{path}.requests: no request named {name!r}")
        return self


class ResourceClaimSpec(Strict):
    devices: DeviceClaim = Field(default_factory=DeviceClaim)


class ResourceClaim(Object):
    spec: ResourceClaimSpec
    status: dict[str, Any] | None = None


class ClaimTemplateMeta(Open):
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class ResourceClaimTemplateSpec(Strict):
    metadata: ClaimTemplateMeta | None = None
    spec: ResourceClaimSpec


class ResourceClaimTemplate(Object):
    spec: ResourceClaimTemplateSpec


class DeviceClassConfiguration(Strict):
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClassSpec(Strict):
    selectors: list[DeviceSelector] | None = Field(None, max_length=MAX_SELECTORS)
    config: list[DeviceClassConfiguration] | None = Field(None, max_length=MAX_CONFIGS)
    extendedResourceName: str | None = None


class DeviceClass(Object):
    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)


# ResourceSlices: lenient beyond what the device model reads.


class DeviceAttribute(Strict):
    """One value of `int`, `bool`, `string` or `version` (`Device.attributes` checks there is
    exactly one: once per device, not per attribute, as slices hold thousands)."""

    int_: int | None = Field(None, alias="int")
    bool_: bool | None = Field(None, alias="bool")
    string: str | None = None
    version: str | None = None

    @property
    def value(self) -> int | bool | str:
        for value in (self.int_, self.bool_, self.string, self.version):
            if value is not None:
                return value
        raise AssertionError("validated: one value")  # pragma: no cover


#: Slices repeat few distinct quantities thousands of times (every MIG device's `1`).
_bytes = functools.lru_cache(maxsize=4096, typed=True)(to_bytes)


class Quantity(Open):
    value: StrictInt | str

    @field_validator("value")
    @classmethod
    def _quantity(cls, value: int | str) -> int | str:
        _bytes(value)
        return value

    @property
    def amount(self) -> int:
        return _bytes(self.value)


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
                if (
                    isinstance(attribute, dict)
                    and sum(v is not None for v in attribute.values()) != 1
                ):
                    raise ValueError(
                        f"{name}: exactly one of int, bool, string or version must be set"
                    )
        return value

    @field_validator("capacity", mode="before")
    @classmethod
    def _bare_quantities(cls, value: Any) -> Any:
        # v1alpha3 (1.31) wrote a capacity as a bare quantity; later versions as {value}.
        if isinstance(value, dict):
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


# Nodes: what the scheduler's filters and the node's capacity read.


class NodeTaint(Open):
    key: str
    value: str | None = None
    effect: str


class NodeSpec(Open):
    taints: list[NodeTaint] | None = None
    unschedulable: bool | None = None


class NodeCondition(Open):
    type: str
    status: str
    reason: str | None = None


class NodeStatus(Open):
    allocatable: dict[str, int | str] | None = None
    capacity: dict[str, int | str] | None = None
    conditions: list[NodeCondition] | None = None


class Node(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)


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
    taint: NodeTaint


class DeviceTaintRule(Object):
    spec: DeviceTaintRuleSpec
    status: dict[str, Any] | None = None
