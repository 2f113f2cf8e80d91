"""Gangs on the real control plane (issue 27 items 2 and 4): drasat's controller allocates a
gang's pods all-or-nothing and lifts their scheduling gates together; kube-scheduler binds them
and the simulated kubelets run them.

The controller runs with a policy whose `gangs.topologyKey` is the node label `RACK`, required.
Covered: a gang of 4 x 2-GPU pods lands within one rack or not at all (12 free GPUs, 6 per rack:
none of its claims is allocated and every pod stays gated; a node more in one rack and it lands
there whole); two gangs that each fit alone and not together end with one complete gang running
and no GPU held by the other, whose pods stay gated."""

from __future__ import annotations

import contextlib
import pathlib
import textwrap
from collections.abc import Iterator
from typing import Any

import allockit
import kubernetes
import pytest
from kubecluster import wait_for
from kubeletkit import GpuNode, gpu_node
from slicekit import applied, unique

from drasat.api.groups import GANG_LABEL, GANG_SIZE_LABEL, SCHEDULING_GATE
from drasat.testbed.controlplane import realcluster

pytestmark = pytest.mark.timeout(400)

RESOURCE = ("resource.k8s.io", "v1")
RACK = "topology.example.com/rack"
Obj = dict[str, Any]

POLICY = f"""
apiVersion: policy.drasat.io/v1alpha1
kind: AllocationPolicy
metadata: {{name: gangs}}
spec:
  gangs: {{topologyKey: {RACK}, required: true}}
"""


@pytest.fixture(scope="module")
def allocator(
    kube_api: kubernetes.client.ApiClient,
    kube_cluster: realcluster.Cluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[allockit.Allocator]:
    policy = tmp_path_factory.mktemp("gangs") / "policy.yaml"
    policy.write_text(POLICY)
    with allockit.allocator(kube_api, kube_cluster) as found:
        found.restart("--policy-file", str(policy))
        yield found


@contextlib.contextmanager
def _rack_node(api: Any, kube: realcluster.Cluster, rack: str, fleet: str) -> Iterator[GpuNode]:
    """A node with the plugin on `fleet` (GPU UUIDs of its own: the node's name seeds them),
    labelled as in `rack`."""
    name = unique(f"gang-{rack}")
    with gpu_node(api, kube, name, f"{fleet},seed={name}",
                  nas_namespace=allockit.NAMESPACE) as node:  # fmt: skip
        core = kubernetes.client.CoreV1Api(api)
        core.patch_node(node.name, {"metadata": {"labels": {RACK: rack}}})
        yield node


def _manifest(tmp: pathlib.Path, namespace: str, gangs: dict[str, int]) -> pathlib.Path:
    """A namespace, a template of 2 GPUs, and the gangs' pods (gang name -> size), interleaved
    (each gang's first pod, then each gang's second, ...), gated as admission would."""
    text = textwrap.dedent(f"""
        apiVersion: v1
        kind: Namespace
        metadata: {{name: {namespace}}}
        ---
        apiVersion: resource.k8s.io/v1
        kind: ResourceClaimTemplate
        metadata: {{namespace: {namespace}, name: two}}
        spec:
          spec:
            devices:
              requests:
              - {{name: gpu, exactly: {{deviceClassName: gpu.drasat.io, allocationMode: ExactCount,
                 count: 2}}}}""")  # fmt: skip
    for i in range(max(gangs.values())):
        for gang, size in gangs.items():
            if i >= size:
                continue
            text += textwrap.dedent(f"""
                ---
                apiVersion: v1
                kind: Pod
                metadata:
                  namespace: {namespace}
                  name: {gang}-{i}
                  labels: {{{GANG_LABEL}: {gang}, {GANG_SIZE_LABEL}: "{size}"}}
                spec:
                  containers: [{{name: c, image: x, resources: {{claims: [{{name: gpu}}]}}}}]
                  resourceClaims: [{{name: gpu, resourceClaimTemplateName: two}}]
                  schedulingGates: [{{name: {SCHEDULING_GATE}}}]""")  # fmt: skip
    path = tmp / f"{namespace}.yaml"
    path.write_text(text)
    return path


def _pod(api: Any, namespace: str, name: str) -> Obj:
    pod: Obj = kubernetes.client.CoreV1Api(api).read_namespaced_pod(name, namespace).to_dict()
    return pod


def _gated(api: Any, namespace: str, name: str) -> bool:
    gates = _pod(api, namespace, name)["spec"].get("scheduling_gates") or []
    return any(g["name"] == SCHEDULING_GATE for g in gates)


def _claims(api: Any, namespace: str) -> list[Obj]:
    custom = kubernetes.client.CustomObjectsApi(api)
    found: list[Obj] = custom.list_namespaced_custom_object(*RESOURCE, namespace, "resourceclaims")[
        "items"
    ]
    return found


def _allocated(api: Any, namespace: str, gang: str) -> list[str]:
    """The gang's claims that are allocated (the resourceclaim controller names a template's
    claim after its pod)."""
    return [c["metadata"]["name"] for c in _claims(api, namespace)
            if c["metadata"]["name"].startswith(f"{gang}-")
            and (c.get("status") or {}).get("allocation")]  # fmt: skip


def _events(api: Any, namespace: str, name: str, reason: str) -> list[str]:
    listed = kubernetes.client.CoreV1Api(api).list_namespaced_event(namespace).items
    return [e.message for e in listed
            if e.involved_object.name == name and e.involved_object.kind == "Pod"
            and e.reason == reason]  # fmt: skip


def _stays(check: Any, seconds: float) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not check():
            return False
        time.sleep(0.2)
    return True


def test_a_gang_lands_within_one_rack_or_not_at_all(
    kube_api: Any, kube_cluster: realcluster.Cluster, allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    namespace = "gang-rack"
    pods = [f"train-{i}" for i in range(4)]
    manifest = _manifest(tmp_path, namespace, {"train": 4})
    with contextlib.ExitStack() as stack:
        # 12 free GPUs, 6 per rack: 8 fit in the cluster, not in one rack.
        nodes = [stack.enter_context(_rack_node(kube_api, kube_cluster, rack, fleet))
                 for rack, fleet in (("a", "4xT4"), ("a", "2xT4"), ("b", "4xT4"),
                                     ("b", "2xT4"))]  # fmt: skip
        stack.enter_context(applied(kube_api, manifest))
        wait_for(lambda: len(_claims(kube_api, namespace)) == 4, timeout=30,
                 what="the gang's claims")  # fmt: skip
        wait_for(lambda: _events(kube_api, namespace, "train-0", "NotAllocatable"), timeout=30,
                 what=f"the gang's refusal\n{allocator.text()[-3000:]}")  # fmt: skip
        (text,) = _events(kube_api, namespace, "train-0", "NotAllocatable")
        assert text.startswith(
            f"gang {namespace}/train is placed whole or not at all: its 4 pods do not all fit "
            f"together within one value of node label {RACK}"
        ), text
        assert _stays(lambda: not _allocated(kube_api, namespace, "train")
                      and all(_gated(kube_api, namespace, p) for p in pods), 3)  # fmt: skip
        # Two GPUs more in rack b: the gang lands there whole and runs.
        nodes.append(stack.enter_context(_rack_node(kube_api, kube_cluster, "b", "2xT4")))
        rack_b = {n.name for n in nodes[2:]}
        by_name = {n.name: n for n in nodes}
        wait_for(lambda: all(_pod(kube_api, namespace, p)["spec"].get("node_name") for p in pods),
                 timeout=90, what=f"the gang bound\n{allocator.text()[-3000:]}")  # fmt: skip
        placed = {p: _pod(kube_api, namespace, p)["spec"]["node_name"] for p in pods}
        assert set(placed.values()) <= rack_b, placed
        for pod, node in placed.items():
            by_name[node].wait_running(namespace, pod)
        (said,) = _events(kube_api, namespace, "train-0", "GangAllocated")
        assert said.startswith(f"gang {namespace}/train: all 4 pods allocated together"), said
        allockit.consistent(kube_api, allocator)
        for node in nodes:
            node.delete_pods(kube_api, namespace, *[p for p, n in placed.items() if n == node.name])
    allockit.consistent(kube_api, allocator)


def test_two_competing_gangs_end_with_one_whole_and_nothing_held_by_the_other(
    kube_api: Any, kube_cluster: realcluster.Cluster, allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    namespace = "gang-compete"
    # 8 GPUs in rack c: each gang of 4 x 2 GPUs fits alone, not both.
    manifest = _manifest(tmp_path, namespace, {"red": 4, "blue": 4})
    with contextlib.ExitStack() as stack:
        nodes = [stack.enter_context(_rack_node(kube_api, kube_cluster, "c", "4xT4"))
                 for _ in range(2)]  # fmt: skip
        by_name = {n.name: n for n in nodes}
        stack.enter_context(applied(kube_api, manifest))

        def one_whole() -> str | None:
            for gang in ("red", "blue"):
                if len(_allocated(kube_api, namespace, gang)) == 4:
                    return gang
            return None

        winner = wait_for(one_whole, timeout=60,
                          what=f"one gang allocated\n{allocator.text()[-3000:]}")  # fmt: skip
        loser = "blue" if winner == "red" else "red"
        for i in range(4):
            pod = f"{winner}-{i}"
            wait_for(lambda p=pod: _pod(kube_api, namespace, p)["spec"].get("node_name"),
                     timeout=60, what=f"{pod} bound")  # fmt: skip
            by_name[_pod(kube_api, namespace, pod)["spec"]["node_name"]].wait_running(
                namespace, pod
            )
        # The other gang holds no GPU and none of its pods is let go.
        assert _stays(lambda: not _allocated(kube_api, namespace, loser)
                      and all(_gated(kube_api, namespace, f"{loser}-{i}") for i in range(4)),
                      3)  # fmt: skip
        assert _events(kube_api, namespace, f"{loser}-0", "NotAllocatable")
        allockit.consistent(kube_api, allocator)
        placed = {f"{winner}-{i}": _pod(kube_api, namespace, f"{winner}-{i}")["spec"]["node_name"]
                  for i in range(4)}  # fmt: skip
        for node in nodes:
            node.delete_pods(kube_api, namespace, *[p for p, n in placed.items() if n == node.name])
    allockit.consistent(kube_api, allocator)


def _podgroup_manifest(tmp: pathlib.Path, namespace: str, pods: int) -> pathlib.Path:
    """A namespace and `pods` pods that name the PodGroup `train` (`spec.schedulingGroup`, the
    Workload API), each with a claim of its own of 2 GPUs, gated as admission would; no gang
    labels. Standalone claims: with DRAWorkloadResourceClaims on, kube-controller-manager makes
    no claim from a template for a pod whose PodGroup does not exist yet."""
    text = textwrap.dedent(f"""
        apiVersion: v1
        kind: Namespace
        metadata: {{name: {namespace}}}""")  # fmt: skip
    for i in range(pods):
        text += textwrap.dedent(f"""
            ---
            apiVersion: resource.k8s.io/v1
            kind: ResourceClaim
            metadata: {{namespace: {namespace}, name: train-{i}}}
            spec:
              devices:
                requests:
                - {{name: gpu, exactly: {{deviceClassName: gpu.drasat.io,
                   allocationMode: ExactCount, count: 2}}}}
            ---
            apiVersion: v1
            kind: Pod
            metadata: {{namespace: {namespace}, name: train-{i}}}
            spec:
              schedulingGroup: {{podGroupName: train}}
              containers: [{{name: c, image: x, resources: {{claims: [{{name: gpu}}]}}}}]
              resourceClaims: [{{name: gpu, resourceClaimName: train-{i}}}]
              schedulingGates: [{{name: {SCHEDULING_GATE}}}]""")  # fmt: skip
    path = tmp / f"{namespace}.yaml"
    path.write_text(text)
    return path


def test_a_podgroup_gang_waits_for_its_podgroup_then_its_min_count_goes_together(
    kube_api: Any, kube_cluster: realcluster.Cluster, allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    """Kubernetes 1.37's Workload API (the GenericWorkload gate and scheduling.k8s.io/v1beta1,
    which this control plane turns on): three pods of 2 GPUs name the PodGroup `train` before it
    exists — none is allocated, each is told why; once it exists with a gang policy of minCount
    2, its first two pods are allocated together and run (kube-scheduler's gang scheduling binds
    them), and the third, past the minimum, waits for GPUs of its own (4 in the rack), ungated:
    kube-scheduler schedules a PodGroup only once every pod of it is ungated."""
    namespace = "gang-podgroup"
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    group = ("scheduling.k8s.io", "v1beta1", namespace, "podgroups")
    key = f"{namespace}/podgroup/train"
    with contextlib.ExitStack() as stack:
        node = stack.enter_context(_rack_node(kube_api, kube_cluster, "d", "4xT4"))
        stack.enter_context(applied(kube_api, _podgroup_manifest(tmp_path, namespace, 3)))
        wait_for(lambda: _events(kube_api, namespace, "train-0", "GangIncomplete"), timeout=30,
                 what=f"the gang held back\n{allocator.text()[-3000:]}")  # fmt: skip
        (text,) = _events(kube_api, namespace, "train-0", "GangIncomplete")
        assert text == (f"gang {key}: PodGroup {namespace}/train does not exist yet: none of its "
                        "pods is allocated before it does"), text  # fmt: skip
        assert _stays(lambda: not _allocated(kube_api, namespace, "train"), 2)
        custom.create_namespaced_custom_object(*group, {
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": namespace},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        })  # fmt: skip
        first = ["train-0", "train-1"]
        wait_for(lambda: all(_pod(kube_api, namespace, p)["spec"].get("node_name") for p in first),
                 timeout=90, what=f"the gang bound\n{allocator.text()[-3000:]}")  # fmt: skip
        for pod in first:
            node.wait_running(namespace, pod)
        (said,) = _events(kube_api, namespace, "train-0", "GangAllocated")
        assert said.startswith(f"gang {key}: all 2 pods allocated together"), said
        assert len(_allocated(kube_api, namespace, "train")) == 2
        # The third is let go without its claim allocated (kube-scheduler schedules a PodGroup
        # only once every pod of it is ungated) and waits: drasat allocates it when GPUs free.
        assert not _gated(kube_api, namespace, "train-2")
        assert not _pod(kube_api, namespace, "train-2")["spec"].get("node_name")
        wait_for(lambda: _events(kube_api, namespace, "train-2", "NotAllocatable"), timeout=30,
                 what="the third pod refused")  # fmt: skip
        allockit.consistent(kube_api, allocator)
        node.delete_pods(kube_api, namespace, *first)
    allockit.consistent(kube_api, allocator)
