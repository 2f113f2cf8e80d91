"""A GPU that fell off the bus (XID 79: NVML answers NVML_ERROR_GPU_IS_LOST for it) is taken out of
service with a NoExecute taint within one health period, the other GPUs keep working, and a
plugin (re)started on the node starts and unprepares the lost GPU's claims (issue 23 defect 5,
Deliver 4)."""

from __future__ import annotations

import time
from typing import Any

import pynvml
import pytest
from npfixtures import gpu_allocation, ref

from drasat.api.devicemodel import taints
from drasat.api.nas import Health
from drasat.nodeplugin import slicepublisher
from drasat.nodeplugin.state import ClaimError

UID = "c0ffee00-0000-4000-8000-000000000001"
OTHER = "c0ffee00-0000-4000-8000-000000000002"


class Slices:
    """A SlicePublisher stand-in that keeps what the plugin would publish."""

    def __init__(self) -> None:
        self.published: list[Any] = []

    def sync(self, wanted: Any) -> slicepublisher.SyncResult:
        self.published.append(wanted)
        return slicepublisher.SyncResult(generation=len(self.published))


def lost_taints(node: Any, index: int) -> list[dict[str, Any]]:
    """The taints the device model puts on GPU `index` in the node's last publish."""
    wanted = node.plugin.slice_publisher.published[-1]
    by_uuid = {g.uuid: g for g in wanted.gpus}
    assert node.gpu(index) in by_uuid, "the lost GPU is not published at all"
    return taints.taints(wanted.health.get(node.gpu(index)))


def wait_for(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(condition())


def test_the_simulator_loses_a_gpu_with_nvmls_error(node_factory: Any) -> None:
    node = node_factory("T4 x2")
    node.sim.lose_gpu(node.gpu(0))
    with pytest.raises(pynvml.NVMLError) as raised:
        node.sim.nvmlDeviceGetHandleByIndex(0)
    assert raised.value.value == pynvml.NVML_ERROR_GPU_IS_LOST
    assert node.sim.nvmlDeviceGetCount() == 2  # still enumerated, as the driver does
    node.sim.nvmlDeviceGetHandleByIndex(1)  # the other GPU answers


def served(node_factory: Any, **config: Any) -> Any:
    node = node_factory("T4 x2", health_wait_ms=100, **config)
    node.plugin.slice_publisher = Slices()
    return node


def test_a_lost_gpu_is_tainted_noexecute_within_one_health_period(node_factory: Any) -> None:
    node = served(node_factory)
    node.allocate(OTHER, gpu_allocation(OTHER, node.gpu(1)))
    node.plugin.start()
    try:
        node.sim.lose_gpu(node.gpu(0))
        period = node.config.health_wait_ms / 1000
        lost = lambda: Health.Unhealthy in [g.health for g in node.store.read().spec.gpus()]  # noqa: E731
        assert wait_for(lost, 2 * period + 1.0), "the lost GPU stayed Healthy in the NAS"
        assert [g.health for g in node.store.read().spec.gpus()] == [
            Health.Unhealthy,
            Health.Healthy,
        ]
        assert lost_taints(node, 0) == [{"key": taints.GPU_LOST, "effect": "NoExecute"}]
        assert lost_taints(node, 1) == []
        # the other GPU keeps working; the lost one is refused with a clear error
        assert node.state.prepare(ref(OTHER))
        node.allocate(UID, gpu_allocation(UID, node.gpu(0)))
        with pytest.raises(ClaimError, match="fell off the bus"):
            node.state.prepare(ref(UID))
        node.state.unprepare(ref(OTHER))
    finally:
        node.plugin.stop(grace_s=0)


def test_a_plugin_starts_on_a_node_with_a_lost_gpu_and_unprepares_its_claims(
    node_factory: Any,
) -> None:
    node = served(node_factory)
    sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}}
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), sharing=sharing))
    node.allocate(OTHER, gpu_allocation(OTHER, node.gpu(1), sharing=sharing))
    node.state.prepare(ref(UID))
    node.state.prepare(ref(OTHER))
    node.sim.lose_gpu(node.gpu(0))
    restarted = node.restart()
    restarted.plugin.slice_publisher = Slices()
    restarted.plugin.start()  # failed with NVML_ERROR_GPU_IS_LOST
    try:
        assert [g.health for g in restarted.store.read().spec.gpus()] == [
            Health.Unhealthy,
            Health.Healthy,
        ]
        assert lost_taints(restarted, 0) == [{"key": taints.GPU_LOST, "effect": "NoExecute"}]
        # its claims can be unprepared: what they set went with the GPU
        restarted.state.unprepare(ref(UID))
        assert restarted.state.checkpoint.get(UID) is None
        restarted.state.unprepare(ref(OTHER))
        assert node.sim.gpus[1].time_slice == 0
        assert restarted.state.metrics.lost_gpus._value.get() == 1
    finally:
        restarted.plugin.stop(grace_s=0)


def test_each_collection_round_publishes_the_slices_again(node_factory: Any) -> None:
    """A Node deleted and registered again takes its slices with it (owner reference), and the
    plugin saw no change of its own: the periodic round publishes them again (issue 29's soak
    found a node left without slices for good)."""
    node = served(node_factory, gc_interval_s=0.05)
    node.plugin.start()
    try:
        before = len(node.plugin.slice_publisher.published)
        assert wait_for(lambda: len(node.plugin.slice_publisher.published) >= before + 2, 10)
    finally:
        node.plugin.stop(grace_s=0)
