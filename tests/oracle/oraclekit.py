"""A client of drasat-oracle (e2e/oracle, built by scripts/oracle-build): kube-scheduler's DRA
allocator and CEL selectors from k8s.io/dynamic-resource-allocation v0.37.2, one process per test
session, spoken to in JSON lines (one request, one answer; many per process start).

`binary()` finds it: $DRASAT_ORACLE_BIN (the folder scripts/oracle-build prints, as
scripts/check.py exports it), else the build's default cache folder. Without it the tests that need
it fail under CI (CI=true) and skip elsewhere, naming the command that builds it.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import threading
from collections.abc import Sequence
from typing import Any

Obj = dict[str, Any]

BUILD = "scripts/oracle-build"
NAME = "drasat-oracle"


def binary() -> pathlib.Path | None:
    """The oracle's executable, or None when it is not built."""
    folder = os.environ.get("DRASAT_ORACLE_BIN")
    if folder is None:
        cache = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
        folder = str(pathlib.Path(cache) / "drasat" / "oracle-v0.37.2")
    found = pathlib.Path(folder) / NAME
    return found if found.is_file() and os.access(found, os.X_OK) else None


class OracleError(RuntimeError):
    """The oracle refused a request (a malformed one) or died."""


class Oracle:
    """One running oracle; requests are answered in order (thread-safe)."""

    def __init__(self, path: pathlib.Path) -> None:
        self._process = subprocess.Popen(
            [str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._lock = threading.Lock()
        self.requests = 0

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=30)

    def ask(self, request: Obj) -> Obj:
        return self.ask_many([request])[0]

    def ask_many(self, requests: Sequence[Obj]) -> list[Obj]:
        """Answers to several requests, written in one go (one round trip per batch)."""
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        with self._lock:
            stdin.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in requests))
            stdin.flush()
            answers = []
            for _ in requests:
                line = stdout.readline()
                if not line:
                    raise OracleError(f"{NAME} exited ({self._process.poll()})")
                answers.append(json.loads(line))
            self.requests += len(requests)
        for request, answer in zip(requests, answers, strict=True):
            refused = str(answer.get("error", "")).startswith(("bad request", "panic"))
            if refused and answer.get("allocated") is None:
                raise OracleError(f"{NAME} on {request.get('op')}: {answer['error']}")
        return answers

    # -- operations ------------------------------------------------------------------------------

    def cel(self, expression: str, devices: Sequence[tuple[str, Obj]]) -> Obj:
        """{"compiles": bool, "compileError": str, "results": [{"match": bool} | {"error": str}]}:
        the selector on each (driver, v1 Device) as the allocator evaluates it."""
        return self.ask(
            {
                "op": "cel",
                "expression": expression,
                "devices": [{"driver": d, "device": device} for d, device in devices],
            }
        )

    def allocate(
        self,
        node: str,
        slices: Sequence[Obj],
        classes: Sequence[Obj],
        claim: Obj,
        allocated: Sequence[Obj] = (),
    ) -> Obj:
        """{"allocated": bool, "allocation": AllocationResult, "error": str, "failedOnNode":
        bool}: what the structured allocator does with one claim on `node`."""
        return self.ask(_allocation_request("allocate", node, slices, classes, claim, allocated))

    def allocate_pod(
        self,
        node: str,
        slices: Sequence[Obj],
        classes: Sequence[Obj],
        claims: Sequence[Obj],
        allocated: Sequence[Obj] = (),
    ) -> Obj:
        """{"allocated": bool, "allocations": [AllocationResult], "error": str, "failedOnNode":
        bool}: a pod's claims allocated together on `node`, as kube-scheduler's Filter does."""
        return self.ask(pod_request(node, slices, classes, claims, allocated))

    def validate(
        self,
        node: str,
        slices: Sequence[Obj],
        classes: Sequence[Obj],
        claim: Obj,
        allocation: Obj,
        allocated: Sequence[Obj] = (),
    ) -> Obj:
        """{"valid": bool, "reason": str}: whether upstream accepts `allocation` for the claim."""
        return self.ask(validate_request(node, slices, classes, claim, allocation, allocated))


def _allocation_request(
    op: str,
    node: str,
    slices: Sequence[Obj],
    classes: Sequence[Obj],
    claim: Obj,
    allocated: Sequence[Obj],
) -> Obj:
    return {
        "op": op,
        "node": node,
        "slices": list(slices),
        "classes": list(classes),
        "claim": claim,
        "allocated": list(allocated),
    }


def pod_request(
    node: str,
    slices: Sequence[Obj],
    classes: Sequence[Obj],
    claims: Sequence[Obj],
    allocated: Sequence[Obj] = (),
) -> Obj:
    """The request of `Oracle.allocate_pod` (for `ask_many`)."""
    request = _allocation_request("allocate", node, slices, classes, {}, allocated)
    del request["claim"]
    request["claims"] = list(claims)
    return request


def validate_request(
    node: str,
    slices: Sequence[Obj],
    classes: Sequence[Obj],
    claim: Obj,
    allocation: Obj,
    allocated: Sequence[Obj] = (),
) -> Obj:
    """The request of `Oracle.validate` (for `ask_many`)."""
    request = _allocation_request("validate", node, slices, classes, claim, allocated)
    request["allocation"] = allocation
    return request


def examples(default: int) -> int:
    """Examples for one differential test: `default` (CI's short run), or
    $DRASAT_ORACLE_EXAMPLES (the long run of docs/RELIABILITY.md)."""
    return int(os.environ.get("DRASAT_ORACLE_EXAMPLES", default))


def sequences(default: int) -> int:
    """Sequences of the stateful oracle (test_oracle_stateful.py): `default` (CI's short run),
    or $DRASAT_ORACLE_SEQUENCES (its long run, docs/RELIABILITY.md). Apart from
    $DRASAT_ORACLE_EXAMPLES: a sequence is a cluster and a dozen steps, each a controller cycle
    and a few oracle calls, a hundred times an example of the one-claim properties."""
    return int(os.environ.get("DRASAT_ORACLE_SEQUENCES", default))
