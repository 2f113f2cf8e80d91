"""drasat's v1 controller alone at scale, on the real control plane: how its cost grows with nodes.

    python -m bench.controller_scale [--kubeconfig K] [--nodes 250,500,1000,2000]
                                     [--rounds 5 --pods 64] [--idle 5] [--profile] [--out DIR]
                                     [--full-settle-every 1,30]

The fleet of `bench.kube_alloc` (8 simulated GPUs a node; a quarter of the nodes MIG-mode
A100-40GB or H100-80GB publishing the whole GPU and every MIG placement with their counters, the
rest H100-80GB shareable by capacity) is grown step by step to each `--nodes` count, each new
node's NodeAllocationState created Ready from its slices (`bench.drasat_allocator`). At each
step a fresh controller (`V1Controller`, in this process so each cycle can be timed) starts:

- **informer sync**: `start()` until every informer (slices, nodes, NASes, claims, pods,
  classes) has listed;
- **first cycle**: the first `cycle()`, no pod pending (reads every node's slices once);
- **idle cycle**: a `cycle()` with nothing pending (what every resync costs), then `--idle`
  more once the informers hold what the first ones wrote (their p50);
- **busy cycles**: `--rounds` times, `--pods` gated pods of the fill mix (whole GPUs, 2 and
  4 GPUs, MIG by profile, shares) are created, and once the controller's informers hold their
  claims one `cycle()` places them (solve, ledger, claim statuses, gates lifted; kube-scheduler
  binds them meanwhile). Per cycle: wall time and the solve's share (the controller's
  `solver_seconds` histogram, which times `v1.allocate`).
- **RSS**: the process's resident memory after the sync, less before the controller existed.

`--full-settle-every` measures a fresh controller for each value on the same fleet, back to back
(1: every cycle settles every node's ledger, as before cycles settled only what changed).
Results go to `--out` (results.json, summary.md).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import datetime
import gc
import io
import json
import pathlib
import platform
import pstats
import random
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import kubernetes

from bench import drasat_allocator, kube_alloc
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube.client import KubeClient, load_configuration

Obj = dict[str, Any]


def rss_mib() -> float:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def solver_seconds(controller: V1Controller) -> float:
    value = controller.metrics.registry.get_sample_value(
        "drasat_controller_solver_seconds_sum", {"kind": "v1-cycle"}
    )
    return float(value or 0.0)


def timed_cycle(controller: V1Controller) -> tuple[float, float]:
    """(wall s, solve s) of one cycle."""
    solved = solver_seconds(controller)
    started = time.perf_counter()
    controller.cycle()
    return time.perf_counter() - started, solver_seconds(controller) - solved


def _cycle_until(controller: V1Controller, done: threading.Event) -> None:
    while not done.wait(0.5):
        controller.cycle()


def measure(
    api: kubernetes.client.ApiClient,
    kubeconfig: pathlib.Path,
    nodes: int,
    args: argparse.Namespace,
    run: str,
    full_settle_every: int | None = None,
) -> Obj:
    gc.collect()
    before = rss_mib()
    client = KubeClient(load_configuration(str(kubeconfig)), request_timeout=120)
    config = V1Config(namespace=args.drasat_namespace, batch_max=args.pods)
    if full_settle_every is not None:
        config = dataclasses.replace(config, full_settle_every=full_settle_every)
    controller = V1Controller(client, config)
    out: Obj = {"nodes": nodes, "full_settle_every": config.full_settle_every}
    done = threading.Event()
    try:
        started = time.perf_counter()
        controller.start(sync_timeout_s=1800, cycles=False)
        out["sync_s"] = round(time.perf_counter() - started, 2)
        gc.collect()
        out["rss_mib"] = round(rss_mib() - before, 1)
        first, _ = timed_cycle(controller)
        idle, _ = timed_cycle(controller)
        out["first_cycle_s"], out["idle_cycle_s"] = round(first, 3), round(idle, 3)
        # More idle cycles once the informers hold what the first ones wrote: the steady cost
        # of a resync or an unrelated event.
        time.sleep(2)
        idles = sorted(timed_cycle(controller)[0] for _ in range(args.idle))
        out["idle_cycles_s"] = [round(w, 3) for w in idles]
        out["idle_cycle_p50_s"] = round(kube_alloc._percentile(idles, 50), 3)
        kube_alloc.say(f"{nodes} nodes: sync {out['sync_s']}s, first cycle {first:.2f}s")
        shapes = kube_alloc.fill_shapes()
        rng = random.Random(nodes)
        core = kubernetes.client.CoreV1Api(api)
        cycles: list[tuple[float, float]] = []
        profile = cProfile.Profile() if args.profile else None
        with kube_alloc.namespace(api, f"{run}-n{nodes}-f{config.full_settle_every}") as ns:
            kube_alloc._create_templates(api, ns, {s.name: s.request for s in shapes})
            for round_ in range(args.rounds):
                chosen = rng.choices(shapes, weights=[s.weight for s in shapes], k=args.pods)
                for i, shape in enumerate(chosen):
                    name = f"r{round_}-{i:03d}"
                    core.create_namespaced_pod(ns, kube_alloc.pod(name, shape.name, gated=True))
                want = (round_ + 1) * args.pods
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:  # the resourceclaim controller made them all
                    mine = [
                        c for c in controller.claims.items() if c["metadata"]["namespace"] == ns
                    ]
                    if len(mine) >= want:
                        break
                    time.sleep(0.1)
                if profile is not None and round_ == args.rounds - 1:
                    profile.enable()
                cycles.append(timed_cycle(controller))
                if profile is not None and round_ == args.rounds - 1:
                    profile.disable()
            placed = sum(
                1
                for c in controller.claims.items()
                if c["metadata"]["namespace"] == ns and (c.get("status") or {}).get("allocation")
            )
            # The namespace goes once its claims lose drasat's finalizer: cycles release them.
            releasing = threading.Thread(target=_cycle_until, args=(controller, done), daemon=True)
            releasing.start()
        walls = sorted(w for w, _ in cycles)
        out.update(
            {
                "busy_cycles": [[round(w, 3), round(s, 3)] for w, s in cycles],
                "busy_cycle_p50_s": round(kube_alloc._percentile(walls, 50), 3),
                "busy_cycle_p99_s": round(kube_alloc._percentile(walls, 99), 3),
                "solve_share": round(sum(s for _, s in cycles) / max(1e-9, sum(walls)), 3),
                "pods": args.rounds * args.pods,
                "placed_claims": placed,
            }
        )
        if profile is not None:
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(30)
            out["profile_last_cycle"] = text.getvalue()
    finally:
        done.set()
        controller.stop()
        client.close()
    kube_alloc.say(f"{nodes} nodes: {out}")
    return out


def bench(args: argparse.Namespace) -> Obj:
    run = args.run or f"cs-{int(time.time()) % 100000}"
    with kube_alloc.control_plane(args.kubeconfig) as kubeconfig:
        api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        with api, kube_alloc._device_classes(api):
            drasat_allocator.install(api, args.drasat_namespace)
            planned = kube_alloc.plan_fleet(run, max(args.nodes), 0.25, 0)
            steps = []
            made = 0
            try:
                for count in args.nodes:
                    fleet = kube_alloc.create_fleet(api, planned[made:count], args.clients)
                    names = {n.name for n in planned[made:count]}
                    started = time.perf_counter()
                    drasat_allocator._node_states(api, args.drasat_namespace, only=names)
                    made = count
                    kube_alloc.say(
                        f"fleet: {count} nodes ({fleet.created_s:.0f}s for the new ones, NAS "
                        f"{time.perf_counter() - started:.0f}s)"
                    )
                    for every in args.full_settle_every or [None]:
                        steps.append(measure(api, kubeconfig, count, args, run, every))
            finally:
                kube_alloc.delete_fleet(api, planned[:made])
                drasat_allocator.remove_states(
                    api, args.drasat_namespace, [n.name for n in planned]
                )
    return {"run": run, "steps": steps}


def summary(results: Obj) -> str:
    lines = [
        "| nodes | full settle every | informer sync s | RSS MiB | first cycle s "
        "| idle cycle s (next; p50 of more) | busy cycle p50 / p99 s (pods each) | solve share |",
        "|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for s in results["steps"]:
        # Results of runs before these two were measured leave them out: shown as "—".
        every = s.get("full_settle_every", "—")
        idle_more = s.get("idle_cycle_p50_s")
        idle = f"{s['idle_cycle_s']}" + ("" if idle_more is None else f"; {idle_more}")
        lines.append(
            f"| {s['nodes']} | {every} | {s['sync_s']} | {s['rss_mib']} "
            f"| {s['first_cycle_s']} | {idle} "
            f"| {s.get('busy_cycle_p50_s')} / {s.get('busy_cycle_p99_s')} "
            f"({s.get('pods', 0) // max(1, len(s.get('busy_cycles', [1])))}) "
            f"| {100 * s.get('solve_share', 0):.0f}% |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.controller_scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kubeconfig", type=pathlib.Path, default=None)
    parser.add_argument("--nodes", default="250,500,1000,2000", help="ascending node counts")
    parser.add_argument("--rounds", type=int, default=5, help="busy cycles per step")
    parser.add_argument("--pods", type=int, default=64, help="pods per busy cycle")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--idle", type=int, default=5, help="idle cycles timed after the first")
    parser.add_argument(
        "--full-settle-every",
        default="",
        help="comma-separated V1Config.full_settle_every values, each measured on the same fleet "
        "(1: every cycle settles every node, as before the settle was scoped)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the last busy cycle")
    parser.add_argument("--drasat-namespace", default="drasat")
    parser.add_argument("--run", default="")
    parser.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path("bench/results/controller-scale")
    )
    args = parser.parse_args(argv)
    try:
        args.nodes = [int(n) for n in args.nodes.split(",") if n]
    except ValueError:
        parser.error(f"--nodes {args.nodes}: comma-separated node counts")
    try:
        args.full_settle_every = [int(n) for n in args.full_settle_every.split(",") if n]
    except ValueError:
        parser.error(f"--full-settle-every {args.full_settle_every}: comma-separated counts")
    if not args.nodes or args.nodes != sorted(set(args.nodes)) or args.nodes[0] < 1:
        parser.error("--nodes: ascending, distinct, at least 1")
    if args.rounds < 1 or args.pods < 1:
        parser.error("--rounds and --pods must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = bench(args)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    results["machine"] = f"{stamp}; {platform.platform()}; python {platform.python_version()}"
    results["argv"] = list(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    table = summary(results)
    (args.out / "summary.md").write_text(table)
    print(table, end="")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
