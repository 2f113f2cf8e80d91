"""The prepared-device plan (`plan.DevicePlan`, issue 25): a v1 claim is prepared from its
ResourceClaim's results and configuration straight into the plugin's plan, never through the
classic CRD model (`AllocatedDevices`, which only a NAS entry or a resource handle becomes, at
the classic edge); the checkpoint keeps the plan in the records' shape of formats 1 and 2."""

from __future__ import annotations

from typing import Any, NoReturn

import pytest
from npfixtures import (
    NODE,
    V1,
    Claims,
    gpu_allocation,
    gpu_instances,
    mig_allocation,
    ref,
    v1_claim,
)

from drasat.api.nas import AllocatedDevices
from drasat.nodeplugin import state
from drasat.nodeplugin.plan import DevicePlan, MigSlot, Step

LIFECYCLE = {
    "source": "FromClass",
    "opaque": {
        "driver": "gpu.drasat.io",
        "parameters": {
            "apiVersion": "gpu.drasat.io/v1alpha1",
            "kind": "GpuConfig",
            "lifecycle": [{"action": "setPowerLimitWatts", "value": 200}],
        },
    },
}


def _no_classic_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every way of building the classic model, and the classic edge, fail the test."""

    def classic(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError("the v1 prepare built the classic AllocatedDevices")

    for method in ("__init__", "model_validate", "model_validate_json", "model_construct"):
        monkeypatch.setattr(AllocatedDevices, method, classic)
    monkeypatch.setattr(state, "_classic_plan", classic)


def test_the_v1_prepare_never_builds_the_classic_model(
    node_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = node_factory("3xA100-40GB,mig=2")
    claims = Claims()
    claims.add(v1_claim("whole", ("gpu", NODE, "gpu-0"), name="whole", config=[LIFECYCLE]))
    share = v1_claim("share", ("s", NODE, "gpu-1"), name="share")
    result = share["status"]["allocation"]["devices"]["results"][0]
    result.update(shareID="x", consumedCapacity={"memory": "8Gi", "compute": "30"})
    claims.add(share)
    claims.add(v1_claim("mig", ("m", NODE, "gpu-2-mig-3g20gb-9-0"), name="mig"))
    claims.add(v1_claim("none", ("g/cpu", NODE, "cpu-fallback"), name="none"))
    uids = {"whole": "whole", "share": "share", "mig": "mig", "none": "none"}
    _no_classic_model(monkeypatch)

    v1 = V1(node, claims)
    answers = v1.prepare(*uids.items())
    assert {uid: a.error for uid, a in answers.items()} == dict.fromkeys(uids, "")
    assert node.lib.settings(node.gpu(0)).power_limit_watts == 200
    assert gpu_instances(node, 2) == [(0, 4)]
    again = V1(node.restart(), claims)  # records read back, re-prepared, unprepared
    assert {u: a.error for u, a in again.prepare(*uids.items()).items()} == dict.fromkeys(uids, "")
    assert {u: a.error for u, a in again.unprepare(*uids).items()} == dict.fromkeys(uids, "")
    assert gpu_instances(node, 2) == []


def test_a_classic_claim_is_converted_at_its_edge(node_factory: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate("c1", gpu_allocation("c1", node.gpu(0), sharing={"strategy": "MPS"}))
    node.allocate("c2", mig_allocation("c2", node.gpu(1), "1g.5gb", 6, 1))
    for uid in ("c1", "c2"):
        assert node.state.prepare(ref(uid)) == [f"k8s.gpu.drasat.io/claim={uid}"]
    whole, mig = (node.state.checkpoint.get(uid) for uid in ("c1", "c2"))
    assert whole is not None and mig is not None
    assert whole.allocated().gpus == (node.gpu(0),) and not whole.allocated().mig_claim
    assert mig.allocated().migs == (MigSlot("1g.5gb", node.gpu(1), 6, 1),)


@pytest.mark.parametrize(
    "entry",
    [
        gpu_allocation("g", "GPU-a", "GPU-b", sharing={"strategy": "TimeSlicing"}),
        {**gpu_allocation("o"), "optional": True},
        {**gpu_allocation("s", "GPU-a"), "share": {"compute": 30, "memory": "8Gi"}},
        {**gpu_allocation("l", "GPU-a"), "lifecycle": [{"action": "setComputeMode", "value": 1}]},
        mig_allocation("m", "GPU-a", "3g.20gb", 4, 4),
        {"claimInfo": {"namespace": "n", "name": "e", "uid": "e"}, "mig": {"devices": []}},
    ],
)
def test_the_record_keeps_the_shape_of_the_classic_entry(entry: dict[str, Any]) -> None:
    # Records of formats 1 and 2 keep a claim's devices in the classic entry's shape: a plan is
    # written so, and a record (or a NAS entry) read back gives the same plan.
    classic = AllocatedDevices.model_validate(entry)
    plan = DevicePlan.from_record(entry)
    assert plan.record() == classic.dump()
    assert DevicePlan.from_record(plan.record()) == plan == state._classic_plan(classic)


def test_a_plan_the_record_cannot_hold_is_refused() -> None:
    # the claim's limit of devices, as the classic entry had it
    plan = DevicePlan("n", "c", "u", gpus=tuple(f"GPU-{i}" for i in range(33)))
    with pytest.raises(ValueError, match="at most 32"):
        plan.record()
    with pytest.raises(ValueError, match="exactly one of gpu or mig"):
        DevicePlan.from_record({"claimInfo": {"namespace": "n", "name": "c", "uid": "u"}})
    assert DevicePlan("n", "c", "u", lifecycle=(Step("setTimeSlice", "Long"),)).record() == {
        "claimInfo": {"namespace": "n", "name": "c", "uid": "u"},
        "gpu": {"devices": []},
        "lifecycle": [{"action": "setTimeSlice", "value": "Long"}],
    }
