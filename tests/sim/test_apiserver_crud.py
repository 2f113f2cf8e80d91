"""Create/get/list/update/patch/delete through the unmodified kubernetes client."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import kubernetes
import kubernetes.dynamic
import pytest
from kubernetes.client import ApiException

from drasat.testbed.sim import apiserver

RC = ("resource.k8s.io", "v1alpha2")


def pod(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1alpha2",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"resourceClassName": "gpu.drasat.io"},
    }


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def test_create_assigns_identity_and_get_returns_it(core: kubernetes.client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", pod("p1"))
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert created.metadata.generation == 1
    assert created.status.phase == "Pending"  # status is the server's on create
    fetched = core.read_namespaced_pod("p1", "default")
    assert fetched.metadata.uid == created.metadata.uid
    assert fetched.metadata.resource_version == created.metadata.resource_version


def test_create_twice_is_409_already_exists(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod("p1"))
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", pod("p1"))
    assert caught.value.status == 409
    assert status_of(caught.value)["reason"] == "AlreadyExists"


def test_generate_name(core: kubernetes.client.CoreV1Api) -> None:
    body = pod("")
    body["metadata"] = {"generateName": "worker-"}
    created = core.create_namespaced_pod("default", body)
    assert created.metadata.name.startswith("worker-") and len(created.metadata.name) > 7


def test_get_missing_is_404_status(core: kubernetes.client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("missing", "default")
    assert caught.value.status == 404
    status = status_of(caught.value)
    assert status["kind"] == "Status" and status["reason"] == "NotFound"
    assert status["details"]["name"] == "missing"


def test_namespaces_are_separate(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod("p1"))
    core.create_namespaced_pod("other", pod("p1"))
    assert len(core.list_pod_for_all_namespaces().items) == 2
    assert [p.metadata.namespace for p in core.list_namespaced_pod("other").items] == ["other"]


def test_cluster_scoped_nodes_keep_status_on_create(core: kubernetes.client.CoreV1Api) -> None:
    node = {"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "8"}}}
    core.create_node(node)
    assert core.read_node("n1").status.capacity == {"cpu": "8"}
    assert {n.metadata.name for n in core.list_namespace().items} >= {"default", "kube-system"}


def test_update_with_stale_resource_version_is_409(core: kubernetes.client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", pod("p1"))
    body = created.to_dict()
    core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"a": "1"}}})
    stale = kubernetes.client.ApiClient().sanitize_for_serialization(created)
    stale["metadata"]["labels"] = {"a": "2"}
    with pytest.raises(ApiException) as caught:
        core.replace_namespaced_pod("p1", "default", stale)
    assert caught.value.status == 409 and status_of(caught.value)["reason"] == "Conflict"
    assert (
        body["metadata"]["resource_version"]
        != core.read_namespaced_pod("p1", "default").metadata.resource_version
    )


def test_update_with_current_version_bumps_it(core: kubernetes.client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", pod("p1"))
    created.metadata.labels = {"a": "b"}
    updated = core.replace_namespaced_pod("p1", "default", created)
    assert updated.metadata.labels == {"a": "b"}
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    assert updated.metadata.generation == 1  # metadata changes do not bump generation


def test_noop_update_keeps_resource_version(core: kubernetes.client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", pod("p1"))
    again = core.replace_namespaced_pod("p1", "default", created)
    assert again.metadata.resource_version == created.metadata.resource_version


def test_pod_spec_is_immutable_but_binding_sets_node(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod("p1"))
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod("p1", "default", {"spec": {"nodeName": "n1"}})
    assert caught.value.status == 422
    assert status_of(caught.value)["details"]["causes"][0]["field"] == "spec"
    binding = {"metadata": {"name": "p1"}, "target": {"kind": "Node", "name": "n1"}}
    core.create_namespaced_pod_binding("p1", "default", binding, _preload_content=False)
    assert core.read_namespaced_pod("p1", "default").spec.node_name == "n1"
    with pytest.raises(ApiException) as again:
        core.create_namespaced_pod_binding("p1", "default", binding, _preload_content=False)
    assert again.value.status == 409


def test_a_pod_with_a_scheduling_gate_is_never_bound(core: kubernetes.client.CoreV1Api) -> None:
    gated = pod("p1")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    core.create_namespaced_pod("default", gated)
    binding = {"metadata": {"name": "p1"}, "target": {"kind": "Node", "name": "n1"}}
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod_binding("p1", "default", binding, _preload_content=False)
    assert caught.value.status == 409
    assert "non-empty .spec.schedulingGates" in status_of(caught.value)["message"]
    assert core.read_namespaced_pod("p1", "default").spec.node_name is None


def test_strategic_merge_patch_from_the_typed_client(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod("p1", a="1", b="2"))
    patched = core.patch_namespaced_pod(
        "p1", "default", {"metadata": {"labels": {"a": None}, "finalizers": ["x"]}}
    )
    assert patched.metadata.labels == {"b": "2"}
    patched = core.patch_namespaced_pod("p1", "default", {"metadata": {"finalizers": ["y"]}})
    assert patched.metadata.finalizers == ["x", "y"]  # merged as a set, as upstream
    conditions = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}]
    core.patch_namespaced_pod_status("p1", "default", {"status": {"conditions": conditions}})
    update = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    status = core.patch_namespaced_pod_status("p1", "default", update).status
    assert [(c.type, c.status) for c in status.conditions] == [
        ("PodScheduled", "True"),
        ("Ready", "True"),
    ]


def test_json_patch(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod("p1", a="1"))
    ops = [
        {"op": "add", "path": "/metadata/labels/b", "value": "2"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "3"},
        {"op": "test", "path": "/metadata/labels/b", "value": "2"},
    ]
    patched = core.patch_namespaced_pod("p1", "default", ops)
    assert patched.metadata.labels == {"a": "3", "b": "2"}
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod("p1", "default", [{"op": "remove", "path": "/metadata/x"}])
    assert caught.value.status == 422


def test_custom_object_crud(custom: kubernetes.client.CustomObjectsApi) -> None:
    created = custom.create_namespaced_custom_object(*RC, "default", "resourceclaims", claim("c"))
    assert created["spec"]["allocationMode"] == "WaitForFirstConsumer"  # server default
    got = custom.get_namespaced_custom_object(*RC, "default", "resourceclaims", "c")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    listed = custom.list_namespaced_custom_object(*RC, "default", "resourceclaims")
    assert listed["kind"] == "ResourceClaimList" and int(listed["metadata"]["resourceVersion"])
    custom.delete_namespaced_custom_object(*RC, "default", "resourceclaims", "c")
    with pytest.raises(ApiException) as caught:
        custom.get_namespaced_custom_object(*RC, "default", "resourceclaims", "c")
    assert caught.value.status == 404


def test_cluster_scoped_custom_object(custom: kubernetes.client.CustomObjectsApi) -> None:
    rclass = {
        "apiVersion": "resource.k8s.io/v1alpha2",
        "kind": "ResourceClass",
        "metadata": {"name": "gpu.drasat.io"},
        "driverName": "gpu.drasat.io",
    }
    custom.create_cluster_custom_object(*RC, "resourceclasses", rclass)
    got = custom.get_cluster_custom_object(*RC, "resourceclasses", "gpu.drasat.io")
    assert got["driverName"] == "gpu.drasat.io"


def test_custom_resource_defaults_and_merge_patch(
    custom: kubernetes.client.CustomObjectsApi,
) -> None:
    widget = {
        "apiVersion": "test.drasat.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 2},
    }
    created = custom.create_namespaced_custom_object(
        "test.drasat.io", "v1", "default", "widgets", widget
    )
    assert created["spec"]["color"] == "red"
    patched = custom.patch_namespaced_custom_object(
        "test.drasat.io", "v1", "default", "widgets", "w", {"spec": {"size": 3}}
    )
    assert patched["spec"] == {"size": 3, "color": "red"}
    assert patched["metadata"]["generation"] == 2


def test_crd_posted_at_runtime_is_served(
    server: apiserver.ApiServer, api_client: kubernetes.client.ApiClient
) -> None:
    ext = kubernetes.client.ApiextensionsV1Api(api_client)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.test.drasat.io"},
        "spec": {
            "group": "test.drasat.io",
            "scope": "Cluster",
            "names": {"plural": "gadgets", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    created = ext.create_custom_resource_definition(crd)
    assert {c.type for c in created.status.conditions} == {"Established", "NamesAccepted"}
    custom = kubernetes.client.CustomObjectsApi(api_client)
    gadget = {"apiVersion": "test.drasat.io/v1", "kind": "Gadget", "metadata": {"name": "g"}}
    custom.create_cluster_custom_object("test.drasat.io", "v1", "gadgets", gadget)
    ext.delete_custom_resource_definition("gadgets.test.drasat.io")
    with pytest.raises(ApiException) as caught:
        custom.get_cluster_custom_object("test.drasat.io", "v1", "gadgets", "g")
    assert caught.value.status == 404


def test_leases_and_events(api_client: kubernetes.client.ApiClient) -> None:
    coordination = kubernetes.client.CoordinationV1Api(api_client)
    lease = {
        "metadata": {"name": "drasat-controller"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }
    created = coordination.create_namespaced_lease("kube-system", lease)
    created.spec.holder_identity = "b"
    assert (
        coordination.replace_namespaced_lease(
            "drasat-controller", "kube-system", created
        ).spec.holder_identity
        == "b"
    )
    core = kubernetes.client.CoreV1Api(api_client)
    event = {
        "metadata": {"generateName": "claim-"},
        "reason": "Failed",
        "type": "Warning",
        "message": "spec.count: bad",
        "involvedObject": {"kind": "ResourceClaim", "name": "c", "namespace": "default"},
    }
    core.create_namespaced_event("default", event)
    found = core.list_namespaced_event("default", field_selector="involvedObject.name=c")
    assert [e.reason for e in found.items] == ["Failed"]


def test_discovery(api_client: kubernetes.client.ApiClient) -> None:
    groups = kubernetes.client.ApisApi(api_client).get_api_versions()
    names = {g.name for g in groups.groups}
    assert {"resource.k8s.io", "gpu.drasat.io", "coordination.k8s.io"} <= names
    core = kubernetes.client.CoreV1Api(api_client).get_api_resources()
    assert "pods/status" in {r.name for r in core.resources}
    assert kubernetes.client.VersionApi(api_client).get_code().minor == "30"


def test_strategic_merge_on_custom_resources_is_415(
    server: apiserver.ApiServer, custom: kubernetes.client.CustomObjectsApi
) -> None:
    widget = {
        "apiVersion": "test.drasat.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 1},
    }
    custom.create_namespaced_custom_object("test.drasat.io", "v1", "default", "widgets", widget)
    request = urllib.request.Request(
        f"{server.url}/apis/test.drasat.io/v1/namespaces/default/widgets/w",
        data=json.dumps({"metadata": {"labels": {"a": "b"}}}).encode(),
        headers={"Content-Type": "application/strategic-merge-patch+json"},
        method="PATCH",
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 415


def test_delete_collection_by_label(core: kubernetes.client.CoreV1Api) -> None:
    for name, app in (("a", "x"), ("b", "x"), ("c", "y")):
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": name, "labels": {"app": app}}}
        )
    core.delete_collection_namespaced_config_map("default", label_selector="app=x")
    assert [m.metadata.name for m in core.list_namespaced_config_map("default").items] == ["c"]


def test_dynamic_client_finds_resources_through_discovery(
    api_client: kubernetes.client.ApiClient,
) -> None:
    client = kubernetes.dynamic.DynamicClient(api_client)
    claims = client.resources.get(api_version="resource.k8s.io/v1alpha2", kind="ResourceClaim")
    claims.create(body=claim("c"), namespace="default")
    assert [c.metadata.name for c in claims.get(namespace="default").items] == ["c"]
    nas = client.resources.get(api_version="nas.gpu.drasat.io/v1alpha1", kind="NodeAllocationState")
    assert nas.namespaced and nas.name == "nodeallocationstates"
    assert client.resources.get(api_version="v1", kind="Node").namespaced is False
