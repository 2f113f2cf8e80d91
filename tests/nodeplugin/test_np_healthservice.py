"""`DRAResourceHealth.NodeWatchResources` over the plugin's real DRA socket: the first message
lists the whole pool, a critical XID turns a GPU and its MIG devices UNHEALTHY, a client that goes
away ends its stream, and the registration announces the service as the 1.37 kubelet expects."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from npfixtures import NODE, Node
from polling import until

from drasat.nodeplugin import healthservice
from drasat.nodeplugin.gen import (
    drahealth_v1_pb2,
    drahealth_v1_pb2_grpc,
    drahealth_v1alpha1_pb2,
    drahealth_v1alpha1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from drasat.nodeplugin.registration import KubeletApi

HEALTHY = drahealth_v1_pb2.HEALTHY
UNHEALTHY = drahealth_v1_pb2.UNHEALTHY
UNKNOWN = drahealth_v1_pb2.UNKNOWN


@pytest.fixture
def plugin(node_factory: Any) -> Iterator[Any]:
    started: list[tuple[Node, grpc.Channel]] = []

    def start(fleet: str, **config: Any) -> tuple[Node, grpc.Channel]:
        node = node_factory(fleet, **config)
        node.plugin.start()
        channel = grpc.insecure_channel(f"unix://{node.config.dra_socket}")
        grpc.channel_ready_future(channel).result(timeout=10)
        started.append((node, channel))
        return node, channel

    yield start
    for node, channel in started:
        channel.close()
        node.plugin.stop(grace_s=0)


def _watch(channel: grpc.Channel, *, alpha: bool = False) -> Any:
    if alpha:
        stub: Any = drahealth_v1alpha1_pb2_grpc.DRAResourceHealthStub(channel)
        return stub.NodeWatchResources(drahealth_v1alpha1_pb2.NodeWatchResourcesRequest())
    return drahealth_v1_pb2_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
        drahealth_v1_pb2.NodeWatchResourcesRequest(), timeout=60
    )


def _by_name(message: Any) -> dict[str, Any]:
    return {d.device.device_name: d for d in message.devices}


def test_first_message_lists_every_device_of_the_pool(plugin: Any) -> None:
    node, channel = plugin("2xA100-40GB,mig=0")
    stream = _watch(channel)
    first = _by_name(next(stream))
    stream.cancel()
    names = [d.name for d in healthservice.pool_devices(node.lib)]
    assert sorted(first) == sorted(names)
    assert "gpu-0" in first and "gpu-1" in first and "cpu-fallback" in first
    migs = [n for n in first if n.startswith("gpu-0-mig-")]
    assert migs and not [n for n in first if n.startswith("gpu-1-mig-")]
    for device in first.values():
        assert device.device.pool_name == NODE
        assert device.health == HEALTHY
        assert device.last_updated_time > 0
        assert device.health_check_timeout_seconds == 3 * int(healthservice.RESEND_S)


def test_critical_xid_makes_the_gpu_and_its_mig_devices_unhealthy(plugin: Any) -> None:
    node, channel = plugin("2xA100-40GB,mig=0")
    stream = _watch(channel)
    assert _by_name(next(stream))["gpu-0"].health == HEALTHY
    node.sim.inject_xid(node.gpu(0), 13)  # application error: ignored
    node.sim.inject_xid(node.gpu(0), 48)  # double-bit ECC error
    update = _by_name(next(stream))  # the change comes at once, not after the resend interval
    stream.cancel()
    gpu0 = [n for n in update if n == "gpu-0" or n.startswith("gpu-0-mig-")]
    assert len(gpu0) > 1
    for name in gpu0:
        assert update[name].health == UNHEALTHY, name
        assert "XID 48" in update[name].message and node.gpu(0) in update[name].message
    assert update["gpu-0-mig-7g40gb-0-0"].message.startswith("parent GPU")
    others = [d for n, d in update.items() if n not in gpu0]
    assert others and all(d.health == HEALTHY and d.message == "" for d in others)


def test_lost_gpu_and_v1alpha1(plugin: Any) -> None:
    node, channel = plugin("T4 x2", kubelet_api=KubeletApi.structured)
    stream = _watch(channel, alpha=True)
    first = _by_name(next(stream))
    assert sorted(first) == ["cpu-fallback", "gpu-0", "gpu-1"]
    node.sim.inject_xid(node.gpu(1), 79)
    update = _by_name(next(stream))
    stream.cancel()
    assert update["gpu-1"].health == drahealth_v1alpha1_pb2.UNHEALTHY
    assert "fallen off the bus" in update["gpu-1"].message
    assert update["gpu-0"].health == drahealth_v1alpha1_pb2.HEALTHY


def test_a_client_that_goes_away_ends_its_stream(plugin: Any) -> None:
    node, channel = plugin("T4")
    board = node.plugin.health_board
    streams = [_watch(channel) for _ in range(3)]
    for stream in streams:
        next(stream)
    assert board.streams == 3
    streams[0].cancel()
    assert until(lambda: board.streams == 2), "the cancelled stream's handler still runs"
    other = grpc.insecure_channel(f"unix://{node.config.dra_socket}")
    gone = _watch(other)
    next(gone)
    assert board.streams == 3
    other.close()  # the client process dies: its connection goes
    assert until(lambda: board.streams == 2)
    for stream in streams[1:]:
        stream.cancel()
    assert until(lambda: board.streams == 0)
    # the freed worker threads serve new streams
    again = _watch(channel)
    assert _by_name(next(again))["gpu-0"].health == HEALTHY
    again.cancel()
    assert until(lambda: board.streams == 0)


def test_streams_beyond_the_limit_are_refused(plugin: Any) -> None:
    node, channel = plugin("T4")
    streams = [_watch(channel) for _ in range(healthservice.MAX_STREAMS)]
    for stream in streams:
        next(stream)
    refused = _watch(channel)
    with pytest.raises(grpc.RpcError) as caught:
        next(refused)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    for stream in streams:
        stream.cancel()
    assert until(lambda: node.plugin.health_board.streams == 0)


def test_plugin_stop_ends_the_stream(plugin: Any) -> None:
    node, channel = plugin("T4")
    stream = _watch(channel)
    next(stream)
    node.plugin.health_board.close()
    assert list(stream) == []  # a clean end: the kubelet reconnects after its retry period
    assert stream.code() == grpc.StatusCode.OK


def test_registration_lists_the_health_service(plugin: Any) -> None:
    node, _ = plugin("T4", kubelet_api=KubeletApi.structured)
    channel = grpc.insecure_channel(f"unix://{node.config.registration_socket}")
    try:
        stub = pluginregistration_v1_pb2_grpc.RegistrationStub(channel)
        info = stub.GetInfo(pluginregistration_v1_pb2.InfoRequest(), timeout=10)
    finally:
        channel.close()
    versions = list(info.supported_versions)
    assert versions == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]
    # exactly the gRPC service names (the kubelet's DRAResourceHealthService constants)
    for pb2 in (drahealth_v1_pb2, drahealth_v1alpha1_pb2):
        assert pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"].full_name in versions


def test_unwatched_health_is_unknown(node_factory: Any) -> None:
    node = node_factory("T4", health_events=False)
    board = node.plugin.health_board
    assert {r.name: r.health for r in board.reports()} == {
        "gpu-0": healthservice.Health.UNKNOWN,
        "cpu-fallback": healthservice.Health.HEALTHY,
    }
    node.plugin.health.failed = "NVML events not supported"
    board.watching = True
    gpu = board.reports()[0]
    assert gpu.health is healthservice.Health.UNKNOWN and "not supported" in gpu.message


def test_the_list_is_resent_while_nothing_changes(node_factory: Any, short_tmp: Path) -> None:
    node = node_factory("T4")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    healthservice.add_services(server, node.plugin.health_board, "pool-a", resend_s=0.1)
    socket = short_tmp / "health.sock"
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    channel = grpc.insecure_channel(f"unix://{socket}")
    try:
        stream = _watch(channel)
        messages = [next(stream) for _ in range(3)]
        stream.cancel()
    finally:
        channel.close()
        server.stop(0).wait()
    assert all(len(m.devices) == 2 for m in messages)
    assert {d.device.pool_name for m in messages for d in m.devices} == {"pool-a"}
    assert messages[0].devices[0].health_check_timeout_seconds == 1
