"""Bad input: Events name the object and field; the controller keeps serving other claims."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ctl_cluster import (
    NS,
    Scheduler,
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

from drasat.controller.controller import Controller
from drasat.kube import resources as r
from drasat.kube.client import KubeClient
from drasat.sim import apiserver


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
