"""Shares count as sums in every safety net of the v1 controller: before it writes an allocation
(the claims seen since its snapshot), at the ledger write (the fresh NAS) and when it settles the
ledger with the claims' statuses (what any allocator wrote). Two 12 GiB shares on one 15 GiB T4
hold more than it has: the second is refused, or one given back, or both reported."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import test_v1controller as base
from ctl_cluster import NS
from test_v1controller import _ledger, _node, _pod, _settled, _status
from test_v1controller_trust import _event_objects, _events, _get, _seen

from drasat.api.devicemodel import shares
from drasat.controller import nasnodes, v1inputs
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import nasclient
from drasat.kube import resources as r
from drasat.kube.client import KubeClient
from drasat.solver import Problem, Solution, SolveParams
from drasat.solver import solve as real_solve
from drasat.v1 import results

Obj = dict[str, Any]
DRIVER = "gpu.drasat.io"
GiB = 2**30

# The in-process API server with drasat's DeviceClasses, and controllers stepped by hand.
server, api, controller = base.server, base.api, base.controller


def _share_claim(api: KubeClient, name: str, memory: str = "12Gi") -> Obj:
    request = {
        "name": "gpu",
        "exactly": {"deviceClassName": DRIVER, "capacity": {"requests": {"memory": memory}}},
    }
    body = {"metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [request]}}}  # fmt: skip
    return api.create(r.RESOURCE_CLAIMS_V1, body, namespace="default")


def _allocate_share_directly(
    api: KubeClient, name: str, node: str, memory: int, *, reserved: bool = False
) -> Obj:
    """What a second allocator writes: a share of gpu-0 on `node` in the claim's status, with no
    ledger entry."""
    claim = _get(api, name)
    result = {
        "request": "gpu", "driver": DRIVER, "pool": node, "device": "gpu-0",
        "consumedCapacity": {shares.MEMORY: str(memory), shares.COMPUTE: "0"},
        "shareID": f"00000000-0000-0000-0000-{len(name):012d}",
    }  # fmt: skip
    status: Obj = {
        "allocation": {
            "devices": {"results": [result]},
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


def _cycles(ctl: V1Controller, n: int = 3) -> None:
    for _ in range(n):
        ctl.cycle()
        time.sleep(0.1)


def _allocated(api: KubeClient, name: str) -> bool:
    return bool(_status(api, name).get("allocation"))


def _ledger_claims(api: KubeClient, node: str) -> set[str]:
    return {e["claimInfo"]["name"] for e in _ledger(api, node).values()}


def test_two_shares_that_fit_side_by_side_are_no_clash(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 1)
    for name in ("a", "b"):
        _share_claim(api, name, "6Gi")
        _allocate_share_directly(api, name, "n1", 6 * GiB, reserved=True)
    ctl = controller()
    _cycles(ctl)
    assert _allocated(api, "a") and _allocated(api, "b")
    assert not _events(api, "DeviceClash")


def test_shares_summing_above_the_gpu_are_repaired_by_the_one_not_reserved(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    # drasat gives "mine" 12 GiB of the T4; another allocator then writes 12 GiB of the same
    # T4 into "theirs": 24 GiB of 15. drasat's claim, not reserved yet, gives its share back.
    _node(api, "n1", 1)
    _share_claim(api, "mine")
    _pod(api, "p", "mine")
    _share_claim(api, "theirs")
    ctl = controller()
    assert _settled(ctl, lambda: _allocated(api, "mine"))
    _allocate_share_directly(api, "theirs", "n1", 12 * GiB, reserved=True)
    assert _settled(ctl, lambda: not _allocated(api, "mine"))
    _cycles(ctl)
    assert _allocated(api, "theirs")
    assert not _allocated(api, "mine")  # 3 GiB left on the T4: nothing for it on n1
    assert _ledger_claims(api, "n1") == {"theirs"}
    assert _event_objects(api, "DeviceClash") == {"mine", "theirs"}
    (text,) = {e["message"] for e in _events(api, "DeviceClash")}
    assert "memory" in text and "gave its allocation back" in text


def test_shares_summing_above_the_gpu_both_reserved_are_reported_once(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 1)
    for name in ("a", "b"):
        _share_claim(api, name)
        _allocate_share_directly(api, name, "n1", 12 * GiB, reserved=True)
    ctl = controller()
    _cycles(ctl)
    assert _allocated(api, "a") and _allocated(api, "b")
    assert _event_objects(api, "DeviceClash") == {"a", "b"}
    assert len(_events(api, "DeviceClash")) == 2  # one Event per claim, once while it lasts
    assert ctl.metrics.faults.labels("DeviceClash")._value.get() == 1


def test_a_share_seen_between_solve_and_write_is_summed_before_writing(
    api: KubeClient,
) -> None:
    """Another allocator writes a 12 GiB share of the T4 while drasat solves its own 12 GiB
    share there: drasat's write counts it and is not made."""
    _node(api, "n1", 1)
    _share_claim(api, "theirs")
    _share_claim(api, "c")
    _pod(api, "p", "c")
    ctl: V1Controller

    def racing(problem: Problem, params: SolveParams) -> Solution:
        solution = real_solve(problem, params)
        _allocate_share_directly(api, "theirs", "n1", 12 * GiB, reserved=True)
        _seen(ctl, "theirs", v1inputs.is_allocated)
        return solution

    ctl = V1Controller(api, V1Config(namespace=NS, batch_window_s=0), solve=racing)
    ctl.start(sync_timeout_s=10, cycles=False)
    try:
        ctl.cycle()
        assert not _allocated(api, "c")
        assert ctl.metrics.faults.labels("LedgerConflict")._value.get() == 1
        assert "p" in _event_objects(api, "LedgerConflict")
        assert "c" not in _ledger_claims(api, "n1")
    finally:
        ctl.stop()


def test_a_share_in_the_fresh_ledger_is_summed_at_the_ledger_write(api: KubeClient) -> None:
    """A stale replica adds a 12 GiB share of the T4 to the NAS (no status yet) while drasat
    solves its own 12 GiB share: the ledger write refuses it."""
    _node(api, "n1", 1)
    _share_claim(api, "c")
    _pod(api, "p", "c")
    uuid = next(
        g.uuid for g in nasnodes.parse(api.get(r.NAS, "n1", namespace=NS)).node.devices.gpus
    )
    entry = {
        "claimInfo": {"namespace": "default", "name": "stale", "uid": "uid-stale"},
        "gpu": {"devices": [{"uuid": uuid}]},
        "share": {"memory": "12Gi"},
    }

    def add(obj: Obj) -> Obj:
        obj["spec"].setdefault("allocatedClaims", {})["uid-stale/gpu"] = entry
        return obj

    def racing(problem: Problem, params: SolveParams) -> Solution:
        solution = real_solve(problem, params)
        nasclient.update(api, namespace=NS, node="n1", mutate=add)
        return solution

    ctl = V1Controller(api, V1Config(namespace=NS, batch_window_s=0), solve=racing)
    ctl.start(sync_timeout_s=10, cycles=False)
    try:
        ctl.cycle()
        assert not _allocated(api, "c")
        assert ctl.metrics.faults.labels("LedgerConflict")._value.get() == 1
        assert _ledger_claims(api, "n1") == {"stale"}
    finally:
        ctl.stop()
