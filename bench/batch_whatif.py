"""Batch what-if cost: one `solve(..., SolveParams(mode=Mode.batch))` over a cluster snapshot.

    python -m bench.batch_whatif [--nodes 5000] [--occupancy 0.5] [--claims 100 300 1000]
                                 [--mix single] [--time-limit 10] [--out bench/results/batch]

The snapshot is bench/solver_online.py's synthetic cluster (nodes x 8 GPUs, a quarter each
A100-40GB in MIG mode, A100-80GB, H100-80GB, T4, pre-filled to the occupancy); the batch is that
many pods of its pod mix, all known at once (`--mix single`: one claim per pod, so pods = claims;
`multi` adds two-claim pods, whose claims count twice). Batch mode places them in one CP-SAT model
warm-started from the online solution (see drasat.solver.placement): its time includes the
online pass, the per-pod node ranking, the model build and CP-SAT within the policy's batch time
limit (`--time-limit`, the policy default 10 s). Reports wall and CPU time (this process's, CP-SAT's
thread included: less affected by other processes on a shared machine), pods placed (batch and the
online pass alone), objective, bound, gap and status. Each configuration runs in a fresh process
(its peak RSS is its own; the snapshot's build is not timed). Prints where it wrote the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import pathlib
import random
import sys
import time
from collections.abc import Sequence

from bench import latency, solver_online
from drasat.api.policy import AllocationPolicySpec
from drasat.solver import Mode, Problem, SolveParams, solve


@dataclasses.dataclass(frozen=True)
class Config:
    nodes: int
    occupancy: float
    pods: int
    mix: str = "single"
    time_limit_s: float = 10.0
    seed: int = 7


def measure(config: Config) -> dict[str, object]:
    """One batch solve in this process."""
    built = time.perf_counter()
    states = tuple(solver_online.cluster(config.nodes, config.occupancy))
    pods = tuple(solver_online._pods(random.Random(config.seed), config.pods, mix=config.mix))
    build_s = time.perf_counter() - built
    policy = AllocationPolicySpec.model_validate(
        {"solver": {"timeLimitSeconds": config.time_limit_s}}
    )
    problem = Problem(nodes=states, pods=pods, policy=policy)
    started, cpu_started = time.perf_counter(), time.process_time()
    batch = solve(problem, SolveParams(mode=Mode.batch, explain=False))
    batch_s, batch_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    # After the batch (whose own online pass ran cold): pods the online mode alone places.
    online = solve(problem, SolveParams(mode=Mode.online, explain=False))
    return {
        "nodes": config.nodes,
        "gpus": config.nodes * 8,
        "occupancy": config.occupancy,
        "pods": len(pods),
        "claims": sum(len(p.claims) for p in pods),
        "time_limit_s": config.time_limit_s,
        "batch_wall_s": round(batch_s, 1),
        "batch_cpu_s": round(batch_cpu_s, 1),
        "placed": len(batch.placements),
        "placed_online": len(online.placements),
        "status": batch.status.value,
        "objective": batch.objective,
        "bound": batch.best_bound,
        "gap": round(batch.gap, 4) if batch.gap is not None else None,
        "snapshot_build_s": round(build_s, 1),
        "peak_rss_mib": round(latency._peak_rss_mib()),
    }


def measure_fresh(config: Config) -> dict[str, object]:
    """One configuration in a fresh Python process: its peak RSS is this configuration's."""
    return latency.run_child("bench.batch_whatif", dataclasses.asdict(config))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_whatif", description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=[5000])
    parser.add_argument("--occupancy", type=float, nargs="+", default=[0.5])
    parser.add_argument("--claims", type=int, nargs="+", default=[100, 300, 1000], help="pods")
    parser.add_argument("--mix", default="single", choices=sorted(solver_online.MIXES))
    parser.add_argument("--time-limit", type=float, default=10.0, help="batch time limit, s")
    parser.add_argument("--same-process", action="store_true", help="no fresh process")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/results/batch"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(Config(**json.loads(args.child)))))
        return 0
    rows = []
    for nodes, occupancy, pods in itertools.product(args.nodes, args.occupancy, args.claims):
        config = Config(nodes, occupancy, pods, args.mix, args.time_limit)
        rows.append(measure(config) if args.same_process else measure_fresh(config))
        print(rows[-1], file=sys.stderr, flush=True)
    latency.write_results(rows, args.out, "batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
