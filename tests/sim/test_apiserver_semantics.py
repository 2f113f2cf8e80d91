"""Validation, finalizers, the status subresource and selectors, as the real server has them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import kubernetes
import pytest
from classic_objects import SEMANTIC_RULE_CASES, claim
from kubernetes.client import ApiException

from drasat.testbed.sim import apiserver

RC = ("resource.k8s.io", "v1alpha2")
NAS = ("nas.gpu.drasat.io", "v1alpha1")


def causes(exc: ApiException) -> dict[str, str]:
    status = json.loads(exc.body)
    assert status["reason"] == "Invalid"
    return {c["field"]: c["message"] for c in status["details"]["causes"]}


def create_claim(custom: kubernetes.client.CustomObjectsApi, body: dict[str, Any]) -> Any:
    return custom.create_namespaced_custom_object(*RC, "default", "resourceclaims", body)


# --- validation -------------------------------------------------------------------------------


def test_unknown_field_in_builtin_spec_is_400(custom: kubernetes.client.CustomObjectsApi) -> None:
    # As fieldValidation=Strict on the real server: the decoder refuses it (tests/contract).
    with pytest.raises(ApiException) as caught:
        create_claim(custom, claim("c", bogus=1))
    assert caught.value.status == 400
    assert json.loads(caught.value.body)["message"] == (
        'ResourceClaim in version "v1alpha2" cannot be handled as a ResourceClaim: '
        'strict decoding error: unknown field "spec.bogus"'
    )


def test_wrong_type_in_builtin_is_422(custom: kubernetes.client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as caught:
        create_claim(custom, claim("c", resourceClassName=7))
    assert "spec.resourceClassName" in causes(caught.value)


def test_unknown_fields_dropped_with_field_validation_ignore(
    custom: kubernetes.client.CustomObjectsApi,
) -> None:
    # Strict is this server's default so that tests catch typos; Ignore and Warn drop them.
    created = custom.create_namespaced_custom_object(
        *RC, "default", "resourceclaims", claim("c", bogus=1), field_validation="Ignore"
    )
    assert created["spec"] == {
        "resourceClassName": "gpu.drasat.io",
        "allocationMode": "WaitForFirstConsumer",
    }
    widget = {
        "apiVersion": "test.drasat.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 1, "surprise": True, "extra": {"kept": 1}},
    }
    created = custom.create_namespaced_custom_object(
        "test.drasat.io", "v1", "default", "widgets", widget, field_validation="Warn"
    )
    assert created["spec"] == {"size": 1, "color": "red", "extra": {"kept": 1}}
    patched = custom.patch_namespaced_custom_object(
        "test.drasat.io",
        "v1",
        "default",
        "widgets",
        "w",
        {"spec": {"typo": 1}},
        field_validation="Ignore",
    )
    assert "typo" not in patched["spec"]
    assert patched["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_invalid_name_is_422(core: kubernetes.client.CoreV1Api) -> None:
    body = {
        "metadata": {"name": "Not_Valid"},
        "spec": {"containers": [{"name": "c", "image": "none"}]},
    }
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", body)
    assert "metadata.name" in causes(caught.value)


def test_pod_claims_in_both_shapes_are_accepted(
    server: apiserver.ApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    # Kubernetes 1.30 shape (spec.resourceClaims[].source), which client v37 refuses to send.
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "g"}]}}],
            "resourceClaims": [{"name": "g", "source": {"resourceClaimTemplateName": "t"}}],
        },
    }
    request = urllib.request.Request(
        f"{server.url}/api/v1/namespaces/default/pods",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
    # The 1.31+ shape the client speaks.
    body["metadata"]["name"] = "q"
    body["spec"]["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": "t"}]
    created = core.create_namespaced_pod("default", body)
    assert created.spec.resource_claims[0].resource_claim_template_name == "t"


def test_errors_come_from_the_closest_schema_version(server: apiserver.ApiServer) -> None:
    # The typed client checks types itself, so send the bad pod as raw JSON.
    body = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "restartPolicy": 7}],
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}],
        },
    }
    request = urllib.request.Request(
        f"{server.url}/api/v1/namespaces/default/pods",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    status = json.loads(caught.value.read())
    # 1.34's schema knows resourceClaimTemplateName; only the wrong type is reported.
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.containers[0].restartPolicy"]


def test_custom_object_against_crd_schema(custom: kubernetes.client.CustomObjectsApi) -> None:
    widget = {
        "apiVersion": "test.drasat.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 0, "color": "green", "surprise": True, "extra": {"any": 1}},
    }
    with pytest.raises(ApiException) as unknown:
        custom.create_namespaced_custom_object("test.drasat.io", "v1", "default", "widgets", widget)
    assert unknown.value.status == 400  # extra preserves fields; surprise is unknown
    assert 'unknown field "spec.surprise"' in json.loads(unknown.value.body)["message"]
    del widget["spec"]["surprise"]
    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object("test.drasat.io", "v1", "default", "widgets", widget)
    found = causes(caught.value)
    # An unsupported value stops the CEL rules, which the server says without a field path.
    assert set(found) == {"spec.size", "spec.color", "<nil>"}
    widget["spec"] = {}
    with pytest.raises(ApiException) as missing:
        custom.create_namespaced_custom_object("test.drasat.io", "v1", "default", "widgets", widget)
    assert causes(missing.value)["spec.size"] == "Required value"


def test_cel_rules_of_crds_are_enforced(custom: kubernetes.client.CustomObjectsApi) -> None:
    params = {
        "apiVersion": "gpu.drasat.io/v1alpha1",
        "kind": "GpuClaimParameters",
        "metadata": {"name": "p"},
        "spec": {"count": 2, "share": {}},
    }
    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object(
            "gpu.drasat.io", "v1alpha1", "default", "gpuclaimparameters", params
        )
    assert causes(caught.value) == {
        "spec": "Invalid value: a share claim takes part of one GPU: count must be 1",
        "spec.share": "Invalid value: a share needs compute, memory or both",
    }
    widget = {
        "apiVersion": "test.drasat.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 1, "parts": [{"weight": 1}, {"weight": 0}]},
    }
    with pytest.raises(ApiException) as items:
        custom.create_namespaced_custom_object("test.drasat.io", "v1", "default", "widgets", widget)
    assert causes(items.value) == {"spec.parts[1]": "Invalid value: parts weigh something"}


def test_cel_rules_can_be_switched_off(
    server: apiserver.ApiServer, custom: kubernetes.client.CustomObjectsApi
) -> None:
    # As for objects stored before a rule existed, which a controller must still cope with.
    server.api.validator.cel_rules = False
    widget = {
        "apiVersion": "test.drasat.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 1, "parts": [{"weight": 0}]},
    }
    custom.create_namespaced_custom_object("test.drasat.io", "v1", "default", "widgets", widget)


def test_generated_crd_rejects_bad_nas(custom: kubernetes.client.CustomObjectsApi) -> None:
    nas = {
        "apiVersion": "nas.gpu.drasat.io/v1alpha1",
        "kind": "NodeAllocationState",
        "metadata": {"name": "n1"},
        "spec": {"allocatableDevices": "not-a-list"},
    }
    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object(*NAS, "drasat", "nodeallocationstates", nas)
    assert "spec.allocatableDevices" in causes(caught.value)


def test_defaults_apply_on_update_too(custom: kubernetes.client.CustomObjectsApi) -> None:
    created = create_claim(custom, claim("c"))
    body = claim("c")  # no allocationMode: defaulted again, so the spec did not change
    body["metadata"]["labels"] = {"x": "y"}
    updated = custom.replace_namespaced_custom_object(*RC, "default", "resourceclaims", "c", body)
    assert updated["spec"] == created["spec"] and updated["metadata"]["labels"] == {"x": "y"}


def test_claim_status_rules(custom: kubernetes.client.CustomObjectsApi) -> None:
    create_claim(custom, claim("c"))
    reserve = {"status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}}
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object_status(*RC, "default", "resourceclaims", "c", reserve)
    assert "status.reservedFor" in causes(caught.value)
    with pytest.raises(ApiException) as spec_change:
        custom.patch_namespaced_custom_object(
            *RC, "default", "resourceclaims", "c", {"spec": {"resourceClassName": "other"}}
        )
    assert causes(spec_change.value) == {"spec": "Invalid value: field is immutable"}


@pytest.mark.parametrize(
    ("plural", "body", "field"),
    [
        *SEMANTIC_RULE_CASES,
        (
            "resourceclaims",
            dict(
                claim("c"),
                metadata={
                    "name": "c",
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p"}],
                },
            ),
            "metadata.ownerReferences.uid",
        ),
    ],
)
def test_semantic_rules_of_builtin_kinds(
    custom: kubernetes.client.CustomObjectsApi, plural: str, body: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object(*RC, "default", plural, body)
    assert field in causes(caught.value)


def test_resource_handle_data_is_limited(custom: kubernetes.client.CustomObjectsApi) -> None:
    create_claim(custom, claim("c"))
    status = {
        "status": {
            "driverName": "gpu.drasat.io",
            "allocation": {
                "resourceHandles": [{"driverName": "gpu.drasat.io", "data": "x" * (16 * 1024 + 1)}]
            },
        }
    }
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object_status(*RC, "default", "resourceclaims", "c", status)
    found = causes(caught.value)
    assert found["status.allocation.resourceHandles[0].data"].startswith("Too long")


def test_lease_duration_must_be_positive(api_client: kubernetes.client.ApiClient) -> None:
    coordination = kubernetes.client.CoordinationV1Api(api_client)
    lease = {"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 0}}
    with pytest.raises(ApiException) as caught:
        coordination.create_namespaced_lease("default", lease)
    assert "spec.leaseDurationSeconds" in causes(caught.value)


def test_event_lives_in_its_objects_namespace(core: kubernetes.client.CoreV1Api) -> None:
    event = {
        "metadata": {"name": "e"},
        "reason": "Failed",
        "message": "m",
        "involvedObject": {"kind": "ResourceClaim", "name": "c", "namespace": "team-a"},
    }
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_event("default", event)
    assert "involvedObject.namespace" in causes(caught.value)
    core.create_namespaced_event("team-a", event)


# --- finalizers -------------------------------------------------------------------------------


def test_delete_with_finalizer_marks_then_removal_deletes(
    custom: kubernetes.client.CustomObjectsApi,
) -> None:
    body = claim("c")
    body["metadata"]["finalizers"] = ["gpu.drasat.io/deletion-protection"]
    create_claim(custom, body)
    marked = custom.delete_namespaced_custom_object(*RC, "default", "resourceclaims", "c")
    assert marked["metadata"]["deletionTimestamp"]
    still = custom.get_namespaced_custom_object(*RC, "default", "resourceclaims", "c")
    assert still["metadata"]["deletionTimestamp"] == marked["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(
            *RC,
            "default",
            "resourceclaims",
            "c",
            {"metadata": {"finalizers": ["gpu.drasat.io/deletion-protection", "new"]}},
        )
    assert "metadata.finalizers" in causes(caught.value)
    custom.patch_namespaced_custom_object(
        *RC, "default", "resourceclaims", "c", {"metadata": {"finalizers": None}}
    )
    with pytest.raises(ApiException) as gone:
        custom.get_namespaced_custom_object(*RC, "default", "resourceclaims", "c")
    assert gone.value.status == 404


def test_owner_deletion_cascades(
    core: kubernetes.client.CoreV1Api, custom: kubernetes.client.CustomObjectsApi
) -> None:
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "owner"}})
    body = claim("c")
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    ]
    create_claim(custom, body)
    core.delete_namespaced_config_map("owner", "default")
    assert custom.list_namespaced_custom_object(*RC, "default", "resourceclaims")["items"] == []


def test_delete_precondition_resource_version(core: kubernetes.client.CoreV1Api) -> None:
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "m"}})
    core.patch_namespaced_config_map("m", "default", {"data": {"a": "b"}})
    options = {"preconditions": {"resourceVersion": created.metadata.resource_version}}
    with pytest.raises(ApiException) as caught:
        core.delete_namespaced_config_map("m", "default", body=options)
    assert caught.value.status == 409


# --- status subresource -----------------------------------------------------------------------


def test_status_subresource_separates_spec_and_status(
    custom: kubernetes.client.CustomObjectsApi,
) -> None:
    created = create_claim(custom, claim("c"))
    allocation = {
        "driverName": "gpu.drasat.io",
        "allocation": {
            "resourceHandles": [{"driverName": "gpu.drasat.io", "data": "{}"}],
            "shareable": False,
        },
    }
    main = dict(created, status=allocation)
    main["metadata"] = dict(main["metadata"], labels={"x": "y"})
    updated = custom.replace_namespaced_custom_object(*RC, "default", "resourceclaims", "c", main)
    assert "status" not in updated and updated["metadata"]["labels"] == {"x": "y"}
    status_body = dict(updated, status=allocation)
    status_body["metadata"] = dict(updated["metadata"], labels={"ignored": "yes"})
    with_status = custom.replace_namespaced_custom_object_status(
        *RC, "default", "resourceclaims", "c", status_body
    )
    assert with_status["status"]["driverName"] == "gpu.drasat.io"
    assert with_status["metadata"]["labels"] == {"x": "y"}  # /status changes only status
    assert "generation" not in with_status["metadata"]  # classic kinds have none (tests/contract)


def test_crd_without_status_subresource_keeps_status_in_main_resource(
    custom: kubernetes.client.CustomObjectsApi,
) -> None:
    nas = {
        "apiVersion": "nas.gpu.drasat.io/v1alpha1",
        "kind": "NodeAllocationState",
        "metadata": {"name": "n1"},
        "spec": {},
        "status": "NotReady",
    }
    custom.create_namespaced_custom_object(*NAS, "drasat", "nodeallocationstates", nas)
    patched = custom.patch_namespaced_custom_object(
        *NAS, "drasat", "nodeallocationstates", "n1", {"status": "Ready"}
    )
    assert patched["status"] == "Ready"


# --- selectors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=a", {"p1", "p2"}),
        ("app==a,tier!=db", {"p1"}),
        ("tier in (db,web)", {"p2", "p3"}),
        ("tier notin (db)", {"p1", "p3"}),
        ("tier", {"p2", "p3"}),
        ("!tier", {"p1"}),
    ],
)
def test_label_selectors(
    core: kubernetes.client.CoreV1Api, selector: str, expected: set[str]
) -> None:
    for name, labels in {
        "p1": {"app": "a"},
        "p2": {"app": "a", "tier": "db"},
        "p3": {"app": "b", "tier": "web"},
    }.items():
        core.create_namespaced_config_map("default", {"metadata": {"name": name, "labels": labels}})
    found = core.list_namespaced_config_map("default", label_selector=selector)
    assert {m.metadata.name for m in found.items} == expected


def test_field_selectors(core: kubernetes.client.CoreV1Api) -> None:
    for name in ("a", "b"):
        core.create_namespaced_pod(
            "default",
            {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "none"}]}},
        )
    binding = {"metadata": {"name": "a"}, "target": {"kind": "Node", "name": "n1"}}
    core.create_namespaced_pod_binding("a", "default", binding, _preload_content=False)
    on_node = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1")
    assert [p.metadata.name for p in on_node.items] == ["a"]
    pending = core.list_namespaced_pod("default", field_selector="spec.nodeName=")
    assert [p.metadata.name for p in pending.items] == ["b"]
    by_name = core.list_namespaced_pod("default", field_selector="metadata.name!=a")
    assert [p.metadata.name for p in by_name.items] == ["b"]
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("default", field_selector="spec.unknown=x")
    assert caught.value.status == 400


# --- dry run and pagination -------------------------------------------------------------------


def test_dry_run_validates_without_storing(core: kubernetes.client.CoreV1Api) -> None:
    created = core.create_namespaced_config_map(
        "default", {"metadata": {"name": "m"}}, dry_run="All"
    )
    assert created.metadata.name == "m"
    assert core.list_namespaced_config_map("default").items == []
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": "Bad_Name"}}, dry_run="All"
        )
    assert caught.value.status == 422
    core.create_namespaced_config_map("default", {"metadata": {"name": "m"}})
    core.patch_namespaced_config_map("m", "default", {"data": {"a": "b"}}, dry_run="All")
    core.delete_namespaced_config_map("m", "default", dry_run="All")
    assert core.read_namespaced_config_map("m", "default").data is None


def test_list_pages_with_limit_and_continue(core: kubernetes.client.CoreV1Api) -> None:
    for index in range(5):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"m{index}"}})
    names, token = [], None
    pages = 0
    while True:
        page = core.list_namespaced_config_map("default", limit=2, _continue=token)
        names += [m.metadata.name for m in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
    assert names == [f"m{index}" for index in range(5)] and pages == 3


# --- graceful pod deletion --------------------------------------------------------------------


def bound_pod(core: kubernetes.client.CoreV1Api, name: str, **meta: Any) -> None:
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": name, **meta},
            "spec": {"containers": [{"name": "c", "image": "none"}]},
        },
    )
    binding = {"metadata": {"name": name}, "target": {"kind": "Node", "name": "n1"}}
    core.create_namespaced_pod_binding(name, "default", binding, _preload_content=False)


def test_graceful_pod_deletion_waits_for_the_kubelet(
    server: apiserver.ApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    server.api.graceful_pod_deletion = True
    bound_pod(core, "p")
    core.delete_namespaced_pod("p", "default")
    marked = core.read_namespaced_pod("p", "default").metadata
    assert marked.deletion_timestamp and marked.deletion_grace_period_seconds == 30
    core.delete_namespaced_pod("p", "default", grace_period_seconds=0)  # the kubelet's delete
    assert core.list_namespaced_pod("default").items == []
    # A pod that never reached a node goes at once.
    core.create_namespaced_pod(
        "default",
        {"metadata": {"name": "q"}, "spec": {"containers": [{"name": "c", "image": "none"}]}},
    )
    core.delete_namespaced_pod("q", "default")
    assert core.list_namespaced_pod("default").items == []


def test_graceful_deletion_then_finalizers(
    server: apiserver.ApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    server.api.graceful_pod_deletion = True
    bound_pod(core, "p", finalizers=["test/hold"])
    core.delete_namespaced_pod("p", "default")
    core.delete_namespaced_pod("p", "default", grace_period_seconds=0)
    held = core.read_namespaced_pod("p", "default").metadata
    assert held.deletion_grace_period_seconds == 0 and held.finalizers == ["test/hold"]
    core.patch_namespaced_pod(
        "p", "default", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["test/hold"]}}
    )
    assert core.list_namespaced_pod("default").items == []
