"""The type check the API server runs on a CEL device selector before it stores a claim, class or
template: cel-go's checker over Kubernetes' DRA environment (k8s.io/dynamic-resource-allocation's
`cel` package on k8s.io/apiserver's base environment). cel-python parses but does not check
types, so without this a typo (`productName.contain('T4')`) compiles here and fails on every
device, where the API server refuses the object ("undeclared reference to 'contain'").

What it checks, as cel-go does: every identifier and function is declared (the device, the macro
variables, the standard library, Kubernetes' quantity, semver, regex, URL, IP, CIDR, format and
list libraries, cel-go's strings, sets, lists, two-variable comprehensions and optional types);
a call has an overload for its argument count and for the types known before evaluation
(`device.driver` is a string, `device.capacity[d][n]` a quantity, an attribute is `dyn`, a
literal its own type); list and map literals are homogeneous; the whole expression is a bool
(or dyn). `tests/oracle/test_oracle_cel.py` holds the verdicts equal to upstream's on generated
expressions. This is a purely computational module.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lark import Token, Tree

#: A CEL type: a name ("int", "kubernetes.Quantity", "dyn"), or ("list", elem), ("map", k, v),
#: ("optional", t).
Type = Any

DYN = "dyn"
BOOL, INT, UINT, DOUBLE, STRING, BYTES = "bool", "int", "uint", "double", "string", "bytes"
NULL, TYPE = "null_type", "type"
DURATION, TIMESTAMP = "google.protobuf.Duration", "google.protobuf.Timestamp"
QUANTITY, SEMVER = "kubernetes.Quantity", "kubernetes.Semver"
URL, IP, CIDR = "kubernetes.URL", "net.IP", "net.CIDR"
FORMAT = "kubernetes.NamedFormat"
DEVICE = "kubernetes.DRADevice"
NUMBERS = (INT, UINT, DOUBLE)


def list_of(elem: Type) -> Type:
    return ("list", elem)


def map_of(key: Type, value: Type) -> Type:
    return ("map", key, value)


def optional_of(value: Type) -> Type:
    return ("optional", value)


#: The fields of `device` (k8s.io/dynamic-resource-allocation/cel, with consumable capacity).
DEVICE_FIELDS: Mapping[str, Type] = {
    "driver": STRING,
    "attributes": map_of(STRING, map_of(STRING, DYN)),
    "capacity": map_of(STRING, map_of(STRING, QUANTITY)),
    "allowMultipleAllocations": BOOL,
}

#: Type names usable as values (`type(x) == int`).
TYPE_NAMES = frozenset({BOOL, INT, UINT, DOUBLE, STRING, BYTES, "list", "map", NULL, TYPE, DYN})


class CheckError(ValueError):
    """cel-go's checker refuses the expression; the message is cel-go's, with its position."""


@dataclass(frozen=True)
class Overload:
    """A function's signature: the receiver (None for a global call), the parameters, the
    result. "A" and "B" are type parameters; DYN takes anything."""

    receiver: Type | None
    params: tuple[Type, ...]
    result: Type


def _o(receiver: Type | None, params: Sequence[Type], result: Type) -> Overload:
    return Overload(receiver, tuple(params), result)


_A, _B = "A", "B"
_LIST_A = list_of(_A)


def _library() -> dict[str, list[Overload]]:
    """Every function of the environment, by name (macros are handled apart)."""
    out: dict[str, list[Overload]] = {}

    def add(name: str, *overloads: Overload) -> None:
        out.setdefault(name, []).extend(overloads)

    # The standard library.
    for kind in (STRING, BYTES, _LIST_A, map_of(_A, _B)):
        add("size", _o(None, [kind], INT), _o(kind, [], INT))
    for name in ("contains", "startsWith", "endsWith", "matches"):
        add(name, _o(STRING, [STRING], BOOL))
    add("matches", _o(None, [STRING, STRING], BOOL))
    add("int", *(_o(None, [t], INT) for t in (INT, UINT, DOUBLE, STRING, TIMESTAMP, DURATION)))
    add("uint", *(_o(None, [t], UINT) for t in (INT, UINT, DOUBLE, STRING)))
    add("double", *(_o(None, [t], DOUBLE) for t in (INT, UINT, DOUBLE, STRING)))
    add("string", *(_o(None, [t], STRING) for t in (INT, UINT, DOUBLE, STRING, BYTES, BOOL,
                                                       TIMESTAMP, DURATION, IP, CIDR)))  # fmt: skip
    add("bytes", _o(None, [BYTES], BYTES), _o(None, [STRING], BYTES))
    add("bool", _o(None, [BOOL], BOOL), _o(None, [STRING], BOOL))
    add("dyn", _o(None, [_A], DYN))
    add("type", _o(None, [_A], TYPE))
    add("duration", _o(None, [STRING], DURATION), _o(None, [DURATION], DURATION))
    add("timestamp", *(_o(None, [t], TIMESTAMP) for t in (STRING, INT, TIMESTAMP)))
    for name in ("getFullYear", "getMonth", "getDayOfYear", "getDayOfMonth", "getDate",
                 "getDayOfWeek"):  # fmt: skip
        add(name, _o(TIMESTAMP, [], INT), _o(TIMESTAMP, [STRING], INT))
    for name in ("getHours", "getMinutes", "getSeconds", "getMilliseconds"):
        add(name, _o(TIMESTAMP, [], INT), _o(TIMESTAMP, [STRING], INT), _o(DURATION, [], INT))
    # cel-go's strings extension, version 2.
    add("charAt", _o(STRING, [INT], STRING))
    for name in ("indexOf", "lastIndexOf"):
        add(name, _o(STRING, [STRING], INT), _o(STRING, [STRING, INT], INT))
    for name in ("lowerAscii", "upperAscii", "trim"):
        add(name, _o(STRING, [], STRING))
    add("replace", _o(STRING, [STRING, STRING], STRING), _o(STRING, [STRING, STRING, INT], STRING))
    add("split", _o(STRING, [STRING], list_of(STRING)), _o(STRING, [STRING, INT], list_of(STRING)))
    add("substring", _o(STRING, [INT], STRING), _o(STRING, [INT, INT], STRING))
    add("join", _o(list_of(STRING), [], STRING), _o(list_of(STRING), [STRING], STRING))
    add("strings.quote", _o(None, [STRING], STRING))
    # Kubernetes' lists library (version 0) and cel-go's lists extension (version 3).
    add("isSorted", _o(_LIST_A, [], BOOL))
    add("includes", _o(_LIST_A, [_A], BOOL))  # version 1 of Kubernetes' lists library (1.37)
    for name in ("sum", "min", "max"):
        add(name, _o(_LIST_A, [], _A))
    for name in ("indexOf", "lastIndexOf"):
        add(name, _o(_LIST_A, [_A], INT))
    add("slice", _o(_LIST_A, [INT, INT], _LIST_A))
    add("flatten", _o(list_of(DYN), [], list_of(DYN)), _o(list_of(DYN), [INT], list_of(DYN)))
    add("lists.range", _o(None, [INT], list_of(INT)))
    for name in ("distinct", "reverse", "sort"):
        add(name, _o(_LIST_A, [], _LIST_A))
    for name in ("first", "last"):
        add(name, _o(_LIST_A, [], optional_of(_A)))
    # cel-go's sets extension.
    for name in ("sets.contains", "sets.equivalent", "sets.intersects"):
        add(name, _o(None, [_LIST_A, _LIST_A], BOOL))
    # Kubernetes' regex library.
    add("find", _o(STRING, [STRING], STRING))
    add("findAll", _o(STRING, [STRING], list_of(STRING)),
        _o(STRING, [STRING, INT], list_of(STRING)))  # fmt: skip
    # Kubernetes' quantity library.
    add("quantity", _o(None, [STRING], QUANTITY))
    add("isQuantity", _o(None, [STRING], BOOL))
    add("sign", _o(None, [QUANTITY], INT))  # a global function, not a method
    add("isInteger", _o(QUANTITY, [], BOOL))
    add("asInteger", _o(QUANTITY, [], INT))
    add("asApproximateFloat", _o(QUANTITY, [], DOUBLE))
    for name in ("add", "sub"):
        add(name, _o(QUANTITY, [QUANTITY], QUANTITY), _o(QUANTITY, [INT], QUANTITY))
    # Kubernetes' semver library, version 1 (the optional normalize flag).
    add("semver", _o(None, [STRING], SEMVER), _o(None, [STRING, BOOL], SEMVER))
    add("isSemver", _o(None, [STRING], BOOL), _o(None, [STRING, BOOL], BOOL))
    for name in ("major", "minor", "patch"):
        add(name, _o(SEMVER, [], INT))
    for kind in (QUANTITY, SEMVER):
        add("isGreaterThan", _o(kind, [kind], BOOL))
        add("isLessThan", _o(kind, [kind], BOOL))
        add("compareTo", _o(kind, [kind], INT))
    # Kubernetes' URL, IP, CIDR and format libraries.
    add("url", _o(None, [STRING], URL))
    add("isURL", _o(None, [STRING], BOOL))
    for name in ("getScheme", "getHost", "getHostname", "getPort", "getEscapedPath"):
        add(name, _o(URL, [], STRING))
    add("getQuery", _o(URL, [], map_of(STRING, list_of(STRING))))
    add("ip", _o(None, [STRING], IP), _o(CIDR, [], IP))
    add("isIP", _o(None, [STRING], BOOL))
    add("ip.isCanonical", _o(None, [STRING], BOOL))
    add("family", _o(IP, [], INT))
    for name in ("isUnspecified", "isLoopback", "isLinkLocalMulticast", "isLinkLocalUnicast",
                 "isGlobalUnicast"):  # fmt: skip
        add(name, _o(IP, [], BOOL))
    add("cidr", _o(None, [STRING], CIDR))
    add("isCIDR", _o(None, [STRING], BOOL))
    add("containsIP", _o(CIDR, [IP], BOOL), _o(CIDR, [STRING], BOOL))
    add("containsCIDR", _o(CIDR, [CIDR], BOOL), _o(CIDR, [STRING], BOOL))
    add("masked", _o(CIDR, [], CIDR))
    add("prefixLength", _o(CIDR, [], INT))
    for name in ("dns1123Label", "dns1123Subdomain", "dns1035Label", "qualifiedName",
                 "dns1123LabelPrefix", "dns1123SubdomainPrefix", "dns1035LabelPrefix",
                 "labelValue", "uri", "uuid", "byte", "date", "datetime"):  # fmt: skip
        add(f"format.{name}", _o(None, [], FORMAT))
    add("format.named", _o(None, [STRING], optional_of(FORMAT)))
    add("validate", _o(FORMAT, [STRING], optional_of(list_of(STRING))))
    # Optional types.
    add("optional.of", _o(None, [_A], optional_of(_A)))
    add("optional.ofNonZeroValue", _o(None, [_A], optional_of(_A)))
    add("optional.none", _o(None, [], optional_of(DYN)))
    add("hasValue", _o(optional_of(_A), [], BOOL))
    add("value", _o(optional_of(_A), [], _A))
    add("or", _o(optional_of(_A), [optional_of(_A)], optional_of(_A)))
    add("orValue", _o(optional_of(_A), [_A], _A))
    return out


LIBRARY = _library()

#: Macros: name -> the argument counts it takes as a member call (cel-go expands these before
#: the check, so they are never "undeclared").
_MEMBER_MACROS = {
    "all": (2, 3), "exists": (2, 3), "exists_one": (2, 3), "existsOne": (3,),
    "map": (2, 3), "filter": (2,), "transformList": (3, 4), "transformMap": (3, 4),
    "transformMapEntry": (3, 4), "sortBy": (2,), "optMap": (2,), "optFlatMap": (2,),
}  # fmt: skip
#: Their names.
MEMBER_MACROS = frozenset(_MEMBER_MACROS)

#: Operators: the overloads cel-go declares (CrossTypeNumericComparisons on).
_ORDERED = (INT, UINT, DOUBLE, STRING, BYTES, BOOL, TIMESTAMP, DURATION)
_RELATIONS = [(a, a) for a in _ORDERED] + [
    (a, b) for a in NUMBERS for b in NUMBERS if a != b
]  # fmt: skip
_ARITHMETIC: Mapping[str, list[tuple[Type, Type, Type]]] = {
    "+": [(t, t, t) for t in (INT, UINT, DOUBLE, STRING, BYTES, DURATION)]
    + [(_LIST_A, _LIST_A, _LIST_A), (TIMESTAMP, DURATION, TIMESTAMP),
       (DURATION, TIMESTAMP, TIMESTAMP)],
    "-": [(t, t, t) for t in (INT, UINT, DOUBLE, DURATION)]
    + [(TIMESTAMP, TIMESTAMP, DURATION), (TIMESTAMP, DURATION, TIMESTAMP)],
    "*": [(t, t, t) for t in NUMBERS],
    "/": [(t, t, t) for t in NUMBERS],
    "%": [(t, t, t) for t in (INT, UINT)],
}  # fmt: skip


def name_of(kind: Type) -> str:
    """A type as cel-go prints it."""
    if isinstance(kind, tuple):
        return f"{kind[0]}({', '.join(name_of(k) for k in kind[1:])})"
    return str(kind)


class _Unifier:
    """Type parameters bound while one overload is tried."""

    def __init__(self) -> None:
        self.bound: dict[str, Type] = {}

    def accepts(self, param: Type, actual: Type) -> bool:
        if param in (_A, _B):
            found = self.bound.get(param)
            if found is None or found == DYN:
                self.bound[param] = actual
                return True
            return self.accepts(found, actual) or actual == DYN
        if param == DYN or actual == DYN:
            return True
        if isinstance(param, tuple) and isinstance(actual, tuple):
            return (
                param[0] == actual[0]
                and len(param) == len(actual)
                and all(self.accepts(p, a) for p, a in zip(param[1:], actual[1:], strict=True))
            )
        return bool(param == actual)

    def result(self, kind: Type) -> Type:
        if kind in (_A, _B):
            return self.bound.get(kind, DYN)
        if isinstance(kind, tuple):
            return (kind[0], *(self.result(k) for k in kind[1:]))
        return kind


def _same(a: Type, b: Type) -> bool:
    """Whether two types unify (dyn with anything), as `_==_(A, A)` needs."""
    return _Unifier().accepts(a, b)


def _joined(a: Type, b: Type) -> Type:
    """The common type of two that unify (dyn where they differ only by dyn)."""
    if a == b:
        return a
    if a == DYN or b == DYN:
        return DYN
    if isinstance(a, tuple) and isinstance(b, tuple):
        return (a[0], *(_joined(x, y) for x, y in zip(a[1:], b[1:], strict=True)))
    return DYN


@dataclass(frozen=True)
class _Call:
    """Where a call is, as cel-go places it: at its opening parenthesis."""

    name: Any


def _unwrap(tree: Any) -> Any:
    """The innermost node of a chain of single-child wrappers (expr -> ... -> primary)."""
    while (
        isinstance(tree, Tree)
        and len(tree.children) == 1
        and tree.data in ("expr", "conditionalor", "conditionaland", "relation", "addition",
                          "multiplication", "unary", "member", "primary", "paren_expr")
    ):  # fmt: skip
        tree = tree.children[0]
    return tree


def _position(tree: Any) -> str:
    """`<input>:line:column` of the first token under `tree`, as cel-go prints positions."""
    if isinstance(tree, _Call):
        name = tree.name
        if name.line is None or name.column is None:
            return ""
        return f"<input>:{name.line}:{name.column + len(str(name))}"
    if isinstance(tree, Token):
        return f"<input>:{tree.line}:{tree.column}" if tree.line is not None else ""
    if isinstance(tree, Tree):
        for child in tree.children:
            found = _position(child)
            if found:
                return found
    return ""


class CostError(CheckError):
    """The API server estimates the expression's cost past its limit and refuses it."""


#: Functions whose cost cel-go estimates by the length of a string (those that read all of
#: it): inside a loop over a value of unknown size (an attribute, dyn) the estimate passes the
#: API server's limit (startsWith, endsWith, charAt and numeric conversions stay within it).
_STRING_COST = frozenset({
    "contains", "matches", "find", "findAll", "indexOf", "lastIndexOf", "replace", "split",
    "lowerAscii", "upperAscii", "trim", "substring", "join", "string", "bytes", "semver",
    "isSemver", "quantity", "isQuantity", "url", "isURL", "ip", "isIP", "ip.isCanonical", "cidr",
    "isCIDR", "validate", "strings.quote",
})  # fmt: skip
TOO_COMPLEX = "too complex, exceeds cost limit"


class _Checker:
    def __init__(self) -> None:
        self.scopes: list[dict[str, Type]] = [{"device": DEVICE}]
        #: Loops over a value of unknown size (dyn) around the node being checked.
        self.unbounded_loops = 0
        #: cel.bind variables bound to a value of unknown size (a function's result).
        self.unsized: set[str] = set()
        #: Past the API server's cost limit: refused only once the whole tree type checks, as
        #: the server estimates the cost of what cel-go has checked (a type error is named first).
        self.too_complex = False

    def fail(self, where: Any, message: str) -> CheckError:
        position = _position(where)
        return CheckError(f"ERROR: {position}: {message}" if position else f"ERROR: {message}")

    def lookup(self, name: str) -> Type | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if name in TYPE_NAMES:
            return TYPE
        return None

    def check(self, tree: Any) -> Type:
        tree = _unwrap(tree)
        if isinstance(tree, Token):
            return self.literal(tree)
        handler = getattr(self, f"node_{tree.data}", None)
        if handler is None:
            raise self.fail(tree, f"unsupported expression {tree.data}")
        result: Type = handler(tree)
        return result

    # Literals and names.

    def literal(self, token: Token) -> Type:
        kinds = {"INT_LIT": INT, "UINT_LIT": UINT, "FLOAT_LIT": DOUBLE, "STRING_LIT": STRING,
                 "MLSTRING_LIT": STRING, "BYTES_LIT": BYTES, "BOOL_LIT": BOOL,
                 "NULL_LIT": NULL}  # fmt: skip
        return kinds.get(token.type, DYN)

    def node_literal(self, tree: Tree[Any]) -> Type:
        token = tree.children[0]
        return self.literal(token) if isinstance(token, Token) else DYN

    def node_ident(self, tree: Tree[Any]) -> Type:
        name = str(tree.children[0])
        found = self.lookup(name)
        if found is None:
            raise self.fail(tree, f"undeclared reference to '{name}' (in container '')")
        return found

    def node_dot_ident(self, tree: Tree[Any]) -> Type:
        return self.node_ident(tree)

    def node_list_lit(self, tree: Tree[Any]) -> Type:
        items = tree.children[0].children if tree.children and tree.children[0] else []
        return list_of(self.homogeneous(items))

    def node_map_lit(self, tree: Tree[Any]) -> Type:
        inits = tree.children[0].children if tree.children and tree.children[0] else []
        keys, values = inits[0::2], inits[1::2]
        key = self.homogeneous(keys)
        if key not in (INT, UINT, BOOL, STRING, DYN, "A"):
            raise self.fail(tree, f"unsupported map key type: {name_of(key)}")
        return map_of(key, self.homogeneous(values))

    def homogeneous(self, items: Sequence[Any]) -> Type:
        """The element type of a list or map literal. cel-go's HomogeneousAggregateLiterals wants
        every element of one exact type (`dyn` beside `int` is refused: `[attr, 0]`), where an
        empty literal or `optional.none()`, whose types are free, fits any."""
        first: Type = None
        for item in items:
            kind = self.check(item)
            if _is_empty_literal(item):
                continue
            if first is None:
                first = kind
            elif kind != first:
                raise self.fail(
                    item, f"expected type '{name_of(first)}' but found '{name_of(kind)}'"
                )
        return DYN if first is None else first

    def node_member_object(self, tree: Tree[Any]) -> Type:
        raise self.fail(tree, "undeclared reference to message type (in container '')")

    def node_typed(self, tree: Tree[Any]) -> Type:
        return tree.kind if isinstance(tree, _Typed) else DYN

    # Operators.

    def node_expr(self, tree: Tree[Any]) -> Type:
        condition, left, right = tree.children
        kind, a, b = self.check(condition), self.check(left), self.check(right)
        if not (_same(BOOL, kind) and _same(a, b)):
            raise self.fail(
                tree,
                f"found no matching overload for '_?_:_' applied to "
                f"'({name_of(kind)}, {name_of(a)}, {name_of(b)})'",
            )
        return _joined(a, b)

    def logic(self, tree: Tree[Any]) -> Type:
        # cel-go asserts each operand of && and || is bool (no overload lookup), at the operand.
        for operand in tree.children:
            kind = self.check(operand)
            if not _same(BOOL, kind):
                raise self.fail(operand, f"expected type 'bool' but found '{name_of(kind)}'")
        return BOOL

    def node_conditionalor(self, tree: Tree[Any]) -> Type:
        return self.logic(tree)

    def node_conditionaland(self, tree: Tree[Any]) -> Type:
        return self.logic(tree)

    def binary(self, tree: Tree[Any]) -> tuple[str, Type, Type]:
        """(operator, left type, right type) of `relation`, `addition`, `multiplication`."""
        operation, right = tree.children
        (left,) = operation.children
        return operation.data.rpartition("_")[2], self.check(left), self.check(right)

    def node_relation(self, tree: Tree[Any]) -> Type:
        operator, a, b = self.binary(tree)
        symbol = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
                  "in": "in"}[operator]  # fmt: skip
        if operator == "ne" and a == b and a in (QUANTITY, SEMVER, URL, IP, CIDR):
            # cel-go's estimate has no bound for `!=` of two Kubernetes library values.
            self.too_complex = True
        fixed = (INT, UINT, DOUBLE, BOOL)
        both = _is_optional(a) and _is_optional(b)
        if operator in ("eq", "ne") and both and a[1] not in fixed and b[1] not in fixed:
            # Equality costs the smaller operand's size; cel-go knows the size of an optional
            # number or bool only (a real API server refuses `a.?f == optional.none()` and
            # `a.?f == optional.of("gpu")` as too complex, accepts `a.?f == optional.of(0)`).
            self.too_complex = True
        if operator in ("eq", "ne"):
            ok = _same(a, b)
        elif operator == "in":
            ok = b == DYN or (isinstance(b, tuple) and b[0] in ("list", "map") and _same(a, b[1]))
        else:
            ok = any(_same(x, a) and _same(y, b) for x, y in _RELATIONS)
        if not ok:
            name = "@in" if symbol == "in" else f"_{symbol}_"
            raise self.fail(
                tree,
                f"found no matching overload for '{name}' applied to "
                f"'({name_of(a)}, {name_of(b)})'",
            )
        return BOOL

    def arithmetic(self, tree: Tree[Any], symbols: Mapping[str, str]) -> Type:
        operator, a, b = self.binary(tree)
        symbol = symbols[operator]
        for left, right, result in _ARITHMETIC[symbol]:
            unifier = _Unifier()
            if unifier.accepts(left, a) and unifier.accepts(right, b):
                return DYN if DYN in (a, b) else unifier.result(result)
        raise self.fail(
            tree,
            f"found no matching overload for '_{symbol}_' applied to "
            f"'({name_of(a)}, {name_of(b)})'",
        )

    def node_addition(self, tree: Tree[Any]) -> Type:
        return self.arithmetic(tree, {"add": "+", "sub": "-"})

    def node_multiplication(self, tree: Tree[Any]) -> Type:
        return self.arithmetic(tree, {"mul": "*", "div": "/", "mod": "%"})

    def node_unary(self, tree: Tree[Any]) -> Type:
        operation, operand = tree.children
        kind = self.check(operand)
        if operation.data == "unary_not":
            ok, name = _same(BOOL, kind), "!_"
        else:
            ok, name = kind in (INT, DOUBLE, DURATION, DYN), "-_"
        if not ok:
            raise self.fail(
                tree, f"found no matching overload for '{name}' applied to '({name_of(kind)})'"
            )
        return kind

    # Member access and calls.

    def node_member_dot(self, tree: Tree[Any]) -> Type:
        target, field = tree.children
        return self.select(field, self.check(target), str(field))

    def node_member_dot_opt(self, tree: Tree[Any]) -> Type:
        """`a.?f`: an optional of what `a.f` would be."""
        target, field = tree.children
        found = self.select(field, self.check(target), str(field))
        return found if _is_optional(found) else optional_of(found)

    def node_member_index_opt(self, tree: Tree[Any]) -> Type:
        found = self.node_member_index(tree)
        return found if _is_optional(found) else optional_of(found)

    def select(self, where: Any, kind: Type, field: str) -> Type:
        if _is_optional(kind):
            # A field of an optional value is optional (cel-go's optional chaining).
            found = self.select(where, kind[1], field)
            return found if _is_optional(found) else optional_of(found)
        if kind == DYN:
            return DYN
        if kind == DEVICE:
            found = DEVICE_FIELDS.get(field)
            if found is None:
                raise self.fail(where, f"undefined field '{field}'")
            return found
        if isinstance(kind, tuple) and kind[0] == "map" and _same(kind[1], STRING):
            return kind[2]
        raise self.fail(where, f"type '{name_of(kind)}' does not support field selection")

    def node_member_index(self, tree: Tree[Any]) -> Type:
        target, index = tree.children
        kind, key = self.check(target), self.check(index)
        if _is_optional(kind):
            inner = Tree(tree.data, [_Typed(kind[1]), index])
            found = self.node_member_index(inner)
            return found if _is_optional(found) else optional_of(found)
        if kind == DYN:
            return DYN
        if isinstance(kind, tuple) and kind[0] == "list" and key in (INT, UINT, DYN):
            return kind[1]
        if isinstance(kind, tuple) and kind[0] == "map" and _same(kind[1], key):
            return kind[2]
        raise self.fail(
            tree,
            f"found no matching overload for '_[_]' applied to '({name_of(kind)}, {name_of(key)})'",
        )

    def qualified(self, tree: Any) -> str | None:
        """`a.b.c` as text when the target is a chain of plain names, else None."""
        tree = _unwrap(tree)
        if isinstance(tree, Tree) and tree.data == "ident":
            return str(tree.children[0])
        if isinstance(tree, Tree) and tree.data == "member_dot":
            head = self.qualified(tree.children[0])
            return None if head is None else f"{head}.{tree.children[1]}"
        return None

    def node_ident_arg(self, tree: Tree[Any]) -> Type:
        name, args = str(tree.children[0]), _args(tree.children[1])
        if name == "has":
            return self.has(tree, args)
        if name == "dyn" and len(args) == 1:
            self.check(args[0])
            return DYN
        return self.call(_Call(tree.children[0]), name, None, args)

    def node_dot_ident_arg(self, tree: Tree[Any]) -> Type:
        return self.node_ident_arg(tree)

    def has(self, tree: Tree[Any], args: Sequence[Any]) -> Type:
        inner = _unwrap(args[0]) if len(args) == 1 else None
        if not (isinstance(inner, Tree) and inner.data == "member_dot"):
            raise self.fail(tree, "invalid argument to has() macro")
        self.check(inner)
        return BOOL

    def node_member_dot_arg(self, tree: Tree[Any]) -> Type:
        target, method = tree.children[0], str(tree.children[1])
        args = _args(tree.children[2]) if len(tree.children) > 2 else []
        if method == "bind" and len(args) == 3 and self.qualified(target) == "cel":
            return self.bind(args)
        qualified = self.qualified(target)
        if qualified is not None and self.lookup(qualified.partition(".")[0]) is None:
            # A namespaced global function: `sets.contains(a, b)`, `optional.of(x)`.
            return self.call(tree, f"{qualified}.{method}", None, args)
        if method in _MEMBER_MACROS and len(args) in _MEMBER_MACROS[method]:
            return self.macro(tree, method, self.check(target), args)
        return self.call(
            _Call(tree.children[1]), method, self.check(target), args,
            literal=_is_literal(target), empty=_is_empty_literal(target),
        )  # fmt: skip

    def sized(self, tree: Any) -> bool:
        """Whether cel-go's estimate knows the size of what `tree` gives: a literal, a device
        field, a variable (not one bound to a function's result), a macro over one of those;
        not a function's result."""
        found = _unwrap(tree)
        if isinstance(found, Token) or found.data in ("list_lit", "map_lit", "literal"):
            return True
        if found.data == "ident":
            return str(found.children[0]) not in self.unsized
        if found.data in ("member_dot", "member_index", "paren_expr"):
            return self.sized(found.children[0])
        if found.data == "member_dot_arg":
            return str(found.children[1]) in _MEMBER_MACROS and self.sized(found.children[0])
        return False

    def bind(self, args: Sequence[Any]) -> Type:
        """`cel.bind(name, value, body)` (cel-go's bindings extension, in Kubernetes' DRA
        environment since 1.31): the body's type, with `name` the value's."""
        variable = _unwrap(args[0])
        if not (isinstance(variable, Tree) and variable.data == "ident"):
            raise self.fail(args[0], "cel.bind() variable names must be simple identifiers")
        name = str(variable.children[0])
        self.scopes.append({name: self.check(args[1])})
        unsized = not self.sized(args[1])
        self.unsized |= {name} if unsized else set()
        try:
            return self.check(args[2])
        finally:
            self.scopes.pop()
            if unsized:
                self.unsized.discard(name)

    def macro(self, tree: Tree[Any], name: str, target: Type, args: Sequence[Any]) -> Type:
        variables = [_unwrap(a) for a in args[:-1]]
        if name in ("transformList", "transformMap", "transformMapEntry"):
            variables = variables[:2]
        elif name not in ("all", "exists", "exists_one", "existsOne") or len(args) == 2:
            variables = variables[:1]
        names = []
        for variable in variables:
            if not (isinstance(variable, Tree) and variable.data == "ident"):
                raise self.fail(tree, f"{name}() variable name must be a simple identifier")
            names.append(str(variable.children[0]))
        if len(names) == 2 and names[0] == names[1]:
            raise self.fail(args[1], f"duplicate variable name: {names[0]}")
        element: Type = DYN
        key: Type = DYN
        if isinstance(target, tuple) and target[0] == "list":
            element, key = target[1], INT
        elif isinstance(target, tuple) and target[0] == "map":
            element, key = target[1], target[1]
            if len(names) == 2:
                element = target[2]
        elif target != DYN and not (isinstance(target, tuple) and target[0] == "optional"):
            raise self.fail(
                tree, f"expression of type '{name_of(target)}' cannot be range of a comprehension"
            )
        if isinstance(target, tuple) and target[0] == "optional":
            element = target[1]
        scope = dict(zip(names, [key, element] if len(names) == 2 else [element], strict=False))
        # A loop over what cel-go knows no size of: dyn, or a function's result (`split`,
        # `findAll`): its size is unknown where a literal's or a device field's is declared.
        unbounded = target == DYN or not self.sized(tree.children[0])
        if unbounded and self.unbounded_loops:
            self.too_complex = True
        self.scopes.append(scope)
        self.unbounded_loops += unbounded
        try:
            results = [self.check(a) for a in args[len(variables) :]]
        finally:
            self.scopes.pop()
            self.unbounded_loops -= unbounded
        body = results[-1]
        if name in ("all", "exists", "exists_one", "existsOne", "filter") and not _same(
            BOOL, results[0]
        ):
            raise self.fail(tree, f"found no matching overload for '{name}'")
        if name in ("all", "exists", "exists_one", "existsOne"):
            return BOOL
        if name == "filter" or name == "sortBy":
            return target
        if name in ("map", "transformList"):
            return list_of(body)
        if name in ("transformMap", "transformMapEntry"):
            return map_of(key, body) if name == "transformMap" else map_of(DYN, DYN)
        return optional_of(body) if name == "optMap" else body

    def call(
        self,
        tree: Any,
        name: str,
        receiver: Type | None,
        args: Sequence[Any],
        *,
        literal: bool = True,
        empty: bool = False,
    ) -> Type:
        """A function call; `literal`: the receiver (if any) is a literal; `empty`: an empty
        one."""
        overloads = LIBRARY.get(name)
        if overloads is None:
            raise self.fail(tree, f"undeclared reference to '{name}' (in container '')")
        # cel-go's estimate: type() has no bound, a string function in a loop over an
        # unbounded value costs the string's length times the loop's.
        kinds = [self.check(a) for a in args]
        sized = literal and all(_is_literal(a) for a in args)
        if name == "type" or (name in _STRING_COST and self.unbounded_loops and not sized):
            self.too_complex = True
        ends = [_int_literal(a) for a in args] if name == "slice" else []
        if len(ends) == 2 and None not in ends and ends[1] < ends[0]:  # type: ignore[operator]
            self.too_complex = True  # the estimate's size of the result goes below zero
        if (name == "join" and not empty) or (
            name in ("isSorted", "min", "max") and receiver in (list_of(STRING), list_of(BYTES))
        ):
            # Kubernetes' estimate of these over strings has no bound (a real API server refuses
            # `["a", "b"].isSorted()` and `["a"].join()` as too complex).
            self.too_complex = True
        constant = _constant_problem(name, args)
        if constant is not None:
            raise self.fail(args[-1] if name in _REGEX_FUNCTIONS else args[0], constant)
        for overload in overloads:
            if (overload.receiver is None) != (receiver is None):
                continue
            if len(overload.params) != len(kinds):
                continue
            unifier = _Unifier()
            if receiver is not None and not unifier.accepts(overload.receiver, receiver):
                continue
            if all(unifier.accepts(p, k) for p, k in zip(overload.params, kinds, strict=True)):
                return unifier.result(overload.result)
        shown = ", ".join(name_of(k) for k in kinds)
        applied = f"({shown})" if receiver is None else f"{name_of(receiver)}.({shown})"
        raise self.fail(tree, f"found no matching overload for '{name}' applied to '{applied}'")


#: Kubernetes' AST validators check constant arguments when the expression is compiled: a
#: regular expression, a duration, a timestamp written as a literal must be valid.
_REGEX_FUNCTIONS = frozenset({"matches", "find", "findAll"})
_DURATION = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$|^[-+]?0$")
#: RE2 has no look-around and no back-references.
_NOT_RE2 = re.compile(r"\(\?<?[=!]|\\[1-9]")


def _constant_problem(name: str, args: Sequence[Any]) -> str | None:
    """cel-go's message for a literal argument its validators refuse, or None."""
    if not args:
        return None
    text = _string_literal(args[-1] if name in _REGEX_FUNCTIONS else args[0])
    if text is None:
        return None
    if name in _REGEX_FUNCTIONS:
        try:
            re.compile(text)
        except re.error:
            return f"invalid {name} argument"
        return f"invalid {name} argument" if _NOT_RE2.search(text) else None
    if name == "duration" and not _DURATION.match(text):
        return "invalid duration argument"
    if name == "timestamp":
        try:
            datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return "invalid timestamp argument"
        if "T" not in text:
            return "invalid timestamp argument"
    return None


def _string_literal(tree: Any) -> str | None:
    """The value of a string literal argument; None for anything else."""
    token = _unwrap(tree)
    if isinstance(token, Tree) and token.data == "literal":
        token = token.children[0]
    if not isinstance(token, Token) or token.type not in ("STRING_LIT", "MLSTRING_LIT"):
        return None
    try:
        value = ast.literal_eval(str(token))
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def _int_literal(tree: Any) -> int | None:
    found = _unwrap(tree)
    if isinstance(found, Tree) and found.data == "literal":
        found = found.children[0]
    if isinstance(found, Token) and found.type == "INT_LIT":
        return int(str(found), 0)
    return None


def _is_optional(kind: Type) -> bool:
    return isinstance(kind, tuple) and kind[0] == "optional"


class _Typed(Tree[Any]):
    """A node standing for an already checked expression of a known type."""

    def __init__(self, kind: Type) -> None:
        super().__init__("typed", [])
        self.kind = kind


def _is_empty_literal(tree: Any) -> bool:
    """`[]`, `{}` or `optional.none()`: a literal whose type cel-go leaves free."""
    found = _unwrap(tree)
    if isinstance(found, Tree) and found.data in ("list_lit", "map_lit"):
        return not found.children or found.children[0] is None
    if isinstance(found, Tree) and found.data == "member_dot_arg":
        target = _unwrap(found.children[0])
        named = isinstance(target, Tree) and target.data == "ident"
        return named and f"{target.children[0]}.{found.children[1]}" == "optional.none"
    return False


def _is_literal(tree: Any) -> bool:
    """A literal, whose size cel-go's estimate knows."""
    found = _unwrap(tree)
    return isinstance(found, Token) or (isinstance(found, Tree) and found.data == "literal")


def _args(exprlist: Any) -> list[Any]:
    return list(exprlist.children) if isinstance(exprlist, Tree) else []


def check(tree: Any) -> Type:
    """The type of a parsed selector (celpy's tree); CheckError where cel-go's checker refuses
    it, or where its type is not bool (or dyn), as the API server refuses such a selector."""
    checker = _Checker()
    kind = checker.check(tree)
    if kind not in (BOOL, DYN):
        raise CheckError(f"must evaluate to bool or the unknown type, not {name_of(kind)}")
    if checker.too_complex:
        raise CostError(TOO_COMPLEX)
    return kind
