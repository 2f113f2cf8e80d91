"""The node plugin against the in-process API server (our CRDs validate every NAS write), and the
`drasat nodeplugin` process itself: registration and prepare over its sockets, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from npfixtures import NAMESPACE, NODE, mig_allocation

from drasat.api import crds
from drasat.kube import client as kube_client
from drasat.kube import resources
from drasat.nodeplugin import mps, nvml
from drasat.nodeplugin.gen import (
    dra_v1alpha3_pb2,
    dra_v1alpha3_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from drasat.nodeplugin.nasstore import KubeNasStore
from drasat.nodeplugin.plugin import Config, NodePlugin
from drasat.nodeplugin.state import ClaimRef
from drasat.testbed import simnvml
from drasat.testbed.sim import apiserver


@pytest.fixture
def server() -> Iterator[apiserver.ApiServer]:
    with apiserver.ApiServer.running(crds=crds.all_crds()) as running:
        yield running


@pytest.fixture
def api(server: apiserver.ApiServer) -> Iterator[kube_client.KubeClient]:
    client = kube_client.KubeClient(kube_client.configuration_for(server.url))
    yield client
    client.close()


def nas_object(api: kube_client.KubeClient) -> dict[str, Any]:
    return api.get(resources.nas(), NODE, namespace=NAMESPACE)


def allocate(api: kube_client.KubeClient, uid: str, allocation: dict[str, Any]) -> None:
    """What the controller does: write spec.allocatedClaims (a merge patch)."""
    patch = {"spec": {"allocatedClaims": {uid: allocation}}}
    api.patch(resources.nas(), NODE, patch, namespace=NAMESPACE)


def test_publish_prepare_unprepare_through_the_api_server(
    api: kube_client.KubeClient, short_tmp: Path
) -> None:
    sim = simnvml.SimulatedNvml("2xA100-40GB,mig=1")
    store = KubeNasStore(api, node=NODE, namespace=NAMESPACE)
    config = Config(
        node_name=NODE,
        namespace=NAMESPACE,
        cdi_root=short_tmp / "cdi",
        plugin_dir=short_tmp / "plugins",
        registry_dir=short_tmp / "registry",
        state_dir=short_tmp / "state",
        gc_interval_s=0,
    )
    lib = nvml.NvmlDeviceLib(sim, run=sim.run)
    plugin = NodePlugin(config, lib=lib, store=store, mps_runner=mps.RecordingRunner())
    plugin.start()
    obj = nas_object(api)
    assert obj["status"] == "Ready"
    assert len(obj["spec"]["allocatableDevices"]) == 2 + 7  # 2 GPUs, 7 MIG profiles
    gpu1 = sim.gpus[1].uuid
    allocate(api, "claim-1", mig_allocation("claim-1", gpu1, "3g.20gb", 4, 4))
    plugin.state.prepare(ClaimRef("claim-1", "default", "claim"))
    prepared = nas_object(api)["spec"]["preparedClaims"]["claim-1"]["mig"]["devices"][0]
    assert (prepared["profile"], prepared["placement"]) == ("3g.20gb", {"start": 4, "size": 4})
    plugin.state.unprepare(ClaimRef("claim-1", "default", "claim"))
    assert nas_object(api)["spec"].get("preparedClaims", {}) == {}
    plugin.stop(grace_s=0)
    assert nas_object(api)["status"] == "NotReady"


def _kubeconfig(path: Path, url: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sim", "cluster": {"server": url}}],
        "users": [{"name": "sim", "user": {"token": "t"}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sim"}}],
        "current-context": "sim",
    }
    path.write_text(json.dumps(config))
    return path


def _wait_for(path: Path, process: subprocess.Popen[bytes], timeout: float = 120) -> None:
    """Until `path` exists. Generous: a loaded 2-core machine once took the plugin's start past
    30 s. A failure says the plugin's stderr (its stacks where it hung)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(
                f"plugin exited: {process.stderr.read().decode() if process.stderr else ''}"
            )
        if time.monotonic() > deadline:
            process.send_signal(signal.SIGUSR1)  # the stacks, once drasat.stopsignals is set
            try:
                _, stderr = process.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                _, stderr = process.communicate()
            raise AssertionError(f"{path} did not appear; the plugin's stderr:\n{stderr.decode()}")
        time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes], timeout: float = 60) -> str:
    """SIGTERM, then the process's stderr once it exited; one that did not within `timeout` is
    asked for its threads' stacks (SIGUSR1), killed, and its stderr is the failure's message."""
    process.send_signal(signal.SIGTERM)
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGUSR1)
        try:
            _, stderr = process.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
        raise AssertionError(
            f"no exit {timeout:.0f}s after SIGTERM; its stderr, stacks last:\n{stderr.decode()}"
        ) from None
    return stderr.decode()


def test_drasat_nodeplugin_process(
    api: kube_client.KubeClient, server: Any, short_tmp: Path
) -> None:
    args = [
        sys.executable, "-m", "drasat", "--log-level", "INFO", "nodeplugin",
        "--node-name", NODE, "--namespace", NAMESPACE,
        "--cdi-root", str(short_tmp / "cdi"),
        "--kubelet-plugin-dir", str(short_tmp / "plugins"),
        "--kubelet-registry-dir", str(short_tmp / "registry"),
        "--state-dir", str(short_tmp / "state"),
        "--kubeconfig", str(_kubeconfig(short_tmp / "kubeconfig", server.url)),
    ]  # fmt: skip
    env = {**os.environ, "DRASAT_SIMULATE_GPUS": "2xA100-40GB,mig=1"}
    process = subprocess.Popen(args, env=env, stderr=subprocess.PIPE)
    try:
        registration_socket = short_tmp / "registry" / "gpu.drasat.io-reg.sock"
        _wait_for(registration_socket, process)
        with grpc.insecure_channel(f"unix://{registration_socket}") as channel:
            info = pluginregistration_v1_pb2_grpc.RegistrationStub(channel).GetInfo(
                pluginregistration_v1_pb2.InfoRequest(), timeout=10
            )
        gpu1 = nas_object(api)["spec"]["allocatableDevices"][1]["gpu"]["uuid"]
        allocate(api, "claim-1", mig_allocation("claim-1", gpu1, "1g.5gb", 3, 1))
        with grpc.insecure_channel(f"unix://{info.endpoint}") as channel:
            node = dra_v1alpha3_pb2_grpc.NodeStub(channel)
            claim = dra_v1alpha3_pb2.Claim(namespace="default", name="claim", uid="claim-1")
            request = dra_v1alpha3_pb2.NodePrepareResourcesRequest(claims=[claim])
            response = node.NodePrepareResources(request, timeout=30)
            assert response.claims["claim-1"].error == ""
            assert list(response.claims["claim-1"].cdi_devices) == [
                "k8s.gpu.drasat.io/claim=claim-1"
            ]
        assert (short_tmp / "cdi" / "k8s.gpu.drasat.io-claim_claim-1.json").exists()
        stderr = _stop(process)
        assert process.returncode == 0, stderr
        assert "SIMULATED GPUs (2xA100-40GB,mig=1)" in stderr  # never silently
        assert "signal 15: stopping" in stderr
        assert not registration_socket.exists()
        assert nas_object(api)["status"] == "NotReady"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_bad_simulated_fleet_is_a_usage_error(short_tmp: Path) -> None:
    args = [sys.executable, "-m", "drasat", "nodeplugin", "--node-name", "n", "--in-memory-nas",
            "--simulate-gpus", "2xZ9000", "--state-dir", str(short_tmp / "s")]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "unknown GPU product 'Z9000'" in done.stderr


class PluginProcess:
    """`drasat nodeplugin` as a child process on a persistent simulated fleet."""

    def __init__(self, tmp: Path, server_url: str, *, crash_after: str = "") -> None:
        self.tmp = tmp
        self.fleet_state = tmp / "fleet.json"
        args = [
            sys.executable, "-m", "drasat", "nodeplugin", "--node-name", NODE,
            "--namespace", NAMESPACE, "--cdi-root", str(tmp / "cdi"),
            "--kubelet-plugin-dir", str(tmp / "plugins"),
            "--kubelet-registry-dir", str(tmp / "registry"), "--state-dir", str(tmp / "state"),
            "--kubeconfig", str(_kubeconfig(tmp / "kubeconfig", server_url)),
            "--simulate-gpus", f"2xA100-40GB,mig=1,state={self.fleet_state}",
        ]  # fmt: skip
        env = {**os.environ, "DRASAT_SIM_CRASH_AFTER": crash_after}
        self.process = subprocess.Popen(args, env=env, stderr=subprocess.PIPE)
        socket = tmp / "plugins" / "gpu.drasat.io" / "dra.sock"
        _wait_for(tmp / "registry" / "gpu.drasat.io-reg.sock", self.process)
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        # a killed predecessor leaves its socket files; wait until this process answers
        grpc.channel_ready_future(self.channel).result(timeout=120)
        self.node = dra_v1alpha3_pb2_grpc.NodeStub(self.channel)

    def call(self, method: str, uid: str) -> str:
        claim = dra_v1alpha3_pb2.Claim(namespace="default", name="claim", uid=uid)
        request = getattr(dra_v1alpha3_pb2, f"{method}Request")(claims=[claim])
        return str(getattr(self.node, method)(request, timeout=30).claims[uid].error)

    def gpu_instances(self) -> list[tuple[int, int]]:
        gpu = json.loads(self.fleet_state.read_text())[1]
        return [(gi["id"], gi["start"]) for gi in gpu["gpu_instances"]]

    def killed(self) -> int:
        self.channel.close()
        return self.process.wait(timeout=30)

    def stop(self) -> int:
        self.channel.close()
        _stop(self.process)
        return self.process.returncode


def test_killed_plugin_process_mid_prepare_and_mid_unprepare(
    api: kube_client.KubeClient, server: Any, short_tmp: Path
) -> None:
    first = PluginProcess(short_tmp, server.url, crash_after="mig-created")
    gpu1 = nas_object(api)["spec"]["allocatableDevices"][1]["gpu"]["uuid"]
    allocate(api, "claim-1", mig_allocation("claim-1", gpu1, "3g.20gb", 4, 4))
    with pytest.raises(grpc.RpcError):  # the process dies inside the call
        first.call("NodePrepareResources", "claim-1")
    assert first.killed() == 137
    assert len(first.gpu_instances()) == 1  # the MIG instance it made before dying
    second = PluginProcess(short_tmp, server.url, crash_after="undo-mig")
    assert second.call("NodePrepareResources", "claim-1") == ""
    assert [start for _, start in second.gpu_instances()] == [4]  # the orphan did not stay
    with pytest.raises(grpc.RpcError):
        second.call("NodeUnprepareResources", "claim-1")
    assert second.killed() == 137
    third = PluginProcess(short_tmp, server.url)
    assert third.call("NodeUnprepareResources", "claim-1") == ""
    assert third.gpu_instances() == []
    assert "claim-1" not in nas_object(api)["spec"].get("preparedClaims", {})
    assert third.call("NodePrepareResources", "claim-1") == ""
    assert [start for _, start in third.gpu_instances()] == [4]
    assert third.stop() == 0


def test_start_waits_for_an_unreachable_api_server(server: Any, short_tmp: Path) -> None:
    api = kube_client.KubeClient(kube_client.configuration_for(server.url))
    store = KubeNasStore(api, node=NODE, namespace=NAMESPACE)
    sim = simnvml.SimulatedNvml("T4")
    config = Config(
        node_name=NODE,
        namespace=NAMESPACE,
        cdi_root=short_tmp / "cdi",
        plugin_dir=short_tmp / "plugins",
        registry_dir=short_tmp / "registry",
        state_dir=short_tmp / "state",
        gc_interval_s=0,
        health_events=False,
    )
    plugin = NodePlugin(
        config,
        lib=nvml.NvmlDeviceLib(sim, run=sim.run),
        store=store,
        mps_runner=mps.RecordingRunner(),
    )
    server.faults.down_for(1.2)  # connection refused for a while, as during an API server restart
    plugin.start()
    assert nas_object(api)["status"] == "Ready"
    plugin.stop(grace_s=0)
    api.close()


def test_an_unreadable_checkpoint_entry_is_a_warning_event_on_the_nas(
    api: kube_client.KubeClient, short_tmp: Path
) -> None:
    """Issue 23 Deliver 3: the report of an unreadable checkpoint entry reaches the API server as
    a Warning Event whose object is the node's NAS."""
    claims = short_tmp / "state" / "checkpoint" / "claims"
    claims.mkdir(parents=True)
    (claims / "0123456789abcdef0123456789abcdef.json").write_text('{"checksum": "0"')
    sim = simnvml.SimulatedNvml("T4")
    config = Config(
        node_name=NODE,
        namespace=NAMESPACE,
        cdi_root=short_tmp / "cdi",
        plugin_dir=short_tmp / "plugins",
        registry_dir=short_tmp / "registry",
        state_dir=short_tmp / "state",
        gc_interval_s=0,
        health_events=False,
    )
    store = KubeNasStore(api, node=NODE, namespace=NAMESPACE)
    lib = nvml.NvmlDeviceLib(sim, run=sim.run)
    plugin = NodePlugin(config, lib=lib, store=store, mps_runner=mps.RecordingRunner())
    plugin.start()
    try:
        events = api.list(resources.EVENTS, namespace=NAMESPACE).items
        (event,) = [e for e in events if e["reason"] == "CheckpointEntryUnreadable"]
        assert event["type"] == "Warning"
        assert event["involvedObject"]["name"] == NODE
        assert event["involvedObject"]["uid"] == nas_object(api)["metadata"]["uid"]
        assert "0123456789abcdef0123456789abcdef" in event["message"]
    finally:
        plugin.stop(grace_s=0)
