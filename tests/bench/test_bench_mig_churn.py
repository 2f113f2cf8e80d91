"""Smoke tests of the MIG churn benchmark (bench/mig_churn.py): seconds, tiny instances."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from bench import mig_churn, mig_churn_variants
from drasat.solver import Problem, Solution
from tests.checker import violations


def _valid(problem: Problem, solution: Solution) -> None:
    # The bench solves with explain=False, so rejections carry no reasons: not checked here.
    errors = [e for e in violations(problem, solution) if "unplaced without a reason" not in e]
    assert not errors, "\n".join(errors)


def _check_every_solve(policy: mig_churn.Policy) -> None:
    """The tests' independent checker on every drasat solve, beside the bench's own check."""
    if isinstance(policy, mig_churn.Drasat):
        policy.observer = _valid


def test_three_policies_on_a_tiny_churn() -> None:
    requests = mig_churn.events(120, seed=3, gpus=8, load=1.3)
    assert len(requests) == 120
    assert all(r.departure > r.arrival for r in requests)
    assert any(r.profile is None for r in requests) and any(r.profile for r in requests)
    for name in mig_churn.POLICIES:
        result = mig_churn.run(name, requests, gpus=8, configure=_check_every_solve)
        assert 0 < result.accepted <= result.arrivals <= len(requests)
        assert result.capacity == 8 * mig_churn.SLICES
        assert all(0 <= used <= result.capacity for _, used in result.samples)
        assert 0.0 <= result.mean_utilization(0.5, requests[-1].arrival) <= 1.0


def test_same_events_for_a_seed() -> None:
    assert mig_churn.events(50, 5, 16, 1.2) == mig_churn.events(50, 5, 16, 1.2)
    assert mig_churn.events(50, 5, 16, 1.2) != mig_churn.events(50, 6, 16, 1.2)


def test_first_feasible_blocks_a_4g_that_drasat_places() -> None:
    # One A100-40GB. A 1g.5gb arrives, then a 4g.20gb (only placement: slices 0-3).
    # First-feasible puts the 1g at slice 0, the first placement, and the 4g no longer fits;
    # static serves the 1g from its 1g@2 instance and has no 4g instance at all.
    requests = [
        mig_churn.Request(0, 0.1, 5.0, "A100-40GB", "1g.5gb"),
        mig_churn.Request(1, 0.2, 5.0, "A100-40GB", "4g.20gb"),
    ]
    first = mig_churn.run("first-feasible", requests, gpus=1)
    assert (first.arrivals, first.accepted) == (2, 1)
    assert first.samples[-1] == (0.2, 1)
    static = mig_churn.run("static", requests, gpus=1)
    assert (static.arrivals, static.accepted) == (2, 1)
    seen: list[mig_churn.Policy] = []

    def keep(policy: mig_churn.Policy) -> None:
        _check_every_solve(policy)
        seen.append(policy)

    drasat = mig_churn.run("drasat", requests, gpus=1, configure=keep)
    assert (drasat.arrivals, drasat.accepted) == (2, 2)
    assert drasat.samples[-1] == (0.2, 5)
    held = sorted(seen[0].gpus[0].held.values())
    assert held[1] == ("4g.20gb", 0, 4)
    assert held[0][0] == "1g.5gb" and held[0][1] >= 4


def test_departures_free_the_slices_for_drasat() -> None:
    requests = [
        mig_churn.Request(0, 0.1, 0.3, "A100-40GB", "7g.40gb"),
        mig_churn.Request(1, 0.2, 1.0, "A100-40GB", "1g.5gb"),
        mig_churn.Request(2, 0.4, 1.0, "A100-40GB", "3g.20gb"),
        mig_churn.Request(3, 0.5, 1.0, None, None, memory_gib=10),
    ]
    result = mig_churn.run("drasat", requests, gpus=1, configure=_check_every_solve)
    # The 1g waits in vain behind the 7g (rejected, no retry); then 3g and 1g.10gb/2g.10gb fit.
    assert result.accepted == 3
    assert [u for _, u in result.samples] == [0, 8, 8, 0, 4, 6]


def test_main_writes_results(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "churn"
    assert mig_churn.main(["--gpus", "8", "--events", "60", "--seed", "2", "--out", str(out)]) == 0
    for name in ("summary.md", "summary.csv", "utilization.csv", "mig_churn.png"):
        assert (out / name).stat().st_size > 0
    assert f"wrote {out}/summary.md" in capsys.readouterr().out


def test_bound_is_at_least_what_every_policy_accepts() -> None:
    for seed, gpus, load in ((3, 16, 1.3), (4, 8, 1.6)):
        requests = mig_churn.events(150, seed, gpus, load)
        limit = mig_churn.bound(requests, gpus)
        assert limit.accepted <= len(requests)
        assert limit.lp_value + 1e-6 >= limit.accepted
        for name in mig_churn.POLICIES:
            accepted = mig_churn.run(name, requests, gpus).accepted
            assert accepted <= limit.accepted, (seed, name, accepted, limit)


def test_bound_counts_one_4g_or_7g_per_gpu() -> None:
    # Two A100s, three overlapping 4g.20gb claims: memory (12 of 16 slices) and compute (12 of 14)
    # would let three through; every 4g placement covers slice 0, so two GPUs hold two at most.
    requests = [mig_churn.Request(i, 0.1 * (i + 1), 5.0, "A100-40GB", "4g.20gb") for i in range(3)]
    assert mig_churn.bound(requests, gpus=2).accepted == 2
    assert mig_churn.run("first-feasible", requests, gpus=2).accepted == 2
    # Two overlapping 4g on one GPU: 8 compute slices of 7. Apart in time, both fit.
    two = [mig_churn.Request(i, 0.1 * (i + 1), 5.0, "A100-40GB", "4g.20gb") for i in range(2)]
    assert mig_churn.bound(two, gpus=1).accepted == 1
    apart = [two[0], dataclasses.replace(two[1], arrival=6.0, departure=7.0)]
    assert mig_churn.bound(apart, gpus=1).accepted == 2


def test_variants_study_runs_on_a_tiny_churn(capsys: pytest.CaptureFixture[str]) -> None:
    requests = mig_churn.events(80, 2, 8, 1.3)
    limit = mig_churn.bound(requests, 8).accepted
    for name in mig_churn_variants.VARIANTS:
        assert 0 < mig_churn_variants.accepted(name, requests, 8) <= limit
    assert set(mig_churn.POLICIES) == {"drasat", "first-feasible", "static"}
    argv = ["--variants", "base,tenants", "--seeds", "1", "--gpus", "8", "--events", "40"]
    assert mig_churn_variants.main(argv) == 0
    assert "| base | " in capsys.readouterr().out
