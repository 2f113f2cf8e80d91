"""How a long-running command (`drasat nodeplugin`, `drasat controller`) hears SIGTERM and SIGINT:
a thread of its own reads them from Python's signal wakeup fd and sets the command's stop event.

Why not `signal.signal(SIGTERM, lambda *_: stop.set())` and `stop.wait()`:

- Linux hands a process's signal to any of its threads that does not block it at that moment.
  When another thread takes it (one starting a thread blocks every signal for a moment, then takes
  the pending one as it unblocks them; gRPC's pools start threads while they serve), Python runs
  the handler only the next time the main thread runs Python code: a main thread asleep in
  `stop.wait()` never does, and the process ignores the SIGTERM. CI saw `drasat nodeplugin` do so
  on a loaded machine. The wakeup fd is written from C by whichever thread takes the signal.
- The handler runs in the main thread between two bytecodes, possibly inside `Event.wait` while
  that holds the event's lock: `stop.set()` in the handler would wait on that lock for ever.

SIGUSR1 writes every thread's stack to stderr (faulthandler, from C, whatever Python is doing), so
a process that hangs can be asked where.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

log = logging.getLogger(__name__)

#: The signals that stop the command.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def relayed(stop: threading.Event) -> Iterator[None]:
    """Within: SIGTERM and SIGINT set `stop` (and are logged), SIGUSR1 writes the stacks. Only the
    main thread may set handlers: in another (a test running the command in a thread) nothing
    changes, and the command stops by `stop` alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read, write = os.pipe()
    os.set_blocking(write, False)  # set_wakeup_fd wants it so: a full pipe never blocks a handler
    relay = threading.Thread(target=_relay, args=(read, stop), name="drasat-signals", daemon=True)
    relay.start()
    # The fd before the handlers (and back in the reverse order): a signal between the two
    # would otherwise reach a handler that does nothing with no fd to tell the relay.
    previous_fd = signal.set_wakeup_fd(write)
    previous = {signum: signal.signal(signum, _noted_by_relay) for signum in STOP_SIGNALS}
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        yield
    finally:
        faulthandler.unregister(signal.SIGUSR1)
        for signum, handler in previous.items():
            # None: a handler set outside Python, which signal.signal cannot put back.
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        signal.set_wakeup_fd(previous_fd)
        os.close(write)  # the relay reads the end of the pipe and ends
        relay.join()
        os.close(read)


def _noted_by_relay(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler: nothing to do, the relay acts on the wakeup fd's byte."""


def _relay(read: int, stop: threading.Event) -> None:
    while data := os.read(read, 64):  # a byte per signal; b"" when the pipe is closed
        for signum in data:
            if signum in STOP_SIGNALS:
                log.warning("signal %d: stopping", signum)
                stop.set()
