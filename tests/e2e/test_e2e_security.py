"""The tenant of docs/SECURITY.md on the real API server: a ServiceAccount that may do anything
with pods, ResourceClaims and ResourceClaimTemplates in its own namespace, and nothing else.
It cannot write an allocation (the claim's status is a subresource it is not granted, and
status in a create or update of the claim itself is dropped), cannot read another namespace's
claims, cannot ask for admin access to devices in use, and cannot write what drasat's
allocator and node plugins read (ResourceSlices, DeviceClasses, NodeAllocationStates)."""

from __future__ import annotations

import contextlib
import json
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
import slicekit
from chartkit import render
from kubecluster import install_crds, service_account_token, wait_for
from kubernetes import dynamic
from kubernetes.client import ApiException

from drasat.api import crds
from drasat.controller import v1inputs

TENANT_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims", "resourceclaimtemplates"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
]

Obj = dict[str, Any]

ALLOCATION = {
    "devices": {
        "results": [
            {"request": "gpu", "driver": "gpu.drasat.io", "pool": "node-x", "device": "gpu-0"}
        ]
    },
    "nodeSelector": {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-x"]}]}
        ]
    },
}


def _claim(name: str, **request: Any) -> dict[str, Any]:
    exactly = {"deviceClassName": "gpu.drasat.io", **request}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


@pytest.fixture
def tenant(
    kube_api: kubernetes.client.ApiClient, kube_namespace: str
) -> Iterator[kubernetes.client.ApiClient]:
    """A client for the ServiceAccount `tenant` of `kube_namespace`, bound to TENANT_RULES there."""
    admin = kubernetes.client.CoreV1Api(kube_api)
    rbac = kubernetes.client.RbacAuthorizationV1Api(kube_api)
    admin.create_namespaced_service_account(kube_namespace, {"metadata": {"name": "tenant"}})
    rbac.create_namespaced_role(
        kube_namespace, {"metadata": {"name": "tenant"}, "rules": TENANT_RULES}
    )
    rbac.create_namespaced_role_binding(
        kube_namespace,
        {
            "metadata": {"name": "tenant"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": kube_namespace}],
        },
    )
    token = service_account_token(kube_api, kube_namespace, "tenant", seconds=600)
    configuration = kubernetes.client.Configuration()
    configuration.host = kube_api.configuration.host
    configuration.ssl_ca_cert = kube_api.configuration.ssl_ca_cert
    configuration.verify_ssl = kube_api.configuration.verify_ssl
    configuration.api_key = {"authorization": f"Bearer {token}"}
    with kubernetes.client.ApiClient(configuration) as client:
        yield client


def _refused(call: Any, *args: Any, **kwargs: Any) -> ApiException:
    with pytest.raises(ApiException) as caught:
        call(*args, **kwargs)
    return caught.value


def test_a_tenant_cannot_write_an_allocation_or_reach_another_namespaces_claims(
    kube_api: kubernetes.client.ApiClient,
    kube_namespace: str,
    tenant: kubernetes.client.ApiClient,
) -> None:
    claims_as = {
        who: dynamic.DynamicClient(client).resources.get(
            api_version="resource.k8s.io/v1", kind="ResourceClaim"
        )
        for who, client in (("admin", kube_api), ("tenant", tenant))
    }
    mine = claims_as["tenant"]
    # its own claim: created; an allocation in the body is dropped, not stored
    forged = {**_claim("mine"), "status": {"allocation": ALLOCATION}}
    created = mine.create(body=forged, namespace=kube_namespace).to_dict()
    assert "allocation" not in (created.get("status") or {})
    # ...and so it is in an update of the claim itself
    created["status"] = {"allocation": ALLOCATION}
    updated = mine.replace(body=created, namespace=kube_namespace).to_dict()
    assert "allocation" not in (updated.get("status") or {})
    # the status subresource, where the allocator writes it, is not the tenant's
    status = mine.subresources["status"]
    updated["status"] = {"allocation": ALLOCATION}
    denied = _refused(status.replace, body=updated, namespace=kube_namespace)
    assert denied.status == 403
    assert "resourceclaims/status" in json.loads(denied.body)["message"]

    # another namespace's claims: neither read nor listed, nor all namespaces' at once
    other = f"t-{uuid.uuid4().hex[:10]}"
    core = kubernetes.client.CoreV1Api(kube_api)
    core.create_namespace({"metadata": {"name": other}})
    try:
        claims_as["admin"].create(body=_claim("theirs"), namespace=other)
        assert _refused(mine.get, name="theirs", namespace=other).status == 403
        assert _refused(mine.get, namespace=other).status == 403
        assert _refused(mine.get).status == 403
    finally:
        with contextlib.suppress(ApiException):
            core.delete_namespace(other)


def test_a_tenant_cannot_ask_for_admin_access_to_devices_in_use(
    kube_namespace: str, tenant: kubernetes.client.ApiClient
) -> None:
    """Admin access (a device shared with the claims that hold it) needs a namespace an
    administrator labelled; drasat refuses it anyway (tests/v1, `adminAccess`)."""
    mine = dynamic.DynamicClient(tenant).resources.get(
        api_version="resource.k8s.io/v1", kind="ResourceClaim"
    )
    refused = _refused(
        mine.create, body=_claim("admin", adminAccess=True), namespace=kube_namespace
    )
    assert refused.status in (403, 422), refused
    assert "admin-access" in json.loads(refused.body)["message"]


def test_a_tenant_cannot_write_what_the_allocator_and_plugins_read(
    kube_api: kubernetes.client.ApiClient,
    kube_namespace: str,
    tenant: kubernetes.client.ApiClient,
) -> None:
    install_crds(kube_api, crds.all_crds())
    client = dynamic.DynamicClient(tenant)

    def kind(api_version: str, name: str) -> Any:
        return client.resources.get(api_version=api_version, kind=name)

    writes = [
        (
            kind("resource.k8s.io/v1", "ResourceSlice"),
            {
                "metadata": {"name": f"forged-{uuid.uuid4().hex[:6]}"},
                "spec": {
                    "driver": "gpu.drasat.io",
                    "nodeName": "node-x",
                    "pool": {"name": "node-x", "generation": 0, "resourceSliceCount": 1},
                    "devices": [],
                },
            },
            None,
        ),
        (
            kind("resource.k8s.io/v1", "DeviceClass"),
            {"metadata": {"name": f"forged-{uuid.uuid4().hex[:6]}"}, "spec": {}},
            None,
        ),
        (
            kind("nas.gpu.drasat.io/v1alpha1", "NodeAllocationState"),
            {"metadata": {"name": "node-x"}, "spec": {"allocatableDevices": []}},
            kube_namespace,  # even in its own namespace: not granted
        ),
        (
            kind("v1", "ConfigMap"),
            {"metadata": {"name": "drasat-policy"}, "data": {}},
            kube_namespace,
        ),
    ]
    for resource, body, namespace in writes:
        body = {"apiVersion": resource.group_version, "kind": resource.kind, **body}
        refused = _refused(resource.create, body=body, namespace=namespace)
        assert refused.status == 403, (resource.kind, refused)


# --- the controller's token: drasat's scheduling gate, nothing else of a pod ---------------------

GATE = "gpu.drasat.io/allocation"
CONTROLLER_KINDS = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


@pytest.fixture
def controller_policy(
    kube_api: kubernetes.client.ApiClient, kube_namespace: str, tmp_path: pathlib.Path
) -> Iterator[kubernetes.client.ApiClient]:
    """The chart's v1 controller ServiceAccount, ClusterRole(Binding) and its pod policy, created
    for real under a unique prefix (the cluster-scoped ones deleted after); yields a client
    authenticated as that ServiceAccount."""
    prefix = f"e2e-{uuid.uuid4().hex[:6]}-drasat"
    manifests = render(kube_namespace, "1.37.2", {"fullnameOverride": prefix}, tmp_path)
    names = {f"{prefix}-controller", f"{prefix}-controller-lifts-gates-only"}
    wanted = [
        m for m in manifests if m["metadata"]["name"] in names and m["kind"] in CONTROLLER_KINDS
    ]
    assert sorted(m["kind"] for m in wanted) == sorted(CONTROLLER_KINDS)
    client = dynamic.DynamicClient(kube_api)
    created = []
    try:
        for manifest in wanted:
            resource = client.resources.get(
                api_version=manifest["apiVersion"], kind=manifest["kind"]
            )
            namespace = kube_namespace if resource.namespaced else None
            resource.create(body=manifest, namespace=namespace)
            if namespace is None:
                created.append((resource, manifest["metadata"]["name"]))
        token = service_account_token(kube_api, kube_namespace, f"{prefix}-controller", seconds=600)
        configuration = kubernetes.client.Configuration()
        configuration.host = kube_api.configuration.host
        configuration.ssl_ca_cert = kube_api.configuration.ssl_ca_cert
        configuration.verify_ssl = kube_api.configuration.verify_ssl
        configuration.api_key = {"authorization": f"Bearer {token}"}
        with kubernetes.client.ApiClient(configuration) as controller:
            yield controller
    finally:
        for resource, name in reversed(created):
            with contextlib.suppress(ApiException):
                resource.delete(name=name)


def _gated_pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "x"}},
        "spec": {
            "schedulingGates": [{"name": "example.com/queue"}, {"name": GATE}],
            "containers": [{"name": "app", "image": "app:1"}],
        },
    }


def test_the_controllers_token_may_only_lift_drasats_gate_from_a_pod(
    kube_api: kubernetes.client.ApiClient,
    kube_namespace: str,
    controller_policy: kubernetes.client.ApiClient,
) -> None:
    """The chart's ValidatingAdmissionPolicy on the controller's `patch pods` grant: removing
    drasat's gate and setting drasat's nomination annotation pass (another owner's gate stays);
    changing the image, a label, another annotation, the tolerations, the node selector or
    another owner's gate is refused naming what."""
    admin = kubernetes.client.CoreV1Api(kube_api)
    controller = kubernetes.client.CoreV1Api(controller_policy)

    def patch(name: str, body: Any) -> ApiException | None:
        try:
            controller.patch_namespaced_pod(name, kube_namespace, body)
        except ApiException as exc:
            return exc
        return None

    # The policy takes effect once the server's policy informer has it: probe with a label
    # change on a pod of its own until the first refusal.
    admin.create_namespaced_pod(kube_namespace, _gated_pod("probe"))
    probes = iter(range(10_000))
    wait_for(
        lambda: patch("probe", {"metadata": {"labels": {"n": str(next(probes))}}}),
        what="the controller's pod policy to refuse a label change",
    )
    admin.create_namespaced_pod(kube_namespace, _gated_pod("p"))
    refused = {
        "spec.containers": {"spec": {"containers": [{"name": "app", "image": "evil:1"}]}},
        "metadata.labels": {"metadata": {"labels": {"app": "y"}}},
        "metadata.annotations": {"metadata": {"annotations": {"a": "b"}}},
        "spec.tolerations": [  # added to the server's defaults (removing any is invalid)
            {
                "op": "add",
                "path": "/spec/tolerations/-",
                "value": {"key": "k", "operator": "Exists", "effect": "NoSchedule"},
            }
        ],
        "spec.nodeSelector": {"spec": {"nodeSelector": {"kubernetes.io/hostname": "n"}}},
        # (JSON patches: a strategic merge patch merges gates by name, removing none)
        "own scheduling gate": [{"op": "remove", "path": "/spec/schedulingGates/0"}],
    }
    for what, body in refused.items():
        denied = patch("p", body)
        assert denied is not None and denied.status == 403, (what, denied)
        assert what in json.loads(denied.body)["message"], what
    assert patch("p", [{"op": "remove", "path": "/spec/schedulingGates/1"}]) is None
    # A preemptor's nomination: drasat's own annotation and status.nominatedNodeName.
    nomination = {"metadata": {"annotations": {"gpu.drasat.io/nomination": "{}"}}}
    assert patch("p", nomination) is None
    assert patch("p", {"metadata": {"annotations": {"gpu.drasat.io/nomination": None}}}) is None
    controller.patch_namespaced_pod_status("p", kube_namespace,
                                           {"status": {"nominatedNodeName": "n"}})  # fmt: skip
    pod = admin.read_namespaced_pod("p", kube_namespace)
    assert [g.name for g in pod.spec.scheduling_gates] == ["example.com/queue"]
    assert pod.spec.containers[0].image == "app:1" and pod.metadata.labels == {"app": "x"}


# --- a tenant's claims stay drasat's: no toleration of its allocator taint ----------------------

TAINT_POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
EXEMPT = "gpu.drasat.io/tolerate-allocator-taint"
OTHER_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "nic.example.com"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "nic.example.com"'}}]},
}


@pytest.fixture
def taint_policy(
    kube_api: kubernetes.client.ApiClient, kube_namespace: str, tmp_path: pathlib.Path
) -> Iterator[None]:
    """The chart's policy on tolerations of drasat's allocator taint, created for real under a
    unique prefix, its binding narrowed to `kube_namespace` (the other modules of the session
    write tolerating claims on purpose); drasat's DeviceClasses and another driver's."""
    prefix = f"e2e-{uuid.uuid4().hex[:6]}-drasat"
    manifests = render(kube_namespace, "1.37.2", {"fullnameOverride": prefix}, tmp_path)
    wanted = [
        m
        for m in manifests
        if m["metadata"]["name"] == f"{prefix}-claims-keep-drasats-taint"
        and m["kind"] in TAINT_POLICY_KINDS
    ]
    assert sorted(m["kind"] for m in wanted) == sorted(TAINT_POLICY_KINDS)
    binding = next(m for m in wanted if m["kind"].endswith("Binding"))
    binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"].append(
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [kube_namespace]}
    )
    client = dynamic.DynamicClient(kube_api)
    classes = client.resources.get(api_version="resource.k8s.io/v1", kind="DeviceClass")
    made = []
    with slicekit.device_classes(kube_api):
        try:
            with contextlib.suppress(ApiException):
                classes.create(body=OTHER_CLASS)
                made.append((classes, OTHER_CLASS["metadata"]["name"]))
            for manifest in wanted:
                resource = client.resources.get(
                    api_version=manifest["apiVersion"], kind=manifest["kind"]
                )
                resource.create(body=manifest)
                made.append((resource, manifest["metadata"]["name"]))
            yield
        finally:
            for resource, name in reversed(made):
                with contextlib.suppress(ApiException):
                    resource.delete(name=name)


def _tolerating(name: str, *tolerations: Obj, device_class: str = "gpu.drasat.io") -> Obj:
    return _claim(name, deviceClassName=device_class, tolerations=list(tolerations))


#: Tolerations of a request, each with whether it tolerates drasat's allocator taint
#: (`v1inputs.tolerates_allocator_taint` says so for each below, checked in the test).
TOLERATIONS: list[tuple[str, Obj, bool]] = [
    ("every taint", {"operator": "Exists"}, True),
    ("every NoSchedule taint", {"operator": "Exists", "effect": "NoSchedule"}, True),
    ("every NoExecute taint", {"operator": "Exists", "effect": "NoExecute"}, False),
    ("the key", {"key": "gpu.drasat.io/allocator", "operator": "Exists"}, True),
    (
        "key and value",
        {"key": "gpu.drasat.io/allocator", "operator": "Equal", "value": "drasat"},
        True,
    ),
    (
        "another value",
        {"key": "gpu.drasat.io/allocator", "operator": "Equal", "value": "other"},
        False,
    ),
    ("another key", {"key": "gpu.nvidia.com/xid", "operator": "Exists"}, False),
]


def test_a_tenant_cannot_take_its_claims_out_of_drasats_allocator_with_a_toleration(
    kube_api: kubernetes.client.ApiClient,
    kube_namespace: str,
    tenant: kubernetes.client.ApiClient,
    taint_policy: None,
) -> None:
    """The chart's ValidatingAdmissionPolicy on the real API server: a ResourceClaim or
    ResourceClaimTemplate whose request of drasat's class tolerates drasat's allocator taint
    (`exactly` or a `firstAvailable` entry) is refused at creation, exactly when the controller's
    own rule says it tolerates it; another driver's class and other taints pass; an
    administrator's label on the namespace lets them in (the tenant cannot set it)."""
    claims = dynamic.DynamicClient(tenant).resources.get(
        api_version="resource.k8s.io/v1", kind="ResourceClaim"
    )
    templates = dynamic.DynamicClient(tenant).resources.get(
        api_version="resource.k8s.io/v1", kind="ResourceClaimTemplate"
    )

    def create(resource: Any, body: Obj) -> ApiException | None:
        try:
            resource.create(body=body, namespace=kube_namespace)
        except ApiException as exc:
            return exc
        return None

    # The policy takes effect once the server's informers hold it and the classes.
    probes = iter(range(10_000))
    wait_for(
        lambda: create(claims, _tolerating(f"probe-{next(probes)}", {"operator": "Exists"})),
        what="the toleration policy to refuse a claim",
    )
    for i, (what, toleration, tolerated) in enumerate(TOLERATIONS):
        body = _tolerating(f"c-{i}", toleration)
        assert v1inputs.tolerates_allocator_taint(body) is tolerated, what
        refused = create(claims, body)
        assert (refused is not None) is tolerated, (what, refused)
        if refused is not None:
            assert refused.status == 403, (what, refused)
            message = json.loads(refused.body)["message"]
            assert "DeviceClass gpu.drasat.io tolerates drasat's allocator" in message, message
            assert EXEMPT in message
    # a firstAvailable entry, and a template's request
    first = _claim("first")
    first["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": "mig.drasat.io",
         "tolerations": [{"operator": "Exists"}]}]}]  # fmt: skip
    assert create(claims, first) is not None
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {"spec": _tolerating("x", {"operator": "Exists"})["spec"]},
    }
    assert create(templates, template) is not None
    # another driver's class is not drasat's to guard; a claim without tolerations passes
    other = _tolerating("nic", {"operator": "Exists"}, device_class="nic.example.com")
    assert create(claims, other) is None
    assert create(claims, _claim("plain")) is None
    # the exemption is the administrator's: the tenant cannot label its namespace
    core_as_tenant = kubernetes.client.CoreV1Api(tenant)
    label = {"metadata": {"labels": {EXEMPT: "true"}}}
    with pytest.raises(ApiException) as denied:
        core_as_tenant.patch_namespace(kube_namespace, label)
    assert denied.value.status == 403
    kubernetes.client.CoreV1Api(kube_api).patch_namespace(kube_namespace, label)
    wait_for(
        lambda: (
            create(claims, _tolerating(f"exempt-{next(probes)}", {"operator": "Exists"})) is None
        ),
        what="the labelled namespace to admit a tolerating claim",
    )
    assert create(templates, template) is None


def test_admin_access_that_tolerates_the_taint_is_admitted_where_admin_access_is(
    kube_api: kubernetes.client.ApiClient, kube_namespace: str, taint_policy: None
) -> None:
    """Admin access holds no device and stays kube-scheduler's (v1inputs.admin_access_only):
    in a namespace labelled for admin access, the policy lets it tolerate the taint."""
    kubernetes.client.CoreV1Api(kube_api).patch_namespace(
        kube_namespace, {"metadata": {"labels": {"resource.kubernetes.io/admin-access": "true"}}}
    )
    claims = dynamic.DynamicClient(kube_api).resources.get(
        api_version="resource.k8s.io/v1", kind="ResourceClaim"
    )
    probes = iter(range(10_000))

    def refused(name: str, **request: Any) -> bool:
        body = _claim(f"{name}-{next(probes)}", tolerations=[{"operator": "Exists"}], **request)
        try:
            claims.create(body=body, namespace=kube_namespace)
        except ApiException as exc:
            assert exc.status == 403, exc
            return True
        return False

    wait_for(lambda: refused("probe"), what="the toleration policy to refuse a claim")
    assert not refused("admin", adminAccess=True)
    assert refused("mine")
