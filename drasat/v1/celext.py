"""The parts of Kubernetes' CEL environment that cel-python lacks, as functions on cel-python's
values: cel-go's strings (version 2), lists (version 3) and sets extensions, optional values,
and Kubernetes' regex, lists, IP, CIDR and URL libraries (k8s.io/apiserver/pkg/cel/library),
each answering and failing as upstream does (its error words in `LibraryError`); and the
format library (`format.dns1123Label().validate(s)`).

`drasat.v1.cel` registers them (equality and ordering, which are Kubernetes' own there, are
passed in); `drasat.v1.celcheck` declares the same names, so a selector the API server accepts
is evaluated, not refused. This is a purely computational module.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import itertools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote
from urllib.parse import quote as quote_url

from celpy import celtypes

NO_SUCH_OVERLOAD = "no such overload"

Equal = Callable[[Any, Any], bool]
Compare = Callable[[Any, Any], int]


class LibraryError(Exception):
    """A library function's runtime error, in upstream's words."""


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise LibraryError(NO_SUCH_OVERLOAD)
    return str(value)


def _int(value: Any) -> int:
    if not isinstance(value, celtypes.IntType) or isinstance(value, celtypes.BoolType):
        raise LibraryError(NO_SUCH_OVERLOAD)
    return int(value)


def _list(value: Any) -> celtypes.ListType:
    if not isinstance(value, celtypes.ListType):
        raise LibraryError(NO_SUCH_OVERLOAD)
    return value


# -- cel-go's strings extension, version 2 ---------------------------------------------------------


def _in_range(index: int, text: str) -> None:
    if index < 0 or index > len(text):
        raise LibraryError(f"index out of range: {index}")


def char_at(text: Any, index: Any) -> celtypes.StringType:
    found, at = _string(text), _int(index)
    _in_range(at, found)
    return celtypes.StringType(found[at : at + 1])


def _offset(text: str, sub: str, offset: Any) -> int | None:
    """cel-go's start of a search: an error below 0; the empty string found at the offset
    (clamped to the end); None (not found) at or past the end."""
    at = _int(offset)
    if at < 0:
        raise LibraryError(f"index out of range: {at}")
    if not sub:
        return min(at, len(text))
    return None if at >= len(text) else at


def index_of(text: Any, sub: Any, offset: Any = None) -> celtypes.IntType:
    found, part = _string(text), _string(sub)
    start = _offset(found, part, celtypes.IntType(0) if offset is None else offset)
    if start is None or not part:
        return celtypes.IntType(-1 if start is None else start)
    return celtypes.IntType(found.find(part, start))


def last_index_of(text: Any, sub: Any, offset: Any = None) -> celtypes.IntType:
    found, part = _string(text), _string(sub)
    if offset is None:
        return celtypes.IntType(found.rfind(part))
    end = _offset(found, part, offset)
    if end is None or not part:
        return celtypes.IntType(-1 if end is None else end)
    return celtypes.IntType(found.rfind(part, 0, end + len(part)))


def substring(text: Any, start: Any, end: Any = None) -> celtypes.StringType:
    found, first = _string(text), _int(start)
    last = len(found) if end is None else _int(end)
    if first > last and end is not None:
        raise LibraryError(f"invalid substring range. start: {first}, end: {last}")
    _in_range(first, found)
    _in_range(last, found)
    return celtypes.StringType(found[first:last])


def split(text: Any, separator: Any, limit: Any = None) -> celtypes.ListType:
    """Go's strings.SplitN: a limit of 0 is no pieces, a negative one all of them; an empty
    separator splits between characters."""
    found, sep = _string(text), _string(separator)
    most = -1 if limit is None else _int(limit)
    if most == 0:
        return celtypes.ListType([])
    if sep:
        pieces = found.split(sep, most - 1 if most > 0 else -1)
    else:
        pieces = list(found)
        if 0 < most < len(pieces):
            pieces = [*pieces[: most - 1], "".join(pieces[most - 1 :])]
    return celtypes.ListType([celtypes.StringType(p) for p in pieces])


def replace(text: Any, old: Any, new: Any, limit: Any = None) -> celtypes.StringType:
    found = _string(text)
    most = -1 if limit is None else _int(limit)
    return celtypes.StringType(found.replace(_string(old), _string(new), most))


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def lower_ascii(text: Any) -> celtypes.StringType:
    return celtypes.StringType(_string(text).translate(_ASCII_LOWER))


def upper_ascii(text: Any) -> celtypes.StringType:
    return celtypes.StringType(_string(text).translate(_ASCII_UPPER))


def trim(text: Any) -> celtypes.StringType:
    return celtypes.StringType(_string(text).strip())


def join(items: Any, separator: Any = None) -> celtypes.StringType:
    sep = "" if separator is None else _string(separator)
    return celtypes.StringType(sep.join(_string(item) for item in _list(items)))


_QUOTED = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
           "\v": "\\v", "\\": "\\\\", '"': '\\"'}  # fmt: skip


def quote(text: Any) -> celtypes.StringType:
    """strings.quote: the text as a CEL string literal."""
    return celtypes.StringType('"' + "".join(_QUOTED.get(c, c) for c in _string(text)) + '"')


# -- Kubernetes' regex library -----------------------------------------------------------------


def _regex(pattern: Any) -> re.Pattern[str]:
    try:
        return re.compile(_string(pattern))
    except re.error as error:
        raise LibraryError(f"Illegal regex: error parsing regexp: {error}") from None


def find(text: Any, pattern: Any) -> celtypes.StringType:
    found = _regex(pattern).search(_string(text))
    return celtypes.StringType(found.group(0) if found else "")


def find_all(text: Any, pattern: Any, limit: Any = None) -> celtypes.ListType:
    most = -1 if limit is None else _int(limit)
    matches = [m.group(0) for m in _regex(pattern).finditer(_string(text))]
    matches = matches if most < 0 else matches[:most]
    return celtypes.ListType([celtypes.StringType(m) for m in matches])


# -- optional values (cel-go's OptionalTypes) ----------------------------------------------------


@dataclass(frozen=True, eq=False)
class OptionalValue:
    """`optional.of(x)` (present) or `optional.none()`."""

    value: Any = None
    present: bool = False

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OptionalValue) or self.present != other.present:
            return False
        return not self.present or bool(self.value == other.value)

    def __hash__(self) -> int:
        return hash(self.present)


NONE = OptionalValue()


def _optional(value: Any) -> OptionalValue:
    if not isinstance(value, OptionalValue):
        raise LibraryError(NO_SUCH_OVERLOAD)
    return value


def optional_of(value: Any) -> OptionalValue:
    return OptionalValue(value, True)


def optional_none() -> OptionalValue:
    return NONE


def _is_zero(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, (celtypes.ListType, celtypes.MapType, str, bytes)):
        return len(value) == 0
    if isinstance(value, (int, float)):
        return bool(value == 0)
    return False


def optional_of_non_zero(value: Any) -> OptionalValue:
    return NONE if _is_zero(value) else OptionalValue(value, True)


def has_value(optional: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_optional(optional).present)


def value(optional: Any) -> Any:
    found = _optional(optional)
    if not found.present:
        raise LibraryError("optional.none() dereference")
    return found.value


def or_optional(optional: Any, other: Any) -> OptionalValue:
    found = _optional(optional)
    return found if found.present else _optional(other)


def or_value(optional: Any, default: Any) -> Any:
    found = _optional(optional)
    return found.value if found.present else default


# -- Kubernetes' lists library and cel-go's lists extension (version 3) ----------------------------


def is_sorted(items: Any, compare: Compare) -> celtypes.BoolType:
    found = list(_list(items))
    return celtypes.BoolType(all(compare(a, b) <= 0 for a, b in itertools.pairwise(found)))


def total(items: Any, add: Callable[[Any, Any], Any], zero: Any) -> Any:
    """sum(): the list's elements added (the list's element type's zero for an empty one)."""
    found = list(_list(items))
    result = found[0] if found else zero
    for item in found[1:]:
        result = add(result, item)
    return result


def extreme(items: Any, compare: Compare, name: str) -> Any:
    found = list(_list(items))
    if not found:
        raise LibraryError(f"{name} called on empty list")
    result = found[0]
    prefer = 1 if name == "min" else -1
    for item in found[1:]:
        if compare(result, item) == prefer:
            result = item
    return result


def list_index_of(items: Any, item: Any, equal: Equal, last: bool = False) -> celtypes.IntType:
    found = list(_list(items))
    order = range(len(found) - 1, -1, -1) if last else range(len(found))
    for at in order:
        if equal(found[at], item):
            return celtypes.IntType(at)
    return celtypes.IntType(-1)


def includes(items: Any, item: Any, equal: Equal) -> celtypes.BoolType:
    return celtypes.BoolType(int(list_index_of(items, item, equal)) >= 0)


def slice_of(items: Any, start: Any, end: Any) -> celtypes.ListType:
    found, first, last = _list(items), _int(start), _int(end)
    where = f"cannot slice({first}, {last})"
    if first < 0 or last < 0:
        raise LibraryError(f"{where}, negative indexes not supported")
    if first > last:
        raise LibraryError(f"{where}, start index must be less than or equal to end index")
    if last > len(found):
        raise LibraryError(f"{where}, list is length {len(found)}")
    return celtypes.ListType(list(found)[first:last])


def flatten(items: Any, depth: Any = None) -> celtypes.ListType:
    levels = 1 if depth is None else _int(depth)
    if levels < 0:
        raise LibraryError("level must be non-negative")
    return celtypes.ListType(_flattened(_list(items), levels))


def _flattened(items: Iterable[Any], levels: int) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if isinstance(item, celtypes.ListType) and levels > 0:
            out.extend(_flattened(item, levels - 1))
        else:
            out.append(item)
    return out


def lists_range(count: Any) -> celtypes.ListType:
    size = _int(count)
    if size < 0:
        raise LibraryError(f"lists.range: size must be non-negative, got {size}")
    return celtypes.ListType([celtypes.IntType(i) for i in range(size)])


def distinct(items: Any, equal: Equal) -> celtypes.ListType:
    out: list[Any] = []
    for item in _list(items):
        if not any(equal(item, kept) for kept in out):
            out.append(item)
    return celtypes.ListType(out)


def reverse(items: Any) -> celtypes.ListType:
    return celtypes.ListType(list(_list(items))[::-1])


def sort(items: Any, compare: Compare) -> celtypes.ListType:
    return celtypes.ListType(sorted(_list(items), key=functools.cmp_to_key(compare)))


def first(items: Any) -> OptionalValue:
    found = _list(items)
    return OptionalValue(found[0], True) if found else NONE


def last(items: Any) -> OptionalValue:
    found = _list(items)
    return OptionalValue(found[-1], True) if found else NONE


# -- cel-go's sets extension ---------------------------------------------------------------------


def sets_contains(items: Any, others: Any, equal: Equal) -> celtypes.BoolType:
    found = list(_list(items))
    return celtypes.BoolType(all(any(equal(a, b) for a in found) for b in _list(others)))


def sets_equivalent(items: Any, others: Any, equal: Equal) -> celtypes.BoolType:
    both = bool(sets_contains(items, others, equal)) and bool(sets_contains(others, items, equal))
    return celtypes.BoolType(both)


def sets_intersects(items: Any, others: Any, equal: Equal) -> celtypes.BoolType:
    found = list(_list(items))
    return celtypes.BoolType(any(any(equal(a, b) for a in found) for b in _list(others)))


# -- Kubernetes' IP and CIDR libraries (Go's net/netip) ------------------------------------------


@dataclass(frozen=True)
class IPValue:
    """`ip(s)`: an IPv4 or IPv6 address (no zone, no IPv4-mapped IPv6)."""

    address: ipaddress.IPv4Address | ipaddress.IPv6Address

    def __str__(self) -> str:
        return str(self.address)


@dataclass(frozen=True)
class CIDRValue:
    """`cidr(s)`: an address and a prefix length, host bits kept as written."""

    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    length: int

    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network(f"{self.address}/{self.length}", strict=False)

    def __str__(self) -> str:
        return f"{self.address}/{self.length}"


_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#: Go's netip reads only this dotted form (no leading zeros, four parts).
_IPV4 = re.compile(rf"^{_OCTET}(\.{_OCTET}){{3}}$")


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """netip.ParseAddr's answer, with Kubernetes' refusals; ValueError with its message."""
    if "%" in text and _parses(text.partition("%")[0]):
        raise ValueError(f'IP address "{text}" with zone value is not allowed')
    problem = f'IP Address "{text}" parse error during conversion from string: ParseAddr("{text}")'
    if ":" not in text and not _IPV4.match(text):
        octets = text.split(".")
        leading = len(octets) == 4 and any(len(o) > 1 and o[0] == "0" for o in octets)
        reason = "IPv4 field has octet with leading zero" if leading else "unable to parse IP"
        raise ValueError(f"{problem}: {reason}")
    try:
        found = ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"{problem}: unable to parse IP") from None
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        raise ValueError(f'IPv4-mapped IPv6 address "{text}" is not allowed')
    return found


def _parses(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def ip(text: Any) -> IPValue:
    try:
        return IPValue(_address(_string(text)))
    except ValueError as error:
        raise LibraryError(str(error)) from None


def is_ip(text: Any) -> celtypes.BoolType:
    try:
        _address(_string(text))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def ip_is_canonical(text: Any) -> celtypes.BoolType:
    found = ip(text)
    return celtypes.BoolType(str(found.address) == _string(text))


def _ip(value: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if not isinstance(value, IPValue):
        raise LibraryError(NO_SUCH_OVERLOAD)
    return value.address


def family(value: Any) -> celtypes.IntType:
    return celtypes.IntType(_ip(value).version)


IP_TESTS = ("isUnspecified", "isLoopback", "isLinkLocalMulticast", "isLinkLocalUnicast",
            "isGlobalUnicast")  # fmt: skip


def ip_test(name: str) -> Callable[[Any], celtypes.BoolType]:
    """isUnspecified, isLoopback, isLinkLocalMulticast, isLinkLocalUnicast, isGlobalUnicast."""

    def test(value: Any) -> celtypes.BoolType:
        found = _ip(value)
        if name == "isUnspecified":
            answer = found.is_unspecified
        elif name == "isLoopback":
            answer = found.is_loopback
        elif name == "isLinkLocalMulticast":
            local = "224.0.0.0/24" if found.version == 4 else "ff02::/16"
            answer = found in ipaddress.ip_network(local)
        elif name == "isLinkLocalUnicast":
            answer = found.is_link_local and not found.is_multicast
        else:  # Go's IsGlobalUnicast: not unspecified, loopback, multicast, link-local, broadcast
            broadcast = found.version == 4 and str(found) == "255.255.255.255"
            answer = not (found.is_unspecified or found.is_loopback or found.is_multicast
                          or found.is_link_local or broadcast)  # fmt: skip
        return celtypes.BoolType(answer)

    test.__name__ = name
    return test


_PREFIX_ERROR = "network address parse error during conversion from string: "


def cidr(text: Any) -> CIDRValue:
    found = _string(text)
    address, slash, length = found.partition("/")
    where = f'{_PREFIX_ERROR * 2}netip.ParsePrefix("{found}")'
    if not slash:
        raise LibraryError(f"{where}: no '/'")
    if not (length.isascii() and length.isdigit()) or (len(length) > 1 and length[0] == "0"):
        raise LibraryError(f'{where}: bad bits after slash: "{length}"')
    if "%" in address:
        raise LibraryError(f"{where}: IPv6 zones cannot be present in a prefix")
    try:
        parsed = ipaddress.ip_address(address) if _IPV4.match(address) or ":" in address else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise LibraryError(f'{where}: ParseAddr("{address}"): unable to parse IP')
    if int(length) > parsed.max_prefixlen:
        raise LibraryError(f"{where}: prefix length out of range")
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        raise LibraryError(f'{_PREFIX_ERROR}IPv4-mapped IPv6 address "{found}" is not allowed')
    return CIDRValue(parsed, int(length))


def is_cidr(text: Any) -> celtypes.BoolType:
    try:
        cidr(text)
    except LibraryError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _cidr(value: Any) -> CIDRValue:
    if not isinstance(value, CIDRValue):
        raise LibraryError(NO_SUCH_OVERLOAD)
    return value


def contains_ip(prefix: Any, address: Any) -> celtypes.BoolType:
    found = ip(address).address if isinstance(address, str) else _ip(address)
    return celtypes.BoolType(found in _cidr(prefix).network())


def contains_cidr(prefix: Any, other: Any) -> celtypes.BoolType:
    inner = cidr(other) if isinstance(other, str) else _cidr(other)
    outer = _cidr(prefix)
    if inner.address.version != outer.address.version or inner.length < outer.length:
        return celtypes.BoolType(False)
    return celtypes.BoolType(inner.address in outer.network())


def cidr_ip(prefix: Any) -> IPValue:
    return IPValue(_cidr(prefix).address)


def masked(prefix: Any) -> CIDRValue:
    found = _cidr(prefix)
    return CIDRValue(found.network().network_address, found.length)


def prefix_length(prefix: Any) -> celtypes.IntType:
    return celtypes.IntType(_cidr(prefix).length)


# -- Kubernetes' URL library (Go's url.ParseRequestURI) ------------------------------------------


@dataclass(frozen=True)
class URLValue:
    """`url(s)`: an absolute URI or an absolute path, in its parts as Go's url.ParseRequestURI
    reads them (no fragment: a `#` is part of the path or query)."""

    text: str
    scheme: str = ""
    host: str = ""
    path: str = ""
    query: str = ""

    def __str__(self) -> str:
        return self.text


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
#: What Go's EscapedPath keeps of a path as written (validEncoded), and leaves unescaped.
_PATH_VALID = re.compile(r"^[A-Za-z0-9\-_.~!$&'()*+,;=:@\[\]/%]*$")
_PATH_SAFE = "$&+,/:;=@-_.~"


def _parse_url(text: str) -> URLValue:
    """ValueError with Go's message where ParseRequestURI fails."""
    problem = f'parse "{text}"'
    if not text:
        raise ValueError(f"{problem}: empty url")
    if re.search(r"[\x00-\x1f\x7f]", text):
        raise ValueError(f"{problem}: net/url: invalid control character in URL")
    scheme, rest = "", text
    found = _SCHEME.match(text)
    if found is not None:
        scheme, rest = found.group(1).lower(), text[found.end() :]
    elif text[:1] == ":":
        raise ValueError(f"{problem}: missing protocol scheme")
    rest, _, query = rest.partition("?")
    if not rest.startswith("/"):
        if scheme and rest:
            return URLValue(text, scheme, "", "", query)  # opaque: mailto:x@y
        raise ValueError(f"{problem}: invalid URI for request")
    host = ""
    if rest.startswith("//") and scheme:
        authority, slash, path = rest[2:].partition("/")
        host, rest = authority.rpartition("@")[2], slash + path
        bad = re.search(r"[ \\^`{|}]", host)  # what Go's host unescaping refuses
        if bad is not None:
            raise ValueError(f'{problem}: invalid character "{bad.group(0)}" in host name')
    return URLValue(text, scheme, host, rest, query)


def url(text: Any) -> URLValue:
    try:
        return _parse_url(_string(text))
    except ValueError as error:
        raise LibraryError(f"URL parse error during conversion from string: {error}") from None


def is_url(text: Any) -> celtypes.BoolType:
    try:
        _parse_url(_string(text))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _url(value: Any) -> URLValue:
    if not isinstance(value, URLValue):
        raise LibraryError(NO_SUCH_OVERLOAD)
    return value


def get_scheme(value: Any) -> celtypes.StringType:
    return celtypes.StringType(_url(value).scheme)


def get_host(value: Any) -> celtypes.StringType:
    return celtypes.StringType(_url(value).host)


def get_hostname(value: Any) -> celtypes.StringType:
    host = _url(value).host
    if host.startswith("["):
        return celtypes.StringType(host[1:].partition("]")[0])
    return celtypes.StringType(host.partition(":")[0])


def get_port(value: Any) -> celtypes.StringType:
    host = _url(value).host
    rest = host.rpartition("]")[2] if host.startswith("[") else host
    return celtypes.StringType(rest.partition(":")[2])


def get_escaped_path(value: Any) -> celtypes.StringType:
    """Go's EscapedPath: the path as written where that is a valid encoding, else escaped."""
    path = _url(value).path
    if _PATH_VALID.match(path) and "#" not in path:
        return celtypes.StringType(path)
    return celtypes.StringType(quote_url(unquote(path), safe=_PATH_SAFE))


def get_query(value: Any) -> celtypes.MapType:
    out: dict[Any, list[Any]] = {}
    for key, item in parse_qsl(_url(value).query, keep_blank_values=True):
        out.setdefault(celtypes.StringType(key), []).append(celtypes.StringType(item))
    return celtypes.MapType({k: celtypes.ListType(v) for k, v in out.items()})


# -- Kubernetes' format library (k8s.io/apimachinery's validation, kube-openapi's strfmt) ---------

_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = _LABEL + "(\\." + _LABEL + ")*"
_DNS1035 = "[a-z]([-a-z0-9]*[a-z0-9])?"
_KEY = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_KEY_MESSAGE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_UUID = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
_BASE64 = re.compile(
    r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$"
)
_TIME = re.compile(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")


def _matches(pattern: str, text: str) -> bool:
    return re.fullmatch(pattern, text) is not None


def _regex_error(message: str, pattern: str, *examples: str) -> str:
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{pattern}')"


def _dns1123_label(text: str) -> list[str]:
    errors = ["must be no more than 63 characters"] if len(text) > 63 else []
    if not _matches(_LABEL, text):
        if _matches(_SUBDOMAIN, text):
            errors.append("must not contain dots")
        else:
            errors.append(_regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
                "'-', and must start and end with an alphanumeric character",
                _LABEL, "my-name", "123-abc"))  # fmt: skip
    return errors


def _dns1123_subdomain(text: str, unit: str = "characters") -> list[str]:
    errors = [f"must be no more than 253 {unit}"] if len(text) > 253 else []
    if not _matches(_SUBDOMAIN, text):
        errors.append(_regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character",
            _SUBDOMAIN, "example.com"))  # fmt: skip
    return errors


def _dns1035_label(text: str) -> list[str]:
    errors = ["must be no more than 63 characters"] if len(text) > 63 else []
    if not _matches(_DNS1035, text):
        errors.append(_regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
            "with an alphabetic character, and end with an alphanumeric character",
            _DNS1035, "my-name", "abc-123"))  # fmt: skip
    return errors


def _qualified_name(text: str) -> list[str]:
    parts = text.split("/")
    if len(parts) > 2:
        key = _regex_error(_KEY_MESSAGE, _KEY, "MyName", "my.name", "123-abc")
        return [
            f"a valid label key {key} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    errors: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        if not parts[0]:
            errors.append("prefix part must be non-empty")
        else:
            errors += ["prefix part " + m for m in _dns1123_subdomain(parts[0], "bytes")]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 bytes")
    if not _matches(_KEY, name):
        errors.append("name part " + _regex_error(_KEY_MESSAGE, _KEY, "MyName", "my.name",
                                                  "123-abc"))  # fmt: skip
    return errors


def _label_value(text: str) -> list[str]:
    errors = ["must be no more than 63 bytes"] if len(text) > 63 else []
    if not _matches(f"({_KEY})?", text):
        errors.append(_regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', "
            "'_' or '.', and must start and end with an alphanumeric character",
            f"({_KEY})?", "MyValue", "my_value", "12345"))  # fmt: skip
    return errors


def _prefix(validate: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    """A name prefix for generation may end in '-' (apimachinery's maskTrailingDash)."""

    def check(text: str) -> list[str]:
        masked = text[:-2] + "a" if len(text) > 1 and text.endswith("-") else text
        return validate(masked)

    return check


def _uri(text: str) -> list[str]:
    try:
        _parse_url(text)
    except ValueError as error:
        return [str(error)]
    return []


def _is_date(text: str) -> bool:
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
        return False
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _is_datetime(text: str) -> bool:
    parts = text.lower().split("t")
    if len(text) < 4 or len(parts) < 2 or not _is_date(parts[0]):
        return False
    found = _TIME.search(parts[1])
    return found is not None and found[1] <= "23" and found[2] <= "59" and found[3] <= "59"


def _check(test: Callable[[str], bool], message: str) -> Callable[[str], list[str]]:
    return lambda text: [] if test(text) else [message]


#: `format.<name>()` and `format.named(name)`: each format's validation.
FORMATS: dict[str, Callable[[str], list[str]]] = {
    "dns1123Label": _dns1123_label,
    "dns1123Subdomain": _dns1123_subdomain,
    "dns1035Label": _dns1035_label,
    "qualifiedName": _qualified_name,
    "dns1123LabelPrefix": _prefix(_dns1123_label),
    "dns1123SubdomainPrefix": _prefix(_dns1123_subdomain),
    "dns1035LabelPrefix": _prefix(_dns1035_label),
    "labelValue": _label_value,
    "uri": _uri,
    "uuid": _check(lambda t: _UUID.match(t) is not None, "does not match the UUID format"),
    "byte": _check(lambda t: _BASE64.match(t) is not None, "invalid base64"),
    "date": _check(_is_date, "invalid date"),
    "datetime": _check(_is_datetime, "invalid datetime"),
}


@dataclass(frozen=True)
class FormatValue:
    """A named format (`format.dns1123Label()`)."""

    name: str


def format_named(name: Any) -> OptionalValue:
    found = _string(name)
    return OptionalValue(FormatValue(found), True) if found in FORMATS else NONE


def format_of(name: str) -> Callable[[], FormatValue]:
    return lambda: FormatValue(name)


def validate(form: Any, text: Any) -> OptionalValue:
    """None where the text has the format, else the list of what is wrong."""
    if not isinstance(form, FormatValue):
        raise LibraryError(NO_SUCH_OVERLOAD)
    errors = FORMATS[form.name](_string(text))
    if not errors:
        return NONE
    return OptionalValue(celtypes.ListType([celtypes.StringType(e) for e in errors]), True)
