"""Concurrent prepares on one GPU: a failed prepare undoes only what it made, and a claim joining a
setting never completes with a value the GPU does not have (issue 23, defects 3 and 7)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from npfixtures import gpu_allocation, gpu_instances, mig_allocation, ref

from drasat.nodeplugin.state import ClaimError

A = "a0000000-0000-4000-8000-00000000000a"
B = "b0000000-0000-4000-8000-00000000000b"


class Script:
    """Pauses claims' prepares at named steps (the state's fault hook) until another claim gets
    somewhere: `at(uid, step, signal, wait_for)` sets `signal`, then waits for `wait_for`."""

    def __init__(self, state: Any) -> None:
        self.events: dict[str, threading.Event] = {}
        self.pauses: dict[tuple[str, str], tuple[str, str]] = {}
        self.local = threading.local()
        original = state._step

        def step(name: str) -> None:
            uid = getattr(self.local, "uid", "")
            pause = self.pauses.pop((uid, name), None)
            if pause is not None:
                self.event(pause[0]).set()
                self.event(pause[1]).wait(timeout=5)
            original(name)

        state._step = step

    def event(self, name: str) -> threading.Event:
        return self.events.setdefault(name, threading.Event())

    def at(self, uid: str, step: str, signal: str, wait_for: str) -> None:
        self.pauses[(uid, step)] = (signal, wait_for)

    def run(self, uid: str, action: Any, done: str) -> tuple[threading.Thread, dict[str, Any]]:
        out: dict[str, Any] = {}

        def body() -> None:
            self.local.uid = uid
            try:
                out["ids"] = action()
            except ClaimError as error:
                out["error"] = str(error)
            finally:
                self.event(done).set()

        thread = threading.Thread(target=body, name=f"prepare-{uid[:1]}")
        thread.start()
        return thread, out


def test_a_failed_prepare_never_destroys_another_claims_mig_device(node_factory: Any) -> None:
    """Defect 3: A and B are allocated one placement (a stale NAS, a v1 kubelet racing the
    classic one). Both passed the overlap check before either made its device; A made it, B's
    create failed, and B's rollback destroyed A's new device, unrecorded yet, so A's prepare
    succeeded with a spec for a device that no longer existed."""
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(A, mig_allocation(A, node.gpu(1), "3g.20gb", 4, 4))
    node.allocate(B, mig_allocation(B, node.gpu(1), "3g.20gb", 4, 4))
    script = Script(node.state)
    # A: checked and recorded, then waits for B to get as far (or to fail); after making its
    # device, A waits until B is done before recording it.
    script.at(A, "recorded", "a-planned", "b-progress")
    script.at(A, "mig-created", "a-created", "b-done")
    script.at(B, "recorded", "b-progress", "a-created")
    a_thread, a = script.run(A, lambda: node.state.prepare(ref(A)), "a-done")
    assert script.event("a-planned").wait(5)
    b_thread, b = script.run(B, lambda: node.state.prepare(ref(B)), "b-done")
    script.event("b-done").wait(5)
    script.event("b-progress").set()
    a_thread.join(10)
    b_thread.join(10)
    assert a.get("error") is None and a["ids"]
    (step,) = [s for s in node.state.checkpoint.get(A).applied if s.kind == "mig"]
    instance = node.lib.gpu_instance(node.gpu(1), step.gi_id)
    assert instance is not None and instance.start == 4, "A's device was destroyed"
    assert "error" in b and A in b["error"], b  # refused, naming the claim preparing it
    assert gpu_instances(node, 1) == [(4, 4)]
    assert node.state.checkpoint.get(B) is None
    node.state.unprepare(ref(A))
    assert gpu_instances(node, 1) == []
    # B's placement is free again: B prepares now
    assert node.state.prepare(ref(B))
    assert gpu_instances(node, 1) == [(4, 4)]


def test_a_rollback_leaves_a_device_marked_as_another_claims(node_factory: Any) -> None:
    """The rollback of an interrupted prepare destroys a device at its planned placement only when
    the device is marked as made for this claim: another claim's is never its to destroy."""
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(A, mig_allocation(A, node.gpu(1), "1g.5gb", 0, 1))
    node.state.prepare(ref(A))
    record = node.state.checkpoint.get(A)
    assert record is not None
    # B's record says it planned the same placement (written by a plugin that crashed there)
    other = record.model_copy(deep=True)
    other.uid, other.applied = B, []
    other.status = type(record.status).PrepareStarted
    node.state.checkpoint.put(other)
    # A's device, unrecorded (as if A crashed right after making it)
    record.applied = [s for s in record.applied if s.kind != "mig"]
    node.state.checkpoint.put(record)
    report = node.restart().state.reconcile()
    assert gpu_instances(node, 1) == [(0, 1)], report  # B's rollback left A's device alone


def test_a_claim_joining_a_setting_whose_write_failed_does_not_complete_at_the_baseline(
    node_factory: Any,
) -> None:
    """Defect 7: A holds time-slice Long; its write fails; before A's rollback, B asks for Long
    too and joined A's hold without writing, so B completed with Long recorded while the GPU
    stayed at Default."""
    node = node_factory("T4")
    sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}}
    node.allocate(A, gpu_allocation(A, node.gpu(0), sharing=sharing))
    node.allocate(B, gpu_allocation(B, node.gpu(0), sharing=sharing))
    run = node.lib._run
    calls = {"n": 0}

    def failing_once(argv: Any) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            from drasat.nodeplugin.devicelib import DeviceError

            raise DeviceError("nvidia-smi: exit 1: simulated failure")
        return run(argv)

    node.lib._run = failing_once
    original = node.state._rollback
    joined: dict[str, Any] = {}

    def rollback(record: Any) -> None:
        if record.uid == A and not joined:
            try:
                joined["ids"] = node.state.prepare(ref(B))
            except ClaimError as error:
                joined["error"] = str(error)
        original(record)

    node.state._rollback = rollback
    with pytest.raises(ClaimError, match="simulated failure"):
        node.state.prepare(ref(A))
    if "ids" in joined:  # B completed: then the GPU must have what B's record says
        assert node.sim.gpus[0].time_slice == 3, "B prepared with Long while the GPU is at Default"
        assert node.state.checkpoint.data.settings[node.gpu(0)]["timeSlice"].holders == [B]
    node.state._rollback = original
    if "ids" in joined:
        node.state.unprepare(ref(B))
    assert node.sim.gpus[0].time_slice == 0
    assert node.state.checkpoint.data.settings == {}


def test_mps_pinned_memory_limits_follow_the_gpus_not_their_order(node_factory: Any) -> None:
    """Unconfirmed item: two MPS claims listing the same GPUs in another order could map
    per-device pinned-memory limits to the wrong GPUs. Each daemon's limit is set per GPU UUID,
    and a second MPS claim on GPUs that have a daemon is refused (one MPS server per GPU), so a
    limit never lands on the other GPU whatever the order."""
    node = node_factory("T4 x2")
    g0, g1 = node.gpu(0), node.gpu(1)
    limits = {g0: "1Gi", g1: "2Gi"}
    sharing = {"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": limits}}
    node.allocate(A, gpu_allocation(A, g1, g0, sharing=sharing))  # listed g1 first
    node.state.prepare(ref(A))
    ((name, _),) = node.state.mps.running().items()
    query = node.state.mps.query
    assert query(name, f"get_default_device_pinned_mem_limit {g0}") == "1024M"
    assert query(name, f"get_default_device_pinned_mem_limit {g1}") == "2048M"
    node.allocate(B, gpu_allocation(B, g0, g1, sharing=sharing))
    with pytest.raises(ClaimError, match="MPS"):
        node.state.prepare(ref(B))
    node.state.unprepare(ref(A))
