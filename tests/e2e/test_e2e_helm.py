"""The Helm chart's objects on the real kube-apiserver v1.37.2.

The chart targets classic DRA (Kubernetes 1.27-1.31; `Chart.yaml` says so in `kubeVersion`), so
it is rendered for 1.30 and 1.31 the way helm would for such a cluster and each object it renders
goes to the 1.37 server with `kubectl apply --dry-run=server` (the kubectl of the helm/kubectl
wheel): every built-in object (RBAC, the ValidatingAdmissionPolicy and its binding, the
Deployment, DaemonSet, Service, ConfigMap, ServiceAccounts) and drasat's own DeviceClassParameters
must pass the server's validation and admission, and exactly the classic-DRA class objects
(resource.k8s.io/v1alpha2 ResourceClass, v1alpha3 DeviceClass), which 1.37 no longer serves, must
be refused as unknown kinds. docs/INSTALL.md says what this means for installing on 1.32+.

The node plugin's ValidatingAdmissionPolicy is also installed for real, with the plugin's RBAC,
and exercised with a pod-bound ServiceAccount token: the real server's CEL decides what the
simulation of it in tests/deploy/test_helm_chart.py decides.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from chartkit import CHART, Manifest, kubectl_apply, render
from helm_binary import helm_path
from kubecluster import create_fake_node, install_crds, service_account_token, wait_for
from kubernetes import dynamic
from kubernetes.client import ApiException

from drasat.api import crds
from drasat.controlplane import cluster

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
    kube_cluster: cluster.Cluster, namespace: str, manifests: list[Manifest], cache: pathlib.Path
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


def test_the_chart_renders_nothing_for_1_37() -> None:
    # helm refuses up front (Chart.yaml kubeVersion) rather than half-installing classic DRA.
    done = subprocess.run(
        [str(helm_path()), "template", "drasat", str(CHART), "--kube-version", "1.37.2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "chart requires kubeVersion" in done.stderr
    assert "incompatible with Kubernetes v1.37.2" in done.stderr


@pytest.mark.parametrize("kube_version", sorted(CLASSIC_CLASS))
@pytest.mark.parametrize("values", [{}, NON_DEFAULT], ids=["default", "non-default"])
def test_every_object_the_server_serves_passes_a_server_side_dry_run(
    kube_cluster: cluster.Cluster,
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
