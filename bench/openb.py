"""Packing quality on the Alibaba openb trace: drasat against the FGD paper's baselines.

    python -m bench.openb --traces DIR [--pod-list default ...] [--policies FGD,BestFit,...]
                          [--seeds 42-51] [--window 1 8 64] [--out DIR]

Replays each pod list as the FGD authors' simulator does (see bench/openb_trace.py), once per
policy and seed, and writes: curves.csv (allocation and fragmentation at every arrived-demand
percent 0..130, per run), summary.csv and summary.md (means at 100% arrival beside the published
figures of the traces' README), and one plot per pod list. Prints where it wrote them.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import math
import pathlib
import platform
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from bench import openb_sim, openb_trace, replay
from bench.openb_trace import FloatArray

NODE_LIST = "openb_node_list_gpu_node.csv"
POD_LISTS = (
    "default",
    "gpushare40",
    "gpushare60",
    "gpushare100",
    "multigpu20",
    "multigpu50",
    "gpuspec33",
    "cpu050",
)
AT = 100  # the arrived-demand percent the calibration compares


def parse_seeds(text: str) -> list[int]:
    """`42-51` or `42,45,47` or `42`."""
    seeds: list[int] = []
    for part in text.split(","):
        if "-" in part:
            low, high = part.split("-", 1)
            seeds.extend(range(int(low), int(high) + 1))
        elif part:
            seeds.append(int(part))
    return seeds


PolicyFactory = Callable[[], openb_sim.Policy]


def policy_factories(
    names: Sequence[str],
    *,
    random_ties: bool,
    windows: Sequence[int] = (),
    batch_seconds: float | None = None,
    chunk: int | None = None,
) -> dict[str, PolicyFactory]:
    """Name -> constructor; drasat's policies are imported only when asked for. With `windows`,
    each drasat policy runs through the controller's batch path once per window size
    (`drasat@w8`, bench/controller_batch.py) instead of online."""
    factories: dict[str, PolicyFactory] = {}
    for name in names:
        if name in openb_sim.BASELINES:
            cls = openb_sim.BASELINES[name]
            factories[name] = lambda cls=cls: cls(random_ties=random_ties)  # type: ignore[misc]
        elif name.startswith("drasat") and (windows or "@" in name):
            from bench import controller_batch

            windowed = [name] if "@" in name else [f"{name}@w{k}" for k in windows]
            for each in windowed:
                factories[each] = controller_batch.factory(each, time_limit_s=batch_seconds)
        elif name.startswith("drasat"):
            from bench import drasat_policy

            factories[name] = drasat_policy.factory(name, chunk=chunk)
        else:
            known = ", ".join([*openb_sim.BASELINES, "drasat", "drasat-frag"])
            raise SystemExit(f"unknown policy {name!r}; known: {known}")
    return factories


@dataclass(frozen=True)
class Run:
    pod_list: str
    policy: str
    seed: int
    alloc: FloatArray  # % of cluster GPUs allocated, per arrived percent 0..130
    frag: FloatArray  # % of cluster GPUs fragmented (w.r.t. the target workload)
    pods: int
    placed: int
    wall_s: float
    decision_p50_ms: float
    decision_p99_ms: float
    decisions_per_s: float
    decision_cpu_p50_ms: float = math.nan
    decision_cpu_p99_ms: float = math.nan


def run_one(
    nodes: openb_trace.Nodes,
    pods: openb_trace.Pods,
    pod_list: str,
    name: str,
    make: PolicyFactory,
    seed: int,
    args: argparse.Namespace,
) -> Run:
    rng = np.random.default_rng(seed)
    order = openb_trace.arrival_order(
        pods,
        nodes.total_gpus * openb_trace.MILLI,
        ratio=args.tune_ratio,
        rng=rng,
        shuffle=args.order == "shuffle",
    )
    if args.max_pods:
        order = order[: args.max_pods]
    target = openb_trace.target_workload(pods)
    bar = replay.ProgressBar(f"{pod_list} {name} {seed}") if not args.quiet else None
    policy = make()
    result = replay.replay(nodes, pods.take(order), policy, target, rng, bar)
    decided = result.decision_s[result.placed] * 1000
    decided_cpu = result.decision_cpu_s[result.placed] * 1000
    rate = getattr(policy, "decisions_per_s", None)  # drasat: solver calls cover many pods
    return Run(
        pod_list=pod_list,
        policy=name,
        seed=seed,
        alloc=replay.by_arrival(
            result.arrived_milli, result.used_milli.astype(np.float64), result.total_gpus
        ),
        frag=replay.by_arrival(result.arrived_milli, result.frag_milli, result.total_gpus),
        pods=len(order),
        placed=int(result.placed.sum()),
        wall_s=result.wall_s,
        decision_p50_ms=float(np.percentile(decided, 50)) if decided.size else math.nan,
        decision_p99_ms=float(np.percentile(decided, 99)) if decided.size else math.nan,
        decisions_per_s=float(rate())
        if callable(rate)
        else len(decided) / max(result.wall_s, 1e-9),
        decision_cpu_p50_ms=float(np.percentile(decided_cpu, 50)) if decided.size else math.nan,
        decision_cpu_p99_ms=float(np.percentile(decided_cpu, 99)) if decided.size else math.nan,
    )


def write_curves(runs: Sequence[Run], path: pathlib.Path) -> None:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["pod_list", "policy", "seed", "metric", *replay.PERCENTS])
        for r in runs:
            for metric, values in (("alloc", r.alloc), ("frag", r.frag)):
                out.writerow([r.pod_list, r.policy, r.seed, metric, *values])


def _mean(values: Sequence[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


def summarize(
    runs: Sequence[Run], published: dict[str, dict[str, float]]
) -> list[dict[str, str | float | int]]:
    """One row per pod list and policy: means over seeds at 100% arrival."""
    rows: list[dict[str, str | float | int]] = []
    keys = dict.fromkeys((r.pod_list, r.policy) for r in runs)
    for pod_list, policy in keys:
        mine = [r for r in runs if r.pod_list == pod_list and r.policy == policy]
        alloc = [float(r.alloc[AT]) for r in mine]
        ref = published.get(pod_list, {}).get(policy, math.nan)
        mean = _mean(alloc)
        rows.append(
            {
                "pod_list": pod_list,
                "policy": policy,
                "seeds": len(mine),
                "alloc_at_100": round(mean, 2),
                "alloc_std": round(float(np.std(alloc)), 2) if alloc else math.nan,
                "published": ref,
                "diff": round(mean - ref, 2) if not math.isnan(ref) else math.nan,
                "unallocated_at_100": round(100 - mean, 2),
                "frag_at_100": round(_mean([float(r.frag[AT]) for r in mine]), 2),
                "alloc_at_130": round(_mean([float(r.alloc[130]) for r in mine]), 2),
                "wall_s_per_replay": round(_mean([r.wall_s for r in mine]), 1),
                "decision_p50_ms": round(_mean([r.decision_p50_ms for r in mine]), 3),
                "decision_p99_ms": round(_mean([r.decision_p99_ms for r in mine]), 3),
                "decisions_per_s": round(_mean([r.decisions_per_s for r in mine]), 1),
                "decision_cpu_p50_ms": round(_mean([r.decision_cpu_p50_ms for r in mine]), 3),
                "decision_cpu_p99_ms": round(_mean([r.decision_cpu_p99_ms for r in mine]), 3),
            }
        )
    return rows


def write_summary(rows: Sequence[dict[str, str | float | int]], out: pathlib.Path) -> None:
    if not rows:
        return
    with (out / "summary.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows]
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def plot(runs: Sequence[Run], out: pathlib.Path) -> list[pathlib.Path]:
    """Allocation vs arrived demand, one line per policy (mean over seeds), per pod list:
    the whole range, and a zoom on where the policies part."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[pathlib.Path] = []
    for pod_list in dict.fromkeys(r.pod_list for r in runs):
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for policy in dict.fromkeys(r.policy for r in runs if r.pod_list == pod_list):
            mine = [r.alloc for r in runs if (r.pod_list, r.policy) == (pod_list, policy)]
            with warnings.catch_warnings():  # percents no record reached stay empty
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(np.array(mine), axis=0)
            label = f"{policy} ({len(mine)} seed{'s' if len(mine) > 1 else ''})"
            for ax in axes:
                ax.plot(replay.PERCENTS, mean, label=label)
        for ax, (x0, y0) in zip(axes, ((0, 0), (70, 75)), strict=True):
            ax.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=0.8)
            ax.set_xlabel("arrived GPU demand (% of cluster GPUs)")
            ax.set_ylabel("GPUs allocated (% of cluster GPUs)")
            ax.set_xlim(x0, 130)
            ax.set_ylim(y0, 100)
            ax.grid(alpha=0.3)
        axes[0].set_title(f"openb {pod_list}: allocation vs arrived demand")
        axes[1].set_title("zoom")
        axes[1].legend(loc="lower right", fontsize=8)
        path = out / f"alloc_{pod_list}.png"
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
    return written


def read_curves(path: pathlib.Path) -> list[Run]:
    """Runs back from a curves.csv (metrics only; timings stay in that run's summary)."""
    rows: dict[tuple[str, str, int], dict[str, FloatArray]] = {}
    with path.open(newline="") as f:
        for row in csv.reader(f):
            if row[0] == "pod_list":
                continue
            values = np.array([float(v) for v in row[4:]], dtype=np.float64)
            rows.setdefault((row[0], row[1], int(row[2])), {})[row[3]] = values
    nan = math.nan
    return [
        Run(pod_list, policy, seed, m["alloc"], m["frag"], 0, 0, nan, nan, nan, nan)
        for (pod_list, policy, seed), m in rows.items()
    ]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.openb", description=__doc__)
    parser.add_argument("--traces", type=pathlib.Path, required=True, help="the openb CSVs")
    parser.add_argument(
        "--pod-list", nargs="+", default=["default"], help=f"names or 'all': {', '.join(POD_LISTS)}"
    )
    parser.add_argument(
        "--policies",
        default=",".join(openb_sim.BASELINES),
        help="comma-separated: the baselines and/or drasat, drasat-frag",
    )
    parser.add_argument("--seeds", default="42-51", help="e.g. 42-51 (the paper's ten)")
    parser.add_argument("--tune-ratio", type=float, default=1.3, help="demand / GPU capacity")
    parser.add_argument(
        "--order",
        choices=("shuffle", "creation"),
        default="shuffle",
        help="shuffle (as the authors' runs, --shuffle-pod=true) or creation order",
    )
    parser.add_argument(
        "--ties",
        choices=("first", "random"),
        default="first",
        help="equal scores: first node in order (matches the published figures) or random",
    )
    parser.add_argument(
        "--window",
        type=int,
        nargs="+",
        default=[],
        metavar="K",
        help="drasat's policies through the controller's batch path, K arrivals per solver call "
        "(named drasat@wK); without it they run online",
    )
    parser.add_argument(
        "--batch-seconds",
        type=float,
        default=None,
        help="time limit of one batch call (default: the policy's timeLimitSeconds)",
    )
    parser.add_argument(
        "--batch-solver",
        default=None,
        metavar="MODULE:FUNCTION",
        help="the cycle solve to use instead of the solver's batch mode (the controller's)",
    )
    parser.add_argument(
        "--chunk",
        type=int,
        default=None,
        metavar="N",
        help="drasat's online policies: pods per solver call (default 1, so each pod's recorded "
        "time is its decision's latency; 64 for the -local policies, which estimate their "
        "workload from a call's pods)",
    )
    parser.add_argument("--max-pods", type=int, default=0, help="truncate each replay (smoke)")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/results/openb"))
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--report",
        nargs="+",
        type=pathlib.Path,
        default=None,
        help="replay nothing: merge these result folders' curves.csv into one summary and plots",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        return report(args)
    lists = list(POD_LISTS) if args.pod_list == ["all"] else args.pod_list
    if args.chunk is not None and args.chunk < 1:
        raise SystemExit(f"--chunk {args.chunk}: pods per call is a positive integer")
    if any(k < 1 for k in args.window):
        raise SystemExit(f"--window {args.window}: window sizes are positive integers")
    if args.batch_solver:
        from bench import controller_batch

        controller_batch.set_batch_solver(controller_batch.load_batch_solver(args.batch_solver))
    factories = policy_factories(
        args.policies.split(","),
        random_ties=args.ties == "random",
        windows=args.window,
        batch_seconds=args.batch_seconds,
        chunk=args.chunk,
    )
    nodes = openb_trace.read_nodes(args.traces / NODE_LIST)
    published = openb_trace.published_figures(args.traces / "README.md")
    args.out.mkdir(parents=True, exist_ok=True)
    runs: list[Run] = []
    for pod_list in lists:
        pods = openb_trace.read_pods(args.traces / f"openb_pod_list_{pod_list}.csv")
        for name, make in factories.items():
            for seed in parse_seeds(args.seeds):
                runs.append(run_one(nodes, pods, pod_list, name, make, seed, args))
        write_curves(runs, args.out / "curves.csv")  # after each list: partial results survive
        write_summary(summarize(runs, published), args.out)
    plots = [] if args.no_plot else plot(runs, args.out)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    (args.out / "machine.txt").write_text(
        f"{stamp}; {platform.platform()}; python {platform.python_version()}; "
        f"{len(runs)} replays; argv: {' '.join(sys.argv[1:] if argv is None else argv)}\n"
    )
    print((args.out / "summary.md").read_text(), end="")
    print(f"wrote {args.out}/curves.csv, summary.csv, summary.md, machine.txt", end="")
    print(f" and {len(plots)} plot(s)" if plots else "")
    return 0


def report(args: argparse.Namespace) -> int:
    runs = [run for folder in args.report for run in read_curves(folder / "curves.csv")]
    args.out.mkdir(parents=True, exist_ok=True)
    rows = summarize(runs, openb_trace.published_figures(args.traces / "README.md"))
    keep = ("pod_list", "policy", "seeds", "alloc_at_100", "alloc_std", "published", "diff")
    more = ("unallocated_at_100", "frag_at_100", "alloc_at_130")
    write_summary([{k: row[k] for k in (*keep, *more)} for row in rows], args.out)
    plots = [] if args.no_plot else plot(runs, args.out)
    print((args.out / "summary.md").read_text(), end="")
    print(f"wrote {args.out}/summary.csv, summary.md and {len(plots)} plot(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
