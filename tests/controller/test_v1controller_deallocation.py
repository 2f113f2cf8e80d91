"""Deallocation as Kubernetes does it (`controller.cycle.releasing.unused`, `.deallocation`): a
claim drasat allocated that no pod uses any more gives its devices back — its allocation cleared
under optimistic concurrency, its ledger entries removed, drasat's finalizer dropped — and a
claim left on a drained node is allocated again elsewhere for its next pod. On the in-memory API
server, where no resourceclaim controller or scheduler runs: each test writes what they would
(`reservedFor`, `nodeName`, a pod's phase). The real control plane: tests/e2e/
test_e2e_v1_deallocation.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ctl_cluster import NS
from ctl_kubefake import FakeApi
from test_v1controller import _node

from drasat.api.devicemodel import classes
from drasat.api.groups import FINALIZER
from drasat.controller import v1inputs
from drasat.controller.cycle import releasing
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import resources as r

Obj = dict[str, Any]


@pytest.fixture
def api() -> FakeApi:
    found = FakeApi()
    for body in classes.device_classes():
        found.create(r.DEVICE_CLASSES_V1, body)
    return found


@pytest.fixture
def controller(api: FakeApi) -> Iterator[Callable[[], V1Controller]]:
    made: list[V1Controller] = []

    def make() -> V1Controller:
        found = V1Controller(api, V1Config(namespace=NS, batch_window_s=0, device_taint=False))
        found.start(sync_timeout_s=10, cycles=False)
        made.append(found)
        return found

    yield make
    for found in made:
        found.stop()


def _claim(api: FakeApi, name: str, *, tolerates: bool = False) -> Obj:
    exactly: Obj = {"deviceClassName": "gpu.drasat.io"}
    if tolerates:
        exactly["tolerations"] = [{"operator": "Exists"}]
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }
    return api.create(r.RESOURCE_CLAIMS_V1, body, namespace="default")


def _pod(api: FakeApi, name: str, claim: str) -> Obj:
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        },
    }
    return api.create(r.PODS, body, namespace="default")


def _get(api: FakeApi, name: str) -> Obj:
    return api.get(r.RESOURCE_CLAIMS_V1, name, namespace="default")


def _allocated(api: FakeApi, name: str) -> bool:
    return v1inputs.is_allocated(_get(api, name))


def _ledger(api: FakeApi, node: str) -> dict[str, Obj]:
    return dict((api.get(r.NAS, node, namespace=NS).get("spec") or {}).get("allocatedClaims") or {})


def _until(ctl: V1Controller, check: Callable[[], Any], timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        ctl.cycle()
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.03)


def _bind(api: FakeApi, claim: str, pod: Obj, node: str) -> Obj:
    """What kube-scheduler and the kubelet write: the pod reserved in the claim, bound to the
    node, running."""
    body = _get(api, claim)
    meta = pod["metadata"]
    refs = list((body.get("status") or {}).get("reservedFor") or [])
    refs.append({"resource": "pods", "name": meta["name"], "uid": meta["uid"]})
    body["status"] = {**body["status"], "reservedFor": refs}
    api.replace_status(r.RESOURCE_CLAIMS_V1, body)
    api.patch(r.PODS, meta["name"], {"spec": {"nodeName": node}}, namespace="default")
    return _phase(api, meta["name"], "Running")


def _phase(api: FakeApi, pod: str, phase: str) -> Obj:
    found = api.get(r.PODS, pod, namespace="default")
    found["status"] = {**(found.get("status") or {}), "phase": phase}
    return api.replace_status(r.PODS, found)


def _placed(api: FakeApi, ctl: V1Controller, claim: str, pod: str) -> Obj:
    """The claim allocated for the pod, which then binds where it is allocated and runs."""
    assert _until(ctl, lambda: _allocated(api, claim))
    node = v1inputs.allocated_node(_get(api, claim))
    assert node is not None
    return _bind(api, claim, api.get(r.PODS, pod, namespace="default"), node)


def _given_back(api: FakeApi, name: str) -> bool:
    """Deallocated as Kubernetes does: no allocation, no reservation, no finalizer of ours."""
    found = _get(api, name)
    status = found.get("status") or {}
    return (
        not status.get("allocation")
        and not status.get("reservedFor")
        and FINALIZER not in (found["metadata"].get("finalizers") or [])
    )


@pytest.mark.parametrize("how", ["finished", "failed", "deleted"])
def test_a_standalone_claim_is_given_back_when_its_last_pod_goes(
    api: FakeApi, controller: Callable[[], V1Controller], how: str
) -> None:
    """One GPU. A standalone claim shared by two pods keeps it while either runs; when the last
    one finished (or failed, or was deleted) the claim gives it back, and a waiting pod of
    another claim gets it."""
    _node(api, "n1", 1)  # type: ignore[arg-type]
    _claim(api, "shared")
    _pod(api, "a", "shared")
    ctl = controller()
    _placed(api, ctl, "shared", "a")
    _bind(api, "shared", _pod(api, "b", "shared"), "n1")
    _claim(api, "other")
    _pod(api, "waiting", "other")
    _phase(api, "a", "Succeeded")
    for _ in range(3):
        ctl.cycle()
    assert _allocated(api, "shared"), "given back while pod b still runs"
    assert not _allocated(api, "other")
    if how == "deleted":
        api.delete(r.PODS, "b", namespace="default")
    else:
        _phase(api, "b", "Succeeded" if how == "finished" else "Failed")
    assert _until(ctl, lambda: _given_back(api, "shared"))
    assert _until(ctl, lambda: _allocated(api, "other"))
    uid = _get(api, "other")["metadata"]["uid"]
    assert {e["claimInfo"]["uid"] for e in _ledger(api, "n1").values()} == {uid}


def test_a_claim_whose_pod_was_deleted_before_it_was_bound_is_given_back(
    api: FakeApi, controller: Callable[[], V1Controller]
) -> None:
    """drasat allocated the claim and let the pod go; the pod was deleted before kube-scheduler
    reserved the claim for it (no `reservedFor` ever: nothing for the resourceclaim controller
    to notice)."""
    _node(api, "n1", 1)  # type: ignore[arg-type]
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    ctl = controller()
    assert _until(ctl, lambda: _allocated(api, "c1"))
    api.delete(r.PODS, "p1", namespace="default")
    assert _until(ctl, lambda: _given_back(api, "c1"))
    assert _until(ctl, lambda: not _ledger(api, "n1"))


def test_a_claim_allocated_for_a_pod_not_bound_yet_is_kept(
    api: FakeApi, controller: Callable[[], V1Controller]
) -> None:
    """Between drasat's write and kube-scheduler's reservation the claim has no consumer: the
    pod naming it, pending, still uses it."""
    _node(api, "n1", 1)  # type: ignore[arg-type]
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    ctl = controller()
    assert _until(ctl, lambda: _allocated(api, "c1"))
    for _ in range(5):
        ctl.cycle()
        time.sleep(0.02)
    assert _allocated(api, "c1")
    assert ctl.metrics.deallocations._value.get() == 0


def test_a_claim_kube_scheduler_allocated_is_left_to_the_resourceclaim_controller(
    api: FakeApi, controller: Callable[[], V1Controller]
) -> None:
    """A claim that tolerates the allocator taint is kube-scheduler's: with no pod, drasat
    leaves its allocation alone (the resourceclaim controller deallocates it when its
    reservations empty)."""
    _node(api, "n1", 1)  # type: ignore[arg-type]
    _claim(api, "theirs", tolerates=True)
    body = _get(api, "theirs")
    body["status"] = {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": "gpu.drasat.io", "pool": "n1",
                                 "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]},
    }}  # fmt: skip
    api.replace_status(r.RESOURCE_CLAIMS_V1, body)
    ctl = controller()
    for _ in range(3):
        ctl.cycle()
        time.sleep(0.02)
    assert _allocated(api, "theirs")


def test_a_drained_nodes_claim_is_allocated_elsewhere_for_its_next_pod(
    api: FakeApi, controller: Callable[[], V1Controller]
) -> None:
    """n1 is cordoned and the claim's pod evicted; the Deployment's next pod names the claim
    before the old one is gone. Once it is, the claim (pinned to n1, where the new pod may not
    go) is deallocated, and allocated again on n2 for the new pod."""
    _node(api, "n1", 1)  # type: ignore[arg-type]
    _claim(api, "cache")
    _pod(api, "old", "cache")
    ctl = controller()
    _placed(api, ctl, "cache", "old")
    assert v1inputs.allocated_node(_get(api, "cache")) == "n1"
    _node(api, "n2", 1)  # type: ignore[arg-type]
    api.patch(r.NODES, "n1", {"spec": {"unschedulable": True}})
    # Evicted: terminating on n1 (the kubelet has not confirmed yet; a finalizer stands in).
    api.patch(r.PODS, "old", {"metadata": {"finalizers": ["example.com/kubelet"]}},
              namespace="default")  # fmt: skip
    api.delete(r.PODS, "old", namespace="default")
    _pod(api, "new", "cache")
    for _ in range(3):
        ctl.cycle()
    assert v1inputs.allocated_node(_get(api, "cache")) == "n1", "taken from a running pod"
    api.patch(r.PODS, "old", {"metadata": {"finalizers": None}}, namespace="default")
    assert _until(ctl, lambda: v1inputs.allocated_node(_get(api, "cache")) == "n2")
    assert not _ledger(api, "n1")


def test_a_restarted_controller_gives_back_what_was_left_while_it_was_down(
    api: FakeApi, controller: Callable[[], V1Controller]
) -> None:
    """The controller is down while the claim's last pod finishes and the resourceclaim
    controller clears its reservation (no deallocation: the claim lacks upstream's finalizer).
    The next controller finds the claim unused from the state alone."""
    _node(api, "n1", 1)  # type: ignore[arg-type]
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    ctl = controller()
    _placed(api, ctl, "c1", "p1")
    ctl.stop()
    _phase(api, "p1", "Succeeded")
    body = _get(api, "c1")
    body["status"] = {k: v for k, v in body["status"].items() if k != "reservedFor"}
    api.replace_status(r.RESOURCE_CLAIMS_V1, body)
    restarted = controller()
    assert _until(restarted, lambda: _given_back(api, "c1") and not _ledger(api, "n1"))


def test_a_reservation_made_after_the_decision_keeps_the_claim(
    api: FakeApi, controller: Callable[[], V1Controller]
) -> None:
    """The cycle found the claim unused from its cache; meanwhile kube-scheduler reserved it for
    a new pod. The status write (the cached resourceVersion as precondition) answers 409, the
    fresh claim has a live consumer: it keeps its allocation."""
    _node(api, "n1", 1)  # type: ignore[arg-type]
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    ctl = controller()
    _placed(api, ctl, "c1", "p1")
    _phase(api, "p1", "Succeeded")
    stale = _get(api, "c1")
    newcomer = _bind(api, "c1", _pod(api, "p2", "c1"), "n1")
    pods = {newcomer["metadata"]["uid"]: newcomer}

    def still_unused(fresh: Obj) -> bool:
        return releasing.unused(fresh, [], {}, pods, lambda ns, name: None)

    assert releasing.unused(stale, [], {}, pods, lambda ns, name: None)  # as the cache saw it
    assert not ctl.deallocator.deallocate(stale, still_unused, "test")
    assert _allocated(api, "c1")
    assert _ledger(api, "n1")


def test_a_failed_deallocation_is_that_claims_alone(
    api: FakeApi, controller: Callable[[], V1Controller]
) -> None:
    """The status write of one claim's deallocation fails (a 500): the other claim is
    deallocated in the same cycle, the first at a later one."""
    from ctl_kubefake import server_error

    _node(api, "n1", 2)  # type: ignore[arg-type]
    for name in ("c1", "c2"):
        _claim(api, name)
        _pod(api, f"p{name}", name)
    ctl = controller()
    for name in ("c1", "c2"):
        _placed(api, ctl, name, f"p{name}")
    api.fail("replace_status", "resourceclaims", server_error(), name="c1")
    for name in ("c1", "c2"):
        _phase(api, f"p{name}", "Succeeded")
    assert _until(ctl, lambda: _given_back(api, "c2"))
    assert _allocated(api, "c1")
    api.failures.clear()
    assert _until(ctl, lambda: _given_back(api, "c1"))


def test_a_claim_rewritten_under_the_deallocation_is_read_again_and_deallocated(
    api: FakeApi, controller: Callable[[], V1Controller]
) -> None:
    """While a done pod's claim stays allocated, the resourceclaim controller removes the pod
    from `reservedFor` and adds it again, over and over: the deallocation's writes meet 409s,
    and each is tried again on a fresh read within the same cycle."""
    from drasat.kube import errors

    _node(api, "n1", 1)  # type: ignore[arg-type]
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    ctl = controller()
    _placed(api, ctl, "c1", "p1")
    _phase(api, "p1", "Succeeded")
    api.fail("replace_status", "resourceclaims", errors.Conflict("rewritten", status=409),
             name="c1", times=6)  # fmt: skip
    assert _until(ctl, lambda: not _allocated(api, "c1"))
    assert api.failures[0].hits == 6
    assert ctl.metrics.faults.labels("SettleFailed")._value.get() == 0
