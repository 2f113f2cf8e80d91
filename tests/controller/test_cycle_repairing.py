"""Clashes whose claims are all reserved (`drasat.controller.cycle.repairing`): two tenants on
one GPU are never left so. The pods of the claim that `goes` are deleted (a uid precondition; no
PodDisruptionBudget consulted, as Kubernetes' device-taint eviction controller does for a device
that must not be used), with Events; once they are gone the claim, no longer reserved, gives its
devices back. `goes` is a pure function (the table below); the deletions run through the cycle
on the in-process API server, wrapped by `Evictions`, which records every pod deletion and
every Eviction asked (refused with a budget's 429 for a pod in `refuse`, as the API server does
where a budget allows no disruption). On the real control plane:
tests/e2e/test_e2e_v1_races.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import test_v1controller as base
from ctl_cluster import NS
from test_v1controller import _claim, _node, _pod, _settled, _status
from test_v1controller_overcommit import _allocate_share_directly, _allocated, _share_claim
from test_v1controller_trust import _devices, _event_objects, _events, _get, _seen

from drasat.controller import v1inputs
from drasat.controller.cycle import repairing
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import errors, eviction
from drasat.kube import resources as r
from drasat.kube.client import KubeClient
from drasat.v1 import results

Obj = dict[str, Any]
DRIVER = "gpu.drasat.io"
GiB = 2**30

server, api = base.server, base.api


# -- goes: which claim gives way ---------------------------------------------------------------


def _reserved(name: str, *pod_uids: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "status": {"reservedFor": [{"resource": "pods", "uid": u} for u in pod_uids]},
    }


def _user(uid: str, phase: str = "Running", started: str | None = "2026-01-01T00:00:00Z") -> Obj:
    status: Obj = {"phase": phase}
    if started:
        status["startTime"] = started
    return {"metadata": {"uid": uid}, "status": status}


LATER = "2026-01-01T00:05:00Z"


@pytest.mark.parametrize(
    ("pods", "drasats", "loser", "why"),
    [
        # Guards: a claim whose pods do not run yet goes before one whose pod runs, even
        # drasat's own (nothing has started on the GPU).
        ([_user("pa", "Pending", None), _user("pb")], {"a"}, "a", "not running yet"),
        # Guards: both running: the one drasat did not write goes (the other allocator broke
        # the rule; drasat's ledger and policy stand on its own).
        ([_user("pa"), _user("pb")], {"a"}, "b", "drasat did not allocate it"),
        ([_user("pa"), _user("pb", started=LATER)], {"b"}, "a", "drasat did not allocate it"),
        # Guards: neither (or both) drasat's: the younger goes (its pods started last).
        ([_user("pa", started=LATER), _user("pb")], set(), "a", "started last"),
        ([_user("pa"), _user("pb", started=LATER)], {"a", "b"}, "b", "started last"),
        # Guards: nothing tells them apart: by name, the same on every replica.
        ([_user("pa"), _user("pb")], set(), "b", "by name"),
    ],
)
def test_goes_picks_the_least_loss(
    pods: list[Obj], drasats: set[str], loser: str, why: str
) -> None:
    claims = [_reserved("a", "pa"), _reserved("b", "pb")]
    by_uid = {p["metadata"]["uid"]: p for p in pods}
    for order in (claims, claims[::-1]):
        found, said = repairing.goes(order, by_uid, lambda c: c["metadata"]["name"] in drasats)
        assert found["metadata"]["name"] == loser
        assert why in said


def test_goes_counts_a_shared_claims_running_pod_and_its_earliest_start() -> None:
    # "a" is shared by a pending pod and one that runs since LATER: it runs; "b" started first.
    claims = [_reserved("a", "pa1", "pa2"), _reserved("b", "pb")]
    pods = {"pa1": _user("pa1", "Pending", None), "pa2": _user("pa2", started=LATER),
            "pb": _user("pb")}  # fmt: skip
    found, said = repairing.goes(claims, pods, lambda c: False)
    assert found["metadata"]["name"] == "a" and "started last" in said


# -- the cycle deletes -----------------------------------------------------------------------------


class Evictions:
    """The in-process API server, recording what the controller stops pods with: each pod
    deletion (`deleted`: namespace/name and the uid precondition) and each Eviction (`asked`; one
    of a pod named in `refuse` answers 429, a PodDisruptionBudget, any other deletes the pod as
    the API server does once a budget allows it). Every other call goes to the server."""

    def __init__(self, api: KubeClient) -> None:
        self._api = api
        self.refuse: set[str] = set()
        self.asked: list[str] = []
        self.deleted: list[tuple[str, str | None]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def create(self, resource: r.Resource, body: Obj, *, namespace: str | None = None) -> Obj:
        if resource.kind != "Eviction":
            return self._api.create(resource, body, namespace=namespace)
        name = body["metadata"]["name"]
        self.asked.append(f"{namespace}/{name}")
        if name in self.refuse:
            raise errors.Unavailable(
                "429 TooManyRequests: Cannot evict pod as it would violate the pod's "
                "disruption budget.",
                status=429,
            )
        if (body.get("deleteOptions") or {}).get("dryRun"):
            return body  # checked, not done
        self._api.delete(r.PODS, name, namespace=namespace)
        return body

    def delete(
        self, resource: r.Resource, name: str, *, namespace: str | None = None,
        uid: str | None = None,
    ) -> None:  # fmt: skip
        if resource.plural == "pods":
            self.deleted.append((f"{namespace}/{name}", uid))
        self._api.delete(resource, name, namespace=namespace, uid=uid)


@pytest.fixture
def evictions(api: KubeClient) -> Evictions:
    return Evictions(api)


@pytest.fixture
def controller(evictions: Evictions) -> Iterator[Callable[[], V1Controller]]:
    made: list[V1Controller] = []

    def make() -> V1Controller:
        found = V1Controller(evictions, V1Config(namespace=NS, batch_window_s=0))  # type: ignore[arg-type]
        found.start(sync_timeout_s=10, cycles=False)
        made.append(found)
        return found

    yield make
    for found in made:
        found.stop()


def _run(api: KubeClient, name: str, node: str = "n1") -> Obj:
    """The pod bound to the node and running (what kube-scheduler and the kubelet write)."""
    binding = r.Resource("", "v1", f"pods/{name}/binding", "Binding")
    target = {"metadata": {"name": name}, "target": {"kind": "Node", "name": node}}
    api.create(binding, target, namespace="default")
    pod = api.get(r.PODS, name, namespace="default")
    pod["status"] = {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}
    return api.replace_status(r.PODS, pod)


def _reserve_for(api: KubeClient, claim: str, pod: Obj) -> None:
    found = _get(api, claim)
    meta = pod["metadata"]
    found["status"]["reservedFor"] = [
        {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
    ]
    api.replace_status(r.RESOURCE_CLAIMS_V1, found)


def _allocate_for(api: KubeClient, claim: str, pod: Obj, device: str = "gpu-0") -> None:
    """What a second allocator writes: the claim allocated on `device` of n1 and reserved for
    the pod, in one status write (kube-scheduler's allocation and reservation)."""
    found = _get(api, claim)
    meta = pod["metadata"]
    found["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1",
                                     "device": device}]},
            "nodeSelector": results.node_selector("n1"),
        },
        "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
    }  # fmt: skip
    api.replace_status(r.RESOURCE_CLAIMS_V1, found)


def _pod_gone(api: KubeClient, name: str) -> bool:
    try:
        api.get(r.PODS, name, namespace="default")
    except errors.NotFound:
        return True
    return False


def _two_tenants(api: KubeClient, controller: Callable[[], V1Controller]) -> V1Controller:
    """drasat's claim "mine" on gpu-0 for the running pod p; a second allocator then writes
    "theirs" onto gpu-0 for the running pod q: both reserved, two tenants on one T4."""
    _node(api, "n1", 1)
    _claim(api, "mine")
    _pod(api, "p", "mine")
    ctl = controller()
    assert _settled(ctl, lambda: _status(api, "mine").get("allocation"))
    _reserve_for(api, "mine", _run(api, "p"))
    _claim(api, "theirs")
    _pod(api, "q", "theirs")
    _allocate_for(api, "theirs", _run(api, "q"))
    return ctl


def _uid(api: KubeClient, pod: str) -> str:
    return str(api.get(r.PODS, pod, namespace="default")["metadata"]["uid"])


def test_two_reserved_claims_on_one_gpu_the_other_allocators_pods_are_deleted(
    api: KubeClient, evictions: Evictions, controller: Callable[[], V1Controller]
) -> None:
    ctl = _two_tenants(api, controller)
    q = _uid(api, "q")
    assert _settled(ctl, lambda: _pod_gone(api, "q"))
    # Deleted, that pod only (its uid a precondition), not evicted: no budget is asked.
    assert evictions.deleted == [("default/q", q)] and evictions.asked == []
    assert not _pod_gone(api, "p")
    assert _devices(api, "mine") == ["gpu-0"]
    assert _event_objects(api, "DeviceClash") == {"mine", "theirs"}
    (said,) = {e["message"] for e in _events(api, "DeviceClash")}
    assert "default/theirs gives way (drasat did not allocate it)" in said
    assert "default/q" in said
    (evicted,) = _events(api, repairing.REASON_CLASH_EVICTED)
    assert evicted["involvedObject"]["name"] == "q"
    # The resourceclaim controller drops the gone pod from reservedFor: the claim, no longer
    # reserved, gives its allocation back; drasat's keeps the GPU.
    found = _get(api, "theirs")
    found["status"]["reservedFor"] = []
    api.replace_status(r.RESOURCE_CLAIMS_V1, found)
    assert _settled(ctl, lambda: not _status(api, "theirs").get("allocation"))
    assert _devices(api, "mine") == ["gpu-0"]
    assert evictions.deleted == [("default/q", q)]  # once


def test_a_budget_that_allows_no_disruption_does_not_hold_the_repair_back(
    api: KubeClient, evictions: Evictions, controller: Callable[[], V1Controller]
) -> None:
    """A PodDisruptionBudget guarding the pod that must go would refuse its eviction for ever,
    leaving two tenants on one GPU: the pod is deleted, the budget not consulted, as Kubernetes
    deletes the pods of a device tainted NoExecute; the Event on the pod says so."""
    evictions.refuse = {"q"}
    ctl = _two_tenants(api, controller)
    assert _settled(ctl, lambda: _pod_gone(api, "q"))
    assert not _pod_gone(api, "p") and evictions.asked == []
    (deleted,) = _events(api, repairing.REASON_CLASH_EVICTED)
    assert "deleted by drasat" in deleted["message"]
    assert "PodDisruptionBudgets are not consulted" in deleted["message"]


def test_the_uid_precondition_spares_a_new_pod_of_the_same_name(api: KubeClient) -> None:
    """`eviction.delete_pod` deletes the pod it was given, not one created since under its name
    (the API server's uid precondition: 409, read as gone)."""
    _node(api, "n1", 1)
    _claim(api, "c")
    _pod(api, "p", "c")
    old = api.get(r.PODS, "p", namespace="default")
    api.delete(r.PODS, "p", namespace="default")
    _pod(api, "p", "c")
    assert eviction.delete_pod(api, old) is False
    assert _uid(api, "p") != old["metadata"]["uid"]
    assert eviction.delete_pod(api, api.get(r.PODS, "p", namespace="default")) is True
    assert _pod_gone(api, "p")
    assert eviction.delete_pod(api, old) is False  # gone: nothing to delete


def test_shares_summing_above_the_gpu_both_in_use_one_claims_pods_are_deleted(
    api: KubeClient, evictions: Evictions, controller: Callable[[], V1Controller]
) -> None:
    """Shares count as sums (`controller.overcommit`): 12 GiB and 12 GiB on a 15 GiB T4, each
    in use by a running pod, are two tenants past the GPU; the younger's pod goes."""
    _node(api, "n1", 1)
    for name, started in (("a", "2026-01-01T00:00:00Z"), ("b", "2026-01-01T00:01:00Z")):
        _share_claim(api, name)
        _pod(api, f"p-{name}", name)
        pod = _run(api, f"p-{name}")
        pod["status"]["startTime"] = started
        pod = api.replace_status(r.PODS, pod)
        _allocate_share_directly(api, name, "n1", 12 * GiB)
        _reserve_for(api, name, pod)
    ctl = controller()
    assert _settled(ctl, lambda: _pod_gone(api, "p-b"))
    assert [pod for pod, _ in evictions.deleted] == ["default/p-b"]
    assert _allocated(api, "a") and not _pod_gone(api, "p-a")
    (said,) = {e["message"] for e in _events(api, "DeviceClash")}
    assert "shares summing to" in said and "default/b gives way (its pods started last)" in said


def test_a_claim_changed_since_the_snapshot_is_not_repaired_for(
    api: KubeClient, evictions: Evictions, controller: Callable[[], V1Controller]
) -> None:
    """The clash is confirmed on the API server before a tenant is stopped: a snapshot whose
    claim changed since (here: the server has a newer version) deletes nothing this settle."""
    ctl = _two_tenants(api, controller)
    _seen(ctl, "theirs", v1inputs.reserved_pods)
    snapshot = ctl.snapshot()
    assert v1inputs.reserved_pods(snapshot.claims["default/theirs"])
    found = _get(api, "theirs")
    found["metadata"].setdefault("labels", {})["changed"] = "yes"
    api.replace(r.RESOURCE_CLAIMS_V1, found)
    ctl.repairer.clashes(snapshot)
    assert evictions.deleted == []
    _seen(ctl, "theirs", lambda c: bool(c.get("metadata", {}).get("labels")))
    assert _settled(ctl, lambda: _pod_gone(api, "q"))


def test_consumers_that_are_not_pods_drasat_sees_are_reported_not_deleted(
    api: KubeClient, evictions: Evictions, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", 1)
    for name in ("a", "b"):
        _claim(api, name)
        found = _get(api, name)
        found["status"] = {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1",
                                         "device": "gpu-0"}]},
                "nodeSelector": results.node_selector("n1"),
            },
            "reservedFor": [{"resource": "pods", "name": f"{name}-gone", "uid": f"u-{name}"}],
        }  # fmt: skip
        api.replace_status(r.RESOURCE_CLAIMS_V1, found)
    ctl = controller()
    for _ in range(3):
        ctl.cycle()
        time.sleep(0.05)
    assert evictions.deleted == [] and evictions.asked == []
    (said,) = {e["message"] for e in _events(api, "DeviceClash")}
    assert "once its consumers are pods" in said
    assert v1inputs.is_allocated(_get(api, "a")) and v1inputs.is_allocated(_get(api, "b"))
