"""CEL device selectors of `resource.k8s.io/v1`, evaluated with cel-python on the device model's
devices, with Kubernetes' semantics where they differ from cel-python's.

A selector sees what kube-scheduler's allocator shows it: `device.driver`, `device.attributes`
and `device.capacity` as maps from a domain (`gpu.drasat.io`, `resource.kubernetes.io`) to the
unqualified names (an unknown domain is an empty map), and `device.allowMultipleAllocations`.
Kubernetes' CEL library parts that selectors use are provided, as k8s.io/apiserver's CEL library
defines them:

- `quantity(s)`, `isQuantity(s)` with `compareTo`, `isGreaterThan`, `isLessThan`, `asInteger`,
  `isInteger`, `asApproximateFloat`, `add`, `sub`, `sign(q)` and `==`: exact values (`1500m` is
  1.5, not 2), parsed as `resource.ParseQuantity` parses them (every suffix: `1u`, `5Ki`, `1e3`),
  and integers as Kubernetes says them (`isInteger` is true only where `Quantity.AsInt64`
  succeeds: `2000m` and `1.5` are not integers, `1k` is);
- `semver(s)`, `isSemver(s)` (and their normalizing forms `semver(s, true)`) with `compareTo`,
  `isGreaterThan`, `isLessThan`, `major`, `minor`, `patch` and `==`: strict semantic versions
  (`1.2.3.4` and `1.2` are errors), prerelease precedence, build metadata ignored;
- cel-go's strings, lists and sets extensions, optional values (`optional.of`, `orValue`, ...;
  not the `.?` and `[?` syntax, which cel-python does not parse), and Kubernetes' regex, lists,
  IP, CIDR and URL libraries (`celext`);
- `cel.bind` and every comprehension macro, two-variable ones included (`all(k, v, ...)`,
  `transformMap`, ...), with cel-go's error rules (`_Evaluator`);
- CEL's heterogeneous equality and cross-type numeric comparison: `1 == 1.0` and `1 < 1.5` hold,
  `"a" == 1` is false, `"a" < 1` an error; a quantity or semver compared with `==` to another type
  is an error (as Kubernetes' types answer).

Version attributes are semvers, capacities quantities. Runtime errors read as Kubernetes writes
them (`no such key: index`, with the hint kube-scheduler adds).

An expression that does not compile is the claim's error (`SelectorError`). One that fails to
evaluate on a device is a `Failure` for that device (`Selector.evaluate`, `evaluate_all`):
kube-scheduler's allocator then fails the claim (the scheduling attempt ends with that error), so
a caller must not treat it as "no match" (`matches` is False on it, for callers that only filter).
Results are memoized per (expression, what the device is): devices that differ only in identity
(uuid, index, minor, PCI address, placement) share one evaluation unless the expression names
such an attribute or may read one without naming it (a key computed at evaluation time, an
escaped literal, a macro walking a map: `_reads_identity`).
"""

from __future__ import annotations

import ast as pyast
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import celpy
from celpy import celtypes
from celpy.celparser import CELParseError, CELParser
from celpy.evaluation import CELEvalError, Evaluator, base_functions
from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedToken

from drasat.v1 import celcheck, celext

Obj = dict[str, Any]

#: Attributes that tell equal devices apart (drasat's and NVIDIA's names); an expression that
#: names one is evaluated per device, the others once per kind of device.
_IDENTITY = frozenset(
    {"uuid", "index", "minor", "pciBusID", "parentUUID", "parentMinor", "parentIndex",
     "placementStart", "placementSize", "pcieRoot"}
)  # fmt: skip
_IDENTITY_RE = re.compile(r"\b(" + "|".join(sorted(_IDENTITY)) + r")\b")

#: Macros that walk their target's entries: over an attributes map, they read every
#: attribute's value (uuid and minor too) without naming one.
_WALKS = celcheck.MEMBER_MACROS


def _reads_identity(tree: Any) -> bool:
    """Whether the parsed expression may read an identity attribute without its name standing
    in the text as a word (which `_IDENTITY_RE` finds): a string literal that spells one with
    an escape, a map key computed at evaluation time (`["uu" + "id"]`, a macro's variable), or
    a macro walking a map's entries. Such an expression is evaluated per device: one answer
    per kind of device would be the first device's."""
    if isinstance(tree, Token):
        if tree.type in ("STRING_LIT", "MLSTRING_LIT"):
            value = _decoded(str(tree))
            return value is None or value.rpartition("/")[2] in _IDENTITY
        return False
    if not isinstance(tree, Tree):
        return False
    several = len(tree.children) > 1
    if tree.data == "member_index" and several and not _is_string_literal(tree.children[1]):
        return True
    if tree.data == "member_dot_arg" and several:
        name = tree.children[1]
        walks = isinstance(name, Token) and str(name) in _WALKS
        if walks and not _is_list_literal(tree.children[0]):
            return True
    return any(_reads_identity(child) for child in tree.children)


def _decoded(literal: str) -> str | None:
    """A CEL string literal's value; None for one with an escape (CEL's escapes are not
    Python's in every case), treated as naming anything."""
    if "\\" in literal:
        return None
    try:
        value = pyast.literal_eval(literal)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def _innermost(tree: Any) -> Any:
    """The one node under a chain of single-child nodes."""
    while isinstance(tree, Tree) and len(tree.children) == 1:
        tree = tree.children[0]
    return tree


def _is_string_literal(tree: Any) -> bool:
    found = _innermost(tree)
    return isinstance(found, Token) and found.type in ("STRING_LIT", "MLSTRING_LIT")


def _is_list_literal(tree: Any) -> bool:
    found = tree
    while isinstance(found, Tree) and len(found.children) == 1 and found.data != "list_lit":
        found = found.children[0]
    return isinstance(found, Tree) and found.data == "list_lit"


#: kube-scheduler adds this to a missing key's error (k8s.io/dynamic-resource-allocation/cel
#: EnhanceRuntimeError).
_NO_SUCH_KEY_HINT = (
    ". consider using CEL optional chaining (.? followed by orValue()) or guarding the check "
    "with has() for optional fields"
)
_NO_SUCH_OVERLOAD = "no such overload"


class SelectorError(ValueError):
    """A CEL expression that does not compile (the message says where)."""


@dataclass(frozen=True)
class Failure:
    """A selector that failed to evaluate on a device, in Kubernetes' words."""

    message: str


class _Error(celext.LibraryError):
    """A library function's runtime error (becomes a CEL error value, see `_function`)."""


class _Panic(Exception):
    """cel-go panics (recovered as the evaluation's error: no `||` absorbs it)."""


class _PanicValue(CELEvalError):
    """A panic where cel-go's evaluation reached it: it ends the evaluation, so it wins over any
    other error or absorbing operand evaluated with it (not over one cel-go never evaluates: the
    right side after a short-circuit, the branch a failing condition does not take)."""


def _fail(message: str) -> _Error:
    return _Error(message)


def _function(implementation: Any) -> Any:
    """A library function as CEL calls it: the first error among its arguments (left to right)
    is its result, and its own error is a value, not an exception, so that `||` and `&&` can
    absorb it as cel-go does."""

    def call(*args: Any) -> Any:
        # cel-go evaluates every argument before the call: a panic in any of them ends it.
        for arg in args:
            if isinstance(arg, _PanicValue):
                return arg
        for arg in args:
            if isinstance(arg, CELEvalError):
                return arg
        try:
            return implementation(*args)
        except celext.LibraryError as error:
            return CELEvalError(str(error))
        except _Panic as panic:
            return _PanicValue(str(panic))

    call.__name__ = getattr(implementation, "__name__", "function")
    return call


# -- quantities (k8s.io/apimachinery resource.ParseQuantity) -------------------------------------

_QUANTITY_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_INT64 = (-(2**63), 2**63 - 1)
_NANO = Fraction(1, 10**9)


@dataclass(frozen=True)
class QuantityValue:
    """A Kubernetes quantity: its exact value and, where `Quantity.AsInt64` succeeds for it, the
    integer (Kubernetes' `isInteger` depends on how the text was written, not only the value)."""

    value: Fraction
    integer: int | None

    def __str__(self) -> str:
        return str(self.value)


def _scan(text: str) -> tuple[bool, str, str, str, str]:
    """resource's parseQuantityString: sign, the number as written, numerator (leading zeros
    stripped), denominator digits, suffix."""
    positive, pos, end = True, 0, len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] == "+"
        pos += 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""
    start = pos
    while pos < end and text[pos].isdigit() and text[pos].isascii():
        pos += 1
    num = text[start:pos] or "0"
    denom = ""
    if pos >= end:
        return positive, text, num, denom, ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos].isdigit() and text[pos].isascii():
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value = text[:pos]
    suffix_start = pos
    while pos < end and text[pos] in "eEinumkKMGTP":
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos].isdigit() and text[pos].isascii():
        pos += 1
    if pos < end:
        raise ValueError(_QUANTITY_FORMAT)
    return positive, value, num, denom, text[suffix_start:]


def parse_quantity(text: str) -> QuantityValue:
    """`resource.ParseQuantity(text)`; ValueError with Kubernetes' message when it fails."""
    if not text:
        raise ValueError(_QUANTITY_FORMAT)
    if text == "0":
        return QuantityValue(Fraction(0), 0)
    positive, value, num, denom, suffix = _scan(text)
    if suffix in _DECIMAL:
        base, exponent, binary = 10, _DECIMAL[suffix], False
    elif suffix in _BINARY:
        base, exponent, binary = 2, _BINARY[suffix], True
    elif len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch(r"[+-]?[0-9]+", suffix[1:]):
        base, exponent, binary = 10, int(suffix[1:]), False
    else:
        raise ValueError("unable to parse quantity's suffix")
    # The fast path: an int64 amount with a decimal scale (AsInt64 works on these only).
    mantissa, scale = 1, 0
    if not binary:
        scale, precision = exponent, 18 - (len(num) + len(denom))
    elif not denom:
        mantissa, precision = 2**exponent, 15 - len(num) - int(exponent * 3 / 10) - 1
    else:
        precision = -1
    if precision >= 0:
        scale -= len(denom)
        if scale >= -9:
            amount = int(num + denom) * mantissa
            if amount <= _INT64[1]:
                amount = amount if positive else -amount
                integer = None
                if scale >= 0:
                    whole = amount * 10**scale
                    integer = whole if _INT64[0] <= whole <= _INT64[1] else None
                return QuantityValue(amount * Fraction(10) ** scale, integer)
    # The inf.Dec path: exact, rounded away from zero to a nano, binary capped at int64.
    magnitude = Fraction(value.lstrip("+-") or "0")
    magnitude *= Fraction(base) ** exponent if base == 10 else 2**exponent
    if magnitude:
        magnitude = -((-magnitude) // _NANO) * _NANO
    if binary:
        magnitude = min(magnitude, Fraction(_INT64[1]))
    return QuantityValue(magnitude if positive else -magnitude, None)


def _quantity(text: Any) -> QuantityValue:
    if not isinstance(text, str):
        raise _fail(_NO_SUCH_OVERLOAD)
    try:
        return parse_quantity(str(text))
    except ValueError as error:
        raise _fail(str(error)) from None


def _is_quantity(text: Any) -> celtypes.BoolType:
    if not isinstance(text, str):
        raise _fail(_NO_SUCH_OVERLOAD)
    try:
        parse_quantity(str(text))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


# -- semantic versions (github.com/blang/semver/v4 Parse) ----------------------------------------


@dataclass(frozen=True)
class SemverValue:
    """A semantic version; `==` and the comparisons follow semver precedence (build ignored)."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()
    text: str = field(default="", compare=False)

    def key(self) -> tuple[object, ...]:
        return (self.major, self.minor, self.patch)

    def __str__(self) -> str:
        return self.text


def _number(part: str, what: str) -> int:
    if not part.isascii() or not part.isdigit():
        raise ValueError(f"Invalid character(s) found in {what} number {part!r}".replace("'", '"'))
    if len(part) > 1 and part[0] == "0":
        raise ValueError(
            f"{what.capitalize()} number must not contain leading zeroes {part!r}".replace("'", '"')
        )
    return int(part)


_ALNUM = re.compile(r"^[0-9A-Za-z-]+$")


def parse_semver(text: str) -> SemverValue:
    """`semver.Parse(text)`; ValueError with its message when it fails."""
    if not text:
        raise ValueError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise ValueError("No Major.Minor.Patch elements found")
    major = _number(parts[0], "major")
    minor = _number(parts[1], "minor")
    rest = parts[2]
    cut = min((i for i in (rest.find("-"), rest.find("+")) if i >= 0), default=len(rest))
    patch = _number(rest[:cut], "patch")
    pre: list[int | str] = []
    build_at = rest.find("+", cut)
    if cut < len(rest) and rest[cut] == "-":
        pre_text = rest[cut + 1 : build_at if build_at >= 0 else len(rest)]
        for item in pre_text.split("."):
            if not item:
                raise ValueError("Prerelease is empty")
            if item.isascii() and item.isdigit():
                if len(item) > 1 and item[0] == "0":
                    raise ValueError(
                        f'Numeric PreRelease version must not contain leading zeroes "{item}"'
                    )
                pre.append(int(item))
            elif _ALNUM.match(item):
                pre.append(item)
            else:
                raise ValueError(f'Invalid character(s) found in prerelease "{item}"')
    if build_at >= 0:
        for item in rest[build_at + 1 :].split("."):
            if not item:
                raise ValueError("Build meta data is empty")
            if not _ALNUM.match(item):
                raise ValueError(f'Invalid character(s) found in build meta data "{item}"')
    return SemverValue(major, minor, patch, tuple(pre), text)


def _semver_compare(a: SemverValue, b: SemverValue) -> int:
    if a.key() != b.key():
        return 1 if a.key() > b.key() else -1
    if not a.pre or not b.pre:
        return (not a.pre) - (not b.pre)
    for x, y in zip(a.pre, b.pre, strict=False):
        if x == y:
            continue
        if isinstance(x, int) != isinstance(y, int):
            return -1 if isinstance(x, int) else 1
        return 1 if x > y else -1  # type: ignore[operator]
    return (len(a.pre) > len(b.pre)) - (len(a.pre) < len(b.pre))


def _normalized(text: str) -> str:
    """Kubernetes' semver normalization (`semver(s, true)`): a leading v dropped, leading zeros
    dropped, a missing minor or patch made 0."""
    parts = text.removeprefix("v").split(".", 2)
    for at, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            parts[at] = part if part[:1].isdigit() else "0" + part
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise ValueError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _semver(text: Any, normalize: Any = False) -> SemverValue:
    if not isinstance(text, str) or not isinstance(normalize, (bool, celtypes.BoolType)):
        raise _fail(_NO_SUCH_OVERLOAD)
    try:
        return parse_semver(_normalized(str(text)) if normalize else str(text))
    except ValueError as error:
        raise _fail(str(error)) from None


def _is_semver(text: Any, normalize: Any = False) -> celtypes.BoolType:
    try:
        _semver(text, normalize)
    except _Error as error:
        if str(error) == _NO_SUCH_OVERLOAD:
            raise
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


# -- the library's methods ------------------------------------------------------------------------


def _compare_to(a: Any, b: Any) -> celtypes.IntType:
    if isinstance(a, QuantityValue) and isinstance(b, QuantityValue):
        return celtypes.IntType((a.value > b.value) - (a.value < b.value))
    if isinstance(a, SemverValue) and isinstance(b, SemverValue):
        return celtypes.IntType(_semver_compare(a, b))
    raise _fail(_NO_SUCH_OVERLOAD)


def _quantity_of(value: Any) -> QuantityValue:
    if not isinstance(value, QuantityValue):
        raise _fail(_NO_SUCH_OVERLOAD)
    return value


def _as_integer(value: Any) -> celtypes.IntType:
    integer = _quantity_of(value).integer
    if integer is None:
        raise _fail("cannot convert value to integer")
    return celtypes.IntType(integer)


def _part(name: str) -> Any:
    def part(version: Any) -> celtypes.IntType:
        if not isinstance(version, SemverValue):
            raise _fail(_NO_SUCH_OVERLOAD)
        return celtypes.IntType(getattr(version, name))

    return part


def _arithmetic(sign: int) -> Any:
    """Quantity `add` and `sub` (of a quantity or an int): exact; an integer where both were
    (Kubernetes' Add keeps the int64 form only then)."""

    def operation(a: Any, b: Any) -> QuantityValue:
        left = _quantity_of(a)
        if isinstance(b, celtypes.IntType) and not isinstance(b, celtypes.BoolType):
            right = QuantityValue(Fraction(int(b)), int(b))
        else:
            right = _quantity_of(b)
        amount = left.value + sign * right.value
        integer = None
        if left.integer is not None and right.integer is not None:
            whole = left.integer + sign * right.integer
            integer = whole if _INT64[0] <= whole <= _INT64[1] else None
        return QuantityValue(amount, integer)

    return operation


# -- equality and comparison, as cel-go with Kubernetes' types -----------------------------------

_NUMBERS = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)


def _is_number(value: Any) -> bool:
    return isinstance(value, _NUMBERS) and not isinstance(value, celtypes.BoolType)


def _plain(number: Any) -> int | float:
    """A CEL number as Python's (cel-python's own operators refuse int against double; Python
    compares them exactly, as cel-go does)."""
    return float(number) if isinstance(number, celtypes.DoubleType) else int(number)


def _typed(value: Any) -> Any:
    """cel-python's own operators return plain Python values (`"a" + "b"` is a str): as CEL's."""
    plain: Any = type(value)
    kinds = {str: celtypes.StringType, bool: celtypes.BoolType, int: celtypes.IntType}
    kinds |= {float: celtypes.DoubleType, bytes: celtypes.BytesType, list: celtypes.ListType}
    return kinds[plain](value) if plain in kinds else value


def _equal(a: Any, b: Any) -> bool:
    """cel-go's `types.Equal(a, b)`: `a.Equal(b)`; a quantity or semver on the left is an error
    against another type, every built-in type is unequal to another (numbers aside)."""
    a, b = _typed(a), _typed(b)
    if isinstance(a, QuantityValue):
        if not isinstance(b, QuantityValue):
            raise _fail(_NO_SUCH_OVERLOAD)
        return a.value == b.value
    if isinstance(a, SemverValue):
        if not isinstance(b, SemverValue):
            raise _fail(_NO_SUCH_OVERLOAD)
        return _semver_compare(a, b) == 0
    if _is_number(a) and _is_number(b):
        return _plain(a) == _plain(b)
    both = (celtypes.MapType, celtypes.ListType)
    if type(a) is not type(b) and not any(isinstance(a, t) and isinstance(b, t) for t in both):
        return False
    if isinstance(a, celtypes.ListType):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, celtypes.MapType):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _eq(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_equal(a, b))


def _ne(a: Any, b: Any) -> celtypes.BoolType:
    # cel-go: `a != b` is `Equal(a, b) != true`, so an Equal that errs makes it true.
    try:
        return celtypes.BoolType(not _equal(a, b))
    except _Error:
        return celtypes.BoolType(True)


def _logic(absorbing: bool) -> Any:
    """`||` (absorbing true) and `&&` (absorbing false) as cel-go: either side's absorbing value
    wins over an error; otherwise the left error, then the right, is the result."""

    def logic(a: Any, b: Any) -> Any:
        # cel-go evaluates left to right and stops at an absorbing value; a panic on the way ends
        # the evaluation.
        if isinstance(a, celtypes.BoolType) and bool(a) is absorbing:
            return celtypes.BoolType(absorbing)
        for side in (a, b):
            if isinstance(side, _PanicValue):
                return side
        for side in (a, b):
            if isinstance(side, celtypes.BoolType) and bool(side) is absorbing:
                return celtypes.BoolType(absorbing)
        for side in (a, b):
            if isinstance(side, CELEvalError):
                return side
            if not isinstance(side, celtypes.BoolType):
                return CELEvalError(_NO_SUCH_OVERLOAD)
        return celtypes.BoolType(not absorbing)

    return logic


def _not(a: Any) -> Any:
    if isinstance(a, CELEvalError):
        return a
    if not isinstance(a, celtypes.BoolType):
        return CELEvalError(_NO_SUCH_OVERLOAD)
    return celtypes.BoolType(not a)


def _conditional(condition: Any, left: Any, right: Any) -> Any:
    if isinstance(condition, CELEvalError):
        return condition
    if not isinstance(condition, celtypes.BoolType):
        return CELEvalError(_NO_SUCH_OVERLOAD)
    return left if condition else right


def _ordered(a: Any, b: Any) -> tuple[Any, Any]:
    """The operands of `<` and friends, where cel-go's Comparer accepts them."""
    a, b = _typed(a), _typed(b)
    if _is_number(a) and _is_number(b):
        return _plain(a), _plain(b)
    comparable = (celtypes.StringType, celtypes.BoolType, celtypes.BytesType)
    for kind in comparable:
        if isinstance(a, kind) and isinstance(b, kind):
            return a, b
    if isinstance(a, (celtypes.TimestampType, celtypes.DurationType)) and type(a) is type(b):
        return a, b
    raise _fail(_NO_SUCH_OVERLOAD)


def _relation(test: Any) -> Any:
    def relation(a: Any, b: Any) -> celtypes.BoolType:
        left, right = _ordered(a, b)
        return celtypes.BoolType(test(left, right))

    return relation


_PRIMITIVES = (
    celtypes.StringType,
    celtypes.IntType,
    celtypes.UintType,
    celtypes.DoubleType,
    celtypes.BoolType,
    bool,
)  # bytes are not looked up by hash (upstream: no match)


def _in(item: Any, container: Any) -> celtypes.BoolType:
    if isinstance(container, celtypes.ListType):
        if isinstance(item, SemverValue) and all(isinstance(e, _PRIMITIVES) for e in container):
            # cel-go looks an item up in a list of literals by hash; a semver has none, and the
            # panic ends the whole evaluation.
            raise _Panic("internal error: runtime error: hash of unhashable type cel.Semver")
        # cel-go's List.Contains: an element equal to the item; comparison errors are no match.
        for element in container:
            try:
                if _equal(item, element):
                    return celtypes.BoolType(True)
            except _Error:
                continue
        return celtypes.BoolType(False)
    if isinstance(container, celtypes.MapType):
        return celtypes.BoolType(item in container)
    raise _fail(_NO_SUCH_OVERLOAD)


def _size(value: Any) -> Any:
    if isinstance(value, (QuantityValue, SemverValue)):
        raise _fail(_NO_SUCH_OVERLOAD)
    return base_functions["size"](value)


def _compare(a: Any, b: Any) -> int:
    """cel-go's Compare of two list elements (sort, min, max, isSorted)."""
    left, right = _ordered(a, b)
    return int(left > right) - int(left < right)


def _add(a: Any, b: Any) -> Any:
    if not (_is_number(a) and type(a) is type(b)) and not isinstance(a, celtypes.DurationType):
        raise _fail(_NO_SUCH_OVERLOAD)
    return _typed(a + b)


def _by_receiver(on_string: Any, on_list: Any) -> Any:
    """indexOf and lastIndexOf: the strings extension's on a string, the lists library's on a
    list."""

    def dispatch(target: Any, *args: Any) -> Any:
        if isinstance(target, str):
            return on_string(target, *args)
        if isinstance(target, celtypes.ListType) and len(args) == 1:
            return on_list(target, *args)
        raise _fail(_NO_SUCH_OVERLOAD)

    return dispatch


def _ip(value: Any) -> Any:
    """`ip(s)`, and `c.ip()` of a CIDR."""
    return celext.cidr_ip(value) if isinstance(value, celext.CIDRValue) else celext.ip(value)


def _string(value: Any) -> Any:
    if isinstance(value, (celext.IPValue, celext.CIDRValue)):
        return celtypes.StringType(str(value))
    return base_functions["string"](value)


#: Kubernetes' and cel-go's extension libraries (`celext`), by the names selectors call.
_EXTENSIONS: dict[str, Any] = {
    "charAt": celext.char_at,
    "indexOf": _by_receiver(
        celext.index_of, lambda items, item: celext.list_index_of(items, item, _equal)
    ),
    "lastIndexOf": _by_receiver(
        celext.last_index_of,
        lambda items, item: celext.list_index_of(items, item, _equal, last=True),
    ),
    "lowerAscii": celext.lower_ascii,
    "upperAscii": celext.upper_ascii,
    "trim": celext.trim,
    "replace": celext.replace,
    "split": celext.split,
    "substring": celext.substring,
    "join": celext.join,
    "strings.quote": celext.quote,
    "find": celext.find,
    "findAll": celext.find_all,
    "isSorted": lambda items: celext.is_sorted(items, _compare),
    "sum": lambda items: celext.total(items, _add, celtypes.IntType(0)),
    "min": lambda items: celext.extreme(items, _compare, "min"),
    "max": lambda items: celext.extreme(items, _compare, "max"),
    "slice": celext.slice_of,
    "flatten": celext.flatten,
    "lists.range": celext.lists_range,
    "includes": lambda items, item: celext.includes(items, item, _equal),
    "distinct": lambda items: celext.distinct(items, _equal),
    "reverse": celext.reverse,
    "sort": lambda items: celext.sort(items, _compare),
    "first": celext.first,
    "last": celext.last,
    "sets.contains": lambda a, b: celext.sets_contains(a, b, _equal),
    "sets.equivalent": lambda a, b: celext.sets_equivalent(a, b, _equal),
    "sets.intersects": lambda a, b: celext.sets_intersects(a, b, _equal),
    "optional.of": celext.optional_of,
    "optional.none": celext.optional_none,
    "optional.ofNonZeroValue": celext.optional_of_non_zero,
    "hasValue": celext.has_value,
    "value": celext.value,
    "or": celext.or_optional,
    "orValue": celext.or_value,
    "ip": _ip,
    "isIP": celext.is_ip,
    "ip.isCanonical": celext.ip_is_canonical,
    "family": celext.family,
    **{name: celext.ip_test(name) for name in celext.IP_TESTS},
    "cidr": celext.cidr,
    "isCIDR": celext.is_cidr,
    "containsIP": celext.contains_ip,
    "containsCIDR": celext.contains_cidr,
    "masked": celext.masked,
    "prefixLength": celext.prefix_length,
    "string": _string,
    "format.named": celext.format_named,
    **{f"format.{name}": celext.format_of(name) for name in celext.FORMATS},
    "validate": celext.validate,
    "url": celext.url,
    "isURL": celext.is_url,
    "getScheme": celext.get_scheme,
    "getHost": celext.get_host,
    "getHostname": celext.get_hostname,
    "getPort": celext.get_port,
    "getEscapedPath": celext.get_escaped_path,
    "getQuery": celext.get_query,
}


def _sort_by(items: Any, keys: Any) -> celtypes.ListType:
    """`@sortByAssociatedKeys`: the list in the order of its keys (stable)."""
    by_key = functools.cmp_to_key(lambda a, b: _compare(keys[a], keys[b]))
    order = sorted(range(len(keys)), key=by_key)
    return celtypes.ListType([items[i] for i in order])


_LIBRARY: dict[str, Any] = {
    "_sortBy_": _sort_by,
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "compareTo": _compare_to,
    "isGreaterThan": lambda a, b: celtypes.BoolType(int(_compare_to(a, b)) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(int(_compare_to(a, b)) < 0),
    "asInteger": _as_integer,
    "isInteger": lambda a: celtypes.BoolType(_quantity_of(a).integer is not None),
    "asApproximateFloat": lambda a: celtypes.DoubleType(float(_quantity_of(a).value)),
    "sign": lambda a: celtypes.IntType((_quantity_of(a).value > 0) - (_quantity_of(a).value < 0)),
    "major": _part("major"),
    "minor": _part("minor"),
    "patch": _part("patch"),
    "_==_": _eq,
    "_!=_": _ne,
    "_<_": _relation(lambda a, b: a < b),
    "_<=_": _relation(lambda a, b: a <= b),
    "_>_": _relation(lambda a, b: a > b),
    "_>=_": _relation(lambda a, b: a >= b),
    "_in_": _in,
    "size": _size,
    "add": _arithmetic(1),
    "sub": _arithmetic(-1),
    **_EXTENSIONS,
}
FUNCTIONS: dict[str, Any] = {
    **{name: _function(f) for name, f in _LIBRARY.items()},
    "_||_": _logic(True),
    "_&&_": _logic(False),
    "!_": _not,
    "_?_:_": _conditional,
}


# -- the device ------------------------------------------------------------------------------------


class _Domains(celtypes.MapType):
    """`device.attributes` and `device.capacity`: an unknown domain is an empty map, as
    kube-scheduler builds them (newStringInterfaceMapWithDefault)."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType({})


def _value(value: Obj) -> Any:
    """A v1 DeviceAttribute (`{"string": ...}`, `int`, `bool`, `version`) as a CEL value."""
    if "version" in value:
        try:
            return parse_semver(str(value["version"]))
        except ValueError as error:
            raise _fail(f"parse semantic version: {error}") from None
    if "bool" in value:
        return celtypes.BoolType(value["bool"])
    if "int" in value:
        return celtypes.IntType(value["int"])
    if "string" in value:
        return celtypes.StringType(str(value["string"]))
    raise _fail("unsupported attribute value")


def _capacity(value: Obj) -> QuantityValue:
    try:
        return parse_quantity(str(value.get("value", "0")))
    except ValueError as error:
        raise _fail(f"capacity: {error}") from None


def _by_domain(entries: Mapping[str, Any], driver: str, convert: Any) -> _Domains:
    domains: dict[str, dict[str, Any]] = {}
    for qualified, value in entries.items():
        domain, _, name = qualified.rpartition("/")
        try:
            converted = convert(value)
        except _Error as error:
            raise _fail(f"attribute {qualified}: {error}") from None
        domains.setdefault(domain or driver, {})[name] = converted
    return _Domains(
        {
            celtypes.StringType(d): celtypes.MapType(
                {celtypes.StringType(k): v for k, v in names.items()}
            )
            for d, names in domains.items()
        }
    )


def activation(driver: str, device: Obj) -> dict[str, Any]:
    """The `device` variable a selector sees for one v1 Device of `driver` (an error when an
    attribute cannot be read, as kube-scheduler fails every selector on such a device)."""
    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(driver),
                celtypes.StringType("attributes"): _by_domain(
                    device.get("attributes", {}), driver, _value
                ),
                celtypes.StringType("capacity"): _by_domain(
                    device.get("capacity", {}), driver, _capacity
                ),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                    bool(device.get("allowMultipleAllocations", False))
                ),
            }
        )
    }


def kind_key(driver: str, device: Obj) -> tuple[object, ...]:
    """What a device is, without which one it is (the memo key of its evaluations)."""
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


#: `kind_key` -> a small number standing for it (`kind_id`). Bounded: a controller that meets
#: this many kinds starts numbering again (a number is never reused while the table stands).
_KIND_IDS: dict[tuple[object, ...], int] = {}
_KIND_IDS_MAX = 100_000
_KIND_EPOCH = [0]


def kind_id(driver: str, device: Obj) -> int:
    """A number for the device's `kind_key`, the same for every device of the kind: a memo
    keyed by it hashes an int, where the key itself is a tuple of every attribute and
    capacity that Python hashes again at each lookup (a cycle looks up every published
    device once per request's selectors)."""
    key = kind_key(driver, device)
    found = _KIND_IDS.get(key)
    if found is None:
        if len(_KIND_IDS) >= _KIND_IDS_MAX:
            _KIND_IDS.clear()
            _KIND_EPOCH[0] += 1
        found = _KIND_IDS[key] = _KIND_EPOCH[0] * _KIND_IDS_MAX + len(_KIND_IDS)
    return found


#: cel-python's error texts (and the Python error under them) in cel-go's words; what cel-go
#: says was asked of upstream's CEL (the oracle, tests/oracle).
_CONVERSIONS = {"int(": "int", "uint(": "uint", "double(": "double"}


def kubernetes_message(error: BaseException) -> str:
    """A cel-python evaluation error in the words cel-go and kube-scheduler use: one line,
    never a Python type's name."""
    args = error.args
    text = str(args[0]) if args else str(error)
    cause = args[1] if len(args) > 1 else None
    details = args[2] if len(args) > 2 and isinstance(args[2], tuple) else ()
    if text.startswith("no such member in mapping: "):
        return f"no such key: {text.partition(': ')[2].strip(chr(39))}{_NO_SUCH_KEY_HINT}"
    if text == "no such key" and details:
        return f"no such key: {details[0]}{_NO_SUCH_KEY_HINT}"
    if text.endswith("does not support field selection"):
        # A field of a value that has none (`productName.foo`): cel-go looks it up as a key.
        tree = getattr(error, "tree", None)
        children = getattr(tree, "children", None) or []
        name = getattr(children[-1], "value", None) if children else None
        return f"no such key: {name}{_NO_SUCH_KEY_HINT}" if name else "no such key"
    if text.startswith("found no matching overload") or "unbound function" in text:
        return _NO_SUCH_OVERLOAD
    if text.startswith("no such key: ") and not text.endswith(_NO_SUCH_KEY_HINT):
        return text + _NO_SUCH_KEY_HINT
    if cause is ZeroDivisionError:
        modulus = (
            bool(details) and "modulo" in str(details[0]) and "division" not in str(details[0])
        )
        return "modulus by zero" if modulus else "division by zero"
    if text == "return error for overflow" and cause is ValueError and details:
        # int("x"), uint("x"), double("x"): a string that is no number.
        found = str(details[0])
        target = "double" if "float" in found else "int"
        return f"type conversion error from 'string' to '{target}'"
    if cause is IndexError:
        return "index out of bounds"
    if text == "match error":
        return "error parsing regexp"
    return _one_line(text.partition(" (in activation")[0])


def _one_line(text: str, most: int = 300) -> str:
    """One line (newlines become spaces), at most `most` characters, cut at a word."""
    flat = " ".join(text.split())
    if len(flat) <= most:
        return flat
    return flat[:most].rpartition(" ")[0] + " …"


#: Most answers one selector keeps (`Selector._memo`). A selector that reads identity keeps one
#: per device it has seen, and devices come and go (a node's MIG layout changes, nodes join and
#: leave): without a bound, one tenant's claim could grow the controller's memory for as long as it
#: runs. Past it the memo starts again (an answer is recomputed, never wrong). Above the devices of
#: a large fleet (10,000 nodes of 8 GPUs), so that a steady fleet is never evaluated twice; the
#: same scale as `_KIND_IDS_MAX`.
MEMO_MAX = 100_000


@dataclass
class Selector:
    """One compiled CEL expression."""

    expression: str
    _program: Any = field(repr=False)
    _by_identity: bool = field(repr=False)
    _memo: dict[object, bool | Failure] = field(default_factory=dict, repr=False)
    #: The first evaluation failure seen, to explain why nothing matched.
    error: str | None = None

    def evaluate(self, driver: str, device: Obj, kind: int | None = None) -> bool | Failure:
        """True or False, or the Failure kube-scheduler would fail the claim with. `kind`: the
        device's `kind_id`, when the caller keeps it (it costs more than a memo hit)."""
        key: object = kind if kind is not None else kind_id(driver, device)
        if self._by_identity:
            key = (key, device.get("name"), repr(device.get("attributes")))
        found = self._memo.get(key)
        if found is None:
            found = self._evaluate(driver, device)
            if len(self._memo) >= MEMO_MAX:
                self._memo.clear()
            self._memo[key] = found
        return found

    @property
    def by_identity(self) -> bool:
        """Whether the expression names an attribute that tells equal devices apart."""
        return self._by_identity

    def matches(self, driver: str, device: Obj) -> bool:
        """True only where the selector evaluates to true (a Failure is not a match)."""
        return self.evaluate(driver, device) is True

    def _evaluate(self, driver: str, device: Obj) -> bool | Failure:
        try:
            result = self._program.evaluate(activation(driver, device))
        except (CELEvalError, _Error) as error:
            return self._failed(kubernetes_message(error))
        except (TypeError, ValueError, KeyError, ZeroDivisionError, OverflowError) as error:
            return self._failed(kubernetes_message(error))
        if isinstance(result, CELEvalError):
            return self._failed(kubernetes_message(result))
        if not isinstance(result, celtypes.BoolType):
            # cel-go's ConvertToNative(bool) on another type
            return self._failed(
                f"CEL result of type {_type_name(result)} could not be converted to bool"
            )
        return bool(result)

    def _failed(self, message: str) -> Failure:
        if self.error is None:
            self.error = f"{self.expression!r} failed on a device: {message}"
        return Failure(message)


def _type_name(value: Any) -> str:
    if isinstance(value, celtypes.BoolType):
        return "bool"
    if _is_number(value):
        return {celtypes.IntType: "int", celtypes.UintType: "uint"}.get(type(value), "double")
    if isinstance(value, celtypes.StringType):
        return "string"
    if isinstance(value, QuantityValue):
        return "kubernetes.Quantity"
    if isinstance(value, SemverValue):
        return "kubernetes.Semver"
    return type(value).__name__


def evaluate_all(
    selectors: Iterable[Selector],
    driver: str,
    device: Obj,
    kind: int | None = None,
) -> bool | Failure:
    """Selectors in order, as kube-scheduler's allocator checks a device against a request (the
    class's, then the request's): the first False or Failure ends it. `kind`: as in
    `Selector.evaluate`."""
    if kind is None:
        kind = kind_id(driver, device)
    for selector in selectors:
        result = selector.evaluate(driver, device, kind)
        if result is not True:
            return result
    return True


# -- macros cel-python lacks, with cel-go's semantics ---------------------------------------------
#
# cel-go expands `cel.bind` and every comprehension macro into one comprehension (a loop with an
# accumulator, a condition that stops it early and a step); cel-python knows only the one-variable
# `all`, `exists`, `exists_one`, `map` and `filter`, and folds errors into them with Python's truth
# (an error counts as true in `exists_one` and `filter`). drasat evaluates all of them here, one
# loop per macro as cel-go expands it (cel-go's parser/macro.go, ext/bindings.go and
# ext/comprehensions.go), so the controller and the what-if, which both evaluate through
# `compile_selector`, accept and answer what kube-scheduler does.

#: (macro, argument count) -> variables it binds; the others are the filter (if any) and the body.
_COMPREHENSIONS: dict[tuple[str, int], int] = {
    ("all", 2): 1, ("exists", 2): 1, ("exists_one", 2): 1,
    ("map", 2): 1, ("map", 3): 1, ("filter", 2): 1,
    ("all", 3): 2, ("exists", 3): 2, ("exists_one", 3): 2, ("existsOne", 3): 2,
    ("transformList", 3): 2, ("transformList", 4): 2, ("transformMap", 3): 2,
    ("transformMap", 4): 2, ("transformMapEntry", 3): 2, ("transformMapEntry", 4): 2,
}  # fmt: skip
_GO_TYPES = {celtypes.BoolType: "types.Bool", celtypes.IntType: "types.Int",
             celtypes.UintType: "types.Uint", celtypes.DoubleType: "types.Double",
             celtypes.StringType: "types.String", celtypes.BytesType: "types.Bytes",
             QuantityValue: "library.Quantity", SemverValue: "library.Semver"}  # fmt: skip


def _ident(tree: Any) -> str | None:
    """The name of an expression that is a plain identifier, else None."""
    found = _innermost(tree)
    if isinstance(found, Tree) and found.data == "ident":
        found = found.children[0]
    is_name = isinstance(found, Token) and found.type == "IDENT"
    return str(found) if is_name else None


def _is_error(value: Any) -> bool:
    return isinstance(value, CELEvalError)


def _entries(target: Any, variables: int) -> list[tuple[Any, ...]] | CELEvalError:
    """What a comprehension walks: a list's elements (with their index for two variables), a
    map's keys (with their value); cel-go's error for anything else."""
    if isinstance(target, celtypes.ListType):
        if variables == 1:
            return [(element,) for element in target]
        return [(celtypes.IntType(i), element) for i, element in enumerate(target)]
    if isinstance(target, celtypes.MapType):
        return [(key,) if variables == 1 else (key, target[key]) for key in target]
    go = _GO_TYPES.get(type(_typed(target)), type(target).__name__)
    if variables == 1:
        return CELEvalError(f"got '{go}', expected iterable type")
    return CELEvalError(f"unsupported comprehension range type: {go}")


class _Fold:
    """One comprehension's accumulator and step, as cel-go's macro writes them."""

    def __init__(self, macro: str) -> None:
        self.macro = macro
        start: dict[str, Any] = {"all": True, "exists": False, "map": [], "filter": []}
        start |= {"transformList": [], "transformMap": {}, "transformMapEntry": {}}
        self.accu: Any = start.get(macro, 0)
        if isinstance(self.accu, bool):
            self.accu = celtypes.BoolType(self.accu)

    def done(self) -> bool:
        """cel-go's loop condition: `all` stops at a false, `exists` at a true."""
        if self.macro in ("all", "exists"):
            return isinstance(self.accu, celtypes.BoolType) and bool(self.accu) is (
                self.macro == "exists"
            )
        return False

    def step(self, key: Any, element: Any, keep: Any, value: Any) -> None:
        """One step: `keep` is the filter's value (True where there is none), `value` the
        body's."""
        if self.macro in ("all", "exists"):
            self.accu = FUNCTIONS["_&&_" if self.macro == "all" else "_||_"](self.accu, value)
            return
        if _is_error(self.accu):
            return  # cel-go's step on an error accumulator is that error
        if self.macro in ("exists_one", "existsOne", "filter"):
            keep, value = value, None  # the body is the predicate
        if _is_error(keep) or not isinstance(keep, celtypes.BoolType):
            self.accu = keep if _is_error(keep) else CELEvalError(_NO_SUCH_OVERLOAD)
        elif not keep:
            return
        elif self.macro in ("exists_one", "existsOne"):
            self.accu += 1
        elif self.macro == "filter":
            self.accu.append(element)
        elif _is_error(value):
            self.accu = value
        elif self.macro in ("map", "transformList"):
            self.accu.append(value)
        elif self.macro == "transformMap":
            self.accu[key] = value
        else:
            self.insert(value)

    def insert(self, entries: Any) -> None:
        """transformMapEntry: the body's map merged in; a key already there is an error."""
        if not isinstance(entries, celtypes.MapType):
            self.accu = CELEvalError(_NO_SUCH_OVERLOAD)
            return
        for key, value in entries.items():
            if key in self.accu:
                self.accu = CELEvalError("insert failed: key " + str(key) + " already exists")
                return
            self.accu[key] = value

    def result(self) -> Any:
        if _is_error(self.accu) or self.macro in ("all", "exists"):
            return self.accu
        if self.macro in ("exists_one", "existsOne"):
            return celtypes.BoolType(self.accu == 1)
        if isinstance(self.accu, list):
            return celtypes.ListType(self.accu)
        return celtypes.MapType(self.accu)


_NOT_A_LIST = (
    "internal error: interface conversion: *types.Err is not traits.Lister: missing method Add"
)
#: (method, argument count) -> (the value that must not be an error, cel-go's panic).
_PANICS_ON_ERROR = {
    ("distinct", 0): (0, _NOT_A_LIST),
    ("flatten", 1): (
        1,
        "internal error: interface conversion: ref.Val is *types.Err, not types.Int",
    ),
}

#: The last part of each namespaced function's name (`contains` of `sets.contains`).
_NAMESPACED = frozenset(name.rpartition(".")[2] for name in FUNCTIONS if "." in name)


class _Evaluator(Evaluator):
    """cel-python's evaluator with `cel.bind` and every comprehension macro of Kubernetes' CEL
    (two-variable ones included) evaluated as cel-go does."""

    def sub_evaluator(self, ast: Any) -> Evaluator:
        return _Evaluator(ast, activation=self.activation)

    def member_dot_arg(self, tree: Any) -> Any:
        target, method = tree.children[0], str(tree.children[1])
        args = _args(tree)
        if method == "bind" and len(args) == 3 and _ident(target) == "cel":
            return self._bind(args)
        variables = _COMPREHENSIONS.get((method, len(args)))
        if variables is not None:
            return self._comprehension(method, self.visit(target), args, variables)
        if method in ("optMap", "optFlatMap", "sortBy") and len(args) == 2:
            return self._optional_or_sort(method, self.visit(target), args)
        namespace = _qualified(target) if method in _NAMESPACED else None
        function = f"{namespace}.{method}"
        if namespace is not None and function in FUNCTIONS and not self._bound(namespace):
            # A namespaced global function (`sets.contains(a, b)`), not a method of a variable.
            return FUNCTIONS[function](*(self.visit(arg) for arg in args))
        if (method, len(args)) in _PANICS_ON_ERROR:
            return self._cost_tracked(method, target, args)
        if method in ("min", "reduce"):
            # cel-python reads these as macros of its own; in Kubernetes' CEL they are calls.
            return self._call(method, [self.visit(target), *(self.visit(a) for a in args)])
        return super().member_dot_arg(tree)

    def member_dot_opt(self, tree: Any) -> Any:
        """`a.?f`: optional.of(a.f) where `a` has `f`, else optional.none()."""
        return _optional_select(self.visit(tree.children[0]), celtypes.StringType(tree.children[1]))

    def member_index_opt(self, tree: Any) -> Any:
        """`a[?k]`: optional.of(a[k]) where `a` has `k`, else optional.none()."""
        target, key = self.visit_children(tree)
        return key if _is_error(key) and not _is_error(target) else _optional_select(target, key)

    def member_dot(self, tree: Any) -> Any:
        target = tree.children[0]
        if not _after_optional(target):
            return super().member_dot(tree)
        # `a.?b.c`: a field of an optional value is optional (none stays none).
        found = self.visit(target)
        if isinstance(found, celext.OptionalValue):
            return _optional_select(found, celtypes.StringType(tree.children[1]))
        return self._index(found, celtypes.StringType(tree.children[1]))

    def member_index(self, tree: Any) -> Any:
        # cel-python indexes an error value (`[attr, 0].sort()[0]` where attr is missing) and
        # says "no such overload"; cel-go passes the error on.
        target, index = self.visit_children(tree)
        if isinstance(target, celext.OptionalValue) and not _is_error(index):
            return _optional_select(target, index)
        return self._index(target, index)

    def _index(self, target: Any, index: Any) -> Any:
        for value in (target, index):
            if _is_error(value):
                return value
        try:
            return self.activation.resolve_function("_[_]")(target, index)
        except TypeError as error:
            return CELEvalError(_NO_SUCH_OVERLOAD, TypeError, error.args)
        except KeyError as error:
            return CELEvalError("no such key", KeyError, error.args)
        except IndexError as error:
            return CELEvalError("invalid_argument", IndexError, error.args)

    def _cost_tracked(self, method: str, target: Any, args: list[Any]) -> Any:
        """distinct() and flatten(depth): cel-go's cost tracker reads the receiver as a list, the
        depth as an int, before the call looks at errors, so an error there panics (ends the
        evaluation; no `||` absorbs it)."""
        values = [self.visit(target), *(self.visit(arg) for arg in args)]
        at, message = _PANICS_ON_ERROR[(method, len(args))]
        if _is_error(values[at]) and not isinstance(values[at], _PanicValue):
            return _PanicValue(message)
        return FUNCTIONS[method](*values)

    def _bound(self, name: str) -> bool:
        try:
            found = self.activation.resolve_variable(name.partition(".")[0])
        except (KeyError, NameError):
            return False
        return not callable(found)  # cel-python finds functions by the same lookup

    def _call(self, name: str, values: list[Any]) -> Any:
        function = FUNCTIONS.get(name)
        if function is None:
            return CELEvalError(f"undeclared reference to '{name}'")
        return function(*values)

    def _optional_or_sort(self, macro: str, target: Any, args: list[Any]) -> Any:
        """`opt.optMap(x, e)`, `opt.optFlatMap(x, e)` (optional values' macros) and
        `list.sortBy(x, key)` (cel-go's lists extension)."""
        if _is_error(target):
            return target
        name = str(_ident(args[0]))
        if macro == "sortBy":
            if not isinstance(target, celtypes.ListType):
                return CELEvalError(_NO_SUCH_OVERLOAD)
            keys = [self._scoped(args[1], {name: element}) for element in target]
            for key in keys:
                if _is_error(key):
                    return _PanicValue(_NOT_A_LIST)  # cel-go's cost tracker reads the keys
            return FUNCTIONS["_sortBy_"](target, celtypes.ListType(keys))
        if not isinstance(target, celext.OptionalValue):
            return CELEvalError(_NO_SUCH_OVERLOAD)
        if not target.present:
            return celext.NONE
        found = self._scoped(args[1], {name: target.value})
        if macro == "optFlatMap" or _is_error(found):
            return found
        return celext.optional_of(found)

    def _scoped(self, tree: Any, bindings: dict[str, Any]) -> Any:
        """`tree`'s value with `bindings` added to the variables in scope (an error as a
        value, not raised)."""
        nested = self.sub_evaluator(tree)
        nested.set_activation(bindings)
        return nested.visit(tree)

    def _bind(self, args: list[Any]) -> Any:
        # cel-go evaluates the bound value when the body first reads it; an error bound is
        # an error only where read, as here.
        name = _ident(args[0])
        return self._scoped(args[2], {str(name): self.visit(args[1])})

    def _comprehension(self, macro: str, target: Any, args: list[Any], variables: int) -> Any:
        if _is_error(target):
            return target
        entries = _entries(target, variables)
        if isinstance(entries, CELEvalError):
            return entries
        names = [str(_ident(arg)) for arg in args[:variables]]  # the checker saw to it
        condition = args[variables] if len(args) - variables == 2 else None
        body = args[-1]
        fold = _Fold(macro)
        for entry in entries:
            if fold.done():
                break
            bindings = dict(zip(names, entry, strict=True))
            keep = celtypes.BoolType(True)
            if condition is not None:
                keep = self._scoped(condition, bindings)
            # cel-go's `filter ? step : accu` evaluates the body only where the filter holds.
            kept = isinstance(keep, celtypes.BoolType) and bool(keep)
            value = self._scoped(body, bindings) if kept else None
            for found in (keep, value):
                if isinstance(found, _PanicValue):
                    return found  # a panic ends cel-go's evaluation at once
            fold.step(entry[0], entry[-1], keep, value)
        return fold.result()


def _optional_select(target: Any, key: Any) -> Any:
    """cel-go's optional selection: of a map (or an optional map), the key's value as an
    optional; of a list, the index's; of anything else, none."""
    if _is_error(target):
        return target
    if isinstance(target, celext.OptionalValue):
        if not target.present:
            return celext.NONE
        target = target.value
    if isinstance(target, celtypes.MapType):
        return celext.optional_of(target[key]) if key in target else celext.NONE
    if isinstance(target, celtypes.ListType) and _is_number(key):
        inside = 0 <= _plain(key) < len(target) and _plain(key) == int(_plain(key))
        return celext.optional_of(target[int(_plain(key))]) if inside else celext.NONE
    return celext.NONE  # nothing to select in (`"gpu".?x`): none, as cel-go answers


def _after_optional(tree: Any) -> bool:
    """Whether an optional selection (`.?`, `[?`) is in the chain under `tree`."""
    while isinstance(tree, Tree):
        if tree.data in ("member_dot_opt", "member_index_opt"):
            return True
        if tree.data not in ("member", "member_dot", "member_index", "primary"):
            return False
        tree = tree.children[0]
    return False


def _qualified(tree: Any) -> str | None:
    """`a.b` of a target that is a chain of plain names, else None."""
    found = _innermost(tree)
    if isinstance(found, Tree) and found.data == "member_dot":
        head = _qualified(found.children[0])
        return None if head is None else f"{head}.{found.children[1]}"
    return _ident(found)


def _args(tree: Any) -> list[Any]:
    """A call's argument trees."""
    exprlist = tree.children[2] if len(tree.children) > 2 else None
    return list(exprlist.children) if isinstance(exprlist, Tree) else []


class _Parser(CELParser):
    """cel-python's parser with cel-go's optional selection, `a.?f` and `a[?k]` (the syntax
    kube-scheduler's own hint for a missing key proposes)."""

    PARSER: Lark | None = None

    def __init__(self) -> None:
        if _Parser.PARSER is None:
            grammar = (Path(celpy.__file__).parent / "cel.lark").read_text()
            member = (
                "member         : member_dot | member_dot_arg | member_index | member_object"
                " | primary"
            )
            if member not in grammar:
                raise RuntimeError("cel-python's grammar changed: optional selection not added")
            grammar = grammar.replace(
                member,
                member.replace("| primary", "| member_dot_opt | member_index_opt | primary")
                + '\nmember_dot_opt : member ".?" IDENT\nmember_index_opt : member "[?" expr "]"',
            )
            _Parser.PARSER = Lark(
                grammar, parser="lalr", start="expr", g_regex_flags=re.M,
                lexer_callbacks={"IDENT": self.ambiguous_literals}, propagate_positions=True,
                maybe_placeholders=False, priority="invert",
            )  # fmt: skip

    def parse(self, text: str) -> Any:
        assert _Parser.PARSER is not None
        self.text = text
        try:
            return _Parser.PARSER.parse(text)
        except (UnexpectedToken, UnexpectedCharacters) as error:
            raise CELParseError(
                error.get_context(text), *error.args, line=error.line, column=error.column
            ) from None


class _Runner(celpy.InterpretedRunner):
    def evaluate(self, context: Any) -> Any:
        return _Evaluator(ast=self.ast, activation=self.new_activation()).evaluate(context)


def _compile_error(error: Exception) -> str:
    """Why cel-python did not compile an expression, one line: where, as cel-go says it
    (`<input>:line:column`), and what."""
    line, column = getattr(error, "line", None), getattr(error, "column", None)
    if line is not None and column is not None:
        return f"ERROR: <input>:{line}:{column}: Syntax error"
    text = str(error.args[0]) if error.args else str(error)
    return _one_line(text.partition(" (in activation")[0])


#: What the API server says of a selector past its cost estimate's limit.
TOO_COMPLEX = celcheck.TOO_COMPLEX
_ENVIRONMENT = celpy.Environment(runner_class=_Runner)
_ENVIRONMENT.cel_parser = _Parser()
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
            f"CEL expression {expression!r} does not compile: {_compile_error(error)}"
        ) from None
    try:
        # cel-python does not check types; the API server's cel-go does, and refuses the object.
        celcheck.check(ast)
    except celcheck.CostError as error:
        raise SelectorError(
            f"CEL expression {expression!r}: {error} (the API server's estimate of its cost)"
        ) from None
    except celcheck.CheckError as error:
        raise SelectorError(f"CEL expression {expression!r} does not compile: {error}") from None
    by_identity = bool(_IDENTITY_RE.search(expression)) or _reads_identity(ast)
    selector = Selector(expression, program, by_identity)
    if len(_COMPILED) < 4096:
        _COMPILED[expression] = selector
    return selector
