"""netforward: TCP between this machine's network namespace and a test node's own, both ways,
through a real network namespace (root: unshare, nsenter)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drasat.testbed.controlplane import netforward
from drasat.testbed.controlplane.realcluster import free_port

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None,
    reason="a network namespace needs root and util-linux",
)

#: A one-connection echo server: listens on 127.0.0.1:$1, prints "ready", echoes one line back.
ECHO = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); c.sendall(c.makefile("rb").readline()); c.close()
"""
#: A client: connects to 127.0.0.1:$1, sends a line, prints what comes back.
CLIENT = """
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
c.sendall(b"through the boundary\\n"); print(c.makefile("rb").readline().decode().strip())
"""


@pytest.fixture
def netns() -> Iterator[str]:
    holder = subprocess.Popen(
        ["unshare", "--net", "sh", "-c", "ip link set lo up && exec sleep 600"],
        stdout=subprocess.DEVNULL,
    )
    path = f"/proc/{holder.pid}/ns/net"
    try:
        deadline = time.monotonic() + 10
        while os.readlink(path) == os.readlink("/proc/self/ns/net"):
            assert time.monotonic() < deadline, "the namespace did not start"
            time.sleep(0.05)
        time.sleep(0.2)  # `ip link set lo up` before exec
        yield path
    finally:
        holder.kill()
        holder.wait()


def _forwarder(netns: str, *rules: str, tmp_path: Path) -> subprocess.Popen[str]:
    log = tmp_path / "netforward.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "drasat.testbed.controlplane.netforward", "--netns", netns, *rules],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 30
    while "listening" not in log.read_text():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    return process


def _echo_here() -> tuple[int, threading.Thread]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve() -> None:
        connection, _ = server.accept()
        connection.sendall(connection.makefile("rb").readline())
        connection.close()
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return int(server.getsockname()[1]), thread


@needs_root
def test_into_the_node_reaches_a_server_of_this_machine(netns: str, tmp_path: Path) -> None:
    port, served = _echo_here()
    forwarder = _forwarder(netns, "--into", f"127.0.0.1:4443=127.0.0.1:{port}", tmp_path=tmp_path)
    try:
        # Inside the node, 127.0.0.1:4443 is the forwarder; nothing of this machine's loopback.
        done = subprocess.run(
            ["nsenter", f"--net={netns}", "--", sys.executable, "-c", CLIENT, "4443"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.stdout.strip() == "through the boundary", done.stderr
        served.join(10)
    finally:
        forwarder.terminate()
        assert forwarder.wait(10) == 0


@needs_root
def test_out_of_the_node_reaches_a_server_inside_it(netns: str, tmp_path: Path) -> None:
    server = subprocess.Popen(
        ["nsenter", f"--net={netns}", "--", sys.executable, "-c", ECHO, "5555"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        here = free_port()
        forwarder = _forwarder(
            netns, "--out", f"127.0.0.1:{here}=127.0.0.1:5555", tmp_path=tmp_path
        )
        try:
            with socket.create_connection(("127.0.0.1", here), timeout=20) as client:
                client.sendall(b"through the boundary\n")
                assert client.makefile("rb").readline() == b"through the boundary\n"
        finally:
            forwarder.terminate()
            forwarder.wait(10)
    finally:
        server.kill()
        server.wait()


def test_rules_are_checked() -> None:
    rule = netforward.parse_rule("10.96.0.1:443=127.0.0.1:6443", inward=True)
    assert rule == netforward.Rule(("10.96.0.1", 443), ("127.0.0.1", 6443), True)
    for bad in ("10.96.0.1:443", "10.96.0.1=127.0.0.1:1", "a:0=b:1", "a:1=b:x"):
        with pytest.raises(ValueError, match="not"):
            netforward.parse_rule(bad, inward=False)


def _connect_through(proxy: Path, target: str) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(20)
    client.connect(str(proxy))
    client.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    answer = b""
    while not answer.endswith(b"\r\n\r\n"):
        answer += client.recv(1)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    return client


@needs_root
def test_the_proxy_connects_inside_the_node_whose_subnet_holds_the_address(
    netns: str, tmp_path: Path
) -> None:
    # The node's address on a bridge of its namespace (as a node's cni0); its echo server there.
    subprocess.run(
        ["nsenter", f"--net={netns}", "--", "sh", "-c",
         "ip link add n0 type bridge && ip addr add 10.244.7.1/24 dev n0 && ip link set n0 up"],
        check=True,
    )  # fmt: skip
    server = subprocess.Popen(
        ["nsenter", f"--net={netns}", "--", sys.executable, "-c",
         ECHO.replace('"127.0.0.1"', '"10.244.7.1"'), "5555"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    nodes = tmp_path / "nodes"
    (nodes / "node-7").mkdir(parents=True)
    (nodes / "node-7" / "network.json").write_text(
        f'{{"subnet": "10.244.7.0/24", "netns": "{netns}"}}'
    )
    sock = tmp_path / "egress.sock"
    log = tmp_path / "proxy.log"
    proxy = subprocess.Popen(
        [sys.executable, "-m", "drasat.testbed.controlplane.netforward", "--proxy", str(sock),
         "--nodes", str(nodes)],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while "listening" not in log.read_text():
            assert proxy.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        with _connect_through(sock, "10.244.7.1:5555") as client:  # inside the node
            client.sendall(b"through the proxy\n")
            assert client.makefile("rb").readline() == b"through the proxy\n"
        port, served = _echo_here()
        with _connect_through(sock, f"127.0.0.1:{port}") as client:  # no node's: here
            client.sendall(b"here\n")
            assert client.makefile("rb").readline() == b"here\n"
        served.join(10)
        assert netforward.node_netns(nodes, "10.244.8.1") is None
    finally:
        proxy.terminate()
        proxy.wait(10)
        server.kill()
        server.wait()
