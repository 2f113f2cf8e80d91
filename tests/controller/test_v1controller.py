"""The v1 controller's cycle, step by step, on the in-process API server (which serves the v1
kinds): placement and what is written, the ledger settled with claim status (a claim given back,
a lost NAS, a deleted claim), refusals as events, the DeviceTaintRule."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import ctl_slices
import pytest
from ctl_cluster import NS, add_node, t4

from drasat.api.devicemodel import classes
from drasat.controller.taintrule import TAINT_RULE
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, configuration_for
from drasat.testbed.sim import apiserver

Obj = dict[str, Any]


@pytest.fixture
def server() -> Iterator[apiserver.ApiServer]:
    from drasat.api import crds

    with apiserver.ApiServer.running(crds=crds.all_crds()) as running:
        yield running


@pytest.fixture
def api(server: apiserver.ApiServer) -> Iterator[KubeClient]:
    client = KubeClient(configuration_for(server.url), request_timeout=10)
    for body in classes.device_classes():
        client.create(r.DEVICE_CLASSES_V1, body)
    yield client
    client.close()


@pytest.fixture
def controller(api: KubeClient) -> Iterator[Callable[[], V1Controller]]:
    made: list[V1Controller] = []

    def make() -> V1Controller:
        found = V1Controller(api, V1Config(namespace=NS, batch_window_s=0, unsuitable_ttl_s=60))
        found.start(sync_timeout_s=10, cycles=False)
        made.append(found)
        return found

    yield make
    for found in made:
        found.stop()


def _node(api: KubeClient, name: str, gpus: int) -> None:
    api.create(
        r.NODES,
        {
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
        },
    )
    devices = [t4(i) for i in range(gpus)]
    add_node(api, name, devices)
    ctl_slices.publish(api, name, devices)


def _claim(api: KubeClient, name: str) -> Obj:
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.drasat.io"}}]
            }
        },
    }
    return api.create(r.RESOURCE_CLAIMS_V1, body, namespace="default")


def _pod(api: KubeClient, name: str, claim: str, priority: int | None = None) -> Obj:
    body: Obj = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        },
    }
    if priority is not None:
        body["spec"]["priority"] = priority
    return api.create(r.PODS, body, namespace="default")


def _settled(controller: V1Controller, check: Callable[[], Any], timeout: float = 10) -> Any:
    """Run cycles until `check()` holds (the informers catch up between them)."""
    deadline = time.monotonic() + timeout
    while True:
        controller.cycle()
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _ledger(api: KubeClient, node: str) -> dict[str, Obj]:
    spec = api.get(r.NAS, node, namespace=NS).get("spec") or {}
    return dict(spec.get("allocatedClaims") or {})


def _status(api: KubeClient, name: str) -> Obj:
    return api.get(r.RESOURCE_CLAIMS_V1, name, namespace="default").get("status") or {}


def test_places_claims_and_writes_ledger_status_and_taint_rule(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 2)
    for i in (1, 2):
        _claim(api, f"c{i}")
        _pod(api, f"p{i}", f"c{i}")
    ctl = controller()
    assert api.get(r.DEVICE_TAINT_RULES_V1, TAINT_RULE)["spec"]["taint"]["effect"] == "NoSchedule"
    assert _settled(ctl, lambda: all(_status(api, c).get("allocation") for c in ("c1", "c2")))
    devices = set()
    for name in ("c1", "c2"):
        allocation = _status(api, name)["allocation"]
        assert allocation["allocationTimestamp"]
        assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
            "n1"
        ]
        (result,) = allocation["devices"]["results"]
        devices.add(result["device"])
    assert devices == {"gpu-0", "gpu-1"}
    uids = {
        api.get(r.RESOURCE_CLAIMS_V1, c, namespace="default")["metadata"]["uid"]
        for c in ("c1", "c2")
    }
    assert {e["claimInfo"]["uid"] for e in _ledger(api, "n1").values()} == uids


def test_a_claim_given_back_leaves_the_ledger_and_its_node_for_a_while(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 1)
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    ctl = controller()
    assert _settled(ctl, lambda: _status(api, "c1").get("allocation"))
    claim = api.get(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")
    claim["status"] = {}  # what kube-scheduler's PostFilter does
    api.replace_status(r.RESOURCE_CLAIMS_V1, claim)
    assert _settled(ctl, lambda: not _ledger(api, "n1"))
    assert "default/p1" in ctl.releaser.unsuitable
    assert not _status(api, "c1").get("allocation")  # not placed on n1 again
    assert "lately" in ctl.explanations["default/p1"]


def test_a_lost_ledger_is_rebuilt_from_claim_status(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 1)
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    ctl = controller()
    assert _settled(ctl, lambda: _ledger(api, "n1"))
    written = _ledger(api, "n1")
    ctl.stop()
    nas = api.get(r.NAS, "n1", namespace=NS)
    nas["spec"]["allocatedClaims"] = {}
    api.replace(r.NAS, nas)
    restarted = controller()
    assert _settled(restarted, lambda: _ledger(api, "n1"))
    # The same devices; how they are shared lives in the claim's configs, not in its status.
    assert _devices_of(_ledger(api, "n1")) == _devices_of(written)


def _devices_of(ledger: dict[str, Obj]) -> dict[str, Obj]:
    return {k: {**e, "gpu": {"devices": e["gpu"]["devices"]}} for k, e in ledger.items()}


def test_a_deleted_claim_leaves_the_ledger_and_loses_the_finalizer(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 1)
    _claim(api, "c1")
    pod = _pod(api, "p1", "c1")
    ctl = controller()
    assert _settled(ctl, lambda: _ledger(api, "n1"))
    api.delete(r.PODS, pod["metadata"]["name"], namespace="default")
    api.delete(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")

    def gone() -> bool:
        try:
            api.get(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")
        except Exception:
            return not _ledger(api, "n1")
        return False

    assert _settled(ctl, gone)


def test_a_released_claim_whose_finalizer_stays_is_not_written_back_to_the_ledger(
    api: KubeClient, controller: Callable[[], V1Controller], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deleted claim no pod holds leaves the ledger, then loses our finalizer; when that
    patch fails (the resourceclaim controller wrote the claim meanwhile: 409), the claim is still
    there, being deleted, its status still allocated. The next settle must not write its
    entries back as a lost write ("restored from its status") only to remove them again: under
    churn those writes, one per claim in a row, held the freed devices and stalled the cycles
    for seconds."""
    from drasat.controller.cycle import deallocation, ledger

    restored: list[str] = []
    replace = ledger.Ledger.replace_claim

    def recorded(self: ledger.Ledger, node: str, uid: str, entries: Any) -> None:
        restored.append(uid)
        replace(self, node, uid, entries)

    monkeypatch.setattr(ledger.Ledger, "replace_claim", recorded)
    _node(api, "n1", 1)
    _claim(api, "c1")
    pod = _pod(api, "p1", "c1")
    ctl = controller()
    assert _settled(ctl, lambda: _ledger(api, "n1"))
    drop = deallocation.Deallocator.drop_finalizer
    conflicts = [1, 1]  # the first two tries meet a change

    def contended(self: deallocation.Deallocator, claim: Obj) -> bool:
        if conflicts:
            conflicts.pop()
            return False
        return drop(self, claim)

    monkeypatch.setattr(deallocation.Deallocator, "drop_finalizer", contended)
    api.delete(r.PODS, pod["metadata"]["name"], namespace="default")
    api.delete(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")

    def gone() -> bool:
        try:
            api.get(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")
        except errors.NotFound:
            return not _ledger(api, "n1")
        return False

    assert _settled(ctl, gone)
    assert not conflicts
    assert restored == []


def test_the_ledger_removal_is_the_rule_both_controllers_share(
    api: KubeClient, controller: Callable[[], V1Controller], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One ledger-removal rule (issue 25): the v1 controller takes a claim out of the NAS with
    # drasat.kube.nasclient.without_claims, as the classic controller's remove_claims does, not a
    # copy.
    from drasat.kube import nasclient

    removed: list[set[str]] = []
    rule = nasclient.without_claims

    def recorded(obj: Obj, uids: set[str]) -> Obj | None:
        removed.append(set(uids))
        return rule(obj, uids)

    monkeypatch.setattr(nasclient, "without_claims", recorded)
    _node(api, "n1", 1)
    _claim(api, "c1")
    pod = _pod(api, "p1", "c1")
    ctl = controller()
    assert _settled(ctl, lambda: _ledger(api, "n1"))
    keys = set(_ledger(api, "n1"))
    api.delete(r.PODS, pod["metadata"]["name"], namespace="default")
    api.delete(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")
    assert _settled(ctl, lambda: not _ledger(api, "n1"))
    assert keys in removed


def _reserve(api: KubeClient, claim: str, pod: Obj) -> None:
    """What kube-scheduler's PreBind writes: the pod in the claim's `reservedFor`."""
    body = api.get(r.RESOURCE_CLAIMS_V1, claim, namespace="default")
    meta = pod["metadata"]
    ref = {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
    body["status"] = {**body["status"], "reservedFor": [ref]}
    api.replace_status(r.RESOURCE_CLAIMS_V1, body)


def test_a_departed_pods_devices_go_to_a_waiting_pod_before_its_reservation_is_cleared(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    # One GPU. p1 holds it; p1 leaves and its claim is deleted, but no resourceclaim controller
    # clears reservedFor here: drasat sees the pod gone and frees the GPU for p2 all the same,
    # in the cycle that sees the departure (as upstream's controller decides before it writes).
    _node(api, "n1", 1)
    _claim(api, "c1")
    p1 = _pod(api, "p1", "c1")
    ctl = controller()
    assert _settled(ctl, lambda: _status(api, "c1").get("allocation"))
    _reserve(api, "c1", p1)
    _claim(api, "c2")
    _pod(api, "p2", "c2")
    ctl.cycle()
    assert not _status(api, "c2").get("allocation")  # the GPU is held
    api.delete(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")
    deleting = api.get(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")
    assert deleting["metadata"].get("deletionTimestamp")  # our finalizer keeps it
    ctl.cycle()
    assert api.get(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")  # p1 still holds it
    api.delete(r.PODS, "p1", namespace="default")
    assert _settled(ctl, lambda: _status(api, "c2").get("allocation"))
    with pytest.raises(errors.NotFound):
        api.get(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")
    uid = api.get(r.RESOURCE_CLAIMS_V1, "c2", namespace="default")["metadata"]["uid"]
    assert {e["claimInfo"]["uid"] for e in _ledger(api, "n1").values()} == {uid}


def test_a_finished_pods_reservation_holds_nothing_for_a_claim_being_deleted(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 1)
    _claim(api, "c1")
    p1 = _pod(api, "p1", "c1")
    ctl = controller()
    assert _settled(ctl, lambda: _status(api, "c1").get("allocation"))
    _reserve(api, "c1", p1)
    done = api.get(r.PODS, "p1", namespace="default")
    done["status"] = {**(done.get("status") or {}), "phase": "Succeeded"}
    api.replace_status(r.PODS, done)
    api.delete(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")
    assert _settled(ctl, lambda: not _ledger(api, "n1"))


def test_a_pod_that_fits_nowhere_gets_a_warning_event(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 1)
    for i in (1, 2):
        _claim(api, f"c{i}")
        _pod(api, f"p{i}", f"c{i}")
    ctl = controller()

    def warned() -> list[str]:
        events = api.list(r.EVENTS, namespace="default").items
        return [e["message"] for e in events if e.get("reason") == "NotAllocatable"]

    found = _settled(ctl, warned)
    assert found and any("needs 1 GPU" in m or "GPU" in m for m in found), found


def test_a_higher_priority_pod_goes_before_older_pods_of_lower_priority(api: KubeClient) -> None:
    # One GPU, a cap of one pod per cycle: the high-priority pod created last gets it, as
    # kube-scheduler's queue orders by priority; the older low-priority pod waits (no victim).
    _node(api, "n1", 1)
    for name, priority in (("a-low", 0), ("b-high", 1000)):
        _claim(api, f"c-{name}")
        _pod(api, name, f"c-{name}", priority)
    ctl = V1Controller(api, V1Config(namespace=NS, batch_window_s=0, batch_max=1))
    ctl.start(sync_timeout_s=10, cycles=False)
    try:
        assert _settled(ctl, lambda: _status(api, "c-b-high").get("allocation"))
        assert not _status(api, "c-a-low").get("allocation")
        assert api.get(r.PODS, "a-low", namespace="default")
        events = api.list(r.EVENTS, namespace="default").items
        assert not [e for e in events if e.get("reason") == "Preempted"]
    finally:
        ctl.stop()


H100 = 'device.attributes["gpu.drasat.io"].productName == "H100"'


def test_pods_that_fit_nowhere_never_keep_a_new_pod_waiting(api: KubeClient) -> None:
    # A cap of 2 full of pods asking for an H100 the cluster lacks: the new pod still goes.
    _node(api, "n1", 1)
    for i in (1, 2):
        body = {
            "metadata": {"name": f"h{i}", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.drasat.io",
                "selectors": [{"cel": {"expression": H100}}],
            }}]}},
        }  # fmt: skip
        api.create(r.RESOURCE_CLAIMS_V1, body, namespace="default")
        _pod(api, f"wants-h100-{i}", f"h{i}")
    ctl = V1Controller(api, V1Config(namespace=NS, batch_window_s=0, batch_max=2))
    ctl.start(sync_timeout_s=10, cycles=False)
    try:
        assert _settled(ctl, lambda: len(ctl.allocator.refused_at) == 2)
        _claim(api, "c1")
        _pod(api, "late", "c1")
        assert _settled(ctl, lambda: _status(api, "c1").get("allocation"))
    finally:
        ctl.stop()


def test_the_batch_window_counts_from_the_first_event_not_from_the_end_of_a_cycle(
    api: KubeClient,
) -> None:
    ctl = V1Controller(api, V1Config(namespace=NS, batch_window_s=30))
    ctl.start(sync_timeout_s=10, cycles=False)
    try:
        ctl._wake.clear()
        _node(api, "n1", 1)  # an event: the window starts now
        deadline = time.monotonic() + 10
        while not ctl._wake.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert 29 < ctl.window_left() <= 30
        # The same event, seen as a long cycle ends: it has waited its window already.
        ctl._first_event -= 31
        assert ctl.window_left() == 0
        _claim(api, "c1")  # while the wake is set, a later event does not restart the window
        time.sleep(0.2)
        assert ctl.window_left() == 0
    finally:
        ctl.stop()
