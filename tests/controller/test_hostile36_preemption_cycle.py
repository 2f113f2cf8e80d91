"""Hostile review of preemption and nominations inside the v1 controller's cycle, on the
in-process API server (the harness of test_v1controller_preemption_cycle.py). Each test is a
defect found by the review, marked xfail(strict) until it is fixed."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import test_v1controller_preemption_cycle as base
from test_v1controller_preemption_cycle import (
    Evicting,
    _allocated,
    _bind,
    _cycles,
    _gone,
    _node,
    _pod,
)

from drasat.api.groups import NOMINATION_ANNOTATION
from drasat.controller.v1controller import V1Controller
from drasat.kube import resources as r
from drasat.kube.client import KubeClient

Obj = dict[str, Any]
NS = "default"
# The in-process API server and the controller on it, as the cycle tests make them.
api = base.api
controller = base.controller


def _gpu_uuids(api: KubeClient, node: str) -> list[str]:
    from ctl_cluster import NS as DRIVER_NS

    nas = api.get(r.NAS, node, namespace=DRIVER_NS)
    return [d["gpu"]["uuid"] for d in nas["spec"]["allocatableDevices"] if "gpu" in d]


def _forged(node: str, uuids: list[str], priority: int, freed: list[str] | None = None) -> str:
    """What a tenant writes on its own pod: drasat's nomination format, read from the source."""
    held = {
        f"forged-{i}": {
            "claimInfo": {"namespace": NS, "name": f"forged-{i}", "uid": f"forged-uid-{i}"},
            "gpu": {"devices": [{"uuid": u}]},
        }
        for i, u in enumerate(uuids)
    }
    return json.dumps({"node": node, "priority": priority, "victims": [],
                       "freed": freed or [], "held": {node: held},
                       "since": "2030-01-01T00:00:00.000000Z"})  # fmt: skip


def _squatter(api: KubeClient, name: str, annotation: str, **spec: Any) -> Obj:
    """A tenant's pod of priority 0 that never runs (another owner's gate) and carries a
    nomination annotation it wrote itself: nothing stops a tenant annotating its own pod."""
    return api.create(
        r.PODS,
        {
            "metadata": {"name": name, "namespace": NS,
                         "annotations": {NOMINATION_ANNOTATION: annotation}},
            "spec": {"priority": 0, "containers": [{"name": "c", "image": "x"}],
                     "schedulingGates": [{"name": "example.com/never"}], **spec},
        },
        namespace=NS,
    )  # fmt: skip


def test_a_forged_nomination_on_a_tenants_own_pod_holds_no_gpu(
    api: KubeClient, controller: Callable[..., tuple[V1Controller, Evicting]]
) -> None:
    _node(api, "n1", 2)
    uuids = _gpu_uuids(api, "n1")
    # Priority 0 pod, no claim at all, never schedulable; its forged nomination claims priority
    # 2**31-1 and both GPUs of n1.
    _squatter(api, "squatter", _forged("n1", uuids, 2**31 - 1))
    ctl, _ = controller()
    _pod(api, "urgent", 1_000_000)
    _cycles(ctl, 3)
    assert _allocated(api, "urgent"), "an empty node's GPUs are held for a forged nomination"


def test_a_forged_nomination_makes_no_one_evict_a_running_pod(
    api: KubeClient, controller: Callable[..., tuple[V1Controller, Evicting]]
) -> None:
    # n2: v (priority 0) runs on its one GPU. n1's GPU is free but for the forged hold.
    _node(api, "n2", 1)
    _pod(api, "v", 0)
    ctl, proxy = controller()
    _cycles(ctl, 1)
    assert _allocated(api, "v")
    _bind(api, "v", "n2")
    _node(api, "n1", 1)
    _squatter(api, "squatter", _forged("n1", _gpu_uuids(api, "n1"), 2**31 - 1))
    _pod(api, "urgent", 100)
    _cycles(ctl, 3)
    assert proxy.evicted == [], "drasat evicted a running pod for a tenant's forged hold"


def _member(
    api: KubeClient, name: str, priority: int, labels: dict[str, str], gpus: int = 1
) -> None:
    """A pod with a claim of its own (owned by it) and these labels (a label gang's)."""
    _pod(api, name, priority, gpus=gpus)
    api.patch(r.PODS, name, {"metadata": {"labels": labels}}, namespace=NS)


def test_a_gang_nominee_no_longer_tried_does_not_hold_its_gpus_for_ever(
    api: KubeClient, controller: Callable[..., tuple[V1Controller, Evicting]]
) -> None:
    from drasat.api.groups import GANG_LABEL, GANG_SIZE_LABEL

    # n1: 2 T4s, v1 and v2 (priority 0) on them. A gang of 2 (priority 100) preempts both.
    _node(api, "n1", 2)
    _pod(api, "v1", 0)
    _pod(api, "v2", 0)
    ctl, proxy = controller()
    _cycles(ctl, 1)
    _bind(api, "v1", "n1")
    _bind(api, "v2", "n1")
    gang = {GANG_LABEL: "g", GANG_SIZE_LABEL: "2"}
    _member(api, "g0", 100, gang)
    _member(api, "g1", 100, gang)
    _cycles(ctl, 1)
    assert sorted(proxy.evicted) == ["default/v1", "default/v2"]
    # The tenant raises the gang's minimum to 3 (or deletes g1): the gang is incomplete, none of
    # its pods is tried any more, for as long as it stays so.
    api.patch(r.PODS, "g0", {"metadata": {"labels": {GANG_SIZE_LABEL: "3"}}}, namespace=NS)
    api.patch(r.PODS, "g1", {"metadata": {"labels": {GANG_SIZE_LABEL: "3"}}}, namespace=NS)
    _gone(api, "v1")
    _gone(api, "v2")
    _cycles(ctl, 3)
    _pod(api, "lo", 50)
    _cycles(ctl, 3)
    assert _allocated(api, "lo"), "two GPUs stay held for a gang that is not even tried"


def test_gang_labels_of_minimum_one_buy_no_immunity_from_preemption(
    api: KubeClient, controller: Callable[..., tuple[V1Controller, Evicting]]
) -> None:
    from drasat.api.groups import GANG_LABEL, GANG_SIZE_LABEL

    # n1: 5 T4s, each held by a priority-0 pod of one label gang whose minimum is 1: its pods
    # are placed one by one as any pod (gang-size is a minimum), yet run as one victim unit.
    _node(api, "n1", 5)
    ctl, proxy = controller()
    shield = {GANG_LABEL: "shield", GANG_SIZE_LABEL: "1"}
    names = [f"s{i}" for i in range(5)]
    for name in names:
        _member(api, name, 0, shield)
    _cycles(ctl, 3)
    assert all(_allocated(api, n) for n in names)
    for name in names:
        _bind(api, name, "n1")
    _pod(api, "urgent", 1000)
    _cycles(ctl, 2)
    # Evicting one of them leaves 4 running, above the gang's minimum of 1.
    assert len(proxy.evicted) == 1, proxy.evicted


def test_one_high_priority_pod_in_a_label_gang_shields_no_low_priority_pod(
    api: KubeClient, controller: Callable[..., tuple[V1Controller, Evicting]]
) -> None:
    from drasat.api.groups import GANG_LABEL, GANG_SIZE_LABEL

    # n1: 2 T4s: `boss` (priority 2000) and `cheap` (priority 0), one label gang of minimum 1.
    _node(api, "n1", 2)
    ctl, proxy = controller()
    shield = {GANG_LABEL: "shield", GANG_SIZE_LABEL: "1"}
    _member(api, "boss", 2000, shield)
    _member(api, "cheap", 0, shield)
    _cycles(ctl, 3)
    assert _allocated(api, "boss") and _allocated(api, "cheap")
    _bind(api, "boss", "n1")
    _bind(api, "cheap", "n1")
    _pod(api, "urgent", 1000)
    _cycles(ctl, 2)
    # As a preemptor this gang would count as priority 0; as a victim it counts as 2000.
    assert proxy.evicted == ["default/cheap"], proxy.evicted
