"""Classic DRA (`resource.k8s.io/v1alpha2`) as the simulator serves it, against the last real API
server that served it: kube-apiserver v1.30.14 (`classic_kube_cluster`). v1.37 has no
v1alpha2, so these tests have a backend of their own: "sim" or "classic"."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from classic_objects import SEMANTIC_RULE_CASES, claim
from contract import Backend, causes, raw, status_of
from kubernetes.client import ApiException

from drasat.testbed.sim import apiserver

RC = ("resource.k8s.io", "v1alpha2")


def _no_expiry() -> str:
    raise NotImplementedError("no expired resourceVersion in the classic tests")


@pytest.fixture(params=["sim", "classic"])
def classic(request: pytest.FixtureRequest) -> Iterator[Backend]:
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    if request.param == "sim":
        with apiserver.ApiServer.running() as server:
            configuration = kubernetes.client.Configuration(host=server.url)
            with kubernetes.client.ApiClient(configuration) as client:
                kubernetes.client.CoreV1Api(client).create_namespace(
                    {"metadata": {"name": namespace}}
                )
                yield Backend("sim", client, namespace, _no_expiry, server=server)
            assert server.internal_errors == []
        return
    # Only the classic leg asks for the v1.30 cluster.
    kube = request.getfixturevalue("classic_kube_cluster")
    client = kubernetes.config.new_client_from_config(config_file=str(kube.kubeconfig))
    with client:
        core = kubernetes.client.CoreV1Api(client)
        core.create_namespace({"metadata": {"name": namespace}})
        try:
            yield Backend("classic", client, namespace, _no_expiry)
        finally:
            with contextlib.suppress(ApiException):
                core.delete_namespace(namespace)


def _create(backend: Backend, plural: str, body: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = backend.custom.create_namespaced_custom_object(
        *RC, backend.namespace, plural, body
    )
    return created


def _allocation(node: str = "n1") -> dict[str, Any]:
    return {
        "resourceHandles": [{"driverName": "gpu.resource.drasat.io", "data": "{}"}],
        "availableOnNodes": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
        "shareable": False,
    }


def test_claim_crud_defaults_generation_and_delete(classic: Backend) -> None:
    created = _create(classic, "resourceclaims", claim("c"))
    assert created["spec"] == {
        "resourceClassName": "gpu.drasat.io",
        "allocationMode": "WaitForFirstConsumer",
    }
    assert "generation" not in created["metadata"]  # classic kinds have none
    listed = classic.custom.list_namespaced_custom_object(*RC, classic.namespace, "resourceclaims")
    assert [c["metadata"]["name"] for c in listed["items"]] == ["c"]
    code, answer = raw(
        classic,
        "DELETE",
        f"/apis/resource.k8s.io/v1alpha2/namespaces/{classic.namespace}/resourceclaims/c",
    )
    assert (code, answer["kind"]) == (200, "ResourceClaim")


def test_claim_spec_is_immutable(classic: Backend) -> None:
    _create(classic, "resourceclaims", claim("c"))
    with pytest.raises(ApiException) as caught:
        classic.custom.patch_namespaced_custom_object(
            *RC, classic.namespace, "resourceclaims", "c", {"spec": {"resourceClassName": "x"}}
        )
    found = causes(caught.value)
    assert list(found) == ["spec"]
    assert found["spec"]["message"].endswith("field is immutable")


def _status_patch(backend: Backend, name: str, status: dict[str, Any]) -> Any:
    return backend.custom.patch_namespaced_custom_object_status(
        *RC, backend.namespace, "resourceclaims", name, {"status": status}
    )


def _reserved(count: int, *, same: bool = False) -> list[dict[str, str]]:
    return [
        {"resource": "pods", "name": f"p{0 if same else i}", "uid": f"u{0 if same else i}"}
        for i in range(count)
    ]


def test_claim_status_rules(classic: Backend) -> None:
    # Immediate: the real resourceclaim controller does not ask to deallocate it while no pod
    # uses it, so the status stays as these writes leave it.
    _create(classic, "resourceclaims", claim("c", allocationMode="Immediate"))
    with pytest.raises(ApiException) as unallocated:
        _status_patch(classic, "c", {"reservedFor": _reserved(1)})
    assert causes(unallocated.value) == {
        "status.reservedFor": {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: may not be specified when `allocated` is not set",
            "field": "status.reservedFor",
        }
    }
    with pytest.raises(ApiException) as no_driver:
        _status_patch(classic, "c", {"allocation": _allocation()})
    assert causes(no_driver.value)["status.driverName"]["message"] == (
        "Required value: must be specified when `allocation` is set"
    )
    allocated = _status_patch(
        classic, "c", {"driverName": "gpu.resource.drasat.io", "allocation": _allocation()}
    )
    assert allocated["status"]["allocation"]["resourceHandles"][0]["data"] == "{}"
    with pytest.raises(ApiException) as duplicate:
        _status_patch(classic, "c", {"reservedFor": _reserved(2, same=True)})
    found = causes(duplicate.value)
    assert found["status.reservedFor[1].uid"]["message"] == 'Duplicate value: "u0"'
    with pytest.raises(ApiException) as not_shareable:
        _status_patch(classic, "c", {"reservedFor": _reserved(2)})
    assert causes(not_shareable.value) == {
        "status.reservedFor": {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: may not be reserved more than once",
            "field": "status.reservedFor",
        }
    }
    with pytest.raises(ApiException) as too_many:
        _status_patch(classic, "c", {"reservedFor": _reserved(33)})
    messages = [c["message"] for c in status_of(too_many.value)["details"]["causes"]]
    assert "Too long: may not be longer than 32" in messages
    _status_patch(classic, "c", {"reservedFor": _reserved(1)})
    with pytest.raises(ApiException) as moved:
        _status_patch(classic, "c", {"allocation": _allocation("n2")})
    assert list(causes(moved.value)) == ["status.allocation"]
    # (Clearing the allocation while reserved is not checked here: the real resourceclaim
    # controller soon drops the reservation of a pod that does not exist.)


def test_a_shareable_allocation_takes_several_consumers(classic: Backend) -> None:
    _create(classic, "resourceclaims", claim("c", allocationMode="Immediate"))
    allocation = {**_allocation(), "shareable": True}
    _status_patch(classic, "c", {"driverName": "gpu.resource.drasat.io", "allocation": allocation})
    reserved = _status_patch(classic, "c", {"reservedFor": _reserved(3)})
    assert len(reserved["status"]["reservedFor"]) == 3


def test_deallocation_needs_an_allocation(classic: Backend) -> None:
    _create(classic, "resourceclaims", claim("c", allocationMode="Immediate"))
    with pytest.raises(ApiException) as caught:
        _status_patch(classic, "c", {"deallocationRequested": True})
    assert causes(caught.value) == {
        "status": {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: `allocation` must be set when `deallocationRequested` is set",
            "field": "status",
        }
    }


def test_resource_handles_are_limited(classic: Backend) -> None:
    _create(classic, "resourceclaims", claim("c"))
    allocation = _allocation()
    allocation["resourceHandles"] = [
        {"driverName": "gpu.resource.drasat.io", "data": "x" * (16 * 1024 + 1)}
    ]
    with pytest.raises(ApiException) as caught:
        classic.custom.patch_namespaced_custom_object_status(
            *RC,
            classic.namespace,
            "resourceclaims",
            "c",
            {"status": {"driverName": "gpu.resource.drasat.io", "allocation": allocation}},
        )
    assert "status.allocation.resourceHandles[0].data" in causes(caught.value)


def test_templates_and_slices_have_no_generation(classic: Backend) -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1alpha2",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {"spec": {"resourceClassName": "x"}},
    }
    created = _create(classic, "resourceclaimtemplates", template)
    assert "generation" not in created["metadata"]
    assert created["spec"]["spec"]["allocationMode"] == "WaitForFirstConsumer"
    name = f"slice-{classic.namespace}"
    made = classic.custom.create_cluster_custom_object(
        *RC,
        "resourceslices",
        {
            "apiVersion": "resource.k8s.io/v1alpha2",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "nodeName": "n1",
            "driverName": "gpu.resource.drasat.io",
            "namedResources": {"instances": [{"name": "gpu-0"}]},
        },
    )
    classic.custom.delete_cluster_custom_object(*RC, "resourceslices", name)
    assert "generation" not in made["metadata"]
    with pytest.raises(ApiException) as no_model:
        classic.custom.create_cluster_custom_object(
            *RC,
            "resourceslices",
            {
                "apiVersion": "resource.k8s.io/v1alpha2",
                "kind": "ResourceSlice",
                "metadata": {"name": name},
                "nodeName": "n1",
                "driverName": "gpu.resource.drasat.io",
            },
        )
    assert causes(no_model.value) == {
        "<nil>": {
            "reason": "FieldValueRequired",
            "message": "Required value: exactly one structured model field must be set",
            "field": "<nil>",
        }
    }


@pytest.mark.parametrize(("plural", "body", "field"), SEMANTIC_RULE_CASES)
def test_semantic_rules(classic: Backend, plural: str, body: dict[str, Any], field: str) -> None:
    with pytest.raises(ApiException) as caught:
        _create(classic, plural, body)
    assert field in causes(caught.value)


def test_pod_scheduling_context_and_its_status(classic: Backend) -> None:
    ns = classic.namespace
    context = {
        "apiVersion": "resource.k8s.io/v1alpha2",
        "kind": "PodSchedulingContext",
        "metadata": {"name": "p"},
        "spec": {"potentialNodes": ["n1", "n2"]},
        "status": {"resourceClaims": [{"name": "gpu", "unsuitableNodes": ["n1"]}]},
    }
    created = _create(classic, "podschedulingcontexts", context)
    assert "status" not in created or created["status"] == {}
    selected = classic.custom.patch_namespaced_custom_object(
        *RC, ns, "podschedulingcontexts", "p", {"spec": {"selectedNode": "n2"}}
    )
    assert selected["spec"]["selectedNode"] == "n2" and "generation" not in selected["metadata"]
    status = classic.custom.patch_namespaced_custom_object_status(
        *RC, ns, "podschedulingcontexts", "p", {"status": context["status"]}
    )
    assert status["status"] == context["status"] and status["spec"]["selectedNode"] == "n2"


def test_resource_class(classic: Backend) -> None:
    name = f"class-{classic.namespace}"  # cluster-scoped: unique to this test
    body = {
        "apiVersion": "resource.k8s.io/v1alpha2",
        "kind": "ResourceClass",
        "metadata": {"name": name},
        "driverName": "gpu.resource.drasat.io",
    }
    created = classic.custom.create_cluster_custom_object(*RC, "resourceclasses", body)
    try:
        assert created["driverName"] == "gpu.resource.drasat.io"
        assert "generation" not in created["metadata"]
        with pytest.raises(ApiException) as caught:
            classic.custom.create_cluster_custom_object(
                *RC,
                "resourceclasses",
                {**body, "metadata": {"name": f"{name}-2"}, "driverName": "Not A Name"},
            )
        assert "driverName" in causes(caught.value)
    finally:
        classic.custom.delete_cluster_custom_object(*RC, "resourceclasses", name)


def test_exact_messages_of_claim_rules(classic: Backend) -> None:
    with pytest.raises(ApiException) as mode:
        _create(classic, "resourceclaims", claim("c", allocationMode="Sometimes"))
    assert causes(mode.value)["spec.allocationMode"]["message"] == (
        'Unsupported value: "Sometimes": supported values: "Immediate", "WaitForFirstConsumer"'
    )
    with pytest.raises(ApiException) as reference:
        _create(classic, "resourceclaims", claim("c", parametersRef={"kind": "GpuClaimParameters"}))
    assert status_of(reference.value)["details"]["causes"] == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value",
            "field": "spec.parametersRef.name",
        }
    ]
    owned = claim("c")
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p"}]
    with pytest.raises(ApiException) as owner:
        _create(classic, "resourceclaims", owned)
    assert status_of(owner.value)["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "": uid must not be empty',
            "field": "metadata.ownerReferences.uid",
        }
    ]
    context = {
        "apiVersion": "resource.k8s.io/v1alpha2",
        "kind": "PodSchedulingContext",
        "metadata": {"name": "p"},
        "spec": {"potentialNodes": [f"n{i}" for i in range(129)]},
    }
    with pytest.raises(ApiException) as nodes:
        _create(classic, "podschedulingcontexts", context)
    assert causes(nodes.value)["spec.potentialNodes"] == {
        "reason": "FieldValueTooLong",
        "message": "Too long: may not be longer than 128",
        "field": "spec.potentialNodes",
    }
