"""What one prepare/unprepare costs the node: checkpoint writes (each a file create + rename) and
NAS work limited to the claim's own entries; and that the writes saved keep crash safety."""

from __future__ import annotations

from typing import Any

import pytest
from npfixtures import gpu_allocation, gpu_instances, mig_allocation, ref

from drasat.nodeplugin import checkpoint
from drasat.nodeplugin.devicelib import ComputeMode
from drasat.nodeplugin.state import ClaimError, ClaimRef, Fault

UID = "c0ffee00-0000-4000-8000-000000000002"
MPS = {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}}
TIME_SLICING = {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}}


class Killed(BaseException):
    """Stands for SIGKILL: not an Exception, so no handler of the plugin catches it."""


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the checkpoint files written, in order."""
    written: list[str] = []
    original = checkpoint.write_atomic

    def counting(path: Any, text: str, **kwargs: Any) -> None:
        written.append(path.name)
        original(path, text, **kwargs)

    monkeypatch.setattr(checkpoint, "write_atomic", counting)
    return written


@pytest.mark.parametrize(
    ("kind", "prepare_writes", "unprepare_writes"),
    [
        # recorded, completed | unprepare started
        ("gpu", 2, 1),
        # recorded, MIG marked as the plugin's (created-migs.json), MIG recorded, completed |
        # started, MIG destroyed (the mark file, empty then, is removed: no write)
        ("mig", 4, 2),
        # recorded, hold, completed | started (the ledger lives in the records)
        ("mps", 3, 1),
        # recorded, 2 holds, completed | started
        ("timeslicing", 4, 1),
    ],
)
def test_checkpoint_writes_per_claim(
    node_factory: Any, writes: list[str], kind: str, prepare_writes: int, unprepare_writes: int
) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    writes.clear()  # start-up's (the discovered GPUs), not the claim's
    if kind == "mig":
        node.allocate(UID, mig_allocation(UID, node.gpu(1), "1g.5gb", 0, 1))
    else:
        sharing = {"mps": MPS, "timeslicing": TIME_SLICING}.get(kind)
        node.allocate(UID, gpu_allocation(UID, node.gpu(0), sharing=sharing))
    node.state.prepare(ref(UID))
    assert len(writes) == prepare_writes, writes
    writes.clear()
    node.state.unprepare(ref(UID))
    assert len(writes) == unprepare_writes, writes


def test_prepare_reads_only_its_own_nas_entry(node_factory: Any) -> None:
    node = node_factory("T4")
    node.allocate(UID, gpu_allocation(UID, node.gpu(0)))
    node.allocate("broken", {"claimInfo": {"uid": "broken"}, "gpu": {"devices": "no"}})
    assert node.state.prepare(ref(UID)) == [f"k8s.gpu.drasat.io/claim={UID}"]
    assert set(node.store.obj["spec"]["preparedClaims"]) == {UID}
    with pytest.raises(ClaimError, match=r"spec\.allocatedClaims\.broken.*gpu\.devices"):
        node.state.prepare(ClaimRef("broken"))
    node.state.unprepare(ref(UID))
    assert node.store.obj["spec"]["preparedClaims"] == {}


def test_prepare_does_not_copy_the_nas(node_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    node = node_factory("8xA100-40GB,mig=all")
    node.allocate(UID, mig_allocation(UID, node.gpu(3), "1g.5gb", 2, 1))
    import copy

    copies: list[Any] = []
    original = copy.deepcopy
    monkeypatch.setattr(copy, "deepcopy", lambda obj, *a: copies.append(obj) or original(obj, *a))
    node.state.prepare(ref(UID))
    node.state.unprepare(ref(UID))
    assert copies == []


MPS_PREPARE_STEPS = ["recorded", "hold", "mps", "cdi", "nas"]
MPS_UNPREPARE_STEPS = ["undo-cdi", "undo-mps", "undo-hold", "undone"]


def _crash(node: Any, step: str, action: Any) -> Any:
    node.state.faults.append(Fault(step, Killed()))
    with pytest.raises(Killed):
        action()
    return node.restart()


def _nothing_left(node: Any) -> None:
    assert node.daemons() == {}
    assert node.state.mps.names() == []
    assert node.sim.gpus[0].compute_mode == 0  # NVML_COMPUTEMODE_DEFAULT
    assert node.state.checkpoint.data.settings == {}
    assert node.state.cdi.claim_uids() == []
    assert node.state.checkpoint.get(UID) is None
    assert UID not in node.store.obj["spec"]["preparedClaims"]


@pytest.mark.parametrize("step", MPS_PREPARE_STEPS)
@pytest.mark.parametrize("reconcile", [False, True], ids=["next-call", "start-up"])
def test_killed_during_mps_prepare(node_factory: Any, step: str, reconcile: bool) -> None:
    node = node_factory("T4")
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), sharing=MPS))
    restarted = _crash(node, step, lambda: node.state.prepare(ref(UID)))
    if reconcile:
        restarted.state.reconcile()
        _nothing_left(restarted)
    assert restarted.state.prepare(ref(UID)) == [f"k8s.gpu.drasat.io/claim={UID}"]
    assert list(restarted.daemons().values()) == [(node.gpu(0),)]
    assert restarted.lib.settings(node.gpu(0)).compute_mode is ComputeMode.ExclusiveProcess
    restarted.state.unprepare(ref(UID))
    _nothing_left(restarted)


@pytest.mark.parametrize("step", MPS_UNPREPARE_STEPS)
@pytest.mark.parametrize("reconcile", [False, True], ids=["next-call", "start-up"])
def test_killed_during_mps_unprepare(node_factory: Any, step: str, reconcile: bool) -> None:
    node = node_factory("T4")
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), sharing=MPS))
    node.state.prepare(ref(UID))
    restarted = _crash(node, step, lambda: node.state.unprepare(ref(UID)))
    if reconcile:
        restarted.state.reconcile()
    else:
        restarted.state.unprepare(ref(UID))
    _nothing_left(restarted)


@pytest.mark.parametrize("step", ["undo-cdi", "undo-mig"])
def test_killed_during_mig_unprepare_then_another_claim_takes_the_place(
    node_factory: Any, step: str
) -> None:
    """The MIG undo is saved at once: another claim's instance at the same place is not taken
    for the unprepared claim's."""
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "1g.5gb", 3, 1))
    node.state.prepare(ref(UID))
    restarted = _crash(node, step, lambda: node.state.unprepare(ref(UID)))
    restarted.state.unprepare(ref(UID))
    other = "c0ffee00-0000-4000-8000-000000000003"
    restarted.allocate(other, mig_allocation(other, node.gpu(1), "1g.5gb", 3, 1))
    restarted.state.prepare(ref(other))
    restarted.state.unprepare(ref(UID))  # the kubelet may repeat it
    assert gpu_instances(restarted, 1) == [(3, 1)]


def test_settings_ledger_is_rebuilt_from_the_records(node_factory: Any) -> None:
    node = node_factory("T4")
    first, second = UID, "c0ffee00-0000-4000-8000-000000000004"
    for uid in (first, second):
        node.allocate(uid, gpu_allocation(uid, node.gpu(0), sharing=TIME_SLICING))
        node.state.prepare(ref(uid))
    assert not node.state.checkpoint.settings_path.exists()  # no ledger file of its own
    restarted = node.restart()
    holds = restarted.state.checkpoint.data.settings[node.gpu(0)]
    assert sorted(holds["timeSlice"].holders) == sorted([first, second])
    assert (holds["timeSlice"].baseline, holds["timeSlice"].value) == ("Default", "Long")
    restarted.state.unprepare(ref(first))
    assert node.sim.gpus[0].time_slice == 3  # still held by the second claim
    restarted.restart().state.unprepare(ref(second))
    assert node.sim.gpus[0].time_slice == 0  # the baseline is back


def test_an_earlier_versions_settings_file_is_folded_into_the_records(node_factory: Any) -> None:
    node = node_factory("T4")
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), sharing=TIME_SLICING))
    node.state.prepare(ref(UID))
    store = node.state.checkpoint
    record = store.get(UID)
    assert record is not None
    for step in record.applied:
        step.value = None  # as an earlier version wrote holds
    store.put(record)
    legacy = {
        gpu: {name: hold.model_dump(mode="json") for name, hold in holds.items()}
        for gpu, holds in store.data.settings.items()
    }
    store._write(store.settings_path, legacy)
    restarted = node.restart()
    assert not store.settings_path.exists()
    assert restarted.state.checkpoint.data.settings == store.data.settings
    restarted.state.unprepare(ref(UID))
    assert node.sim.gpus[0].time_slice == 0


def test_claim_locks_do_not_outlive_their_calls(node_factory: Any) -> None:
    """A long-running plugin sees a new claim uid for every pod: the per-claim lock table must
    hold only the claims being worked on, not every uid ever seen."""
    node = node_factory("2xA100-40GB,mig=1")
    for n in range(5):
        uid = f"c0ffee00-0000-4000-8000-00000000010{n}"
        node.allocate(uid, gpu_allocation(uid, node.gpu(0)))
        node.state.prepare(ref(uid))
        node.state.unprepare(ref(uid))
    assert node.state._claim_locks == {}
