"""Errors about user input, and how a pydantic validation error becomes a one-line message.

Every input path (YAML files, CRDs, policies, gRPC, flags) raises InputError naming where the bad
data came from and the field path, so the CLI can print one line and exit 2, never a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError


class InputError(Exception):
    """Bad user input. `str()` is the whole one-line message."""

    def __init__(self, message: str, *, where: str = "") -> None:
        self.where = where
        self.detail = message
        super().__init__(f"{where}: {message}" if where else message)


def field_path(location: Sequence[int | str]) -> str:
    """('spec', 'selector', 'andExpression', 0) -> `spec.selector.andExpression[0]`."""
    out = ""
    for part in location:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def describe_validation_error(error: ValidationError, *, prefix: Sequence[int | str] = ()) -> str:
    """The first problems of a pydantic error as `path: message; path: message`."""
    parts = []
    for item in error.errors()[:3]:
        location = [p for p in item["loc"] if not _is_union_tag(p)]
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown field"
        parts.append(f"{field_path([*prefix, *location])}: {message}")
    more = len(error.errors()) - 3
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def _is_union_tag(part: int | str) -> bool:
    # pydantic inserts the member type name ("int", "str", "function-after[...]") into the
    # location of union errors; users never wrote those.
    return isinstance(part, str) and (part in ("int", "str", "bool") or "[" in part)
