"""Watch streams: the events one `?watch=true` request receives, filtered and typed as the real
API server does (an object leaving a selector is DELETED for that watch, entering it is ADDED).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from drasat.testbed.sim import api, errors, labelselectors, routing, storage

Obj = dict[str, Any]

#: A watch without timeoutSeconds ends after this long (the real server picks 30-60 minutes).
DEFAULT_TIMEOUT_S = 1800.0
#: With allowWatchBookmarks, a BOOKMARK this often keeps idle watchers' resourceVersion recent
#: (so they can resume after the history moved on), and one more when the watch ends.
DEFAULT_BOOKMARK_INTERVAL_S = 10.0
#: Initial watch resourceVersions meaning "current state first, then changes".
_FROM_NOW = ("", "0")


class Dropped(Exception):
    """A fault closed this watch connection."""


class WatchStream:
    """One watch request; construction checks it, so errors still become HTTP errors."""

    def __init__(
        self,
        server: api.Api,
        route: routing.Route,
        query: Mapping[str, str],
        *,
        clock: Callable[[], float] = time.monotonic,
        bookmark_interval: float = DEFAULT_BOOKMARK_INTERVAL_S,
    ) -> None:
        self._api = server
        self._bookmark_interval = bookmark_interval
        self._rt = server.resource(route)
        self._namespace = route.namespace
        self._labels, self._fields = server.selectors(self._rt, query)
        self._clock = clock
        self._bookmarks = routing.flag(query, "allowWatchBookmarks")
        raw_timeout = query.get("timeoutSeconds") or DEFAULT_TIMEOUT_S
        try:
            self._deadline = clock() + float(raw_timeout)
        except ValueError:
            raise errors.bad_request(f"invalid timeoutSeconds {raw_timeout!r}") from None
        start = query.get("resourceVersion", "")
        self._initial: list[Obj] = []
        if start in _FROM_NOW:
            items, self._cursor = server.store.snapshot(self._rt, self._namespace)
            self._initial = [o for o in items if self._matches(o)]
        else:
            try:
                self._cursor = int(start)
            except ValueError:
                raise errors.ApiError(  # (a 500 on the real server too)
                    500,
                    "",
                    f'resourceVersion: Invalid value: "{start}": strconv.ParseUint: parsing '
                    f'"{start}": invalid syntax',
                ) from None

    def _matches(self, obj: Obj) -> bool:
        return labelselectors.matches(obj, labels=self._labels, fields=self._fields)

    def _typed(self, event: storage.Event) -> tuple[str, Obj] | None:
        if event.store_key != self._rt.store_key:
            return None
        if self._namespace is not None and event.namespace != self._namespace:
            return None
        now = self._matches(event.obj)
        if event.type != "MODIFIED":
            return (event.type, event.obj) if now else None
        before = event.old is not None and self._matches(event.old)
        if now:
            return ("MODIFIED" if before else "ADDED", event.obj)
        return ("DELETED", event.obj) if before else None

    def _wire(self, kind: str, obj: Obj) -> Obj:
        return {"type": kind, "object": self._api.present(self._rt, dict(obj))}

    def events(self, *, stopping: Callable[[], bool]) -> Iterator[Obj]:
        """Yield wire events until the timeout or `stopping()`; raise Dropped on a fault."""
        faults = self._api.faults
        generation = faults.watch_generation
        sent = 0

        def check_faults() -> None:
            limit = faults.watch_limit
            if faults.watch_generation != generation or (limit is not None and sent >= limit):
                faults.count("watch-dropped")
                raise Dropped

        def interrupted() -> bool:
            return stopping() or faults.watch_generation != generation

        for obj in self._initial:
            check_faults()
            sent += 1
            yield self._wire("ADDED", obj)
        next_bookmark = self._clock() + self._bookmark_interval
        while not stopping():
            check_faults()
            now = self._clock()
            remaining = self._deadline - now
            if remaining <= 0:
                break
            if self._bookmarks and now >= next_bookmark:
                yield self._bookmark()
                next_bookmark = now + self._bookmark_interval
            wait = min(remaining, next_bookmark - now) if self._bookmarks else remaining
            try:
                found, cursor = self._api.store.events_after(
                    self._cursor, timeout=max(wait, 0.0), interrupted=interrupted
                )
            except errors.ApiError as exc:
                yield {"type": "ERROR", "object": exc.status()}
                return
            for event in found:
                typed = self._typed(event)
                if typed is not None:
                    check_faults()
                    sent += 1
                    yield self._wire(*typed)
            self._cursor = cursor
        if self._bookmarks and not stopping():
            yield self._bookmark()

    def _bookmark(self) -> Obj:
        bookmark = {"metadata": {"resourceVersion": str(self._cursor)}}
        return {"type": "BOOKMARK", "object": self._api.present(self._rt, bookmark)}
