"""An audit log of the requests the simulated server answered, in RBAC's terms (verb, group,
resource, subresource), so tests can check what each component did and that its Role allows it.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Mapping

from drasat.testbed.sim import routing


@dataclasses.dataclass(frozen=True)
class Entry:
    """One answered resource request; `user_agent` tells the clients apart."""

    verb: str
    group: str
    version: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None
    code: int
    user_agent: str


def verb(method: str, route: routing.Route, query: Mapping[str, str]) -> str:
    """The RBAC verb of a request (purely computational)."""
    if method == "GET":
        if route.name is not None:
            return "get"
        return "watch" if routing.flag(query, "watch") else "list"
    if method == "DELETE" and route.name is None:
        return "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


class Audit:
    """A bounded, thread-safe log of entries, oldest first."""

    def __init__(self, *, size: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._entries: collections.deque[Entry] = collections.deque(maxlen=size)

    def record(self, entry: Entry) -> None:
        with self._lock:
            self._entries.append(entry)

    def entries(self, **match: object) -> list[Entry]:
        """Entries whose fields equal every keyword given, e.g. `entries(verb="patch")`."""
        with self._lock:
            found = list(self._entries)
        return [e for e in found if all(getattr(e, k) == v for k, v in match.items())]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
