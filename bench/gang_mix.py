"""Gangs and single pods at two priorities on the real control plane: kube-scheduler's allocator
against drasat's (issue 27 item 5).

    python -m bench.gang_mix [--kubeconfig K] --nodes 100 [--gangs 60 --gang-size 4
                             --gang-gpus 2] [--low 320 --high 160] [--allocators kube,drasat]
                             [--out DIR]

The fleet is `bench.kube_alloc`'s (N fake nodes x 8 simulated GPUs, drasat's ResourceSlices,
no kubelet). Per allocator, in the same run and on the same slices, one after the other: the
workload's pods are created at once, in a seeded random order: `--gangs` gangs of `--gang-size`
pods of `--gang-gpus` whole GPUs each (labels `gpu.drasat.io/gang`, `gpu.drasat.io/gang-size`),
`--low` single 1-GPU pods of PriorityClass `drasat-bench-low` (0) and `--high` of
`drasat-bench-high` (1000). Demand is above the fleet's GPUs, so not everything fits. Once nothing
more binds for `--settle` seconds:

- gangs completed (every pod bound), and gangs partly bound;
- GPUs held by incomplete gangs (bound pods of a gang not completed: what they hold for as long
  as the state lasts, i.e. GPU-hours per hour) and the GPU-hours they held over the run (from
  each such pod's bind to the end of the measurement);
- high-priority pods bound, and their creation -> bound p50 / p99 (client clocks);
- low-priority pods bound, pods that disappeared (preempted), and no device held twice.

Allocator `kube` is kube-scheduler itself (no gang notion: it places a gang's pods one by one);
`drasat` is drasat's v1 controller with its pods gated as admission would gate them, the policy
the default one (gangs all-or-nothing, no topology key).

Results go to `--out` (gang-mix.json); the command prints the table.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import pathlib
import random
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import kubernetes
from kubernetes.client import ApiException

from bench import kube_alloc
from drasat.api.groups import GANG_LABEL, GANG_SIZE_LABEL

Obj = dict[str, Any]
PRIORITIES = {"drasat-bench-high": 1000, "drasat-bench-low": 0}


@contextlib.contextmanager
def priority_classes(api: kubernetes.client.ApiClient) -> Iterator[None]:
    scheduling = kubernetes.client.SchedulingV1Api(api)
    made = []
    try:
        for name, value in PRIORITIES.items():
            body = {"metadata": {"name": name}, "value": value, "preemptionPolicy": "Never"
                    if value == 0 else "PreemptLowerPriority"}  # fmt: skip
            try:
                scheduling.create_priority_class(body)
                made.append(name)
            except ApiException as exc:
                if exc.status != 409:
                    raise
        yield
    finally:
        for name in made:
            with contextlib.suppress(ApiException):
                scheduling.delete_priority_class(name)


def workload(args: argparse.Namespace) -> list[tuple[Obj, int, str]]:
    """(pod, GPUs, kind) in creation order; kind is `gang:NAME`, `high` or `low`."""
    out: list[tuple[Obj, int, str]] = []
    for g in range(args.gangs):
        for i in range(args.gang_size):
            body = kube_alloc.pod(f"g{g:03d}-{i}", "gang", gated=args.gated)
            body["metadata"]["labels"].update(
                {GANG_LABEL: f"g{g:03d}", GANG_SIZE_LABEL: str(args.gang_size)}
            )
            body["spec"]["priorityClassName"] = "drasat-bench-low"
            out.append((body, args.gang_gpus, f"gang:g{g:03d}"))
    for kind, count in (("low", args.low), ("high", args.high)):
        for i in range(count):
            body = kube_alloc.pod(f"{kind}-{i:04d}", "one", gated=args.gated)
            body["spec"]["priorityClassName"] = f"drasat-bench-{kind}"
            out.append((body, 1, kind))
    random.Random(args.seed).shuffle(out)
    return out


def measure(
    api: kubernetes.client.ApiClient,
    kubeconfig: pathlib.Path,
    ns: str,
    fleet: kube_alloc.Fleet,
    args: argparse.Namespace,
) -> Obj:
    request = {"deviceClassName": "gpu.drasat.io", "allocationMode": "ExactCount"}
    kube_alloc._create_templates(
        api, ns, {"one": {**request, "count": 1}, "gang": {**request, "count": args.gang_gpus}}
    )
    pods = workload(args)
    core = kubernetes.client.CoreV1Api(api)
    watch = kube_alloc.BindWatch(kubeconfig, ns)
    created: dict[str, float] = {}

    def create(item: tuple[Obj, int, str]) -> None:
        began = time.monotonic()
        core.create_namespaced_pod(ns, item[0])
        created[item[0]["metadata"]["name"]] = began

    asked = sum(gpus for _, gpus, _ in pods)
    kube_alloc.say(f"gang-mix: creating {len(pods)} pods ({asked} GPUs asked of {fleet.gpus})")
    try:
        first = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(create, pods))
        last = [time.monotonic(), len(watch.bound)]

        def settled() -> bool:
            if len(watch.bound) != last[1]:
                last[:] = [time.monotonic(), len(watch.bound)]
            return len(watch.bound) >= len(created) or time.monotonic() - last[0] >= args.settle

        watch.wait(settled, args.timeout)
        end = time.monotonic()
        bound = dict(watch.bound)
    finally:
        watch.close()
    kube_alloc.say(f"gang-mix: {len(bound)} of {len(created)} bound in {end - first:.1f}s")
    left = {p.metadata.name for p in core.list_namespaced_pod(ns).items}
    claims = kube_alloc._claims(api, ns)
    gangs: dict[str, list[tuple[str, int]]] = {}
    for body, gpus, kind in pods:
        if kind.startswith("gang:"):
            gangs.setdefault(kind[5:], []).append((body["metadata"]["name"], gpus))
    complete = [g for g, members in gangs.items() if all(n in bound for n, _ in members)]
    partial = [g for g, members in gangs.items()
               if g not in complete and any(n in bound for n, _ in members)]  # fmt: skip
    held = [(n, gpus) for g in partial for n, gpus in gangs[g] if n in bound]
    high = [body["metadata"]["name"] for body, _, kind in pods if kind == "high"]
    low = [body["metadata"]["name"] for body, _, kind in pods if kind == "low"]
    waits = [bound[n] - created[n] for n in high if n in bound]
    return {
        "pods": len(created),
        "asked_gpus": asked,
        "fleet_gpus": fleet.gpus,
        "span_s": round(end - first, 1),
        "gangs": len(gangs),
        "gangs_complete": len(complete),
        "gangs_partial": len(partial),
        "gpus_held_by_incomplete_gangs": sum(gpus for _, gpus in held),
        "gpu_hours_held_by_incomplete_gangs": round(
            sum(gpus * (end - bound[n]) for n, gpus in held) / 3600, 4
        ),
        "high": len(high),
        "high_bound": sum(1 for n in high if n in bound),
        "high_wait_p50_s": round(kube_alloc._percentile(waits, 50), 3),
        "high_wait_p99_s": round(kube_alloc._percentile(waits, 99), 3),
        "low": len(low),
        "low_bound": sum(1 for n in low if n in bound),
        "preempted": sum(1 for n in created if n not in left),
        # What the pods bound at the end asked for (whole GPUs: what their claims hold); a
        # preempted pod was bound once and is gone, its GPUs with it.
        "gpus_bound": sum(
            gpus
            for body, gpus, _ in pods
            if body["metadata"]["name"] in bound and body["metadata"]["name"] in left
        ),
        "double_allocations": kube_alloc.check_no_double_allocation(claims, fleet),
    }


def bench(args: argparse.Namespace) -> Obj:
    run = args.run or f"gm-{uuid.uuid4().hex[:5]}"
    with kube_alloc.control_plane(args.kubeconfig) as kubeconfig:
        api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        with api, kube_alloc._device_classes(api), priority_classes(api):
            planned = kube_alloc.plan_fleet(run, args.nodes, args.mig_share, 0)
            try:
                fleet = kube_alloc.create_fleet(api, planned, args.clients)
                kube_alloc.say(f"fleet: {len(planned)} nodes, {fleet.gpus} GPUs")
                results: Obj = {"run": run, "nodes": args.nodes, "gpus": fleet.gpus,
                                "allocators": []}  # fmt: skip
                for name in args.allocators:
                    handle = kube_alloc.ALLOCATORS[name](kubeconfig, args.drasat_namespace)
                    one = argparse.Namespace(**{**vars(args), "gated": name in kube_alloc.GATED})
                    try:
                        with kube_alloc.namespace(api, f"{run}-{name}") as ns:
                            found = measure(api, kubeconfig, ns, fleet, one)
                    finally:
                        handle.stop()
                    results["allocators"].append({"allocator": name, **found})
            finally:
                kube_alloc.delete_fleet(api, planned)
    return results


def summary(results: Obj) -> str:
    lines = [
        "| allocator | gangs completed (partly bound) | GPUs held by incomplete gangs "
        "(GPU-hours over the run) | high bound | high wait p50 / p99 s | low bound "
        "| GPUs held by bound pods | preempted |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for a in results["allocators"]:
        lines.append(
            f"| {a['allocator']} | {a['gangs_complete']} of {a['gangs']} ({a['gangs_partial']}) "
            f"| {a['gpus_held_by_incomplete_gangs']} ({a['gpu_hours_held_by_incomplete_gangs']}) "
            f"| {a['high_bound']} of {a['high']} | {a['high_wait_p50_s']} / "
            f"{a['high_wait_p99_s']} | {a['low_bound']} of {a['low']} "
            f"| {a['gpus_bound']} of {a['fleet_gpus']} | {a['preempted']} |"
        )
    return "\n".join(lines) + "\n"


def plot(results: Obj, path: pathlib.Path) -> None:
    """Three panels, one bar per allocator: gangs completed and partly bound, GPUs held by
    incomplete gangs, high-priority pods bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = results["allocators"]
    names = [a["allocator"] for a in found]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    x = range(len(names))
    axes[0].bar(x, [a["gangs_complete"] for a in found], label="completed")
    axes[0].bar(x, [a["gangs_partial"] for a in found],
                bottom=[a["gangs_complete"] for a in found], label="partly bound")  # fmt: skip
    axes[0].set_title(f"gangs (of {found[0]['gangs']})")
    axes[0].legend(fontsize=8)
    axes[1].bar(x, [a["gpus_held_by_incomplete_gangs"] for a in found], color="tab:red")
    axes[1].set_title("GPUs held by incomplete gangs")
    axes[2].bar(x, [a["high_bound"] for a in found], color="tab:green")
    axes[2].set_title(f"high-priority pods bound (of {found[0]['high']})")
    for ax in axes:
        ax.set_xticks(list(x), names)
    fig.suptitle(f"{results['nodes']} nodes, {results['gpus']} GPUs: gangs and single pods at "
                 "two priorities", fontsize=10)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gang_mix", description=__doc__)
    parser.add_argument("--kubeconfig", type=pathlib.Path, default=None,
                        help="a running cluster (default: start one)")  # fmt: skip
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--mig-share", type=float, default=0.25, help="share of MIG nodes")
    parser.add_argument("--gangs", type=int, default=60)
    parser.add_argument("--gang-size", type=int, default=4)
    parser.add_argument("--gang-gpus", type=int, default=2, help="GPUs per gang pod")
    parser.add_argument("--low", type=int, default=320, help="low-priority 1-GPU pods")
    parser.add_argument("--high", type=int, default=160, help="high-priority 1-GPU pods")
    parser.add_argument("--allocators", default="kube,drasat",
                        type=lambda s: [x for x in s.split(",") if x])  # fmt: skip
    parser.add_argument("--drasat-namespace", default="drasat")
    parser.add_argument("--settle", type=float, default=15.0)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--run", default="")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/results"))
    parser.add_argument("--plot", type=pathlib.Path, default=None,
                        help="draw the plot (PNG) from --out's gang-mix.json; no run")  # fmt: skip
    args = parser.parse_args(argv)
    if args.plot is not None:
        plot(json.loads((args.out / "gang-mix.json").read_text()), args.plot)
        return 0
    results = bench(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gang-mix.json").write_text(json.dumps(results, indent=1) + "\n")
    sys.stdout.write(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
