"""Run every check CI runs, in order, and stop at the first failure.

Used by `make test` (and so by `.ci/run`): format, lint, types, layering, then the test suite.
pytest's exit code 5 ("no tests collected") is treated as a failure, not a pass.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent

STEPS: list[tuple[str, list[str]]] = [
    ("format", [str(BIN / "ruff"), "format", "--check", "."]),
    ("lint", [str(BIN / "ruff"), "check", "."]),
    ("types", [str(BIN / "mypy")]),
    ("layers", [str(BIN / "lint-imports")]),
    ("tests", [str(BIN / "pytest"), *sys.argv[1:]]),
]


def main() -> int:
    for name, command in STEPS:
        started = time.monotonic()
        print(f"==> {name}: {Path(command[0]).name} {' '.join(command[1:])}")
        sys.stdout.flush()
        code = subprocess.call(command)
        elapsed = time.monotonic() - started
        if code != 0:
            reason = (
                "no tests were collected" if (name == "tests" and code == 5) else f"exit {code}"
            )
            print(f"==> {name} FAILED ({reason}) after {elapsed:.1f}s")
            return 1
        print(f"==> {name} ok ({elapsed:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
