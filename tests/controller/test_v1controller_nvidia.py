"""drasat's v1 controller as the allocator for NVIDIA's DRA driver (`--driver gpu.nvidia.com`,
issue 30), cycle by cycle on the in-process API server: NVIDIA-format ResourceSlices (the
quickstart example's T4, dynamic-MIG A100 and static-MIG A100 nodes), NVIDIA's DeviceClasses and
quickstart claim shapes unchanged. No NAS exists on those nodes: the ledger is the claims'
statuses."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import nvidiaslices
import pytest
from ctl_cluster import NS

from drasat.api.devicemodel import classes
from drasat.api.groups import DRIVER_NAME
from drasat.api.inputerrors import InputError
from drasat.controller import drivers, explain, statusledger
from drasat.controller.taintrule import TAINT_RULE
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, configuration_for
from drasat.testbed.sim import apiserver

Obj = dict[str, Any]
NVIDIA = "gpu.nvidia.com"


@pytest.fixture
def api(server: apiserver.ApiServer) -> Iterator[KubeClient]:
    client = KubeClient(configuration_for(server.url), request_timeout=10)
    for body in [*classes.device_classes(), *nvidiaslices.device_classes()]:
        client.create(r.DEVICE_CLASSES_V1, body)
    yield client
    client.close()


@pytest.fixture
def controller(api: KubeClient) -> Iterator[Callable[..., V1Controller]]:
    made: list[V1Controller] = []

    def make(*allocated: str) -> V1Controller:
        config = V1Config(namespace=NS, batch_window_s=0, drivers=allocated or (NVIDIA,))
        found = V1Controller(api, config)
        found.start(sync_timeout_s=10, cycles=False)
        made.append(found)
        return found

    yield make
    for found in made:
        found.stop()


def _publish(api: KubeClient, kind: str, name: str) -> dict[str, Obj]:
    node, slices = nvidiaslices.node(kind, name)
    api.create(r.NODES, node)
    for body in slices:
        api.create(r.RESOURCE_SLICES_V1, body)
    return nvidiaslices.devices(slices)


def _claim(api: KubeClient, name: str, spec: Obj) -> Obj:
    body = {"metadata": {"name": name, "namespace": "default"}, "spec": spec}
    return api.create(r.RESOURCE_CLAIMS_V1, body, namespace="default")


def _pod(api: KubeClient, name: str, claim: str) -> Obj:
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                             "effect": "NoSchedule"}],
        },
    }  # fmt: skip
    return api.create(r.PODS, body, namespace="default")


def _gpu(device_class: str = "gpu.nvidia.com", **request: Any) -> Obj:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": device_class, **request}}]}}  # fmt: skip


def _allocation(api: KubeClient, name: str) -> Obj:
    status = api.get(r.RESOURCE_CLAIMS_V1, name, namespace="default").get("status") or {}
    return dict(status.get("allocation") or {})


def _settled(controller: V1Controller, check: Callable[[], Any], timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        controller.cycle()
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _uuids(ledger: Any) -> list[str]:
    return [d.uuid for e in ledger.values() for d in (e.gpu.devices if e.gpu else [])]


def _devices(allocation: Obj) -> list[tuple[str, str, str]]:
    return [(x["driver"], x["pool"], x["device"]) for x in allocation["devices"]["results"]]


def test_the_driver_flag_takes_a_list_of_known_drivers() -> None:
    assert drivers.parse(["gpu.nvidia.com"]) == (NVIDIA,)
    assert drivers.parse(["gpu.drasat.io, gpu.nvidia.com,gpu.drasat.io"]) == (DRIVER_NAME, NVIDIA)
    with pytest.raises(InputError, match=r"'gpu\.amd\.com': drasat allocates the devices of"):
        drivers.parse(["gpu.amd.com"])
    with pytest.raises(InputError, match="name at least one driver"):
        drivers.parse([" , "])


def test_a_taint_rule_keeps_kube_scheduler_off_nvidias_devices_only(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    controller()
    rule = api.get(r.DEVICE_TAINT_RULES_V1, drivers.taint_rule_name(NVIDIA))
    assert rule["spec"]["deviceSelector"] == {"driver": NVIDIA}
    taint = {k: v for k, v in rule["spec"]["taint"].items() if k != "timeAdded"}
    assert taint == {"key": "gpu.drasat.io/allocator", "value": "drasat", "effect": "NoSchedule"}
    with pytest.raises(errors.NotFound):
        api.get(r.DEVICE_TAINT_RULES_V1, TAINT_RULE)  # drasat's own driver is not allocated


def test_whole_gpus_one_cycle_after_another_never_twice_and_never_the_tainted(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    _publish(api, "nv-t4", "t4")
    ctl = controller()
    seen = []
    for i in (1, 2):
        # One pod per cycle: the second cycle's ledger is the first claim's status (no NAS).
        _claim(api, f"c{i}", _gpu())
        _pod(api, f"p{i}", f"c{i}")
        assert _settled(ctl, lambda i=i: _allocation(api, f"c{i}"))
        seen += _devices(_allocation(api, f"c{i}"))
    assert sorted(seen) == [(NVIDIA, "t4", "gpu-0"), (NVIDIA, "t4", "gpu-1")]
    # `drasat explain --driver gpu.nvidia.com` names the devices of a pod whose claim is allocated.
    options = explain.Options(namespace=NS, drivers=(NVIDIA,))
    text = explain.explain(api, "default", "p1", options=options)
    assert f"claim default/c1: gpu={_devices(_allocation(api, 'c1'))[0][2]} on node t4" in text
    assert api.list(r.NAS, namespace=NS).items == []  # nothing written to a NAS
    # No finalizer of drasat's either: it guards NAS entries, and there are none.
    finalizers = [api.get(r.RESOURCE_CLAIMS_V1, f"c{i}", namespace="default")["metadata"].get(
        "finalizers") for i in (1, 2)]  # fmt: skip
    assert finalizers == [None, None]
    _claim(api, "c3", _gpu())
    _pod(api, "p3", "c3")
    # gpu-2 carries NVIDIA's XID device taint: refused.
    assert _settled(ctl, lambda: "default/p3" in ctl.explanations)
    assert not _allocation(api, "c3")
    # `drasat explain --driver gpu.nvidia.com` reads the same ledger and says why.
    text = explain.explain(api, "default", "p3", options=options)
    assert "has no unallocated claim" not in text and "default/p3" in text, text


def test_a_claim_written_before_the_cache_saw_it_still_holds_its_gpu(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    # The status write is remembered: a snapshot of claims without it still counts its GPU.
    _publish(api, "nv-t4", "t4")
    ctl = controller()
    _claim(api, "c1", _gpu())
    _pod(api, "p1", "c1")
    assert _settled(ctl, lambda: _allocation(api, "c1"))
    (written,) = ctl.own_writes.claims.values()
    snap = ctl.snapshot()
    before = dict(snap.claims["default/c1"], status={})
    before["metadata"] = {**before["metadata"], "resourceVersion": "1"}
    found = statusledger.ledgers_from_statuses(
        snap.published, [before], {}, ctl.own_writes.claims, (NVIDIA,)
    )
    assert found["t4"].entries == written.ledger
    # The same GPU as the status names, once the cache has it.
    assert _settled(ctl, lambda: ctl.snapshot().claims["default/c1"].get("status"))
    now = statusledger.ledgers_from_statuses(
        snap.published, ctl.snapshot().claims.values(), {}, {}, (NVIDIA,)
    )
    assert _uuids(now["t4"].entries) == _uuids(written.ledger) != []


def test_quickstart_mig_claim_gets_four_mig_devices_of_one_dynamic_mig_a100(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    published = _publish(api, "nv-a100", "a100")
    profile = "device.attributes['gpu.nvidia.com'].profile == '{}'"
    requests = [
        {"name": name, "exactly": {"deviceClassName": "mig.nvidia.com",
                                   "selectors": [{"cel": {"expression": profile.format(p)}}]}}
        for name, p in (("a", "1g.5gb"), ("b", "1g.5gb"), ("c", "2g.10gb"), ("d", "3g.20gb"))
    ]  # fmt: skip
    spec = {"devices": {"requests": requests, "constraints": [
        {"requests": [], "matchAttribute": "gpu.nvidia.com/parentUUID"}]}}  # fmt: skip
    ctl = controller()
    _claim(api, "mig", spec)
    _pod(api, "p", "mig")
    allocation = _settled(ctl, lambda: _allocation(api, "mig"))
    results = allocation["devices"]["results"]
    assert [x["request"] for x in results] == ["a", "b", "c", "d"]
    assert {x["driver"] for x in results} == {NVIDIA} and {x["pool"] for x in results} == {"a100"}
    profiles = [published[x["device"]]["attributes"]["profile"]["string"] for x in results]
    assert profiles == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]
    # Four placements that do not overlap (NVIDIA's memory-slice counters): a 1g.5gb placement
    # holds one slice, 2g.10gb two, 3g.20gb four.
    starts = sorted(int(x["device"].rsplit("-", 1)[1]) for x in results)
    assert len(set(starts)) == 4
    # A second such claim does not fit beside it on the one A100 (8 memory slices).
    _claim(api, "mig2", spec)
    _pod(api, "p2", "mig2")
    assert _settled(ctl, lambda: "default/p2" in ctl.explanations)
    assert not _allocation(api, "mig2")


def test_nvidias_opaque_configs_are_copied_into_the_allocation(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    _publish(api, "nv-t4", "t4")
    ts = {
        "driver": NVIDIA,
        "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
        },
    }
    mps = {
        "driver": NVIDIA,
        "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}},
        },
    }
    spec = {"devices": {
        "requests": [{"name": "ts-gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
                     {"name": "mps-gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}],
        "config": [{"requests": ["ts-gpu"], "opaque": ts},
                   {"requests": ["mps-gpu"], "opaque": mps}]}}  # fmt: skip
    ctl = controller()
    _claim(api, "shared", spec)
    _pod(api, "p", "shared")
    allocation = _settled(ctl, lambda: _allocation(api, "shared"))
    assert allocation["devices"]["config"] == [
        {"source": "FromClaim", "requests": ["ts-gpu"], "opaque": ts},
        {"source": "FromClaim", "requests": ["mps-gpu"], "opaque": mps},
    ]
    assert sorted(x["device"] for x in allocation["devices"]["results"]) == ["gpu-0", "gpu-1"]


def test_drasats_own_classes_are_left_alone_when_only_nvidias_driver_is_allocated(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    _publish(api, "nv-t4", "t4")
    ctl = controller()
    _claim(api, "mine", _gpu("gpu.drasat.io"))
    _pod(api, "p", "mine")
    _settled(ctl, lambda: ctl.snapshot().claims.get("default/mine"), timeout=5)
    ctl.cycle()
    assert not _allocation(api, "mine")
    assert "default/p" not in ctl.explanations


def test_both_drivers_on_one_node_make_it_unusable(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    import ctl_slices
    from ctl_cluster import t4

    _publish(api, "nv-t4", "both")
    ctl_slices.publish(api, "both", [t4(0)])
    ctl = controller(DRIVER_NAME, NVIDIA)
    found = ctl.snapshot().published["both"]
    assert found.read is None
    assert found.problem == (
        "it publishes devices of gpu.drasat.io and gpu.nvidia.com: one GPU driver per node (its "
        "GPUs would count twice)"
    )


def test_a_claim_the_scheduler_gives_back_marks_the_node_unsuitable_for_its_pod(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    # No NAS entry goes stale on NVIDIA's nodes: the give-back is seen on the claim itself.
    _publish(api, "nv-t4", "t4")
    ctl = controller()
    _claim(api, "c1", _gpu())
    _pod(api, "p1", "c1")
    assert _settled(ctl, lambda: _allocation(api, "c1"))
    claim = api.get(r.RESOURCE_CLAIMS_V1, "c1", namespace="default")
    api.replace_status(r.RESOURCE_CLAIMS_V1, {**claim, "status": {}})  # kube-scheduler's PostFilter
    assert _settled(ctl, lambda: "default/p1" in ctl.releaser.unsuitable)
    assert set(ctl.releaser.unsuitable["default/p1"]) == {"t4"}


def test_a_claim_of_nvidias_whose_pod_finished_is_given_back(
    api: KubeClient, controller: Callable[..., V1Controller]
) -> None:
    """NVIDIA's claims carry no finalizer of drasat's; drasat is their one allocator (the class
    is NVIDIA's, the claim does not tolerate the allocator taint), so one no pod uses any more
    is deallocated as drasat's own are, and the next pod gets its GPU."""
    _publish(api, "nv-t4", "t4")
    ctl = controller()
    for i in (1, 2):
        _claim(api, f"c{i}", _gpu())
        _pod(api, f"p{i}", f"c{i}")
    assert _settled(ctl, lambda: _allocation(api, "c1") and _allocation(api, "c2"))
    _claim(api, "c3", _gpu())
    _pod(api, "p3", "c3")
    ctl.cycle()
    assert not _allocation(api, "c3")  # both GPUs held
    done = api.get(r.PODS, "p1", namespace="default")
    api.replace_status(r.PODS, {**done, "status": {**(done.get("status") or {}),
                                                   "phase": "Succeeded"}})  # fmt: skip
    assert _settled(ctl, lambda: not _allocation(api, "c1"))
    assert _settled(ctl, lambda: _allocation(api, "c3"))
    assert _allocation(api, "c2")
