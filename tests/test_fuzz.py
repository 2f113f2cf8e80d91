"""The fuzzer in CI (issue 18): a bounded number of mutated inputs per input path, in-process.

Each target must give no traceback, no hang, no garbled message and (node plugin) no internal
error and no lost claim. The long run is `python -m tests.fuzz --cases 10000 --report
docs/RELIABILITY.md`; its reproducers land in tests/fuzz_regressions/objects/ and run here.
"""

from __future__ import annotations

import pathlib
import tempfile

import pytest

from tests.fuzz import runner, targets

#: Cases per target in CI: about 30 s in all on a loaded two-core machine.
CI_CASES = {
    "whatif-cluster": 600,
    "whatif-manifests": 500,
    "whatif-cli": 500,
    "policy": 600,
    "nas": 2000,
    "claim-parameters": 3000,
    "nodeplugin-grpc": 800,
}
SAVED = sorted((pathlib.Path(__file__).parent / "fuzz_regressions" / "objects").glob("*.json"))


def test_every_target_runs_in_ci() -> None:
    assert set(CI_CASES) == set(targets.TARGETS)


@pytest.mark.parametrize("name", sorted(CI_CASES))
def test_fuzz_target(name: str) -> None:
    stats = runner.run_target(targets.TARGETS[name], CI_CASES[name], seed=0, time_limit=10)
    if name == "nodeplugin-grpc":
        targets.check_node_still_serves()
    found = [f"{f.kind} [{f.seed}]: {f.detail[:300]}" for f in stats.found]
    assert stats.failures == 0, "\n".join(found)
    assert stats.cases == CI_CASES[name]
    # Both sides of every path are reached: valid cases pass and broken ones are refused.
    assert sum(stats.outcomes.values()) == stats.cases
    refused = stats.outcomes["input error"] + stats.outcomes["rejected"]
    refused += stats.outcomes["claim errors"]
    assert refused > stats.cases // 10, stats.outcomes
    assert stats.cases - refused > stats.cases // 20, stats.outcomes


@pytest.mark.parametrize("path", SAVED, ids=lambda p: p.stem)
def test_saved_reproducer(path: pathlib.Path) -> None:
    name, case = runner.load_saved(path)
    with tempfile.TemporaryDirectory() as tmp:
        kind, detail = runner.run_case(targets.TARGETS[name], case, pathlib.Path(tmp), 10)
    assert kind not in runner.FAILURES, detail


def test_a_hang_is_caught_and_the_outer_alarm_kept() -> None:
    import signal
    import time

    def spin(case: object, workdir: pathlib.Path) -> str:
        while True:
            time.sleep(0.01)

    target = targets.Target("spin", "", lambda: [0], lambda m, s: s, spin)
    signal.setitimer(signal.ITIMER_REAL, 100)  # as pytest-timeout's would be
    try:
        kind, _ = runner.run_case(target, 0, pathlib.Path("."), 0.2)
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    assert kind == "hang"
    assert 90 < remaining <= 100
