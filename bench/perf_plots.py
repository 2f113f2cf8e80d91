"""The pictures of docs/PERFORMANCE.md §5.3 from the results of bench.timeline and bench.kube_alloc.

    python -m bench.perf_plots timeline RECORDS.json [--after RECORDS.json] --out PNG
    python -m bench.perf_plots churn RESULTS.json... --out PNG       # acceptance over time
    python -m bench.perf_plots cdf RESULTS.json... --out PNG         # creation -> bound CDFs
    python -m bench.perf_plots scale PROFILE.json... --out PNG       # the cycle by nodes

`timeline`: one pod's steps per allocator (the first pod of each run; `--after` adds the runs of
a second recording, e.g. the path before and after a change), on one time axis. `churn`: per
allocator and seed, the share of the claims accepted among the last 50 arrivals, over the arrival
time. `cdf`: the creation -> bound distribution of every churn claim bound (refused ones that
bound late included) and of every fill pod, per allocator, seeds pooled. `scale`: from
bench.controller_profile's results, per node count the median round's wall time by step
(stacked) and its CPU time (the steadier measure on a shared machine), one group per input.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

from bench import timeline

Obj = dict[str, Any]
COLOURS = {"kube": "tab:blue", "drasat": "tab:orange", "drasat-ungated": "tab:red"}
#: Steps drawn with a label (the rest are dots).
LABELLED = (
    "claim created",
    "first scheduler attempt failed",
    "solve starts",
    "status.allocation written",
    "gate lifted",
    "bound",
)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def rolling_acceptance(
    claims: Sequence[Sequence[Any]], window: int = 50
) -> list[tuple[float, float]]:
    """(arrival s, share accepted among the last `window` arrivals) after each arrival."""
    out = []
    recent: list[bool] = []
    for at, accepted, _ in claims:
        recent.append(bool(accepted))
        recent = recent[-window:]
        out.append((float(at), sum(recent) / len(recent)))
    return out


def cdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    ordered = sorted(values)
    return ordered, [(i + 1) / len(ordered) for i in range(len(ordered))]


def plot_timeline(runs: Sequence[tuple[str, Obj]], out: pathlib.Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.9 * len(runs)))
    for row, (_label, run) in enumerate(runs):
        log = timeline.parse_log(run.get("log", []))
        rows = timeline.steps(run["records"], log, run["pods"][0], run["namespace"])
        reached = timeline.milestones(rows)
        end = reached.get("bound", max(s.t for s in rows))
        colour = COLOURS.get(run["allocator"], "tab:gray")
        ax.hlines(row, 0, 1000 * end, colour, linewidth=2)
        ax.plot([1000 * s.t for s in rows], [row] * len(rows), "|", color=colour, markersize=10)
        for i, name in enumerate(n for n in LABELLED if n in reached):
            ax.annotate(
                name,
                (1000 * reached[name], row),
                xytext=(0, (8, -14, 18)[i % 3]),
                textcoords="offset points",
                fontsize=7,
                ha="center",
            )
        ax.annotate(f"{1000 * end:.0f} ms", (1000 * end, row), xytext=(6, -3),
                    textcoords="offset points", fontsize=8)  # fmt: skip
    ax.set_yticks(range(len(runs)), [label for label, _ in runs])
    ax.set_ylim(-0.7, len(runs) - 0.3)
    ax.invert_yaxis()
    ax.set_xlabel("ms since the pod's create call")
    ax.set_title("One pod, creation to binding, real v1.37 control plane (idle, one pod at a time)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_churn(results: Sequence[Obj], out: pathlib.Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    for data in results:
        seed = _seed(data)
        for a in data["allocators"]:
            churn = a.get("churn")
            if not churn or not churn.get("claims_timeline"):
                continue
            points = rolling_acceptance(churn["claims_timeline"])
            name = a["allocator"]
            ax.plot(
                [p[0] for p in points],
                [100 * p[1] for p in points],
                color=COLOURS.get(name, "tab:gray"),
                alpha=0.8,
                linewidth=1,
                label=f"{name} seed {seed}: {100 * churn['accepted_share']:.1f}%",
            )
    ax.set_xlabel("arrival time (s)")
    ax.set_ylabel("accepted among the last 50 arrivals (%)")
    ax.set_ylim(0, 100)
    ax.set_title("MIG churn on the real control plane, both allocators in one run per seed")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_cdf(results: Sequence[Obj], out: pathlib.Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    pooled: dict[tuple[str, str], list[float]] = {}
    for data in results:
        for a in data["allocators"]:
            churn = a.get("churn") or {}
            bound = [c[2] for c in churn.get("claims_timeline", []) if c[2] is not None]
            if bound:
                pooled.setdefault((a["allocator"], "churn"), []).extend(bound)
            fill = (a.get("fill") or {}).get("latencies_s")
            if fill:
                pooled.setdefault((a["allocator"], "fill"), []).extend(fill)
    for (name, phase), values in sorted(pooled.items()):
        xs, ys = cdf(values)
        style = "-" if phase == "churn" else "--"
        colour = COLOURS.get(name, "tab:gray")
        label = f"{name} {phase} ({len(xs)})"
        ax.step(xs, ys, where="post", color=colour, linestyle=style, label=label)
    ax.set_xscale("log")
    ax.set_xlabel("creation -> bound (s, log)")
    ax.set_ylabel("share of the bound pods")
    ax.axvline(5.0, color="gray", linewidth=0.8, linestyle=":")
    ax.set_title("Creation -> bound on the real control plane (churn: 5 s patience, dotted)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


#: bench.controller_profile's steps of a round, in cycle order.
SCALE_STEPS = ("snapshot_s", "pending_s", "nodes_s", "allocate_s")


def median_rounds(step: Obj) -> Obj:
    """Each timing's median over a controller_profile step's rounds (the first read apart)."""
    rounds = step["rounds"]
    return {
        key: sorted(r[key] for r in rounds)[len(rounds) // 2]
        for key in (*SCALE_STEPS, "total_s", "cpu_s")
    }


def plot_scale(results: Sequence[tuple[str, Obj]], out: pathlib.Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(1, len(results))
    colours = ("tab:blue", "tab:orange", "tab:green", "tab:red")
    labels: list[str] = []
    for index, (_, data) in enumerate(results):
        steps = sorted(data["steps"], key=lambda s: s["nodes"])
        for position, step in enumerate(steps):
            mid = median_rounds(step)
            x = position + index * width
            bottom = 0.0
            for colour, key in zip(colours, SCALE_STEPS, strict=True):
                label = key.removesuffix("_s") if position == 0 and index == 0 else None
                ax.bar(x, mid[key], width * 0.9, bottom=bottom, color=colour, label=label)
                bottom += mid[key]
            ax.plot(x, mid["cpu_s"], "k_", markersize=14, label="CPU" if x == 0 else None)
            if index == 0:
                labels.append(str(step["nodes"]))
    ax.set_xticks([i + width * (len(results) - 1) / 2 for i in range(len(labels))], labels)
    ax.set_xlabel("nodes x 8 GPUs (64 pending pods a cycle, half the GPUs held)")
    ax.set_ylabel("seconds a cycle (median round)")
    ax.set_title("The controller's cycle without an API server: wall by step, CPU (black)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def _seed(data: Obj) -> str:
    argv = data.get("argv", [])
    return argv[argv.index("--seed") + 1] if "--seed" in argv else "1"


def _read(path: pathlib.Path) -> Obj:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise SystemExit(f"error: {path}: {error}") from None
    if not isinstance(found, dict):
        raise SystemExit(f"error: {path}: not a results object")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.perf_plots",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("what", choices=("timeline", "churn", "cdf", "scale"))
    parser.add_argument("inputs", nargs="+", type=pathlib.Path)
    parser.add_argument("--after", type=pathlib.Path, default=None)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args(argv)
    data = [_read(p) for p in args.inputs]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.what == "timeline":
        runs = [(r["allocator"], r) for d in data for r in d["runs"]]
        if args.after is not None:
            runs += [(f"{r['allocator']} (after)", r) for r in _read(args.after)["runs"]]
        plot_timeline(runs, args.out)
    elif args.what == "churn":
        plot_churn(data, args.out)
    elif args.what == "scale":
        plot_scale(
            [(str(p.parent.name), d) for p, d in zip(args.inputs, data, strict=True)], args.out
        )
    else:
        plot_cdf(data, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
