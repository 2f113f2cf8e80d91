"""drasat.stopsignals: SIGTERM stops a long-running command whichever of its threads takes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

from drasat import stopsignals

#: A command whose main thread blocks SIGTERM, so the kernel hands it to another thread: the case
#: a loaded machine made of `drasat nodeplugin` (a thread starting a thread takes the signal).
#: With a handler that sets the event, the main thread slept on in `stop.wait()` for ever.
TAKEN_BY_ANOTHER_THREAD = textwrap.dedent("""
    import signal, sys, threading
    from drasat import stopsignals

    threading.Thread(target=threading.Event().wait, daemon=True).start()  # SIGTERM goes here
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # main, and threads it starts
    stop = threading.Event()
    with stopsignals.relayed(stop):
        print("ready", flush=True)
        stop.wait()
    print("stopped", flush=True)
""")


def test_a_sigterm_taken_by_another_thread_wakes_the_main_thread_and_sigusr1_dumps() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", TAKEN_BY_ANOTHER_THREAD],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n"
        process.send_signal(signal.SIGUSR1)  # the stacks: how a hung command is asked where
        assert process.stderr is not None
        assert "(most recent call first)" in process.stderr.readline()
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert (process.returncode, out) == (0, "stopped\n"), err
    assert "signal 15: stopping" in err


def test_a_signal_sets_the_event_and_the_handlers_are_restored_after() -> None:
    before = signal.getsignal(signal.SIGTERM)
    fd_before = signal.set_wakeup_fd(-1)  # read by setting: set back at once
    signal.set_wakeup_fd(fd_before)
    stop = threading.Event()
    with stopsignals.relayed(stop):
        os.kill(os.getpid(), signal.SIGINT)  # the relay thread sets it
        assert stop.wait(60)
    assert signal.getsignal(signal.SIGTERM) is before
    assert signal.set_wakeup_fd(fd_before) == fd_before


def test_in_a_thread_other_than_the_main_one_nothing_is_installed() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def run() -> None:
        with stopsignals.relayed(threading.Event()):
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [before]
