"""When this process started, on `time.monotonic()`'s clock: a command whose time limit holds for
the whole run (`drasat whatif`) counts it from there, so that Python's own start and the imports
before the command's code count too.
"""

from __future__ import annotations

import os
import time

#: A process start further back than this is not believed (a clock read wrong, or a process that
#: ran other work first): the command's own start is used instead.
_BELIEVED_S = 30.0


def elapsed_since_start(stat: str, clock_ticks: int, boot_now_s: float) -> float | None:
    """Seconds since the process started: `stat` is its /proc/<pid>/stat line, whose 22nd
    field is its start in clock ticks after boot; `boot_now_s` is CLOCK_BOOTTIME now. None when
    the line cannot be read. Pure."""
    # The command name (field 2) is in parentheses and may hold spaces: count after its end.
    _, _, after = stat.rpartition(")")
    fields = after.split()
    # after ")" come field 3 (state) onwards: field 22 is the 20th of them.
    if len(fields) < 20 or not fields[19].isdigit() or clock_ticks <= 0:
        return None
    return max(0.0, boot_now_s - int(fields[19]) / clock_ticks)


def process_started(now: float | None = None) -> float:
    """The process's start on `time.monotonic()`'s clock (to a clock tick, 10 ms, early rather
    than late), or `now` (default: `time.monotonic()`) where the system does not say (not Linux)
    or says something not believable."""
    now = time.monotonic() if now is None else now
    try:
        with open(f"/proc/{os.getpid()}/stat", encoding="utf-8") as file:
            stat = file.read()
        elapsed = elapsed_since_start(
            stat, os.sysconf("SC_CLK_TCK"), time.clock_gettime(time.CLOCK_BOOTTIME)
        )
    except (OSError, ValueError, AttributeError):
        return now
    if elapsed is None or elapsed > _BELIEVED_S:
        return now
    return now - elapsed
