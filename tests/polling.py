"""Waiting, in tests, for what a background thread or process does.

`until` answers whether the condition came true in time, for an `assert until(...), details`
that says what went wrong; `kubecluster.wait_for` raises instead and returns the value."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(check: Callable[[], object], timeout: float = 10.0, interval: float = 0.02) -> bool:
    """Poll `check()` every `interval` seconds until it is truthy (True) or `timeout` passed
    (False)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True
