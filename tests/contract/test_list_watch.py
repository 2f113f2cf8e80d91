"""Lists (resourceVersion, label and field selectors, paging) and watches (from a resourceVersion,
selectors, 410 Expired), through the official client and through drasat's own client."""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest
from contract import WIDGETS, Backend, raw, status_of, widget
from kubernetes.client import ApiException

from drasat.kube import errors as kube_errors
from drasat.kube import resources
from drasat.kube.client import KubeClient


def _names(listed: Any) -> list[str]:
    items = listed["items"] if isinstance(listed, dict) else listed.items
    return [i["metadata"]["name"] if isinstance(i, dict) else i.metadata.name for i in items]


def _labelled(backend: Backend) -> None:
    for name, labels in (
        ("a", {"tier": "gpu", "zone": "1"}),
        ("b", {"tier": "cpu", "zone": "2"}),
        ("c", {"tier": "gpu"}),
        ("d", {}),
    ):
        backend.core.create_namespaced_config_map(
            backend.namespace, {"metadata": {"name": name, "labels": labels}}
        )


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=gpu", ["a", "c"]),
        ("tier==gpu", ["a", "c"]),
        ("tier!=gpu", ["b", "d"]),
        ("tier in (cpu,gpu)", ["a", "b", "c"]),
        ("tier notin (gpu)", ["b", "d"]),
        ("zone", ["a", "b"]),
        ("!zone", ["c", "d"]),
        ("tier=gpu,zone", ["a"]),
        ("tier=gpu,!zone", ["c"]),
        ("zone in (1,2),tier notin (cpu)", ["a"]),
    ],
)
def test_label_selectors(backend: Backend, selector: str, expected: list[str]) -> None:
    _labelled(backend)
    listed = backend.core.list_namespaced_config_map(backend.namespace, label_selector=selector)
    assert _names(listed) == expected


def test_bad_label_selector_is_400(backend: Backend) -> None:
    with pytest.raises(ApiException) as caught:
        backend.core.list_namespaced_config_map(backend.namespace, label_selector="tier in gpu")
    assert caught.value.status == 400
    assert status_of(caught.value)["reason"] == "BadRequest"


def test_label_selectors_on_custom_resources(backend: Backend) -> None:
    custom, ns = backend.custom, backend.namespace
    for name, labels in (("x", {"k": "1"}), ("y", {"k": "2"}), ("z", {})):
        body = widget(name)
        body["metadata"]["labels"] = labels
        custom.create_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", body)
    listed = custom.list_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", label_selector="k")
    assert _names(listed) == ["x", "y"]
    listed = custom.list_namespaced_custom_object(
        *WIDGETS[:2], ns, "widgets", label_selector="k notin (1)"
    )
    assert _names(listed) == ["y", "z"]


def test_field_selectors_on_metadata(backend: Backend) -> None:
    _labelled(backend)
    core, ns = backend.core, backend.namespace
    assert _names(core.list_namespaced_config_map(ns, field_selector="metadata.name=b")) == ["b"]
    assert _names(core.list_namespaced_config_map(ns, field_selector="metadata.name!=b")) == [
        "a",
        "c",
        "d",
    ]
    both = core.list_namespaced_config_map(
        ns, field_selector=f"metadata.name=c,metadata.namespace={ns}"
    )
    assert _names(both) == ["c"]
    custom = backend.custom
    custom.create_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", widget("x"))
    custom.create_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", widget("y"))
    listed = custom.list_namespaced_custom_object(
        *WIDGETS[:2], ns, "widgets", field_selector="metadata.name=y"
    )
    assert _names(listed) == ["y"]


def test_unsupported_field_selector_is_400(backend: Backend) -> None:
    with pytest.raises(ApiException) as caught:
        backend.core.list_namespaced_config_map(backend.namespace, field_selector="data.x=1")
    assert caught.value.status == 400
    body = status_of(caught.value)
    assert body["reason"] == "BadRequest"
    assert "data.x" in body["message"]


def test_pod_field_selectors(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    for name, node in (("p1", "node-a"), ("p2", "node-b"), ("p3", None)):
        spec: dict[str, Any] = {
            "schedulerName": "contract-none",
            "containers": [{"name": "c", "image": "none"}],
        }
        if node:
            spec["nodeName"] = node
        core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": spec})
    core.patch_namespaced_pod_status("p2", ns, {"status": {"phase": "Running"}})
    assert _names(core.list_namespaced_pod(ns, field_selector="spec.nodeName=node-a")) == ["p1"]
    assert _names(core.list_namespaced_pod(ns, field_selector="spec.nodeName=")) == ["p3"]
    assert _names(core.list_namespaced_pod(ns, field_selector="spec.nodeName!=")) == ["p1", "p2"]
    assert _names(core.list_namespaced_pod(ns, field_selector="status.phase=Running")) == ["p2"]
    assert _names(
        core.list_namespaced_pod(ns, field_selector="status.phase!=Running,spec.nodeName!=")
    ) == ["p1"]
    for name in ("p1", "p2", "p3"):
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)


def test_list_resource_version_moves_with_writes(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    first = core.list_namespaced_config_map(ns).metadata.resource_version
    created = core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    second = core.list_namespaced_config_map(ns).metadata.resource_version
    assert int(first) < int(created.metadata.resource_version) <= int(second)
    # "Not older than" the list's version: served, with the write in it.
    again = core.list_namespaced_config_map(
        ns, resource_version=second, resource_version_match="NotOlderThan"
    )
    assert _names(again) == ["a"]


def test_list_exactly_at_the_current_resource_version(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    now = core.list_namespaced_config_map(ns).metadata.resource_version
    exact = core.list_namespaced_config_map(
        ns, resource_version=now, resource_version_match="Exact"
    )
    assert _names(exact) == ["a"] and exact.metadata.resource_version == now


def test_list_exactly_at_an_older_resource_version(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    before = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    if backend.sim:
        # The simulator keeps only the current state: what the real server answers once etcd
        # compacted that version.
        with pytest.raises(ApiException) as caught:
            core.list_namespaced_config_map(
                ns, resource_version=before, resource_version_match="Exact"
            )
        assert (caught.value.status, status_of(caught.value)["reason"]) == (410, "Expired")
    else:
        old = core.list_namespaced_config_map(
            ns, resource_version=before, resource_version_match="Exact"
        )
        assert _names(old) == [] and old.metadata.resource_version == before


def test_list_resource_version_errors(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    with pytest.raises(ApiException) as no_version:
        core.list_namespaced_config_map(ns, resource_version_match="Exact")
    assert no_version.value.status == 422
    assert status_of(no_version.value)["details"]["causes"][0]["field"] == "resourceVersionMatch"
    now = int(core.list_namespaced_config_map(ns).metadata.resource_version)
    with pytest.raises(ApiException) as future:  # the real server waits 3 s for it first
        core.list_namespaced_config_map(
            ns, resource_version=str(now + 10**6), resource_version_match="NotOlderThan"
        )
    assert future.value.status == 504
    assert status_of(future.value)["message"].startswith(
        f"Timeout: Too large resource version: {now + 10**6}, current: "
    )
    with pytest.raises(ApiException) as garbage:
        core.list_namespaced_config_map(ns, resource_version="abc")
    assert garbage.value.status == 400


def test_list_pages_with_limit_and_continue(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    for name in "abcde":
        core.create_namespaced_config_map(ns, {"metadata": {"name": name}})
    first = core.list_namespaced_config_map(ns, limit=2)
    assert _names(first) == ["a", "b"]
    assert first.metadata._continue and first.metadata.remaining_item_count == 3
    second = core.list_namespaced_config_map(ns, limit=2, _continue=first.metadata._continue)
    assert _names(second) == ["c", "d"] and second.metadata.remaining_item_count == 1
    last = core.list_namespaced_config_map(ns, limit=2, _continue=second.metadata._continue)
    assert _names(last) == ["e"]
    assert not last.metadata._continue and last.metadata.remaining_item_count is None


def test_paging_with_a_selector_pages_the_matches(backend: Backend) -> None:
    _labelled(backend)
    core, ns = backend.core, backend.namespace
    first = core.list_namespaced_config_map(ns, limit=1, label_selector="tier=gpu")
    assert _names(first) == ["a"] and first.metadata._continue
    rest = core.list_namespaced_config_map(
        ns, limit=1, label_selector="tier=gpu", _continue=first.metadata._continue
    )
    assert _names(rest) == ["c"]


def test_bad_continue_token_is_400(backend: Backend) -> None:
    with pytest.raises(ApiException) as caught:
        backend.core.list_namespaced_config_map(backend.namespace, limit=1, _continue="bogus")
    assert caught.value.status == 400


# --- watches ----------------------------------------------------------------------------------


def _watch(backend: Backend, count: int, **kwargs: Any) -> list[tuple[str, str]]:
    """The first `count` events of a configmap watch in the backend's namespace (5 s at most)."""
    seen = []
    watch = kubernetes.watch.Watch()
    for event in watch.stream(
        backend.core.list_namespaced_config_map, backend.namespace, timeout_seconds=5, **kwargs
    ):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == count:
            watch.stop()
    return seen


def test_watch_from_a_resource_version_replays_later_changes(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    core.create_namespaced_config_map(ns, {"metadata": {"name": "before"}})
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    core.patch_namespaced_config_map("a", ns, {"data": {"x": "1"}})
    core.delete_namespaced_config_map("a", ns)
    assert _watch(backend, 3, resource_version=since) == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]


def test_watch_without_resource_version_starts_with_the_current_objects(
    backend: Backend,
) -> None:
    core, ns = backend.core, backend.namespace
    core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})
    assert sorted(_watch(backend, 2)) == [("ADDED", "a"), ("ADDED", "b")]
    assert sorted(_watch(backend, 2, resource_version="0")) == [("ADDED", "a"), ("ADDED", "b")]


def test_watch_follows_objects_into_and_out_of_a_selector(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    core.patch_namespaced_config_map("a", ns, {"metadata": {"labels": {"on": "yes"}}})
    core.patch_namespaced_config_map("a", ns, {"data": {"x": "1"}})
    core.patch_namespaced_config_map("a", ns, {"metadata": {"labels": {"on": None}}})
    assert _watch(backend, 3, resource_version=since, label_selector="on=yes") == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]


def test_watch_custom_objects_from_a_resource_version(backend: Backend) -> None:
    custom, ns = backend.custom, backend.namespace
    since = custom.list_namespaced_custom_object(*WIDGETS[:2], ns, "widgets")["metadata"][
        "resourceVersion"
    ]
    custom.create_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", widget("w"))
    custom.patch_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", "w", {"spec": {"size": 2}})
    seen = []
    watch = kubernetes.watch.Watch()
    for event in watch.stream(
        custom.list_namespaced_custom_object,
        *WIDGETS[:2],
        ns,
        "widgets",
        resource_version=since,
        timeout_seconds=5,
    ):
        seen.append((event["type"], event["object"]["spec"]["size"]))
        if len(seen) == 2:
            watch.stop()
    assert seen == [("ADDED", 1), ("MODIFIED", 2)]


def test_expired_watch_raises_410_from_the_official_client(backend: Backend) -> None:
    expired = backend.expired_widget_resource_version()
    with pytest.raises(ApiException) as caught:
        for _ in kubernetes.watch.Watch().stream(
            backend.custom.list_namespaced_custom_object,
            *WIDGETS[:2],
            backend.namespace,
            "widgets",
            resource_version=expired,
            timeout_seconds=5,
        ):
            pass
    assert caught.value.status == 410
    assert caught.value.reason.startswith(f"Expired: too old resource version: {expired} (")


def test_expired_watch_is_an_error_event_on_the_wire(backend: Backend) -> None:
    """An HTTP 200 whose one event is an ERROR with a 410 Status, as informers see it."""
    expired = backend.expired_widget_resource_version()
    response = backend.custom.list_namespaced_custom_object(
        *WIDGETS[:2],
        backend.namespace,
        "widgets",
        watch=True,
        resource_version=expired,
        timeout_seconds=5,
        _preload_content=False,
    )
    try:
        assert response.status == 200
        lines = [line for line in response.data.decode().splitlines() if line.strip()]
    finally:
        response.release_conn()
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event["type"] == "ERROR"
    status = event["object"]
    assert (status["kind"], status["status"], status["code"], status["reason"]) == (
        "Status",
        "Failure",
        410,
        "Expired",
    )
    assert status["message"].startswith(f"too old resource version: {expired} (")


# --- drasat's own client (drasat.kube) against both ---------------------------------------------


@pytest.fixture
def kube(backend: Backend) -> Any:
    client = KubeClient(backend.api.configuration)
    yield client
    client.close()


def test_drasat_client_maps_every_error_it_parses(backend: Backend, kube: KubeClient) -> None:
    cms, ns = resources.CONFIGMAPS, backend.namespace
    with pytest.raises(kube_errors.NotFound) as missing:
        kube.get(cms, "a", namespace=ns)
    assert missing.value.reason == "NotFound" and 'configmaps "a" not found' in str(missing.value)
    created = kube.create(cms, {"metadata": {"name": "a", "namespace": ns}, "data": {"x": "1"}})
    with pytest.raises(kube_errors.AlreadyExists):
        kube.create(cms, {"metadata": {"name": "a", "namespace": ns}})
    kube.patch(cms, "a", {"data": {"x": "2"}}, namespace=ns)
    with pytest.raises(kube_errors.Conflict) as stale:
        kube.replace(cms, created)
    assert type(stale.value) is kube_errors.Conflict and stale.value.reason == "Conflict"
    widgets = resources.Resource(*WIDGETS, "Widget")
    with pytest.raises(kube_errors.Invalid) as invalid:
        kube.create(widgets, widget("w", size=0), namespace=ns)
    assert "spec.size" in str(invalid.value)
    expired = backend.expired_widget_resource_version()
    stream = kube.watch(widgets, namespace=ns, resource_version=expired, timeout_seconds=5)
    with pytest.raises(kube_errors.Gone) as gone:
        list(stream)
    assert gone.value.reason == "Expired"


def test_drasat_client_list_and_watch(backend: Backend, kube: KubeClient) -> None:
    cms, ns = resources.CONFIGMAPS, backend.namespace
    kube.create(cms, {"metadata": {"name": "a", "namespace": ns, "labels": {"k": "v"}}})
    listed = kube.list(cms, namespace=ns, label_selector="k=v")
    assert [o["metadata"]["name"] for o in listed.items] == ["a"]
    assert listed.items[0]["kind"] == "ConfigMap" and listed.resource_version
    kube.patch(cms, "a", [{"op": "add", "path": "/data", "value": {"x": "1"}}], namespace=ns)
    stream = kube.watch(cms, namespace=ns, resource_version=listed.resource_version)
    try:
        event = next(e for e in stream if e.type != "BOOKMARK")
    finally:
        stream.close()
    assert (event.type, event.object["data"]) == ("MODIFIED", {"x": "1"})


def test_list_items_of_builtin_kinds_carry_no_kind(backend: Backend) -> None:
    ns = backend.namespace
    backend.core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    backend.custom.create_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", widget("w"))
    _, configmaps = raw(backend, "GET", f"/api/v1/namespaces/{ns}/configmaps")
    assert (configmaps["kind"], configmaps["apiVersion"]) == ("ConfigMapList", "v1")
    assert "kind" not in configmaps["items"][0] and "apiVersion" not in configmaps["items"][0]
    _, widgets = raw(backend, "GET", f"/apis/test.drasat.io/v1/namespaces/{ns}/widgets")
    assert widgets["kind"] == "WidgetList"
    item = widgets["items"][0]
    assert (item["kind"], item["apiVersion"]) == ("Widget", "test.drasat.io/v1")
    # A watch event's object carries them, built-in or not.
    response = backend.core.list_namespaced_config_map(
        ns, watch=True, timeout_seconds=1, _preload_content=False
    )
    try:
        first = json.loads(response.data.decode().splitlines()[0])
    finally:
        response.release_conn()
    assert (first["object"]["kind"], first["object"]["apiVersion"]) == ("ConfigMap", "v1")


def test_continue_pages(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    for name in "ace":
        core.create_namespaced_config_map(ns, {"metadata": {"name": name}})
    first = core.list_namespaced_config_map(ns, limit=1)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})
    rest = core.list_namespaced_config_map(ns, limit=10, _continue=first.metadata._continue)
    if backend.sim:
        # Later pages show the current state (docs/SIMULATED-APISERVER.md).
        assert _names(rest) == ["b", "c", "e"]
    else:
        # Later pages show the state of the first page's resourceVersion.
        assert _names(rest) == ["c", "e"]
        assert rest.metadata.resource_version == first.metadata.resource_version


def test_resource_slice_field_selectors(backend: Backend) -> None:
    """As drasat's node plugin lists its own slices (`spec.nodeName=...,spec.driver=...`)."""
    node = f"node-{backend.namespace}"  # slices are cluster-scoped: unique to this test
    made = []
    for name, driver, on in (
        ("a", "gpu.drasat.io", node),
        ("b", "other.example.com", node),
        ("c", "gpu.drasat.io", f"{node}-2"),
    ):
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{name}"},
            "spec": {
                "driver": driver,
                "nodeName": on,
                "pool": {"name": on, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}],
            },
        }
        made.append(
            backend.custom.create_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceslices", body
            )["metadata"]["name"]
        )
    try:
        listed = backend.custom.list_cluster_custom_object(
            "resource.k8s.io",
            "v1",
            "resourceslices",
            field_selector=f"spec.nodeName={node},spec.driver=gpu.drasat.io",
        )
        assert _names(listed) == [f"{node}-a"]
        assert listed["items"][0]["spec"]["devices"] == [{"name": "gpu-0"}]
    finally:
        for name in made:
            backend.custom.delete_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceslices", name
            )


def test_watch_from_a_bad_resource_version(backend: Backend) -> None:
    code, status = raw(
        backend,
        "GET",
        f"/api/v1/namespaces/{backend.namespace}/configmaps",
        query=[("watch", "1"), ("resourceVersion", "abc")],
    )
    assert code == 500 and status["message"].startswith('resourceVersion: Invalid value: "abc"')
