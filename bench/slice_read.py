"""The first read of a fleet's ResourceSlices: what the controller's first cycle pays per node.

    python -m bench.slice_read [--nodes 500] [--mig-share 1.0] [--repeat 3] [--profile]

The fleet is `bench.kube_alloc`'s (8 simulated GPUs a node; `--mig-share` of the nodes
MIG-mode A100-40GB / H100-80GB publishing every placement, the rest shareable H100-80GB), its
slices as drasat's node plugin publishes them, as the API server serves them. Each repeat reads
every node with a fresh `drasat.v1.slices.Reader` (nothing remembered: the controller's first
cycle) and reports wall and CPU seconds; `--profile` prints the cProfile of one more read by
cumulative time. No API server: the read is the controller's own work.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench import kube_alloc
from drasat.v1 import slices

Obj = dict[str, Any]


def fleet_slices(nodes: int, mig_share: float) -> list[Obj]:
    """The fleet's slices, each with the metadata the API server adds."""
    out = []
    for planned in kube_alloc.plan_fleet("r", nodes, mig_share, 0):
        uid = f"uid-{planned.name}"
        for i, found in enumerate(kube_alloc.node_slices(planned, uid)):
            found = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", **found}
            found["metadata"] = {
                **found.get("metadata", {}),
                "name": f"{planned.name}-{i}",
                "resourceVersion": str(len(out) + 1),
                "uid": f"{uid}-{i}",
            }
            out.append(found)
    return out


def read_once(objs: Sequence[Obj]) -> tuple[float, float, int]:
    """(wall s, CPU s, devices read) of one first read of every node."""
    wall, cpu = time.perf_counter(), time.process_time()
    read = slices.Reader().read(objs)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    problems = [f"{n}: {d.problem}" for n, d in read.items() if d.read is None]
    if problems:
        raise SystemExit("unreadable nodes: " + "; ".join(problems[:3]))
    return wall, cpu, sum(len(d.read.devices) for d in read.values() if d.read is not None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--mig-share", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    objs = fleet_slices(args.nodes, args.mig_share)
    devices = sum(len(o["spec"].get("devices") or []) for o in objs)
    print(f"{args.nodes} nodes, {len(objs)} slices, {devices} devices")
    # The informers' caches are long-lived: keep them out of the collector's walks, as a
    # controller that froze them after its sync would.
    gc.collect()
    gc.freeze()
    for i in range(args.repeat):
        wall, cpu, read = read_once(objs)
        print(f"read {i + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU ({read} devices read)")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        read_once(objs)
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(30)
        print(text.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
