"""A work queue of keys: deduplicated, one worker per key at a time, delayed retries with backoff.

Like client-go's rate-limited queue: a key added while it is being processed is processed again
afterwards; `retry` re-adds it after a per-key exponential backoff, `forget` resets that backoff.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable


class WorkQueue:
    def __init__(
        self,
        *,
        backoff_s: tuple[float, float] = (0.05, 5.0),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._backoff = backoff_s
        self._clock = clock
        self._cond = threading.Condition()
        self._ready: list[str] = []
        self._queued: set[str] = set()
        self._active: set[str] = set()
        self._again: set[str] = set()
        self._delayed: list[tuple[float, int, str]] = []
        self._failures: dict[str, int] = {}
        self._counter = 0
        self._closed = False

    def add(self, key: str) -> None:
        with self._cond:
            if self._closed:
                return
            if key in self._active:
                self._again.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
                self._cond.notify()

    def add_after(self, key: str, delay_s: float) -> None:
        if delay_s <= 0:
            self.add(key)
            return
        with self._cond:
            self._counter += 1
            heapq.heappush(self._delayed, (self._clock() + delay_s, self._counter, key))
            self._cond.notify()

    def retry(self, key: str) -> float:
        """Re-add after this key's next backoff; returns the delay."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = min(self._backoff[1], self._backoff[0] * 2.0**failures)
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def get(self, timeout: float | None = None) -> str | None:
        """The next key (mark it active until `done`); None when closed or on timeout."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                self._promote()
                if self._closed:
                    return None
                if self._ready:
                    key = self._ready.pop(0)
                    self._queued.discard(key)
                    self._active.add(key)
                    return key
                wait = None if deadline is None else deadline - self._clock()
                if self._delayed:
                    until = self._delayed[0][0] - self._clock()
                    wait = until if wait is None else min(wait, until)
                if wait is not None and wait <= 0:
                    if deadline is not None and self._clock() >= deadline:
                        return None
                    continue
                self._cond.wait(wait)

    def done(self, key: str) -> None:
        with self._cond:
            self._active.discard(key)
            if key in self._again:
                self._again.discard(key)
                if key not in self._queued:
                    self._queued.add(key)
                    self._ready.append(key)
                    self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._ready) + len(self._delayed) + len(self._active)

    def _promote(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            if key in self._active:
                self._again.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
