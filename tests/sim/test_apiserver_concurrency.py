"""Many clients at once: optimistic concurrency loses no update, watches see every change."""

from __future__ import annotations

import concurrent.futures
import random
import time
from typing import Any

import kubernetes
from kubernetes.client import ApiException

from drasat.testbed.sim import apiserver

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


def churn(core: kubernetes.client.CoreV1Api, seed: int) -> None:
    """Create, update and delete config maps in a fixed pseudo-random order."""
    rng = random.Random(seed)
    for step in range(30):
        name = f"m{rng.randrange(6)}"
        try:
            if rng.random() < 0.4:
                core.create_namespaced_config_map("default", {"metadata": {"name": name}})
            elif rng.random() < 0.6:
                core.patch_namespaced_config_map(name, "default", {"data": {"step": str(step)}})
            else:
                core.delete_namespaced_config_map(name, "default")
        except ApiException as exc:
            assert exc.status in (404, 409)


def test_watch_from_list_rebuilds_the_final_state(server: apiserver.ApiServer) -> None:
    configuration = kubernetes.client.Configuration(host=server.url)
    with kubernetes.client.ApiClient(configuration) as client:
        core = kubernetes.client.CoreV1Api(client)
        start = core.list_namespaced_config_map("default").metadata.resource_version
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            for future in [pool.submit(churn, core, seed) for seed in range(4)]:
                future.result(timeout=60)
        final = core.list_namespaced_config_map("default")
        seen: dict[str, dict[str, Any]] = {}
        watch = kubernetes.watch.Watch()
        if int(final.metadata.resource_version) > int(start):
            for event in watch.stream(
                core.list_namespaced_config_map,
                "default",
                resource_version=start,
                timeout_seconds=10,
            ):
                obj = event["raw_object"]
                if event["type"] == "DELETED":
                    seen.pop(obj["metadata"]["name"], None)
                else:
                    seen[obj["metadata"]["name"]] = obj
                if obj["metadata"]["resourceVersion"] == final.metadata.resource_version:
                    watch.stop()
        expected = {m.metadata.name: m.metadata.resource_version for m in final.items}
        assert {n: o["metadata"]["resourceVersion"] for n, o in seen.items()} == expected
