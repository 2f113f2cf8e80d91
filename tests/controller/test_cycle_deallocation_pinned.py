"""A claim no pod holds, pinned to a full node by a pending pod, is given back.

A pod naming two claims, one of them a standalone claim left allocated on a node where the
other cannot fit, waits for ever: `releasing.unused` keeps the pinned claim (a pending pod that
could go to its node names it) and the pod may only go where the pinned claim is
(`v1inputs._excluded`). Upstream gives such a claim back: the resourceclaim controller
deallocates a claim whose `reservedFor` empties (kube-scheduler's claims), and kube-scheduler's
PostFilter deallocates a pod's allocated, unreserved claim when the pod fits nowhere, so the pod
is tried again with both claims free."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ctl_cluster import NS
from ctl_kubefake import FakeApi
from test_v1controller import _node
from test_v1controller_deallocation import (
    _allocated,
    _claim,
    _get,
    _phase,
    _placed,
    _pod,
    _until,
)

from drasat.api.devicemodel import classes
from drasat.controller import v1inputs
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
def controller(api: FakeApi) -> Iterator[Callable[..., V1Controller]]:
    made: list[V1Controller] = []

    def make(**config: Any) -> V1Controller:
        found = V1Controller(
            api, V1Config(namespace=NS, batch_window_s=0, device_taint=False, **config)
        )
        found.start(sync_timeout_s=10, cycles=False)
        made.append(found)
        return found

    yield make
    for found in made:
        found.stop()


def _two_claim_pod(api: FakeApi, name: str, claims: list[str]) -> Obj:
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": f"c{i}", "resourceClaimName": c}
                               for i, c in enumerate(claims)],
        },
    }  # fmt: skip
    return api.create(r.PODS, body, namespace="default")


def test_a_pending_pod_is_not_stuck_behind_its_unused_claim_pinned_to_a_full_node(
    api: FakeApi, controller: Callable[..., V1Controller]
) -> None:
    """n1 (2 GPUs) holds `busy` (a running pod's) and `shared` (pod `a`'s). n2 (2 GPUs) is
    free. Pod `p2` names `shared` and a new claim `extra`: while `a` runs, `p2` must wait (it
    may only go to n1, which is full). Once `a` finishes nothing holds `shared` any more, and
    both of `p2`'s claims fit together on n2: `shared` must be given back (or moved) so that
    `p2` is placed. drasat keeps `shared` on n1 for ever (p2 'could go there') and refuses p2
    every cycle."""
    _node(api, "n1", 2)  # type: ignore[arg-type]
    ctl = controller()
    _claim(api, "busy")
    _pod(api, "r", "busy")
    _placed(api, ctl, "busy", "r")
    _claim(api, "shared")
    _pod(api, "a", "shared")
    _placed(api, ctl, "shared", "a")
    assert v1inputs.allocated_node(_get(api, "shared")) == "n1"
    _node(api, "n2", 2)  # type: ignore[arg-type]
    _claim(api, "extra")
    _two_claim_pod(api, "p2", ["shared", "extra"])
    assert _until(ctl, lambda: "default/p2" in ctl.allocator.refused_at), "n1 is full"
    assert not _allocated(api, "extra"), "n1 is full while a runs"
    _phase(api, "a", "Succeeded")
    _until(ctl, lambda: _allocated(api, "extra"))
    shared, extra = _get(api, "shared"), _get(api, "extra")
    assert v1inputs.is_allocated(extra), (
        "p2 is refused for ever: its unused claim `shared` stays pinned to full n1 "
        f"(shared on {v1inputs.allocated_node(shared)}, reservedFor "
        f"{(shared.get('status') or {}).get('reservedFor')})"
    )
    assert v1inputs.allocated_node(shared) == v1inputs.allocated_node(extra) == "n2"


def test_an_unused_claim_is_not_kept_for_a_pod_another_gate_holds(
    api: FakeApi, controller: Callable[..., V1Controller]
) -> None:
    """One GPU. `shared` was pod `a`'s; pod `q`, which names it too, is held by another owner's
    scheduling gate (a suspended Kueue job: drasat itself does not place such a pod). When `a`
    finishes nothing uses `shared`, and upstream's resourceclaim controller would deallocate it
    as `reservedFor` empties; drasat keeps it for `q` (pending, 'could go there'), so the pod
    `waiting` of another claim starves for as long as the queue holds `q`."""
    _node(api, "n1", 1)  # type: ignore[arg-type]
    ctl = controller()
    _claim(api, "shared")
    _pod(api, "a", "shared")
    _placed(api, ctl, "shared", "a")
    held = _pod(api, "q", "shared")
    api.patch(r.PODS, held["metadata"]["name"],
              {"spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}},
              namespace="default")  # fmt: skip
    _claim(api, "other")
    _pod(api, "waiting", "other")
    _phase(api, "a", "Succeeded")
    _until(ctl, lambda: _allocated(api, "other"))
    assert _allocated(api, "other"), (
        "the only GPU stays with `shared`, which no pod uses: its one other pod is held by "
        "another owner's gate"
    )


def test_a_claim_is_given_back_in_the_settle_after_its_pod_is_first_refused(
    api: FakeApi, controller: Callable[..., V1Controller]
) -> None:
    """`a` finishes and `p2` arrives before the next cycle: that settle keeps `shared` (`p2`
    was not tried yet), then the allocation refuses `p2`. Nothing changes after that, so only a
    settle that looks again at the claims of a pod refused since the last one (not only the
    changed objects') gives `shared` back before the next full settle."""
    _node(api, "n1", 2)  # type: ignore[arg-type]
    ctl = controller(full_settle_every=10_000)
    _claim(api, "busy")
    _pod(api, "r", "busy")
    _placed(api, ctl, "busy", "r")
    _claim(api, "shared")
    _pod(api, "a", "shared")
    _placed(api, ctl, "shared", "a")
    _node(api, "n2", 2)  # type: ignore[arg-type]
    _phase(api, "a", "Succeeded")
    _claim(api, "extra")
    _two_claim_pod(api, "p2", ["shared", "extra"])
    deadline = time.monotonic() + 10
    while not _seen_together(ctl):
        assert time.monotonic() < deadline, "the informers never saw p2 and a's end"
        time.sleep(0.01)
    settles = ctl.changes.full_settles
    _until(ctl, lambda: _allocated(api, "extra"), timeout=5)
    assert ctl.changes.full_settles == settles, "a full settle would hide the scope's gap"
    assert _allocated(api, "extra"), "`shared` waits on full n1 for the next full settle"
    assert v1inputs.allocated_node(_get(api, "extra")) == "n2"


def _seen_together(ctl: V1Controller) -> bool:
    """Whether the controller's caches have `a` done and `p2` pending (one settle sees both)."""
    snapshot = ctl.snapshot()
    pods = {v1inputs.pod_key(p): p for p in snapshot.pods}
    a, p2 = pods.get("default/a"), pods.get("default/p2")
    return bool(a and p2 and v1inputs.pod_done(a) and "default/extra" in snapshot.claims)
