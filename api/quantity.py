"""Kubernetes resource quantities (`40Gi`, `5G`, `16106127360`) as a pydantic type.

A Quantity keeps the user's spelling (so objects round-trip unchanged) and converts to an integer
number of bytes with `to_bytes`.
"""

from __future__ import annotations

import functools
import json
import math
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


#: apimachinery's words (`resource.ErrFormatWrong`, `ErrSuffix`, `ErrNumeric`) when
#: `ParseQuantity` refuses a string: what kube-apiserver answers for a quantity that does not
#: decode, without naming the field.
FORMAT_WRONG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
SUFFIX_WRONG = "unable to parse quantity's suffix"
NUMERIC_WRONG = "unable to parse numeric part of quantity"
_DIGITS = frozenset("0123456789")
_SUFFIX_LETTERS = frozenset("eEinumkKMGTP")
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12,
                     "P": 15, "E": 18}  # fmt: skip
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def go_parse_error(text: str) -> str | None:
    """apimachinery's words when `resource.ParseQuantity(text)` refuses `text`, else None: its
    own scan (sign, digits, one `.` and digits, then suffix letters, a sign and digits) and
    suffix table, not a regular expression, so `1.` and `-` pass where `1.5.3`, `1e3Gi`, `1ki`
    and `1 Gi` do not. Pure."""
    if not text:
        return FORMAT_WRONG
    pos, end = 0, len(text)
    if text[0] in "+-":
        pos += 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return None
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end and text[pos] == ".":
        pos += 1
        while pos < end and text[pos] in _DIGITS:
            pos += 1
    start = pos
    if pos >= end:
        return None
    while pos < end and text[pos] in _SUFFIX_LETTERS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        return FORMAT_WRONG
    suffix = text[start:]
    if suffix in _DECIMAL_SUFFIXES or suffix in _BINARY_SUFFIXES:
        return None
    if len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch(r"[+-]?[0-9]+", suffix[1:]):
        return None if -(2**63) <= int(suffix[1:]) < 2**63 else SUFFIX_WRONG
    return SUFFIX_WRONG


def go_value(value: int | float | str) -> Decimal:
    """The exact value, in its base unit, of a quantity `go_parse_error` passes (`1u` is
    0.000001, `1.` is 1, `-` is 0, `1e+3` is 1000), as apimachinery computes it before its
    rounding to nano units; ValueError for any other, or one of over `_MAX_DIGITS` digits. Pure."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    return _go_value(value if isinstance(value, str) else str(value))


@functools.lru_cache(maxsize=4096)
def _go_value(value: str) -> Decimal:
    """`go_value` of a spelling, remembered (the replicas of a template repeat it)."""
    text = value.strip(" \t\n\r\v\f")
    if go_parse_error(text) is not None:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number = re.match(r"[+-]?[0-9]*\.?[0-9]*", text)
    assert number is not None  # the scan above passed
    digits, suffix = number.group(), text[number.end() :]
    negative = digits.startswith("-")
    digits = digits.lstrip("+-")
    amount = Decimal(digits if digits.strip(".") else "0")
    if suffix in _BINARY_SUFFIXES:
        scale = Decimal(2 ** _BINARY_SUFFIXES[suffix])
    else:
        exponent = _DECIMAL_SUFFIXES.get(suffix)
        exponent = int(suffix[1:]) if exponent is None else exponent
        if abs(exponent) > 2 * _MAX_DIGITS:
            raise ValueError(f"quantity {value!r} has over {_MAX_DIGITS} digits")
        scale = Decimal(10) ** exponent
    found = -amount * scale if negative else amount * scale
    if found and found.adjusted() >= _MAX_DIGITS:
        raise ValueError(f"quantity {value!r} has over {_MAX_DIGITS} digits")
    return found


def go_decode_error(value: Any) -> str | None:
    """The API server's words when a JSON value does not decode into a Quantity
    (`Quantity.UnmarshalJSON`: a string's bytes between its quotes, a number's digits, any
    other value's JSON text, trimmed of spaces, to `ParseQuantity`), else None. A null is the
    zero quantity. Pure."""
    if value is None:
        return None
    if isinstance(value, str):
        return _string_decode_error(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        # A JSON number's digits always parse (YAML's .inf and .nan are no JSON).
        return None if math.isfinite(value) else FORMAT_WRONG
    return go_parse_error(json.dumps(value))


@functools.lru_cache(maxsize=4096)
def _string_decode_error(value: str) -> str | None:
    """`go_decode_error` of a string, remembered: a manifest's pods repeat a few spellings
    (`500m`, `1Gi`) thousands of times."""
    # The string's bytes as JSON carries them: an escaped character stays escaped.
    text = json.dumps(value, ensure_ascii=False)[1:-1]
    return go_parse_error(text.strip(" \t\n\r\v\f"))


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
