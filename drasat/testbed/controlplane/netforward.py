"""TCP forwarding between this machine's network namespace and a test node's own.

`python -m drasat.testbed.controlplane.netforward --netns /proc/PID/ns/net RULE...` listens and
connects on both sides of the boundary from one process: a socket belongs to the network namespace
its creator was in when it was made, so the process enters the node's namespace (setns) only to
make that side's sockets, and returns. Rules:

- `--into ADDR:PORT=ADDR:PORT`: listen inside the node, connect out here (the API server, which
  listens on this machine's loopback, for the node's kubelet, its host-network pods and, at the
  `kubernetes` Service's address, its pods);
- `--out ADDR:PORT=ADDR:PORT`: listen here, connect inside the node (the kubelet's port, for the
  API server's `kubectl logs`/`exec`).

Bytes are relayed as they come, each direction closed on its own (TLS runs end to end through
it). Nothing is changed in either namespace's network configuration: no route, no NAT rule, no
interface. Prints `listening` once every listener is bound, and runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

CLONE_NEWNET = 0x40000000
T = TypeVar("T")


@dataclass(frozen=True)
class Rule:
    listen: tuple[str, int]
    connect: tuple[str, int]
    inward: bool  # listen inside the node, connect here


def parse_rule(text: str, *, inward: bool) -> Rule:
    """`ADDR:PORT=ADDR:PORT` -> Rule; ValueError naming the bad part."""
    listen, sep, connect = text.partition("=")
    if not sep:
        raise ValueError(f"{text!r}: not LISTEN=CONNECT")
    return Rule(_address(listen), _address(connect), inward)


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r}: not ADDR:PORT")
    return host, int(port)


def _setns(fd: int) -> None:
    if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns into a network namespace failed")


class Namespaces:
    """This process's own network namespace and the node's, entered only to make a socket."""

    def __init__(self, node_netns: str) -> None:
        self.node = os.open(node_netns, os.O_RDONLY | os.O_CLOEXEC)
        self.own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)

    def in_node(self, make: Callable[[], T]) -> T:
        _setns(self.node)
        try:
            return make()
        finally:
            _setns(self.own)


def _listener(address: tuple[str, int]) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def _serve(rule: Rule, spaces: Namespaces) -> asyncio.Server:
    loop = asyncio.get_running_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        def outbound() -> socket.socket:
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)

        sock = outbound() if rule.inward else spaces.in_node(outbound)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, rule.connect)
        except OSError:
            sock.close()
            writer.close()
            return
        far_reader, far_writer = await asyncio.open_connection(sock=sock)
        await asyncio.gather(_relay(reader, far_writer), _relay(far_reader, writer))
        for w in (writer, far_writer):
            w.close()

    listening = (
        spaces.in_node(lambda: _listener(rule.listen)) if rule.inward else _listener(rule.listen)
    )
    return await asyncio.start_server(handle, sock=listening)


async def run(rules: list[Rule], node_netns: str) -> None:
    spaces = Namespaces(node_netns)
    servers = [await _serve(rule, spaces) for rule in rules]
    print("listening", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="netforward", description=__doc__.split("\n\n")[0])
    parser.add_argument("--netns", required=True, help="the node's network namespace (a path)")
    parser.add_argument("--into", action="append", default=[], metavar="LISTEN=CONNECT")
    parser.add_argument("--out", action="append", default=[], metavar="LISTEN=CONNECT")
    args = parser.parse_args(argv)
    try:
        rules = [parse_rule(r, inward=True) for r in args.into]
        rules += [parse_rule(r, inward=False) for r in args.out]
    except ValueError as error:
        parser.error(str(error))
    try:
        asyncio.run(run(rules, args.netns))
    except OSError as error:
        print(f"netforward: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
