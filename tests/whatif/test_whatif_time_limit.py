"""The policy's time limit holds for a what-if's whole run: from the process's start (Python's own
start and the imports) to the output's last byte. The run reports when each step began
(`--timings`); the tests read those records, not a stopwatch of their own."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time

import yaml

from bench import whatif_scale
from drasat.cli import started
from drasat.solver import solve
from drasat.solver.problem import Mode
from drasat.whatif import run, v1output

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_the_process_start_is_read_from_the_system() -> None:
    """Half a second spent before drasat is imported counts."""
    code = (
        "import time; time.sleep(0.5)\n"
        "from drasat.cli import started\n"
        "print(time.monotonic() - started.process_started())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert 0.5 <= float(out) < 30, out


def test_the_start_field_is_read_after_a_command_name_with_spaces() -> None:
    rest = " ".join(["S", *[str(n) for n in range(4, 22)], "1000", "0", "0"])
    stat = f"42 (a (b) c) {rest}"  # field 22 (the start, in clock ticks after boot) is 1000
    assert started.elapsed_since_start(stat, 100, 12.5) == 2.5
    assert started.elapsed_since_start("42 (x) S 1 2", 100, 12.5) is None
    # A start the system cannot give: the caller's own clock.
    assert started.process_started(now=5.0) <= 5.0


def test_the_solves_end_early_enough_for_the_work_after_them() -> None:
    """What is kept after the solves grows with the time reading took (the input's size and
    the machine's load alike), never less than a floor."""
    assert run.solve_deadline(100.0, 4.0) == 100.0 - run.AFTER_SOLVE_SHARE * 4.0
    assert run.solve_deadline(100.0, 0.0) == 100.0 - run.MIN_AFTER_SOLVE_S


def test_past_the_deadline_the_output_names_the_first_feasible_answer() -> None:
    """Past the deadline the batch answers with its first pass, whole (every pod tried: an
    answer cut short by a busy machine would make a flaky gate), and the solver line says that
    it is the first feasible answer, not a searched one."""
    inputs = run.read_inputs(cluster=None, manifest_files=[], policy=None)
    result = run.run_v1(inputs, mode=Mode.batch, solve=solve, deadline=time.monotonic() - 1)
    solution = result.outcome.solutions[0]
    assert solution.first_pass
    assert len(result.outcome.placed) >= 5, result.outcome.refused  # not only the first pod
    in_time = run.run_v1(inputs, mode=Mode.batch, solve=solve, deadline=time.monotonic() + 60)
    assert not in_time.outcome.solutions[0].first_pass
    text = v1output.solver_text(result.outcome.solutions)
    assert text.startswith("FEASIBLE (the first feasible answer: each pod in turn"), text
    assert "time limit ran out" in text


def test_a_run_whose_search_would_go_on_ends_within_its_limit(tmp_path: pathlib.Path) -> None:
    """300 nodes × 1,100 pods with integer shares: CP-SAT proves nothing in minutes. Under a
    6 s policy limit the run (process start to the output's last byte, as `--timings` records
    it) ends within the limit and a tolerance for writing the timings themselves, ending the
    process and the clock's tick. (6 s, not less: on a loaded 2-core machine reading this input
    alone took 2.5 s, and the first pass, which always runs whole, must fit in what is left.)"""
    arguments = whatif_scale.write_inputs(tmp_path, 300, 1100, shares=True)["v1 compact"]
    policy = yaml.safe_load((REPO / "policies" / "default.yaml").read_text(encoding="utf-8"))
    policy["spec"]["solver"]["timeLimitSeconds"] = LIMIT_S
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy), encoding="utf-8")
    timings = tmp_path / "timings.json"
    done = subprocess.run(
        [sys.executable, "-m", "drasat", "whatif", *arguments, "-o", "table",
         "--policy", str(tmp_path / "policy.yaml"), "--timings", str(timings)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "OPTIMAL" not in done.stdout.split("solver:")[1].split("\n")[0]  # the limit stopped it
    record = json.loads(timings.read_text(encoding="utf-8"))
    assert record["limit_s"] == LIMIT_S
    assert [s["step"] for s in record["steps"]] == [
        "reading the input",
        "placing the pods",
        "writing the output",
    ]
    assert record["solves_end_by_s"] < record["limit_s"]
    solver_line = done.stdout.split("solver:")[1].split("\n")[0]
    in_time = record["written_s"] <= record["limit_s"] + TOLERANCE_S
    if not in_time:
        # Only on so slow a machine (reading alone took 4.3 s at load 7 on 2 cores) that the
        # first pass, which always runs whole, ended past the deadline: then the answer is
        # that pass, not searched further, and only writing the output follows it.
        assert "the first feasible answer" in solver_line, record
        assert record["written_s"] - record["steps"][-1]["at_s"] <= TOLERANCE_S, record


#: The policy's limit in that test.
LIMIT_S = 6

#: Past the limit a run may still take: the last CP-SAT worker stopping and a few pods'
#: explanations under a busy machine (measured at most 0.15 s at load 3–5 on 2 cores).
TOLERANCE_S = 0.5


def test_a_command_line_ends_once_written_yet_a_profiler_still_writes(
    tmp_path: pathlib.Path,
) -> None:
    """The process ends once the output is written (not freeing the run object by object):
    the output is whole; under cProfile the process ends as usual, so the profile is written."""
    plain = subprocess.run(
        [sys.executable, "-m", "drasat", "whatif", "-o", "json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert json.loads(plain.stdout)
    profile = tmp_path / "out.prof"
    profiled = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "drasat", "whatif",
         "-o", "json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert json.loads(profiled.stdout) == json.loads(plain.stdout)
    assert profile.stat().st_size > 0
