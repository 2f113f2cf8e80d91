"""Bad input: Events name the object and field; the controller keeps serving other claims."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import pytest
from ctl_classic import Scheduler
from ctl_cluster import (
    NS,
    add_claim,
    add_class,
    add_node,
    add_params,
    add_pod,
    allocated_node,
    claim,
    corrupt,
    t4,
    wait,
)
from ctl_events import events_for

from drasat.classic.controller import Controller
from drasat.controller.policy import PolicySource
from drasat.kube import resources as r
from drasat.kube.client import KubeClient
from drasat.testbed.sim import apiserver


def test_missing_parameters_give_an_event_and_no_allocation(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-1", [t4(0)])
    add_class(api)
    add_claim(api, "ns", "lost", params="nowhere", mode="Immediate")
    add_claim(api, "ns", "fine", mode="Immediate")
    start_controller()
    wait(lambda: allocated_node(claim(api, "ns", "fine")), what="the good claim")
    event = wait(lambda: events_for(api, "ns", "lost", "ParametersNotFound"), what="event")[0]
    assert event["type"] == "Warning"
    assert "spec.parametersRef" in event["message"] and "'nowhere'" in event["message"]
    assert allocated_node(claim(api, "ns", "lost")) is None


def test_malformed_parameters_name_the_field(
    server: apiserver.ApiServer, api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-1", [t4(0)])
    add_class(api)
    # Refused by the model (and the CRD): a share claim must have count 1.
    add_params(api, "ns", "odd", {"count": 1, "share": {"compute": 50}})
    corrupt(server, "odd", lambda obj: obj["spec"].update(count=2))
    add_claim(api, "ns", "odd", params="odd")
    add_pod(api, "ns", "p", {"gpu": "odd"})
    start_controller()
    with contextlib.suppress(AssertionError):  # no node ever becomes suitable
        Scheduler(api, ["node-1"], timeout=1.5).schedule("ns", "p", ["gpu"])
    event = wait(lambda: events_for(api, "ns", "odd", "BadParameters"), what="event")[0]
    assert "GpuClaimParameters ns/odd" in event["message"] and "count must be 1" in event["message"]
    context = api.get(r.POD_SCHEDULING_CONTEXTS, "p", namespace="ns")
    assert context["status"]["resourceClaims"] == [{"name": "gpu", "unsuitableNodes": ["node-1"]}]


def test_a_nas_with_unknown_fields_is_named_and_its_node_unsuitable(
    server: apiserver.ApiServer, api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    # A newer node plugin's NAS, say. The server validates writes, so the field is put into its
    # store behind its back.
    add_node(api, "node-odd", [t4(0)])
    corrupt(
        server, "node-odd", lambda obj: obj["spec"]["allocatableDevices"][0]["gpu"].update(flux=3)
    )
    add_node(api, "node-ok", [t4(0)])
    add_class(api)
    add_claim(api, "ns", "c")
    add_pod(api, "ns", "p", {"gpu": "c"})
    start_controller()
    assert Scheduler(api, ["node-odd", "node-ok"]).schedule("ns", "p", ["gpu"]) == "node-ok"
    event = wait(lambda: events_for(api, NS, "node-odd", "InvalidNodeAllocationState"),
                 what="NAS event")[0]  # fmt: skip
    assert "spec.allocatableDevices[0].gpu.flux: unknown field" in event["message"]
    context = api.get(r.POD_SCHEDULING_CONTEXTS, "p", namespace="ns")
    assert context["status"]["resourceClaims"][0]["unsuitableNodes"] == ["node-odd"]
    unsuitable = wait(lambda: events_for(api, "ns", "c", "UnsuitableNodes"), what="claim event")
    assert "node-odd: NodeAllocationState drasat/node-odd" in unsuitable[0]["message"]


def test_a_node_without_nas_is_unsuitable_with_that_reason(
    api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-ok", [t4(0)])
    add_class(api)
    add_claim(api, "ns", "c")
    add_pod(api, "ns", "p", {"gpu": "c"})
    start_controller()
    assert Scheduler(api, ["node-bare", "node-ok"]).schedule("ns", "p", ["gpu"]) == "node-ok"
    unsuitable = wait(lambda: events_for(api, "ns", "c", "UnsuitableNodes"), what="claim event")
    assert "node-bare has no NodeAllocationState" in unsuitable[0]["message"]


def _alias_bomb() -> str:
    lines = ["  b0: &b0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"  b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * 9)}]" for i in range(1, 10)]
    return "\n".join(lines)


HOSTILE_POLICIES = {
    "alias-bomb": "apiVersion: policy.drasat.io/v1alpha1\nkind: AllocationPolicy\n"
    f"metadata: {{name: p}}\nspec:\n{_alias_bomb()}\n",
    "deep-nesting": "apiVersion: policy.drasat.io/v1alpha1\nkind: AllocationPolicy\n"
    "metadata: {name: p}\nspec: {objective: " + "[" * 600 + "]" * 600 + "}\n",
    "bad-tag": "apiVersion: policy.drasat.io/v1alpha1\nkind: AllocationPolicy\n"
    "metadata: {name: p}\nspec: {solver: {workers: !!int c}}\n",
}


@pytest.mark.parametrize("text", HOSTILE_POLICIES.values(), ids=HOSTILE_POLICIES.keys())
def test_a_hostile_policy_configmap_is_logged_and_the_controller_keeps_serving(
    api: KubeClient,
    start_controller: Callable[..., Controller],
    caplog: pytest.LogCaptureFixture,
    text: str,
) -> None:
    api.create(r.CONFIGMAPS, {"metadata": {"name": "policy", "namespace": NS},
                              "data": {"policy.yaml": text}})  # fmt: skip
    source = PolicySource.from_configmap(api, namespace=NS, name="policy")
    with caplog.at_level(logging.ERROR):
        assert source.poll() is False  # never raises
    rejected = [r.getMessage() for r in caplog.records if "policy rejected" in r.getMessage()]
    assert len(rejected) == 1 and "\n" not in rejected[0]
    assert f"ConfigMap {NS}/policy key policy.yaml: document 1: line " in rejected[0]
    add_node(api, "node-1", [t4(0)])
    add_class(api)
    add_claim(api, "ns", "c", mode="Immediate")
    start_controller(policy=source.current, poll_policy=source.poll)
    assert wait(lambda: allocated_node(claim(api, "ns", "c")), what="claim") == "node-1"


def test_a_nas_over_the_device_limit_is_named_and_its_node_unsuitable(
    server: apiserver.ApiServer, api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    # 200 devices: more than one ResourceSlice may publish (drasat.api.limits.MAX_NODE_DEVICES).
    add_node(api, "node-huge", [t4(0)])
    corrupt(server, "node-huge", lambda obj: obj["spec"].update(
        allocatableDevices=obj["spec"]["allocatableDevices"] * 200))  # fmt: skip
    add_node(api, "node-ok", [t4(0)])
    add_class(api)
    add_claim(api, "ns", "c")
    add_pod(api, "ns", "p", {"gpu": "c"})
    start_controller()
    assert Scheduler(api, ["node-huge", "node-ok"]).schedule("ns", "p", ["gpu"]) == "node-ok"
    event = wait(lambda: events_for(api, NS, "node-huge", "InvalidNodeAllocationState"),
                 what="NAS event")[0]  # fmt: skip
    assert "spec.allocatableDevices: List should have at most 128 items" in event["message"]


def test_parameters_with_a_line_break_in_a_key_give_a_one_line_event(
    server: apiserver.ApiServer, api: KubeClient, start_controller: Callable[..., Controller]
) -> None:
    add_node(api, "node-1", [t4(0)])
    add_class(api)
    add_params(api, "ns", "odd", {"count": 1})
    corrupt(server, "odd", lambda obj: obj["spec"].update({"cou\nnt": 2}))
    add_claim(api, "ns", "odd", params="odd", mode="Immediate")
    add_claim(api, "ns", "fine", mode="Immediate")
    start_controller()
    wait(lambda: allocated_node(claim(api, "ns", "fine")), what="the good claim")
    event = wait(lambda: events_for(api, "ns", "odd", "BadParameters"), what="event")[0]
    assert "spec['cou\\nnt']: unknown field" in event["message"]
    assert "\n" not in event["message"]
