"""Pods that ask for `nvidia.com/gpu` in their resources, on the real control plane (issue 26
item 2): drasat's MutatingAdmissionPolicy converts them into claims of drasat's class
(`drasat.v1.extended`), drasat's controller creates the templates they name and allocates the
claims, kube-scheduler binds, the node plugin prepares.

Also pinned here: why drasat does not take Kubernetes' own extended-resource path (a DeviceClass
with `extendedResourceName`) and allocate the pod's claim itself: kube-scheduler deletes a claim
made for the pod beforehand as stale.
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Iterator
from typing import Any

import allockit
import kubernetes
import pytest
from kubecluster import create_fake_node, wait_for
from kubeletkit import gpu_node
from kubernetes.client import ApiException
from slicekit import applied, unique

from drasat.testbed.controlplane import realcluster
from drasat.v1 import extended

pytestmark = pytest.mark.timeout(400)

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "examples"
ADMISSION = ("admissionregistration.k8s.io", "v1")
RESOURCE = ("resource.k8s.io", "v1")
Obj = dict[str, Any]


@contextlib.contextmanager
def _policy(api: kubernetes.client.ApiClient) -> Iterator[None]:
    """drasat's admission policy and binding (as the chart installs them), removed afterwards."""
    custom = kubernetes.client.CustomObjectsApi(api)
    policy, binding = extended.admission_policy()
    made = []
    try:
        for body, plural in ((policy, "mutatingadmissionpolicies"),
                             (binding, "mutatingadmissionpolicybindings")):  # fmt: skip
            custom.create_cluster_custom_object(*ADMISSION, plural, body)
            made.append(plural)
        yield
    finally:
        for plural in reversed(made):
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(*ADMISSION, plural, extended.POLICY_NAME)


def _pod(name: str, spec: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _container(name: str, **resources: Obj) -> Obj:
    return {"name": name, "image": "x", "resources": resources}


#: Pod specs as users write them: one container, two containers (1 and 2 GPUs, limits and
#: requests), init containers and a sidecar, a pod with a claim of its own beside.
SPECS = {
    "one": {"containers": [_container("c", limits={"nvidia.com/gpu": "1"})]},
    "two": {
        "containers": [
            _container("a", limits={"nvidia.com/gpu": "1", "cpu": "1"}),
            _container(
                "b", limits={"nvidia.com/gpu": "2"}, requests={"nvidia.com/gpu": "2", "cpu": "1"}
            ),
        ]
    },
    "init": {
        "initContainers": [_container("setup", limits={"nvidia.com/gpu": "1"})],
        "containers": [_container("c"), _container("d", limits={"nvidia.com/gpu": "1"})],
    },
    # Init containers as Kubernetes counts them: they use the long-lived containers' GPUs first
    # and share one claim for what those lack; a sidecar (restartPolicy Always) is long-lived.
    "init-only": {
        "initContainers": [_container("setup", limits={"nvidia.com/gpu": "2"})],
        "containers": [_container("c")],
    },
    "inits": {
        "initContainers": [
            _container("a", limits={"nvidia.com/gpu": "3"}),
            {**_container("proxy", limits={"nvidia.com/gpu": "1"}), "restartPolicy": "Always"},
            _container("b", limits={"nvidia.com/gpu": "4"}),
            _container("c", limits={"nvidia.com/gpu": "1"}),
        ],
        "containers": [_container("d"), _container("e", limits={"nvidia.com/gpu": "2"})],
    },
    "beside": {
        "containers": [
            {**_container("c", limits={"nvidia.com/gpu": "1"}), "resources": {
                "limits": {"nvidia.com/gpu": "1"}, "claims": [{"name": "mine"}]}},
        ],
        "resourceClaims": [{"name": "mine", "resourceClaimTemplateName": "elsewhere"}],
    },
}  # fmt: skip


def _compared(spec: Obj) -> Obj:
    """What the conversion decides (the API server's defaults aside, such as requests copied
    from limits): each container's claims and resource names, the pod's claims."""
    out: Obj = {"resourceClaims": spec.get("resourceClaims") or []}
    for field in ("initContainers", "containers"):
        out[field] = [_resources(c.get("resources") or {}) for c in spec.get(field) or []]
    return out


def _resources(resources: Obj) -> tuple[list[Obj], list[str]]:
    names = {*(resources.get("limits") or {}), *(resources.get("requests") or {})}
    return resources.get("claims") or [], sorted(names)


def test_the_admission_policy_converts_pods_as_the_python_rule_does(
    kube_api: kubernetes.client.ApiClient, kube_namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(kube_api)
    with _policy(kube_api):

        def admitted(name: str) -> Obj:
            # A server-side dry run goes through admission and stores nothing.
            created = core.create_namespaced_pod(kube_namespace, _pod(name, SPECS[name]),
                                                 dry_run="All")  # fmt: skip
            return kube_api.sanitize_for_serialization(created)["spec"]  # type: ignore[no-any-return]

        # The policy takes effect once the API server's policy informer has it.
        wait_for(lambda: "resourceClaims" in admitted("one"), timeout=30, what="the policy")
        for name, spec in SPECS.items():
            expected = extended.convert(spec)
            assert expected.changed
            assert _compared(admitted(name)) == _compared(expected.spec), name
        # A pod that asks for no nvidia.com/gpu, or for 0, is left alone; a count that is not
        # whole is left for the API server to refuse (as the what-if refuses it).
        for limits in ({"cpu": "1"}, {"nvidia.com/gpu": "0"}):
            plain = {"containers": [_container("c", limits=limits)]}
            created = core.create_namespaced_pod(kube_namespace, _pod("plain", plain),
                                                 dry_run="All")  # fmt: skip
            assert not created.spec.resource_claims
            assert not extended.convert(plain).changed
        half = {"containers": [_container("c", limits={"nvidia.com/gpu": "1500m"})]}
        with pytest.raises(ApiException, match="must be an integer"):
            core.create_namespaced_pod(kube_namespace, _pod("half", half), dry_run="All")
        with pytest.raises(extended.ConversionError):
            extended.convert(half)


def test_kube_scheduler_deletes_an_extended_resource_claim_made_beforehand(
    kube_api: kubernetes.client.ApiClient, kube_namespace: str
) -> None:
    """Why drasat converts at admission rather than allocate Kubernetes' own extended-resource
    claim: kube-scheduler (1.37) refuses every node for a pod whose claim of that kind already
    has requests (`filterExtendedResources`) and deletes the claim (`PostFilter`), allocated or
    not; a pod with scheduling gates cannot be bound by anyone else."""
    core = kubernetes.client.CoreV1Api(kube_api)
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    resource = f"example.com/{unique('premade')}"
    name = unique("premade-class")
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"extendedResourceName": resource},
    }
    node = unique("premade-node")
    custom.create_cluster_custom_object(*RESOURCE, "deviceclasses", device_class)
    create_fake_node(kube_api, node)
    try:
        pod = _pod("premade", {"containers": [_container("c", limits={resource: "1"})]})
        pod["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
        made = core.create_namespaced_pod(kube_namespace, pod)
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": "premade-extended-resources",
                "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": "premade",
                     "uid": made.metadata.uid, "controller": True},
                ],
            },
            "spec": {"devices": {"requests": [
                {"name": "container-0-request-0",
                 "exactly": {"deviceClassName": name, "count": 1}},
            ]}},
        }  # fmt: skip
        custom.create_namespaced_custom_object(*RESOURCE, kube_namespace, "resourceclaims", claim)
        with pytest.raises(ApiException, match="schedulingGates"):
            core.create_namespaced_pod_binding(
                "premade",
                kube_namespace,
                {"metadata": {"name": "premade"}, "target": {"kind": "Node", "name": node}},
            )
        core.patch_namespaced_pod("premade", kube_namespace, {"spec": {"schedulingGates": None}})

        def gone() -> bool:
            try:
                custom.get_namespaced_custom_object(
                    *RESOURCE, kube_namespace, "resourceclaims", "premade-extended-resources"
                )
            except ApiException as exc:
                return exc.status == 404
            return False

        wait_for(gone, timeout=60, what="kube-scheduler deleting the claim made beforehand")
    finally:
        with contextlib.suppress(ApiException):
            core.delete_namespaced_pod("premade", kube_namespace, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            core.delete_node(node)
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(*RESOURCE, "deviceclasses", name)


@pytest.fixture(scope="module")
def allocator(
    kube_api: kubernetes.client.ApiClient, kube_cluster: realcluster.Cluster
) -> Iterator[allockit.Allocator]:
    with allockit.allocator(kube_api, kube_cluster) as found, _policy(kube_api):
        yield found


def test_pods_asking_nvidia_com_gpu_run_on_gpus_drasat_allocated(
    kube_api: kubernetes.client.ApiClient,
    kube_cluster: realcluster.Cluster,
    allocator: allockit.Allocator,
) -> None:
    namespace = "gpu-extended"
    core = kubernetes.client.CoreV1Api(kube_api)
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    wait_for(lambda: _policy_ready(core), timeout=30, what="the admission policy")
    with (
        gpu_node(
            kube_api, kube_cluster, unique("v1ext"), "3xT4", nas_namespace=allockit.NAMESPACE
        ) as node,
        applied(kube_api, EXAMPLES / "v1-extended-resource/gpu-pods.yaml"),
    ):
        one = node.wait_running(namespace, "one-gpu")
        two = node.wait_running(namespace, "two-gpus")
        devices = [
            sorted(d.device_name for claim in run.claims for d in run.prepared[claim.uid])
            for run in (one, two)
        ]
        assert len(devices[0]) == 1 and len(devices[1]) == 2
        assert sorted(devices[0] + devices[1]) == ["gpu-0", "gpu-1", "gpu-2"]
        # The controller made the two templates; the pods hold claims of drasat's class.
        templates = custom.list_namespaced_custom_object(
            *RESOURCE, namespace, "resourceclaimtemplates"
        )["items"]
        assert sorted(t["metadata"]["name"] for t in templates) == [
            "drasat-nvidia-com-gpu-1",
            "drasat-nvidia-com-gpu-2",
        ]
        pod = core.read_namespaced_pod("two-gpus", namespace)
        assert "nvidia.com/gpu" not in (pod.spec.containers[0].resources.limits or {})
        assert [c.name for c in pod.spec.resource_claims] == ["drasat-gpu-0"]
        allockit.consistent(kube_api, allocator)
        assert {f"{namespace}/{c.name}" for c in one.claims + two.claims} <= set(
            allocator.allocated()
        )


def _policy_ready(core: kubernetes.client.CoreV1Api) -> bool:
    probe = _pod("probe", SPECS["one"])
    created = core.create_namespaced_pod("default", probe, dry_run="All")
    return bool(created.spec.resource_claims)
