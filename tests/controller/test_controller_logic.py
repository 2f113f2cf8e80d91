"""The controller's pure parts: NAS parsing, wire shapes, leader election (the classic
controller's are in tests/classic/test_classic_logic.py)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from drasat.api.nas import AllocatedDevices
from drasat.controller import allocation, leader, nasnodes
from drasat.kube import nasclient

Obj = dict[str, Any]

CLASS = {"metadata": {"name": "gpu.drasat.io"}, "driverName": "gpu.drasat.io"}


def _claim(ref: Obj | None = None) -> Obj:
    spec: Obj = {"resourceClassName": "gpu.drasat.io"}
    if ref is not None:
        spec["parametersRef"] = ref
    return {"metadata": {"name": "c", "namespace": "ns", "uid": "u1"}, "spec": spec}


def _nas(status: str | None = "Ready", **spec: Any) -> Obj:
    obj: Obj = {"metadata": {"name": "n1", "namespace": "drasat", "resourceVersion": "7"},
                "spec": {"allocatableDevices": [], **spec}}  # fmt: skip
    if status:
        obj["status"] = status
    return obj


def test_nas_not_ready_missing_or_invalid_makes_the_node_unsuitable_with_the_reason() -> None:
    assert nasnodes.parse(_nas()).node.ready
    not_ready = nasnodes.parse(_nas("NotReady")).node
    assert not not_ready.ready and "NotReady" in not_ready.unready_reason
    bad = nasnodes.parse(_nas(surprise=True))
    assert not bad.node.ready and "spec.surprise: unknown field" in bad.problem
    assert "NodeAllocationState drasat/n1" in bad.node.unready_reason
    assert "no NodeAllocationState" in nasnodes.missing("n9").unready_reason


def _devices(uuid: str, uid: str = "u1") -> AllocatedDevices:
    return AllocatedDevices.model_validate(
        {
            "claimInfo": {"namespace": "ns", "name": "c", "uid": uid},
            "gpu": {"devices": [{"uuid": uuid}]},
        }
    )


def test_allocation_round_trips_through_the_claim_status() -> None:
    claim = _claim()
    devices = _devices("GPU-1")
    done = allocation.with_allocation(claim, "n1", devices, shareable=True)
    assert allocation.allocated_node(done) == "n1"
    assert allocation.devices_from_status(done) == devices
    assert done["status"]["driverName"] == "gpu.drasat.io"
    cleared = allocation.without_allocation(done)
    assert not allocation.is_allocated(cleared)
    assert "status" not in claim  # inputs are not changed


def test_nas_edits_are_idempotent() -> None:
    obj = _nas()
    assert allocation.nas_with(obj, {"u1": _devices("GPU-1")}) is not None
    assert allocation.nas_with(obj, {"u1": _devices("GPU-1")}) is None
    assert nasclient.without_claims(obj, {"u1"}) is not None
    assert nasclient.without_claims(obj, {"u1"}) is None


def test_conflicts_for_repair() -> None:
    existing = {"u2": _devices("GPU-1", "u2")}
    assert allocation.conflicts(existing, _devices("GPU-1")) == ["u2"]
    assert allocation.conflicts(existing, _devices("GPU-9")) == []


def test_pod_claim_names() -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {"resourceClaims": [
            {"name": "a", "source": {"resourceClaimName": "shared"}},
            {"name": "b", "source": {"resourceClaimTemplateName": "t"}},
            {"name": "c", "resourceClaimTemplateName": "t"},
        ]},
        "status": {"resourceClaimStatuses": [{"name": "c", "resourceClaimName": "p-c-x1"}]},
    }  # fmt: skip
    assert allocation.pod_claim_names(pod) == {"a": "shared", "b": "p-b", "c": "p-c-x1"}


T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("holder", "renewed_s_ago", "expected"),
    [
        (None, 0, "create"),  # no lease
        ("me", 100, "renew"),  # ours, even if late
        ("other", 5, "wait"),  # another's, fresh
        ("other", 20, "take"),  # another's, expired (duration 15)
        ("", 0, "take"),  # released
    ],
)
def test_leader_decide(holder: str | None, renewed_s_ago: int, expected: str) -> None:
    lease = None
    if holder is not None:
        renewed = leader.micro_time(T0 - datetime.timedelta(seconds=renewed_s_ago))
        lease = {"spec": {"holderIdentity": holder, "renewTime": renewed,
                          "leaseDurationSeconds": 15}}  # fmt: skip
    assert leader.decide(lease, identity="me", now=T0, duration_s=15) == expected
