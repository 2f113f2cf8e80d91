"""Smoke test of bench.nodeplugin_prepare: every claim kind through the real socket, tiny."""

from __future__ import annotations

import pytest

from bench import nodeplugin_prepare as bench


@pytest.mark.parametrize("kind", bench.KINDS)
def test_each_kind_prepares_and_unprepares(kind: str) -> None:
    result = bench.run(kind, "0", 2, 3, client="thread")
    for method in bench.METHODS:
        samples = result.samples[method]
        assert len(samples) == 3
        assert all(0 <= s.hardware_s <= s.wall_s for s in samples)
    assert f"| {kind} | 0 | 2 | 3 |" in bench.row(result)


def test_hardware_delay_is_measured_and_subtracted() -> None:
    result = bench.run("timeslice", "1ms", 1, 2, client="thread")
    for sample in result.samples["NodePrepareResources"]:
        # the first holder of a GPU reads and sets its compute mode: two NVML calls, 1 ms each
        assert sample.hardware_s >= 0.002
    assert result.nvml_calls_per_claim >= 2


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert bench.percentile(values, 50) == 50.0
    assert bench.percentile(values, 99) == 99.0
    assert bench.percentile(values, 100) == 100.0
    assert bench.percentile([3.0], 99) == 3.0


def test_main_prints_a_table_and_a_profile(capsys: pytest.CaptureFixture[str]) -> None:
    # --client thread: a client process costs seconds to start (spawn), too slow for a smoke test
    args = ["--kinds", "exclusive", "--calls", "2", "--concurrency", "1", "--profile", "3"]
    bench.main([*args, "--client", "thread"])
    out = capsys.readouterr().out
    assert bench.HEADER in out and bench.BREAKDOWN in out
    assert "| exclusive | 0 | 1 | 2 |" in out
    assert "cumulative" in out
