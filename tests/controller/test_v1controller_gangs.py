"""Gangs in the v1 controller (issue 27 item 2), on the in-process API server: a gang's pods
are allocated all-or-nothing in one cycle, and drasat's gate is lifted from all of them only
then; a gang with fewer pods than its size holds no device; the policy's topology key keeps it
within one value of a node label; a bad size label is said, never a traceback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import ctl_slices
import pytest
from ctl_cluster import NS, add_node, t4

from drasat.api.devicemodel import classes
from drasat.api.groups import GANG_LABEL, GANG_SIZE_LABEL, SCHEDULING_GATE
from drasat.api.policy import AllocationPolicySpec, Gangs
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, configuration_for
from drasat.testbed.sim import apiserver

Obj = dict[str, Any]


@pytest.fixture
def api() -> Iterator[KubeClient]:
    from drasat.api import crds

    with apiserver.ApiServer.running(crds=crds.all_crds()) as running:
        client = KubeClient(configuration_for(running.url), request_timeout=10)
        for body in classes.device_classes():
            client.create(r.DEVICE_CLASSES_V1, body)
        yield client
        client.close()


@pytest.fixture
def controller(api: KubeClient) -> Iterator[Callable[..., V1Controller]]:
    made: list[V1Controller] = []

    def make(policy: AllocationPolicySpec | None = None) -> V1Controller:
        spec = policy or AllocationPolicySpec()
        found = V1Controller(api, V1Config(namespace=NS, batch_window_s=0), policy=lambda: spec)
        found.start(sync_timeout_s=10, cycles=False)
        made.append(found)
        return found

    yield make
    for found in made:
        found.stop()


def _node(api: KubeClient, name: str, gpus: int, **labels: str) -> None:
    api.create(
        r.NODES,
        {
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
        },
    )
    devices = [t4(i) for i in range(gpus)]
    add_node(api, name, devices)
    ctl_slices.publish(api, name, devices)


def _member(api: KubeClient, name: str, gang: str, size: str, gpus: int = 1) -> None:
    api.create(
        r.RESOURCE_CLAIMS_V1,
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": "gpu.drasat.io", "count": gpus},
                        }
                    ]
                }
            },
        },
        namespace="default",
    )
    api.create(
        r.PODS,
        {
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": {GANG_LABEL: gang, GANG_SIZE_LABEL: size},
            },
            "spec": {
                "containers": [{"name": "c", "image": "x"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                "schedulingGates": [{"name": SCHEDULING_GATE}],
            },
        },
        namespace="default",
    )


def _node_of(api: KubeClient, claim: str) -> str | None:
    status = api.get(r.RESOURCE_CLAIMS_V1, claim, namespace="default").get("status") or {}
    allocation = status.get("allocation")
    if not allocation:
        return None
    return str(allocation["devices"]["results"][0]["pool"])


def _gated(api: KubeClient, pod: str) -> bool:
    spec = api.get(r.PODS, pod, namespace="default").get("spec") or {}
    return any(g["name"] == SCHEDULING_GATE for g in spec.get("schedulingGates") or [])


def _events(api: KubeClient, pod: str) -> dict[str, str]:
    found = api.list(r.EVENTS, namespace="default").items
    mine = [
        e
        for e in found
        if e["involvedObject"] == {**e["involvedObject"], "kind": "Pod", "name": pod}
    ]
    return {e["reason"]: e["message"] for e in mine}


def _cycles(ctl: V1Controller, n: int = 3) -> None:
    import time

    for _ in range(n):
        ctl.cycle()
        time.sleep(0.1)


def test_a_gang_waits_for_all_its_pods_then_goes_whole_and_lets_go_together(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    _node(api, "n1", 2)
    _node(api, "n2", 2)
    _member(api, "w0", "train", "3")
    _member(api, "w1", "train", "3")
    ctl = controller()
    _cycles(ctl)
    assert [_node_of(api, c) for c in ("w0", "w1")] == [None, None]  # 2 of 3: nothing held
    assert _gated(api, "w0") and _gated(api, "w1")
    assert _events(api, "w0")["GangIncomplete"] == (
        "gang default/train has 2 of its 3 pods: none of them is allocated before all exist"
    )
    _member(api, "w2", "train", "3")
    _cycles(ctl)
    assert all(_node_of(api, c) for c in ("w0", "w1", "w2"))
    assert not any(_gated(api, p) for p in ("w0", "w1", "w2"))
    assert _events(api, "w2")["GangAllocated"].startswith(
        "gang default/train: all 3 pods allocated together (w0 on n"
    )


def test_a_gang_past_its_minimum_places_its_first_pods_together_and_the_rest_one_by_one(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    """gang-size is the gang's minimum: three pods of a gang of at least 2 on two GPUs — the
    first two go together (as kube-scheduler admits a group once minCount fit), the third waits
    for a GPU of its own, and the two run meanwhile."""
    _node(api, "n1", 2)
    for i in range(3):
        _member(api, f"w{i}", "two", "2")
    ctl = controller()
    _cycles(ctl)
    assert [_node_of(api, f"w{i}") for i in range(3)] == ["n1", "n1", None]
    assert not _gated(api, "w0") and not _gated(api, "w1") and _gated(api, "w2")
    assert _events(api, "w0")["GangAllocated"].startswith("gang default/two: all 2 pods")
    api.delete(r.PODS, "w0", namespace="default")
    api.delete(r.RESOURCE_CLAIMS_V1, "w0", namespace="default")
    _cycles(ctl)
    assert _node_of(api, "w2") == "n1" and not _gated(api, "w2")


def test_a_gang_that_half_fits_holds_no_device_and_stays_gated(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    _node(api, "n1", 2)
    for i in range(3):
        _member(api, f"w{i}", "big", "3")
    ctl = controller()
    _cycles(ctl)
    assert [_node_of(api, f"w{i}") for i in range(3)] == [None, None, None]
    assert all(_gated(api, f"w{i}") for i in range(3))
    assert _events(api, "w0")["NotAllocatable"].startswith(
        "gang default/big is placed whole or not at all: its 3 pods do not all fit together"
    )


def test_two_gangs_that_each_half_fit_end_with_one_whole(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    _node(api, "n1", 2)
    _node(api, "n2", 2)
    for i in range(2):  # interleaved: a0, b0, a1, b1 (oldest first)
        _member(api, f"a{i}", "a", "2", gpus=2)
        _member(api, f"b{i}", "b", "2", gpus=2)
    ctl = controller()
    _cycles(ctl)
    a = [_node_of(api, f"a{i}") for i in range(2)]
    b = [_node_of(api, f"b{i}") for i in range(2)]
    assert (all(a) and b == [None, None]) or (all(b) and a == [None, None])


def test_the_policy_topology_key_keeps_a_gang_in_one_rack(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    # Each rack has 3 free GPUs: a gang of 4 x 1 GPU goes nowhere (6 free in all); a GPU more in
    # rack y and it goes there whole.
    _node(api, "x1", 2, rack="x")
    _node(api, "x2", 1, rack="x")
    _node(api, "y1", 2, rack="y")
    _node(api, "y2", 1, rack="y")
    for i in range(4):
        _member(api, f"w{i}", "train", "4")
    policy = AllocationPolicySpec(gangs=Gangs(topologyKey="rack"))
    ctl = controller(policy)
    _cycles(ctl)
    assert [_node_of(api, f"w{i}") for i in range(4)] == [None] * 4
    assert _events(api, "w0")["NotAllocatable"].startswith(
        "gang default/train is placed whole or not at all: its 4 pods do not all fit together "
        "within one value of node label rack"
    )
    _node(api, "y3", 1, rack="y")
    _cycles(ctl)
    assert sorted(str(_node_of(api, f"w{i}")) for i in range(4)) == ["y1", "y1", "y2", "y3"]


def test_a_bad_size_label_is_said_and_the_pod_waits(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    _node(api, "n1", 2)
    _member(api, "w0", "train", "two")
    ctl = controller()
    _cycles(ctl)
    assert _node_of(api, "w0") is None and _gated(api, "w0")
    assert _events(api, "w0")["NotAllocatable"] == (
        f"pod default/w0: label {GANG_SIZE_LABEL}: 'two' is not a positive integer"
    )


class _Failing:
    """The API, refusing the status write of one claim `times` times (a crash between a gang's
    writes)."""

    def __init__(self, api: KubeClient, claim: str, times: int) -> None:
        self.api = api
        self.claim = claim
        self.times = times

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)

    def replace_status(self, resource: r.Resource, body: Obj) -> Obj:
        if body["metadata"]["name"] == self.claim and self.times > 0:
            self.times -= 1
            raise errors.KubeError("injected: the status write failed", status=500)
        return self.api.replace_status(resource, body)


def test_a_gang_written_in_part_keeps_every_gate_until_the_rest_is_written(
    api: KubeClient,
) -> None:
    _node(api, "n1", 2)
    _node(api, "n2", 2)
    for i in range(3):
        _member(api, f"w{i}", "train", "3")
    ctl = V1Controller(
        _Failing(api, "w1", times=2),  # type: ignore[arg-type]
        V1Config(namespace=NS, batch_window_s=0),
    )
    ctl.start(sync_timeout_s=10, cycles=False)
    try:
        # w1's write fails: w0 and w2, written beside it, give their devices back in the same
        # cycle (never a gang held in part), and no gate is lifted; the next cycle the same ...
        for _ in range(2):
            ctl.cycle()
            assert [bool(_node_of(api, f"w{i}")) for i in range(3)] == [False, False, False]
            assert all(_gated(api, f"w{i}") for i in range(3))
        # ... until w1 is written: then all three gates go.
        _cycles(ctl)
        assert all(_node_of(api, f"w{i}") for i in range(3))
        assert not any(_gated(api, f"w{i}") for i in range(3))
    finally:
        ctl.stop()


@pytest.mark.parametrize("fails", ["status", "finalizer"])
def test_a_gang_whose_write_fails_in_part_gives_back_what_was_written(fails: str) -> None:
    """Every write of one member's claim is refused (a 500); the members written beside it give
    their GPUs back in the same cycle (their gates still held: no pod used them), so the gang is
    never held in part; once the writes go, it is placed whole."""
    import time

    from ctl_kubefake import FakeApi

    api = FakeApi()
    for body in classes.device_classes():
        api.create(r.DEVICE_CLASSES_V1, body)
    for name in ("n1", "n2"):
        _node(api, name, 2)  # type: ignore[arg-type]
    for name in ("m1", "m2", "m3"):
        _member(api, name, "g", "3")  # type: ignore[arg-type]
    verb = "replace_status" if fails == "status" else "patch"
    api.fail(verb, "resourceclaims", name="m2")
    ctl = V1Controller(api, V1Config(namespace=NS, batch_window_s=0, device_taint=False))
    ctl.start(sync_timeout_s=10, cycles=False)
    try:
        tried = 0
        for _ in range(6):
            ctl.cycle()
            tried += bool(api.failures[0].hits)
            held = [m for m in ("m1", "m2", "m3") if _node_of(api, m)]  # type: ignore[arg-type]
            assert held == [], f"the gang is held in part: {held}"
            assert all(_gated(api, m) for m in ("m1", "m2", "m3"))  # type: ignore[arg-type]
            time.sleep(0.05)
        assert tried, "the failing write was never tried"
        assert ctl.metrics.deallocations._value.get() >= 2
        api.failures.clear()
        deadline = time.monotonic() + 10
        while any(_gated(api, m) for m in ("m1", "m2", "m3")):  # type: ignore[arg-type]
            assert time.monotonic() < deadline, "the gang was not placed once the writes went"
            ctl.cycle()
            time.sleep(0.05)
        assert all(_node_of(api, m) for m in ("m1", "m2", "m3"))  # type: ignore[arg-type]
    finally:
        ctl.stop()


def test_a_gang_member_allocated_before_a_crash_is_given_back_when_the_rest_cannot_be() -> None:
    """A controller crashed between a gang's writes: w0's claim is allocated (our finalizer, its
    status), its gate held, and the rest of the gang does not fit now. The gang is placed whole
    or not at all: w0's GPU is given back rather than held for a gang that cannot run."""
    import time

    from ctl_kubefake import FakeApi

    from drasat.api.groups import FINALIZER
    from drasat.v1 import results

    api = FakeApi()
    for body in classes.device_classes():
        api.create(r.DEVICE_CLASSES_V1, body)
    for name in ("n1", "n2"):
        _node(api, name, 1)  # type: ignore[arg-type]
    for i in range(3):
        _member(api, f"w{i}", "train", "3")  # type: ignore[arg-type]
    api.patch(r.RESOURCE_CLAIMS_V1, "w0", {"metadata": {"finalizers": [FINALIZER]}},
              namespace="default")  # fmt: skip
    claim = api.get(r.RESOURCE_CLAIMS_V1, "w0", namespace="default")
    claim["status"] = {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": "gpu.drasat.io", "pool": "n1",
                                 "device": "gpu-0"}]},
        "nodeSelector": results.node_selector("n1"),
        "allocationTimestamp": "2026-01-01T00:00:00Z",
    }}  # fmt: skip
    api.replace_status(r.RESOURCE_CLAIMS_V1, claim)
    ctl = V1Controller(api, V1Config(namespace=NS, batch_window_s=0, device_taint=False))
    ctl.start(sync_timeout_s=10, cycles=False)
    try:
        deadline = time.monotonic() + 10
        while _node_of(api, "w0"):  # type: ignore[arg-type]
            assert time.monotonic() < deadline, "w0 holds its GPU for a gang that cannot run"
            ctl.cycle()
            time.sleep(0.05)
        for _ in range(3):
            ctl.cycle()
            time.sleep(0.05)
        assert [_node_of(api, f"w{i}") for i in range(3)] == [None, None, None]  # type: ignore[arg-type]
        assert all(_gated(api, f"w{i}") for i in range(3))  # type: ignore[arg-type]
    finally:
        ctl.stop()
