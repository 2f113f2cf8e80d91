"""Colour for what the CLI prints, as kubectl and git do it: on for a terminal, off for pipes and
files, off whenever NO_COLOR is set to anything (https://no-color.org), and `--color
always|never` (the top-level flag) to decide either way."""

from __future__ import annotations

import os
from typing import Literal, TextIO

Style = Literal["error", "warning", "ok", "bold"]

_CODES: dict[Style, str] = {"error": "31", "warning": "33", "ok": "32", "bold": "1"}
#: The top-level --color flag's choice, set by drasat.cli.main before a subcommand runs.
_choice = "auto"


def choose(when: str) -> None:
    """Set the choice of `--color`: "auto" (a terminal without NO_COLOR), "always" or "never"."""
    global _choice
    _choice = when


def enabled(stream: TextIO) -> bool:
    """Whether text written to `stream` gets colour."""
    if _choice != "auto":
        return _choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint(text: str, style: Style, stream: TextIO) -> str:
    """`text` in `style` when `stream` gets colour, else `text` unchanged."""
    if not enabled(stream):
        return text
    return f"\033[{_CODES[style]}m{text}\033[0m"
