"""Crash safety: a plugin killed after any step of a prepare or unprepare is completed or rolled
back by the next call (or by start-up reconciliation), and no orphan MIG instance remains."""

from __future__ import annotations

from typing import Any

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

from drasat.api.nas import PreparedDevices, PreparedGpus
from drasat.nodeplugin import checkpoint
from drasat.nodeplugin.state import ClaimError, ClaimRef, Fault

UID = "c0ffee00-0000-4000-8000-000000000001"


class Killed(BaseException):
    """Stands for SIGKILL: not an Exception, so no handler of the plugin catches it."""


PREPARE_STEPS = ["recorded", "mig-created", "mig-recorded", "cdi", "nas"]
UNPREPARE_STEPS = ["undo-cdi", "undo-mig", "undone"]


def crash(node: Any, step: str, action: Any) -> Any:
    node.state.faults.append(Fault(step, Killed()))
    with pytest.raises(Killed):
        action()
    return node.restart()


@pytest.mark.parametrize("step", PREPARE_STEPS)
@pytest.mark.parametrize("reconcile", [False, True], ids=["next-call", "start-up"])
def test_killed_during_mig_prepare(node_factory: Any, step: str, reconcile: bool) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "3g.20gb", 4, 4))
    restarted = crash(node, step, lambda: node.state.prepare(ref(UID)))
    if reconcile:
        restarted.state.reconcile()
        assert restarted.state.checkpoint.get(UID) is None  # rolled back...
        assert gpu_instances(restarted, 1) == []  # ...with nothing left on the GPU
    assert restarted.state.prepare(ref(UID)) == [f"k8s.gpu.drasat.io/claim={UID}"]
    assert gpu_instances(restarted, 1) == [(4, 4)]  # exactly one instance, no orphan
    restarted.state.unprepare(ref(UID))
    assert gpu_instances(restarted, 1) == []
    assert restarted.state.cdi.claim_uids() == []


@pytest.mark.parametrize("step", UNPREPARE_STEPS)
@pytest.mark.parametrize("reconcile", [False, True], ids=["next-call", "start-up"])
def test_killed_during_mig_unprepare(node_factory: Any, step: str, reconcile: bool) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "1g.5gb", 2, 1))
    node.state.prepare(ref(UID))
    restarted = crash(node, step, lambda: node.state.unprepare(ref(UID)))
    if reconcile:
        restarted.state.reconcile()
    else:
        restarted.state.unprepare(ref(UID))
    assert gpu_instances(restarted, 1) == []
    assert restarted.state.checkpoint.get(UID) is None
    assert UID not in restarted.store.read().spec.preparedClaims
    assert restarted.state.cdi.claim_uids() == []


def test_killed_after_a_hold_restores_the_setting(node_factory: Any) -> None:
    node = node_factory("T4")
    sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}}
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), sharing=sharing))
    restarted = crash(node, "hold", lambda: node.state.prepare(ref(UID)))
    restarted.state.reconcile()
    assert node.sim.gpus[0].time_slice == 0
    assert restarted.state.checkpoint.data.settings == {}


def test_prepared_claims_survive_a_restart(node_factory: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "2g.10gb", 0, 2))
    ids = node.state.prepare(ref(UID))
    restarted = node.restart()
    report = restarted.state.reconcile()
    assert not any("orphan" in line for line in report)  # the claim's MIG device is adopted
    assert gpu_instances(restarted, 1) == [(0, 2)]
    assert restarted.state.prepare(ref(UID)) == ids
    restarted.state.unprepare(ref(UID))
    assert gpu_instances(restarted, 1) == []


def test_reconcile_syncs_nas_prepared_claims(node_factory: Any) -> None:
    node = node_factory("T4")
    node.allocate(UID, gpu_allocation(UID, node.gpu(0)))
    node.state.prepare(ref(UID))

    def scramble(nas: Any) -> bool:
        nas.spec.preparedClaims.clear()
        nas.spec.preparedClaims["stale"] = PreparedDevices(gpu=PreparedGpus())
        return True

    node.store.update(scramble)
    report = node.restart().state.reconcile()
    assert set(node.store.read().spec.preparedClaims) == {UID}
    assert "restored preparedClaims entry" in " ".join(report)


def test_corrupt_checkpoint_is_moved_aside(node_factory: Any) -> None:
    node = node_factory("T4")
    node.allocate(UID, gpu_allocation(UID, node.gpu(0)))
    node.state.prepare(ref(UID))
    (path,) = node.state.checkpoint.claims_dir.glob("*.json")
    path.write_text('{"checksum": "0", "data": {}}')
    restarted = node.restart()
    assert restarted.state.checkpoint.records() == []
    assert path.with_suffix(".corrupt").exists()


def test_checkpoint_write_is_atomic(tmp_path: Any) -> None:
    store = checkpoint.Checkpoint(tmp_path)
    record = checkpoint.ClaimRecord(
        uid="u",
        namespace="n",
        name="c",
        status=checkpoint.ClaimStatus.PrepareStarted,
        allocation={},
    )
    store.put(record)
    leftovers = [p.name for p in store.claims_dir.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # the temporary file was renamed over the target
    assert checkpoint.Checkpoint(tmp_path).get("u") == record


def test_interrupted_unprepare_then_prepare_again(node_factory: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "1g.5gb", 5, 1))
    node.state.prepare(ref(UID))
    restarted = crash(node, "undo-cdi", lambda: node.state.unprepare(ClaimRef(UID)))
    restarted.state.prepare(ref(UID))  # the kubelet retries prepare (pod restarted)
    assert gpu_instances(restarted, 1) == [(5, 1)]


def test_reconcile_reports_a_prepared_claims_lost_mig_device(node_factory: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "1g.5gb", 4, 1))
    node.state.prepare(ref(UID))
    node.sim.gpus[1].gpu_instances.clear()  # a GPU reset took it away
    report = node.restart().state.reconcile()
    assert any(
        f"prepared claim {UID}: its MIG device" in line and "is gone" in line for line in report
    )


def test_killed_after_starting_mps(node_factory: Any) -> None:
    node = node_factory("T4")
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), share={"compute": 30}))
    restarted = crash(node, "mps", lambda: node.state.prepare(ref(UID)))
    restarted.state.reconcile()
    assert restarted.daemons() == {}
    assert restarted.state.mps.names() == []  # the daemon nobody held, stopped and removed
    assert restarted.state.prepare(ref(UID)) == [f"k8s.gpu.drasat.io/claim={UID}"]
    assert list(restarted.daemons().values()) == [(node.gpu(0),)]


def test_killed_after_the_nas_write_then_a_failing_retry_leaves_no_stale_entry(
    node_factory: Any,
) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "1g.5gb", 0, 1))
    restarted = crash(node, "nas", lambda: node.state.prepare(ref(UID)))
    assert UID in restarted.store.read().spec.preparedClaims
    restarted.sim.inject_fault("nvmlDeviceCreateGpuInstanceWithPlacement", 999)  # retry fails
    with pytest.raises(ClaimError, match="cannot create MIG"):
        restarted.state.prepare(ref(UID))
    assert UID not in restarted.store.read().spec.preparedClaims


@pytest.mark.parametrize("step", [*PREPARE_STEPS, "mps"])
def test_killed_during_a_v1_mig_prepare(node_factory: Any, step: str) -> None:
    """The v1 translation adds no step of its own: a v1 claim (a MIG placement device with
    NVIDIA's MPS config) killed after any step of the preparer is rolled back by the kubelet's
    retry, which then prepares it once."""
    node = node_factory("2xA100-40GB,mig=1")
    claims = Claims()
    mps = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "MigDeviceConfig",
        "sharing": {"strategy": "MPS"},
    }
    config = {"source": "FromClaim", "opaque": {"driver": "gpu.drasat.io", "parameters": mps}}
    claims.add(v1_claim(UID, ("mig", NODE, "gpu-1-mig-3g20gb-9-4"), config=[config]))
    restarted = crash(node, step, lambda: V1(node, claims).prepare((UID, "claim")))
    v1 = V1(restarted, claims)
    answer = v1.prepare((UID, "claim"))[UID]
    assert answer.error == "" and [d.device_name for d in answer.devices] == [
        "gpu-1-mig-3g20gb-9-4"
    ]
    assert gpu_instances(restarted, 1) == [(4, 4)]  # exactly one instance, no orphan
    assert len(restarted.daemons()) == 1
    assert v1.unprepare(UID)[UID].error == ""
    assert gpu_instances(restarted, 1) == [] and restarted.daemons() == {}
    assert restarted.state.cdi.claim_uids() == []
