"""List + watch with resourceVersion through `kubernetes.watch.Watch().stream`."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from kubernetes.client import ApiException

from drasat.testbed.sim import apiserver


def config_map(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def take(
    stream: Iterator[dict[str, Any]], watch: kubernetes.watch.Watch, count: int
) -> list[tuple[str, str]]:
    """The first `count` events as (type, name); stops the watch after them."""
    seen = []
    for event in stream:
        seen.append((event["type"], event["raw_object"]["metadata"].get("name", "")))
        if len(seen) == count:
            watch.stop()
    return seen


def test_watch_from_list_resource_version_sees_only_later_changes(
    core: kubernetes.client.CoreV1Api,
) -> None:
    core.create_namespaced_config_map("default", config_map("before"))
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", config_map("a"))
    core.patch_namespaced_config_map("a", "default", {"data": {"k": "v"}})
    core.delete_namespaced_config_map("a", "default")
    watch = kubernetes.watch.Watch()
    stream = watch.stream(
        core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=10
    )
    assert take(stream, watch, 3) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


def test_watch_without_resource_version_starts_with_current_state(
    core: kubernetes.client.CoreV1Api,
) -> None:
    core.create_namespaced_config_map("default", config_map("x"))
    core.create_namespaced_config_map("other", config_map("y"))
    watch = kubernetes.watch.Watch()
    stream = watch.stream(core.list_namespaced_config_map, "default", timeout_seconds=10)
    events = []
    for event in stream:
        events.append(event)
        watch.stop()
    assert events[0]["type"] == "ADDED"
    assert isinstance(events[0]["object"], kubernetes.client.V1ConfigMap)
    assert events[0]["object"].metadata.name == "x"


def test_watch_follows_selectors(core: kubernetes.client.CoreV1Api) -> None:
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", config_map("m", app="a"))
    core.create_namespaced_config_map("default", config_map("n", app="b"))
    core.patch_namespaced_config_map("m", "default", {"metadata": {"labels": {"app": "b"}}})
    core.patch_namespaced_config_map("n", "default", {"metadata": {"labels": {"app": "a"}}})
    watch = kubernetes.watch.Watch()
    stream = watch.stream(
        core.list_namespaced_config_map,
        "default",
        resource_version=rv,
        label_selector="app=a",
        timeout_seconds=10,
    )
    # m leaves the selector (DELETED for this watch), n enters it (ADDED).
    assert take(stream, watch, 3) == [("ADDED", "m"), ("DELETED", "m"), ("ADDED", "n")]


def test_watch_custom_objects_across_namespaces(
    custom: kubernetes.client.CustomObjectsApi,
) -> None:
    rv = custom.list_cluster_custom_object("test.drasat.io", "v1", "widgets")["metadata"][
        "resourceVersion"
    ]
    for namespace in ("a", "b"):
        widget = {
            "apiVersion": "test.drasat.io/v1",
            "kind": "Widget",
            "metadata": {"name": f"w-{namespace}"},
            "spec": {"size": 1},
        }
        custom.create_namespaced_custom_object("test.drasat.io", "v1", namespace, "widgets", widget)
    watch = kubernetes.watch.Watch()
    stream = watch.stream(
        custom.list_cluster_custom_object,
        "test.drasat.io",
        "v1",
        "widgets",
        resource_version=rv,
        timeout_seconds=10,
    )
    assert take(stream, watch, 2) == [("ADDED", "w-a"), ("ADDED", "w-b")]


def test_watch_ends_at_timeout_with_bookmark(core: kubernetes.client.CoreV1Api) -> None:
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    started = time.monotonic()
    events = list(
        kubernetes.watch.Watch().stream(
            core.list_namespaced_config_map,
            "default",
            resource_version=rv,
            timeout_seconds=1,
            allow_watch_bookmarks=True,
        )
    )
    assert 0.9 <= time.monotonic() - started < 5
    assert [e["type"] for e in events] == ["BOOKMARK"]
    assert events[0]["raw_object"]["metadata"]["resourceVersion"] == rv


def test_idle_watch_gets_periodic_bookmarks(
    server: apiserver.ApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    server.bookmark_interval = 0.1
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "elsewhere"},
            "spec": {"containers": [{"name": "c", "image": "none"}]},
        },
    )
    watch = kubernetes.watch.Watch()
    for event in watch.stream(
        core.list_namespaced_config_map,
        "default",
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=10,
    ):
        assert event["type"] == "BOOKMARK"
        # The bookmark moves past the pod's change, which this watch does not show.
        assert int(event["raw_object"]["metadata"]["resourceVersion"]) > int(rv)
        watch.stop()


def test_watch_event_arrives_while_waiting(core: kubernetes.client.CoreV1Api) -> None:
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    watch = kubernetes.watch.Watch()
    stream = watch.stream(
        core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=10
    )
    core.create_namespaced_config_map("default", config_map("late"))
    assert take(stream, watch, 1) == [("ADDED", "late")]


@pytest.fixture
def small_history() -> Iterator[apiserver.ApiServer]:
    with apiserver.ApiServer.running(history=3) as running:
        yield running


def test_too_old_resource_version_is_410(small_history: apiserver.ApiServer) -> None:
    configuration = kubernetes.client.Configuration(host=small_history.url)
    with kubernetes.client.ApiClient(configuration) as client:
        core = kubernetes.client.CoreV1Api(client)
        rv = core.list_namespaced_config_map("default").metadata.resource_version
        for index in range(5):
            core.create_namespaced_config_map("default", config_map(f"m{index}"))
        with pytest.raises(ApiException) as caught:
            list(
                kubernetes.watch.Watch().stream(
                    core.list_namespaced_config_map,
                    "default",
                    resource_version=rv,
                    timeout_seconds=5,
                )
            )
        assert caught.value.status == 410
        # A resourceVersion still in the history works.
        recent = core.list_namespaced_config_map("default").metadata.resource_version
        core.create_namespaced_config_map("default", config_map("fresh"))
        watch = kubernetes.watch.Watch()
        stream = watch.stream(
            core.list_namespaced_config_map, "default", resource_version=recent, timeout_seconds=5
        )
        assert take(stream, watch, 1) == [("ADDED", "fresh")]


def test_stop_ends_open_watches_promptly() -> None:
    server = apiserver.ApiServer().start()
    configuration = kubernetes.client.Configuration(host=server.url)
    with kubernetes.client.ApiClient(configuration) as client:
        core = kubernetes.client.CoreV1Api(client)
        stream = kubernetes.watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version="1", timeout_seconds=60
        )
        reader = threading.Thread(target=list, args=(stream,), daemon=True)
        reader.start()
        assert server.wait_for_watches(1, timeout=10)
        server.stop()
        reader.join(timeout=5)
        assert not reader.is_alive()
