"""`xids=PATH`: XIDs appended to a file by another process reach the simulated NVML's event sets
(how the real kubelet's tests make a GPU of a plugin process unhealthy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drasat.nodeplugin import nvml
from drasat.testbed.simnvml import SimulatedNvml

N = nvml.NVML


def _waiting(tmp_path: Path) -> tuple[SimulatedNvml, object, Path]:
    xids = tmp_path / "xids"
    sim = SimulatedNvml(f"2xT4,xids={xids}")
    sim.nvmlInit()
    events = sim.nvmlEventSetCreate()
    for index in range(2):
        gpu = sim.nvmlDeviceGetHandleByIndex(index)
        sim.nvmlDeviceRegisterEvents(gpu, N.nvmlEventTypeXidCriticalError, events)
    return sim, events, xids


def test_appended_lines_are_delivered_once_each(tmp_path: Path) -> None:
    sim, events, xids = _waiting(tmp_path)
    with pytest.raises(N.NVMLError):  # no file yet: a timeout, as with no event
        sim.nvmlEventSetWait_v2(events, 10)
    xids.write_text("1 79\n")
    got = sim.nvmlEventSetWait_v2(events, 1000)
    assert (got.device.index, got.eventType, got.eventData) == (
        1,
        N.nvmlEventTypeXidCriticalError,
        79,
    )
    with pytest.raises(N.NVMLError):  # the line is not delivered twice
        sim.nvmlEventSetWait_v2(events, 10)
    with xids.open("a") as f:
        f.write("bad line\n0 48\n1 4")  # a typo is skipped; a line without its newline waits
    got = sim.nvmlEventSetWait_v2(events, 1000)
    assert (got.device.index, got.eventData) == (0, 48)
    with pytest.raises(N.NVMLError):
        sim.nvmlEventSetWait_v2(events, 10)
    with xids.open("a") as f:
        f.write("8\n")
    assert sim.nvmlEventSetWait_v2(events, 1000).eventData == 48  # "1 48", now complete


def test_an_unknown_option_is_still_refused() -> None:
    with pytest.raises(Exception, match="unknown option"):
        SimulatedNvml("T4,xid=/tmp/x")
