"""URL paths of the Kubernetes REST API, parsed into what a request addresses.

Purely computational. Handles the core group (`/api/v1/...`), named groups (`/apis/g/v/...`),
namespaced and cluster-scoped paths, subresources and the discovery endpoints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping


@dataclasses.dataclass(frozen=True)
class Route:
    """A resource request: which collection or object, and which subresource."""

    group: str
    version: str
    plural: str
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None


@dataclasses.dataclass(frozen=True)
class Discovery:
    """A discovery request: `what` is `version`, `api`, `apis`, `group` or `resources`."""

    what: str
    group: str = ""
    version: str = ""


def flag(query: Mapping[str, str], name: str) -> bool:
    """A boolean query parameter as the server reads it (`true` or `1`)."""
    return query.get(name, "").lower() in ("true", "1")


def parse(path: str, *, is_plural: Callable[[str, str, str], bool]) -> Route | Discovery | None:
    """Parse a URL path (no query); None when the path names nothing the API serves.

    `is_plural(group, version, word)` tells `/namespaces/{ns}/{plural}` apart from a
    cluster-scoped object named like a namespace path.
    """
    parts = [part for part in path.split("/") if part]
    if parts == ["version"]:
        return Discovery("version")
    if parts[:1] == ["api"]:
        group, rest = "", parts[1:]
        if not rest:
            return Discovery("api")
    elif parts[:1] == ["apis"]:
        if len(parts) == 1:
            return Discovery("apis")
        if len(parts) == 2:
            return Discovery("group", group=parts[1])
        group, rest = parts[1], parts[2:]
    else:
        return None
    version, rest = rest[0], rest[1:]
    if not rest:
        return Discovery("resources", group=group, version=version)
    if rest[0] == "namespaces" and len(rest) >= 3 and is_plural(group, version, rest[2]):
        return _route(group, version, rest[1], rest[2:])
    return _route(group, version, None, rest)


def _route(group: str, version: str, namespace: str | None, rest: list[str]) -> Route | None:
    if len(rest) > 3:
        return None
    return Route(
        group=group,
        version=version,
        plural=rest[0],
        namespace=namespace,
        name=rest[1] if len(rest) > 1 else None,
        subresource=rest[2] if len(rest) > 2 else None,
    )
