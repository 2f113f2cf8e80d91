"""Critical XID events mark a GPU Unhealthy in the NAS; application XIDs do not."""

from __future__ import annotations

import time
from typing import Any

from drasat.api.nas import Health
from drasat.nodeplugin import health


def healths(node: Any) -> list[Health]:
    return [g.health for g in node.store.read().spec.gpus()]


def test_critical_xid_marks_gpu_unhealthy(served_node: Any) -> None:
    node = served_node
    node.sim.inject_xid(node.gpu(0), 13)  # application error: ignored
    node.sim.inject_xid(node.gpu(1), 79)  # GPU has fallen off the bus
    deadline = time.monotonic() + 10
    while healths(node)[1] is not Health.Unhealthy and time.monotonic() < deadline:
        time.sleep(0.05)
    assert healths(node) == [Health.Healthy, Health.Unhealthy]


def test_poll_without_events_changes_nothing(node_factory: Any) -> None:
    node = node_factory("T4")
    seen: list[frozenset[str]] = []
    monitor = health.HealthMonitor(node.lib, seen.append, wait_ms=10)
    assert monitor.poll() is False
    node.sim.inject_xid(node.gpu(0), 48)  # double-bit ECC error
    assert monitor.poll() is True
    assert seen == [frozenset({node.gpu(0)})]
    node.sim.inject_xid(node.gpu(0), 48)
    assert monitor.poll() is False  # already Unhealthy: no new write
