"""The simulated kubelet runs pods through the real node plugin over its gRPC sockets.

The cluster is the classic demo's (`drasat.classic.demo`): API server, controller, one node plugin
with two simulated T4s, scheduler, kubelet; the tests apply pods and claims and check what the
kubelet did: NodePrepareResources, the CDI environment, the pod's status, unprepare on deletion
(a shared claim only after its last pod), the graceful deletion confirmed.
"""

from __future__ import annotations

import json
import pathlib
import tempfile
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
import yaml

from drasat import loading, policyfiles
from drasat.api import crds
from drasat.api.cluster import Cluster
from drasat.classic.demo import DemoCluster
from drasat.nodeplugin import registration
from drasat.testbed.democluster import SimNode
from drasat.testbed.sim import apply, errors, garbage, kubeclient, kubelet

NODE = "gpu-node"
CLUSTER = Cluster.model_validate(
    {
        "metadata": {"name": "one-node"},
        "spec": {"nodes": [{"name": NODE, "gpus": [{"product": "T4", "count": 2}]}]},
    }
)

MANIFESTS = """
apiVersion: v1
kind: Namespace
metadata: {name: kl}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaimTemplate
metadata: {namespace: kl, name: one-gpu}
spec:
  spec: {resourceClassName: gpu.drasat.io}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaim
metadata: {namespace: kl, name: shared}
spec: {resourceClassName: gpu.drasat.io}
---
apiVersion: v1
kind: Pod
metadata: {namespace: kl, name: solo}
spec:
  containers: [{name: ctr, image: busybox, resources: {claims: [{name: gpu}]}}]
  resourceClaims: [{name: gpu, source: {resourceClaimTemplateName: one-gpu}}]
"""


def _shared_pod(name: str) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{namespace: kl, name: {name}}}
spec:
  containers: [{{name: ctr, image: busybox, resources: {{claims: [{{name: gpu}}]}}}}]
  resourceClaims: [{{name: gpu, source: {{resourceClaimName: shared}}}}]
"""


@pytest.fixture(scope="module")
def demo() -> Iterator[DemoCluster]:
    with DemoCluster.running(CLUSTER, policy_text=policyfiles.shipped_text("default")) as cluster:
        documents = loading.parse_documents(
            MANIFESTS + "---" + _shared_pod("left") + "---" + _shared_pod("right"), "test"
        )
        apply.apply(cluster.client, documents, known=apply.kinds(crds.all_crds()))
        yield cluster


def _node(demo: DemoCluster) -> tuple[SimNode, kubelet.Kubelet]:
    node = demo.nodes[0]
    assert node.kubelet is not None
    return node, node.kubelet


def _pod(demo: DemoCluster, name: str) -> dict[str, Any] | None:
    try:
        return demo.client.get(kubeclient.path("", "v1", "pods", namespace="kl", name=name))
    except errors.ApiError as error:
        assert error.code == 404
        return None


def _nas(demo: DemoCluster) -> dict[str, Any]:
    url = kubeclient.path(
        "nas.gpu.drasat.io", "v1alpha1", "nodeallocationstates", namespace="drasat", name=NODE
    )
    return demo.client.get(url)


def test_the_plugin_is_registered_through_its_registration_socket(demo: DemoCluster) -> None:
    node, kl = _node(demo)
    assert kl.wait_for(lambda: "gpu.drasat.io" in kl.plugins, 10)
    plugin = kl.plugins["gpu.drasat.io"]
    assert plugin.endpoint == str(node.config.dra_socket)
    assert node.plugin.registration.registered.wait(5), "NotifyRegistrationStatus(True) not sent"


def test_a_pod_runs_with_the_gpu_of_its_cdi_spec(demo: DemoCluster) -> None:
    node, kl = _node(demo)
    run = kl.wait_running("kl", "solo", timeout=30)
    (claim,) = run.claims
    assert claim.name == "solo-gpu" and claim.resource_handle  # the controller's handle
    env = run.claim_env(claim.uid)
    fleet_uuids = {gpu.uuid for gpu in node.fleet.gpus}
    assert env["DRASAT_GPU_UUIDS"] in fleet_uuids
    assert env["DRASAT_CLAIM_UID"] == claim.uid
    assert run.devices[claim.uid] == [f"k8s.gpu.drasat.io/claim={claim.uid}"]
    # The runtime's view is the spec file the plugin wrote, found by kind and device name.
    (spec_file,) = [p for p in node.cdi_specs() if claim.uid in p.name]
    assert json.loads(spec_file.read_text())["devices"][0]["name"] == claim.uid
    pod = _pod(demo, "solo")
    assert pod is not None and pod["status"]["phase"] == "Running"
    assert claim.uid in _nas(demo)["spec"]["preparedClaims"]


def test_a_shared_claim_stays_prepared_until_its_last_pod_stops(demo: DemoCluster) -> None:
    node, kl = _node(demo)
    left = kl.wait_running("kl", "left", timeout=30)
    right = kl.wait_running("kl", "right", timeout=30)
    assert left.env["DRASAT_GPU_UUIDS"] == right.env["DRASAT_GPU_UUIDS"]
    (claim,) = left.claims
    demo.client.delete(kubeclient.path("", "v1", "pods", namespace="kl", name="left"))
    kl.wait_stopped("kl", "left", timeout=15)
    assert _pod(demo, "left") is None, "the kubelet confirms the graceful deletion"
    assert claim.uid in _nas(demo)["spec"]["preparedClaims"], "right still uses the claim"
    assert any(claim.uid in p.name for p in node.cdi_specs())
    assert kl.running("kl", "right") is not None
    demo.client.delete(kubeclient.path("", "v1", "pods", namespace="kl", name="right"))
    kl.wait_stopped("kl", "right", timeout=15)
    assert claim.uid not in _nas(demo)["spec"]["preparedClaims"]
    assert not any(claim.uid in p.name for p in node.cdi_specs())


def test_deleting_a_pod_unprepares_and_collects_its_template_claim(demo: DemoCluster) -> None:
    node, kl = _node(demo)
    run = kl.wait_running("kl", "solo", timeout=30)
    demo.client.delete(kubeclient.path("", "v1", "pods", namespace="kl", name="solo"))
    kl.wait_stopped("kl", "solo", timeout=15)
    url = kubeclient.path("resource.k8s.io", "v1alpha2", "resourceclaims", namespace="kl")

    def claim_gone() -> bool:
        garbage.collect(demo.client, ["kl"])
        names = {c["metadata"]["name"] for c in demo.client.list(url)["items"]}
        return "solo-gpu" not in names

    assert kl.wait_for(claim_gone, 15), "the pod's claim was not deallocated and deleted"
    uid = run.claims[0].uid
    assert uid not in _nas(demo)["spec"]["allocatedClaims"]
    assert not any(uid in p.name for p in node.cdi_specs())


def test_a_pod_whose_claim_does_not_exist_waits_with_the_reason(demo: DemoCluster) -> None:
    _, kl = _node(demo)
    pod = yaml.safe_load(_shared_pod("orphan").replace("shared}", "missing}"))
    pod["spec"]["nodeName"] = NODE  # bound by hand: the scheduler would wait for the claim
    demo.client.create(kubeclient.path("", "v1", "pods", namespace="kl"), pod)
    assert kl.wait_for(lambda: "does not exist" in kl.reasons.get(("kl", "orphan"), ""), 10)
    assert kl.running("kl", "orphan") is None
    assert (_pod(demo, "orphan") or {})["status"]["phase"] == "Pending"


# --- without a cluster --------------------------------------------------------------------


def test_cdi_edits_reads_json_and_yaml_specs_in_order(tmp_path: pathlib.Path) -> None:
    (tmp_path / "vendor-a.json").write_text(
        json.dumps(
            {
                "cdiVersion": "0.6.0",
                "kind": "example.com/gpu",
                "containerEdits": {"env": ["COMMON=1", "OVERRIDE=spec"]},
                "devices": [{"name": "g0", "containerEdits": {"env": ["OVERRIDE=device"]}}],
            }
        )
    )
    (tmp_path / "vendor-b.yaml").write_text(
        "cdiVersion: 0.5.0\nkind: example.com/nic\n"
        "devices: [{name: n0, containerEdits: {env: [NIC=n0]}}]\n"
    )
    (tmp_path / "notes.txt").write_text("not a spec")
    env, missing = kubelet.cdi_edits(
        tmp_path, ["example.com/gpu=g0", "example.com/nic=n0", "example.com/gpu=g9"]
    )
    assert env == {
        "example.com/gpu=g0": {"COMMON": "1", "OVERRIDE": "device"},
        "example.com/nic=n0": {"NIC": "n0"},
    }
    assert missing == ["example.com/gpu=g9"]


def test_a_plugin_without_a_classic_version_is_refused() -> None:
    with tempfile.TemporaryDirectory(prefix="drasat-kl-") as name:
        registry = pathlib.Path(name)
        servicer = registration.Registration(
            endpoint=str(registry / "dra.sock"), api=registration.KubeletApi.structured
        )
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        registration.add_service(server, servicer)
        socket = registry / "gpu.drasat.io-reg.sock"
        server.add_insecure_port(f"unix://{socket}")
        server.start()
        try:
            kl = kubelet.Kubelet(
                kubeclient.KubeClient("http://127.0.0.1:1"),
                node="n",
                registry_dir=registry,
                cdi_root=registry / "cdi",
            )
            kl.discover_plugins()
            assert kl.plugins == {}
            assert "1.0.0" in kl.refused[str(socket)]
            assert "v1alpha3.Node" in servicer.last_error
            assert not servicer.registered.is_set()
        finally:
            server.stop(0).wait()


def test_each_container_gets_the_cdi_ids_of_the_requests_it_names() -> None:
    """As the 1.37 kubelet's cdiDevicesAsList: a container naming a request gets that request's
    devices' ids (and those answered without request names), one naming none all of the claim's,
    one not listing the claim none; a classic claim's ids go to every container listing it."""

    def device(request: str, name: str) -> kubelet.PreparedDevice:
        requests = (request,) if request else ()
        return kubelet.PreparedDevice(requests, "node", name, (f"k/c=u-{name}",))

    pod = {
        "spec": {
            "initContainers": [{"name": "init", "resources": {"claims": [{"name": "old"}]}}],
            "containers": [
                {"name": "a", "resources": {"claims": [{"name": "gpus", "request": "r1"}]}},
                {"name": "b", "resources": {"claims": [{"name": "gpus", "request": "r2"}]}},
                {"name": "all", "resources": {"claims": [{"name": "gpus"}, {"name": "old"}]}},
                {"name": "none"},
            ],
        }
    }
    prepared = {"u": [device("r1", "gpu-0"), device("r2", "gpu-1"), device("", "gpu-2")]}
    ids = kubelet.container_cdi_ids(
        pod, {"gpus": "u", "old": "c"}, {"u": [], "c": ["k/c=c"]}, prepared
    )
    assert ids == {
        "init": ["k/c=c"],
        "a": ["k/c=u-gpu-0", "k/c=u-gpu-2"],
        "b": ["k/c=u-gpu-1", "k/c=u-gpu-2"],
        "all": ["k/c=u-gpu-0", "k/c=u-gpu-1", "k/c=u-gpu-2", "k/c=c"],
        "none": [],
    }
