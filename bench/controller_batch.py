"""The v1 controller's batch path as a policy of the openb replay: `--window K`.

The controller gathers the pods pending in one cycle and solves them together in one solver
call (issue 15 item 2). Here the replay's arrivals stand in for the pending pods: when a pod
arrives and has no decision yet, it and the next K - 1 arrivals form one window, solved in one
`batch_solve` call; the replay then applies the window's decisions in arrival order, and the
allocation metric is still taken after every pod, so a window's look-ahead is the only thing
that differs from online placement. K = 1 is a one-pod batch solve per arrival.

`batch_solve` is the single function that stands for the controller's cycle solve. Until the
controller exists it is `drasat.solver.solve` in batch mode with the policy's budget; when the
controller exposes its own cycle function, `set_batch_solver` (or `--batch-solver
module:function` on the command line) swaps it in and nothing else changes.

    python -m bench.controller_batch RESULT_FOLDER... [--plot PNG]

merges bench.openb result folders into the table of each window against FGD.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import math
import pathlib
import sys
from collections.abc import Callable

from bench.drasat_policy import LOCAL, POLICIES, DrasatOnline
from bench.openb_sim import Policy
from drasat.api.policy import AllocationPolicySpec
from drasat.solver import Mode, Problem, Solution, SolveParams, SolverCache, solve

#: One call of the controller's cycle: the window's pods on the current cluster -> placements.
BatchSolver = Callable[[Problem, SolverCache, float | None], Solution]

#: `drasat@w8`: the drasat policy `drasat` through the batch path with windows of 8 pods.
WINDOW_MARK = "@w"


def solver_batch(problem: Problem, cache: SolverCache, time_limit_s: float | None) -> Solution:
    """The solver's batch mode as the controller will call it: one model for every pod of the
    window (warm-started from the online placement, which it never falls below), no
    explanations (the controller explains only pods that stay unplaced), the policy's budget
    unless `time_limit_s` overrides it."""
    params = SolveParams(mode=Mode.batch, explain=False, cache=cache, time_limit_s=time_limit_s)
    return solve(problem, params)


_batch_solver: BatchSolver = solver_batch


def set_batch_solver(function: BatchSolver) -> None:
    """Replace the cycle solve (the controller's own, once it exists) for every later replay."""
    global _batch_solver
    _batch_solver = function


def batch_solve(problem: Problem, cache: SolverCache, time_limit_s: float | None) -> Solution:
    """One cycle solve with the current batch solver."""
    return _batch_solver(problem, cache, time_limit_s)


def load_batch_solver(spec: str) -> BatchSolver:
    """`package.module:function` -> that function (for `--batch-solver`)."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise SystemExit(f"--batch-solver {spec!r}: expected package.module:function")
    try:
        function = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"--batch-solver {spec!r}: {exc}") from None
    if not callable(function):
        raise SystemExit(f"--batch-solver {spec!r}: not a function")
    return function  # type: ignore[no-any-return]


class DrasatWindow(DrasatOnline):
    """drasat's placement through the batch path, `window` arrivals per solver call."""

    def __init__(
        self,
        name: str,
        policy: AllocationPolicySpec,
        *,
        window: int,
        target: bool = True,
        time_limit_s: float | None = None,
    ) -> None:
        super().__init__(name, policy, chunk=window, target=target)
        self.time_limit_s = time_limit_s

    def solve_chunk(self, problem: Problem) -> Solution:
        return batch_solve(problem, self.cache, self.time_limit_s)


def parse_name(name: str) -> tuple[str, int]:
    """`drasat@w8` -> (`drasat`, 8)."""
    base, _, window = name.partition(WINDOW_MARK)
    if not window.isdigit() or int(window) < 1:
        raise SystemExit(f"policy {name!r}: the window must be a positive integer, e.g. drasat@w8")
    return base, int(window)


def factory(name: str, *, time_limit_s: float | None = None) -> Callable[[], Policy]:
    """`drasat@wK` (any drasat policy, `-local` too) -> a DrasatWindow constructor."""
    base, window = parse_name(name)
    policy = base.removesuffix(LOCAL)
    if policy not in POLICIES:
        known = ", ".join(f"{p}{WINDOW_MARK}K" for p in POLICIES)
        raise SystemExit(f"unknown drasat policy {name!r}; known: {known}")
    target = not base.endswith(LOCAL)
    return lambda: DrasatWindow(
        name, POLICIES[policy], window=window, target=target, time_limit_s=time_limit_s
    )


# --- the report: windows against FGD -------------------------------------------------------

#: The issue's target: at least 10% fewer unallocated GPUs than FGD at 100% arrival.
TARGET = 0.9


def read_summaries(folders: list[pathlib.Path]) -> list[dict[str, str]]:
    """The rows of each folder's summary.csv (bench.openb's), later folders overriding
    earlier ones for the same pod list and policy."""
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for folder in folders:
        if not (folder / "summary.csv").is_file():
            raise SystemExit(f"{folder}: no summary.csv there (not a bench.openb result folder)")
        with (folder / "summary.csv").open(newline="") as f:
            for row in csv.DictReader(f):
                rows[(row["pod_list"], row["policy"])] = row
    return list(rows.values())


def window_of(policy: str) -> int | None:
    """The window of `drasat@wK`; 1 for online `drasat` (each pod decided alone); None for
    anything else."""
    if WINDOW_MARK in policy:
        return parse_name(policy)[1]
    return 1 if policy == "drasat" else None


def _window_columns(rows: list[dict[str, str]]) -> list[str]:
    """drasat's policies by window: online `drasat` first, then `drasat@w1`, `@w8`, ..."""
    return sorted(
        {r["policy"] for r in rows if window_of(r["policy"]) is not None},
        key=lambda p: (window_of(p) or 0, WINDOW_MARK in p),
    )


def window_table(rows: list[dict[str, str]]) -> str:
    """Markdown: per pod list, FGD's unallocated GPUs at 100% and each window's, relative to
    FGD, against the target."""
    lists = list(dict.fromkeys(r["pod_list"] for r in rows))
    columns = _window_columns(rows)
    head = ["pod list", "FGD unallocated @100", "target (≤ 0.9 × FGD)"]
    for policy in columns:
        label = "drasat online (K = 1)" if policy == "drasat" else policy
        head += [f"{label} unallocated", "vs FGD", "s per replay"]
    head += ["target met at"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for pod_list in lists:
        mine = {r["policy"]: r for r in rows if r["pod_list"] == pod_list}
        if "FGD" not in mine:
            continue
        fgd = float(mine["FGD"]["unallocated_at_100"])
        cells = [pod_list, f"{fgd:.2f}", f"{TARGET * fgd:.2f}"]
        met = []
        for policy in columns:
            row = mine.get(policy)
            if row is None:
                cells += ["not run", "", ""]
                continue
            value = float(row["unallocated_at_100"])
            change = (value - fgd) / fgd * 100 if fgd else math.nan
            cells += [f"{value:.2f}", f"{change:+.1f}%", row.get("wall_s_per_replay", "")]
            if value <= TARGET * fgd:
                met.append(policy)
        cells.append(", ".join(met) or "**missed**")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_windows(rows: list[dict[str, str]], path: pathlib.Path) -> None:
    """Bars: unallocated GPUs at 100% per pod list, FGD and each window, the target as ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lists = [
        p
        for p in dict.fromkeys(r["pod_list"] for r in rows)
        if any(r["pod_list"] == p and r["policy"] == "FGD" for r in rows)
    ]
    policies = ["FGD", *_window_columns(rows)]
    value = {(r["pod_list"], r["policy"]): float(r["unallocated_at_100"]) for r in rows}
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(lists)), 4.5))
    width = 0.8 / len(policies)
    for i, policy in enumerate(policies):
        xs = [j + (i - (len(policies) - 1) / 2) * width for j in range(len(lists))]
        ys = [value.get((p, policy), math.nan) for p in lists]
        ax.bar(xs, ys, width, label="drasat online (K = 1)" if policy == "drasat" else policy)
    for j, p in enumerate(lists):
        target = TARGET * value[(p, "FGD")]
        ax.plot([j - 0.45, j + 0.45], [target, target], color="black", linewidth=1, linestyle="--")
    ax.set_xticks(range(len(lists)), lists, rotation=20)
    ax.set_ylabel("unallocated GPUs at 100% arrival (% of cluster)")
    ax.set_title("openb: drasat through the controller's batch path vs FGD (dashed: 0.9 × FGD)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.controller_batch",
        description="Merge bench.openb result folders (FGD, drasat, drasat@wK) into the "
        "window table against FGD and its plot.",
    )
    parser.add_argument("folders", nargs="+", type=pathlib.Path)
    parser.add_argument("--plot", type=pathlib.Path, default=None)
    args = parser.parse_args(argv)
    rows = read_summaries(args.folders)
    print(window_table(rows), end="")
    if args.plot:
        plot_windows(rows, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
