"""A simulated control loop: `run_once()` after every watch event of its resources, and at least
every `resync` seconds, in a background thread (the scheduler and the kubelets are such loops).

Subclasses say what they watch (`watched()`), implement `run_once()` and name the errors a pass
may meet (`pass_errors`): those are logged and the next pass retries, as a real controller would.
"""

from __future__ import annotations

import http.client
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Self

from drasat.testbed.sim import errors, kubeclient

log = logging.getLogger(__name__)

#: What ends a watch stream and is retried after a short backoff.
WATCH_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    errors.ApiError,
    http.client.HTTPException,
    ValueError,
)


class WatchDrivenLoop:
    """Run `run_once()` yourself, or `start()` a background thread and `stop()` it."""

    name = "sim-actor"
    pass_errors: tuple[type[BaseException], ...] = WATCH_ERRORS

    def __init__(self, client: kubeclient.KubeClient, *, resync: float) -> None:
        self._client = client
        self._resync = resync
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._threads: list[threading.Thread] = []

    def watched(self) -> Sequence[tuple[str, Mapping[str, str]]]:
        """(collection URL, query) of every resource whose changes trigger a pass."""
        raise NotImplementedError

    def run_once(self) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        self._stop.clear()
        self._threads = [threading.Thread(target=self._loop, name=self.name, daemon=True)]
        for url, query in self.watched():
            self._threads.append(
                threading.Thread(
                    target=self._watch, args=(url, query), daemon=True, name=f"{self.name}-watch"
                )
            )
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._changed.set()
        self._client.close_watches()
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _watch(self, url: str, query: Mapping[str, str]) -> None:
        # Any event (or a reconnect, which starts with the current state) triggers a pass.
        while not self._stop.is_set():
            try:
                for _ in self._client.watch(url, timeoutSeconds="300", **query):
                    self._changed.set()
            except WATCH_ERRORS as exc:
                log.debug("%s: watch of %s ended: %s", self.name, url, exc)
            self._stop.wait(0.1)  # reconnect backoff

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._changed.wait(self._resync)
            self._changed.clear()
            if self._stop.is_set():
                return
            try:
                self.run_once()
            except self.pass_errors as exc:
                log.info("%s: pass failed, retrying: %s", self.name, exc)
