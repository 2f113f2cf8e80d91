"""Many clients at once: optimistic concurrency loses no update, watches see every change."""

from __future__ import annotations

import concurrent.futures
import time

import kubernetes
from kubernetes.client import ApiException

from drasat.sim import apiserver

WRITERS = 8
INCREMENTS = 10


def increment(core: kubernetes.client.CoreV1Api) -> int:
    """Read-modify-write with retry on 409; the number of conflicts met."""
    conflicts = 0
    while True:
        current = core.read_namespaced_config_map("counter", "default")
        current.data = {"n": str(int(current.data["n"]) + 1)}
        try:
            core.replace_namespaced_config_map("counter", "default", current)
            return conflicts
        except ApiException as exc:
            assert exc.status == 409
            conflicts += 1


def test_concurrent_read_modify_write_loses_nothing(server: apiserver.ApiServer) -> None:
    configuration = kubernetes.client.Configuration(host=server.url)
    with kubernetes.client.ApiClient(configuration) as client:
        core = kubernetes.client.CoreV1Api(client)
        start = core.create_namespaced_config_map(
            "default", {"metadata": {"name": "counter"}, "data": {"n": "0"}}
        ).metadata.resource_version
        with concurrent.futures.ThreadPoolExecutor(WRITERS) as pool:
            futures = [pool.submit(increment, core) for _ in range(WRITERS * INCREMENTS)]
            conflicts = sum(f.result(timeout=60) for f in futures)
        final = core.read_namespaced_config_map("counter", "default")
        assert final.data == {"n": str(WRITERS * INCREMENTS)}
        watch = kubernetes.watch.Watch()
        values = []
        for event in watch.stream(
            core.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=10
        ):
            values.append(int(event["raw_object"]["data"]["n"]))
            if len(values) == WRITERS * INCREMENTS:
                watch.stop()
        # Every successful write is one MODIFIED event, in order.
        assert values == list(range(1, WRITERS * INCREMENTS + 1))
        assert conflicts >= 0


def test_responses_do_not_wait_for_delayed_acks(core: kubernetes.client.CoreV1Api) -> None:
    # Without TCP_NODELAY each response stalls ~40 ms (Nagle + delayed ACK): 20 reads > 0.8 s.
    core.create_namespaced_config_map("default", {"metadata": {"name": "m"}})
    started = time.monotonic()
    for _ in range(20):
        core.read_namespaced_config_map("m", "default")
    assert time.monotonic() - started < 0.5
