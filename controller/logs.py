"""Structured logs: one JSON object a line, with the record's extra fields (claim, node, ...)."""

from __future__ import annotations

import json
import logging
from typing import Any

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "msg", ...extra}`; exceptions as `error`."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD:
                out[key] = value if isinstance(value, (str, int, float, bool)) else str(value)
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, sort_keys=False)


def use_json(root: logging.Logger | None = None) -> None:
    """Switch every handler of the root logger to JSON lines."""
    for handler in (root or logging.getLogger()).handlers:
        handler.setFormatter(JsonFormatter())
