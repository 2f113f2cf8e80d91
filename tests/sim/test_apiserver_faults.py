"""Each injected fault, observed through the unmodified client."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import kubernetes
import pytest
import urllib3
from kubernetes.client import ApiException

from drasat.testbed.sim import apiserver, faults


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def faulty(clock: FakeClock) -> Iterator[apiserver.ApiServer]:
    with apiserver.ApiServer.running(fault_config=faults.Faults(clock=clock)) as running:
        yield running


@pytest.fixture
def core(faulty: apiserver.ApiServer) -> Iterator[kubernetes.client.CoreV1Api]:
    configuration = kubernetes.client.Configuration(host=faulty.url)
    configuration.retries = 0  # see each refused request, not urllib3's retries
    with kubernetes.client.ApiClient(configuration) as client:
        yield kubernetes.client.CoreV1Api(client)


def make(core: kubernetes.client.CoreV1Api, name: str) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": name}})


def label(core: kubernetes.client.CoreV1Api, name: str, value: str) -> None:
    core.patch_namespaced_config_map(name, "default", {"metadata": {"labels": {"v": value}}})


def test_conflict_on_first_write_of_each_object(
    faulty: apiserver.ApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    make(core, "a")
    make(core, "b")
    faulty.faults.conflict_on_first_write()
    for name in ("a", "b"):
        with pytest.raises(ApiException) as caught:
            label(core, name, "1")
        assert caught.value.status == 409
        label(core, name, "1")  # the retry goes through
        label(core, name, "2")  # and so do later writes
    assert faulty.faults.injected["conflict"] == 2


def test_conflict_per_version_meets_every_change(
    faulty: apiserver.ApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    make(core, "a")
    faulty.faults.conflict_on_first_write(per_version=True)
    for value in ("1", "2"):
        with pytest.raises(ApiException):
            label(core, "a", value)
        label(core, "a", value)
    assert core.read_namespaced_config_map("a", "default").metadata.labels == {"v": "2"}


def test_conflicts_limited_to_some_resources(
    faulty: apiserver.ApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    make(core, "a")
    faulty.faults.conflict_on_first_write(plurals=["pods"])
    label(core, "a", "1")


def test_down_for_a_window_answers_503(
    faulty: apiserver.ApiServer, clock: FakeClock, core: kubernetes.client.CoreV1Api
) -> None:
    faulty.faults.down_for(5.0)
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_config_map("default")
    assert caught.value.status == 503
    clock.now = 5.1
    assert core.list_namespaced_config_map("default").items == []


def test_down_reset_drops_connections(
    faulty: apiserver.ApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    faulty.faults.down(mode=faults.DOWN_RESET)
    with pytest.raises(urllib3.exceptions.HTTPError):
        core.list_namespaced_config_map("default")
    faulty.faults.up()
    assert core.list_namespaced_config_map("default").items == []


def test_latency(faulty: apiserver.ApiServer, core: kubernetes.client.CoreV1Api) -> None:
    faulty.faults.set_latency(0.3)
    started = time.monotonic()
    core.list_namespaced_config_map("default")
    assert time.monotonic() - started >= 0.3
    faulty.faults.reset()
    started = time.monotonic()
    core.list_namespaced_config_map("default")
    assert time.monotonic() - started < 0.3


def test_watch_dropped_after_n_events(
    faulty: apiserver.ApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    for name in ("a", "b", "c"):
        make(core, name)
    faulty.faults.drop_watches_after(2)
    seen = []
    with pytest.raises(urllib3.exceptions.ProtocolError):
        for event in kubernetes.watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=10
        ):
            seen.append(event["raw_object"]["metadata"]["name"])
    assert seen == ["a", "b"]
    assert faulty.faults.injected["watch-dropped"] == 1


def test_watch_dropped_at_once(
    faulty: apiserver.ApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    make(core, "a")
    faulty.faults.drop_watches_after(0)
    with pytest.raises(urllib3.exceptions.ProtocolError):
        list(
            kubernetes.watch.Watch().stream(
                core.list_namespaced_config_map, "default", timeout_seconds=10
            )
        )


def test_drop_watches_now_closes_open_watches(
    faulty: apiserver.ApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            list(
                kubernetes.watch.Watch().stream(
                    core.list_namespaced_config_map,
                    "default",
                    resource_version="1",
                    timeout_seconds=60,
                )
            )
        except urllib3.exceptions.HTTPError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert faulty.wait_for_watches(1)
    faulty.faults.drop_watches_now()
    reader.join(timeout=5)
    assert not reader.is_alive() and len(outcome) == 1


def test_client_gone_mid_request_is_not_a_server_error(
    faulty: apiserver.ApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    faulty.faults.set_latency(0.2)
    host, port = faulty.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        raw.sendall(b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\n\r\n")
        # Reset at once (linger 0), so the answer is written to a closed connection.
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    faulty.faults.reset()
    assert core.list_namespace().items  # still serving
    assert faulty.internal_errors == []
