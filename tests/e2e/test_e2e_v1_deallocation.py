"""A claim drasat allocated that no pod uses any more gives its devices back, on the real 1.37
control plane (kube-apiserver, kube-scheduler, kube-controller-manager with its resourceclaim
controller), drasat's controller and node plugins as processes, simulated kubelets.

- a standalone claim whose last pod leaves is deallocated, and a waiting pod gets its GPU;
- a drained node: the node cordoned, the claim's pod evicted while the next pod naming the claim
  already waits; the claim is allocated again on the other node and the new pod runs there;
- the controller down while the pod leaves: the next controller deallocates the claim.

Each ends with `allockit.consistent` (no device held twice, the NAS ledger agrees with the
claims, every allocation of drasat's devices drasat's own). The speed of it beside the
resourceclaim controller's own deallocation: `bench/deallocation.py`, docs/CONTROLLER.md.
"""

from __future__ import annotations

import contextlib
import pathlib
import textwrap
from collections.abc import Iterator
from typing import Any

import allockit
import drasatprocess
import kubernetes
import pytest
from kubecluster import wait_for
from kubeletkit import gpu_node
from slicekit import applied, unique

from drasat.api.groups import FINALIZER
from drasat.testbed.controlplane import realcluster

pytestmark = pytest.mark.timeout(400)

RESOURCE = ("resource.k8s.io", "v1")
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def allocator(
    kube_api: kubernetes.client.ApiClient, kube_cluster: realcluster.Cluster
) -> Iterator[allockit.Allocator]:
    with allockit.allocator(kube_api, kube_cluster) as found:
        yield found


def _node(api: Any, kube: realcluster.Cluster, prefix: str, fleet: str) -> Any:
    return gpu_node(api, kube, unique(prefix), fleet, nas_namespace=allockit.NAMESPACE)


def _manifest(tmp: pathlib.Path, name: str, text: str) -> pathlib.Path:
    path = tmp / f"{name}.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _claim(namespace: str, name: str) -> str:
    return f"""
        ---
        apiVersion: resource.k8s.io/v1
        kind: ResourceClaim
        metadata: {{namespace: {namespace}, name: {name}}}
        spec:
          devices:
            requests:
            - {{name: gpu, exactly: {{deviceClassName: gpu.drasat.io}}}}"""


def _pod(namespace: str, name: str, claim: str) -> str:
    return f"""
        ---
        apiVersion: v1
        kind: Pod
        metadata: {{namespace: {namespace}, name: {name}}}
        spec:
          containers: [{{name: c, image: x, resources: {{claims: [{{name: gpu}}]}}}}]
          resourceClaims: [{{name: gpu, resourceClaimName: {claim}}}]"""


def _namespace(namespace: str) -> str:
    return f"""
        apiVersion: v1
        kind: Namespace
        metadata: {{name: {namespace}}}"""


def _get(api: Any, namespace: str, name: str) -> Obj:
    custom = kubernetes.client.CustomObjectsApi(api)
    found: Obj = custom.get_namespaced_custom_object(*RESOURCE, namespace, "resourceclaims", name)
    return found


def _node_of(api: Any, namespace: str, name: str) -> str | None:
    allocation = (_get(api, namespace, name).get("status") or {}).get("allocation") or {}
    found = (allocation.get("devices") or {}).get("results") or []
    return str(found[0]["pool"]) if found else None


def _given_back(api: Any, namespace: str, name: str) -> bool:
    claim = _get(api, namespace, name)
    status = claim.get("status") or {}
    finalizers = claim["metadata"].get("finalizers") or []
    return (
        not status.get("allocation")
        and not status.get("reservedFor")
        and (FINALIZER not in finalizers)
    )


def test_a_standalone_claims_gpu_goes_to_the_next_pod_once_its_last_pod_leaves(
    kube_api: Any,
    kube_cluster: realcluster.Cluster,
    allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:
    ns = "v1-dealloc"
    first = _manifest(
        tmp_path, "first", _namespace(ns) + _claim(ns, "shared") + _pod(ns, "a", "shared")
    )
    with _node(kube_api, kube_cluster, "v1dl", "1xT4") as node, applied(kube_api, first):
        node.wait_running(ns, "a")
        later = _manifest(tmp_path, "later", _claim(ns, "next") + _pod(ns, "b", "next"))
        with applied(kube_api, later):
            wait_for(lambda: f"ResourceClaim {ns}/next: NotAllocatable" in allocator.text(),
                     timeout=60, what="drasat to find the GPU held")  # fmt: skip
            assert _node_of(kube_api, ns, "next") is None  # the only GPU is held
            node.delete_pods(kube_api, ns, "a")
            wait_for(lambda: _given_back(kube_api, ns, "shared"), timeout=60,
                     what="the unused claim to be deallocated")  # fmt: skip
            node.wait_running(ns, "b")
            allockit.consistent(kube_api, allocator)


def test_a_drained_nodes_claim_follows_its_next_pod_to_another_node(
    kube_api: Any,
    kube_cluster: realcluster.Cluster,
    allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:
    ns = "v1-drain"
    core = kubernetes.client.CoreV1Api(kube_api)
    first = _manifest(
        tmp_path, "first", _namespace(ns) + _claim(ns, "cache") + _pod(ns, "old", "cache")
    )
    with contextlib.ExitStack() as stack:
        one = stack.enter_context(_node(kube_api, kube_cluster, "v1dr", "1xT4"))
        stack.enter_context(applied(kube_api, first))
        one.wait_running(ns, "old")
        assert _node_of(kube_api, ns, "cache") == one.name
        two = stack.enter_context(_node(kube_api, kube_cluster, "v1dr2", "1xT4,seed=second"))
        # The drain: cordon, then the next pod (a Deployment's replacement) before the old one
        # is gone.
        core.patch_node(one.name, {"spec": {"unschedulable": True}})
        stack.callback(core.patch_node, one.name, {"spec": {"unschedulable": False}})
        stack.enter_context(applied(kube_api, _manifest(tmp_path, "new", _pod(ns, "new", "cache"))))
        one.delete_pods(kube_api, ns, "old")
        run = two.wait_running(ns, "new")
        assert run is not None
        assert _node_of(kube_api, ns, "cache") == two.name
        assert core.read_namespaced_pod("new", ns).spec.node_name == two.name
        allockit.consistent(kube_api, allocator)


def test_a_claim_left_while_the_controller_was_down_is_given_back_by_the_next(
    kube_api: Any,
    kube_cluster: realcluster.Cluster,
    allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:
    ns = "v1-dealloc-down"
    first = _manifest(tmp_path, "first", _namespace(ns) + _claim(ns, "c") + _pod(ns, "a", "c"))
    with _node(kube_api, kube_cluster, "v1dd", "1xT4") as node, applied(kube_api, first):
        node.wait_running(ns, "a")
        drasatprocess.stop(allocator.process)
        try:
            node.delete_pods(kube_api, ns, "a")
            # The resourceclaim controller clears the reservation; without upstream's
            # finalizer it leaves the allocation.
            wait_for(lambda: not (_get(kube_api, ns, "c").get("status") or {}).get("reservedFor"),
                     timeout=60)  # fmt: skip
            assert _node_of(kube_api, ns, "c") == node.name
        finally:
            allocator.process = allockit.start(allocator.kubeconfig, allocator.log)
        wait_for(lambda: _given_back(kube_api, ns, "c"), timeout=90,
                 what="the restarted controller to deallocate the claim")  # fmt: skip
        allockit.consistent(kube_api, allocator)
