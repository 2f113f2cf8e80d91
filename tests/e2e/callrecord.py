"""Record the DRA calls a node plugin receives: `python callrecord.py RECORD DRASAT-ARGS...` runs
`drasat DRASAT-ARGS` (the node plugin) with a gRPC server interceptor on every server it starts
that appends one JSON line to RECORD per NodePrepareResources or NodeUnprepareResources request,
as it arrives: the method and its claims (namespace, name, uid) in the request's order.

The kubelet contract tests (`test_e2e_kubelet_contract.py`) run the same plugin under the real
and the simulated kubelet this way and compare what each asked of it. Nothing in the plugin
changes: the interceptor wraps the handlers of `grpc.server`, which the plugin calls.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

#: The calls recorded: a kubelet's prepare and unprepare, in any service version.
METHODS = ("NodePrepareResources", "NodeUnprepareResources")


@dataclass(frozen=True)
class Call:
    """One request the plugin received."""

    method: str  # NodePrepareResources or NodeUnprepareResources
    service: str  # e.g. v1.DRAPlugin
    claims: tuple[tuple[str, str, str], ...]  # (namespace, name, uid) in the request's order


def program(record: Path) -> tuple[str, ...]:
    """The interpreter arguments that run drasat with its calls recorded in `record` (in place
    of `-m drasat`)."""
    return (str(Path(__file__).resolve()), str(record))


def calls(record: Path) -> list[Call]:
    """The recorded calls, in the order they arrived."""
    if not record.exists():
        return []
    found = []
    for line in record.read_text().splitlines():
        if line:
            entry = json.loads(line)
            claims = tuple(tuple(c) for c in entry["claims"])
            found.append(Call(entry["method"], entry["service"], claims))  # type: ignore[arg-type]
    return found


class Recorder(grpc.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, record: Path) -> None:
        self._record = record
        self._lock = threading.Lock()

    def _write(self, full_method: str, request: Any) -> None:
        service, _, method = full_method.strip("/").rpartition("/")
        claims = [[c.namespace, c.name, c.uid] for c in request.claims]
        line = json.dumps({"method": method, "service": service, "claims": claims})
        with self._lock, self._record.open("a") as out:
            out.write(line + "\n")

    def intercept_service(
        self, continuation: Callable[[Any], Any], details: grpc.HandlerCallDetails
    ) -> Any:
        handler = continuation(details)
        full_method = str(details.method)
        if handler is None or handler.unary_unary is None:
            return handler
        if full_method.rpartition("/")[2] not in METHODS:
            return handler
        inner = handler.unary_unary

        def recorded(request: Any, context: Any) -> Any:
            self._write(full_method, request)
            return inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            recorded,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _install(record: Path) -> None:
    original = grpc.server

    def server(*args: Any, **kwargs: Any) -> Any:
        kwargs["interceptors"] = [*(kwargs.get("interceptors") or ()), Recorder(record)]
        return original(*args, **kwargs)

    grpc.server = server


if __name__ == "__main__":
    _install(Path(sys.argv[1]))
    from drasat.cli import main

    sys.exit(main.main(sys.argv[2:]))
