"""The simulated scheduler and controller manager (`drasat.testbed.sim.v1scheduler`,
`drasat.testbed.sim.controllers`) against kube-scheduler and kube-controller-manager v1.37.2, on
`resource.k8s.io/v1` claims that someone else (here the test, in a cluster drasat's controller)
has allocated: the same scenario, the same outcome on both backends.

On "sim" the test starts the simulated scheduler and controller manager against the simulator;
on "real" the session's control plane runs the real ones. Nodes are fake (no kubelet); the pods'
nodeSelector keeps them on this test's nodes (the real cluster may hold other tests' nodes).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from contract import Backend
from kubecluster import create_fake_node, wait_for
from kubernetes.client import ApiException

from drasat.testbed.sim import controllers, kubeclient, v1scheduler

RESOURCE_V1 = ("resource.k8s.io", "v1")
LABEL = "test.drasat.io/contract"
DRIVER = "gpu.test.drasat.io"


@pytest.fixture
def control_plane(backend: Backend) -> Iterator[None]:
    """The scheduler and controller manager of the backend: started here on "sim"."""
    if not backend.sim:
        yield
        return
    assert backend.server is not None
    url = backend.server.url
    with (
        v1scheduler.V1Scheduler(kubeclient.KubeClient(url), resync=0.2),
        controllers.ControllerManager(kubeclient.KubeClient(url), resync=0.2),
    ):
        yield


@pytest.fixture
def nodes(backend: Backend) -> Iterator[tuple[str, str]]:
    """Two fresh nodes: `a` carries this test's label (pods select it), `b` does not."""
    a, b = f"{backend.namespace}-a", f"{backend.namespace}-b"
    create_fake_node(backend.api, a, labels={LABEL: backend.namespace})
    create_fake_node(backend.api, b)
    yield a, b
    for name in (a, b):
        with contextlib.suppress(ApiException):
            backend.core.delete_node(name)


def _selector(node: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


def _claim_spec() -> dict[str, Any]:
    # A class nobody installs: kube-scheduler cannot allocate the claim itself (PreFilter: "device
    # class ... does not exist"), so only the test's allocation counts, as drasat's would.
    return {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}


def _allocated_claim(
    backend: Backend, name: str, node: str, *, finalizer: bool = False, stamped: bool = True
) -> Any:
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": _claim_spec(),
    }
    if finalizer:
        body["metadata"]["finalizers"] = [controllers.SCHEDULER_FINALIZER]
    custom = backend.custom
    custom.create_namespaced_custom_object(*RESOURCE_V1, backend.namespace, "resourceclaims", body)
    allocation = {
        "devices": {
            "results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": "gpu-0"}]
        },
        "nodeSelector": _selector(node),
    }
    if stamped:
        allocation["allocationTimestamp"] = "2026-01-02T03:04:05Z"
    return custom.patch_namespaced_custom_object_status(
        *RESOURCE_V1,
        backend.namespace,
        "resourceclaims",
        name,
        {"status": {"allocation": allocation}},
    )


def _pod(name: str, namespace: str, claims: list[dict[str, str]], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {LABEL: namespace},
            "resourceClaims": claims,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": c["name"]} for c in claims]},
                }
            ],
            **spec,
        },
    }


def _get_claim(backend: Backend, name: str) -> dict[str, Any]:
    got: dict[str, Any] = backend.custom.get_namespaced_custom_object(
        *RESOURCE_V1, backend.namespace, "resourceclaims", name
    )
    return got


def _claim_gone(backend: Backend, name: str) -> bool:
    try:
        _get_claim(backend, name)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


@pytest.mark.usefixtures("control_plane")
def test_an_allocated_claim_binds_its_pod_to_the_allocation_node(
    backend: Backend, nodes: tuple[str, str]
) -> None:
    a, _ = nodes
    ns, core = backend.namespace, backend.core
    _allocated_claim(backend, "c", a)
    pod = core.create_namespaced_pod(ns, _pod("p", ns, [{"name": "gpu", "resourceClaimName": "c"}]))
    bound = wait_for(
        lambda: core.read_namespaced_pod("p", ns).spec.node_name, timeout=30, what="pod bound"
    )
    assert bound == a
    claim = _get_claim(backend, "c")
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p", "uid": pod.metadata.uid}
    ]
    assert claim["status"]["allocation"]["nodeSelector"] == _selector(a)

    # A second pod shares the claim (v1 has no `shareable`: any claim takes up to 256 pods).
    second = core.create_namespaced_pod(
        ns, _pod("q", ns, [{"name": "gpu", "resourceClaimName": "c"}])
    )
    assert wait_for(lambda: core.read_namespaced_pod("q", ns).spec.node_name, what="q bound") == a
    uids = [r["uid"] for r in _get_claim(backend, "c")["status"]["reservedFor"]]
    assert sorted(uids) == sorted([pod.metadata.uid, second.metadata.uid])


@pytest.mark.usefixtures("control_plane")
def test_postfilter_deallocates_a_claim_whose_node_the_pod_cannot_use(
    backend: Backend, nodes: tuple[str, str]
) -> None:
    _, b = nodes  # the allocation says b; the pod's nodeSelector allows only a
    ns, core = backend.namespace, backend.core
    _allocated_claim(backend, "c", b)
    core.create_namespaced_pod(ns, _pod("p", ns, [{"name": "gpu", "resourceClaimName": "c"}]))
    wait_for(
        lambda: not (_get_claim(backend, "c").get("status") or {}).get("allocation"),
        timeout=30,
        what="the claim deallocated by PostFilter",
    )
    claim = _get_claim(backend, "c")
    assert not claim["status"].get("reservedFor")
    assert core.read_namespaced_pod("p", ns).spec.node_name is None


@pytest.mark.usefixtures("control_plane")
def test_a_claim_is_made_from_the_template_for_the_pod(backend: Backend) -> None:
    ns, core = backend.namespace, backend.core
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu-template"},
        "spec": {
            "metadata": {"labels": {"app": "x"}, "annotations": {"note": "from the template"}},
            "spec": _claim_spec(),
        },
    }
    backend.custom.create_namespaced_custom_object(
        *RESOURCE_V1, ns, "resourceclaimtemplates", template
    )
    # No scheduler looks at the pod: only the resourceclaim controller acts.
    pod = core.create_namespaced_pod(
        ns,
        _pod(
            "trainer",
            ns,
            [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}],
            schedulerName="nobody",
        ),
    )

    def recorded() -> Any:
        return core.read_namespaced_pod("trainer", ns).status.resource_claim_statuses

    statuses = wait_for(recorded, timeout=30, what="pod.status.resourceClaimStatuses")
    assert len(statuses) == 1 and statuses[0].name == "gpu"
    name = statuses[0].resource_claim_name
    assert name.startswith("trainer-gpu-") and len(name) == len("trainer-gpu-") + 5
    claim = _get_claim(backend, name)
    assert claim["metadata"]["generateName"] == "trainer-gpu-"
    assert claim["metadata"]["annotations"] == {
        "note": "from the template",
        "resource.kubernetes.io/pod-claim-name": "gpu",
    }
    assert claim["metadata"]["labels"] == {"app": "x"}
    assert claim["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "trainer",
            "uid": pod.metadata.uid,
            "controller": True,
        }
    ]
    assert claim["spec"] == _get_template_spec(backend)
    core.delete_namespaced_pod("trainer", ns, grace_period_seconds=0)
    wait_for(lambda: _claim_gone(backend, name), timeout=30, what="the pod's claim deleted")


def _get_template_spec(backend: Backend) -> Any:
    got = backend.custom.get_namespaced_custom_object(
        *RESOURCE_V1, backend.namespace, "resourceclaimtemplates", "gpu-template"
    )
    return got["spec"]["spec"]


@pytest.mark.parametrize(
    "finalizer", [False, True], ids=["drasat-allocated", "scheduler-finalizer"]
)
@pytest.mark.usefixtures("control_plane")
def test_a_deleted_pod_leaves_reserved_for(
    backend: Backend, nodes: tuple[str, str], finalizer: bool
) -> None:
    a, _ = nodes
    ns, core = backend.namespace, backend.core
    _allocated_claim(backend, "c", a, finalizer=finalizer)
    core.create_namespaced_pod(ns, _pod("p", ns, [{"name": "gpu", "resourceClaimName": "c"}]))
    wait_for(lambda: core.read_namespaced_pod("p", ns).spec.node_name, what="pod bound")
    assert _get_claim(backend, "c")["status"]["reservedFor"]
    core.delete_namespaced_pod("p", ns, grace_period_seconds=0)
    wait_for(
        lambda: not _get_claim(backend, "c")["status"].get("reservedFor"),
        timeout=30,
        what="reservedFor emptied by the resourceclaim controller",
    )

    def settled() -> Any:
        # With the scheduler's finalizer the controller deallocates and drops the finalizer;
        # without it (an allocation by a driver's controller) the allocation stays.
        claim = _get_claim(backend, "c")
        if finalizer:
            return not claim["status"].get("allocation") and not claim["metadata"].get("finalizers")
        return claim["status"].get("allocation")

    assert wait_for(settled, timeout=30, what="the claim's allocation settled")
    if not finalizer:
        # Still allocated a moment later: nothing but drasat may deallocate it.
        still = _get_claim(backend, "c")
        assert still["status"]["allocation"]["nodeSelector"] == _selector(a)
    with contextlib.suppress(ApiException):
        backend.custom.delete_namespaced_custom_object(*RESOURCE_V1, ns, "resourceclaims", "c")


@pytest.mark.usefixtures("control_plane")
def test_an_allocation_without_timestamp_never_binds(
    backend: Backend, nodes: tuple[str, str]
) -> None:
    """kube-scheduler 1.37 (binding-condition gates on) stamps `allocationTimestamp` into an
    allocation that lacks it while reserving, and the API server refuses that change: the pod
    stays pending and the claim unreserved. drasat's allocator must write the timestamp."""
    a, _ = nodes
    ns, core = backend.namespace, backend.core
    _allocated_claim(backend, "c", a, stamped=False)
    core.create_namespaced_pod(ns, _pod("p", ns, [{"name": "gpu", "resourceClaimName": "c"}]))
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert core.read_namespaced_pod("p", ns).spec.node_name is None
        time.sleep(0.2)
    claim = _get_claim(backend, "c")
    assert not claim["status"].get("reservedFor")
    assert "allocationTimestamp" not in claim["status"]["allocation"]


@pytest.mark.usefixtures("control_plane")
def test_a_no_schedule_device_taint_does_not_stop_an_allocated_claim(
    backend: Backend, nodes: tuple[str, str]
) -> None:
    """A NoSchedule device taint keeps a scheduler from allocating the device; a claim that is
    already allocated to it still gets its pod bound (only NoExecute evicts)."""
    a, _ = nodes
    ns, core, custom = backend.namespace, backend.core, backend.custom
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"{ns}-maintenance"},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": a},
            "taint": {"key": "test.drasat.io/maintenance", "effect": "NoSchedule"},
        },
    }
    custom.create_cluster_custom_object(*RESOURCE_V1, "devicetaintrules", rule)
    try:
        _allocated_claim(backend, "c", a)
        core.create_namespaced_pod(ns, _pod("p", ns, [{"name": "gpu", "resourceClaimName": "c"}]))
        bound = wait_for(
            lambda: core.read_namespaced_pod("p", ns).spec.node_name, timeout=30, what="bound"
        )
        assert bound == a
    finally:
        custom.delete_cluster_custom_object(*RESOURCE_V1, "devicetaintrules", f"{ns}-maintenance")


@pytest.mark.usefixtures("control_plane")
def test_a_no_execute_device_taint_evicts_the_pod(backend: Backend, nodes: tuple[str, str]) -> None:
    """A NoExecute DeviceTaintRule on a device a ResourceSlice publishes evicts the pods of the
    claims allocated to it: DisruptionTarget condition, then deletion."""
    a, _ = nodes
    ns, core, custom = backend.namespace, backend.core, backend.custom
    piece = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{ns}-slice"},
        "spec": {
            "driver": DRIVER,
            "nodeName": a,
            "pool": {"name": a, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    }
    custom.create_cluster_custom_object(*RESOURCE_V1, "resourceslices", piece)
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"{ns}-broken"},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": a, "device": "gpu-0"},
            "taint": {"key": "test.drasat.io/broken", "effect": "NoExecute"},
        },
    }
    if backend.server is not None:  # as on the real server: a pod on a node is only marked
        backend.server.api.graceful_pod_deletion = True
    try:
        _allocated_claim(backend, "c", a)
        pod = core.create_namespaced_pod(
            ns, _pod("p", ns, [{"name": "gpu", "resourceClaimName": "c"}])
        )
        wait_for(lambda: core.read_namespaced_pod("p", ns).spec.node_name, what="bound")
        custom.create_cluster_custom_object(*RESOURCE_V1, "devicetaintrules", rule)

        def evicted() -> Any:
            try:
                now = core.read_namespaced_pod("p", ns)
            except ApiException as exc:
                if exc.status == 404:
                    return "gone"
                raise
            # A pod on a node waits for its kubelet (none here) to finish the deletion.
            return now.metadata.deletion_timestamp and now

        found = wait_for(evicted, timeout=30, what="the pod evicted")
        assert found != "gone" and found.metadata.uid == pod.metadata.uid
        (condition,) = [c for c in found.status.conditions if c.type == "DisruptionTarget"]
        assert (condition.status, condition.reason, condition.message) == (
            "True",
            "DeletionByDeviceTaintManager",
            "Device Taint manager: deleting due to NoExecute taint",
        )
    finally:
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(*RESOURCE_V1, "devicetaintrules", f"{ns}-broken")
        custom.delete_cluster_custom_object(*RESOURCE_V1, "resourceslices", f"{ns}-slice")
        with contextlib.suppress(ApiException):
            core.delete_namespaced_pod("p", ns, grace_period_seconds=0)
