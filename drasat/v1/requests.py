"""A `resource.k8s.io/v1` ResourceClaim read into what the allocator needs: its requests, each
request's alternatives (`exactly`, or `firstAvailable` in order of preference) with their
compiled CEL selectors (the class's, then the request's), counts, capacity requests, and the
claim's `matchAttribute` constraints and opaque configs.

Everything the solver cannot honour is refused here with the claim and field path named
(`ClaimError`): a selector that does not compile, `adminAccess`, a constraint other than
`matchAttribute`/`distinctAttribute` or naming no request of the claim, a bad configuration of
our driver. v1beta1/v1beta2
claims are read into the v1 shape first (`v1_spec`). This is a purely computational module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drasat.api import deviceconfig
from drasat.api.groups import DRIVER_NAME
from drasat.api.inputerrors import one_line
from drasat.api.quantity import to_bytes
from drasat.v1 import cel

Obj = dict[str, Any]

EXACT_COUNT = "ExactCount"
ALL = "All"


class ClaimError(ValueError):
    """The claim cannot be allocated as written; the message names the claim and field."""

    def __init__(self, claim: str, field: str, message: str) -> None:
        self.claim = claim
        self.field = field
        super().__init__(one_line(f"ResourceClaim {claim}: {field}: {message}"))


@dataclass(frozen=True)
class Alternative:
    """One way to satisfy a request: `exactly`, or one `firstAvailable` entry."""

    #: The result's `request`: `<request>` or `<request>/<subrequest>`.
    result_name: str
    device_class: str
    selectors: tuple[cel.Selector, ...]
    #: EXACT_COUNT or ALL.
    mode: str
    count: int
    #: Capacity requests by capacity name (`memory` bytes, `compute` percent); empty: none.
    capacity: tuple[tuple[str, int], ...] = ()
    #: The class's `spec.config` entries, as written.
    class_config: tuple[Obj, ...] = ()
    #: The request's `tolerations` of device taints, as written (copied to its results).
    tolerations: tuple[Obj, ...] = ()
    #: How many of `selectors`, from the first, are the class's (the rest are the request's).
    class_selectors: int = 0


@dataclass(frozen=True)
class Request:
    name: str
    alternatives: tuple[Alternative, ...]


@dataclass(frozen=True)
class AttributeConstraint:
    """`matchAttribute` (or `distinctAttribute`) over these requests (empty: all of the
    claim's); an entry names a request (all its subrequests) or one `<request>/<subrequest>`."""

    attribute: str
    requests: tuple[str, ...]
    field: str
    distinct: bool = False

    def covers(self, request: str, result_name: str) -> bool:
        """Whether it covers the devices of this request's alternative (`result_name`)."""
        return not self.requests or request in self.requests or result_name in self.requests

    @property
    def label(self) -> str:
        kind = "distinctAttribute" if self.distinct else "matchAttribute"
        return f"{kind} {self.attribute}"


@dataclass(frozen=True)
class Claim:
    uid: str
    namespace: str
    name: str
    requests: tuple[Request, ...]
    constraints: tuple[AttributeConstraint, ...]
    #: The claim's `spec.devices.config` entries, as written.
    config: tuple[Obj, ...]

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def v1_spec(spec: Obj) -> Obj:
    """A claim spec of v1beta1 (a request names its class and count at the top) in the v1
    shape (under `exactly`); a v1/v1beta2 spec unchanged."""
    devices = dict(spec.get("devices") or {})
    requests = []
    for request in devices.get("requests") or []:
        if isinstance(request, Mapping) and "deviceClassName" in request:
            exactly = {k: v for k, v in request.items() if k != "name"}
            request = {"name": request.get("name"), "exactly": exactly}
        requests.append(request)
    if requests:
        devices["requests"] = requests
    return {**spec, "devices": devices}


def read_claim(claim: Obj, classes: Mapping[str, Obj]) -> Claim:
    """The claim's requests and constraints; ClaimError when it cannot be allocated as written."""
    meta = claim.get("metadata") or {}
    ref = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    devices = v1_spec(claim.get("spec") or {}).get("devices") or {}
    requests = tuple(
        _request(ref, f"spec.devices.requests[{i}]", r, classes)
        for i, r in enumerate(devices.get("requests") or [])
    )
    constraints = tuple(
        _constraint(ref, f"spec.devices.constraints[{i}]", c, requests)
        for i, c in enumerate(devices.get("constraints") or [])
    )
    config = _configs(ref, devices.get("config") or [])
    _within_claim_limit(ref, requests)
    return Claim(
        uid=str(meta.get("uid", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        requests=requests,
        constraints=constraints,
        config=tuple(config),
    )


#: The most devices one allocation holds (resource.k8s.io's AllocationResultsMaxSize): the API
#: server stores a claim asking more, which kube-scheduler's allocator then refuses to allocate.
CLAIM_LIMIT = 32


def _within_claim_limit(ref: str, requests: tuple[Request, ...]) -> None:
    """As upstream's allocator counts before it allocates: each request's fewest devices
    (ExactCount's count; the smallest of its firstAvailable entries), summed over the claim."""
    total = 0
    for i, request in enumerate(requests):
        fewest = min(a.count if a.mode == EXACT_COUNT else 0 for a in request.alternatives)
        if fewest > CLAIM_LIMIT - total:
            raise ClaimError(
                ref,
                f"spec.devices.requests[{i}]",
                f"request {request.name}: adding {fewest} devices exceeds the claim limit of "
                f"{CLAIM_LIMIT}, with {total} already accounted for",
            )
        total += fewest


def _configs(ref: str, entries: list[Obj]) -> list[Obj]:
    """The claim's configs, each of our driver parsed; a field only the cluster may set (the
    node plugin refuses it, `deviceconfig.refusals`) refuses the claim here."""
    for i, entry in enumerate(entries):
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") == DRIVER_NAME:
            try:
                deviceconfig.parse(opaque.get("parameters"))
            except ValueError as error:
                raise ClaimError(ref, f"spec.devices.config[{i}].opaque", str(error)) from None
    path = "spec.devices.config"
    refused = deviceconfig.refusals(deviceconfig.applied(entries, DRIVER_NAME, path=path))
    if refused:
        field, _, message = refused[0].partition(": ")
        raise ClaimError(ref, field, message)
    return list(entries)


def _constraint(
    ref: str, where: str, constraint: Obj, requests: tuple[Request, ...]
) -> AttributeConstraint:
    match, distinct = constraint.get("matchAttribute"), constraint.get("distinctAttribute")
    if not match and not distinct:
        other = next(iter(k for k in constraint if k != "requests"), "?")
        raise ClaimError(
            ref, f"{where}.{other}", "only matchAttribute and distinctAttribute are supported"
        )
    names = {r.name for r in requests} | {
        a.result_name for r in requests for a in r.alternatives if "/" in a.result_name
    }
    covered = tuple(str(r) for r in constraint.get("requests") or [])
    for name in covered:
        if name not in names:
            raise ClaimError(ref, f"{where}.requests", f"no request named {name!r}")
    return AttributeConstraint(str(match or distinct), covered, where, distinct=not match)


def _request(ref: str, where: str, request: Obj, classes: Mapping[str, Obj]) -> Request:
    name = str(request.get("name", ""))
    if request.get("exactly") is not None:
        alternative = _alternative(ref, f"{where}.exactly", name, request["exactly"], classes)
        return Request(name, (alternative,))
    subrequests = request.get("firstAvailable") or []
    if not subrequests:
        raise ClaimError(ref, where, "needs exactly or firstAvailable")
    return Request(
        name,
        tuple(
            _alternative(
                ref, f"{where}.firstAvailable[{i}]", f"{name}/{s.get('name', '')}", s, classes
            )
            for i, s in enumerate(subrequests)
        ),
    )


def _alternative(
    ref: str, where: str, result_name: str, spec: Obj, classes: Mapping[str, Obj]
) -> Alternative:
    class_name = str(spec.get("deviceClassName", ""))
    device_class = classes.get(class_name)
    if device_class is None:
        raise ClaimError(ref, f"{where}.deviceClassName", f"DeviceClass {class_name!r} not found")
    if spec.get("adminAccess"):
        raise ClaimError(
            ref, f"{where}.adminAccess", "admin access is not supported by drasat's driver"
        )
    selectors: list[cel.Selector] = []
    class_selectors = (device_class.get("spec") or {}).get("selectors") or []
    for origin, entries in (
        (f"DeviceClass {class_name} spec.selectors", class_selectors),
        (f"{where}.selectors", spec.get("selectors") or []),
    ):
        for i, entry in enumerate(entries):
            expression = ((entry or {}).get("cel") or {}).get("expression")
            if not isinstance(expression, str):
                raise ClaimError(ref, f"{origin}[{i}]", "only cel selectors are supported")
            try:
                selectors.append(cel.compile_selector(expression))
            except cel.SelectorError as error:
                raise ClaimError(ref, f"{origin}[{i}].cel.expression", str(error)) from None
    mode = str(spec.get("allocationMode") or EXACT_COUNT)
    if mode not in (EXACT_COUNT, ALL):
        raise ClaimError(ref, f"{where}.allocationMode", f"unknown mode {mode!r}")
    count = int(spec.get("count") or 1)
    capacity = []
    for key, value in ((spec.get("capacity") or {}).get("requests") or {}).items():
        # By name as written: upstream matches it literally against the device's capacity
        # names, so `gpu.drasat.io/memory` names no capacity of a device publishing `memory`.
        try:
            # A number as the server keeps it (`1.5`): its digits are the quantity.
            amount = str(value) if isinstance(value, float) else value
            capacity.append((str(key), to_bytes(amount)))
        except ValueError as error:
            raise ClaimError(ref, f"{where}.capacity.requests.{key}", str(error)) from None
    class_config = tuple((device_class.get("spec") or {}).get("config") or [])
    return Alternative(
        result_name,
        class_name,
        tuple(selectors),
        mode,
        count,
        tuple(sorted(capacity)),
        class_config,
        tuple(spec.get("tolerations") or ()),
        len(class_selectors),
    )
