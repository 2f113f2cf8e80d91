"""The what-if's progress bar: one line on standard error, redrawn in place, for a run that takes
longer than a second, only when standard error is a terminal (never in a pipe, a file or a log).

The run ends by its deadline (the policy's time limit, `run.deadline`), so the bar fills with the
time spent of that limit and names the step running (reading, placing, writing); it is erased
when the run ends, so the output that follows starts on a clean line.
"""

from __future__ import annotations

import threading
import time
from typing import TextIO

#: A run shorter than this shows no bar.
QUIET_S = 1.0
_WIDTH = 24
_TICK_S = 0.1
_ERASE = "\r\x1b[K"


def line(step: str, elapsed_s: float, limit_s: float) -> str:
    """The bar's text: `[#####-------] 4.2 s of 10 s  placing pods`. Pure."""
    fraction = min(1.0, max(0.0, elapsed_s / limit_s)) if limit_s > 0 else 1.0
    filled = round(fraction * _WIDTH)
    bar = "#" * filled + "-" * (_WIDTH - filled)
    return f"[{bar}] {elapsed_s:.1f} s of {limit_s:g} s  {step}"


class Progress:
    """Shows `line` on `stream` from QUIET_S after `started` until `close`, when the stream is a
    terminal; otherwise does nothing. A context manager."""

    def __init__(self, stream: TextIO, *, started: float, limit_s: float) -> None:
        self._stream = stream
        self._started = started
        self._limit_s = limit_s
        self._step = "reading the input"
        #: Each step and when it began (`time.monotonic()`), for `timings`.
        self._steps: list[tuple[str, float]] = [(self._step, started)]
        self._marks: dict[str, float] = {}
        self._shown = False
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        isatty = getattr(stream, "isatty", None)
        if callable(isatty) and isatty():
            self._thread = threading.Thread(target=self._run, name="whatif-progress", daemon=True)
            self._thread.start()

    @property
    def enabled(self) -> bool:
        return self._thread is not None

    def step(self, text: str) -> None:
        """Name the step now running."""
        with self._lock:
            self._step = text
            self._steps.append((text, time.monotonic()))

    def mark(self, name: str, at: float | None = None) -> None:
        """Record a moment of the run for `timings` (default: now)."""
        with self._lock:
            self._marks[name] = time.monotonic() if at is None else at

    def timings(self) -> dict[str, object]:
        """The run's time limit, each step with when it began and the marks, in seconds since
        the start."""
        with self._lock:
            return {
                "limit_s": self._limit_s,
                "steps": [
                    {"step": text, "at_s": round(at - self._started, 4)} for text, at in self._steps
                ],
                **{name: round(at - self._started, 4) for name, at in self._marks.items()},
            }

    def limit(self, limit_s: float) -> None:
        """The run's time limit, once the policy is read."""
        with self._lock:
            self._limit_s = limit_s

    def draw(self, now: float) -> None:
        """Redraw the line as of `now` (`time.monotonic()`), once the run is past QUIET_S."""
        elapsed = now - self._started
        if elapsed < QUIET_S:
            return
        with self._lock:
            text = line(self._step, elapsed, self._limit_s)
        self._stream.write(_ERASE + text)
        self._stream.flush()
        self._shown = True

    def _run(self) -> None:
        while not self._done.wait(_TICK_S):
            try:
                self.draw(time.monotonic())
            except (OSError, ValueError):  # the terminal went away: no bar, the run goes on
                return

    def close(self) -> None:
        """Stop and erase the line."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self._shown:
            self._shown = False
            try:
                self._stream.write(_ERASE)
                self._stream.flush()
            except (OSError, ValueError):
                pass

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
