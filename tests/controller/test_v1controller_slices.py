"""The v1 controller allocates what the nodes publish (issue 22 defect 13, Deliver 2): the
ResourceSlices of drasat's driver, as the real node plugin writes them (`nodeplugin.slicepublisher`
over the device model), not devices re-derived from the NAS. A `--no-shares` node's exclusive GPUs,
device taints (health) and incomplete pools are read from the slices; the NAS stays the ledger.

Each test gives the node a NAS that says something else than its slices (shareable, healthy,
complete), so it fails when the controller models devices from the NAS."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ctl_slices
import pytest
import test_v1controller as base
from ctl_cluster import NS, add_node, t4
from test_v1controller import _claim, _pod, _settled, _status

from drasat.api.devicemodel.nodegpus import GpuHealth
from drasat.controller.v1controller import V1Controller
from drasat.kube import resources as r
from drasat.kube.client import KubeClient

Obj = dict[str, Any]

# The in-process API server with drasat's DeviceClasses, and controllers stepped by hand.
server, api, controller = base.server, base.api, base.controller


def _node(api: KubeClient, name: str, devices: list[Obj], **publish: Any) -> None:
    """A Node, its NAS (healthy, shareable GPUs: what the NAS alone would model) and its slices
    as its plugin publishes them with `publish` (`shares`, `unhealthy`)."""
    api.create(
        r.NODES,
        {
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
        },
    )
    add_node(api, name, devices)
    if publish.pop("slices", True):
        ctl_slices.publish(api, name, devices, **publish)


def _share_claim(api: KubeClient, name: str) -> Obj:
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.drasat.io",
            "capacity": {"requests": {"memory": "4Gi", "compute": "25"}},
        }}]}},
    }  # fmt: skip
    return api.create(r.RESOURCE_CLAIMS_V1, body, namespace="default")


def _results(api: KubeClient, name: str) -> list[Obj]:
    allocation = _status(api, name).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def _decided(ctl: V1Controller, api: KubeClient, claims: list[str], refused: int) -> bool:
    """Every claim allocated or its pod refused, `refused` of them refused."""
    allocated = sum(bool(_status(api, c).get("allocation")) for c in claims)
    return allocated + len(ctl.explanations) == len(claims) and len(ctl.explanations) == refused


@pytest.mark.parametrize("shares", [False, True], ids=["no-shares", "shares"])
def test_a_no_shares_node_never_gets_two_share_claims_on_one_gpu(
    api: KubeClient, controller: Callable[[], V1Controller], shares: bool
) -> None:
    # One T4; the plugin publishes it exclusive (--no-shares) or shareable. Two pods each ask
    # for a quarter of a GPU: upstream gives an exclusive device whole to one claim.
    _node(api, "n1", [t4(0)], shares=shares)
    for i in (1, 2):
        _share_claim(api, f"c{i}")
        _pod(api, f"p{i}", f"c{i}")
    ctl = controller()
    claims = ["c1", "c2"]
    assert _settled(ctl, lambda: _decided(ctl, api, claims, refused=0 if shares else 1))
    held = [r for c in claims for r in _results(api, c)]
    assert {r["device"] for r in held} == {"gpu-0"}
    if shares:
        assert len(held) == 2 and all(
            r["consumedCapacity"]["memory"] == str(4 * 2**30) for r in held
        )
        assert len({r["shareID"] for r in held}) == 2
    else:
        (whole,) = held  # one claim holds the GPU, exclusively; the other pod waits
        assert "shareID" not in whole and "consumedCapacity" not in whole
        assert list(ctl.explanations) in (["default/p1"], ["default/p2"])


def test_a_tainted_device_is_not_allocated(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    # The plugin saw XID 48 on GPU 0 and taints it NoSchedule in its slices; the NAS (written
    # by an older plugin, or not yet) still calls it healthy.
    gpus = [t4(0), t4(1)]
    _node(api, "n1", gpus, unhealthy={gpus[0]["gpu"]["uuid"]: GpuHealth.from_xid(48)})
    for i in (1, 2):
        _claim(api, f"c{i}")
        _pod(api, f"p{i}", f"c{i}")
    ctl = controller()
    assert _settled(ctl, lambda: _decided(ctl, api, ["c1", "c2"], refused=1))
    held = [r["device"] for c in ("c1", "c2") for r in _results(api, c)]
    assert held == ["gpu-1"]


def _slice(api: KubeClient, node: str) -> Obj:
    (found,) = ctl_slices.slicepublisher.SlicePublisher(api, node_name=node).existing()
    return found


def test_an_incomplete_pool_is_not_used_until_it_is_complete(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", [t4(0)])
    # The plugin is between two writes: its pool says two slices and one is there.
    body = _slice(api, "n1")
    body["spec"]["pool"]["resourceSliceCount"] = 2
    api.replace(r.RESOURCE_SLICES_V1, body)
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    ctl = controller()
    assert _settled(ctl, lambda: "default/p1" in ctl.explanations)
    assert "has 1 of its 2 slices" in ctl.explanations["default/p1"]
    assert not _status(api, "c1").get("allocation")
    body = _slice(api, "n1")
    body["spec"]["pool"]["resourceSliceCount"] = 1
    api.replace(r.RESOURCE_SLICES_V1, body)
    assert _settled(ctl, lambda: _status(api, "c1").get("allocation"))


def test_a_node_without_slices_is_not_a_candidate_and_the_refusal_says_why(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n1", [t4(0)], slices=False)
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    ctl = controller()
    assert _settled(ctl, lambda: "default/p1" in ctl.explanations)
    assert "no ResourceSlice of gpu.drasat.io" in ctl.explanations["default/p1"]
    assert not _status(api, "c1").get("allocation")
    # The plugin publishes: the pod goes.
    ctl_slices.publish(api, "n1", [t4(0)])
    assert _settled(ctl, lambda: _status(api, "c1").get("allocation"))


def test_the_ledger_stays_the_nas(api: KubeClient, controller: Callable[[], V1Controller]) -> None:
    # Devices come from the slices; what is held comes from the NAS ledger (and claim status).
    _node(api, "n1", [t4(0)])
    _claim(api, "c1")
    _pod(api, "p1", "c1")
    ctl = controller()
    assert _settled(ctl, lambda: _status(api, "c1").get("allocation"))
    spec = api.get(r.NAS, "n1", namespace=NS)["spec"]
    assert len(spec["allocatedClaims"]) == 1
    _claim(api, "c2")
    _pod(api, "p2", "c2")
    assert _settled(ctl, lambda: "default/p2" in ctl.explanations)
