"""The v1 controller can be trusted (issue 22): one bad claim never stops a cycle, one device is
never handed to two claims, and what kube-scheduler decides is respected. Each test here failed
on the controller before the fix it names (run against that code, see the report of issue 22).

On the in-process API server, one cycle at a time; `test_v1controller_faults.py` has the
property test over random faults."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import ctl_slices
import pytest
import test_v1controller as base
from ctl_cluster import NS
from test_v1controller import _claim, _ledger, _node, _pod, _settled, _status

from drasat import v1
from drasat.controller import nasnodes, v1inputs
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import informer
from drasat.kube import resources as r
from drasat.kube.client import KubeClient
from drasat.solver import Problem, Solution, SolveParams
from drasat.solver import solve as real_solve
from drasat.v1 import results

Obj = dict[str, Any]
DRIVER = "gpu.drasat.io"

# The in-process API server with drasat's DeviceClasses, and controllers stepped by hand.
server, api, controller = base.server, base.api, base.controller


def _get(api: KubeClient, name: str) -> Obj:
    return api.get(r.RESOURCE_CLAIMS_V1, name, namespace="default")


def _allocate_directly(
    api: KubeClient, name: str, node: str, device: str, *, reserved: bool = False
) -> Obj:
    """What a second allocator (kube-scheduler, a stale replica, an admin) writes: the claim's
    status names `device` on `node`, with no ledger entry."""
    claim = _get(api, name)
    if claim.get("status"):  # an allocation is never changed, only cleared (and made again)
        claim = api.replace_status(r.RESOURCE_CLAIMS_V1, {**claim, "status": {}})
    status: Obj = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": device}]
            },
            "nodeSelector": results.node_selector(node),
            "allocationTimestamp": "2026-01-01T00:00:00Z",
        }
    }
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": f"{name}-user", "uid": f"u-{name}"}]
    claim["status"] = status
    return api.replace_status(r.RESOURCE_CLAIMS_V1, claim)


def _reserve(api: KubeClient, name: str) -> None:
    claim = _get(api, name)
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": f"u-{name}"}]
    api.replace_status(r.RESOURCE_CLAIMS_V1, claim)


def _devices(api: KubeClient, name: str) -> list[str]:
    allocation = _status(api, name).get("allocation") or {}
    return [x["device"] for x in (allocation.get("devices") or {}).get("results") or []]


def _uuid(api: KubeClient, node: str, minor: int) -> str:
    devices = nasnodes.parse(api.get(r.NAS, node, namespace=NS)).node.devices
    return next(g.uuid for g in devices.gpus if g.minor == minor)


def _ledger_uuids(api: KubeClient, node: str, claim: str) -> set[str]:
    uid = _get(api, claim)["metadata"]["uid"]
    return {
        d["uuid"]
        for e in _ledger(api, node).values()
        if e["claimInfo"]["uid"] == uid
        for d in (e.get("gpu") or {}).get("devices") or []
    }


def _events(api: KubeClient, reason: str) -> list[Obj]:
    return [e for e in api.list(r.EVENTS, namespace="default").items if e.get("reason") == reason]


def _event_objects(api: KubeClient, reason: str) -> set[str]:
    return {e["involvedObject"]["name"] for e in _events(api, reason)}


def _tolerating_claim(api: KubeClient, name: str) -> Obj:
    request = {
        "name": "gpu",
        "exactly": {"deviceClassName": DRIVER, "tolerations": [{"operator": "Exists"}]},
    }
    body = {"metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [request]}}}  # fmt: skip
    return api.create(r.RESOURCE_CLAIMS_V1, body, namespace="default")


def _seen(ctl: V1Controller, name: str, check: Callable[[Obj], bool]) -> None:
    """Wait until the controller's claim informer holds the claim as `check` wants it."""
    deadline = time.monotonic() + 10
    while not check(ctl.claims.get(f"default/{name}") or {}):
        assert time.monotonic() < deadline, f"the informer never saw {name} change"
        time.sleep(0.02)


def _cycles(ctl: V1Controller, n: int = 3) -> None:
    for _ in range(n):
        ctl.cycle()
        time.sleep(0.1)


# Defect 1: an overlap between allocated claims stopped every cycle.
def test_two_allocated_claims_on_one_device_never_stop_other_pods(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 2)
    for name in ("a", "b"):
        _claim(api, name)
        _allocate_directly(api, name, "n1", "gpu-0", reserved=True)
    _claim(api, "c")
    _pod(api, "p", "c")
    ctl = controller()
    assert _settled(ctl, lambda: _status(api, "c").get("allocation"))
    assert _devices(api, "c") == ["gpu-1"]
    # Both reserved: nothing to repair; reported on both claims, once.
    _cycles(ctl)
    assert _event_objects(api, "DeviceClash") == {"a", "b"}
    assert len(_events(api, "DeviceClash")) == 2
    assert ctl.metrics.faults.labels("DeviceClash")._value.get() == 1
    uids = {_get(api, n)["metadata"]["uid"] for n in ("a", "b", "c")}
    assert {e["claimInfo"]["uid"] for e in _ledger(api, "n1").values()} == uids


# Deliver 2: a clash is repaired by the claim not reserved yet, drasat's first.
@pytest.mark.parametrize("reserved", ["none", "drasat's"])
def test_a_clash_is_repaired_by_the_claim_not_reserved_yet(
    api: KubeClient, controller: Callable[[], V1Controller], reserved: str
) -> None:
    _node(api, "n1", 1)
    _claim(api, "mine")
    _pod(api, "p", "mine")
    _claim(api, "theirs")
    ctl = controller()
    assert _settled(ctl, lambda: _status(api, "mine").get("allocation"))
    if reserved == "drasat's":
        _reserve(api, "mine")
    _allocate_directly(api, "theirs", "n1", "gpu-0")
    giver, keeper = ("mine", "theirs") if reserved == "none" else ("theirs", "mine")
    assert _settled(ctl, lambda: not _status(api, giver).get("allocation"))
    _cycles(ctl)
    assert _devices(api, keeper) == ["gpu-0"]
    assert not _status(api, giver).get("allocation")  # nothing left for it on n1
    assert _ledger_uuids(api, "n1", keeper) == {_uuid(api, "n1", 0)}
    assert not _ledger_uuids(api, "n1", giver)
    assert _event_objects(api, "DeviceClash") == {"mine", "theirs"}
    assert "default/p" not in ctl.releaser.unsuitable  # given back by us, not by the scheduler


# A claim that tolerates the allocator taint is drasat's all the same (one allocator per
# device): left to kube-scheduler, both allocators handed the same GPUs out on the real 1.37
# control plane (tests/e2e/test_e2e_v1_races.py).
def test_a_claim_that_tolerates_the_allocator_taint_is_allocated_by_drasat(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 3)
    _tolerating_claim(api, "tol")
    _pod(api, "pt", "tol")
    ctl = controller()
    assert _settled(ctl, lambda: _status(api, "tol").get("allocation"))
    assert _devices(api, "tol") == ["gpu-0"]
    assert "gpu.drasat.io/deletion-protection" in _get(api, "tol")["metadata"]["finalizers"]
    # One kube-scheduler allocated anyway (a namespace exempted from the toleration policy, a
    # pod that reached it ungated) is counted at once, and in the ledger.
    _tolerating_claim(api, "sched")
    _allocate_directly(api, "sched", "n1", "gpu-1", reserved=True)
    _claim(api, "c")
    _pod(api, "p", "c")
    assert _settled(ctl, lambda: _status(api, "c").get("allocation"))
    assert _devices(api, "c") == ["gpu-2"]
    assert _ledger_uuids(api, "n1", "sched") == {_uuid(api, "n1", 1)}
    assert not _events(api, "DeviceClash")


def test_an_allocation_seen_between_solve_and_write_is_not_written_over(
    api: KubeClient,
) -> None:
    """kube-scheduler allocates a device while drasat solves: drasat's write checks the claims
    the informer has seen since its snapshot and leaves the device alone."""
    _node(api, "n1", 1)
    _tolerating_claim(api, "sched")
    _claim(api, "c")
    _pod(api, "p", "c")
    ctl: V1Controller

    def racing(problem: Problem, params: SolveParams) -> Solution:
        solution = real_solve(problem, params)
        _allocate_directly(api, "sched", "n1", "gpu-0", reserved=True)
        _seen(ctl, "sched", v1inputs.is_allocated)
        return solution

    ctl = V1Controller(api, V1Config(namespace=NS, batch_window_s=0), solve=racing)
    ctl.start(sync_timeout_s=10, cycles=False)
    try:
        ctl.cycle()
        assert not _status(api, "c").get("allocation")
        assert ctl.metrics.faults.labels("LedgerConflict")._value.get() == 1
        assert "p" in _event_objects(api, "LedgerConflict")
        assert not _ledger_uuids(api, "n1", "c")
    finally:
        ctl.stop()


# Defect 4: the ledger follows the devices of the claim's status, not its keys.
def test_a_ledger_entry_naming_other_devices_than_the_status_is_corrected(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 2)
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    ctl = controller()
    assert _settled(ctl, lambda: _status(api, "c1").get("allocation"))
    (first,) = _devices(api, "c1")
    other = "gpu-1" if first == "gpu-0" else "gpu-0"
    # Given back and allocated again (elsewhere on the node) between two cycles.
    _allocate_directly(api, "c1", "n1", other, reserved=True)
    _seen(ctl, "c1", lambda c: [x["device"] for x in v1inputs.our_results(c)] == [other])
    assert _settled(
        ctl, lambda: _ledger_uuids(api, "n1", "c1") == {_uuid(api, "n1", int(other[-1]))}
    )
    _claim(api, "c2")
    _pod(api, "p2", "c2")
    assert _settled(ctl, lambda: _status(api, "c2").get("allocation"))
    assert _devices(api, "c2") == [first]
    assert ctl.metrics.repairs.labels("nas-corrected")._value.get() == 1


def _snapshot(pods: list[Obj], claims: list[Obj], node_names: tuple[str, ...]) -> Any:
    classes = {DRIVER: {"metadata": {"name": DRIVER}, "spec": {"selectors": [
        {"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}}  # fmt: skip
    nas = {
        n: nasnodes.parse({"metadata": {"name": n}, "spec": {}, "status": "Ready"})
        for n in node_names
    }
    node_objs = {n: {"metadata": {"name": n, "labels": {"zone": n}}} for n in node_names}
    return v1inputs.Snapshot(
        pods=pods,
        claims={f"default/{c['metadata']['name']}": c for c in claims},
        classes=classes,
        nodes=node_objs,
        nas=nas,
        published=ctl_slices.published({n: p.node.devices for n, p in nas.items()}),
    )


def _pod_obj(name: str, claims: list[str], **spec: Any) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": "t"},
        "spec": {
            "containers": [{"name": "c"}],
            "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims],
            **spec,
        },
    }


def _claim_obj(name: str, device_class: str = DRIVER, status: Obj | None = None) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": device_class}}]}},
        "status": status or {},
    }  # fmt: skip


# Defect 10: a pod with scheduling gates waits.
def test_a_pod_with_scheduling_gates_is_not_allocated() -> None:
    gated = _pod_obj("gated", ["c"], schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    snapshot = _snapshot([gated, _pod_obj("free", ["d"])], [_claim_obj("c"), _claim_obj("d")],
                         ("n1",))  # fmt: skip
    pending, waiting = v1inputs.pending_pods(snapshot)
    assert [p.input.key for p in pending] == ["default/free"]
    assert waiting["default/gated"] == "it has scheduling gates (kueue.x-k8s.io/admission)"


# Defect 11: a claim of another driver allocated on n2 pins the pod to n2.
def test_another_drivers_allocated_claim_pins_the_pod() -> None:
    net = _claim_obj(
        "net",
        "nic.example.com",
        {"allocation": {"nodeSelector": results.node_selector("n2"), "devices": {"results": [
            {"request": "nic", "driver": "nic.example.com", "pool": "n2", "device": "eth1"}]}}},
    )  # fmt: skip
    by_label = _claim_obj(
        "zoned",
        "nic.example.com",
        {"allocation": {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["n2", "n3"]}]}]}}},
    )  # fmt: skip
    pods = [_pod_obj("p", ["net", "gpu"]), _pod_obj("q", ["zoned", "gpu2"])]
    claims = [net, by_label, _claim_obj("gpu"), _claim_obj("gpu2")]
    pending, _ = v1inputs.pending_pods(_snapshot(pods, claims, ("n1", "n2", "n3")))
    by_key = {p.input.key: p for p in pending}
    assert by_key["default/p"].input.candidate_nodes == ("n2",)
    assert "default/net of the pod is allocated on n2" in by_key["default/p"].excluded["n1"]
    assert by_key["default/q"].input.candidate_nodes == ("n2", "n3")


# Defect 12: a claim whose DeviceClass was deleted is still released.
def test_a_claim_whose_device_class_was_deleted_is_released(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 1)
    _claim(api, "c1")
    pod = _pod(api, "p1", "c1")
    ctl = controller()
    assert _settled(ctl, lambda: _ledger(api, "n1"))
    assert "gpu.drasat.io/deletion-protection" in _get(api, "c1")["metadata"]["finalizers"]
    api.delete(r.PODS, pod["metadata"]["name"], namespace="default")
    api.delete(r.DEVICE_CLASSES_V1, DRIVER)
    deadline = time.monotonic() + 10
    while any(c["metadata"]["name"] == DRIVER for c in ctl.classes.items()):  # the cycle sees it
        assert time.monotonic() < deadline
        time.sleep(0.02)
    api.delete(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")

    def gone() -> bool:
        return not any(c["metadata"]["name"] == "c1" for c in ctl.claims.items()) and not (
            _ledger(api, "n1")
        )

    assert _settled(ctl, gone)


# Smaller list: a cycle that lost the lease stops writing.
def test_a_cycle_that_loses_the_lease_mid_way_writes_nothing_more(api: KubeClient) -> None:
    _node(api, "n1", 1)
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    leading = [True]

    def solve_then_lose(problem: Problem, params: SolveParams) -> Solution:
        leading[0] = False  # the lease is lost while the cycle solves
        return real_solve(problem, params)

    ctl = V1Controller(
        api, V1Config(namespace=NS, batch_window_s=0), solve=solve_then_lose,
        may_write=lambda: leading[0],
    )  # fmt: skip
    ctl.start(sync_timeout_s=10, cycles=False)
    try:
        assert ctl.cycle() is False
        assert not _status(api, "c1").get("allocation")
        assert not _get(api, "c1")["metadata"].get("finalizers")
        assert not _ledger(api, "n1")
    finally:
        ctl.stop()


# Smaller list: no cycle before every informer synced (an empty claim cache emptied the ledger).
def test_no_cycle_runs_before_every_informer_synced(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 1)
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    first = controller()
    assert _settled(first, lambda: _ledger(api, "n1"))
    first.stop()
    written = _ledger(api, "n1")
    late = V1Controller(api, V1Config(namespace=NS, batch_window_s=0))
    started = [inf for inf in late._informers if inf is not late.claims]
    try:
        for inf in started:
            inf.start()
        assert all(inf.wait_synced(10) for inf in started)
        assert not late.ready
        late.cycle()
        assert _ledger(api, "n1") == written
    finally:
        late.stop()


# Deliver 1: an exception out of the allocator is confined to the pod that causes it.
def test_an_allocator_exception_is_confined_to_its_pod(api: KubeClient) -> None:
    _node(api, "n1", 2)
    for name in ("good", "bad"):
        _claim(api, name)
        _pod(api, f"p-{name}", name)

    def fragile(problem: Problem, params: SolveParams) -> Solution:
        if any(p.key == "default/p-bad" for p in problem.pods):
            raise TypeError("unhashable type: 'GpuInfo'")
        return real_solve(problem, params)

    ctl = V1Controller(api, V1Config(namespace=NS, batch_window_s=0), solve=fragile)
    ctl.start(sync_timeout_s=10, cycles=False)
    try:
        assert _settled(ctl, lambda: _status(api, "good").get("allocation"))
        assert not _status(api, "bad").get("allocation")
        assert "unhashable type" in ctl.explanations["default/p-bad"]
        assert "p-bad" in _event_objects(api, "NotAllocatable")
        assert ctl.metrics.faults.labels("AllocatorError")._value.get() >= 1
    finally:
        ctl.stop()


def test_whatever_the_allocator_raises_the_other_pods_are_placed(
    api: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`drasat.v1.allocate` itself raising (a translation bug, say): the controller places the
    pods one at a time and refuses the one whose call raises."""
    _node(api, "n1", 3)
    for name in ("a", "bad", "c"):
        _claim(api, name)
        _pod(api, f"p-{name}", name)
    allocate = v1.allocate

    def fragile(nodes: Any, pods: Any, *args: Any, **kwargs: Any) -> v1.Outcome:
        if any(p.key == "default/p-bad" for p in pods):
            raise KeyError("uuid")
        return allocate(nodes, pods, *args, **kwargs)

    monkeypatch.setattr(v1, "allocate", fragile)
    ctl = V1Controller(api, V1Config(namespace=NS, batch_window_s=0))
    ctl.start(sync_timeout_s=10, cycles=False)
    try:
        ctl.cycle()
        assert sorted(d for n in ("a", "c") for d in _devices(api, n)) == ["gpu-0", "gpu-1"]
        assert not _status(api, "bad").get("allocation")
        assert (
            ctl.explanations["default/p-bad"]
            == "the allocator failed on this pod: KeyError: 'uuid'"
        )
        assert "p-bad" in _event_objects(api, "NotAllocatable")
        assert ctl.metrics.faults.labels("AllocatorError")._value.get() == 1
    finally:
        ctl.stop()


def test_claim_ownership_by_finalizer_status_or_class() -> None:
    classes = {DRIVER: {}}
    tolerant = _claim_obj("t")
    tolerant["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": "gpu.drasat.io/allocator", "operator": "Equal", "value": "drasat"}
    ]
    other_taint = _claim_obj("o")
    other_taint["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": "example.com/other", "operator": "Exists"}
    ]
    assert v1inputs.allocates(tolerant, classes)
    assert v1inputs.allocates(other_taint, classes)
    assert v1inputs.allocates(_claim_obj("c"), classes)
    orphan = _claim_obj("x", "deleted.class")
    assert not v1inputs.settles(orphan, classes)
    orphan["metadata"]["finalizers"] = ["gpu.drasat.io/deletion-protection"]
    assert v1inputs.settles(orphan, classes)
    by_status = _claim_obj("s", "deleted.class", {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}}})  # fmt: skip
    assert v1inputs.settles(by_status, classes)
    # A shape the API server's schema refuses is not ours, and never raises.
    junk = {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": "one GPU"}, 7]}}}
    assert not v1inputs.is_ours(junk, classes) and not v1inputs.tolerates_allocator_taint(junk)
    assert informer.key_of(by_status) == "default/s"


def test_claim_statuses_are_read_once_while_neither_side_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    read = results.ledger_from_status

    def counted(claim: Obj, nas: Any) -> Any:
        calls.append(claim["metadata"]["name"])
        return read(claim, nas)

    monkeypatch.setattr(results, "ledger_from_status", counted)
    status = {"allocation": {"nodeSelector": results.node_selector("n1"), "devices": {"results": [
        {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}}}  # fmt: skip
    claim = _claim_obj("c", status=status)
    claim["metadata"]["resourceVersion"] = "1"
    nas = {"metadata": {"name": "n1", "resourceVersion": "5"}, "spec": {}, "status": "Ready"}
    snapshot = _snapshot([], [claim], ())
    snapshot.nas = {"n1": nasnodes.parse(nas)}
    memo = v1inputs.StatusLedgers()
    for _ in range(3):  # three cycles, nothing changed: read once
        v1inputs.status_entries(snapshot, memo)
        v1inputs.ledger_of(claim, snapshot, memo)
        memo.rotate()
    assert calls == ["c"]
    nas["metadata"]["resourceVersion"] = "6"  # the node's NAS changed: read again
    snapshot.nas = {"n1": nasnodes.parse(nas)}
    v1inputs.ledger_of(claim, snapshot, memo)
    claim["metadata"]["resourceVersion"] = "2"  # the claim changed: read again
    v1inputs.ledger_of(claim, snapshot, memo)
    assert calls == ["c", "c", "c"]
