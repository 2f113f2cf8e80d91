"""MPS daemons outside the node plugin's PID namespace: the MPS host (`drasat mps-host`).

A container's init is PID 1 of its PID namespace; when it exits the kernel kills every process
of the namespace. The chart runs `drasat nodeplugin` as such an init, so MPS daemons it started
itself died with it under running workloads. These tests reproduce that with the real prepare in
a fresh PID namespace (`unshare --pid --fork --mount-proc`, as root), and show the daemons the
MPS host runs (in a namespace of its own) survive the plugin, keep their limits and are adopted
by the restarted plugin; and, in-process, that a daemon gone missing is reported and started
again from clean folders, and that the host refuses what its protocol does not allow.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from npfixtures import Node, gpu_allocation, make_node, ref

from drasat.nodeplugin import mps, mpshost
from drasat.nodeplugin.devicelib import DeviceError
from drasat.nodeplugin.gen import dra_v1alpha3_pb2, dra_v1alpha3_pb2_grpc
from drasat.testbed import simnvml

SHARES = {"share-a": (30, "8Gi"), "share-b": (50, "16Gi")}
EXCLUSIVE_PROCESS = 3  # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS


# -- in-process: the host served by a thread, the plugin's state over it ------------------------


@pytest.fixture
def hosted(short_tmp: Path) -> Iterator[tuple[Node, mpshost.MpsHost]]:
    """A node whose MPS daemons the MPS host runs (here: a thread of this process)."""
    state = short_tmp / "state"
    host = mpshost.MpsHost(state / "mps", mps.SimulatedRunner(), state / mpshost.SOCKET_NAME)
    stop = threading.Event()
    thread = threading.Thread(target=host.serve, args=(stop,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not host.socket_path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    client = mpshost.MpsHostClient(host.socket_path, program=mps.SIM_PROGRAM)
    node = make_node(short_tmp, "A100-40GB", runner=client)
    yield node, host
    stop.set()
    thread.join(timeout=30)


def _prepare_shares(node: Node) -> str:
    for uid, (compute, memory) in SHARES.items():
        share = {"compute": compute, "memory": memory}
        node.allocate(uid, gpu_allocation(uid, node.gpu(0), share=share))
        node.state.prepare(ref(uid))
    (name,) = node.state.mps.names()
    return name


def _control(pipe: Path, *commands: str) -> subprocess.CompletedProcess[str]:
    """The control client, as a container reaching the daemon through its pipe folder would."""
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": "/tmp"}
    return subprocess.run(
        list(mps.SIM_PROGRAM),
        input="".join(f"{c}\n" for c in commands),
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _limits(pipe: Path, gpu: str) -> list[str]:
    done = _control(
        pipe,
        "get_default_active_thread_percentage",
        f"get_default_device_pinned_mem_limit {gpu}",
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def _gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while mps.start_time(pid) is not None:
        assert time.monotonic() < deadline, f"pid {pid} still runs"
        time.sleep(0.02)


def _startups(node: Node, name: str) -> int:
    log = node.state.mps.daemon_dir(name) / "log" / "control.log"
    return log.read_text().count("Startup pid")


def test_the_host_runs_the_daemons_with_their_limits_and_stops_them(hosted: Any) -> None:
    node, host = hosted
    name = _prepare_shares(node)
    daemon = node.state.mps.read(name)
    assert daemon is not None and daemon.namespace == host.runner.namespace
    assert node.state.mps.alive(daemon)
    pipe = node.state.mps.daemon_dir(name) / "pipe"
    assert _limits(pipe, node.gpu(0)) == ["50", "16384M"]  # the larger share bounds both
    for uid in SHARES:
        node.state.unprepare(ref(uid))
    assert not node.state.mps.alive(daemon)
    assert node.state.mps.names() == []
    assert node.sim.gpus[0].compute_mode == 0  # back to NVML_COMPUTEMODE_DEFAULT


def test_a_daemon_gone_missing_is_reported_and_started_again(hosted: Any) -> None:
    node, _ = hosted
    name = _prepare_shares(node)
    daemon = node.state.mps.read(name)
    assert daemon is not None
    os.kill(daemon.pid, signal.SIGKILL)  # the host's namespace is this process's here
    _gone(daemon.pid)
    (line,) = node.state.ensure_mps_daemons()
    assert "): restarted: it was not running" in line and "running clients lost" in line
    assert [reason for reason, _ in node.store.events] == ["MpsDaemonRestarted"]
    metrics = node.state.metrics.registry
    assert metrics.get_sample_value(
        "drasat_nodeplugin_mps_daemon_problems_total", {"outcome": "restarted"}
    ) == 1.0  # fmt: skip
    again = node.state.mps.read(name)
    assert again is not None and again.pid != daemon.pid and node.state.mps.alive(again)
    pipe = node.state.mps.daemon_dir(name) / "pipe"
    assert _limits(pipe, node.gpu(0)) == ["50", "16384M"]
    assert _startups(node, name) == 2
    (line,) = node.state.ensure_mps_daemons()  # nothing more to say
    assert line.endswith(": adopted") and len(node.store.events) == 1


def test_a_daemon_whose_host_is_gone_is_reported_down(hosted: Any) -> None:
    node, host = hosted
    name = _prepare_shares(node)
    host.socket_path.unlink()  # the host is unreachable (its pod gone, say)
    (line,) = node.state.ensure_mps_daemons()
    assert f"MPS daemon {name}" in line and ": down: MPS host at" in line
    assert "cannot be reached" in line
    assert node.store.events[-1][0] == "MpsDaemonDown"
    metrics = node.state.metrics.registry
    assert metrics.get_sample_value("drasat_nodeplugin_mps_daemons_down") == 1.0


def test_limits_changed_through_the_pipe_are_set_again(hosted: Any) -> None:
    # A root container can speak the control protocol through its pipe folder: the plugin
    # reads the defaults back at each check and sets the recorded ones again.
    node, _ = hosted
    name = _prepare_shares(node)
    pipe = node.state.mps.daemon_dir(name) / "pipe"
    assert _control(pipe, "set_default_active_thread_percentage 100").returncode == 0
    (line,) = node.state.ensure_mps_daemons()
    assert line.endswith("): limits restored")
    assert node.store.events[-1][0] == "MpsDaemonLimitsRestored"
    assert _limits(pipe, node.gpu(0)) == ["50", "16384M"]
    assert _startups(node, name) == 1


def test_the_host_refuses_what_its_protocol_does_not_allow(hosted: Any) -> None:
    node, host = hosted
    name = _prepare_shares(node)
    assert host.socket_path.stat().st_mode & 0o777 == 0o600
    refusals = {
        "is not one of start": {"op": "exec", "argv": ["sh"]},
        "not a daemon name": {"op": "start", "name": "../../etc", "devices": ["GPU-a"]},
        "not a daemon folder": {"op": "start", "name": "mps-0123456789abcdef", "devices": ["x"]},
        "not one the host passes on": {"op": "control", "name": name, "commands": ["quit"]},
        "bad arguments": {"op": "control", "name": name, "commands": ["get_server_list $(id)"]},
        "unsafe value": {"op": "start", "name": name, "devices": ["GPU-a;reboot"]},
    }
    for why, request in refusals.items():
        answer = host.handle(request)
        assert answer["ok"] is False and why in answer["error"], (request, answer)
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(str(host.socket_path))
        conn.sendall(b"not json\n")
        assert json.loads(conn.makefile().readline()) == {
            "ok": False,
            "error": "a request is one line of JSON",
        }
    # a pid of another namespace is never the host's
    alive = {"op": "alive", "pid": os.getpid(), "started": mps.start_time(os.getpid())}
    assert host.handle({**alive, "namespace": ""}) == {"ok": True, "alive": False}
    assert host.handle({**alive, "namespace": host.runner.namespace})["alive"] is True


def test_a_daemon_started_again_gets_clean_folders(short_tmp: Path) -> None:
    """What a container left in its read-write pipe/ and shm/ is gone before a daemon is started
    again into them; a link is removed, never followed (the stand-in, like a daemon, writes its
    pid file in pipe/)."""
    node = make_node(short_tmp, "A100-40GB")
    name = _prepare_shares(node)
    daemon = node.state.mps.read(name)
    assert daemon is not None
    folder = node.state.mps.daemon_dir(name)
    host_file = short_tmp / "host-file"
    host_file.write_text("the host's\n")
    os.kill(daemon.pid, signal.SIGKILL)
    _gone(daemon.pid)
    # what a root container could do with the folders mounted read-write
    (folder / "pipe" / "nvidia-cuda-mps-control.pid").unlink()
    (folder / "pipe" / "nvidia-cuda-mps-control.pid").symlink_to(host_file)
    (folder / "pipe" / "planted").mkdir()
    (folder / "shm" / "stale").write_text("x")
    (folder / "shm" / "link").symlink_to(short_tmp)
    restarted = node.restart()
    assert any("): restarted: it was not running" in line for line in restarted.state.reconcile())
    assert host_file.read_text() == "the host's\n"
    assert sorted(p.name for p in (folder / "pipe").iterdir()) == [
        "control",
        "nvidia-cuda-mps-control.pid",
    ]
    assert not (folder / "pipe" / "nvidia-cuda-mps-control.pid").is_symlink()
    assert list((folder / "shm").iterdir()) == []
    assert short_tmp.is_dir()
    assert (folder / "shm").stat().st_mode & 0o7777 == 0o1777


# -- the real processes, each in a fresh PID namespace ------------------------------------------


def _namespaces_work() -> bool:
    if os.geteuid() != 0:
        return False
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False
    )
    return probe.returncode == 0


needs_namespaces = pytest.mark.skipif(
    not _namespaces_work(), reason="needs root and unshare --pid (a fresh PID namespace)"
)
#: A GPU with room for both shares (24 GiB together: the plugin refuses shares past its GPU).
FLEET = "A100-40GB"


class InNamespace:
    """A command as PID 1 of a fresh PID namespace (as in a container)."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log
        self.out = open(log, "ab")  # noqa: SIM115 (closed in stop)
        self.unshare = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", *argv],
            stdout=self.out,
            stderr=subprocess.STDOUT,
        )

    def init_pid(self) -> int:
        """The pid (in this namespace) of the command, PID 1 of its own."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            children = Path(f"/proc/{self.unshare.pid}/task/{self.unshare.pid}/children")
            with_pid = children.read_text().split() if children.exists() else []
            if with_pid:
                return int(with_pid[0])
            time.sleep(0.01)
        raise AssertionError(f"no PID 1 under unshare: {self.log.read_text()}")

    def wait_for(self, path: Path, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            if self.unshare.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{path} did not appear:\n{self.log.read_text()}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL its PID 1, as an OOM kill or `kubectl delete pod --force` does."""
        os.kill(self.init_pid(), signal.SIGKILL)
        assert self.unshare.wait(timeout=30) != 0
        self.out.close()

    def stop(self) -> str:
        if self.unshare.poll() is None:
            os.kill(self.init_pid(), signal.SIGTERM)
            try:
                self.unshare.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.unshare.kill()
                self.unshare.wait()
        self.out.close()
        return self.log.read_text()


def _plugin(tmp: Path, n: int, *extra: str) -> InNamespace:
    argv = [
        sys.executable, "-m", "drasat", "--log-level", "INFO", "nodeplugin",
        "--node-name", "node-1", "--in-memory-nas", "--gc-interval", "0",
        "--simulate-gpus", f"{FLEET},state={tmp / 'fleet.json'}",
        "--kubelet-plugin-dir", str(tmp / "plugins"), "--kubelet-registry-dir", str(tmp / "reg"),
        "--state-dir", str(tmp / "state"), "--cdi-root", str(tmp / "cdi"), *extra,
    ]  # fmt: skip
    (tmp / "reg" / "gpu.drasat.io-reg.sock").unlink(missing_ok=True)
    plugin = InNamespace(argv, tmp / f"plugin-{n}.log")
    plugin.wait_for(tmp / "reg" / "gpu.drasat.io-reg.sock")
    return plugin


def _host(tmp: Path) -> InNamespace:
    argv = [sys.executable, "-m", "drasat", "--log-level", "INFO", "mps-host",
            "--state-dir", str(tmp / "state"), "--simulate"]  # fmt: skip
    host = InNamespace(argv, tmp / "host.log")
    host.wait_for(tmp / "state" / mpshost.SOCKET_NAME)
    return host


def _call(tmp: Path, method: str, uid: str, handle: str = "") -> str:
    socket_path = tmp / "plugins" / "gpu.drasat.io" / "dra.sock"
    with grpc.insecure_channel(f"unix://{socket_path}") as channel:
        grpc.channel_ready_future(channel).result(timeout=120)
        claim = dra_v1alpha3_pb2.Claim(
            namespace="default", name=uid, uid=uid, resource_handle=handle
        )
        request = getattr(dra_v1alpha3_pb2, f"{method}Request")(claims=[claim])
        node = dra_v1alpha3_pb2_grpc.NodeStub(channel)
        return str(getattr(node, method)(request, timeout=60).claims[uid].error)


def _prepare_share_processes(tmp: Path) -> Path:
    """The two shares prepared through the plugin's socket; their daemon's pipe folder."""
    gpu = simnvml.SimulatedNvml(FLEET).gpus[0].uuid
    for uid, (compute, memory) in SHARES.items():
        handle = {
            "gpu": {"devices": [{"uuid": gpu}]},
            "share": {"compute": compute, "memory": memory},
        }
        assert _call(tmp, "NodePrepareResources", uid, json.dumps(handle)) == ""
    (folder,) = (tmp / "state" / "mps").iterdir()
    return folder / "pipe"


def _status(tmp: Path) -> list[dict[str, Any]]:
    argv = [sys.executable, "-m", "drasat", "mps-host", "--state-dir", str(tmp / "state")]
    done = subprocess.run([*argv, "--status"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    daemons: list[dict[str, Any]] = json.loads(done.stdout)["daemons"]
    return daemons


def _compute_mode(tmp: Path) -> int:
    return int(json.loads((tmp / "fleet.json").read_text())[0]["compute_mode"])


def _answers(pipe: Path) -> bool:
    return _control(pipe, "get_server_list").returncode == 0


@needs_namespaces
def test_in_process_daemons_die_with_the_plugins_pid_namespace(short_tmp: Path) -> None:
    """The defect, reproduced: without the MPS host, the daemons are the plugin's children in
    its PID namespace; killing its PID 1 kills them, under the shares' running workloads."""
    plugin = _plugin(short_tmp, 1)
    try:
        pipe = _prepare_share_processes(short_tmp)
        assert _answers(pipe)
        plugin.kill()
        assert not _answers(pipe)  # the daemon died with the plugin's namespace
        assert "they die when it exits" in plugin.log.read_text()  # the plugin warned
    finally:
        plugin.stop()


@needs_namespaces
def test_the_mps_hosts_daemons_outlive_the_plugin_and_are_adopted(short_tmp: Path) -> None:
    host = _host(short_tmp)
    plugins = []
    try:
        socket_flag = ("--mps-host-socket", str(short_tmp / "state" / mpshost.SOCKET_NAME))
        plugins.append(_plugin(short_tmp, 1, *socket_flag))
        pipe = _prepare_share_processes(short_tmp)
        gpu = simnvml.SimulatedNvml(FLEET).gpus[0].uuid
        assert _limits(pipe, gpu) == ["50", "16384M"]
        plugins[0].kill()  # the plugin's container ends: its whole PID namespace is killed
        assert _limits(pipe, gpu) == ["50", "16384M"]  # the daemon answers, with its limits
        assert _compute_mode(short_tmp) == EXCLUSIVE_PROCESS
        (before,) = _status(short_tmp)  # what an operator sees (kubectl exec ... --status)
        assert before["alive"] and before["name"] == pipe.parent.name
        assert before["answers"] == {
            "get_default_active_thread_percentage": "50",
            f"get_default_device_pinned_mem_limit {gpu}": "16384M",
        }
        plugins.append(_plugin(short_tmp, 2, *socket_flag))
        started = plugins[1].log.read_text()
        assert "): adopted" in started, started
        control_log = (pipe.parent / "log" / "control.log").read_text()
        assert control_log.count("Startup pid") == 1  # the same daemon, never started again
        for uid in SHARES:
            assert _call(short_tmp, "NodeUnprepareResources", uid) == ""
        assert _status(short_tmp) == []
        assert not pipe.parent.exists()  # its folders removed
        assert f"MPS daemon {pipe.parent.name} stopped" in (short_tmp / "host.log").read_text()
        assert _compute_mode(short_tmp) == 0  # NVML_COMPUTEMODE_DEFAULT
    finally:
        for plugin in plugins:
            plugin.stop()
        host.stop()


def test_the_client_says_where_the_host_should_be(short_tmp: Path) -> None:
    client = mpshost.MpsHostClient(short_tmp / "nothing.sock")
    with pytest.raises(DeviceError, match=r"MPS host at .*nothing.sock cannot be reached"):
        client.alive(mps.Process(1, "1", "pid:[1]"))
    (short_tmp / "mps" / "mps-0123456789abcdef").mkdir(parents=True)
    argv = [sys.executable, "-m", "drasat", "mps-host", "--state-dir", str(short_tmp), "--status"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0  # a folder without a record needs no host
    assert json.loads(done.stdout)["daemons"] == [
        {"name": "mps-0123456789abcdef", "record": None, "alive": False}
    ]
