"""The `resource.k8s.io/v1` objects the what-if reads, as pydantic models, and the older versions
(`v1beta1`, `v1beta2`) converted to the v1 shape first.

Claims, templates and DeviceClasses are checked strictly where placement depends on them (a
mistyped `deviceClassName` or `matchAttribute` would silently change the answer, as `kubectl
apply` would refuse it); status is read leniently, as are ResourceSlices and DeviceTaintRules,
whose models live in `drasat.v1.slicekinds` (the controller reads them too).

Conversion (`to_v1`) follows the API's own: `v1beta1` requests carry the exact request's fields
(`deviceClassName`, `selectors`, `allocationMode`, `count`, `adminAccess`, `tolerations`,
`capacity`) at the top level where v1 has them under `exactly`; `v1beta1` devices hold their
fields under `basic`; `v1beta2` is v1's shape. This is a purely computational module.
"""

from __future__ import annotations

import copy
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from drasat.api import limits
from drasat.api.base import Object, ObjectMeta
from drasat.api.quantity import go_decode_error
from drasat.v1 import cel, slicekinds
from drasat.v1.slicekinds import Open, Strict
from drasat.whatif import apivalidation

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


class CELSelector(Strict):
    go_struct: ClassVar[str] = "CELDeviceSelector"
    expression: str = Field(min_length=1, max_length=MAX_CEL)

    @field_validator("expression")
    @classmethod
    def _compiles(cls, expression: str) -> str:
        """The API server compiles every selector when the object is created and refuses one
        that does not compile: bad input here too, not a claim left unplaced."""
        try:
            cel.compile_selector(expression)
        except cel.SelectorError as error:
            raise ValueError(str(error)) from None
        return expression


class DeviceSelector(Strict):
    cel: CELSelector


class AllocationMode(StrEnum):
    ExactCount = "ExactCount"
    All = "All"


class Toleration(Strict):
    go_struct: ClassVar[str] = "DeviceToleration"
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    tolerationSeconds: int | None = None


class CapacityRequirements(Strict):
    #: Quantities as written: a number too (`1.5`), as the server's decoder takes it.
    requests: dict[str, int | float | str] | None = None

    @field_validator("requests")
    @classmethod
    def _quantities(
        cls, value: dict[str, int | float | str] | None
    ) -> dict[str, int | float | str] | None:
        # Any quantity the server parses, as it keeps them (`1u`, `-1`, `1.5`): only what does
        # not parse is refused; the allocator says what it cannot count (`drasat.v1.requests`).
        for quantity in (value or {}).values():
            words = go_decode_error(quantity)
            if words is not None:
                raise ValueError(words)
        return value


def _checked(check: Any, value: str) -> str:
    """`value` when `check` (an `apivalidation` name check) finds nothing wrong."""
    why = check(value)
    if why:
        raise ValueError(f"Invalid value: {value!r}: {why}")
    return value


class ExactDeviceRequest(Strict):
    deviceClassName: str = Field(min_length=1, max_length=limits.MAX_NAME)

    @field_validator("deviceClassName")
    @classmethod
    def _class_name(cls, value: str) -> str:
        return _checked(apivalidation.dns_subdomain, value)

    selectors: list[DeviceSelector] | None = Field(None, max_length=MAX_SELECTORS)
    allocationMode: AllocationMode | None = None
    #: 0 is unset (the API server defaults it to 1); below 0 it refuses.
    count: StrictInt | None = Field(None, ge=0)
    adminAccess: StrictBool | None = None
    tolerations: list[Toleration] | None = Field(None, max_length=16)
    capacity: CapacityRequirements | None = None

    @model_validator(mode="after")
    def _count_with_mode(self) -> ExactDeviceRequest:
        if self.allocationMode is AllocationMode.All and self.count:
            raise ValueError("count: must not be set with allocationMode All")
        return self


class DeviceSubRequest(ExactDeviceRequest):
    name: str = Field(min_length=1, max_length=limits.MAX_NAMESPACE)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _checked(apivalidation.dns_label, value)


class DeviceRequest(Strict):
    name: str = Field(min_length=1, max_length=limits.MAX_NAMESPACE)
    exactly: ExactDeviceRequest | None = None
    firstAvailable: list[DeviceSubRequest] | None = Field(
        None, min_length=1, max_length=MAX_SUBREQUESTS
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _checked(apivalidation.dns_label, value)

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

    @field_validator("matchAttribute", "distinctAttribute")
    @classmethod
    def _qualified(cls, value: str | None) -> str | None:
        return None if value is None else _checked(apivalidation.fully_qualified_name, value)

    @model_validator(mode="after")
    def _one_rule(self) -> DeviceConstraint:
        if (self.matchAttribute is None) == (self.distinctAttribute is None):
            raise ValueError("exactly one of matchAttribute or distinctAttribute must be set")
        return self


class OpaqueDeviceConfiguration(Strict):
    driver: str = Field(min_length=1, max_length=limits.MAX_NAME)
    parameters: dict[str, Any]

    @field_validator("driver")
    @classmethod
    def _driver(cls, value: str) -> str:
        return _checked(apivalidation.driver_name, value)


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
    #: The API server decodes it: decoding errors in its words (`drasat.api.godecoding`).
    go_decoding: ClassVar[bool] = True
    spec: ResourceClaimSpec
    status: dict[str, Any] | None = None


class ClaimTemplateMeta(Open):
    go_struct: ClassVar[str] = "ObjectMeta"
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class ResourceClaimTemplateSpec(Strict):
    metadata: ClaimTemplateMeta | None = None
    spec: ResourceClaimSpec


class ResourceClaimTemplate(Object):
    #: The API server decodes it: decoding errors in its words (`drasat.api.godecoding`).
    go_decoding: ClassVar[bool] = True
    spec: ResourceClaimTemplateSpec


class DeviceClassConfiguration(Strict):
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClassSpec(Strict):
    selectors: list[DeviceSelector] | None = Field(None, max_length=MAX_SELECTORS)
    config: list[DeviceClassConfiguration] | None = Field(None, max_length=MAX_CONFIGS)
    extendedResourceName: str | None = None


class DeviceClass(Object):
    #: The API server decodes it: decoding errors in its words (`drasat.api.godecoding`).
    go_decoding: ClassVar[bool] = True
    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)


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


# ResourceSlices and DeviceTaintRules: the controller reads them too (`drasat.v1.slicekinds`).

MAX_DEVICES_PER_SLICE = slicekinds.MAX_DEVICES_PER_SLICE
MAX_COUNTER_SETS = slicekinds.MAX_COUNTER_SETS
Device = slicekinds.Device
ResourceSlice = slicekinds.ResourceSlice
DeviceTaintRule = slicekinds.DeviceTaintRule
