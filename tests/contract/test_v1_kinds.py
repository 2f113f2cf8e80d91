"""resource.k8s.io/v1 DeviceTaintRule and the workload kinds the simulated controller manager
acts on (apps/v1 ReplicaSet, batch/v1 Job), held to kube-apiserver v1.37.2: CRUD, server-owned
fields, generation, status subresource and what a delete answers."""

from __future__ import annotations

import json
from typing import Any

import kubernetes
from contract import Backend

RESOURCE_V1 = ("resource.k8s.io", "v1")


def _rule(name: str, effect: str = "NoSchedule") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        # A driver no test installs: the rule taints nothing, so no eviction starts.
        "spec": {
            "deviceSelector": {"driver": "nothing.test.drasat.io"},
            "taint": {"key": "test.drasat.io/maintenance", "value": "x", "effect": effect},
        },
    }


def _template() -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "w"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def test_device_taint_rule_crud(backend: Backend) -> None:
    custom = backend.custom
    name = f"{backend.namespace}-rule"
    created = custom.create_cluster_custom_object(*RESOURCE_V1, "devicetaintrules", _rule(name))
    try:
        assert created["metadata"]["generation"] == 1
        taint = created["spec"]["taint"]
        # timeAdded is set by the server when left out.
        assert taint["effect"] == "NoSchedule" and taint["timeAdded"].endswith("Z")
        assert "status" not in created or not created["status"].get("conditions")
        changed = custom.patch_cluster_custom_object(
            *RESOURCE_V1,
            "devicetaintrules",
            name,
            {"spec": {"taint": {"value": "y"}}},
        )
        assert changed["metadata"]["generation"] == 2
        assert changed["spec"]["taint"]["value"] == "y"
        listed = custom.list_cluster_custom_object(*RESOURCE_V1, "devicetaintrules")
        assert name in [r["metadata"]["name"] for r in listed["items"]]
        bad = _rule(f"{name}-bad", effect="PreferNoSchedule")
        try:
            custom.create_cluster_custom_object(*RESOURCE_V1, "devicetaintrules", bad)
        except kubernetes.client.ApiException as exc:
            assert exc.status == 422
            status = json.loads(exc.body)
            assert status["message"] == (
                f'DeviceTaintRule.resource.k8s.io "{name}-bad" is invalid: spec.taint.effect: '
                'Unsupported value: "PreferNoSchedule": supported values: '
                '"NoExecute", "NoSchedule", "None"'
            )
            assert [c["reason"] for c in status["details"]["causes"]] == ["FieldValueNotSupported"]
        else:  # pragma: no cover - the assertion below fails
            custom.delete_cluster_custom_object(*RESOURCE_V1, "devicetaintrules", f"{name}-bad")
            raise AssertionError("PreferNoSchedule accepted on a device taint")
    finally:
        answer = custom.delete_cluster_custom_object(*RESOURCE_V1, "devicetaintrules", name)
    assert answer["kind"] == "Status"


def test_replicaset_and_job_crud(backend: Backend) -> None:
    apps = kubernetes.client.AppsV1Api(backend.api)
    batch = kubernetes.client.BatchV1Api(backend.api)
    ns = backend.namespace
    rs = apps.create_namespaced_replica_set(
        ns,
        {
            "metadata": {"name": "rs"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "w"}},
                "template": {
                    **_template(),
                    "spec": {**_template()["spec"], "restartPolicy": "Always"},
                },
            },
        },
    )
    assert rs.metadata.generation == 1 and rs.spec.replicas == 0
    scaled = apps.patch_namespaced_replica_set(
        "rs", ns, {"spec": {"replicas": 0, "minReadySeconds": 1}}
    )
    assert scaled.metadata.generation == 2
    job = batch.create_namespaced_job(
        ns,
        {
            "metadata": {"name": "job"},
            "spec": {"completions": 2, "parallelism": 1, "suspend": True, "template": _template()},
        },
    )
    assert job.metadata.generation == 1
    assert (job.spec.completions, job.spec.parallelism) == (2, 1)
    got = batch.read_namespaced_job("job", ns)
    assert got.metadata.uid == job.metadata.uid
    apps.delete_namespaced_replica_set("rs", ns)
    batch.delete_namespaced_job("job", ns, propagation_policy="Background")


def _v1_claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.test.drasat.io"}}]
            }
        },
    }


def _allocation(node: str, **extra: Any) -> dict[str, Any]:
    return {
        "devices": {
            "results": [
                {"request": "gpu", "driver": "gpu.test.drasat.io", "pool": node, "device": "gpu-0"}
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
        **extra,
    }


def _refusal(call: Any) -> tuple[str, list[tuple[str, str, str]]]:
    try:
        call()
    except kubernetes.client.ApiException as exc:
        assert exc.status == 422, exc.body
        status = json.loads(exc.body)
        causes = [(c["field"], c["reason"], c["message"]) for c in status["details"]["causes"]]
        return status["message"], causes
    raise AssertionError("the write was accepted")


def test_resource_claim_v1_status_rules(backend: Backend) -> None:
    """What drasat's controller and the schedulers meet when they write a v1 claim's status."""
    custom, ns = backend.custom, backend.namespace
    custom.create_namespaced_custom_object(*RESOURCE_V1, ns, "resourceclaims", _v1_claim("c"))

    def status(body: dict[str, Any]) -> Any:
        return custom.patch_namespaced_custom_object_status(
            *RESOURCE_V1, ns, "resourceclaims", "c", {"status": body}
        )

    consumer = {"resource": "pods", "name": "p", "uid": "a1b2c3d4-0000-4000-8000-000000000001"}
    message, causes = _refusal(lambda: status({"reservedFor": [consumer]}))
    assert causes == [
        (
            "status.reservedFor",
            "FieldValueForbidden",
            "Forbidden: may not be specified when `allocated` is not set",
        )
    ]
    assert message.startswith('ResourceClaim.resource.k8s.io "c" is invalid: status.reservedFor')
    status({"allocation": _allocation("n1", allocationTimestamp="2026-01-02T03:04:05Z")})
    # Adding a field (what kube-scheduler 1.37 does with allocationTimestamp) is a modification.
    _, causes = _refusal(lambda: status({"allocation": {"devices": {"results": []}}}))
    assert causes == [
        (
            "status.allocation",
            "FieldValueInvalid",
            "Invalid value: null: field cannot be modified once set",
        )
    ]
    reserved = status({"reservedFor": [consumer]})
    assert reserved["status"]["reservedFor"] == [consumer]
    cleared = status({"allocation": None, "reservedFor": None})
    assert not cleared["status"].get("allocation") and not cleared["status"].get("reservedFor")
    # The spec cannot change.
    _, causes = _refusal(
        lambda: custom.patch_namespaced_custom_object(
            *RESOURCE_V1,
            ns,
            "resourceclaims",
            "c",
            {
                "spec": {
                    "devices": {"requests": [{"name": "x", "exactly": {"deviceClassName": "y"}}]}
                }
            },
        )
    )
    assert [(f, r) for f, r, _ in causes] == [("spec", "FieldValueInvalid")]
