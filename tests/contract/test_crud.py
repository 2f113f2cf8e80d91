"""Create, read, update, patch and delete on core kinds, custom resources and resource.k8s.io/v1,
with the server-owned metadata and the error bodies drasat's client parses (drasat/kube)."""

from __future__ import annotations

from typing import Any

import pytest
from contract import WIDGETS, Backend, raw, status_of, widget
from kubernetes.client import ApiException

RESOURCE_V1 = ("resource.k8s.io", "v1")
JSON_PATCH = "application/json-patch+json"


def _cm(name: str = "", **data: str) -> dict[str, Any]:
    meta = {"name": name} if name else {"generateName": "cm-"}
    return {"metadata": meta, "data": dict(data)}


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    # schedulerName: no scheduler of the real control plane touches these pods.
    return {
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "contract-none",
            "containers": [{"name": "c", "image": "none"}],
            **spec,
        },
    }


def test_configmap_crud_and_server_owned_metadata(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    created = core.create_namespaced_config_map(ns, _cm("a", x="1"))
    meta = created.metadata
    assert meta.uid and meta.creation_timestamp and meta.resource_version
    assert meta.namespace == ns and created.data == {"x": "1"}
    got = core.read_namespaced_config_map("a", ns)
    assert got.metadata.resource_version == meta.resource_version and got.data == {"x": "1"}
    got.data = {"x": "2"}
    replaced = core.replace_namespaced_config_map("a", ns, got)
    assert replaced.data == {"x": "2"} and replaced.metadata.uid == meta.uid
    assert int(replaced.metadata.resource_version) > int(meta.resource_version)
    core.delete_namespaced_config_map("a", ns)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_config_map("a", ns)
    assert gone.value.status == 404


def test_a_no_op_update_changes_nothing(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    created = core.create_namespaced_config_map(ns, _cm("a", x="1"))
    same = core.replace_namespaced_config_map("a", ns, created)
    assert same.metadata.resource_version == created.metadata.resource_version


def test_generate_name(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    first = core.create_namespaced_config_map(ns, _cm())
    second = core.create_namespaced_config_map(ns, _cm())
    for made in (first, second):
        assert made.metadata.name.startswith("cm-") and len(made.metadata.name) == 8
        assert made.metadata.generate_name == "cm-"
    assert first.metadata.name != second.metadata.name
    custom = backend.custom.create_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", widget())
    assert custom["metadata"]["name"].startswith("w-") and len(custom["metadata"]["name"]) == 7


def test_not_found_body(backend: Backend) -> None:
    with pytest.raises(ApiException) as caught:
        backend.core.read_namespaced_config_map("missing", backend.namespace)
    assert caught.value.status == 404
    assert status_of(caught.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'configmaps "missing" not found',
        "reason": "NotFound",
        "details": {"name": "missing", "kind": "configmaps"},
        "code": 404,
    }
    with pytest.raises(ApiException) as custom:
        backend.custom.get_namespaced_custom_object(*WIDGETS[:2], backend.namespace, "widgets", "x")
    body = status_of(custom.value)
    assert (custom.value.status, body["reason"]) == (404, "NotFound")
    assert body["message"] == 'widgets.test.drasat.io "x" not found'
    assert body["details"] == {"name": "x", "group": "test.drasat.io", "kind": "widgets"}


def test_already_exists_body(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    core.create_namespaced_config_map(ns, _cm("a"))
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_config_map(ns, _cm("a"))
    assert caught.value.status == 409
    assert status_of(caught.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'configmaps "a" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "a", "kind": "configmaps"},
        "code": 409,
    }
    backend.custom.create_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", widget("w"))
    with pytest.raises(ApiException) as custom:
        backend.custom.create_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", widget("w"))
    body = status_of(custom.value)
    assert (custom.value.status, body["reason"]) == (409, "AlreadyExists")
    assert body["message"] == 'widgets.test.drasat.io "w" already exists'
    assert body["details"] == {"name": "w", "group": "test.drasat.io", "kind": "widgets"}


def test_custom_resource_crud_defaults_and_generation(backend: Backend) -> None:
    custom, ns = backend.custom, backend.namespace
    created = custom.create_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", widget("w"))
    assert created["spec"] == {"size": 1, "color": "red"}  # the schema's default
    assert created["metadata"]["generation"] == 1
    created["metadata"]["labels"] = {"k": "v"}
    relabelled = custom.replace_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", "w", created)
    assert relabelled["metadata"]["generation"] == 1  # metadata is not the spec
    relabelled["spec"]["size"] = 2
    resized = custom.replace_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", "w", relabelled)
    assert resized["metadata"]["generation"] == 2
    listed = custom.list_namespaced_custom_object(*WIDGETS[:2], ns, "widgets")
    assert [w["metadata"]["name"] for w in listed["items"]] == ["w"]
    assert listed["kind"] == "WidgetList" and listed["apiVersion"] == "test.drasat.io/v1"
    custom.delete_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", "w")
    with pytest.raises(ApiException) as gone:
        custom.get_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", "w")
    assert gone.value.status == 404


def test_drasat_nas_round_trip(backend: Backend) -> None:
    nas = {
        "apiVersion": "nas.gpu.drasat.io/v1alpha1",
        "kind": "NodeAllocationState",
        "metadata": {"name": "node-a"},
        "spec": {
            "allocatableDevices": [
                {"gpu": {"index": 0, "uuid": "GPU-0", "memoryBytes": 1, "productName": "T4"}}
            ]
        },
        "status": "Ready",
    }
    plural = ("nas.gpu.drasat.io", "v1alpha1", backend.namespace, "nodeallocationstates")
    created = backend.custom.create_namespaced_custom_object(*plural, nas)
    assert created["spec"] == nas["spec"] and created["status"] == "Ready"
    got = backend.custom.get_namespaced_custom_object(*plural, "node-a")
    assert got["spec"] == nas["spec"]


def test_pod_crud_as_drasat_uses_it(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    created = core.create_namespaced_pod(ns, _pod("p", nodeName="node-a"))
    assert created.status.phase == "Pending" and created.spec.node_name == "node-a"
    labelled = core.patch_namespaced_pod("p", ns, {"metadata": {"labels": {"app": "x"}}})
    assert labelled.metadata.labels == {"app": "x"}
    with pytest.raises(ApiException) as immutable:
        core.patch_namespaced_pod("p", ns, {"spec": {"nodeName": "node-b"}})
    assert immutable.value.status == 422
    assert status_of(immutable.value)["details"]["causes"][0]["field"] == "spec"
    core.delete_namespaced_pod("p", ns, grace_period_seconds=0)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("p", ns)
    assert gone.value.status == 404


def test_dry_run_validates_without_storing(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    answered = core.create_namespaced_config_map(ns, _cm("a", x="1"), dry_run="All")
    assert answered.metadata.name == "a" and answered.metadata.uid
    with pytest.raises(ApiException) as absent:
        core.read_namespaced_config_map("a", ns)
    assert absent.value.status == 404
    with pytest.raises(ApiException) as invalid:
        backend.custom.create_namespaced_custom_object(
            *WIDGETS[:2], ns, "widgets", widget("w", size=0), dry_run="All"
        )
    assert invalid.value.status == 422
    core.create_namespaced_config_map(ns, _cm("a", x="1"))
    core.patch_namespaced_config_map("a", ns, {"data": {"x": "2"}}, dry_run="All")
    core.delete_namespaced_config_map("a", ns, dry_run="All")
    assert core.read_namespaced_config_map("a", ns).data == {"x": "1"}


def test_merge_patch_and_json_patch(backend: Backend) -> None:
    custom, ns = backend.custom, backend.namespace
    custom.create_namespaced_custom_object(
        *WIDGETS[:2], ns, "widgets", widget("w", extra={"a": 1, "b": 2})
    )
    # CustomObjectsApi sends a dict as a JSON merge patch: null deletes, maps merge.
    merged = custom.patch_namespaced_custom_object(
        *WIDGETS[:2], ns, "widgets", "w", {"spec": {"extra": {"a": None, "c": 3}, "size": 4}}
    )
    assert merged["spec"]["extra"] == {"b": 2, "c": 3} and merged["spec"]["size"] == 4
    # ... a list goes as a JSON patch only when told (the client would send it as a merge patch).
    patched = custom.patch_namespaced_custom_object(
        *WIDGETS[:2],
        ns,
        "widgets",
        "w",
        [
            {"op": "test", "path": "/spec/size", "value": 4},
            {"op": "replace", "path": "/spec/size", "value": 5},
            {"op": "add", "path": "/spec/parts", "value": [{"weight": 1}]},
            {"op": "remove", "path": "/spec/extra/b"},
        ],
        _content_type=JSON_PATCH,
    )
    assert patched["spec"] == {
        "size": 5,
        "color": "red",
        "extra": {"c": 3},
        "parts": [{"weight": 1}],
    }
    with pytest.raises(ApiException) as failed_test:
        custom.patch_namespaced_custom_object(
            *WIDGETS[:2],
            ns,
            "widgets",
            "w",
            [{"op": "test", "path": "/spec/size", "value": 9}],
            _content_type=JSON_PATCH,
        )
    assert failed_test.value.status == 422
    after = custom.get_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", "w")
    assert after["spec"]["size"] == 5


def test_resource_claim_v1_create_and_get(backend: Backend) -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.drasat.io"}}]
            }
        },
    }
    created = backend.custom.create_namespaced_custom_object(
        *RESOURCE_V1, backend.namespace, "resourceclaims", claim
    )
    got = backend.custom.get_namespaced_custom_object(
        *RESOURCE_V1, backend.namespace, "resourceclaims", "c"
    )
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    request = got["spec"]["devices"]["requests"][0]
    assert request["name"] == "gpu"
    assert request["exactly"]["deviceClassName"] == "gpu.drasat.io"
    assert request["exactly"] == {  # defaulted
        "deviceClassName": "gpu.drasat.io",
        "allocationMode": "ExactCount",
        "count": 1,
    }
    assert "status" not in got or got["status"] == {}


def test_which_kinds_have_a_generation(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    assert core.create_namespaced_config_map(ns, _cm("a")).metadata.generation is None
    assert core.create_namespaced_pod(ns, _pod("p", nodeName="n")).metadata.generation == 1
    core.delete_namespaced_pod("p", ns, grace_period_seconds=0)
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}]}},
    }
    created = backend.custom.create_namespaced_custom_object(
        *RESOURCE_V1, ns, "resourceclaims", claim
    )
    assert "generation" not in created["metadata"]


def test_what_a_delete_answers(backend: Backend) -> None:
    core, custom, ns = backend.core, backend.custom, backend.namespace
    created = core.create_namespaced_config_map(ns, _cm("a"))
    code, answer = raw(backend, "DELETE", f"/api/v1/namespaces/{ns}/configmaps/a")
    assert code == 200
    assert answer == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": "a", "kind": "configmaps", "uid": created.metadata.uid},
    }
    made = custom.create_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", widget("w"))
    answer = custom.delete_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", "w")
    assert answer["kind"] == "Status" and answer["details"] == {
        "name": "w",
        "group": "test.drasat.io",
        "kind": "widgets",
        "uid": made["metadata"]["uid"],
    }
    # Pods (and resource.k8s.io kinds) answer with the object; so does any kind whose object a
    # finalizer keeps.
    core.create_namespaced_pod(ns, _pod("p", nodeName="n"))
    code, pod = raw(
        backend, "DELETE", f"/api/v1/namespaces/{ns}/pods/p", query=[("gracePeriodSeconds", "0")]
    )
    assert (code, pod["kind"], pod["metadata"]["name"]) == (200, "Pod", "p")
    body = widget("held")
    body["metadata"]["finalizers"] = ["test.drasat.io/hold"]
    custom.create_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", body)
    marked = custom.delete_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", "held")
    assert marked["kind"] == "Widget" and marked["metadata"]["deletionTimestamp"]
    custom.patch_namespaced_custom_object(
        *WIDGETS[:2], ns, "widgets", "held", {"metadata": {"finalizers": None}}
    )


def test_names_and_labels_are_validated(backend: Backend) -> None:
    with pytest.raises(ApiException) as caught:
        backend.core.create_namespaced_config_map(
            backend.namespace,
            {"metadata": {"name": "Bad_Name", "labels": {"a b": "c", "k": "bad value"}}},
        )
    status = status_of(caught.value)
    assert status["message"].startswith('ConfigMap "Bad_Name" is invalid: [metadata.name: ')
    found = [
        (c["field"], c["reason"], c["message"].split(": ")[1]) for c in status["details"]["causes"]
    ]
    assert sorted(found) == [  # (the real server's order of the labels varies: Go map order)
        ("metadata.labels", "FieldValueInvalid", '"a b"'),
        ("metadata.labels", "FieldValueInvalid", '"bad value"'),
        ("metadata.name", "FieldValueInvalid", '"Bad_Name"'),
    ]
    assert status["details"]["causes"][0]["message"].startswith(
        'Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case '
        "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
    )


def test_an_event_lives_in_its_objects_namespace(backend: Backend) -> None:
    event = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "elsewhere"},
        "reason": "R",
        "message": "m",
    }
    with pytest.raises(ApiException) as caught:
        backend.core.create_namespaced_event(backend.namespace, event)
    assert status_of(caught.value)["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "elsewhere": does not match event.namespace',
            "field": "involvedObject.namespace",
        }
    ]


def test_writes_to_a_missing_object_are_404(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    for call in (
        lambda: core.replace_namespaced_config_map("none", ns, _cm("none")),
        lambda: core.patch_namespaced_config_map("none", ns, {"data": {"a": "b"}}),
        lambda: core.delete_namespaced_config_map("none", ns),
    ):
        with pytest.raises(ApiException) as caught:
            call()
        assert status_of(caught.value)["message"] == 'configmaps "none" not found'


def test_a_missing_namespace(backend: Backend) -> None:
    if backend.sim:
        # The simulator does not require namespaces to exist (docs/SIMULATED-APISERVER.md).
        backend.core.create_namespaced_config_map("no-such-namespace", _cm("a"))
        return
    with pytest.raises(ApiException) as caught:
        backend.core.create_namespaced_config_map("no-such-namespace", _cm("a"))
    assert status_of(caught.value)["message"] == 'namespaces "no-such-namespace" not found'


def test_strategic_merge_patch(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    core.create_namespaced_pod(ns, _pod("p", nodeName="node-a"))
    ready = {"type": "Ready", "status": "False"}
    scheduled = {"type": "PodScheduled", "status": "True"}
    core.patch_namespaced_pod_status("p", ns, {"status": {"conditions": [ready, scheduled]}})
    # Conditions merge by type: one changes, the other stays.
    patched = core.patch_namespaced_pod_status(
        "p", ns, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    assert {c.type: c.status for c in patched.status.conditions} == {
        "Ready": "True",
        "PodScheduled": "True",
    }
    core.delete_namespaced_pod("p", ns, grace_period_seconds=0)
    # Custom resources have no strategic merge patch.
    backend.custom.create_namespaced_custom_object(*WIDGETS[:2], ns, "widgets", widget("w"))
    code, status = raw(
        backend,
        "PATCH",
        f"/apis/test.drasat.io/v1/namespaces/{ns}/widgets/w",
        {"spec": {}},
        content_type="application/strategic-merge-patch+json",
    )
    assert (code, status["reason"]) == (415, "UnsupportedMediaType")


def test_resource_claim_v1_request_defaults(backend: Backend) -> None:
    devices = {
        "requests": [
            {"name": "all", "exactly": {"deviceClassName": "x", "allocationMode": "All"}},
            {"name": "two", "exactly": {"deviceClassName": "x", "count": 2}},
            {"name": "alt", "firstAvailable": [{"name": "a", "deviceClassName": "x"}]},
        ]
    }
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {"spec": {"devices": devices}},
    }
    created = backend.custom.create_namespaced_custom_object(
        *RESOURCE_V1, backend.namespace, "resourceclaimtemplates", template
    )
    requests = created["spec"]["spec"]["devices"]["requests"]
    assert requests[0]["exactly"] == {"deviceClassName": "x", "allocationMode": "All"}
    assert requests[1]["exactly"] == {
        "deviceClassName": "x",
        "allocationMode": "ExactCount",
        "count": 2,
    }
    assert requests[2]["firstAvailable"] == [
        {"name": "a", "deviceClassName": "x", "allocationMode": "ExactCount", "count": 1}
    ]


def test_a_container_needs_an_image(backend: Backend) -> None:
    body = _pod("p")
    del body["spec"]["containers"][0]["image"]
    with pytest.raises(ApiException) as caught:
        backend.core.create_namespaced_pod(backend.namespace, body)
    status = status_of(caught.value)
    assert status["message"] == 'Pod "p" is invalid: spec.containers[0].image: Required value'


def test_create_refuses_a_resource_version(backend: Backend) -> None:
    # As when an object read from the server is created again unchanged.
    code, status = raw(
        backend,
        "POST",
        f"/api/v1/namespaces/{backend.namespace}/configmaps",
        {"metadata": {"name": "a", "resourceVersion": "5"}},
    )
    assert (code, status["message"]) == (
        500,
        "resourceVersion should not be set on objects to be created",
    )
    assert "reason" not in status


def test_delete_collection(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    for name, labels in (("a", {"k": "v"}), ("b", {"k": "v"}), ("c", {})):
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})
    code, answer = raw(
        backend, "DELETE", f"/api/v1/namespaces/{ns}/configmaps", query=[("labelSelector", "k=v")]
    )
    assert (code, answer["kind"]) == (200, "ConfigMapList")
    assert [i["metadata"]["name"] for i in answer["items"]] == ["a", "b"]
    assert all("kind" not in i for i in answer["items"])
    assert _names_of(core.list_namespaced_config_map(ns)) == ["c"]


def _names_of(listed: Any) -> list[str]:
    return [item.metadata.name for item in listed.items]


def test_a_node_keeps_the_status_it_is_created_with(backend: Backend) -> None:
    # As a kubelet registers its Node (pods, by contrast, start Pending whatever they say).
    name = f"node-{backend.namespace}"  # cluster-scoped: unique to this test
    body = {
        "metadata": {"name": name},
        "status": {
            "capacity": {"cpu": "4", "pods": "10"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    created = backend.core.create_node(body)
    try:
        assert created.status.capacity == {"cpu": "4", "pods": "10"}
        assert [(c.type, c.status) for c in created.status.conditions] == [("Ready", "True")]
        assert created.metadata.generation is None
    finally:
        backend.core.delete_node(name)
