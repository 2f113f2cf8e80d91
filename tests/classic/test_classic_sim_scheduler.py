"""The simulated classic scheduler drives pods through the DRA flow with a tiny fake driver."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
import urllib3

from drasat.classic import scheduler
from drasat.testbed.sim import apiserver, kubeclient, scheduling

RC = ("resource.k8s.io", "v1alpha2")
GPU_NODE = "n2"


class FakeDriver:
    """Reports every node but GPU_NODE unsuitable and allocates on the selected node."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.core = kubernetes.client.CoreV1Api(api_client)

    def allocate(self, namespace: str, claim: str, node: str, *, shareable: bool = False) -> None:
        self.custom.patch_namespaced_custom_object(
            *RC,
            namespace,
            "resourceclaims",
            claim,
            {"metadata": {"finalizers": ["gpu.drasat.io/deletion-protection"]}},
        )
        selector = {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        }
        status = {
            "status": {
                "driverName": "gpu.drasat.io",
                "allocation": {
                    "availableOnNodes": selector,
                    "shareable": shareable,
                    "resourceHandles": [{"driverName": "gpu.drasat.io", "data": "{}"}],
                },
            }
        }
        self.custom.patch_namespaced_custom_object_status(
            *RC, namespace, "resourceclaims", claim, status
        )

    def step(self) -> None:
        contexts = self.custom.list_cluster_custom_object(*RC, "podschedulingcontexts")["items"]
        for context in contexts:
            namespace, name = context["metadata"]["namespace"], context["metadata"]["name"]
            pod = self.custom.api_client.sanitize_for_serialization(
                self.core.read_namespaced_pod(name, namespace)
            )
            entries = scheduling.pod_claims(pod)
            potential = context["spec"].get("potentialNodes") or []
            reported = [
                {"name": entry.name, "unsuitableNodes": [n for n in potential if n != GPU_NODE]}
                for entry in entries
            ]
            if (context.get("status") or {}).get("resourceClaims") != reported:
                self.custom.patch_namespaced_custom_object_status(
                    *RC,
                    namespace,
                    "podschedulingcontexts",
                    name,
                    {"status": {"resourceClaims": reported}},
                )
            if context["spec"].get("selectedNode") == GPU_NODE:
                for entry in entries:
                    claim_name = entry.resolved_name(name)
                    claim = self.custom.get_namespaced_custom_object(
                        *RC, namespace, "resourceclaims", claim_name
                    )
                    if not (claim.get("status") or {}).get("allocation"):
                        self.allocate(namespace, claim_name, GPU_NODE, shareable=True)


@pytest.fixture
def cluster(api_client: kubernetes.client.ApiClient) -> kubernetes.client.ApiClient:
    core = kubernetes.client.CoreV1Api(api_client)
    custom = kubernetes.client.CustomObjectsApi(api_client)
    for node in ("n1", "n2", "n3"):
        core.create_node({"metadata": {"name": node}})
    for name, driver in (("gpu.drasat.io", "gpu.drasat.io"), ("other", "example.com")):
        custom.create_cluster_custom_object(
            *RC,
            "resourceclasses",
            {
                "apiVersion": "resource.k8s.io/v1alpha2",
                "kind": "ResourceClass",
                "metadata": {"name": name},
                "driverName": driver,
            },
        )
        custom.create_namespaced_custom_object(
            *RC,
            "default",
            "resourceclaimtemplates",
            {
                "apiVersion": "resource.k8s.io/v1alpha2",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": f"{name}-template"},
                "spec": {
                    "metadata": {"labels": {"app": "train"}},
                    "spec": {"resourceClassName": name},
                },
            },
        )
    return api_client


def make_pod(core: kubernetes.client.CoreV1Api, name: str, **claim: str) -> Any:
    body = {
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", **claim}],
        },
    }
    return core.create_namespaced_pod("default", body)


@pytest.fixture
def sim(server: apiserver.ApiServer) -> scheduler.Scheduler:
    return scheduler.Scheduler(kubeclient.KubeClient(server.url))


def settle(sim: scheduler.Scheduler, driver: FakeDriver, rounds: int = 10) -> None:
    for _ in range(rounds):
        sim.run_once()
        driver.step()


def test_wait_for_first_consumer_flow(
    cluster: kubernetes.client.ApiClient, sim: scheduler.Scheduler
) -> None:
    core = kubernetes.client.CoreV1Api(cluster)
    custom = kubernetes.client.CustomObjectsApi(cluster)
    pod = make_pod(core, "p", resourceClaimTemplateName="gpu.drasat.io-template")
    driver = FakeDriver(cluster)

    sim.run_once()
    claim = custom.get_namespaced_custom_object(*RC, "default", "resourceclaims", "p-gpu")
    assert claim["metadata"]["ownerReferences"][0]["uid"] == pod.metadata.uid
    assert claim["metadata"]["labels"] == {"app": "train"}
    context = custom.get_namespaced_custom_object(*RC, "default", "podschedulingcontexts", "p")
    assert context["spec"]["potentialNodes"] == ["n1", "n2", "n3"]
    assert "unsuitableNodes" in sim.reasons[("default", "p")]

    driver.step()  # reports n1 and n3 unsuitable
    sim.run_once()
    context = custom.get_namespaced_custom_object(*RC, "default", "podschedulingcontexts", "p")
    assert context["spec"]["selectedNode"] == GPU_NODE

    driver.step()  # allocates on n2
    sim.run_once()
    bound = core.read_namespaced_pod("p", "default")
    assert bound.spec.node_name == GPU_NODE and sim.bound[("default", "p")] == GPU_NODE
    assert [(s.name, s.resource_claim_name) for s in bound.status.resource_claim_statuses] == [
        ("gpu", "p-gpu")
    ]
    claim = custom.get_namespaced_custom_object(*RC, "default", "resourceclaims", "p-gpu")
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p", "uid": pod.metadata.uid}
    ]
    contexts = custom.list_namespaced_custom_object(*RC, "default", "podschedulingcontexts")
    assert contexts["items"] == []

    # The pod goes: its claim is released and, being owned by the pod, deleted.
    core.delete_namespaced_pod("p", "default")
    sim.run_once()
    claim = custom.get_namespaced_custom_object(*RC, "default", "resourceclaims", "p-gpu")
    assert claim["metadata"]["deletionTimestamp"] and "reservedFor" not in claim["status"]


def test_immediate_claim_schedules_on_allocated_node(
    cluster: kubernetes.client.ApiClient, sim: scheduler.Scheduler
) -> None:
    core = kubernetes.client.CoreV1Api(cluster)
    custom = kubernetes.client.CustomObjectsApi(cluster)
    custom.create_namespaced_custom_object(
        *RC,
        "default",
        "resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1alpha2",
            "kind": "ResourceClaim",
            "metadata": {"name": "shared"},
            "spec": {"resourceClassName": "gpu.drasat.io", "allocationMode": "Immediate"},
        },
    )
    make_pod(core, "p", resourceClaimName="shared")
    sim.run_once()
    assert "Immediate" in sim.reasons[("default", "p")]
    FakeDriver(cluster).allocate("default", "shared", "n3")
    sim.run_once()
    assert core.read_namespaced_pod("p", "default").spec.node_name == "n3"
    assert (
        custom.list_namespaced_custom_object(*RC, "default", "podschedulingcontexts")["items"] == []
    )


def test_unshareable_claim_in_use_blocks_second_pod(
    cluster: kubernetes.client.ApiClient, sim: scheduler.Scheduler
) -> None:
    core = kubernetes.client.CoreV1Api(cluster)
    custom = kubernetes.client.CustomObjectsApi(cluster)
    custom.create_namespaced_custom_object(
        *RC,
        "default",
        "resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1alpha2",
            "kind": "ResourceClaim",
            "metadata": {"name": "one"},
            "spec": {"resourceClassName": "gpu.drasat.io", "allocationMode": "Immediate"},
        },
    )
    FakeDriver(cluster).allocate("default", "one", "n1")
    make_pod(core, "a", resourceClaimName="one")
    make_pod(core, "b", resourceClaimName="one")
    sim.run_once()
    assert core.read_namespaced_pod("a", "default").spec.node_name == "n1"
    assert core.read_namespaced_pod("b", "default").spec.node_name is None
    assert "in use by 'a'" in sim.reasons[("default", "b")]


def test_pods_of_other_drivers_are_left_alone(
    cluster: kubernetes.client.ApiClient, sim: scheduler.Scheduler
) -> None:
    core = kubernetes.client.CoreV1Api(cluster)
    custom = kubernetes.client.CustomObjectsApi(cluster)
    make_pod(core, "p", resourceClaimTemplateName="other-template")
    sim.run_once()
    for plural in ("podschedulingcontexts", "resourceclaims"):
        assert custom.list_namespaced_custom_object(*RC, "default", plural)["items"] == []
    assert ("default", "p") not in sim.reasons


def test_missing_template_is_reported(
    cluster: kubernetes.client.ApiClient, sim: scheduler.Scheduler
) -> None:
    make_pod(kubernetes.client.CoreV1Api(cluster), "p", resourceClaimTemplateName="nope")
    sim.run_once()
    assert "'nope' does not exist" in sim.reasons[("default", "p")]


@pytest.fixture
def driver_thread(cluster: kubernetes.client.ApiClient) -> Iterator[None]:
    """The fake driver, reacting to PodSchedulingContext events in the background."""
    driver = FakeDriver(cluster)
    watch = kubernetes.watch.Watch()
    done = threading.Event()

    def run() -> None:
        with contextlib.suppress(urllib3.exceptions.ProtocolError):  # watch.stop() at teardown
            for _ in watch.stream(
                driver.custom.list_cluster_custom_object,
                *RC,
                "podschedulingcontexts",
                timeout_seconds=30,
            ):
                if done.is_set():
                    return
                driver.step()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    done.set()
    watch.stop()
    thread.join(timeout=5)


def test_background_scheduler_binds_pod(
    cluster: kubernetes.client.ApiClient, server: apiserver.ApiServer, driver_thread: None
) -> None:
    core = kubernetes.client.CoreV1Api(cluster)
    with scheduler.Scheduler(kubeclient.KubeClient(server.url), resync=5.0) as background:
        make_pod(core, "p", resourceClaimTemplateName="gpu.drasat.io-template")
        assert background.wait_bound("default", "p", timeout=20) == GPU_NODE
    assert core.read_namespaced_pod("p", "default").spec.node_name == GPU_NODE


def test_wait_bound_times_out_with_reason(
    cluster: kubernetes.client.ApiClient, sim: scheduler.Scheduler
) -> None:
    make_pod(kubernetes.client.CoreV1Api(cluster), "p", resourceClaimTemplateName="nope")
    sim.run_once()
    with pytest.raises(TimeoutError, match="does not exist"):
        sim.wait_bound("default", "p", timeout=0.01)


def test_background_scheduler_rides_out_an_outage(
    cluster: kubernetes.client.ApiClient, server: apiserver.ApiServer
) -> None:
    core = kubernetes.client.CoreV1Api(cluster)
    driver = FakeDriver(cluster)
    make_pod(core, "p", resourceClaimTemplateName="gpu.drasat.io-template")
    server.faults.down()
    with scheduler.Scheduler(kubeclient.KubeClient(server.url), resync=0.2) as background:
        with pytest.raises(TimeoutError):
            background.wait_bound("default", "p", timeout=0.5)
        assert server.faults.injected["down-503"] > 0
        server.faults.up()
        for _ in range(100):
            driver.step()
            with contextlib.suppress(TimeoutError):
                assert background.wait_bound("default", "p", timeout=0.2) == GPU_NODE
                break
        else:
            pytest.fail(f"not bound: {background.reasons}")


def test_two_pods_share_one_wait_for_first_consumer_claim(
    cluster: kubernetes.client.ApiClient, sim: scheduler.Scheduler
) -> None:
    core = kubernetes.client.CoreV1Api(cluster)
    custom = kubernetes.client.CustomObjectsApi(cluster)
    custom.create_namespaced_custom_object(
        *RC,
        "default",
        "resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1alpha2",
            "kind": "ResourceClaim",
            "metadata": {"name": "shared"},
            "spec": {"resourceClassName": "gpu.drasat.io"},
        },
    )
    pods = [make_pod(core, name, resourceClaimName="shared") for name in ("a", "b")]
    settle(sim, FakeDriver(cluster))
    assert [core.read_namespaced_pod(p.metadata.name, "default").spec.node_name for p in pods] == [
        GPU_NODE,
        GPU_NODE,
    ]
    claim = custom.get_namespaced_custom_object(*RC, "default", "resourceclaims", "shared")
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["a", "b"]


def test_potential_nodes_are_capped_at_128(
    cluster: kubernetes.client.ApiClient, sim: scheduler.Scheduler
) -> None:
    core = kubernetes.client.CoreV1Api(cluster)
    custom = kubernetes.client.CustomObjectsApi(cluster)
    for index in range(130):
        core.create_node({"metadata": {"name": f"z{index:03}"}})
    make_pod(core, "p", resourceClaimTemplateName="gpu.drasat.io-template")
    sim.run_once()
    context = custom.get_namespaced_custom_object(*RC, "default", "podschedulingcontexts", "p")
    assert len(context["spec"]["potentialNodes"]) == 128
    assert context["spec"]["potentialNodes"][:3] == ["n1", "n2", "n3"]


def test_reservations_of_deleted_pods(
    cluster: kubernetes.client.ApiClient, server: apiserver.ApiServer, sim: scheduler.Scheduler
) -> None:
    server.api.graceful_pod_deletion = True
    core = kubernetes.client.CoreV1Api(cluster)
    custom = kubernetes.client.CustomObjectsApi(cluster)
    custom.create_namespaced_custom_object(
        *RC,
        "default",
        "resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1alpha2",
            "kind": "ResourceClaim",
            "metadata": {"name": "shared"},
            "spec": {"resourceClassName": "gpu.drasat.io"},
        },
    )
    FakeDriver(cluster).allocate("default", "shared", GPU_NODE, shareable=True)
    running = make_pod(core, "running", resourceClaimName="shared")
    sim.run_once()  # reserves and binds
    body = {
        "metadata": {"name": "waiting", "finalizers": ["test/hold"]},
        "spec": {"containers": [{"name": "c", "image": "none"}]},
    }
    waiting = core.create_namespaced_pod("default", body)
    reserved = custom.get_namespaced_custom_object(*RC, "default", "resourceclaims", "shared")
    refs = [
        *reserved["status"]["reservedFor"],
        {"resource": "pods", "name": "waiting", "uid": waiting.metadata.uid},
    ]
    custom.patch_namespaced_custom_object_status(
        *RC, "default", "resourceclaims", "shared", {"status": {"reservedFor": refs}}
    )
    core.delete_namespaced_pod("running", "default")  # on a node: terminating, still running
    core.delete_namespaced_pod("waiting", "default")  # never scheduled: done
    sim.run_once()
    claim = custom.get_namespaced_custom_object(*RC, "default", "resourceclaims", "shared")
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [running.metadata.uid]
    core.delete_namespaced_pod("running", "default", grace_period_seconds=0)
    sim.run_once()
    claim = custom.get_namespaced_custom_object(*RC, "default", "resourceclaims", "shared")
    assert "reservedFor" not in claim["status"]


def test_plain_pods_only_when_asked(
    cluster: kubernetes.client.ApiClient, server: apiserver.ApiServer, sim: scheduler.Scheduler
) -> None:
    core = kubernetes.client.CoreV1Api(cluster)
    core.patch_node("n3", {"metadata": {"labels": {"pool": "cpu"}}})
    body = {
        "metadata": {"name": "plain"},
        "spec": {"nodeSelector": {"pool": "cpu"}, "containers": [{"name": "c", "image": "none"}]},
    }
    core.create_namespaced_pod("default", body)
    sim.run_once()
    assert core.read_namespaced_pod("plain", "default").spec.node_name is None
    everything = scheduler.Scheduler(kubeclient.KubeClient(server.url), plain_pods=True)
    everything.run_once()
    assert core.read_namespaced_pod("plain", "default").spec.node_name == "n3"
