"""Decision latency and throughput of `drasat.solver.solve` online, swept over cluster sizes.

    python -m bench.latency [--nodes 100 500 1000] [--occupancy 0.5 0.9] [--decisions 200]
                            [--out bench/results/latency]

Uses the synthetic clusters and pod mix of bench/solver_online.py (nodes x 8 GPUs: A100-40GB in
MIG mode, A100-80GB, H100-80GB, T4; pods asking for 1 or 2 whole GPUs, a MIG profile, a share,
or an A100 by selector): each decision is one online solve of one pod against every node, written
back into the node's NAS as the controller does (`--multi`: its mix with two-claim pods too).
Reports p50/p99/max per decision, decisions/s (decisions over their summed time) and the
process's peak RSS; prints where it wrote the table.
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import platform
import resource
import sys
import time
from collections.abc import Sequence

import numpy as np

from bench import solver_online


def measure(nodes: int, occupancy: float, decisions: int, multi: bool) -> dict[str, object]:
    started = time.perf_counter()
    run = solver_online.run(nodes, occupancy, decisions, False, multi=multi, rules=False)
    times = np.array(run) * 1000
    return {
        "nodes": nodes,
        "gpus": nodes * 8,
        "occupancy": occupancy,
        "pods": "single+multi-claim" if multi else "single-claim",
        "decisions": len(times),
        "p50_ms": round(float(np.percentile(times, 50)), 2),
        "p99_ms": round(float(np.percentile(times, 99)), 2),
        "max_ms": round(float(times.max()), 2),
        "decisions_per_s": round(1000 * len(times) / float(times.sum()), 1),
        "wall_s": round(time.perf_counter() - started, 1),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 500, 1000])
    parser.add_argument("--occupancy", type=float, nargs="+", default=[0.5, 0.9])
    parser.add_argument("--decisions", type=int, default=200)
    parser.add_argument("--multi", action="store_true", help="also pods with two claims")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/results/latency"))
    args = parser.parse_args(argv)
    rows = []
    for nodes in args.nodes:
        for occupancy in args.occupancy:
            rows.append(measure(nodes, occupancy, args.decisions, args.multi))
            print(rows[-1], file=sys.stderr, flush=True)
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows]
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines.append(f"\n{stamp}; {platform.platform()}; python {platform.python_version()}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latency.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {args.out}/latency.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
