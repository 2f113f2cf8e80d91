"""The what-if's progress bar (issue 26 item 4): on a terminal only, after a second, erased at
the end; never in a pipe or a file. No timing: the clock is passed in."""

from __future__ import annotations

import io
import time

from drasat.whatif import progress
from drasat.whatif.progress import Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_line_fills_with_the_time_spent_of_the_limit() -> None:
    assert progress.line("placing the pods", 5.0, 10.0) == (
        "[############------------] 5.0 s of 10 s  placing the pods"
    )
    assert progress.line("reading the input", 0.0, 10.0).startswith("[" + "-" * 24 + "]")
    # Past the limit (the output after the deadline) the bar stays full.
    assert progress.line("writing the output", 12.5, 10.0).startswith("[" + "#" * 24 + "]")


def test_nothing_is_drawn_when_the_stream_is_no_terminal() -> None:
    stream = io.StringIO()
    bar = Progress(stream, started=0.0, limit_s=10.0)
    assert not bar.enabled
    bar.close()
    assert stream.getvalue() == ""


def test_on_a_terminal_the_line_shows_after_a_second_and_is_erased_once() -> None:
    stream = _Terminal()
    # Started an hour ahead of the clock: the bar's own thread (which reads the clock) stays
    # quiet, and the test draws with the times it gives.
    started = time.monotonic() + 3600
    with Progress(stream, started=started, limit_s=10.0) as bar:
        assert bar.enabled
        bar.draw(started + 0.5)  # under a second: nothing
        assert stream.getvalue() == ""
        bar.step("placing the pods")
        bar.limit(20.0)
        bar.draw(started + 2.0)
        assert stream.getvalue().endswith("2.0 s of 20 s  placing the pods")
        assert stream.getvalue().startswith("\r\x1b[K[")
        bar.close()
    # Erased at close; the context manager's second close writes nothing more.
    assert stream.getvalue().endswith("placing the pods\r\x1b[K")
    assert stream.getvalue().count("\r\x1b[K") == 2
