"""Flag defaults from the environment: every daemon flag `--some-flag` reads DRASAT_SOME_FLAG.

The value stays a string, so argparse converts it with the flag's own `type` and a bad value is
a usage error naming the flag (exit 2), not a traceback while the parser is built.
"""

from __future__ import annotations

import os
from typing import TypeVar

T = TypeVar("T")


def env(name: str, default: T) -> str | T:
    """$DRASAT_<name> when set, else `default`."""
    return os.environ.get(f"DRASAT_{name}", default)


def env_flag(name: str, default: bool = False) -> bool:
    """The default of an on/off flag: off when $DRASAT_<name> is empty, "0" or "false", on when
    it is anything else, `default` when it is not set."""
    return env(name, "1" if default else "") not in ("", "0", "false")
