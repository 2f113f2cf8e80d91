"""Preemption on a full MIG fleet, on the real control plane: drasat's controller against
kube-scheduler's DefaultPreemption alone.

    python -m bench.mig_preemption [--kubeconfig K] [--nodes 2 --gpus-per-node 2]
                                   [--preemptors 6 --profiles 1g.5gb,2g.10gb,3g.20gb]
                                   [--interval 2] [--patience 60] [--allocators kube,drasat]
                                   [--out DIR]

The fleet: `--nodes` fake nodes (Node objects, no kubelet, `bench.kube_alloc`'s) of
`--gpus-per-node` A100-40GB each, every GPU in MIG mode, publishing drasat's ResourceSlices
(partitionable devices: the whole GPU and every MIG placement, sharing memory-slice counters).
Per allocator, in the same run and on the same slices, one after the other, in a fresh namespace:

1. **fill**: one `1g.5gb` pod of PriorityClass `drasat-bench-low` (0, `preemptionPolicy:
   Never`) per MIG slot (7 per GPU), created at once; the phase waits until every one is bound
   (at most `--fill-timeout` s): the fleet is full.
2. **arrivals**: `--preemptors` pods of `drasat-bench-high` (1000, `PreemptLowerPriority`), one
   every `--interval` s, their profiles taken in turn from `--profiles` (by profile and product,
   CEL); the phase ends when all are bound or `--patience` s pass without a bind after the last
   arrival.

Measured: preemptors placed (bound), low-priority pods evicted (gone), evictions per placed
preemptor, **wasted evictions** (an evicted pod none of whose memory slices a placed preemptor
holds at the end: its eviction freed nothing a preemptor used), the fewest evictions the placed
preemptors' profiles need on a full A100-40GB (`MIN_VICTIMS`), and creation -> bound p50 / p99 of
the placed preemptors (client clocks). For a preemptor left pending, the last reason its
scheduler gave (a `FailedScheduling` Event's message, or drasat's refusal).

Allocator `kube` is kube-scheduler with its own DRA allocator and DefaultPreemption, drasat off.
Allocator `drasat` is drasat's v1 controller (`bench.drasat_allocator`; default policy:
preemption on), pods created gated as the chart's admission creates them.

Results go to `--out` (mig-preemption.json); the command prints the table.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

import kubernetes

from bench import kube_alloc
from bench.gang_mix import priority_classes

Obj = dict[str, Any]
PRODUCT = "A100-40GB"
FILL_PROFILE = "1g.5gb"
#: 1g.5gb slots per A100-40GB.
SLOTS_PER_GPU = 7
#: The fewest 1g.5gb pods to evict from a full A100-40GB for each profile: its smallest placement
#: over the 1g.5gb slots (1g.5gb slots cover memory slices 0-6; a 3g.20gb at slice 4 takes 4-7).
MIN_VICTIMS = {"1g.5gb": 1, "1g.10gb": 2, "2g.10gb": 2, "3g.20gb": 3, "4g.20gb": 4, "7g.40gb": 7}


def plan_fleet(run: str, nodes: int, gpus_per_node: int) -> list[kube_alloc.FleetNode]:
    return [
        kube_alloc.FleetNode(
            f"{run}-{i:03d}",
            f"{gpus_per_node}x{PRODUCT},mig=all,seed={run}-{i:03d}",
            {kube_alloc.LABEL: "mig"},
        )
        for i in range(nodes)
    ]


def _template_name(profile: str) -> str:
    return "mig-" + profile.replace(".", "")


def _pod(name: str, profile: str, priority_class: str, gated: bool) -> Obj:
    body = kube_alloc.pod(name, _template_name(profile), gated=gated)
    body["spec"]["priorityClassName"] = priority_class
    return body


def arrivals(count: int, profiles: Sequence[str]) -> list[tuple[str, str]]:
    """(pod name, profile) of the preemptors, in creation order: the profiles in turn."""
    return [(f"high-{i:03d}", profiles[i % len(profiles)]) for i in range(count)]


def _slices_of(device: Obj) -> set[tuple[str, str]]:
    """(counter set, memory-slice counter) the device consumes: two devices of one GPU overlap
    when they share one."""
    return {
        (c["counterSet"], name)
        for c in device.get("consumesCounters") or []
        for name in c.get("counters", {})
        if name.startswith("memory-slice-")
    }


def _holdings(claims: Sequence[Obj], fleet: kube_alloc.Fleet) -> dict[str, set[tuple[str, str]]]:
    """Pod name -> the memory slices its claim's allocation holds."""
    out: dict[str, set[tuple[str, str]]] = {}
    for claim in claims:
        owners = claim["metadata"].get("ownerReferences") or []
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for owner in owners:
            if owner.get("kind") != "Pod":
                continue
            held = out.setdefault(owner["name"], set())
            for result in allocation.get("devices", {}).get("results", []):
                device = fleet.devices.get((result["pool"], result["device"]), {})
                held |= _slices_of(device)
    return out


def wasted_evictions(
    before: dict[str, set[tuple[str, str]]],
    after: dict[str, set[tuple[str, str]]],
    evicted: Sequence[str],
    placed: Sequence[str],
) -> list[str]:
    """The evicted pods (with what they held before the arrivals) none of whose memory slices a
    placed preemptor holds at the end (`after`)."""
    used: set[tuple[str, str]] = set().union(*(after.get(n, set()) for n in placed))
    return [n for n in evicted if not before.get(n, set()) & used]


def _last_reason(core: kubernetes.client.CoreV1Api, ns: str, pod: str) -> str:
    events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={pod}").items
    events = [e for e in events if e.type == "Warning" or e.reason in ("FailedScheduling",)]
    if not events:
        return ""
    last = max(
        events, key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp
    )
    return f"{last.reason}: {last.message}"


def measure(
    api: kubernetes.client.ApiClient,
    kubeconfig: pathlib.Path,
    ns: str,
    fleet: kube_alloc.Fleet,
    args: argparse.Namespace,
    gated: bool,
) -> Obj:
    profiles = sorted({FILL_PROFILE, *args.profiles})
    kube_alloc._create_templates(
        api, ns, {_template_name(p): kube_alloc.mig_request(PRODUCT, p) for p in profiles}
    )
    core = kubernetes.client.CoreV1Api(api)
    watch = kube_alloc.BindWatch(kubeconfig, ns)
    created: dict[str, float] = {}
    slots = fleet.gpus * SLOTS_PER_GPU
    low = [f"low-{i:03d}" for i in range(slots)]
    try:
        kube_alloc.say(f"mig-preemption: filling {slots} slots with {FILL_PROFILE} pods")

        def create_low(name: str) -> None:
            core.create_namespaced_pod(ns, _pod(name, FILL_PROFILE, "drasat-bench-low", gated))

        began = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(create_low, low))
        watch.wait(lambda: all(n in watch.bound for n in low), args.fill_timeout)
        filled = sum(1 for n in low if n in watch.bound)
        fill_s = time.monotonic() - began
        kube_alloc.say(f"mig-preemption: {filled} of {slots} bound in {fill_s:.1f}s")
        before = _holdings(kube_alloc._claims(api, ns), fleet)
        wanted = arrivals(args.preemptors, args.profiles)
        for i, (name, profile) in enumerate(wanted):
            if i:
                time.sleep(args.interval)
            created[name] = time.monotonic()
            core.create_namespaced_pod(ns, _pod(name, profile, "drasat-bench-high", gated))
        kube_alloc.say(f"mig-preemption: {len(wanted)} preemptors created")
        last = [time.monotonic(), len(watch.bound)]

        def settled() -> bool:
            if len(watch.bound) != last[1]:
                last[:] = [time.monotonic(), len(watch.bound)]
            return all(n in watch.bound for n, _ in wanted) or (
                time.monotonic() - last[0] >= args.patience
            )

        watch.wait(settled, args.patience + args.interval * len(wanted) + 600)
        bound = dict(watch.bound)
    finally:
        watch.close()
    left = {p.metadata.name for p in core.list_namespaced_pod(ns).items}
    claims = kube_alloc._claims(api, ns)
    after = _holdings(claims, fleet)
    placed = [(n, p) for n, p in wanted if n in bound and n in left]
    evicted = [n for n in low if n in before and n not in left]
    wasted = wasted_evictions(before, after, evicted, [n for n, _ in placed])
    waits = [bound[n] - created[n] for n, _ in placed]
    pending = [n for n, _ in wanted if n not in bound]
    kube_alloc.say(f"mig-preemption: {len(placed)} of {len(wanted)} placed, {len(evicted)} evicted")
    return {
        "slots": slots,
        "filled": filled,
        "fill_s": round(fill_s, 1),
        "preemptors": len(wanted),
        "placed": len(placed),
        "placed_profiles": {p: sum(1 for _, q in placed if q == p) for p in args.profiles},
        "evicted": len(evicted),
        "wasted_evictions": len(wasted),
        "min_evictions_for_placed": sum(MIN_VICTIMS.get(p, 0) for _, p in placed),
        "wait_p50_s": round(kube_alloc._percentile(waits, 50), 2),
        "wait_p99_s": round(kube_alloc._percentile(waits, 99), 2),
        "pending_reason": _last_reason(core, ns, pending[0]) if pending else "",
        "double_allocations": kube_alloc.check_no_double_allocation(claims, fleet),
    }


def bench(args: argparse.Namespace) -> Obj:
    run = args.run or f"mp-{uuid.uuid4().hex[:5]}"
    with kube_alloc.control_plane(args.kubeconfig) as kubeconfig:
        api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        with api, kube_alloc._device_classes(api), priority_classes(api):
            planned = plan_fleet(run, args.nodes, args.gpus_per_node)
            try:
                fleet = kube_alloc.create_fleet(api, planned, args.clients)
                kube_alloc.say(f"fleet: {len(planned)} nodes, {fleet.gpus} A100s in MIG mode")
                results: Obj = {"run": run, "nodes": args.nodes, "gpus": fleet.gpus,
                                "load_before": os.getloadavg(), "allocators": []}  # fmt: skip
                for name in args.allocators:
                    handle = kube_alloc.ALLOCATORS[name](kubeconfig, args.drasat_namespace)
                    try:
                        with kube_alloc.namespace(api, f"{run}-{name}") as ns:
                            gated = name in kube_alloc.GATED
                            found = measure(api, kubeconfig, ns, fleet, args, gated)
                    finally:
                        handle.stop()
                    results["allocators"].append(
                        {"allocator": name, **found, "load_after": os.getloadavg()}
                    )
            finally:
                kube_alloc.delete_fleet(api, planned)
    return results


def _ratio(a: Obj) -> str:
    return f"{a['evicted'] / a['placed']:.2f}" if a["placed"] else "-"


def _waits(a: Obj) -> str:
    return f"{a['wait_p50_s']} / {a['wait_p99_s']}" if a["placed"] else "-"


def summary(results: Obj) -> str:
    lines = [
        "| allocator | fleet filled | preemptors placed | evicted | evictions per placed "
        "| wasted evictions | fewest evictions for those placed | to placement p50 / p99 s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for a in results["allocators"]:
        lines.append(
            f"| {a['allocator']} | {a['filled']} of {a['slots']} | {a['placed']} of "
            f"{a['preemptors']} | {a['evicted']} | {_ratio(a)} | {a['wasted_evictions']} "
            f"| {a['min_evictions_for_placed']} | {_waits(a)} |"
        )
    for a in results["allocators"]:
        if a["pending_reason"]:
            lines.append(f"\n{a['allocator']}, a pending preemptor: {a['pending_reason']}")
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.mig_preemption", description=__doc__)
    parser.add_argument("--kubeconfig", type=pathlib.Path, default=None,
                        help="a running cluster (default: start one)")  # fmt: skip
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=2)
    parser.add_argument("--preemptors", type=int, default=6)
    parser.add_argument("--profiles", default=["1g.5gb", "2g.10gb", "3g.20gb"],
                        type=_profiles, help="the preemptors' profiles, in turn")  # fmt: skip
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between arrivals")
    parser.add_argument(
        "--patience", type=float, default=60.0, help="seconds without a bind that end the run"
    )
    parser.add_argument("--fill-timeout", type=float, default=300.0)
    parser.add_argument("--allocators", default=["kube", "drasat"], type=_allocators)
    parser.add_argument("--drasat-namespace", default="drasat")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--run", default="")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/results"))
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.gpus_per_node < 1 or args.preemptors < 1:
        parser.error("--nodes, --gpus-per-node and --preemptors must be at least 1")
    return args


def _profiles(text: str) -> list[str]:
    found = [p for p in text.split(",") if p]
    unknown = [p for p in found if p not in MIN_VICTIMS]
    if not found or unknown:
        raise argparse.ArgumentTypeError(
            f"profiles of {PRODUCT}, comma-separated, of {', '.join(MIN_VICTIMS)}"
            + (f"; not {', '.join(unknown)}" if unknown else "")
        )
    return found


def _allocators(text: str) -> list[str]:
    found = [a for a in text.split(",") if a]
    unknown = [a for a in found if a not in ("kube", "drasat")]
    if not found or unknown:
        raise argparse.ArgumentTypeError("kube, drasat or both, comma-separated")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = bench(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "mig-preemption.json").write_text(json.dumps(results, indent=1) + "\n")
    sys.stdout.write(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
