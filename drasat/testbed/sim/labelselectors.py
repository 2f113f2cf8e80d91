"""Label and field selectors, parsed from the query string as the API server reads them.

Purely computational: parse once into requirements, then match any number of objects.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from drasat.testbed.sim import errors

_SET_RE = re.compile(r"^\s*(!?)([A-Za-z0-9_./-]+)\s+(in|notin)\s*\(([^)]*)\)\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_./-]*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*$")


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One clause: `key op values` with op in `=`, `!=`, `in`, `notin`, `exists`, `!exists`."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        # `!=` and `notin` match objects without the label, as in Kubernetes.
        return not present or value not in self.values


def _split_clauses(text: str) -> list[str]:
    """Split on commas outside parentheses (`a in (x,y),b` is two clauses)."""
    clauses: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            clauses.append("".join(current))
            current = []
        else:
            current.append(char)
    clauses.append("".join(current))
    return [clause for clause in clauses if clause.strip()]


def parse_labels(text: str | None) -> list[Requirement]:
    """Parse a labelSelector; raise 400 BadRequest on syntax the real server rejects."""
    requirements = []
    for clause in _split_clauses(text or ""):
        if match := _SET_RE.match(clause):
            negated, key, op, raw = match.groups()
            if negated:
                raise errors.bad_request(f"unable to parse requirement: {clause!r}")
            values = frozenset(v.strip() for v in raw.split(",") if v.strip())
            requirements.append(Requirement(key, "in" if op == "in" else "notin", values))
        elif match := _EQ_RE.match(clause):
            key, op, value = match.groups()
            requirements.append(Requirement(key, "!=" if op == "!=" else "=", frozenset([value])))
        elif match := _EXISTS_RE.match(clause):
            negated, key = match.groups()
            requirements.append(Requirement(key, "!exists" if negated else "exists"))
        else:
            raise errors.bad_request(f"unable to parse requirement: {clause!r}")
    return requirements


def parse_fields(text: str | None, *, supported: frozenset[str]) -> list[Requirement]:
    """Parse a fieldSelector (`=`, `==`, `!=` only); unsupported fields are a 400, as upstream."""
    requirements = []
    for clause in _split_clauses(text or ""):
        match = _EQ_RE.match(clause)
        if not match:
            raise errors.bad_request(f"invalid selector: {clause!r}; can't understand")
        key, op, value = match.groups()
        if key not in supported:
            raise errors.bad_request(f'field label not supported: "{key}"')
        requirements.append(Requirement(key, "!=" if op == "!=" else "=", frozenset([value])))
    return requirements


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string value at a dotted path; a missing field reads as the empty string."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def matches(
    obj: Mapping[str, Any],
    *,
    labels: list[Requirement],
    fields: list[Requirement],
) -> bool:
    """Whether one object satisfies every label and field requirement."""
    object_labels = obj.get("metadata", {}).get("labels") or {}
    if not all(req.matches(object_labels) for req in labels):
        return False
    return all(req.matches({req.key: field_value(obj, req.key)}) for req in fields)
