"""The long fuzz run: `python -m tests.fuzz --cases 10000 --report docs/RELIABILITY.md`.

Runs every target (or `--targets a,b`) for `--cases` mutated inputs each, in this process, each
case under `--time-limit` seconds; prints the outcome classes per target, saves every failure
as a reproducer under tests/fuzz_regressions/objects/ (`--save`), and with `--report` rewrites
the results table in docs/RELIABILITY.md. Exit status 1 when any case failed.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
from pathlib import Path

from . import runner, targets

BEGIN, END = "<!-- fuzz-results:begin -->", "<!-- fuzz-results:end -->"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--cases", type=int, default=1000, help="cases per target")
    parser.add_argument("--targets", default=",".join(targets.TARGETS), help="comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds per case")
    parser.add_argument("--save", action="store_true", help="save failures as reproducers")
    parser.add_argument("--report", type=Path, help="rewrite the results table in this file")
    args = parser.parse_args(argv)
    results = []
    for name in args.targets.split(","):
        target = targets.TARGETS[name]
        stats = runner.run_target(target, args.cases, seed=args.seed, time_limit=args.time_limit)
        if name == "nodeplugin-grpc":
            targets.check_node_still_serves()
        results.append(stats)
        print(_line(stats), flush=True)
        for found in stats.found[:20]:
            print(f"  {found.kind} [{found.seed}]: {found.detail}", flush=True)
            if args.save and found.kind != "harness error":
                print(f"    saved {runner.save(found, targets.REPO / _SAVED)}", flush=True)
    if args.report:
        _report(args, results)
    return 1 if any(s.failures for s in results) else 0


_SAVED = Path("tests/fuzz_regressions/objects")


def _line(stats: runner.Stats) -> str:
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(stats.outcomes.items()))
    return (
        f"{stats.target}: {stats.cases} cases in {stats.seconds:.0f} s ({outcomes}); "
        f"slowest case {stats.slowest:.2f} s; peak RSS {stats.rss_after_mib:.0f} MiB"
    )


def _report(args: argparse.Namespace, results: list[runner.Stats]) -> None:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    lines = [
        BEGIN,
        f"Run {datetime.date.today()} at commit {commit or '?'} on {platform.machine()} "
        f"(Python {platform.python_version()}): `python -m tests.fuzz --cases {args.cases} "
        f"--seed {args.seed} --time-limit {args.time_limit:g} --report docs/RELIABILITY.md`",
        "",
        "| target | cases | accepted | input error / rejected | other | traceback | hang | "
        "message | internal error / lost claim | slowest case | peak RSS | time |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in results:
        o = s.outcomes
        fine = {"accepted", "input error", "rejected", *runner.FAILURES}
        other = ", ".join(f"{k} {v:,}" for k, v in sorted(o.items()) if k not in fine) or "0"
        refused = o["input error"] + o["rejected"]
        lines.append(
            f"| {s.target} | {s.cases:,} | {o['accepted']:,} | {refused:,} "
            f"| {other} | {o['traceback']} | {o['hang']} | {o['message']} | "
            f"{o['internal error'] + o['lost claim']} | {s.slowest:.2f} s | "
            f"{s.rss_after_mib:.0f} MiB | {s.seconds:.0f} s |"
        )
    lines.append(END)
    text = args.report.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    args.report.write_text(text[:start] + "\n".join(lines) + text[end:], encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
