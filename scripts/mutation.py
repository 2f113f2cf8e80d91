"""Mutation testing of the v1 translation (`make mutation`): cosmic-ray's mutants of
drasat/v1/{cel,requests,variants,results}.py and controller/v1inputs.py, a reproducible sample of
them, each run against the fast tests of those modules (tests/mutation/fast_tests.py).

cosmic-ray rewrites the mutated file on disk, so everything happens in a copy of the tree under
the work folder (`build/mutation` by default), never in the checkout: by default the files of a
commit (HEAD), so the score names the code it measured; `--worktree` copies the working tree
instead (tracked and untracked files, not ignored ones), for trying new tests before committing.

Steps: copy; `cosmic-ray init` (every mutant); keep a seeded sample of N (the rest marked
skipped in the session); run the tests once unmutated (a test failing there is left out and
reported) and once with a module broken on purpose (the tests must see the copy); each sampled
mutant with cosmic-ray's `mutate_and_test` and a per-mutant timeout; the score per file and every
survivor with its line. `--rerun-survivors` runs the last session's survivors again against the
tests of the commit (or working tree) now, the mutated modules kept as the session measured them
(the mutants are theirs; the report says which modules changed since), to check new tests
quickly.
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

from cosmic_ray.mutating import mutate_and_test
from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkItem, WorkResult

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "tests" / "mutation" / "cosmic-ray.toml"
HARNESS = "tests/mutation/fast_tests.py"


def _config() -> dict[str, object]:
    with CONFIG.open("rb") as f:
        table: dict[str, object] = tomllib.load(f)["cosmic-ray"]
    return table


def _modules() -> list[str]:
    return [str(m) for m in _config()["module-path"]]  # type: ignore[attr-defined]


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout


def copy_tree(tree: Path, commit: str | None) -> str:
    """The tree's copy (a commit's files, or the working tree's); what it is, in words. The
    harness's own test command comes from the checkout, so an older commit can be measured."""
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    (tree / HARNESS).parent.mkdir(parents=True)
    shutil.copy2(REPO / HARNESS, tree / HARNESS)
    if commit is not None:
        sha = _git("rev-parse", "--short", commit).strip()
        archive = subprocess.run(
            ["git", "archive", sha], cwd=REPO, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        shutil.copy2(REPO / HARNESS, tree / HARNESS)
        return f"commit {sha}"
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in listed:
        source = REPO / name
        if name and source.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    sha = _git("rev-parse", "--short", "HEAD").strip()
    return f"the working tree (HEAD {sha} with uncommitted changes)"


def write_config(work: Path) -> Path:
    text = CONFIG.read_text().replace("{python}", sys.executable)
    path = work / "cosmic-ray.toml"
    path.write_text(text)
    return path


def test_command() -> list[str]:
    return [sys.executable, HARNESS]


def _sort_key(item: WorkItem) -> tuple[object, ...]:
    m = item.mutations[0]
    return (str(m.module_path), m.start_pos, m.end_pos, m.operator_name, m.occurrence)


def _annotation_spans(path: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where the module's annotations are ((line, column) from, to). Every mutated module
    imports `from __future__ import annotations`, so an annotation is never evaluated (these
    are dataclasses, not pydantic models): a mutant inside one (`X | None` -> `X + None`) is
    equivalent to the original by construction."""
    spans = []
    for node in ast.walk(ast.parse(path.read_text())):
        found: list[ast.expr | None] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append(node.returns)
        elif isinstance(node, ast.arg | ast.AnnAssign):
            found.append(node.annotation)
        for a in found:
            if a is not None and a.end_lineno is not None and a.end_col_offset is not None:
                spans.append(((a.lineno, a.col_offset), (a.end_lineno, a.end_col_offset)))
    return spans


def in_annotation(item: WorkItem, tree: Path, cache: dict[str, list[Any]]) -> bool:
    m = item.mutations[0]
    path = str(m.module_path)
    if path not in cache:
        cache[path] = _annotation_spans(tree / path)
    start = tuple(m.start_pos)
    return any(begin <= start < end for begin, end in cache[path])


def sample(db: WorkDB, size: int, seed: int, tree: Path) -> tuple[list[WorkItem], int]:
    """Keep `size` work items chosen by `seed` (the same tree gives the same sample) among those
    outside annotations; mark the others skipped, as cosmic-ray's filters do. Also: how many
    were inside annotations."""
    cache: dict[str, list[Any]] = {}
    every = sorted(db.work_items, key=_sort_key)
    items = [i for i in every if not in_annotation(i, tree, cache)]
    annotations = [i.job_id for i in every if in_annotation(i, tree, cache)]
    db.set_multiple_results(annotations, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
    chosen = set(random.Random(seed).sample(range(len(items)), min(size, len(items))))
    skipped = [item.job_id for i, item in enumerate(items) if i not in chosen]
    db.set_multiple_results(skipped, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
    return [item for i, item in enumerate(items) if i in chosen], len(annotations)


def baseline(tree: Path) -> list[str]:
    """Run the tests on the unmutated copy; the tests that fail there (left out of the run)."""
    done = subprocess.run(
        [*test_command(), "--baseline"], cwd=tree, capture_output=True, text=True, check=False
    )
    failing = (tree / "tests" / "mutation" / "failing-before.txt").read_text().split()
    if done.returncode != 0 and not failing:
        sys.exit(f"the fast tests do not run on the unmutated copy:\n{done.stdout[-3000:]}")
    return failing


def canary(tree: Path) -> None:
    """The tests must import the copy: with a module of it broken, they must fail."""
    module = tree / _modules()[0]
    original = module.read_text()
    module.write_text('raise RuntimeError("mutation canary")\n' + original)
    try:
        done = subprocess.run(test_command(), cwd=tree, capture_output=True, check=False)
    finally:
        module.write_text(original)
    if done.returncode == 0:
        sys.exit("the tests did not notice a broken module in the copy: they import another tree")


def run(db: WorkDB, items: list[WorkItem], tree: Path, timeout: float) -> None:
    command = " ".join(test_command())
    started = time.monotonic()
    here = Path.cwd()
    os.chdir(tree)  # the session's module paths are relative to the copy
    try:
        for n, item in enumerate(items, 1):
            result = mutate_and_test(item.mutations, command, timeout)
            db.set_result(item.job_id, result)
            m = item.mutations[0]
            elapsed = time.monotonic() - started
            left = elapsed / n * (len(items) - n)
            outcome = (result.test_outcome or result.worker_outcome).value
            print(
                f"[{n}/{len(items)}, {elapsed / 60:.1f} min, ~{left / 60:.0f} min left] "
                f"{outcome}: {m.module_path}:{m.start_pos[0]} {m.operator_name}",
                flush=True,
            )
    finally:
        os.chdir(here)


def _mutated_line(diff: str | None) -> str:
    for line in (diff or "").splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            return line[1:].strip()
    return "?"


def report(db: WorkDB, work: Path) -> str:
    tally: dict[str, Counter[str]] = {m: Counter() for m in _modules()}
    survivors = []
    cache: dict[str, list[Any]] = {}
    annotated = 0
    for item, result in db.completed_work_items:
        if result.worker_outcome == WorkerOutcome.SKIPPED:
            continue
        if in_annotation(item, work / "tree", cache):
            annotated += 1  # a session sampled before annotations were left out
            continue
        m = item.mutations[0]
        outcome = (result.test_outcome or result.worker_outcome).value
        if result.worker_outcome == WorkerOutcome.NO_TEST:
            outcome = "no mutation"
        tally.setdefault(str(m.module_path), Counter())[outcome] += 1
        if result.test_outcome == TestOutcome.SURVIVED:
            survivors.append((str(m.module_path), m.start_pos[0], m.operator_name, result.diff))
    lines = [f"{'file':28} {'mutants':>7} {'killed':>6} {'survived':>8} {'other':>5} {'score':>6}"]
    total: Counter[str] = Counter()
    for module, counts in tally.items():
        total.update(counts)
        lines.append(_row(module, counts))
    lines.append(_row("all", total))
    if annotated:
        lines.append(f"(and {annotated} run inside annotations: equivalent, not scored)")
    lines.append("")
    lines.append(f"survivors ({len(survivors)}):")
    for module, line, operator, diff in sorted(survivors):
        lines.append(f"  {module}:{line} {operator.removeprefix('core/')}: {_mutated_line(diff)}")
    info = work / "info.txt"
    if info.is_file():
        lines = [info.read_text().rstrip(), "", *lines]
    return "\n".join(lines)


def _row(module: str, counts: Counter[str]) -> str:
    killed, survived = counts[TestOutcome.KILLED.value], counts[TestOutcome.SURVIVED.value]
    other = sum(counts.values()) - killed - survived
    scored = killed + survived
    score = f"{100 * killed / scored:.0f}%" if scored else "-"
    return f"{module:28} {sum(counts.values()):7} {killed:6} {survived:8} {other:5} {score:>6}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=300, help="mutants run (default 300)")
    parser.add_argument("--seed", type=int, default=22, help="the sample's seed (default 22)")
    parser.add_argument("--commit", default="HEAD", help="the commit measured (default HEAD)")
    parser.add_argument("--worktree", action="store_true", help="measure the working tree")
    parser.add_argument("--work", type=Path, default=REPO / "build" / "mutation")
    parser.add_argument("--rerun-survivors", action="store_true")
    parser.add_argument("--report", action="store_true", help="print the last session's report")
    args = parser.parse_args()
    work: Path = args.work.resolve()
    tree, session = work / "tree", work / "session.sqlite"
    timeout = float(_config()["timeout"])  # type: ignore[arg-type]

    if args.report:
        with use_db(str(session), WorkDB.Mode.open) as db:
            print(report(db, work))
        return
    if args.rerun_survivors:
        # The mutants are the session's: its modules are kept, the tests are the tree's now.
        measured = {m: (tree / m).read_bytes() for m in _modules()}
        what = copy_tree(tree, None if args.worktree else args.commit)
        changed = [m for m, text in measured.items() if (tree / m).read_bytes() != text]
        for module, text in measured.items():
            (tree / module).write_bytes(text)
        failing = baseline(tree)
        with use_db(str(session), WorkDB.Mode.open) as db:
            again = [
                i for i, r in db.completed_work_items if r.test_outcome == TestOutcome.SURVIVED
            ]
            print(f"{len(again)} survivors run again", flush=True)
            run(db, again, tree, timeout)
            note = (
                f"survivors run again with the tests of {what}, "
                f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} (modules kept as "
                f"measured; changed there since: {', '.join(changed) or 'none'}; failing "
                f"unmutated, left out: {', '.join(failing) or 'none'})\n"
            )
            with (work / "info.txt").open("a") as info:
                info.write(note)
            report_text = report(db, work)
        (work / "report.txt").write_text(report_text + "\n")
        print(report_text)
        return

    started = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    what = copy_tree(tree, None if args.worktree else args.commit)
    config = write_config(work)
    session.unlink(missing_ok=True)
    subprocess.run(
        [str(Path(sys.executable).parent / "cosmic-ray"), "init", str(config), str(session)],
        cwd=tree,
        check=True,
    )
    failing = baseline(tree)
    canary(tree)
    with use_db(str(session), WorkDB.Mode.open) as db:
        total = db.num_work_items
        items, annotations = sample(db, args.sample, args.seed, tree)
        (work / "info.txt").write_text(
            f"measured: {what}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
            f"mutants: {len(items)} of {total - annotations} (and {annotations} inside "
            f"annotations, equivalent, left out), seed {args.seed}; tests: "
            f"{' '.join(test_command()[1:])} (failing unmutated, left out: "
            f"{', '.join(failing) or 'none'})\n"
        )
        run(db, items, tree, timeout)
        text = report(db, work)
    minutes = (time.monotonic() - started) / 60
    text += f"\n\nrun time: {minutes:.1f} min"
    (work / "report.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
