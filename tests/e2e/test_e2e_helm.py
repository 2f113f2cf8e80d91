"""The Helm chart's objects on the real kube-apiserver v1.37.2.

The chart installs current DRA (`draApi: v1`, resource.k8s.io/v1) on Kubernetes 1.34 and later
and classic DRA on 1.27-1.31, chosen from the version helm reports. Each rendering goes to the
1.37 server with `kubectl apply --dry-run=server` (the kubectl of the helm/kubectl wheel):

- v1, rendered for 1.34, 1.35, 1.36 and 1.37 (default values, non-default ones, and
  allocator=kube-scheduler): every object, the three DeviceClasses and the scheduling gate's
  admission included (the MutatingAdmissionPolicy for 1.36/1.37, the controller's webhook for
  1.34/1.35), must pass the server's validation and admission. The DeviceTaintRule the
  controller creates is dry-run in each version the server serves it in (v1, v1beta2, v1alpha3),
  and what the chart does where the cluster serves no DeviceTaintRule (the gate alone) is run
  against the server's real discovery.
- classic, rendered for 1.30 and 1.31: every built-in object and drasat's own
  DeviceClassParameters must pass, and exactly the classic-DRA class objects (v1alpha2
  ResourceClass, v1alpha3 DeviceClass), which 1.37 no longer serves, are refused as unknown kinds.

docs/INSTALL.md says what this means per Kubernetes version. The node plugin's
ValidatingAdmissionPolicies (its own node's NAS; in v1 mode its own node's ResourceSlices) are
also installed for real, with the plugin's RBAC, and exercised with pod-bound ServiceAccount
tokens: the real server's CEL decides what the simulation in tests/deploy decides.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import drasatprocess
import kubernetes
import pytest
from chartkit import (
    CHART,
    VAP,
    Manifest,
    account_kubeconfig,
    discovered_api_versions,
    kubectl_apply,
    render,
)
from helm_binary import helm_path
from kubecluster import create_fake_node, install_crds, service_account_token, wait_for
from kubernetes import dynamic
from kubernetes.client import ApiException
from slicekit import device_classes

from drasat.api import crds
from drasat.api.devicemodel import classes
from drasat.testbed.controlplane import realcluster

MAP = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"  # served from 1.36

#: Values that reach other template branches; the server checks what they produce (a priority
#: class, pull secrets, an empty-valued node selector, an inline policy, two replicas).
NON_DEFAULT: Manifest = {
    "fullnameOverride": "gpu-alloc",
    "commonLabels": {"team": "ml-platform"},
    "image": {"repository": "registry.example/drasat", "tag": "0.1.0-rc1", "pullPolicy": "Always"},
    "imagePullSecrets": ["pull-secret"],
    "policy": {"spec": {"objective": [{"term": "spread", "weight": 3}]}},
    "controller": {
        "replicas": 2,
        "leaderElection": {"leaseName": "gpu-alloc-leader"},
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "priorityClassName": "system-cluster-critical",
    },
    "nodePlugin": {"kubeletDir": "/var/lib/k0s/kubelet/", "simulateGpus": "2xA100-40GB"},
    "resourceClass": {"sharable": False},
}

#: The classic-DRA class object each targeted Kubernetes version gets, as kubectl names it.
CLASSIC_CLASS = {
    "1.30.0": ("resource.k8s.io/v1alpha2", "ResourceClass"),
    "1.31.0": ("resource.k8s.io/v1alpha3", "DeviceClass"),
}


def server_dry_run(
    kube_cluster: realcluster.Cluster,
    namespace: str,
    manifests: list[Manifest],
    cache: pathlib.Path,
) -> subprocess.CompletedProcess[str]:
    """`kubectl apply --dry-run=server -o json` of `manifests` in one go. kubectl maps every kind
    before it sends anything, so one unknown kind fails the whole call, naming that kind."""
    return kubectl_apply(
        kube_cluster, namespace, manifests, cache, "--dry-run=server", "-o", "json"
    )


def _key(manifest: Manifest) -> str:
    return f"{manifest['apiVersion']}/{manifest['kind']}/{manifest['metadata']['name']}"


@pytest.fixture(scope="module")
def drasat_crds(kube_api: kubernetes.client.ApiClient) -> list[Any]:
    # The chart ships these in crds/ (tests/deploy checks they are the generated ones); helm
    # installs them before the templates, so the DeviceClassParameters below has its kind.
    return install_crds(kube_api, crds.all_crds())


@pytest.mark.parametrize("kube_version", sorted(CLASSIC_CLASS))
@pytest.mark.parametrize("values", [{}, NON_DEFAULT], ids=["default", "non-default"])
def test_every_object_the_server_serves_passes_a_server_side_dry_run(
    kube_cluster: realcluster.Cluster,
    kube_namespace: str,
    drasat_crds: list[Any],
    tmp_path: pathlib.Path,
    kube_version: str,
    values: Manifest,
) -> None:
    manifests = render(kube_namespace, kube_version, values, tmp_path)
    kinds = {m["kind"] for m in manifests}
    # what this check must cover, whatever the values
    assert {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"} <= kinds
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds
    assert {"Deployment", "DaemonSet", "Service", "ConfigMap", "DeviceClassParameters"} <= kinds

    cache = tmp_path / "kube-cache"
    api_version, kind = CLASSIC_CLASS[kube_version]
    classic = [m for m in manifests if m["apiVersion"].startswith("resource.k8s.io/")]
    assert [_key(m) for m in classic] == [f"{api_version}/{kind}/gpu.drasat.io"]
    # The classic class, alone: refused as a kind this server does not serve.
    refused = server_dry_run(kube_cluster, kube_namespace, classic, cache)
    assert refused.returncode != 0
    assert f'no matches for kind "{kind}" in version "{api_version}"' in refused.stderr

    # Everything else, together: each object passes the server's validation and admission.
    served = [m for m in manifests if m not in classic]
    done = server_dry_run(kube_cluster, kube_namespace, served, cache)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    answers = answer["items"] if answer["kind"] == "List" else [answer]
    # the server's answers are the objects it would store: ours, in the namespace we gave
    assert sorted(_key(a) for a in answers) == sorted(_key(m) for m in served)
    for stored in answers:
        if stored["metadata"].get("namespace"):
            assert stored["metadata"]["namespace"] == kube_namespace


# --- current DRA (resource.k8s.io/v1), 1.34 to 1.37 ----------------------------------------------

#: The Kubernetes versions the chart installs v1 mode on, as helm would report them.
V1_VERSIONS = ["1.34.0", "1.35.0", "1.36.0", "1.37.2"]

#: v1 values that reach other template branches: no device taint, no shares, both kubelet APIs,
#: an explicit draApi.
V1_NON_DEFAULT: Manifest = {
    **NON_DEFAULT,
    "draApi": "v1",
    "controller": {**NON_DEFAULT["controller"], "deviceTaint": False},
    "nodePlugin": {**NON_DEFAULT["nodePlugin"], "kubeletApi": "both", "shares": False},
}

#: Kinds every v1 rendering has, and those only allocator=drasat adds.
V1_KINDS = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount",
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "DaemonSet",
            "DeviceClass"}  # fmt: skip
CONTROLLER_KINDS = {"Deployment", "Service", "ConfigMap"}
#: The scheduling gate's admission: the policy where MutatingAdmissionPolicy v1 is served (1.36+),
#: else the controller's webhook (its registration and certificate; its Service is a Service).
POLICY_KINDS = {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}
WEBHOOK_KINDS = {"MutatingWebhookConfiguration", "Secret"}


@pytest.mark.parametrize("kube_version", V1_VERSIONS)
@pytest.mark.parametrize(
    "values",
    [{}, V1_NON_DEFAULT, {"allocator": "kube-scheduler"}],
    ids=["default", "non-default", "kube-scheduler"],
)
def test_every_v1_object_passes_a_server_side_dry_run(
    kube_cluster: realcluster.Cluster,
    kube_namespace: str,
    drasat_crds: list[Any],
    tmp_path: pathlib.Path,
    kube_version: str,
    values: Manifest,
) -> None:
    policy = kube_version >= "1.36"  # what each version serves by default
    manifests = render(kube_namespace, kube_version, values, tmp_path,
                       (VAP, MAP) if policy else (VAP,))  # fmt: skip
    kinds = {m["kind"] for m in manifests}
    with_controller = values.get("allocator", "drasat") == "drasat"
    admission = POLICY_KINDS if policy else WEBHOOK_KINDS
    assert kinds == V1_KINDS | (CONTROLLER_KINDS | admission if with_controller else set())
    # nothing of classic DRA: no class parameters, no v1alpha2/v1alpha3 class
    assert all(
        m["apiVersion"] == "resource.k8s.io/v1"
        for m in manifests
        if m["apiVersion"].startswith("resource.k8s.io/")
    )
    done = server_dry_run(kube_cluster, kube_namespace, manifests, tmp_path / "kube-cache")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    answers = answer["items"] if answer["kind"] == "List" else [answer]
    assert sorted(_key(a) for a in answers) == sorted(_key(m) for m in manifests)
    # the classes as the server would store them: drasat's definitions, selectors unchanged
    stored = {a["metadata"]["name"]: a["spec"] for a in answers if a["kind"] == "DeviceClass"}
    assert stored == {c["metadata"]["name"]: c["spec"] for c in classes.device_classes()}


#: The DeviceTaintRule drasat's controller keeps (`drasat controller --device-taint`), as
#: docs/INSTALL.md describes it: every device of drasat's driver, NoSchedule.
TAINT_RULE: Manifest = {
    "kind": "DeviceTaintRule",
    "metadata": {"name": "drasat-allocator"},
    "spec": {
        "deviceSelector": {"driver": "gpu.drasat.io"},
        "taint": {"key": "gpu.drasat.io/allocator", "value": "drasat", "effect": "NoSchedule"},
    },
}


def test_the_device_taint_rule_passes_a_dry_run_in_every_version_served(
    kube_cluster: realcluster.Cluster, kube_namespace: str, tmp_path: pathlib.Path
) -> None:
    # 1.37 serves it as v1 (GA, on by default) and, with runtime-config (this cluster turns on
    # every resource.k8s.io version), as v1beta2 (1.36's beta) and v1alpha3 (1.34/1.35's alpha).
    served = discovered_api_versions(kube_cluster, tmp_path / "kube-cache")
    versions = [v for v in served if v.endswith("/DeviceTaintRule")]
    assert versions == [
        "resource.k8s.io/v1/DeviceTaintRule",
        "resource.k8s.io/v1alpha3/DeviceTaintRule",
        "resource.k8s.io/v1beta2/DeviceTaintRule",
    ]
    for version in versions:
        rule = {**TAINT_RULE, "apiVersion": version.removesuffix("/DeviceTaintRule")}
        done = server_dry_run(kube_cluster, kube_namespace, [rule], tmp_path / "kube-cache")
        assert done.returncode == 0, f"{version}: {done.stderr}"
        assert json.loads(done.stdout)["spec"]["taint"]["effect"] == "NoSchedule"


def test_the_chart_checks_device_taint_rules_against_the_servers_discovery(
    kube_cluster: realcluster.Cluster, kube_namespace: str, tmp_path: pathlib.Path
) -> None:
    served = discovered_api_versions(kube_cluster, tmp_path / "kube-cache")
    assert "resource.k8s.io/v1/DeviceClass" in served and VAP in served
    # what helm install sees on this server: v1 mode, the controller and its taint
    manifests = render(kube_namespace, "1.37.2", api_versions=served)
    assert "Deployment" in {m["kind"] for m in manifests}
    # the same server without DeviceTaintRule (1.34-1.36 with their gates off): drasat's
    # scheduling gate alone (tests/e2e/test_e2e_v1_admission.py), refused only without it
    untainted = [v for v in served if not v.endswith("/DeviceTaintRule")]
    helm = [str(helm_path()), "template", "drasat", str(CHART), "-n", kube_namespace]
    helm += ["--kube-version", "1.36.0"]
    for version in untainted:
        helm += ["--api-versions", version]
    gated = subprocess.run(helm, capture_output=True, text=True, timeout=60, check=False)
    assert gated.returncode == 0, gated.stderr
    assert "--no-device-taint" in gated.stdout and "kind: MutatingAdmissionPolicy" in gated.stdout
    refused = subprocess.run(
        [*helm, "--set", "controller.admission.mode=off"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "serves no DeviceTaintRule and controller.admission.mode=off" in refused.stderr
    assert "allocator=kube-scheduler" in refused.stderr
    allowed = subprocess.run(
        [*helm, "--set", "controller.admission.mode=off", "--set", "allocator=kube-scheduler"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr


# --- the node plugin's admission policy, enforced by the real server ------------------------------


def _account_client(
    kube_api: kubernetes.client.ApiClient, namespace: str, account: str, pod: Any = None
) -> kubernetes.client.ApiClient:
    """A client authenticated as `account` with a token bound to `pod`, as the kubelet projects
    it into the node plugin's pod (it carries the pod's node name); without `pod`, a token bound
    to nothing (no node name)."""
    bound = None if pod is None else (pod.metadata.name, pod.metadata.uid)
    token = service_account_token(kube_api, namespace, account, bound_pod=bound, seconds=600)
    configuration = kubernetes.client.Configuration()
    base = kube_api.configuration
    configuration.host = base.host
    configuration.ssl_ca_cert = base.ssl_ca_cert
    configuration.verify_ssl = base.verify_ssl
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return kubernetes.client.ApiClient(configuration)


PLUGIN_KINDS = [
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
]


@pytest.fixture
def installed_plugin_policy(
    kube_api: kubernetes.client.ApiClient,
    kube_namespace: str,
    drasat_crds: list[Any],
    tmp_path: pathlib.Path,
) -> Iterator[tuple[str, str]]:
    """The chart's node-plugin ServiceAccount, RBAC and admission policy, created for real (with a
    unique name prefix); the cluster-scoped ones are deleted after. Yields (account, prefix)."""
    prefix = f"e2e-{uuid.uuid4().hex[:6]}-drasat"
    manifests = render(kube_namespace, "1.30.0", {"fullnameOverride": prefix}, tmp_path)
    # the node plugin's ServiceAccount, (Cluster)Role(Binding)s, admission policy and binding
    names = {f"{prefix}-node-plugin", f"{prefix}-node-plugin-own-nas"}
    wanted = [m for m in manifests if m["metadata"]["name"] in names and m["kind"] in PLUGIN_KINDS]
    assert sorted(m["kind"] for m in wanted) == sorted(PLUGIN_KINDS)
    client = dynamic.DynamicClient(kube_api)
    created = []
    try:
        for manifest in wanted:
            resource = client.resources.get(
                api_version=manifest["apiVersion"], kind=manifest["kind"]
            )
            namespace = kube_namespace if resource.namespaced else None
            resource.create(body=manifest, namespace=namespace)
            created.append((resource, manifest["metadata"]["name"], namespace))
        yield f"{prefix}-node-plugin", prefix
    finally:
        for resource, name, namespace in reversed(created):
            if namespace is None:  # the namespace takes the rest with it
                try:
                    resource.delete(name=name)
                except ApiException as exc:
                    if exc.status != 404:
                        raise


def _nas(name: str, allocated: Manifest | None = None) -> Manifest:
    spec: Manifest = {"allocatableDevices": []}
    if allocated is not None:
        spec["allocatedClaims"] = allocated
    return {
        "apiVersion": "nas.gpu.drasat.io/v1alpha1",
        "kind": "NodeAllocationState",
        "metadata": {"name": name},
        "spec": spec,
    }


CLAIM = {"uid-1": {"claimInfo": {"namespace": "a", "name": "c", "uid": "uid-1"}}}
PREPARED = {"uid-1": {"gpu": {"devices": [{"uuid": "GPU-0"}]}}}
NAS = ("nas.gpu.drasat.io", "v1alpha1")


def test_the_admission_policy_lets_a_plugin_write_only_its_own_nodes_nas(
    kube_api: kubernetes.client.ApiClient,
    kube_namespace: str,
    installed_plugin_policy: tuple[str, str],
) -> None:
    account, prefix = installed_plugin_policy
    node_a, node_b = f"{prefix}-node-a", f"{prefix}-node-b"
    core = kubernetes.client.CoreV1Api(kube_api)
    admin = kubernetes.client.CustomObjectsApi(kube_api)
    create_fake_node(kube_api, node_a)
    try:
        pod = core.create_namespaced_pod(
            kube_namespace,
            {
                "metadata": {"name": "plugin"},
                "spec": {
                    "nodeName": node_a,
                    "serviceAccountName": account,
                    "containers": [{"name": "plugin", "image": "drasat"}],
                },
            },
        )
        with _account_client(kube_api, kube_namespace, account, pod) as plugin_api:
            plugin = kubernetes.client.CustomObjectsApi(plugin_api)

            def create_as_plugin(body: Manifest) -> ApiException | None:
                try:
                    plugin.create_namespaced_custom_object(
                        *NAS, kube_namespace, "nodeallocationstates", body
                    )
                except ApiException as exc:
                    return exc
                return None

            # The policy takes effect once the server's policy informer has it: until the first
            # refusal, a probe that gets through is removed and tried again under a new name.
            def refused_probe() -> ApiException | None:
                probe = f"{node_b}-{uuid.uuid4().hex[:4]}"
                refused = create_as_plugin(_nas(probe))
                if refused is None:
                    admin.delete_namespaced_custom_object(
                        *NAS, kube_namespace, "nodeallocationstates", probe
                    )
                return refused

            wait_for(refused_probe, what="the admission policy to deny a foreign node's NAS")
            denied = create_as_plugin(_nas(node_b))
            assert denied is not None and denied.status == 403, denied
            message = json.loads(denied.body)["message"]
            assert f'on node "{node_a}" may write only' in message
            assert f'not "{node_b}"' in message
            with _account_client(kube_api, kube_namespace, account) as unbound_api:
                unbound = kubernetes.client.CustomObjectsApi(unbound_api)
                with pytest.raises(ApiException) as caught:  # no node in its token: no NAS at all
                    unbound.create_namespaced_custom_object(
                        *NAS, kube_namespace, "nodeallocationstates", _nas(node_a)
                    )
                assert caught.value.status == 403
                assert (
                    "may write only the NodeAllocationState of that node"
                    in json.loads(caught.value.body)["message"]
                )

            created = create_as_plugin(_nas(node_a, CLAIM))
            assert created is not None and created.status == 403
            assert "without allocatedClaims" in json.loads(created.body)["message"]

            assert create_as_plugin(_nas(node_a)) is None  # its own node, no allocations

            def update_as_plugin(spec: Manifest) -> Any:
                held = plugin.get_namespaced_custom_object(
                    *NAS, kube_namespace, "nodeallocationstates", node_a
                )
                held["spec"].update(spec)
                return plugin.replace_namespaced_custom_object(
                    *NAS, kube_namespace, "nodeallocationstates", node_a, held
                )

            # the controller's part is not the plugin's to change...
            with pytest.raises(ApiException) as caught:
                update_as_plugin({"allocatedClaims": CLAIM})
            assert caught.value.status == 403
            message = json.loads(caught.value.body)["message"]
            assert "written by the drasat controller only" in message
            # ...but the administrator (standing in for the controller) may write it, and the
            # plugin may then update its own part, leaving the controller's as it is
            admin.patch_namespaced_custom_object(
                *NAS,
                kube_namespace,
                "nodeallocationstates",
                node_a,
                {"spec": {"allocatedClaims": CLAIM}},
            )
            updated = update_as_plugin({"preparedClaims": PREPARED})
            assert updated["spec"]["preparedClaims"] == PREPARED
            assert updated["spec"]["allocatedClaims"] == CLAIM
            # RBAC: the plugin never deletes a NAS (the garbage collector does, with the Node)
            with pytest.raises(ApiException) as caught:
                plugin.delete_namespaced_custom_object(
                    *NAS, kube_namespace, "nodeallocationstates", node_a
                )
            assert caught.value.status == 403
            assert "cannot delete" in json.loads(caught.value.body)["message"]
    finally:
        core.delete_node(node_a)


# --- v1 mode: the node plugin's ResourceSlices, enforced by the real server -----------------------


@pytest.fixture
def installed_v1_plugin_policy(
    kube_api: kubernetes.client.ApiClient,
    kube_namespace: str,
    drasat_crds: list[Any],
    tmp_path: pathlib.Path,
) -> Iterator[tuple[str, str]]:
    """The chart's v1 node-plugin ServiceAccount, RBAC and both admission policies (NAS and
    ResourceSlices), created for real with a unique name prefix; the cluster-scoped ones are
    deleted after. Yields (account, prefix)."""
    prefix = f"e2e-{uuid.uuid4().hex[:6]}-drasat"
    manifests = render(kube_namespace, "1.37.2", {"fullnameOverride": prefix}, tmp_path)
    names = {f"{prefix}-node-plugin", f"{prefix}-node-plugin-own-nas"}
    names.add(f"{prefix}-node-plugin-own-slices")
    wanted = [m for m in manifests if m["metadata"]["name"] in names and m["kind"] in PLUGIN_KINDS]
    assert sorted(m["kind"] for m in wanted) == sorted(
        [*PLUGIN_KINDS, "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    )
    client = dynamic.DynamicClient(kube_api)
    created = []
    try:
        for manifest in wanted:
            resource = client.resources.get(
                api_version=manifest["apiVersion"], kind=manifest["kind"]
            )
            namespace = kube_namespace if resource.namespaced else None
            resource.create(body=manifest, namespace=namespace)
            created.append((resource, manifest["metadata"]["name"], namespace))
        yield f"{prefix}-node-plugin", prefix
    finally:
        for resource, name, namespace in reversed(created):
            if namespace is None:
                try:
                    resource.delete(name=name)
                except ApiException as exc:
                    if exc.status != 404:
                        raise


def _slice(name: str, node: str, driver: str = "gpu.drasat.io") -> Manifest:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
            "devices": [],
        },
    }


def test_the_admission_policy_lets_a_plugin_write_only_its_own_nodes_slices(
    kube_api: kubernetes.client.ApiClient,
    kube_namespace: str,
    installed_v1_plugin_policy: tuple[str, str],
) -> None:
    account, prefix = installed_v1_plugin_policy
    node_a, node_b = f"{prefix}-node-a", f"{prefix}-node-b"
    core = kubernetes.client.CoreV1Api(kube_api)
    admin = dynamic.DynamicClient(kube_api).resources.get(
        api_version="resource.k8s.io/v1", kind="ResourceSlice"
    )
    create_fake_node(kube_api, node_a)
    create_fake_node(kube_api, node_b)
    try:
        pod = core.create_namespaced_pod(
            kube_namespace,
            {
                "metadata": {"name": "plugin"},
                "spec": {
                    "nodeName": node_a,
                    "serviceAccountName": account,
                    "containers": [{"name": "plugin", "image": "drasat"}],
                },
            },
        )
        with _account_client(kube_api, kube_namespace, account, pod) as plugin_api:
            slices = dynamic.DynamicClient(plugin_api).resources.get(
                api_version="resource.k8s.io/v1", kind="ResourceSlice"
            )

            def create_as_plugin(body: Manifest) -> ApiException | None:
                try:
                    slices.create(body=body)
                except ApiException as exc:
                    return exc
                return None

            # Until the server's policy informer has the policy, a probe may get through:
            # remove it and try again under a new name until the first refusal.
            def refused_probe() -> ApiException | None:
                probe = f"{node_b}-{uuid.uuid4().hex[:4]}"
                refused = create_as_plugin(_slice(probe, node_b))
                if refused is None:
                    admin.delete(name=probe)
                return refused

            wait_for(refused_probe, what="the admission policy to deny a foreign node's slice")
            denied = create_as_plugin(_slice(f"{node_b}-gpu", node_b))
            assert denied is not None and denied.status == 403, denied
            message = json.loads(denied.body)["message"]
            assert f'on node "{node_a}" may write only the' in message
            assert f'ResourceSlices of that node, not one of node "{node_b}"' in message

            other = create_as_plugin(_slice(f"{node_a}-other", node_a, driver="other.example.com"))
            assert other is not None and other.status == 403
            assert (
                "only ResourceSlices of driver gpu.drasat.io" in json.loads(other.body)["message"]
            )

            # its own node, but another node's pool name (allocators read pools by name, the
            # highest generation winning: it would hide node B's devices)
            hiding = _slice(f"{node_a}-hide", node_a)
            hiding["spec"]["pool"] = {"name": node_b, "generation": 99, "resourceSliceCount": 1}
            hidden = create_as_plugin(hiding)
            assert hidden is not None and hidden.status == 403
            assert (
                f'pool named after its node, not "{node_b}"' in json.loads(hidden.body)["message"]
            )

            # its own node's slice: create, replace, delete, as nodeplugin/slicepublisher.py does
            assert create_as_plugin(_slice(f"{node_a}-gpu", node_a)) is None
            # (the plugin has no `get`: it lists its node's slices, as the administrator here)
            held = admin.get(name=f"{node_a}-gpu").to_dict()
            held["spec"]["pool"]["generation"] = 1
            slices.replace(body=held)
            slices.delete(name=f"{node_a}-gpu")

            # another node's slice (written by the administrator) it may not delete
            admin.create(body=_slice(f"{node_b}-gpu", node_b))
            with pytest.raises(ApiException) as caught:
                slices.delete(name=f"{node_b}-gpu")
            assert caught.value.status == 403
            assert f'not one of node "{node_b}"' in json.loads(caught.value.body)["message"]
            admin.delete(name=f"{node_b}-gpu")

            # a token bound to no pod names no node: no slice at all
            with _account_client(kube_api, kube_namespace, account) as unbound_api:
                unbound = dynamic.DynamicClient(unbound_api).resources.get(
                    api_version="resource.k8s.io/v1", kind="ResourceSlice"
                )
                with pytest.raises(ApiException) as caught:
                    unbound.create(body=_slice(f"{node_a}-gpu", node_a))
                assert caught.value.status == 403
    finally:
        core.delete_node(node_a)
        core.delete_node(node_b)


# --- v1 mode: drasat's two programs with nothing but the chart's RBAC and policies ----------------

#: What the chart installs that the programs' permissions are made of (no workloads, no classes:
#: the programs run here as processes, and the DeviceClasses are cluster-wide names others use).
ACCESS_KINDS = {
    "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    # the scheduling gate: the controller lifts it under the policy that lets its token do
    # nothing else to a pod (controller-admission-policy.yaml)
    "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
}  # fmt: skip
FORBIDDEN = ("Forbidden", "forbidden", " 403")


def _args(container: Manifest, env: dict[str, str]) -> list[str]:
    return [a.replace("$(POD_NAMESPACE)", env["POD_NAMESPACE"]) for a in container["args"]]


def test_drasat_runs_with_the_charts_rbac_and_policies_alone(
    kube_api: kubernetes.client.ApiClient,
    kube_cluster: realcluster.Cluster,
    kube_namespace: str,
    drasat_crds: list[Any],
    tmp_path: pathlib.Path,
) -> None:
    """The v1 controller and a node plugin, each authenticated as the chart's ServiceAccount (the
    plugin with a token bound to a pod on its node, as the kubelet projects it), started with the
    chart's own arguments: the controller leads through its Lease, reads its policy and creates
    its DeviceTaintRule, the plugin publishes its NAS and ResourceSlices; the controller then
    places a claim (finalizer, status.allocation, which 1.37 also authorizes on
    resourceclaims/binding), tells a pod that fits nowhere why (an Event), and releases the
    claim when its pod is gone; neither program is refused anything on the way."""
    prefix = f"e2e-{uuid.uuid4().hex[:6]}-drasat"
    values = {"fullnameOverride": prefix, "controller": {"leaderElection": {"leaseName": prefix}}}
    # what 1.37 gets: the scheduling gate's MutatingAdmissionPolicy, no webhook to serve
    manifests = render(kube_namespace, "1.37.2", values, tmp_path, (VAP, MAP))
    client = dynamic.DynamicClient(kube_api)
    core = kubernetes.client.CoreV1Api(kube_api)
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    node = f"{prefix}-node"
    created: list[tuple[Any, str]] = []
    processes: list[Any] = []
    try:
        for manifest in (m for m in manifests if m["kind"] in ACCESS_KINDS):
            resource = client.resources.get(
                api_version=manifest["apiVersion"], kind=manifest["kind"]
            )
            namespace = kube_namespace if resource.namespaced else None
            resource.create(body=manifest, namespace=namespace)
            if namespace is None:
                created.append((resource, manifest["metadata"]["name"]))
        create_fake_node(kube_api, node)
        env = {"POD_NAMESPACE": kube_namespace}

        # the controller, as its Deployment runs it (metrics off: no port to share)
        controller_args = _args(_container_of(manifests, "Deployment"), env)
        controller_args = [a for a in controller_args if not a.startswith("--metrics-address")]
        controller_token = service_account_token(
            kube_api, kube_namespace, f"{prefix}-controller", seconds=600
        )
        controller_config = account_kubeconfig(
            kube_cluster, controller_token, tmp_path / "controller.kubeconfig"
        )
        controller_log = tmp_path / "controller.log"
        processes.append(
            drasatprocess.run(
                [*controller_args, "--metrics-address", "", "--kubeconfig", str(controller_config)],
                controller_log,
            )
        )

        # a node plugin on `node`, with its DaemonSet's API flags and a simulated GPU
        pod = core.create_namespaced_pod(
            kube_namespace,
            {
                "metadata": {"name": "plugin"},
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": f"{prefix}-node-plugin",
                    "containers": [{"name": "plugin", "image": "drasat"}],
                },
            },
        )
        plugin_token = service_account_token(
            kube_api, kube_namespace, f"{prefix}-node-plugin",
            bound_pod=(pod.metadata.name, pod.metadata.uid), seconds=600,
        )  # fmt: skip
        plugin_config = account_kubeconfig(
            kube_cluster, plugin_token, tmp_path / "plugin.kubeconfig"
        )
        wanted = ("--namespace=", "--kubelet-api=", "--resourceslices", "--shares", "--no-shares")
        plugin_args = [
            a for a in _args(_container_of(manifests, "DaemonSet"), env) if a.startswith(wanted)
        ]
        assert "--resourceslices" in plugin_args and "--kubelet-api=structured" in plugin_args
        plugin_dir = tmp_path / "plugin"
        plugin_dir.mkdir()
        processes.append(
            drasatprocess.start_plugin(
                plugin_dir,
                node,
                *plugin_args,
                "--simulate-gpus",
                "2xA100-40GB",
                "--kubeconfig",
                str(plugin_config),
            )
        )

        def taint_rule() -> Any:
            try:
                return custom.get_cluster_custom_object(
                    "resource.k8s.io", "v1", "devicetaintrules", "drasat-allocator"
                )
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise

        def logs() -> str:
            plugin_log = (plugin_dir / "plugin.log").read_text(errors="replace")
            return f"controller:\n{controller_log.read_text(errors='replace')[-3000:]}\n" + (
                f"plugin:\n{plugin_log[-3000:]}"
            )

        rule = wait_for(taint_rule, timeout=60, what=f"the DeviceTaintRule\n{logs()}")
        assert rule["spec"]["taint"]["effect"] == "NoSchedule"
        lease = kubernetes.client.CoordinationV1Api(kube_api)
        wait_for(
            lambda: lease.read_namespaced_lease(prefix, kube_namespace).spec.holder_identity,
            timeout=60,
            what=f"the controller to lead\n{logs()}",
        )
        slices = dynamic.DynamicClient(kube_api).resources.get(
            api_version="resource.k8s.io/v1", kind="ResourceSlice"
        )

        def published() -> list[Any]:
            found = slices.get(field_selector=f"spec.nodeName={node}").items
            return [s for s in found if s.spec.driver == "gpu.drasat.io"]

        wait_for(published, timeout=60, what=f"the plugin's ResourceSlices\n{logs()}")
        nas = ("nas.gpu.drasat.io", "v1alpha1", kube_namespace, "nodeallocationstates", node)
        assert custom.get_namespaced_custom_object(*nas)["spec"]["allocatableDevices"]
        with device_classes(kube_api):
            _allocate_and_release(kube_api, kube_namespace, node, logs)
        text = logs()
        assert not [word for word in FORBIDDEN if word in text], text
        lifted = "fits: scheduling gate gpu.drasat.io/allocation lifted"
        assert lifted in controller_log.read_text(errors="replace"), text
    finally:
        for process in processes:
            drasatprocess.stop(process)
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(
                "resource.k8s.io", "v1", "devicetaintrules", "drasat-allocator"
            )
        with contextlib.suppress(ApiException):
            core.delete_node(node)
        with contextlib.suppress(ApiException):  # the plugin leaves its slices when it stops
            client.resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice").delete(
                field_selector=f"spec.nodeName={node}"
            )
        for resource, name in reversed(created):
            with contextlib.suppress(ApiException):
                resource.delete(name=name)


def _container_of(manifests: list[Manifest], kind: str) -> Manifest:
    """The container of the chart's one workload of `kind` (the DaemonSet: the node plugin's)."""
    (workload,) = [
        m
        for m in manifests
        if m["kind"] == kind and not m["metadata"]["name"].endswith("-mps-host")
    ]
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


def _claim(name: str, count: int) -> Manifest:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.drasat.io", "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}},
    }


def _pod(name: str, claim: str, node: str) -> Manifest:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [
                {"name": "app", "image": "app", "resources": {"claims": [{"name": "gpu"}]}}
            ],
        },
    }


def _allocate_and_release(
    kube_api: kubernetes.client.ApiClient, namespace: str, node: str, logs: Any
) -> None:
    """One claim placed by drasat and bound by kube-scheduler on `node` (two simulated GPUs), one
    that fits nowhere (three GPUs), then both pods gone and the claims released and deleted."""
    core = kubernetes.client.CoreV1Api(kube_api)
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    claims = ("resource.k8s.io", "v1", namespace, "resourceclaims")
    custom.create_namespaced_custom_object(*claims[:3], "resourceclaims", _claim("one", 1))
    custom.create_namespaced_custom_object(*claims[:3], "resourceclaims", _claim("three", 3))
    core.create_namespaced_pod(namespace, _pod("fits", "one", node))
    core.create_namespaced_pod(namespace, _pod("too-big", "three", node))

    def placed() -> Any:
        claim = custom.get_namespaced_custom_object(*claims, "one")
        pod = core.read_namespaced_pod("fits", namespace)
        return claim if claim.get("status", {}).get("allocation") and pod.spec.node_name else None

    claim = wait_for(placed, timeout=60, what=f"the claim placed and its pod bound\n{logs()}")
    assert "gpu.drasat.io/deletion-protection" in claim["metadata"]["finalizers"]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == ("gpu.drasat.io", node)

    def refused() -> bool:
        events = core.list_namespaced_event(namespace).items
        return any(e.reason == "NotAllocatable" and e.involved_object.name == "too-big"
                   for e in events)  # fmt: skip

    wait_for(refused, timeout=60, what=f"drasat's Event on the pod that fits nowhere\n{logs()}")
    for pod in ("fits", "too-big"):  # no kubelet on the node: delete at once
        core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
    for name in ("one", "three"):
        custom.delete_namespaced_custom_object(*claims, name)

    def released() -> bool:
        left = custom.list_namespaced_custom_object(*claims)["items"]
        return not left

    # the controller deallocates "one" once its pod is gone and drops its finalizer
    wait_for(released, timeout=60, what=f"both claims deleted\n{logs()}")
