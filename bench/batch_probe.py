"""What the batch path changes against online placement, window by window, on the openb trace.

    python -m bench.batch_probe --traces DIR --pod-list default [--offsets 0.5,0.75]
                                [--window 8 64] [--batch-seconds 2] [--seed 42]

Replays the pod list online with drasat's default policy (as `bench.openb --policies drasat`,
64 arrivals per solver call) and, when the replay reaches each offset (a multiple of 64), takes
the next K arrivals as one window and solves it twice on that cluster state: online (each pod
decided alone, in order) and through the batch path (`bench.controller_batch.batch_solve`, what
`--window K` replays). Prints, per offset and window: pods each placed, pods the batch put on
another node than online, whether the batch returned exactly the online placement, its status
and wall time. A window replay can only differ from the online one where its windows do, so
this shows cheaply why `--window` results equal the online ones or not.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
from collections.abc import Sequence

import numpy as np

from bench import controller_batch, drasat_policy, openb, openb_trace, replay
from bench.openb_sim import Cluster, Policy
from bench.openb_trace import IntArray, Pods
from drasat.solver import Mode, Problem, SolveParams, SolverCache, solve

#: drasat online solves this many arrivals per call (as bench.openb); its NodeStates hold
#: exactly the pods before an offset when the offset is a multiple of it.
CHUNK = 64


def probe(
    traces: pathlib.Path,
    pod_list: str,
    offsets: Sequence[float],
    windows: Sequence[int],
    seconds: float | None,
    seed: int,
) -> list[dict[str, object]]:
    nodes = openb_trace.read_nodes(traces / openb.NODE_LIST)
    pods = openb_trace.read_pods(traces / f"openb_pod_list_{pod_list}.csv")
    rng = np.random.default_rng(seed)
    total = nodes.total_gpus * openb_trace.MILLI
    order = openb_trace.arrival_order(pods, total, ratio=1.3, rng=rng, shuffle=True)
    sequence = pods.take(order)
    rows: list[dict[str, object]] = []
    policy = drasat_policy.DrasatOnline("drasat", drasat_policy.POLICIES["drasat"], chunk=CHUNK)
    at = [round(o * sequence.count) if o < 1 else int(o) for o in offsets]
    at = [a - a % CHUNK for a in at]
    pending = sorted({a for a in at if a + max(windows) <= sequence.count})

    class Probing(Policy):
        """Places as drasat online; at each offset first compares the two paths."""

        def choose(
            self, cluster: Cluster, pods_: Pods, p: int, feasible: IntArray, g: np.random.Generator
        ) -> tuple[int, list[int]] | None:
            self._maybe_probe(cluster, p)
            return policy.choose(cluster, pods_, p, feasible, g)

        def unplaceable(self, cluster: Cluster, pods_: Pods, p: int) -> None:
            self._maybe_probe(cluster, p)
            policy.unplaceable(cluster, pods_, p)

        def _maybe_probe(self, cluster: Cluster, p: int) -> None:
            if not pending or p != pending[0]:
                return
            pending.pop(0)
            if policy.states is None:  # nothing decided yet: the empty cluster
                policy.states = drasat_policy.node_states(cluster.nodes)
                policy.index = {n: i for i, n in enumerate(cluster.nodes.names)}
                policy.shapes = drasat_policy.target_shapes(cluster.target)
            arrived = int(sequence.total_milli[:p].sum()) / (nodes.total_gpus * 10)
            for k in windows:
                requests = tuple(
                    drasat_policy.pod_request(sequence, q, f"{q:06d}") for q in range(p, p + k)
                )
                problem = Problem(
                    nodes=tuple(policy.states),
                    pods=requests,
                    policy=policy.policy,
                    workload=policy.shapes,
                )
                online = solve(problem, SolveParams(mode=Mode.online, explain=False))
                began = time.perf_counter()
                batch = controller_batch.batch_solve(problem, SolverCache(), seconds)
                wall = time.perf_counter() - began
                on = {x.pod: x.node for x in online.placements}
                ba = {x.pod: x.node for x in batch.placements}
                rows.append(
                    {
                        "pod_list": pod_list,
                        "offset": p,
                        "arrived_pct": round(arrived, 1),
                        "window": k,
                        "online_placed": len(on),
                        "batch_placed": len(ba),
                        "moved": sum(1 for pod in ba if pod in on and on[pod] != ba[pod]),
                        "identical": on == ba
                        and all(
                            a.allocations == b.allocations
                            for a, b in zip(online.placements, batch.placements, strict=True)
                        ),
                        "status": batch.status.value,
                        "batch_s": round(wall, 2),
                    }
                )

    replay.replay(
        nodes,
        sequence,
        Probing(),
        openb_trace.target_workload(pods),
        rng,
    )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_probe", description=__doc__)
    parser.add_argument("--traces", type=pathlib.Path, required=True)
    parser.add_argument("--pod-list", nargs="+", default=["default"])
    parser.add_argument(
        "--offsets",
        default="0.5,0.75",
        help="where to probe: arrival indices, or fractions of the sequence below 1 "
        "(rounded down to a multiple of 64)",
    )
    parser.add_argument("--window", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--batch-seconds", type=float, default=None)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--batch-solver", default=None, metavar="MODULE:FUNCTION")
    args = parser.parse_args(argv)
    if args.batch_solver:
        controller_batch.set_batch_solver(controller_batch.load_batch_solver(args.batch_solver))
    offsets = [float(o) for o in args.offsets.split(",") if o]
    columns = ["pod_list", "offset", "arrived_pct", "window", "online_placed", "batch_placed"]
    columns += ["moved", "identical", "status", "batch_s"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for pod_list in args.pod_list:
        for row in probe(
            args.traces, pod_list, offsets, args.window, args.batch_seconds, args.seed
        ):
            print("| " + " | ".join(str(row[c]) for c in columns) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
