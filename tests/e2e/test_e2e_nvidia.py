"""drasat as the allocator for NVIDIA's DRA driver on the real control plane (issue 30).

kube-apiserver, kube-scheduler and kube-controller-manager v1.37 are real; `drasat controller
--driver gpu.nvidia.com` is the real process. A test publisher (`nvidiaslices`) puts NVIDIA-format
ResourceSlices (driver gpu.nvidia.com, as NVIDIA's driver publishes them: Tesla T4s, one with an
XID taint; an A100 with dynamic MIG, its counter set and every placement; an A100 with static MIG
devices) and NVIDIA's DeviceClasses in the API. NVIDIA's quickstart specs, unchanged, are then
allocated by drasat (the controller's log names every claim it allocated), kube-scheduler binds
the pods where the claims are, and each allocation is one upstream's allocator accepts (the
oracle, k8s.io/dynamic-resource-allocation v0.37.2, given the node's slices and the other claims
allocated there). No NodeAllocationState exists: the ledger is the claims' statuses.

NVIDIA's kubelet plugin does not run here (it needs NVML; see docs/INSTALL.md): the pods are
bound, not started.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import allockit
import drasatprocess
import kubernetes
import nvidiaslices
import pytest
import yaml
from kubecluster import wait_for
from kubernetes.client import ApiException
from slicekit import unique

from drasat.testbed.controlplane import realcluster

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "oracle"))
import oraclekit

pytestmark = pytest.mark.timeout(400)

Obj = dict[str, Any]
RESOURCE = ("resource.k8s.io", "v1")
RULE = "drasat-allocator-gpu.nvidia.com"
#: NVIDIA's quickstart specs run here unchanged, and what each places: gpu-test1's two pods get
#: a T4 each, gpu-test5's pod two T4s (time-sliced and MPS by NVIDIA's GpuConfig), gpu-test4's
#: Deployment four MIG devices of one A100 per pod (one pod per dynamic-MIG A100; the static
#: A100 has no second 1g.5gb device).
SPECS = ("gpu-test1.yaml", "gpu-test5.yaml", "gpu-test4.yaml")


@pytest.fixture(scope="module")
def oracle() -> Iterator[oraclekit.Oracle]:
    path = oraclekit.binary()
    if path is None:
        message = f"drasat-oracle is not built: run {oraclekit.BUILD} (or make test)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    process = oraclekit.Oracle(path)
    yield process
    process.close()


@pytest.fixture(scope="module")
def nvidia_allocator(
    kube_api: kubernetes.client.ApiClient, kube_cluster: realcluster.Cluster
) -> Iterator[allockit.Allocator]:
    allockit.prepare(kube_api)
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    for body in nvidiaslices.device_classes():
        with contextlib.suppress(ApiException):
            custom.create_cluster_custom_object(*RESOURCE, "deviceclasses", body)
    folder = tempfile.TemporaryDirectory(prefix="alloc-nv-")
    log = pathlib.Path(folder.name) / "controller.log"
    process = allockit.start(kube_cluster.kubeconfig, log, "--driver", "gpu.nvidia.com")
    found = allockit.Allocator(process, log, kube_cluster.kubeconfig)
    try:
        wait_for(lambda: _rule(custom), timeout=60, what=f"{RULE}\n{found.text()[-3000:]}")
        yield found
    finally:
        drasatprocess.stop(found.process)
        folder.cleanup()
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(*RESOURCE, "devicetaintrules", RULE)
        for body in nvidiaslices.device_classes():
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(
                    *RESOURCE, "deviceclasses", body["metadata"]["name"]
                )


def _rule(custom: Any) -> Obj | None:
    try:
        found: Obj = custom.get_cluster_custom_object(*RESOURCE, "devicetaintrules", RULE)
        return found
    except ApiException:
        return None


@contextlib.contextmanager
def _fleet(
    api: kubernetes.client.ApiClient, nodes: list[tuple[Obj, list[Obj]]]
) -> Iterator[dict[str, list[Obj]]]:
    """The nodes with their NVIDIA-format slices, published by the test; node -> its slices as
    created. Deleted after."""
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    made: dict[str, list[Obj]] = {}
    try:
        for node, slices in nodes:
            name = node["metadata"]["name"]
            made[name] = []
            core.create_node(node)
            core.patch_node_status(name, {"status": node["status"]})
            # Only NVIDIA's node taint stays (the not-ready one goes, as the node lifecycle
            # controller lifts it once a kubelet reports Ready).
            core.patch_node(name, {"spec": {"taints": (node.get("spec") or {}).get("taints")}})
            for body in slices:
                made[name].append(
                    custom.create_cluster_custom_object(*RESOURCE, "resourceslices", body)
                )
        yield made
    finally:
        for name, slices in made.items():
            for body in slices:
                with contextlib.suppress(ApiException):
                    custom.delete_cluster_custom_object(
                        *RESOURCE, "resourceslices", body["metadata"]["name"]
                    )
            with contextlib.suppress(ApiException):
                core.delete_node(name)


@contextlib.contextmanager
def _applied(api: kubernetes.client.ApiClient, specs: tuple[str, ...]) -> Iterator[list[str]]:
    """NVIDIA's quickstart files as they are; their namespaces deleted after."""
    custom = kubernetes.client.CustomObjectsApi(api)
    core = kubernetes.client.CoreV1Api(api)
    namespaces: list[str] = []
    try:
        for spec in specs:
            text = (nvidiaslices.QUICKSTART / spec).read_text(encoding="utf-8")
            for document in [d for d in yaml.safe_load_all(text) if d]:
                if document["kind"] == "Namespace":
                    namespaces.append(document["metadata"]["name"])
                    gone = document["metadata"]["name"]
                    wait_for(lambda n=gone: not _exists(core, n), 120, what=f"namespace {gone}")
                if document["apiVersion"] == "resource.k8s.io/v1":
                    plural = document["kind"].lower() + "s"
                    namespace = document["metadata"]["namespace"]
                    custom.create_namespaced_custom_object(*RESOURCE, namespace, plural, document)
                else:
                    kubernetes.utils.create_from_dict(api, document)
        yield namespaces
    finally:
        for namespace in namespaces:
            _delete_namespace(core, namespace)


def _delete_namespace(core: Any, namespace: str) -> None:
    """The namespace deleted and gone: the v1 allocation tests apply the same quickstart files
    (namespaces gpu-test1 ...) and met them still terminating in the full suite. No kubelet
    confirms a bound pod's end here, so its pods are force-deleted once the namespace takes no
    new ones (a Deployment's ReplicaSet would make them again); else they hold the namespace
    until the pod garbage collector takes them."""
    with contextlib.suppress(ApiException):
        core.delete_namespace(namespace, grace_period_seconds=0)
    with contextlib.suppress(ApiException):
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    wait_for(lambda: not _exists(core, namespace), 120, what=f"namespace {namespace} gone")


@contextlib.contextmanager
def _h100_workload(api: kubernetes.client.ApiClient) -> Iterator[str]:
    """gpu-test4's shape on an H100-80GB: two 1g.10gb and a 3g.40gb MIG device of one GPU."""
    name = unique("nv-h100-mig")
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    profile = "device.attributes['gpu.nvidia.com'].profile == '{}'"
    requests = [
        {"name": r, "exactly": {"deviceClassName": "mig.nvidia.com",
                                "selectors": [{"cel": {"expression": profile.format(p)}}]}}
        for r, p in (("a", "1g.10gb"), ("b", "1g.10gb"), ("c", "3g.40gb"))
    ]  # fmt: skip
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
             "metadata": {"name": "mig", "namespace": name},
             "spec": {"spec": {"devices": {"requests": requests, "constraints": [
                 {"requests": [], "matchAttribute": "gpu.nvidia.com/parentUUID"}]}}}}  # fmt: skip
    container = {"name": "c", "image": "x", "resources": {"claims": [{"name": "mig"}]}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pod", "namespace": name},
        "spec": {
            "containers": [container],
            "resourceClaims": [{"name": "mig", "resourceClaimTemplateName": "mig"}],
        },
    }
    core.create_namespace({"metadata": {"name": name}})
    try:
        wait_for(lambda: _has_sa(core, name), 60, what=f"namespace {name}'s ServiceAccount")
        custom.create_namespaced_custom_object(*RESOURCE, name, "resourceclaimtemplates", claim)
        core.create_namespaced_pod(name, pod)
        yield name
    finally:
        _delete_namespace(core, name)


def _has_sa(core: Any, namespace: str) -> bool:
    try:
        core.read_namespaced_service_account("default", namespace)
    except ApiException:
        return False
    return True


def _exists(core: Any, name: str) -> bool:
    try:
        core.read_namespace(name)
    except ApiException:
        return False
    return True


def _pods(api: kubernetes.client.ApiClient, namespaces: list[str]) -> list[Obj]:
    core = kubernetes.client.CoreV1Api(api)
    return [
        api.sanitize_for_serialization(p)
        for n in namespaces
        for p in core.list_namespaced_pod(n).items
    ]


def _node_of(claim: Obj) -> str:
    terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    return str(terms[0]["matchFields"][0]["values"][0])


def test_nvidias_quickstart_specs_are_allocated_by_drasat_and_valid_upstream(
    kube_api: kubernetes.client.ApiClient,
    nvidia_allocator: allockit.Allocator,
    oracle: oraclekit.Oracle,
) -> None:
    kinds = ["nv-t4", "nv-t4", "nv-a100", "nv-a100", "nv-a100-static"]
    nodes = [nvidiaslices.node(kind, unique(kind)) for kind in kinds]
    nodes.append(nvidiaslices.fleet_node(unique("nv-h100"), "8xH100-80GB,mig=all"))
    with (
        _fleet(kube_api, nodes) as fleet,
        _applied(kube_api, SPECS) as namespaces,
        _h100_workload(kube_api) as h100,
    ):
        namespaces = [*namespaces, h100]

        # gpu-test1: 2 pods, gpu-test5: 1 pod, gpu-test4: 2 of its 4 replicas (one per
        # dynamic-MIG A100), the H100 pod: 6 bound; the rest stay pending, refused with the
        # solver's reason.
        def bound() -> list[Obj] | None:
            pods = _pods(kube_api, namespaces)
            placed = [p for p in pods if p["spec"].get("nodeName")]
            return placed if len(placed) >= 6 else None

        placed = wait_for(bound, 120, what=f"6 pods bound\n{nvidia_allocator.text()[-3000:]}")
        by_namespace: dict[str, int] = {}
        for pod in placed:
            by_namespace[pod["metadata"]["namespace"]] = (
                by_namespace.get(pod["metadata"]["namespace"], 0) + 1
            )
        assert by_namespace == {"gpu-test1": 2, "gpu-test5": 1, "gpu-test4": 2, h100: 1}
        claims = [c for c in allockit.claims(kube_api) if c["metadata"]["namespace"] in namespaces]
        allocated = [c for c in claims if (c.get("status") or {}).get("allocation")]
        written = nvidia_allocator.allocated()
        assert len(allocated) == 6
        for claim in allocated:
            ref = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
            # drasat wrote it (kube-scheduler's allocator never ran: the DeviceTaintRule).
            assert written.get(ref) == _node_of(claim), ref
            results = claim["status"]["allocation"]["devices"]["results"]
            assert {r["driver"] for r in results} == {"gpu.nvidia.com"}
            assert not [r for r in results if r["device"] == "gpu-2" and "t4" in r["pool"]], (
                "the T4 with NVIDIA's XID taint was allocated"
            )
        # Each pod is bound where its claims are.
        for pod in placed:
            names = {s["resourceClaimName"] for s in pod["status"]["resourceClaimStatuses"]}
            nodes = {_node_of(c) for c in allocated if c["metadata"]["name"] in names
                     and c["metadata"]["namespace"] == pod["metadata"]["namespace"]}  # fmt: skip
            assert nodes == {pod["spec"]["nodeName"]}
        # NVIDIA's opaque configs are copied into the allocation for its plugin to apply.
        (test5,) = [c for c in allocated if c["metadata"]["namespace"] == "gpu-test5"]
        config = test5["status"]["allocation"]["devices"]["config"]
        assert [(c["source"], c["requests"], c["opaque"]["parameters"]["sharing"]["strategy"])
                for c in config] == [("FromClaim", ["ts-gpu"], "TimeSlicing"),
                                     ("FromClaim", ["mps-gpu"], "MPS")]  # fmt: skip
        # Valid for upstream's allocator, each beside the others on its node.
        classes = nvidiaslices.device_classes()
        for claim in allocated:
            node = _node_of(claim)
            others = [c["status"]["allocation"] for c in allocated
                      if c is not claim and _node_of(c) == node]  # fmt: skip
            request = {"metadata": claim["metadata"], "spec": claim["spec"]}
            verdict = oracle.validate(
                node, fleet[node], classes, request, claim["status"]["allocation"], others
            )
            assert verdict["valid"], (claim["metadata"]["name"], verdict["reason"])
        # No NodeAllocationState: the ledger of NVIDIA's nodes is the claims' statuses.
        assert not set(allockit.ledgers(kube_api)) & set(fleet)


def test_pods_asking_nvidia_com_gpu_are_allocated_by_drasat_on_nvidias_gpus(
    kube_api: kubernetes.client.ApiClient, nvidia_allocator: allockit.Allocator
) -> None:
    """NVIDIA's chart gives its class `gpu.nvidia.com` `extendedResourceName: nvidia.com/gpu`.
    kube-scheduler's own claim for such a pod it cannot allocate (drasat's DeviceTaintRule is on
    every NVIDIA device), so drasat's admission policy converts the pod and drasat's controller
    makes its template of that class: drasat allocates, kube-scheduler binds. The init container
    uses the app container's GPU (one GPU for the pod, as Kubernetes counts it)."""
    core = kubernetes.client.CoreV1Api(kube_api)
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    namespace = unique("nv-extended")
    limits = {"limits": {nvidiaslices.EXTENDED_RESOURCE: "1"}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "initContainers": [{"name": "fetch", "image": "x", "resources": limits}],
            "containers": [{"name": "train", "image": "x", "resources": limits}],
        },
    }
    node, slices = nvidiaslices.node("nv-t4", unique("nv-t4"))
    with _fleet(kube_api, [(node, slices)]), _extended_policy(kube_api):
        core.create_namespace({"metadata": {"name": namespace}})
        try:
            wait_for(lambda: _has_sa(core, namespace), 60, what=f"{namespace}'s ServiceAccount")
            wait_for(lambda: _policy_ready(core, namespace), 30, what="the admission policy")
            core.create_namespaced_pod(namespace, pod)

            def bound() -> str | None:
                found = core.read_namespaced_pod("trainer", namespace)
                return found.spec.node_name or None

            where = wait_for(bound, 120, what=f"the pod bound\n{nvidia_allocator.text()[-3000:]}")
            assert where == node["metadata"]["name"]
            template = custom.get_namespaced_custom_object(
                *RESOURCE, namespace, "resourceclaimtemplates", "drasat-nvidia-com-gpu-1"
            )
            (request,) = template["spec"]["spec"]["devices"]["requests"]
            assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
            (claim,) = [c for c in allockit.claims(kube_api)
                        if c["metadata"]["namespace"] == namespace]  # fmt: skip
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert result["driver"] == "gpu.nvidia.com"
            ref = f"{namespace}/{claim['metadata']['name']}"
            assert nvidia_allocator.allocated().get(ref) == where  # drasat wrote it
        finally:
            _delete_namespace(core, namespace)


@contextlib.contextmanager
def _extended_policy(api: kubernetes.client.ApiClient) -> Iterator[None]:
    """drasat's nvidia.com/gpu admission policy and binding, as the chart installs them."""
    from drasat.v1 import extended

    custom = kubernetes.client.CustomObjectsApi(api)
    admission = ("admissionregistration.k8s.io", "v1")
    made = []
    try:
        policy, binding = extended.admission_policy()
        for body, plural in ((policy, "mutatingadmissionpolicies"),
                             (binding, "mutatingadmissionpolicybindings")):  # fmt: skip
            custom.create_cluster_custom_object(*admission, plural, body)
            made.append(plural)
        yield
    finally:
        for plural in reversed(made):
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(*admission, plural, extended.POLICY_NAME)


def _policy_ready(core: Any, namespace: str) -> bool:
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
             "spec": {"containers": [{"name": "c", "image": "x", "resources": {
                 "limits": {nvidiaslices.EXTENDED_RESOURCE: "1"}}}]}}  # fmt: skip
    created = core.create_namespaced_pod(namespace, probe, dry_run="All")
    return bool(created.spec.resource_claims)
