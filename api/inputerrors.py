"""Errors about user input, and how a pydantic validation error becomes a one-line message.

Every input path (YAML files, CRDs, policies, gRPC, flags) raises InputError naming where the bad
data came from and the field path, so the CLI can print one line and exit 2, never a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from drasat.api import godecoding

#: Longest message part (where, detail) an InputError keeps; the rest is cut and counted.
MAX_MESSAGE_CHARS = 1000
#: Longest name or value `show` prints as it is.
MAX_SHOWN_CHARS = 80


class InputError(Exception):
    """Bad user input. `str()` is the whole one-line message: control characters and line
    separators are escaped and each part is at most MAX_MESSAGE_CHARS long, whatever the input."""

    def __init__(self, message: str, *, where: str = "") -> None:
        self.where = one_line(where)
        self.detail = one_line(message)
        super().__init__(f"{self.where}: {self.detail}" if self.where else self.detail)


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` with newlines, other control characters and U+2028/9 escaped, cut to `limit`."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else _escape(c) for c in text)
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text) - limit} more characters)"
    return text


def _escape(char: str) -> str:
    return repr(char)[1:-1]


def show(value: Any, limit: int = MAX_SHOWN_CHARS) -> str:
    """A name or value from the input for a message: as it is when it is a plain short string
    or number, else quoted and escaped like repr, and cut to `limit` characters."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 64:  # str() of a huge int is slow, and refused past 4300 digits
            return f"<integer of {value.bit_length()} bits>"
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if not isinstance(value, str):
        return f"<{type(value).__name__}>"
    if value and value.isprintable() and len(value) <= limit and value.strip() == value:
        return value
    text = repr(value) if len(value) <= limit else repr(value[:limit]) + f"… ({len(value)} chars)"
    return text


def field_path(location: Sequence[int | str]) -> str:
    """('spec', 'selector', 'andExpression', 0) -> `spec.selector.andExpression[0]`; a key that
    is not plain text (a line break, 5,000 characters) is shown quoted: `spec['a\\nb']`."""
    out = ""
    for part in location:
        if isinstance(part, int):
            out += f"[{part}]"
        elif show(part) != part:
            out += f"[{show(part)}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def describe_validation_error(
    error: ValidationError,
    *,
    prefix: Sequence[int | str] = (),
    model: type[BaseModel] | None = None,
    kind: str = "",
) -> str:
    """The first problems of a pydantic error as `path: message; path: message`. For a model of
    a Kubernetes kind (`godecoding.applies`), what does not decode is worded as the API server
    words it (`json: cannot unmarshal ...`, `strict decoding error: unknown field ...`)."""
    parts = []
    # As the API server answers: what cannot be decoded (a wrong type, an unknown field) before
    # what is decoded but invalid.
    found = sorted(error.errors(), key=lambda item: not _is_decoding(item["type"]))
    for item in found[:3]:
        location = [p for p in item["loc"] if not _is_union_tag(p)]
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown field"
        if model is not None and godecoding.applies(model):
            message = godecoding.message(model, dict(item), kind, location) or message
        parts.append(f"{field_path([*prefix, *location])}: {message}")
    more = len(error.errors()) - 3
    if more > 0:
        parts.append(f"and {more} more")
    return one_line("; ".join(parts))


def _is_decoding(kind: str) -> bool:
    return (
        kind == "extra_forbidden"
        or kind.endswith(("_type", "_parsing"))
        or kind in ("int_from_float",)
    )


def _is_union_tag(part: int | str) -> bool:
    # pydantic inserts the member type name ("int", "str", "function-after[...]") into the
    # location of union errors; users never wrote those.
    return isinstance(part, str) and (part in ("int", "str", "bool") or "[" in part)
