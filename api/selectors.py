"""GpuSelector: which GPUs a claim may get, as nested and/or expressions over GPU properties.

Field names are NVIDIA's classic driver's. Matching and describing are pure functions of a
selector and a GPU's reported properties.
"""

from __future__ import annotations

import fnmatch
import re
from enum import StrEnum
from typing import Protocol

from pydantic import Field, model_validator

from drasat.api.base import Spec
from drasat.api.quantity import Quantity, to_bytes


class Operator(StrEnum):
    Equals = "Equals"
    LessThan = "LessThan"
    LessThanOrEqualTo = "LessThanOrEqualTo"
    GreaterThan = "GreaterThan"
    GreaterThanOrEqualTo = "GreaterThanOrEqualTo"


_SYMBOL = {
    Operator.Equals: "=",
    Operator.LessThan: "<",
    Operator.LessThanOrEqualTo: "<=",
    Operator.GreaterThan: ">",
    Operator.GreaterThanOrEqualTo: ">=",
}


def compare(left: tuple[int, ...] | int, op: Operator, right: tuple[int, ...] | int) -> bool:
    if op is Operator.Equals:
        return left == right
    if op is Operator.LessThan:
        return left < right  # type: ignore[operator]
    if op is Operator.LessThanOrEqualTo:
        return left <= right  # type: ignore[operator]
    if op is Operator.GreaterThan:
        return left > right  # type: ignore[operator]
    return left >= right  # type: ignore[operator]


def parse_version(text: str) -> tuple[int, ...]:
    """`12.4` -> (12, 4); `550.54.15` -> (550, 54, 15). Raises ValueError when not dotted ints."""
    parts = text.strip().lstrip("v").split(".")
    if not parts or not all(re.fullmatch(r"[0-9]+", p) for p in parts):
        raise ValueError(f"not a dotted version: {text!r}")
    return tuple(int(p) for p in parts)


def _pad(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n = max(len(a), len(b))
    return a + (0,) * (n - len(a)), b + (0,) * (n - len(b))


class QuantityComparator(Spec):
    value: Quantity = Field(description="Memory to compare with, e.g. 40Gi.")
    operator: Operator = Field(Operator.Equals, description="How the GPU's value compares.")


class VersionComparator(Spec):
    value: str = Field(description="A dotted version, e.g. 8.0 or 550.54.15.")
    operator: Operator = Field(Operator.Equals, description="How the GPU's value compares.")

    @model_validator(mode="after")
    def _valid_version(self) -> VersionComparator:
        parse_version(self.value)
        return self


class GpuProperties(Protocol):
    """What a selector reads of a GPU (the NAS `gpu` entry and the solver's `Gpu` satisfy it;
    read only)."""

    @property
    def index(self) -> int: ...
    @property
    def uuid(self) -> str: ...
    @property
    def migEnabled(self) -> bool: ...
    @property
    def memoryBytes(self) -> int: ...
    @property
    def productName(self) -> str: ...
    @property
    def brand(self) -> str: ...
    @property
    def architecture(self) -> str: ...
    @property
    def cudaComputeCapability(self) -> str: ...
    @property
    def driverVersion(self) -> str: ...
    @property
    def cudaDriverVersion(self) -> str: ...


_PROPERTIES = (
    "index",
    "uuid",
    "migEnabled",
    "memory",
    "productName",
    "brand",
    "architecture",
    "cudaComputeCapability",
    "driverVersion",
    "cudaDriverVersion",
)
_EXPRESSIONS = ("andExpression", "orExpression")


class GpuSelector(Spec):
    """Exactly one of: a property, `andExpression`, `orExpression`; nests to any depth."""

    index: int | None = Field(None, ge=0, description="GPU index on its node.")
    uuid: str | None = Field(None, description="GPU UUID (exact).")
    migEnabled: bool | None = Field(None, description="Whether MIG mode is enabled.")
    memory: QuantityComparator | None = Field(None, description="Total GPU memory.")
    productName: str | None = Field(None, description="Product name glob, case-insensitive.")
    brand: str | None = Field(None, description="Brand glob, case-insensitive.")
    architecture: str | None = Field(None, description="Architecture glob, case-insensitive.")
    cudaComputeCapability: VersionComparator | None = None
    driverVersion: VersionComparator | None = None
    cudaDriverVersion: VersionComparator | None = None
    andExpression: list[GpuSelector] | None = Field(None, description="All must match.")
    orExpression: list[GpuSelector] | None = Field(None, description="At least one must match.")

    @model_validator(mode="after")
    def _exactly_one(self) -> GpuSelector:
        set_fields = [f for f in (*_PROPERTIES, *_EXPRESSIONS) if getattr(self, f) is not None]
        if len(set_fields) != 1:
            raise ValueError(
                "a selector holds exactly one of a property, andExpression or orExpression; "
                f"got {', '.join(set_fields) or 'none'} (nest them in andExpression)"
            )
        for name in _EXPRESSIONS:
            value = getattr(self, name)
            if value is not None and len(value) == 0:
                raise ValueError(f"{name} must list at least one selector")
        return self

    def matches(self, gpu: GpuProperties) -> bool:
        """Whether the GPU satisfies this selector. Pure."""
        if self.andExpression is not None:
            return all(s.matches(gpu) for s in self.andExpression)
        if self.orExpression is not None:
            return any(s.matches(gpu) for s in self.orExpression)
        if self.index is not None:
            return gpu.index == self.index
        if self.uuid is not None:
            return gpu.uuid == self.uuid
        if self.migEnabled is not None:
            return gpu.migEnabled == self.migEnabled
        if self.memory is not None:
            return compare(gpu.memoryBytes, self.memory.operator, to_bytes(self.memory.value))
        for name in ("productName", "brand", "architecture"):
            pattern = getattr(self, name)
            if pattern is not None:
                return fnmatch.fnmatchcase(str(getattr(gpu, name)).lower(), pattern.lower())
        for name in ("cudaComputeCapability", "driverVersion", "cudaDriverVersion"):
            comparator: VersionComparator | None = getattr(self, name)
            if comparator is not None:
                try:
                    have = parse_version(str(getattr(gpu, name)))
                except ValueError:
                    return False
                left, right = _pad(have, parse_version(comparator.value))
                return compare(left, comparator.operator, right)
        raise AssertionError("validated selector has no field")  # pragma: no cover

    def describe(self) -> str:
        """Short user-facing spelling, e.g. `productName=*a100*`, `(memory>=40Gi and ...)`."""
        if self.andExpression is not None:
            return "(" + " and ".join(s.describe() for s in self.andExpression) + ")"
        if self.orExpression is not None:
            return "(" + " or ".join(s.describe() for s in self.orExpression) + ")"
        for name in _PROPERTIES:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, QuantityComparator | VersionComparator):
                return f"{name}{_SYMBOL[value.operator]}{value.value}"
            if isinstance(value, bool):
                return f"{name}={str(value).lower()}"
            return f"{name}={value}"
        raise AssertionError("validated selector has no field")  # pragma: no cover
