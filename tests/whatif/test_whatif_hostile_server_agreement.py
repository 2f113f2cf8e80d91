"""Hostile review of the what-if as a CI gate: inputs a CI operator or a tenant writes, each sent
both to the real kube-apiserver v1.37's server-side dry run (as `kubectl apply --dry-run=server`
sends it) and to `drasat whatif -f`; the what-if refuses exactly what the server refuses."""

from __future__ import annotations

import copy
import json
import pathlib
import re
from typing import TYPE_CHECKING, Any

import kubernetes
import manifestgen
import pytest
import yaml
from test_whatif_apiserver_oracle import (  # noqa: F401  (fixtures, registered by import)
    compare,
    installed_classes,
    server_refusals,
    whatif_oracle_namespace,
)

if TYPE_CHECKING:
    from conftest import RunCli

Obj = dict[str, Any]
NAMESPACE = "whatif-oracle"


def _gpu_pod(resources: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "g", "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]},
    }


def _run(run_cli: RunCli, tmp_path: pathlib.Path, objects: list[Obj]) -> Any:
    path = tmp_path / "app.yaml"
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return run_cli("-f", str(path))


@pytest.mark.parametrize(
    "resources",
    [
        {"limits": {"nvidia.com/gpu": "1000m"}},
        {"limits": {"nvidia.com/gpu": 1.0}},
        {"limits": {"nvidia.com/gpu": "1e0"}},
        {"limits": {"nvidia.com/gpu": "+1"}},
        {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1000m"}},
        {"requests": {"nvidia.com/gpu": 1.0}, "limits": {"nvidia.com/gpu": 1}},
    ],
    ids=["1000m", "1.0", "1e0", "plus-1", "requests-1-limits-1000m", "requests-1.0-limits-1"],
)
def test_whole_gpu_counts_in_any_spelling_the_server_accepts_are_placed(
    resources: Obj,
    run_cli: RunCli,
    kube_api: kubernetes.client.ApiClient,
    whatif_oracle_namespace: str,  # noqa: F811  (the fixture imported above)
    tmp_path: pathlib.Path,
) -> None:
    """The server checks an extended resource's quantity by value (`1000m` is 1: a whole
    number) and stores it canonically (`1`); the what-if read the spelling and refused."""
    pod = _gpu_pod(resources)
    assert server_refusals(kube_api, [pod], whatif_oracle_namespace) == []
    result = _run(run_cli, tmp_path, [pod])
    one = _run(run_cli, tmp_path, [_gpu_pod({"limits": {"nvidia.com/gpu": 1}})])
    assert result.code == 0, result.err
    assert _untimed(result.out) == _untimed(one.out)


def _untimed(out: str) -> str:
    return re.sub(r"\d+ ms", "", out)


_TEMPLATE: Obj = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one-gpu", "namespace": NAMESPACE},
    "spec": {
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.drasat.io"}}]
            }
        }
    },
}
_CLAIM: Obj = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "shared", "namespace": NAMESPACE},
    "spec": _TEMPLATE["spec"]["spec"],
}
_CLASS: Obj = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "hostile-class"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.drasat.io'"}}]},
}


def _with(obj: Obj, path: tuple[str, ...], value: Any) -> Obj:
    out = copy.deepcopy(obj)
    inner = out
    for key in path[:-1]:
        inner = inner.setdefault(key, {})
    inner[path[-1]] = value
    return out


@pytest.mark.parametrize(
    "obj",
    [
        _with(_CLASS, ("metadata", "lables"), {"a": "b"}),
        _with(_TEMPLATE, ("metadata", "lables"), {"a": "b"}),
        _with(_TEMPLATE, ("spec", "metadata", "lables"), {"a": "b"}),
        _with(_CLAIM, ("metadata", "Annotations"), {"a": "b"}),
        _with(_CLAIM, ("metadata", "ownerReferences"), [{"apiVersion": "v1", "kind": "Pod",
                                                         "name": "p", "uid": "u", "foo": 1}]),
    ],
    ids=["class-metadata", "template-metadata", "template-spec-metadata", "claim-metadata-case",
         "claim-owner-reference"],
)  # fmt: skip
def test_unknown_metadata_fields_of_claims_templates_and_classes_are_refused(
    obj: Obj,
    run_cli: RunCli,
    kube_api: kubernetes.client.ApiClient,
    whatif_oracle_namespace: str,  # noqa: F811  (the fixture imported above)
    installed_classes: None,  # noqa: F811  (the fixture imported above)
) -> None:
    """A typo in metadata (`lables`) is refused by the server's strict decoding; the what-if's
    models kept any metadata field."""
    compare(run_cli, kube_api, whatif_oracle_namespace, manifestgen.Case([obj], ("metadata",)))


def test_unknown_status_field_of_a_claim_is_refused(
    run_cli: RunCli,
    kube_api: kubernetes.client.ApiClient,
    whatif_oracle_namespace: str,  # noqa: F811  (the fixture imported above)
    installed_classes: None,  # noqa: F811  (the fixture imported above)
) -> None:
    obj = _with(_CLAIM, ("status",), {"allocaton": {"devices": {"results": []}}})
    compare(run_cli, kube_api, whatif_oracle_namespace, manifestgen.Case([obj], ("status",)))


_ONE_T4 = """
apiVersion: whatif.drasat.io/v1alpha1
kind: Cluster
metadata: {name: one}
spec:
  nodes:
  - {name: n1, gpus: [{product: T4, count: 1}]}
"""
#: b's annotation: a hold on n1 at a priority far above every pod's.
_NOMINATION = (
    '{"node":"n1","priority":1000000,"victims":[],"freed":[],"held":{},'
    '"since":"2026-12-06T00:00:00Z"}'
)


def _claiming_pod(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "g"}]}}],
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "one-gpu"}],
        },
    }


def test_a_nomination_forged_with_its_status_in_a_manifest_to_apply_changes_nothing(
    run_cli: RunCli,
    kube_api: kubernetes.client.ApiClient,
    whatif_oracle_namespace: str,  # noqa: F811  (the fixture imported above)
    tmp_path: pathlib.Path,
) -> None:
    """A tenant's manifest: pod b carries drasat's nomination annotation and the status the
    controller would write. Applied, the server stores b without that status (checked on the
    dry run's answer), so the controller's cycle takes a first, by name, as with no nomination."""
    forged = _claiming_pod("b")
    forged["metadata"]["annotations"] = {"gpu.drasat.io/nomination": _NOMINATION}
    forged["status"] = {"nominatedNodeName": "n1"}
    stored = kube_api.call_api(
        *kube_api.param_serialize(
            method="POST",
            resource_path=f"/api/v1/namespaces/{whatif_oracle_namespace}/pods",
            query_params=[("dryRun", "All"), ("fieldValidation", "Strict")],
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=forged,
            auth_settings=["BearerToken"],
        )
    )
    assert stored.status == 201
    assert "nominatedNodeName" not in (json.loads(stored.read()).get("status") or {})
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(_ONE_T4)
    app = tmp_path / "app.yaml"
    app.write_text(yaml.safe_dump_all([_TEMPLATE, _claiming_pod("a"), forged], sort_keys=False))
    result = run_cli("--cluster", str(cluster), "-f", str(app), "-o", "table")
    assert result.code == 0, result.err
    placed = [line.split()[0] for line in result.out.splitlines() if line.endswith("gpu-0")]
    assert placed == [f"{NAMESPACE}/a"], result.out


@pytest.mark.parametrize(
    "container",
    [
        {"command": "sleep 3600"},
        {"args": [["x"]]},
        {"env": {"A": "b"}},
        {"ports": [{"containerPort": "80"}]},
    ],
    ids=["command-string", "args-nested", "env-map", "port-string"],
)
def test_a_value_the_server_cannot_decode_in_a_field_the_whatif_does_not_read_is_refused(
    container: Obj,
    run_cli: RunCli,
    kube_api: kubernetes.client.ApiClient,
    whatif_oracle_namespace: str,  # noqa: F811  (the fixture imported above)
) -> None:
    """`command: "sleep 3600"` (a string for a list) is the commonest of these mistakes."""
    pod = _gpu_pod({"limits": {"nvidia.com/gpu": 1}})
    pod["spec"]["containers"][0].update(container)
    compare(run_cli, kube_api, whatif_oracle_namespace, manifestgen.Case([pod], ("type",)))


@pytest.mark.parametrize(
    "change",
    [
        lambda objs: objs[1]["metadata"].update(labels={"team": None}),
        lambda objs: objs[1]["metadata"].update(annotations={"note": None}),
        lambda objs: objs[1]["spec"].update(replicas=None),
        lambda objs: objs[0]["metadata"].update(labels={"team": None}),
        lambda objs: objs[1]["spec"]["template"]["spec"].update(initContainers=None),
        lambda objs: objs[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"].update(
            count=None, selectors=None
        ),
        lambda objs: objs[1]["spec"]["template"]["spec"]["containers"][0].update(
            command=[None], env=[{"name": "A", "value": None}]
        ),
    ],
    ids=[
        "label-value",
        "annotation-value",
        "replicas",
        "template-label-value",
        "pod-spec-list",
        "claim-request-fields",
        "list-items",
    ],
)
def test_null_values_the_server_decodes_are_accepted(
    change: Any,
    run_cli: RunCli,
    kube_api: kubernetes.client.ApiClient,
    whatif_oracle_namespace: str,  # noqa: F811  (the fixture imported above)
    installed_classes: None,  # noqa: F811  (the fixture imported above)
) -> None:
    pod = _claiming_pod("p")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": NAMESPACE},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": pod["spec"]},
        },
    }
    objects = [copy.deepcopy(_TEMPLATE), deployment]
    change(objects)
    compare(run_cli, kube_api, whatif_oracle_namespace, manifestgen.Case(objects, ("null",)))


@pytest.mark.parametrize(
    "spec",
    [
        {"schedulingPolicy": {"gang": {"minCount": 2, "minCuont": 3}}},
        {"schedulingPolicy": {"gang": {"minCount": 2}}, "schedulingPolicyy": {}},
        {"schedulingPolicy": {"basic": {"foo": 1}}},
    ],
    ids=["gang-field", "spec-field", "basic-field"],
)
def test_unknown_fields_of_a_podgroup_are_refused(
    spec: Obj,
    run_cli: RunCli,
    kube_api: kubernetes.client.ApiClient,
    whatif_oracle_namespace: str,  # noqa: F811  (the fixture imported above)
) -> None:
    """A gang's PodGroup with a typo: the server's strict decoding refuses it; the what-if read
    only `schedulingPolicy` and let the rest pass."""
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": NAMESPACE},
        "spec": spec,
    }
    objects = [group, _TEMPLATE]  # a v1 run (a PodGroup alone goes to the classic wing)
    compare(run_cli, kube_api, whatif_oracle_namespace, manifestgen.Case(objects, ("podgroup",)))


def _workload(kind: str, pod_spec: Obj) -> Obj:
    """A workload of `kind` around the pod spec (a CronJob's inside its job template)."""
    labels = {"app": "w"}
    template = {"metadata": {"labels": labels}, "spec": pod_spec}
    group = "batch/v1" if kind in ("Job", "CronJob") else "apps/v1"
    spec: Obj = {"template": template}
    if kind == "CronJob":
        spec = {"schedule": "0 0 * * *", "jobTemplate": {"spec": {"template": template}}}
    elif kind != "Job":
        spec["selector"] = {"matchLabels": labels}
    meta = {"name": "w", "namespace": NAMESPACE}
    return {"apiVersion": group, "kind": kind, "metadata": meta, "spec": spec}


_CONTAINER = {"name": "c", "image": "x"}


@pytest.mark.parametrize(
    ("kind", "policy"),
    [
        ("Job", None), ("Job", "Always"), ("Job", "OnFailure"), ("CronJob", None),
        ("CronJob", "Never"), ("Deployment", "Never"), ("DaemonSet", "OnFailure"),
        ("DaemonSet", "Always"), ("StatefulSet", None),
    ],
)  # fmt: skip
def test_a_workloads_restart_policy_is_checked_as_the_server_checks_it(
    kind: str,
    policy: str | None,
    run_cli: RunCli,
    kube_api: kubernetes.client.ApiClient,
    whatif_oracle_namespace: str,  # noqa: F811  (the fixture imported above)
) -> None:
    """A Job's pods must end (OnFailure, Never: the default Always is refused); the pods of
    Deployments, DaemonSets and StatefulSets must be restarted (Always)."""
    spec: Obj = {"containers": [_CONTAINER]}
    if policy is not None:
        spec["restartPolicy"] = policy
    objects = [_workload(kind, spec)]
    compare(run_cli, kube_api, whatif_oracle_namespace, manifestgen.Case(objects, ("restart",)))


@pytest.mark.parametrize(
    "resources",
    [
        {"limits": {"memory": "1u", "cpu": "1k"}},
        {"requests": {"memory": "1.", "cpu": 1.5}},
        {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}},
        {"requests": {"cpu": "1000m"}, "limits": {"cpu": "1"}},
        {"requests": {"cpu": "-1"}},
        {"limits": {"memroy": "1Gi"}},
        {"limits": {"pods": "1"}},
        {"limits": {"example.com/foo": "1"}},
        {"requests": {"example.com/foo": "1"}},
        {"limits": {"hugepages-2Mi": "2Mi", "memory": "1Gi"}},
        {"limits": {"memory": "1e3Gi"}},
        {"limits": {"memory": "-"}},
    ],
)
def test_a_containers_resources_are_checked_as_the_server_checks_them(
    resources: Obj,
    run_cli: RunCli,
    kube_api: kubernetes.client.ApiClient,
    whatif_oracle_namespace: str,  # noqa: F811  (the fixture imported above)
) -> None:
    objects = [_workload("DaemonSet", {"containers": [{**_CONTAINER, "resources": resources}]})]
    compare(run_cli, kube_api, whatif_oracle_namespace, manifestgen.Case(objects, ("resources",)))


@pytest.mark.parametrize("amount", ["1u", "8Gi", "8 Gi", "-1", True, 0])
def test_a_claims_capacity_request_is_checked_as_the_server_checks_it(
    amount: Any,
    run_cli: RunCli,
    kube_api: kubernetes.client.ApiClient,
    whatif_oracle_namespace: str,  # noqa: F811  (the fixture imported above)
    installed_classes: None,  # noqa: F811  (the fixture imported above)
) -> None:
    claim = copy.deepcopy(_TEMPLATE)
    exactly = claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    exactly["capacity"] = {"requests": {"memory": amount}}
    compare(run_cli, kube_api, whatif_oracle_namespace, manifestgen.Case([claim], ("capacity",)))
