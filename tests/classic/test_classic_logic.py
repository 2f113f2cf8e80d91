"""The classic controller's pure parts: claim parameters, holds, scheduling contexts, work queue."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from drasat.api.nas import AllocatedDevices
from drasat.classic import params
from drasat.classic import schedulingcontexts as scheduling
from drasat.classic.holds import Holds
from drasat.classic.workqueue import WorkQueue
from drasat.controller import nasnodes

Obj = dict[str, Any]

CLASS = {"metadata": {"name": "gpu.drasat.io"}, "driverName": "gpu.drasat.io"}


def _claim(ref: Obj | None = None) -> Obj:
    spec: Obj = {"resourceClassName": "gpu.drasat.io"}
    if ref is not None:
        spec["parametersRef"] = ref
    return {"metadata": {"name": "c", "namespace": "ns", "uid": "u1"}, "spec": spec}


def _lookup(objects: dict[tuple[str, str | None, str], Obj]) -> params.Lookup:
    return lambda group, kind, namespace, name: objects.get((kind, namespace, name))


def _nas(status: str | None = "Ready", **spec: Any) -> Obj:
    obj: Obj = {"metadata": {"name": "n1", "namespace": "drasat", "resourceVersion": "7"},
                "spec": {"allocatableDevices": [], **spec}}  # fmt: skip
    if status:
        obj["status"] = status
    return obj


def _devices(uuid: str, uid: str = "u1") -> AllocatedDevices:
    return AllocatedDevices.model_validate(
        {
            "claimInfo": {"namespace": "ns", "name": "c", "uid": uid},
            "gpu": {"devices": [{"uuid": uuid}]},
        }
    )


T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def test_no_parameters_means_one_gpu() -> None:
    request = params.resolve_claim(_claim(), params.ClassInfo("x", True), _lookup({}))
    assert request.gpu is not None and request.gpu.count == 1 and request.uid == "u1"


@pytest.mark.parametrize(
    ("ref", "objects", "reason", "fragment"),
    [
        # a reference to an object that does not exist names kind, name and namespace
        ({"apiGroup": "gpu.drasat.io", "kind": "GpuClaimParameters", "name": "gone"}, {},
         "ParametersNotFound", "'gone' (gpu.drasat.io) not found in namespace ns"),
        # a foreign group is refused, naming the field
        ({"apiGroup": "example.com", "kind": "GpuClaimParameters", "name": "x"}, {},
         "BadParameters", "spec.parametersRef.apiGroup"),
        # a class-parameters kind on a claim is refused
        ({"apiGroup": "gpu.drasat.io", "kind": "DeviceClassParameters", "name": "p"},
         {("DeviceClassParameters", "ns", "p"): {"metadata": {"name": "p"}, "spec": {}}},
         "BadParameters", "spec.parametersRef.kind"),
        # a malformed spec names the field path inside the parameters object
        ({"apiGroup": "gpu.drasat.io", "kind": "GpuClaimParameters", "name": "p"},
         {("GpuClaimParameters", "ns", "p"): {"metadata": {"name": "p", "namespace": "ns"},
                                              "spec": {"count": 0}}},
         "BadParameters", "GpuClaimParameters ns/p: spec.count"),
        # an unknown field is named as such
        ({"apiGroup": "gpu.drasat.io", "kind": "MigDeviceClaimParameters", "name": "p"},
         {("MigDeviceClaimParameters", "ns", "p"): {"metadata": {"name": "p", "namespace": "ns"},
                                                    "spec": {"profile": "1g.5gb", "colour": 1}}},
         "BadParameters", "spec.colour: unknown field"),
    ],
)  # fmt: skip
def test_bad_parameters_name_the_problem(
    ref: Obj, objects: dict[Any, Obj], reason: str, fragment: str
) -> None:
    with pytest.raises(params.ParameterError) as caught:
        params.resolve_claim(_claim(ref), params.ClassInfo("x", True), _lookup(objects))
    assert caught.value.reason == reason
    assert fragment in caught.value.message


def test_nvidia_group_parameters_are_accepted() -> None:
    ref = {"apiGroup": "gpu.resource.nvidia.com", "kind": "GpuClaimParameters", "name": "p"}
    objects = {("GpuClaimParameters", "ns", "p"): {"metadata": {"name": "p"}, "spec": {"count": 2}}}
    request = params.resolve_claim(_claim(ref), params.ClassInfo("x", False), _lookup(objects))
    assert request.gpu is not None and request.gpu.count == 2 and request.shareable is False


def test_class_parameters() -> None:
    klass = {**CLASS, "parametersRef": {"apiGroup": "gpu.drasat.io",
                                        "kind": "DeviceClassParameters", "name": "p"}}  # fmt: skip
    found = {("DeviceClassParameters", None, "p"): {"metadata": {"name": "p"},
                                                    "spec": {"sharable": False}}}  # fmt: skip
    assert params.resolve_class(klass, _lookup(found)).shareable is False
    with pytest.raises(
        params.ParameterError, match=r"ResourceClass gpu\.drasat\.io: parametersRef"
    ):
        params.resolve_class(klass, _lookup({}))
    assert params.resolve_class(CLASS, _lookup({})).shareable is True
    assert params.is_ours(CLASS) and not params.is_ours({"driverName": "other"})


def test_holds_are_fed_as_allocations_and_expire_on_the_fake_clock() -> None:
    now = [0.0]
    holds = Holds(ttl_s=10, clock=lambda: now[0])
    holds.hold("u1", "n1", _devices("GPU-1"))
    assert holds.by_node() == {"n1": {"u1": _devices("GPU-1")}}
    assert holds.by_node(excluding=frozenset({"u1"})) == {}
    node = nasnodes.with_held(nasnodes.parse(_nas()).node, holds.by_node()["n1"])
    assert "held:u1" in node.ledger.allocated
    holds.hold("u1", "n2", _devices("GPU-2"))  # one preferred node per claim
    assert set(holds.by_node()) == {"n2"}
    now[0] = 10.0
    assert len(holds) == 0


def test_holds_are_dropped_with_their_claim() -> None:
    holds = Holds(ttl_s=60)
    holds.hold("u1", "n1", _devices("GPU-1"))
    holds.hold("u2", "n1", _devices("GPU-2", "u2"))
    holds.drop("u1")
    assert holds.claims() == {"u2"}


def test_scheduling_status() -> None:
    psc = {"spec": {"potentialNodes": ["a", "b"], "selectedNode": "c"}}
    assert scheduling.candidates(psc) == ("a", "b", "c")
    feasibility = {"a": None, "b": "no GPU left"}
    assert scheduling.unsuitable(("a", "b", "c"), feasibility) == ["b", "c"]
    statuses = scheduling.claim_statuses({"gpu": ["b"]})
    assert statuses == [{"name": "gpu", "unsuitableNodes": ["b"]}]
    assert scheduling.status_differs({}, statuses)
    assert not scheduling.status_differs({"status": {"resourceClaims": statuses}}, statuses)
    many = [f"n{i}" for i in range(200)]
    assert len(scheduling.unsuitable(many, {})) == scheduling.MAX_NODES
    assert "b: no GPU left" in scheduling.describe(feasibility, ("a", "b"))


def test_workqueue_dedups_serializes_and_backs_off() -> None:
    now = [0.0]
    queue = WorkQueue(backoff_s=(1.0, 4.0), clock=lambda: now[0])
    queue.add("a")
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")  # while active: processed again after done
    assert queue.get(timeout=0) is None
    queue.done("a")
    assert queue.get(timeout=0) == "a"
    assert queue.retry("a") == 1.0
    queue.done("a")
    assert queue.get(timeout=0) is None
    now[0] = 1.0
    assert queue.get(timeout=0) == "a"
    assert queue.retry("a") == 2.0
    queue.forget("a")
    assert queue.retry("b") == 1.0


def test_scheduling_status_keeps_other_drivers_entries() -> None:
    psc = {"status": {"resourceClaims": [{"name": "nic", "unsuitableNodes": ["x"]},
                                         {"name": "gpu", "unsuitableNodes": ["old"]}]}}  # fmt: skip
    assert scheduling.merged(psc, {"gpu": ["b"]}) == [
        {"name": "gpu", "unsuitableNodes": ["b"]},
        {"name": "nic", "unsuitableNodes": ["x"]},
    ]
