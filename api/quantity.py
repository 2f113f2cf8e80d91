"""Kubernetes resource quantities (`40Gi`, `5G`, `16106127360`) as a pydantic type.

A Quantity keeps the user's spelling (so objects round-trip unchanged) and converts to an integer
number of bytes with `to_bytes`.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any

from pydantic import AfterValidator, WithJsonSchema

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "m": Decimal(1) / 1000,
}
#: Kubernetes quantities are 64-bit; a bigger one would overflow the solver's integers too.
MAX_QUANTITY = 2**63 - 1
#: The digits of the biggest quantity read at all (far over any device's capacity).
_MAX_DIGITS = 100
_PATTERN = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$")


def to_bytes(quantity: int | str) -> int:
    """Number of bytes (rounded up) of a quantity; raises ValueError on a malformed one or one
    over 64 bits."""
    value = base_units(quantity)
    if value > MAX_QUANTITY:
        raise ValueError(f"quantity {quantity!r} is over {MAX_QUANTITY} (64 bits)")
    return value


def base_units(quantity: int | str) -> int:
    """A quantity in its base unit (rounded up), however big: the API server accepts any
    well-formed quantity (`10E` is 10**19), and only what the solver counts must fit its
    64-bit integers (`to_bytes`). Raises ValueError on a malformed or negative one."""
    if isinstance(quantity, bool):
        raise ValueError(f"not a quantity: {quantity!r}")
    if isinstance(quantity, int):
        if quantity < 0:
            raise ValueError(f"quantity must not be negative: {quantity}")
        return quantity
    match = _PATTERN.match(quantity.strip())
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {quantity!r} (expected e.g. 10Gi, 512Mi, 5G)")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        value = Decimal(number) * _SUFFIXES[suffix]
        if value < 0:
            raise ValueError(f"quantity must not be negative: {quantity!r}")
        if value.adjusted() >= _MAX_DIGITS:
            # An integer of a million digits (`1e999999`) takes minutes to build.
            raise ValueError(f"quantity {quantity!r} has over {_MAX_DIGITS} digits")
        return int(value.to_integral_value(rounding="ROUND_CEILING"))
    except ArithmeticError:  # InvalidOperation, Overflow (`1e999999`)
        raise ValueError(f"not a Kubernetes quantity: {quantity!r}") from None


def exact(quantity: int | float | str) -> Decimal:
    """A quantity's exact value in its base unit (`1000m` is 1, `1.5` is 1.5), as the API
    server parses it; ValueError on a malformed one or one of over `_MAX_DIGITS` digits."""
    if isinstance(quantity, bool):
        raise ValueError(f"not a quantity: {quantity!r}")
    match = _PATTERN.match(str(quantity).strip())
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {quantity!r}")
    try:
        value = Decimal(match.group(1)) * _SUFFIXES[match.group(2) or ""]
    except ArithmeticError:
        raise ValueError(f"not a Kubernetes quantity: {quantity!r}") from None
    if value and value.adjusted() >= _MAX_DIGITS:
        raise ValueError(f"quantity {quantity!r} has over {_MAX_DIGITS} digits")
    return value


def _check(value: int | str) -> int | str:
    to_bytes(value)
    return value


def format_bytes(n: int) -> str:
    """Shortest exact binary spelling of a byte count: 42949672960 -> `40Gi`."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = int(_SUFFIXES[suffix])
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


_QUANTITY_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
    "description": "A Kubernetes quantity, e.g. 10Gi, 512Mi or a number of bytes.",
}

#: A Kubernetes quantity field: an int (bytes) or a string with a suffix.
Quantity = Annotated[int | str, AfterValidator(_check), WithJsonSchema(_QUANTITY_SCHEMA)]
