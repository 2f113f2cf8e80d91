"""Optimistic concurrency (409 on a stale resourceVersion), finalizers and deletion, the status
subresource, metadata.generation, and validation by our CRDs' schemas and CEL rules."""

from __future__ import annotations

import time
from typing import Any

import kubernetes
import pytest
from contract import WIDGETS, Backend, causes, raw, status_of, widget
from kubecluster import wait_for
from kubernetes.client import ApiException

from drasat.controller import leader
from drasat.kube.client import KubeClient

G, V, P = WIDGETS
CONFLICT_TAIL = (
    ": the object has been modified; please apply your changes to the latest version and try again"
)


def _create_widget(backend: Backend, body: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = backend.custom.create_namespaced_custom_object(
        G, V, backend.namespace, P, body
    )
    return created


def _get_widget(backend: Backend, name: str) -> dict[str, Any]:
    got: dict[str, Any] = backend.custom.get_namespaced_custom_object(
        G, V, backend.namespace, P, name
    )
    return got


# --- 409 Conflict -----------------------------------------------------------------------------


def test_stale_update_is_409_conflict_with_the_status_body(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    stale = core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}, "data": {"x": "1"}})
    core.patch_namespaced_config_map("a", ns, {"data": {"x": "2"}})
    stale.data = {"x": "3"}
    with pytest.raises(ApiException) as caught:
        core.replace_namespaced_config_map("a", ns, stale)
    assert caught.value.status == 409
    assert status_of(caught.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Operation cannot be fulfilled on configmaps "a"' + CONFLICT_TAIL,
        "reason": "Conflict",
        "details": {"name": "a", "kind": "configmaps"},
        "code": 409,
    }
    assert core.read_namespaced_config_map("a", ns).data == {"x": "2"}


def test_stale_custom_resource_update_and_patch_are_409(backend: Backend) -> None:
    stale = _create_widget(backend, widget("w"))
    backend.custom.patch_namespaced_custom_object(
        G, V, backend.namespace, P, "w", {"spec": {"size": 2}}
    )
    stale["spec"]["size"] = 3
    with pytest.raises(ApiException) as replaced:
        backend.custom.replace_namespaced_custom_object(G, V, backend.namespace, P, "w", stale)
    body = status_of(replaced.value)
    assert (replaced.value.status, body["reason"]) == (409, "Conflict")
    assert body["message"] == 'Operation cannot be fulfilled on widgets.test.drasat.io "w"' + (
        CONFLICT_TAIL
    )
    assert body["details"] == {"name": "w", "group": "test.drasat.io", "kind": "widgets"}
    # A merge patch carrying a resourceVersion is conditional too (as drasat's NAS writes are).
    old_rv = stale["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as patched:
        backend.custom.patch_namespaced_custom_object(
            G,
            V,
            backend.namespace,
            P,
            "w",
            {"metadata": {"resourceVersion": old_rv}, "spec": {"size": 4}},
        )
    assert patched.value.status == 409
    assert _get_widget(backend, "w")["spec"]["size"] == 2


def test_update_without_resource_version_is_unconditional(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}, "data": {"x": "1"}})
    core.patch_namespaced_config_map("a", ns, {"data": {"x": "2"}})
    replaced = core.replace_namespaced_config_map(
        "a", ns, {"metadata": {"name": "a"}, "data": {"x": "3"}}
    )
    assert replaced.data == {"x": "3"}


def test_delete_preconditions(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    created = core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    core.patch_namespaced_config_map("a", ns, {"data": {"x": "2"}})
    stale = kubernetes.client.V1DeleteOptions(
        preconditions=kubernetes.client.V1Preconditions(
            resource_version=created.metadata.resource_version
        )
    )
    with pytest.raises(ApiException) as caught:
        core.delete_namespaced_config_map("a", ns, body=stale)
    assert caught.value.status == 409 and status_of(caught.value)["reason"] == "Conflict"
    wrong_uid = kubernetes.client.V1DeleteOptions(
        preconditions=kubernetes.client.V1Preconditions(uid="not-the-uid")
    )
    with pytest.raises(ApiException) as uid:
        core.delete_namespaced_config_map("a", ns, body=wrong_uid)
    assert uid.value.status == 409
    right = kubernetes.client.V1DeleteOptions(
        preconditions=kubernetes.client.V1Preconditions(uid=created.metadata.uid)
    )
    core.delete_namespaced_config_map("a", ns, body=right)


# --- finalizers and deletion ------------------------------------------------------------------


def test_finalizers_keep_a_deleted_object_until_removed(backend: Backend) -> None:
    ns = backend.namespace
    body = widget("w")
    body["metadata"]["finalizers"] = ["test.drasat.io/hold"]
    created = _create_widget(backend, body)
    since = created["metadata"]["resourceVersion"]
    backend.custom.delete_namespaced_custom_object(G, V, ns, P, "w")
    marked = _get_widget(backend, "w")
    assert marked["metadata"]["deletionTimestamp"]
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 0
    assert marked["metadata"]["finalizers"] == ["test.drasat.io/hold"]
    # Deleting again changes nothing.
    backend.custom.delete_namespaced_custom_object(G, V, ns, P, "w")
    again = _get_widget(backend, "w")
    assert again["metadata"]["resourceVersion"] == marked["metadata"]["resourceVersion"]
    # No new finalizer on an object being deleted.
    with pytest.raises(ApiException) as added:
        backend.custom.patch_namespaced_custom_object(
            G, V, ns, P, "w", {"metadata": {"finalizers": ["test.drasat.io/hold", "more"]}}
        )
    found = causes(added.value)
    assert "metadata.finalizers" in found
    assert (
        "no new finalizers can be added if the object is being deleted"
        in (found["metadata.finalizers"]["message"])
    )
    # The spec can still change while it waits.
    resized = backend.custom.patch_namespaced_custom_object(G, V, ns, P, "w", {"spec": {"size": 7}})
    assert resized["spec"]["size"] == 7
    backend.custom.patch_namespaced_custom_object(
        G, V, ns, P, "w", {"metadata": {"finalizers": None}}
    )
    with pytest.raises(ApiException) as gone:
        _get_widget(backend, "w")
    assert gone.value.status == 404
    seen = []
    watch = kubernetes.watch.Watch()
    for event in watch.stream(
        backend.custom.list_namespaced_custom_object,
        G,
        V,
        ns,
        P,
        resource_version=since,
        timeout_seconds=5,
    ):
        meta = event["object"]["metadata"]
        seen.append((event["type"], bool(meta.get("deletionTimestamp")), meta.get("finalizers")))
        if event["type"] == "DELETED":
            watch.stop()
    # Removing the last finalizer deletes: no MODIFIED for that write, and the DELETED event
    # carries the object as it was stored (finalizer included).
    assert seen == [
        ("MODIFIED", True, ["test.drasat.io/hold"]),  # marked
        ("MODIFIED", True, ["test.drasat.io/hold"]),  # resized
        ("DELETED", True, ["test.drasat.io/hold"]),
    ]


def test_configmap_with_finalizer(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "a", "finalizers": ["test.drasat.io/hold"]}}
    )
    deleted = core.delete_namespaced_config_map("a", ns)
    assert deleted is not None
    marked = core.read_namespaced_config_map("a", ns)
    assert marked.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("a", ns, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_config_map("a", ns)
    assert gone.value.status == 404


# --- the status subresource -------------------------------------------------------------------


def test_status_subresource_separates_spec_and_status(backend: Backend) -> None:
    ns = backend.namespace
    body = widget("w")
    body["status"] = {"ready": True}
    created = _create_widget(backend, body)
    assert "status" not in created  # create drops the status
    created["spec"]["size"] = 2
    created["status"] = {"ready": True}
    updated = backend.custom.replace_namespaced_custom_object(G, V, ns, P, "w", created)
    assert updated["spec"]["size"] == 2 and "status" not in updated
    assert updated["metadata"]["generation"] == 2
    # /status changes the status only.
    updated["spec"]["size"] = 3
    updated["status"] = {"ready": True}
    status = backend.custom.replace_namespaced_custom_object_status(G, V, ns, P, "w", updated)
    assert status["spec"]["size"] == 2 and status["status"] == {"ready": True}
    assert status["metadata"]["generation"] == 2  # a status change is no new generation
    patched = backend.custom.patch_namespaced_custom_object_status(
        G, V, ns, P, "w", {"status": {"ready": False}, "spec": {"size": 9}}
    )
    assert patched["status"] == {"ready": False} and patched["spec"]["size"] == 2
    # The main resource ignores a status patch (and answers the object unchanged).
    ignored = backend.custom.patch_namespaced_custom_object(
        G, V, ns, P, "w", {"status": {"ready": True}}
    )
    assert ignored["status"] == {"ready": False}
    assert ignored["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]


def test_pod_status_subresource(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "p"},
            "spec": {
                "schedulerName": "contract-none",
                "nodeName": "node-a",
                "containers": [{"name": "c", "image": "none"}],
            },
            "status": {"phase": "Running"},
        },
    )
    assert core.read_namespaced_pod("p", ns).status.phase == "Pending"
    core.patch_namespaced_pod("p", ns, {"status": {"phase": "Running"}})
    assert core.read_namespaced_pod("p", ns).status.phase == "Pending"
    running = core.patch_namespaced_pod_status("p", ns, {"status": {"phase": "Running"}})
    assert running.status.phase == "Running"
    core.delete_namespaced_pod("p", ns, grace_period_seconds=0)


def test_generation_counts_spec_changes_only(backend: Backend) -> None:
    ns = backend.namespace
    created = _create_widget(backend, widget("w"))
    assert created["metadata"]["generation"] == 1
    labelled = backend.custom.patch_namespaced_custom_object(
        G, V, ns, P, "w", {"metadata": {"labels": {"a": "b"}, "annotations": {"c": "d"}}}
    )
    assert labelled["metadata"]["generation"] == 1
    resized = backend.custom.patch_namespaced_custom_object(G, V, ns, P, "w", {"spec": {"size": 5}})
    assert resized["metadata"]["generation"] == 2
    same = backend.custom.patch_namespaced_custom_object(G, V, ns, P, "w", {"spec": {"size": 5}})
    assert same["metadata"]["generation"] == 2
    assert same["metadata"]["resourceVersion"] == resized["metadata"]["resourceVersion"]


# --- validation: our CRDs' schemas and CEL rules -----------------------------------------------


SKIPPED_CEL = {
    "reason": "FieldValueInvalid",
    "message": "Invalid value: null: some validation rules were not checked because the object "
    "was invalid; correct the existing errors to complete validation",
    "field": "<nil>",
}


def test_schema_violation_is_422_naming_the_field(backend: Backend) -> None:
    with pytest.raises(ApiException) as caught:
        _create_widget(backend, widget("w", size=0))
    assert status_of(caught.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Widget.test.drasat.io "w" is invalid: spec.size: Invalid value: 0: '
        "spec.size in body should be greater than or equal to 1",
        "reason": "Invalid",
        "details": {
            "name": "w",
            "group": "test.drasat.io",
            "kind": "Widget",
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": "Invalid value: 0: spec.size in body should be greater than or "
                    "equal to 1",
                    "field": "spec.size",
                }
            ],
        },
        "code": 422,
    }


def test_several_violations_and_cel_rules_skipped(backend: Backend) -> None:
    # An unsupported value (or a wrong type, a missing field) stops the CRD's CEL rules, which
    # the server says in a cause without a field; several causes are listed in brackets.
    with pytest.raises(ApiException) as caught:
        _create_widget(backend, widget("w", size=0, color="green", parts=[{"weight": 0}]))
    # (The real server's order of the causes varies: Go map order.)
    message = status_of(caught.value)["message"]
    assert message.startswith('Widget.test.drasat.io "w" is invalid: [') and message.endswith("]")
    for cause in (
        "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
        'spec.color: Unsupported value: "green": supported values: "red", "blue"',
        "<nil>: Invalid value: null: some validation rules were not checked because the object "
        "was invalid; correct the existing errors to complete validation",
    ):
        assert cause in message
    assert causes(caught.value) == {
        "spec.size": {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 0: spec.size in body should be greater than or equal to 1",
            "field": "spec.size",
        },
        "spec.color": {
            "reason": "FieldValueNotSupported",
            "message": 'Unsupported value: "green": supported values: "red", "blue"',
            "field": "spec.color",
        },
        "<nil>": SKIPPED_CEL,
    }


def test_a_non_blocking_violation_still_runs_cel_rules(backend: Backend) -> None:
    with pytest.raises(ApiException) as caught:
        _create_widget(backend, widget("w", size=0, parts=[{"weight": 0}]))
    assert set(causes(caught.value)) == {"spec.size", "spec.parts[0]"}


def test_missing_required_field_is_422(backend: Backend) -> None:
    body = widget("w")
    del body["spec"]["size"]
    with pytest.raises(ApiException) as caught:
        _create_widget(backend, body)
    assert causes(caught.value) == {
        "spec.size": {
            "reason": "FieldValueRequired",
            "message": "Required value",
            "field": "spec.size",
        },
        "<nil>": SKIPPED_CEL,
    }


def test_wrong_type_is_422(backend: Backend) -> None:
    with pytest.raises(ApiException) as caught:
        _create_widget(backend, widget("w", size="big"))
    assert causes(caught.value) == {
        "spec.size": {
            "reason": "FieldValueTypeInvalid",
            "message": 'Invalid value: "string": spec.size in body must be of type integer: '
            '"string"',
            "field": "spec.size",
        },
        "<nil>": SKIPPED_CEL,
    }


def test_custom_resource_needs_kind_and_api_version(backend: Backend) -> None:
    for missing in ("kind", "apiVersion"):
        body = widget("w")
        del body[missing]
        with pytest.raises(ApiException) as caught:
            _create_widget(backend, body)
        assert caught.value.status == 400 and status_of(caught.value)["reason"] == "BadRequest"


def test_unknown_fields(backend: Backend) -> None:
    strict = widget("w", surprise=True, extra={"anything": 1})
    strict["spec"]["parts"] = [{"weight": 1, "odd": 2}]
    with pytest.raises(ApiException) as caught:
        backend.custom.create_namespaced_custom_object(
            G, V, backend.namespace, P, strict, field_validation="Strict"
        )
    assert caught.value.status == 400
    assert status_of(caught.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Widget in version "v1" cannot be handled as a Widget: strict decoding '
        'error: unknown field "spec.parts[0].odd", unknown field "spec.surprise"',
        "reason": "BadRequest",
        "code": 400,
    }
    ignored = backend.custom.create_namespaced_custom_object(
        G, V, backend.namespace, P, strict, field_validation="Ignore"
    )
    assert ignored["spec"] == {
        "size": 1,
        "color": "red",
        "extra": {"anything": 1},
        "parts": [{"weight": 1}],
    }
    # Without fieldValidation the real server drops them (Warn); the simulator refuses them,
    # so that tests catch misspelt fields (docs/SIMULATED-APISERVER.md).
    strict["metadata"]["name"] = "w2"
    if backend.sim:
        with pytest.raises(ApiException) as refused:
            backend.custom.create_namespaced_custom_object(G, V, backend.namespace, P, strict)
        assert refused.value.status == 400
    else:
        dropped = backend.custom.create_namespaced_custom_object(G, V, backend.namespace, P, strict)
        assert "surprise" not in dropped["spec"]


def test_unknown_fields_of_builtin_kinds(backend: Backend) -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {"bogus": 1, "containers": [{"name": "c", "image": "i", "bad": 2}]},
    }
    code, status = raw(
        backend,
        "POST",
        f"/api/v1/namespaces/{backend.namespace}/pods",
        pod,
        [("fieldValidation", "Strict")],
    )
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.bogus", unknown field "spec.containers[0].bad"'
    )


def test_cel_rule_message_and_path(backend: Backend) -> None:
    with pytest.raises(ApiException) as caught:
        _create_widget(backend, widget("w", parts=[{"weight": 1}, {"weight": 0}]))
    found = causes(caught.value)
    assert list(found) == ["spec.parts[1]"]
    assert found["spec.parts[1]"]["reason"] == "FieldValueInvalid"
    assert found["spec.parts[1]"]["message"].endswith(": parts weigh something")


def test_drasat_crd_cel_rules(backend: Backend) -> None:
    params = {
        "apiVersion": "gpu.drasat.io/v1alpha1",
        "kind": "GpuClaimParameters",
        "metadata": {"name": "p"},
        "spec": {"count": 2, "share": {}},
    }
    with pytest.raises(ApiException) as caught:
        backend.custom.create_namespaced_custom_object(
            "gpu.drasat.io", "v1alpha1", backend.namespace, "gpuclaimparameters", params
        )
    found = causes(caught.value)
    assert set(found) == {"spec", "spec.share"}
    assert found["spec"]["message"].endswith(
        ": a share claim takes part of one GPU: count must be 1"
    )
    assert found["spec.share"]["message"].endswith(": a share needs compute, memory or both")


def test_drasat_crd_schema(backend: Backend) -> None:
    nas = {
        "apiVersion": "nas.gpu.drasat.io/v1alpha1",
        "kind": "NodeAllocationState",
        "metadata": {"name": "n"},
        "spec": {"allocatableDevices": "not-a-list"},
        "status": "Unknown",
    }
    with pytest.raises(ApiException) as caught:
        backend.custom.create_namespaced_custom_object(
            "nas.gpu.drasat.io", "v1alpha1", backend.namespace, "nodeallocationstates", nas
        )
    found = causes(caught.value)
    assert set(found) == {"spec.allocatableDevices", "status"}
    assert found["spec.allocatableDevices"]["reason"] == "FieldValueTypeInvalid"
    assert found["status"] == {
        "reason": "FieldValueNotSupported",
        "message": 'Unsupported value: "Unknown": supported values: "Ready", "NotReady"',
        "field": "status",
    }


def test_an_integer_beyond_int64_is_a_number(backend: Backend) -> None:
    # Decoded as a float, as Go decodes unstructured JSON: the schema's integer refuses it.
    with pytest.raises(ApiException) as caught:
        _create_widget(backend, widget("w", size=2**63))
    assert causes(caught.value)["spec.size"] == {
        "reason": "FieldValueTypeInvalid",
        "message": 'Invalid value: "number": spec.size in body must be of type integer: "number"',
        "field": "spec.size",
    }
    assert _create_widget(backend, widget("w", size=2**63 - 1))["spec"]["size"] == 2**63 - 1


def test_a_pod_on_a_node_is_deleted_gracefully(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    if backend.server is not None:
        # Off by default in the simulator (pods go at once); the demo's kubelets turn it on.
        backend.server.api.graceful_pod_deletion = True
    spec = {
        "schedulerName": "contract-none",
        "nodeName": "node-a",
        "terminationGracePeriodSeconds": 20,
        "containers": [{"name": "c", "image": "none"}],
    }
    core.create_namespaced_pod(ns, {"metadata": {"name": "p"}, "spec": spec})
    marked = core.delete_namespaced_pod("p", ns)
    assert marked.metadata.deletion_timestamp is not None
    assert marked.metadata.deletion_grace_period_seconds == 20
    assert core.read_namespaced_pod("p", ns).metadata.deletion_grace_period_seconds == 20
    # The kubelet's delete (no grace period) removes it.
    core.delete_namespaced_pod("p", ns, grace_period_seconds=0)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("p", ns)
    assert gone.value.status == 404
    # A pod no node runs goes at once.
    core.create_namespaced_pod(ns, {"metadata": {"name": "q"}, "spec": {**spec, "nodeName": None}})
    core.delete_namespaced_pod("q", ns)
    with pytest.raises(ApiException) as unscheduled:
        core.read_namespaced_pod("q", ns)
    assert unscheduled.value.status == 404


def test_owner_deletion_cascades_to_dependents(backend: Backend) -> None:
    core, ns = backend.core, backend.namespace
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner.metadata.uid,
    }
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "dependent", "ownerReferences": [reference]}}
    )
    widget_body = widget("w")
    widget_body["metadata"]["ownerReferences"] = [reference]
    _create_widget(backend, widget_body)
    core.delete_namespaced_config_map("owner", ns)

    def collected() -> bool:
        names = {c.metadata.name for c in core.list_namespaced_config_map(ns).items}
        widgets = backend.custom.list_namespaced_custom_object(G, V, ns, P)["items"]
        return "dependent" not in names and not widgets

    # The real garbage collector works in the background: give it time.
    assert wait_for(collected, timeout=30, interval=0.05, what="the dependents collected")


def test_drasat_leader_election_on_a_lease(backend: Backend) -> None:
    """drasat's LeaderElector writes Leases (MicroTime fields, optimistic concurrency) that both
    servers take, and two candidates never both lead."""
    api = KubeClient(backend.api.configuration)
    try:
        first = leader.LeaderElector(
            api, leader.Config(namespace=backend.namespace, identity="one", lease_duration_s=30)
        )
        second = leader.LeaderElector(
            api, leader.Config(namespace=backend.namespace, identity="two", lease_duration_s=30)
        )
        assert first.try_once() and not second.try_once()
        assert first.try_once()  # renews with the current resourceVersion
        lease = backend.api.call_api(
            *backend.api.param_serialize(
                "GET",
                f"/apis/coordination.k8s.io/v1/namespaces/{backend.namespace}/leases/"
                "drasat-controller",
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
        ).read()
        assert b'"holderIdentity":"one"' in lease.replace(b" ", b"")
        first.stop()  # releases: holder cleared, duration 1 s
        time.sleep(1.5)
        assert second.try_once() and not first.try_once()
    finally:
        api.close()
    with pytest.raises(ApiException) as caught:
        backend.custom.create_namespaced_custom_object(
            "coordination.k8s.io",
            "v1",
            backend.namespace,
            "leases",
            {"metadata": {"name": "zero"}, "spec": {"leaseDurationSeconds": 0}},
        )
    assert causes(caught.value)["spec.leaseDurationSeconds"] == {
        "reason": "FieldValueInvalid",
        "message": "Invalid value: 0: must be greater than 0",
        "field": "spec.leaseDurationSeconds",
    }
