"""The oracle, one process for the session; the differential tests' hypothesis settings.

DRASAT_ORACLE_EXAMPLES scales the number of examples per test (`oraclekit.examples`; the long
run of docs/RELIABILITY.md sets it), DRASAT_ORACLE_SEQUENCES the stateful oracle's sequences
(`oraclekit.sequences`); the defaults keep CI's run short.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The controller tests' in-memory API server (ctl_kubefake), for the stateful oracle.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "controller"))

from oraclekit import BUILD, Oracle, binary


@pytest.fixture(scope="session")
def oracle() -> Iterator[Oracle]:
    path = binary()
    if path is None:
        message = f"drasat-oracle is not built: run {BUILD} (or make test, which builds it)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    process = Oracle(path)
    yield process
    process.close()
