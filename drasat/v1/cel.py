"""CEL device selectors of `resource.k8s.io/v1`, evaluated with cel-python on the device model's
devices.

A selector sees what kube-scheduler's allocator shows it: `device.driver`, `device.attributes`
and `device.capacity` as maps from a domain (`gpu.drasat.io`, `resource.kubernetes.io`) to the
unqualified names, and `device.allowMultipleAllocations`. Kubernetes' CEL library parts that
selectors use are provided: `quantity(s)` with `compareTo`, `isGreaterThan`, `isLessThan`,
`asInteger`, `isInteger`; `semver(s)` with `compareTo`, `isGreaterThan`, `isLessThan`, `major`,
`minor`, `patch`; the string functions `lowerAscii`, `upperAscii`, `trim`, `indexOf`,
`lastIndexOf`, `replace`, `split`; version attributes are semvers, capacities quantities.

As upstream: an expression that does not compile is the claim's error (reported, never raised
to the caller's caller); one that fails to evaluate on a device (a missing attribute, a type
mismatch) does not select that device, and the first such error is kept to explain a refusal.
Results are memoized per (expression, what the device is): devices that differ only in identity
(uuid, index, minor, PCI address, placement) share one evaluation unless the expression names
such an attribute.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError

from drasat.api.quantity import to_bytes
from drasat.api.selectors import parse_version

Obj = dict[str, Any]

#: Attributes that tell equal devices apart (drasat's and NVIDIA's names); an expression that
#: names one is evaluated per device, the others once per kind of device.
_IDENTITY = frozenset(
    {"uuid", "index", "minor", "pciBusID", "parentUUID", "parentMinor", "parentIndex",
     "placementStart", "placementSize", "pcieRoot"}
)  # fmt: skip
_IDENTITY_RE = re.compile(r"\b(" + "|".join(sorted(_IDENTITY)) + r")\b")


class SelectorError(ValueError):
    """A CEL expression that does not compile (the message says where)."""


class QuantityValue(celtypes.IntType):
    """A Kubernetes quantity, as its value rounded up to an integer."""


class SemverValue(celtypes.StringType):
    """A semantic version, compared by its parts."""

    def parts(self) -> tuple[int, ...]:
        return parse_version(str(self))


def _quantity(text: Any) -> QuantityValue:
    try:
        return QuantityValue(to_bytes(str(text)))
    except ValueError as error:
        raise CELEvalError(str(error)) from None


def _semver(text: Any) -> SemverValue:
    try:
        parse_version(str(text))
    except ValueError as error:
        raise CELEvalError(str(error)) from None
    return SemverValue(str(text))


def _key(value: Any) -> tuple[int, ...] | int:
    if isinstance(value, SemverValue):
        return value.parts()
    if isinstance(value, int):
        return int(value)
    raise CELEvalError(f"not a quantity or semver: {value!r}")


def _compare_to(a: Any, b: Any) -> celtypes.IntType:
    left, right = _key(a), _key(b)
    if isinstance(left, tuple) and isinstance(right, tuple):
        n = max(len(left), len(right))
        left, right = left + (0,) * (n - len(left)), right + (0,) * (n - len(right))
    return celtypes.IntType((left > right) - (left < right))  # type: ignore[operator]


def _part(index: int) -> Any:
    def part(version: Any) -> celtypes.IntType:
        parts = _key(version)
        if not isinstance(parts, tuple):
            raise CELEvalError("not a semver")
        return celtypes.IntType(parts[index] if index < len(parts) else 0)

    return part


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise CELEvalError(f"not a string: {value!r}")
    return value


#: Kubernetes' CEL string library (the part selectors use).
_STRINGS: dict[str, Any] = {
    "lowerAscii": lambda s: celtypes.StringType(_text(s).lower()),
    "upperAscii": lambda s: celtypes.StringType(_text(s).upper()),
    "trim": lambda s: celtypes.StringType(_text(s).strip()),
    "indexOf": lambda s, sub: celtypes.IntType(_text(s).find(_text(sub))),
    "lastIndexOf": lambda s, sub: celtypes.IntType(_text(s).rfind(_text(sub))),
    "replace": lambda s, old, new: celtypes.StringType(_text(s).replace(_text(old), _text(new))),
    "split": lambda s, sep: celtypes.ListType(
        [celtypes.StringType(p) for p in _text(s).split(_text(sep))]
    ),
}

FUNCTIONS: dict[str, Any] = {
    **_STRINGS,
    "quantity": _quantity,
    "semver": _semver,
    "compareTo": _compare_to,
    "isGreaterThan": lambda a, b: celtypes.BoolType(int(_compare_to(a, b)) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(int(_compare_to(a, b)) < 0),
    "asInteger": lambda a: celtypes.IntType(int(a)),
    "isInteger": lambda a: celtypes.BoolType(isinstance(a, int)),
    "major": _part(0),
    "minor": _part(1),
    "patch": _part(2),
}


def _value(value: Obj) -> Any:
    """A v1 DeviceAttribute (`{"string": ...}`, `int`, `bool`, `version`) as a CEL value."""
    if "version" in value:
        return SemverValue(value["version"])
    if "bool" in value:
        return celtypes.BoolType(value["bool"])
    if "int" in value:
        return celtypes.IntType(value["int"])
    return celtypes.StringType(str(value.get("string", "")))


def _by_domain(entries: Mapping[str, Any], driver: str, convert: Any) -> celtypes.MapType:
    domains: dict[str, dict[str, Any]] = {}
    for qualified, value in entries.items():
        domain, _, name = qualified.rpartition("/")
        domains.setdefault(domain or driver, {})[name] = convert(value)
    return celtypes.MapType(
        {
            celtypes.StringType(d): celtypes.MapType(
                {celtypes.StringType(k): v for k, v in names.items()}
            )
            for d, names in domains.items()
        }
    )


def activation(driver: str, device: Obj) -> dict[str, Any]:
    """The `device` variable a selector sees for one v1 Device of `driver`."""
    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(driver),
                celtypes.StringType("attributes"): _by_domain(
                    device.get("attributes", {}), driver, _value
                ),
                celtypes.StringType("capacity"): _by_domain(
                    device.get("capacity", {}),
                    driver,
                    lambda c: QuantityValue(to_bytes(str(c.get("value", "0")))),
                ),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                    bool(device.get("allowMultipleAllocations", False))
                ),
            }
        )
    }


def _kind_key(driver: str, device: Obj) -> tuple[object, ...]:
    """What a device is, without which one it is."""
    attributes = tuple(
        sorted(
            (k, str(v))
            for k, v in device.get("attributes", {}).items()
            if k.rpartition("/")[2] not in _IDENTITY
        )
    )
    capacity = tuple(
        sorted((k, str(v.get("value"))) for k, v in device.get("capacity", {}).items())
    )
    return (driver, attributes, capacity, bool(device.get("allowMultipleAllocations")))


@dataclass
class Selector:
    """One compiled CEL expression."""

    expression: str
    _program: Any = field(repr=False)
    _by_identity: bool = field(repr=False)
    _memo: dict[object, bool] = field(default_factory=dict, repr=False)
    #: The first evaluation error seen, to explain why nothing matched.
    error: str | None = None

    def matches(self, driver: str, device: Obj) -> bool:
        key: object = _kind_key(driver, device)
        if self._by_identity:
            key = (key, device.get("name"), repr(device.get("attributes")))
        found = self._memo.get(key)
        if found is None:
            found = self._evaluate(driver, device)
            self._memo[key] = found
        return found

    def _evaluate(self, driver: str, device: Obj) -> bool:
        try:
            result = self._program.evaluate(activation(driver, device))
        except CELEvalError as error:
            self._remember(error)
            return False
        if isinstance(result, CELEvalError):
            self._remember(result)
            return False
        if not isinstance(result, celtypes.BoolType):
            self.error = self.error or f"{self.expression!r} gave {result!r}, not a bool"
            return False
        return bool(result)

    def _remember(self, error: Exception) -> None:
        if self.error is None:
            self.error = f"{self.expression!r} failed on a device: {_short(error)}"


def _short(error: Exception) -> str:
    text = str(error.args[0]) if error.args else str(error)
    return text.splitlines()[0].partition(" (in activation")[0][:200]


_ENVIRONMENT = celpy.Environment()
_COMPILED: dict[str, Selector] = {}


def compile_selector(expression: str) -> Selector:
    """The compiled selector (cached per expression text); SelectorError when it does not
    compile."""
    found = _COMPILED.get(expression)
    if found is not None:
        return found
    try:
        ast = _ENVIRONMENT.compile(expression)
        program = _ENVIRONMENT.program(ast, functions=FUNCTIONS)
    except Exception as error:  # celpy raises its parser's errors, with the position in the text
        raise SelectorError(
            f"CEL expression {expression!r} does not compile: {_short(error)}"
        ) from None
    selector = Selector(expression, program, bool(_IDENTITY_RE.search(expression)))
    if len(_COMPILED) < 4096:
        _COMPILED[expression] = selector
    return selector
