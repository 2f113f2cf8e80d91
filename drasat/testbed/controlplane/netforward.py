"""TCP between this machine's network namespace and the test nodes' own, without touching the
network configuration of either (no route, no NAT rule, no interface here).

A socket belongs to the network namespace its creator was in when it was made: this process
enters a node's namespace (setns) only to make that side's sockets, and returns. Two modes:

- `--netns /proc/PID/ns/net RULE...`, one process per node, listens on both sides of its
  boundary. `--into ADDR:PORT=ADDR:PORT` listens inside the node and connects out here (the API
  server, which listens on this machine's loopback, for the node's kubelet and host-network pods,
  and at the `kubernetes` Service's address for its pods); `--out` listens here and connects
  inside the node.
- `--proxy SOCKET --nodes DIR`, one process per cluster: an HTTP CONNECT proxy on a unix socket,
  the API server's egress to the cluster (`--egress-selector-config-file`, as with Konnectivity):
  `CONNECT ADDR:PORT` is connected inside the node whose subnet holds ADDR (its kubelet, its
  pods), as `DIR/<node>/network.json` says, and here for any other address.

Bytes are relayed as they come, each direction closed on its own (TLS runs end to end through
it). Prints `listening` once every listener is bound, and runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import ipaddress
import json
import os
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

DESCRIPTION = "TCP between this machine's network namespace and the test nodes' own."
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


def in_netns(path: str, make: Callable[[], T]) -> T:
    """`make()` run inside the network namespace at `path` (its sockets stay there)."""
    target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(target)
        try:
            return make()
        finally:
            _setns(own)
    finally:
        os.close(target)
        os.close(own)


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


def node_netns(nodes: Path, address: str) -> str | None:
    """The network namespace of the node whose subnet holds `address` (the `network.json` of
    each node's folder: `subnet`, `netns`), or None for this machine's."""
    try:
        wanted = ipaddress.ip_address(address)
    except ValueError:
        return None
    for record in sorted(nodes.glob("*/network.json")):
        try:
            network = json.loads(record.read_text())
            if wanted in ipaddress.ip_network(network["subnet"]):
                return str(network["netns"])
        except (OSError, ValueError, KeyError):
            continue
    return None


async def _proxy(socket_path: str, nodes: Path) -> asyncio.Server:
    loop = asyncio.get_running_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = (await reader.readline()).decode(errors="replace").split()
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass  # the request's headers
        try:
            if len(request) != 3 or request[0] != "CONNECT":
                raise ValueError("not a CONNECT request")
            host, port = _address(request[1].replace("[", "").replace("]", ""))
        except ValueError:
            writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            writer.close()
            return
        netns = node_netns(nodes, host)
        sock = in_netns(netns, _tcp) if netns else _tcp()
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, (host, port))
        except OSError as error:
            sock.close()
            writer.write(f"HTTP/1.1 502 Bad Gateway\r\n\r\n{error}".encode())
            writer.close()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        far_reader, far_writer = await asyncio.open_connection(sock=sock)
        await asyncio.gather(_relay(reader, far_writer), _relay(far_reader, writer))
        for w in (writer, far_writer):
            w.close()

    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)
    return await asyncio.start_unix_server(handle, path=socket_path)


def _tcp() -> socket.socket:
    return socket.socket(socket.AF_INET, socket.SOCK_STREAM)


async def _until_stopped(servers: list[asyncio.Server]) -> None:
    print("listening", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


async def run(rules: list[Rule], node_netns: str) -> None:
    spaces = Namespaces(node_netns)
    await _until_stopped([await _serve(rule, spaces) for rule in rules])


async def run_proxy(socket_path: str, nodes: Path) -> None:
    await _until_stopped([await _proxy(socket_path, nodes)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="netforward", description=DESCRIPTION)
    parser.add_argument("--netns", help="the node's network namespace (a path)")
    parser.add_argument("--into", action="append", default=[], metavar="LISTEN=CONNECT")
    parser.add_argument("--out", action="append", default=[], metavar="LISTEN=CONNECT")
    parser.add_argument("--proxy", metavar="SOCKET", help="serve HTTP CONNECT on this socket")
    parser.add_argument("--nodes", type=Path, help="with --proxy: the nodes' folders")
    args = parser.parse_args(argv)
    if bool(args.proxy) == bool(args.netns) or bool(args.proxy) != bool(args.nodes):
        parser.error("give --netns with rules, or --proxy with --nodes")
    try:
        rules = [parse_rule(r, inward=True) for r in args.into]
        rules += [parse_rule(r, inward=False) for r in args.out]
    except ValueError as error:
        parser.error(str(error))
    try:
        if args.proxy:
            asyncio.run(run_proxy(args.proxy, args.nodes))
        else:
            asyncio.run(run(rules, args.netns))
    except OSError as error:
        print(f"netforward: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
