"""bench/slice_read.py on two MIG nodes: the fleet reads whole, the figures docs/PERFORMANCE.md
quotes come from the same calls."""

from __future__ import annotations

import pytest

from bench import slice_read


def test_two_mig_nodes_read_every_device(capsys: pytest.CaptureFixture[str]) -> None:
    objs = slice_read.fleet_slices(2, 1.0)
    _, _, read = slice_read.read_once(objs)
    assert read == sum(len(o["spec"].get("devices") or []) for o in objs) == 2 * 209
    assert slice_read.main(["--nodes", "2", "--repeat", "1"]) == 0
    assert "2 nodes, 10 slices, 418 devices" in capsys.readouterr().out
