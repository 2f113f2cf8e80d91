"""Safe start-up and teardown: MIG devices no claim owns are reported (NAS and log) and kept
unless the policy says otherwise, and then only the plugin's own (marked in the checkpoint) are
destroyed by default-off `destroy-own`; settings' baselines are on disk before a GPU leaves them
and come back after a restart."""

from __future__ import annotations

import argparse
import time
from typing import Any

import pytest
from npfixtures import NODE, Node, gpu_allocation, gpu_instances, mig_allocation, ref

from drasat.cli import nodeplugin as cli
from drasat.nodeplugin import checkpoint
from drasat.nodeplugin.state import Fault, OrphanPolicy

UID = "c0ffee00-0000-4000-8000-0000000000a1"
LOST = "c0ffee00-0000-4000-8000-0000000000a2"
TIME_SLICING = {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}}


class Killed(BaseException):
    """Stands for SIGKILL: not an Exception, so no handler of the plugin catches it."""


def _orphans(node: Node) -> list[dict[str, Any]]:
    return [o.dump() for o in node.store.read().spec.orphanMigDevices]


def _node_with_orphans(node_factory: Any, policy: OrphanPolicy | None) -> Node:
    """GPU 1 (A100, MIG) holds: a prepared claim's 3g.20gb at 0, a 1g.5gb at 6 made by drasat
    for a claim whose record is lost, and another tenant's 1g.5gb at 5."""
    config = {} if policy is None else {"orphans": policy}
    node = node_factory("2xA100-40GB,mig=1", **config)
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "3g.20gb", 0, 4))
    node.state.prepare(ref(UID))
    node.allocate(LOST, mig_allocation(LOST, node.gpu(1), "1g.5gb", 6, 1))
    node.state.prepare(ref(LOST))
    node.state.checkpoint.drop(LOST)  # its record is gone (say, moved aside as corrupt)
    node.lib.create_mig_device(node.gpu(1), gi_profile_id=19, start=5)  # not drasat's
    return node


def test_orphans_are_reported_and_kept_by_default(node_factory: Any) -> None:
    node = _node_with_orphans(node_factory, None)
    assert node.state.orphans is OrphanPolicy.report
    report = node.restart().state.reconcile()
    assert gpu_instances(node, 1) == [(0, 4), (5, 1), (6, 1)]  # nothing destroyed
    kept = [line for line in report if line.endswith("kept (--orphan-mig=report)")]
    assert len(kept) == 2
    assert any("start 5 size 1" in line and "not made by drasat" in line for line in kept)
    assert any("start 6 size 1" in line and f"for claim {LOST}" in line for line in kept)
    orphans = sorted(_orphans(node), key=lambda o: o["placement"]["start"])
    assert [
        (o["parentUUID"], o["profile"], o["placement"], o["createdByDrasat"]) for o in orphans
    ] == [
        (node.gpu(1), "1g.5gb", {"start": 5, "size": 1}, False),
        (node.gpu(1), "1g.5gb", {"start": 6, "size": 1}, True),
    ]


def test_destroy_own_destroys_only_what_the_plugin_made(node_factory: Any) -> None:
    node = _node_with_orphans(node_factory, OrphanPolicy.destroy_own)
    restarted = node.restart()
    report = restarted.state.reconcile()
    assert gpu_instances(node, 1) == [(0, 4), (5, 1)]  # the other tenant's stays
    assert any(line.startswith("destroyed orphan") and "start 6" in line for line in report)
    assert [o["placement"]["start"] for o in _orphans(node)] == [5]
    # its mark is gone with it; the prepared claim's stays
    marks = restarted.state.checkpoint.created_migs.values()
    assert [(m.claim, m.start) for m in marks] == [(UID, 0)]


def test_destroy_all_destroys_every_orphan(node_factory: Any) -> None:
    node = _node_with_orphans(node_factory, OrphanPolicy.destroy_all)
    node.restart().state.reconcile()
    assert gpu_instances(node, 1) == [(0, 4)]
    assert _orphans(node) == []


def test_an_orphan_that_cannot_be_destroyed_is_reported_not_fatal(node_factory: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1", orphans=OrphanPolicy.destroy_all)
    orphan = node.lib.create_mig_device(node.gpu(1), gi_profile_id=19, start=1)
    node.sim.set_processes(orphan.uuid, 1)
    report = node.restart().state.reconcile()
    assert any("cannot destroy" in line and "NVML_ERROR_IN_USE" in line for line in report)
    assert [o["placement"]["start"] for o in _orphans(node)] == [1]


def test_the_report_follows_orphans_destroyed_later(node_factory: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    orphan = node.lib.create_mig_device(node.gpu(1), gi_profile_id=19, start=2)
    restarted = node.restart()
    restarted.state.reconcile()
    assert len(_orphans(node)) == 1
    node.lib.destroy_mig_device(node.gpu(1), gi_id=orphan.gi_id, ci_id=None)  # by hand
    assert restarted.state.refresh_orphans() == []
    assert _orphans(node) == []


def test_an_in_flight_prepare_is_not_reported_as_an_orphan(node_factory: Any) -> None:
    """A MIG device made by a prepare that has not recorded it yet is planned, not orphaned."""
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "1g.5gb", 3, 1))
    seen: list[list[dict[str, Any]]] = []
    original = node.state._step

    def step(name: str) -> None:
        if name == "mig-created":
            node.state.refresh_orphans()
            seen.append(_orphans(node))
        original(name)

    node.state._step = step  # type: ignore[method-assign]
    node.state.prepare(ref(UID))
    assert seen == [[]]


def test_the_plugin_marks_the_mig_devices_it_makes_until_they_are_destroyed(
    node_factory: Any,
) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "2g.10gb", 2, 2))
    path = node.state.checkpoint.migs_path
    node.state.prepare(ref(UID))
    marks = list(checkpoint.Checkpoint(node.config.state_dir).created_migs.values())  # on disk
    assert [(m.claim, m.gpu, m.start, m.profile) for m in marks] == [
        (UID, node.gpu(1), 2, "2g.10gb")
    ]
    node.state.unprepare(ref(UID))
    assert not path.exists()


def test_a_failed_create_leaves_no_mark(node_factory: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "1g.5gb", 0, 1))
    node.sim.inject_fault("nvmlDeviceCreateGpuInstanceWithPlacement", 999)
    with pytest.raises(Exception, match="cannot create MIG"):
        node.state.prepare(ref(UID))
    assert node.state.checkpoint.created_migs == {}


@pytest.mark.parametrize(
    ("flag", "policy"),
    [
        (None, OrphanPolicy.report),
        ("report", OrphanPolicy.report),
        ("destroy-own", OrphanPolicy.destroy_own),
        ("destroy-all", OrphanPolicy.destroy_all),
        ("destroy", OrphanPolicy.destroy_all),  # the earlier spelling keeps its meaning
    ],
)
def test_the_orphan_flag(flag: str | None, policy: OrphanPolicy) -> None:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    argv = ["nodeplugin", "--node-name", NODE] + ([f"--orphan-mig={flag}"] if flag else [])
    assert cli.options(parser.parse_args(argv)).config.orphans is policy


# -- baselines ------------------------------------------------------------------------------


def test_baselines_come_back_after_a_restart(node_factory: Any) -> None:
    node = node_factory("T4 x2")
    node.sim.gpus[0].compute_mode = 2  # NVML_COMPUTEMODE_PROHIBITED, set by the admin
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), sharing=TIME_SLICING))
    node.state.prepare(ref(UID))
    assert (node.sim.gpus[0].compute_mode, node.sim.gpus[0].time_slice) == (0, 3)  # Default, Long
    restarted = node.restart()  # a new process: nothing of the old one's memory
    restarted.state.reconcile()
    restarted.state.unprepare(ref(UID))
    assert (node.sim.gpus[0].compute_mode, node.sim.gpus[0].time_slice) == (2, 0)
    assert restarted.state.checkpoint.data.settings == {}


def test_a_crash_before_the_setting_is_written_leaves_the_baseline_known(
    node_factory: Any,
) -> None:
    """The hold, with its baseline, is on disk before the GPU leaves the baseline: killed at
    the hold's record (before the write), the GPU is unchanged and the restart rolls back."""
    node = node_factory("T4")
    node.sim.gpus[0].compute_mode = 2
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), share={"compute": 50}))
    node.state.faults.append(Fault("hold", Killed()))
    with pytest.raises(Killed):
        node.state.prepare(ref(UID))
    assert node.sim.gpus[0].compute_mode == 2  # not yet changed
    record = checkpoint.Checkpoint(node.config.state_dir).get(UID)
    assert record is not None
    assert [(s.kind, s.baseline) for s in record.applied] == [("hold", "Prohibited")]
    restarted = node.restart()
    assert restarted.state.reconcile() == [f"rolled back interrupted prepare of {UID}"]
    assert node.sim.gpus[0].compute_mode == 2


def test_a_crash_after_the_setting_is_written_restores_it_at_start(node_factory: Any) -> None:
    node = node_factory("T4")
    node.sim.gpus[0].compute_mode = 2
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), share={"compute": 50}))
    node.state.faults.append(Fault("mps", Killed()))  # after the hold and the daemon
    with pytest.raises(Killed):
        node.state.prepare(ref(UID))
    assert node.sim.gpus[0].compute_mode == 3  # EXCLUSIVE_PROCESS
    node.restart().state.reconcile()
    assert node.sim.gpus[0].compute_mode == 2


def test_a_corrupt_mark_file_is_moved_aside_and_nothing_counts_as_the_plugins(
    node_factory: Any,
) -> None:
    node = _node_with_orphans(node_factory, OrphanPolicy.destroy_own)
    path = node.state.checkpoint.migs_path
    path.write_text('{"checksum": "0", "data": []}')
    restarted = node.restart()
    assert path.with_suffix(".corrupt").exists()
    restarted.state.reconcile()
    # without its marks the plugin cannot tell its own orphan from another tenant's: both stay
    assert gpu_instances(node, 1) == [(0, 4), (5, 1), (6, 1)]


def test_the_running_plugin_keeps_the_orphan_report_current(node_factory: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1", gc_interval_s=0.05)
    node.plugin.start()
    try:
        orphan = node.lib.create_mig_device(node.gpu(1), gi_profile_id=19, start=4)

        def wait_for(count: int) -> None:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and len(_orphans(node)) != count:
                time.sleep(0.05)
            assert len(_orphans(node)) == count

        wait_for(1)  # made after start-up: the loop reports it
        node.lib.destroy_mig_device(node.gpu(1), gi_id=orphan.gi_id, ci_id=None)
        wait_for(0)  # gone: its slices are free again
    finally:
        node.plugin.stop(grace_s=0)
