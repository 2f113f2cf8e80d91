"""Faults a test switches on at run time: conflicts, dropped watches, outages, latency.

Every method is thread-safe; the server asks on each request, so changes apply at once.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable

#: How the server behaves while it is down.
DOWN_503 = "503"
DOWN_RESET = "reset"


class Faults:
    """The fault configuration of one server, plus counters of what was injected."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.injected: collections.Counter[str] = collections.Counter()
        self._listeners: list[Callable[[], None]] = []
        self.reset()

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call `listener` after each change that open watches must notice."""
        self._listeners.append(listener)

    def _notify(self) -> None:
        for listener in self._listeners:
            listener()

    def reset(self) -> None:
        """Switch every fault off (counters are kept)."""
        with self._lock:
            self._conflicts = False
            self._per_version = False
            self._conflict_plurals: frozenset[str] | None = None
            self._written: set[tuple[object, ...]] = set()
            self._watch_limit: int | None = None
            self._watch_generation = 0
            self._down_until: float | None = None
            self._down_mode = DOWN_503
            self._latency = 0.0

    # --- configuration ------------------------------------------------------------------------

    def conflict_on_first_write(
        self,
        enabled: bool = True,
        *,
        per_version: bool = False,
        plurals: Iterable[str] | None = None,
    ) -> None:
        """Answer 409 Conflict to the first update/patch of each object.

        `per_version`: the first write against each resourceVersion of an object, so every
        change is met by one conflict. `plurals` limits it to some resources.
        """
        with self._lock:
            self._conflicts = enabled
            self._per_version = per_version
            self._conflict_plurals = frozenset(plurals) if plurals is not None else None
            self._written.clear()

    def drop_watches_after(self, events: int | None) -> None:
        """Close each watch connection after it sent `events` events (0: at once; None: off)."""
        with self._lock:
            self._watch_limit = events

    def drop_watches_now(self) -> None:
        """Close every watch connection open right now."""
        with self._lock:
            self._watch_generation += 1
        self._notify()

    def down_for(self, seconds: float, *, mode: str = DOWN_503) -> None:
        """Be unavailable for `seconds`: answer 503 (`DOWN_503`) or drop connections."""
        self._set_down(self._clock() + seconds, mode)

    def down(self, *, mode: str = DOWN_503) -> None:
        """Be unavailable until `up()`."""
        self._set_down(float("inf"), mode)

    def up(self) -> None:
        with self._lock:
            self._down_until = None

    def _set_down(self, until: float, mode: str) -> None:
        if mode not in (DOWN_503, DOWN_RESET):
            raise ValueError(f"unknown down mode {mode!r}")
        with self._lock:
            self._down_until, self._down_mode = until, mode
            self._watch_generation += 1
        self._notify()

    def set_latency(self, seconds: float) -> None:
        """Delay every request by `seconds` before it is handled."""
        with self._lock:
            self._latency = seconds

    # --- queries from the server --------------------------------------------------------------

    def should_conflict(self, plural: str, key: tuple[object, ...], resource_version: str) -> bool:
        """Whether this write gets an injected 409; records the write either way."""
        with self._lock:
            if not self._conflicts:
                return False
            if self._conflict_plurals is not None and plural not in self._conflict_plurals:
                return False
            seen = (*key, resource_version) if self._per_version else key
            if seen in self._written:
                return False
            self._written.add(seen)
            self.injected["conflict"] += 1
            return True

    def down_mode(self) -> str | None:
        """The outage mode in force now, or None when the server is up."""
        with self._lock:
            if self._down_until is None:
                return None
            if self._clock() >= self._down_until:
                self._down_until = None
                return None
            self.injected[f"down-{self._down_mode}"] += 1
            return self._down_mode

    @property
    def latency(self) -> float:
        with self._lock:
            return self._latency

    @property
    def watch_limit(self) -> int | None:
        with self._lock:
            return self._watch_limit

    @property
    def watch_generation(self) -> int:
        with self._lock:
            return self._watch_generation

    def count(self, what: str) -> None:
        with self._lock:
            self.injected[what] += 1
