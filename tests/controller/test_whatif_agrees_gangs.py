"""One planner for gangs: `drasat whatif --from-cluster` shows what the v1 controller then does
with the same cluster. A gang's minimum (`gpu.drasat.io/gang-size`, a PodGroup's `minCount`) is
placed together and its pods past the minimum one by one; a pod naming a PodGroup that does not
exist is held back, with the controller's reason. The what-if reads the in-process API server
before the controller runs, and the controller's cycles then decide on that same state."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import ctl_slices
import pytest
from ctl_cluster import NS as DRASAT_NS
from ctl_cluster import add_node, t4

from drasat.api import crds
from drasat.api.devicemodel import classes
from drasat.api.groups import GANG_LABEL, GANG_SIZE_LABEL, SCHEDULING_GATE
from drasat.api.policy import AllocationPolicySpec
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, configuration_for
from drasat.solver import solve
from drasat.solver.problem import Mode
from drasat.testbed.sim import apiserver
from drasat.v1 import gangs as v1gangs
from drasat.whatif import run, v1live

Obj = dict[str, Any]
NS = "default"

#: The Workload API's PodGroup, served to the in-process API server as a custom resource (the
#: real one is built in from Kubernetes 1.37 behind the GenericWorkload gate).
POD_GROUP_CRD: Obj = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.k8s.io"},
    "spec": {
        "group": "scheduling.k8s.io",
        "names": {
            "kind": "PodGroup",
            "listKind": "PodGroupList",
            "plural": "podgroups",
            "singular": "podgroup",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1beta1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


@pytest.fixture
def api() -> Iterator[KubeClient]:
    with apiserver.ApiServer.running(crds=[*crds.all_crds(), POD_GROUP_CRD]) as running:
        client = KubeClient(configuration_for(running.url), request_timeout=10)
        for body in classes.device_classes():
            client.create(r.DEVICE_CLASSES_V1, body)
        yield client
        client.close()


def _node(api: KubeClient, name: str, gpus: int) -> None:
    api.create(r.NODES, {"metadata": {"name": name}, "status": {
        "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}})  # fmt: skip
    devices = [t4(i) for i in range(gpus)]
    add_node(api, name, devices)
    ctl_slices.publish(api, name, devices)


def _pod(api: KubeClient, name: str, *, labels: dict[str, str] | None = None) -> None:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.drasat.io", "count": 1}}
    api.create(r.RESOURCE_CLAIMS_V1, {"metadata": {"name": name, "namespace": NS},
                                      "spec": {"devices": {"requests": [request]}}},
               namespace=NS)  # fmt: skip
    spec: Obj = {
        "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
        "schedulingGates": [{"name": SCHEDULING_GATE}],
    }
    meta: Obj = {"name": name, "namespace": NS, "labels": labels or {}}
    api.create(r.PODS, {"metadata": meta, "spec": spec}, namespace=NS)


def _pod_group(api: KubeClient, name: str, min_count: int) -> None:
    api.create(r.POD_GROUPS, {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }, namespace=NS)  # fmt: skip


def _whatif(api: KubeClient) -> tuple[dict[str, str | None], dict[str, str]]:
    """Each pod's node as the what-if places it (None: unplaced), and why each is unplaced."""
    inputs = run.read_inputs(cluster=None, manifest_files=[], policy=None,
                             live=v1live.read_documents(api))  # fmt: skip
    result = run.run_v1(inputs, mode=Mode.batch, solve=solve)
    assert result.solver_error is None
    outcome = result.outcome
    pods = [p.key.partition("/")[2] for p in result.workload.pods]
    placed = {p: outcome.placed.get(f"{NS}/{p}") for p in pods}
    return placed, {p: outcome.refused[f"{NS}/{p}"][0] for p in pods if placed[p] is None}


def _controller(api: KubeClient) -> tuple[dict[str, str | None], dict[str, str]]:
    """Each pod's node once the controller has run its cycles (None: unallocated), and the
    newest Event on each unallocated pod that says why."""
    spec = AllocationPolicySpec()
    ctl = V1Controller(api, V1Config(namespace=DRASAT_NS, batch_window_s=0,
                                     pod_groups=True), policy=lambda: spec)  # fmt: skip
    ctl.start(sync_timeout_s=10, cycles=False)
    why: dict[str, str] = {}
    seen: set[str] = set()
    try:
        for _ in range(4):
            ctl.cycle()
            time.sleep(0.1)
            # Each cycle's new Events (the recorder writes one message once): the last cycle's
            # reason for a pod is its newest.
            for event in api.list(r.EVENTS, namespace=NS).items:
                name = event["metadata"]["name"]
                about = event["involvedObject"]
                if (
                    name not in seen
                    and about["kind"] == "Pod"
                    and event["reason"] in ("NotAllocatable", "GangIncomplete")
                ):
                    why[about["name"]] = event["message"]
                seen.add(name)
    finally:
        ctl.stop()
    placed: dict[str, str | None] = {}
    for pod in api.list(r.PODS, namespace=NS).items:
        name = pod["metadata"]["name"]
        claim = api.get(r.RESOURCE_CLAIMS_V1, name, namespace=NS)
        allocation = (claim.get("status") or {}).get("allocation")
        placed[name] = allocation["devices"]["results"][0]["pool"] if allocation else None
    return placed, {p: why.get(p, "") for p, node in placed.items() if node is None}


#: What the controller's Event adds to a reason while drasat's gate holds the pod.
GATE_NOTE = (f"; the pod is held by drasat's scheduling gate {SCHEDULING_GATE} until drasat can "
             "allocate its claims")  # fmt: skip


def _said(events: dict[str, str]) -> dict[str, str]:
    """The controller's reasons without the note about its gate (the what-if has no gate)."""
    return {p: text.removesuffix(GATE_NOTE) for p, text in events.items()}


def test_a_label_gang_past_its_minimum_the_whatif_places_as_the_controller(
    api: KubeClient,
) -> None:
    """Three pods of a gang of at least 2, one GPU each, on two GPUs: the first two go together
    and the third is refused, by both."""
    _node(api, "n1", 2)
    for name in ("w0", "w1", "w2"):
        _pod(api, name, labels={GANG_LABEL: "two", GANG_SIZE_LABEL: "2"})
    predicted, predicted_why = _whatif(api)
    assert predicted == {"w0": "n1", "w1": "n1", "w2": None}
    done, done_why = _controller(api)
    assert done == predicted
    assert _said(done_why) == predicted_why


#: The PodGroup each pod names. The in-process API server refuses a pod's
#: `spec.schedulingGroup` (the schemas it checks pods against predate the Workload API), so
#: `drasat.v1.gangs.pod_group_name` is given these for the controller and the what-if alike; the
#: field itself is read on the real control plane (tests/e2e/test_e2e_v1_gangs.py) and from -f
#: manifests (tests/whatif/test_whatif_v1_podgroups.py).
GROUPS = {"t0": "train", "t1": "train", "t2": "train", "lost": "later"}


def test_a_podgroup_gang_and_a_missing_podgroup_the_whatif_as_the_controller(
    api: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PodGroup of minCount 2 with three pods on two GPUs (its first two together, the third
    refused), and a pod naming a PodGroup that does not exist: held back, with the controller's
    reason."""

    def named(pod: Obj) -> str | None:
        return GROUPS.get(str((pod.get("metadata") or {}).get("name")))

    monkeypatch.setattr(v1gangs, "pod_group_name", named)
    _node(api, "n1", 2)
    _pod_group(api, "train", 2)
    for name in GROUPS:
        _pod(api, name)
    predicted, predicted_why = _whatif(api)
    assert predicted == {"lost": None, "t0": "n1", "t1": "n1", "t2": None}
    assert predicted_why["lost"] == (
        "gang default/podgroup/later: PodGroup default/later does not exist yet: none of its "
        "pods is allocated before it does"
    )
    done, done_why = _controller(api)
    assert done == predicted
    assert _said(done_why) == predicted_why
