"""How the parts of a cycle write: only while this replica leads (`Writes.guard`, else
`LeaseLost`), several at once (`Writes.in_parallel`), and a failure confined to what caused it
(`Writes.confined`, `Writes.fault`: a metric by kind, a log line, a Warning Event).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from drasat.controller.metrics import Metrics
from drasat.kube import errors
from drasat.kube.client import Obj
from drasat.kube.events import EventRecorder

log = logging.getLogger(__name__)

T = TypeVar("T")


class LeaseLost(Exception):
    """This replica stopped leading in the middle of a cycle: nothing more is written."""


class Writes:
    """What every write of a cycle goes through."""

    def __init__(
        self,
        *,
        may_write: Callable[[], bool],
        metrics: Metrics,
        recorder: EventRecorder,
        workers: int,
        wake: Callable[[], None],
    ) -> None:
        self._may_write = may_write
        self.metrics = metrics
        self.recorder = recorder
        self._workers = workers
        #: Asks for another cycle soon (a write that failed is retried there).
        self.wake = wake
        self._pool: ThreadPoolExecutor | None = None
        #: How many `confined` steps failed so far (a settle that saw one settles all next).
        self.failures = 0

    def guard(self) -> None:
        """Before every write: this replica must still lead."""
        if not self._may_write():
            raise LeaseLost

    def fault(self, kind: str, text: str, objects: list[Obj]) -> None:
        """A fault confined to what caused it: a metric by kind, one log line, a Warning Event
        on each object."""
        self.metrics.faults.labels(kind).inc()
        log.warning("%s: %s", kind, text)
        for obj in objects:
            self.recorder.warning(obj, kind, text)

    def confined(
        self, what: str, objects: list[Obj], action: Callable[..., T], *args: Any
    ) -> T | None:
        """Run one object's settle step; a failure is that object's alone (the settle goes on
        with the others)."""
        try:
            return action(*args)
        except LeaseLost:
            raise
        except Exception as error:
            self.failures += 1
            self.fault("SettleFailed", f"{what}: {short(error)}", objects)
            return None

    def in_parallel(self, action: Callable[[Any], T], items: list[Any]) -> list[T]:
        """`action` on each item, up to `workers` at once; the results in order. A LeaseLost
        raised by one is raised here."""
        if len(items) <= 1 or self._workers <= 1:
            return [action(item) for item in items]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, "v1-writes")
        return list(self._pool.map(action, items))

    def shutdown(self) -> None:
        """Wait for the writes under way; no more run in parallel."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def short(error: BaseException) -> str:
    """An error in one line: its text, with its type unless it is the API server's answer."""
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}" if not isinstance(error, errors.KubeError) else text
