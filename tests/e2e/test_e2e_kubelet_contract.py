"""The simulated kubelet held to the real one (issue 28 item 4): the same scenarios on both, on
the real v1.37 control plane, with drasat's real node plugin process on a simulated fleet.

`drasat.testbed.sim.kubelet` runs the pods of the in-process demo; `kubelet` v1.37.2 on `fakecri`
(`drasat.testbed.controlplane.realkubelet`) is the one in production. Each scenario runs once per
kubelet (`kubelet` parameter: simulated, real) and records, inside the plugin, every
NodePrepareResources and NodeUnprepareResources request it receives with its claims
(`callrecord.py`: a gRPC server interceptor; the plugin itself is unchanged). The calls are compared
phase by phase against one expected list, the same for both kubelets: the claims (by their name in
the pod, or `claim:NAME` for a named claim) of each call, in order across phases (pods started; each
deletion), as a multiset within a phase (two pods started at once may be prepared in either order).

Scenarios: reference case (a) (a claim each, from a template), reference case (b) (one claim two
pods share, the second pod created once the first runs: prepared once, unprepared after the last
pod goes), MIG (gpu-test4: one claim of four MIG devices). Each deletion waits until the kubelet
confirmed it, which both do after the pod's unprepare.
"""

from __future__ import annotations

import contextlib
import pathlib
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import callrecord
import kubernetes
import pytest
import yaml
from kubeletkit import gpu_node
from realkubeletkit import real_node
from slicekit import applied, device_classes, unique

from drasat.testbed.controlplane import realcluster

pytestmark = pytest.mark.timeout(300)

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "examples"
KUBELETS = ("simulated", "real")
PREPARE, UNPREPARE = "NodePrepareResources", "NodeUnprepareResources"
#: One phase's calls: (method, the claims of the request by label), as a multiset.
Phase = Counter[tuple[str, tuple[str, ...]]]


@pytest.fixture(scope="module")
def classes(kube_api: kubernetes.client.ApiClient) -> Iterator[None]:
    with device_classes(kube_api):
        yield


class Recorded:
    """A node under one kubelet, its plugin's calls recorded, and the scenario's phases."""

    def __init__(self, kind: str, api: kubernetes.client.ApiClient, node: Any, record: Any) -> None:
        self.kind = kind
        self.api = api
        self.node = node
        self.record = record
        self.labels: dict[str, str] = {}  # claim uid -> label
        self.phases: list[tuple[str, int]] = []  # (phase, calls recorded when it ended)

    def run(self, namespace: str, *pods: str) -> None:
        """Wait until the pods run; learn their claims' labels."""
        core = kubernetes.client.CoreV1Api(self.api)
        custom = kubernetes.client.CustomObjectsApi(self.api)
        for pod in pods:
            if self.kind == "real":
                self.node.wait_running(self.api, namespace, pod)
            else:
                self.node.wait_running(namespace, pod)
            held = core.read_namespaced_pod(pod, namespace)
            made = {
                s.name: s.resource_claim_name for s in held.status.resource_claim_statuses or []
            }
            for entry in held.spec.resource_claims or []:
                name = entry.resource_claim_name or made[entry.name]
                claim = custom.get_namespaced_custom_object(
                    "resource.k8s.io", "v1", namespace, "resourceclaims", name
                )
                label = f"claim:{name}" if entry.resource_claim_name else f"{pod}/{entry.name}"
                self.labels[claim["metadata"]["uid"]] = label

    def delete(self, namespace: str, pod: str) -> None:
        """Delete one pod and wait until the kubelet confirmed it (after its unprepare)."""
        self.node.delete_pods(self.api, namespace, pod)

    def end_phase(self, name: str) -> None:
        self.phases.append((name, len(callrecord.calls(self.record))))

    def calls(self) -> list[tuple[str, Phase]]:
        """The recorded calls by phase, each claim by its label."""
        recorded = callrecord.calls(self.record)
        found, start = [], 0
        for name, end in self.phases:
            phase: Phase = Counter(
                (call.method, tuple(self.labels.get(uid, uid) for _, _, uid in call.claims))
                for call in recorded[start:end]
            )
            found.append((name, phase))
            start = end
        if start < len(recorded):
            found.append(
                ("after the last phase", Counter((c.method, ()) for c in recorded[start:]))
            )
        return found


@pytest.fixture(params=KUBELETS)
def on_node(
    request: pytest.FixtureRequest,
    kube_api: kubernetes.client.ApiClient,
    kube_cluster: realcluster.Cluster,
    classes: None,
) -> Callable[..., contextlib.AbstractContextManager[Recorded]]:
    kind: str = request.param

    @contextlib.contextmanager
    def start(fleet: str) -> Iterator[Recorded]:
        with tempfile.TemporaryDirectory(prefix="calls-") as folder:
            record = pathlib.Path(folder) / "calls.jsonl"
            program = callrecord.program(record)
            name = unique(f"kc-{kind[:3]}")
            make = real_node if kind == "real" else gpu_node
            with make(kube_api, kube_cluster, name, fleet, program=program) as node:
                yield Recorded(kind, kube_api, node, record)

    return start


def _phases(*phases: tuple[str, list[tuple[str, tuple[str, ...]]]]) -> list[tuple[str, Phase]]:
    return [(name, Counter(calls)) for name, calls in phases]


def test_reference_case_a_a_claim_each(on_node: Callable[..., Any]) -> None:
    with (
        on_node("2xT4") as node,
        applied(node.api, EXAMPLES / "v1-reference-cases/exclusive-gpus.yaml") as pods,
    ):
        namespace = pods[0]["metadata"]["namespace"]
        node.run(namespace, "pod1", "pod2")
        node.end_phase("pods started")
        node.delete(namespace, "pod1")
        node.end_phase("pod1 deleted")
        node.delete(namespace, "pod2")
        node.end_phase("pod2 deleted")
        assert node.calls() == _phases(
            ("pods started", [(PREPARE, ("pod1/gpu",)), (PREPARE, ("pod2/gpu",))]),
            ("pod1 deleted", [(UNPREPARE, ("pod1/gpu",))]),
            ("pod2 deleted", [(UNPREPARE, ("pod2/gpu",))]),
        )


def test_reference_case_b_a_shared_claim_is_prepared_once_unprepared_after_the_last_pod(
    on_node: Callable[..., Any], tmp_path: pathlib.Path
) -> None:
    """pod2 is created once pod1 runs: the real kubelet then finds the claim prepared in its
    claim info cache. (Two pods started at once may both call prepare on the real kubelet; see
    docs/TESTING.md, differences.)"""
    documents = list(yaml.safe_load_all(
        (EXAMPLES / "v1-reference-cases/shared-time-sliced-gpu.yaml").read_text()
    ))  # fmt: skip
    (second,) = [d for d in documents if d and d["metadata"]["name"] == "pod2"]
    first = tmp_path / "without-pod2.yaml"
    first.write_text(yaml.safe_dump_all([d for d in documents if d and d is not second]))
    with on_node("1xT4") as node, applied(node.api, first) as pods:
        namespace = pods[0]["metadata"]["namespace"]
        node.run(namespace, "pod1")
        node.end_phase("pod1 started")
        kubernetes.client.CoreV1Api(node.api).create_namespaced_pod(namespace, second)
        node.run(namespace, "pod2")
        node.end_phase("pod2 started")
        node.delete(namespace, "pod1")
        node.end_phase("pod1 deleted")
        node.delete(namespace, "pod2")
        node.end_phase("pod2 deleted")
        assert node.calls() == _phases(
            ("pod1 started", [(PREPARE, ("claim:shared-gpu",))]),
            ("pod2 started", []),
            ("pod1 deleted", []),
            ("pod2 deleted", [(UNPREPARE, ("claim:shared-gpu",))]),
        )


def test_mig_one_claim_of_four_mig_devices(on_node: Callable[..., Any]) -> None:
    with (
        on_node("1xA100-40GB,mig=0") as node,
        applied(node.api, EXAMPLES / "v1-mig-by-profile/gpu-test4.yaml") as (pod,),
    ):
        namespace = pod["metadata"]["namespace"]
        node.run(namespace, "pod")
        node.end_phase("pod started")
        node.delete(namespace, "pod")
        node.end_phase("pod deleted")
        assert node.calls() == _phases(
            ("pod started", [(PREPARE, ("pod/mig",))]),
            ("pod deleted", [(UNPREPARE, ("pod/mig",))]),
        )
