"""The v1 controller's cycle without an API server: where its CPU goes as nodes grow.

    python -m bench.controller_profile [--nodes 250,500,1000,2000] [--pods 64] [--held 0.5]
                                       [--profile N] [--out DIR]

`bench.controller_scale` measures the controller on the real control plane, where the API
server, etcd and kube-scheduler share the machine's CPU with it; this bench takes them away, to
see the controller's own cost and profile it. The fleet is `bench.kube_alloc`'s (8 simulated GPUs
a node, a quarter of the nodes MIG-mode A100-40GB / H100-80GB, the rest shareable H100-80GB),
its slices as drasat's node plugin publishes them, each node's NodeAllocationState Ready. A
`V1Controller` is built over informers that hold these objects (no watch, no writes), and each
round times the cycle's CPU path over `--pods` pending pods of the fill mix, their claims made
from the fill's templates:

- **snapshot**: `V1Controller.snapshot()` (claims by key, NASes parsed, slices read);
- **pending**: `v1inputs.pending_pods` (each pod's candidate nodes: selectors, fit, capacity);
- **nodes**: `v1inputs.node_inputs(with_status_holds(...))` (each node's solver state);
- **allocate**: `drasat.v1.allocate` (the solve, and its own input building).

`--held` of the fleet's GPUs are held by claims allocated before (so a node's ledger, the claim
statuses and the bound pods are as a busy cluster's). Each step runs `--rounds` rounds; the
first one (the slices' first read) is reported apart. The process's RSS (the fleet's objects
as the informers would hold them, and the controller's memos; each step's fleet in a process
that held the smaller ones before) is read once the held pods are placed. `--profile N` writes
a cProfile of the rounds at N nodes (`profile-N.txt`, by cumulative and by own time).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import gc
import io
import json
import math
import pathlib
import platform
import pstats
import random
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from bench import controller_scale, kube_alloc
from drasat import loading, v1
from drasat.api.groups import DRIVER_NAME
from drasat.api.nas import NasStatus
from drasat.controller import allocation, v1inputs
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.solver import SolveParams
from drasat.whatif import v1cluster

Obj = dict[str, Any]
NAMESPACE = "bench"


class Held:
    """An informer's cache, fixed: what `V1Controller` reads (`items()`, `synced`)."""

    def __init__(self, objects: list[Obj]) -> None:
        self.objects = objects
        self.synced = True

    def items(self) -> list[Obj]:
        return list(self.objects)


def _meta(name: str, namespace: str | None = None) -> Obj:
    meta: Obj = {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": "1"}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
    return meta


def fleet(nodes: int, controller_namespace: str) -> tuple[list[Obj], list[Obj], list[Obj]]:
    """(Nodes, ResourceSlices, NodeAllocationStates) of a `bench.kube_alloc` fleet."""
    planned = kube_alloc.plan_fleet("p", nodes, 0.25, 0)
    node_objs, slice_objs = [], []
    for planned_node in planned:
        body = kube_alloc.node_body(planned_node)
        body["metadata"].update(_meta(planned_node.name))
        node_objs.append(body)
        for i, s in enumerate(kube_alloc.node_slices(planned_node, body["metadata"]["uid"])):
            s = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", **s}
            s["metadata"] = {**s.get("metadata", {}), **_meta(f"{planned_node.name}-{i}")}
            slice_objs.append(s)
    documents = [loading.Document("resourceslices", i + 1, s) for i, s in enumerate(slice_objs)]
    nas_objs = []
    for node in v1cluster.load(documents).nodes:
        body = node.nas.model_copy(update={"status": NasStatus.Ready}).dump()
        body["metadata"] = _meta(node.name, controller_namespace)
        nas_objs.append(body)
    return node_objs, slice_objs, nas_objs


def workload(count: int, seed: int, prefix: str) -> tuple[list[Obj], list[Obj]]:
    """(pods, claims): `count` pending pods of the fill mix, each with its claim made."""
    shapes = kube_alloc.fill_shapes()
    rng = random.Random(seed)
    chosen = rng.choices(shapes, weights=[s.weight for s in shapes], k=count)
    pods, claims = [], []
    for i, shape in enumerate(chosen):
        name = f"{prefix}-{i:05d}"
        pod = kube_alloc.pod(name, shape.name)
        pod["metadata"].update(_meta(name, NAMESPACE))
        pod["status"] = {
            "phase": "Pending",
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}],
        }
        claim = {"metadata": _meta(f"{name}-gpu", NAMESPACE)}
        claim["spec"] = kube_alloc.template("t", shape.request)["spec"]["spec"]
        pods.append(pod)
        claims.append(claim)
    return pods, claims


def controller_over(
    node_objs: list[Obj], slice_objs: list[Obj], nas_objs: list[Obj], classes: list[Obj]
) -> V1Controller:
    controller = V1Controller(api=None, config=V1Config())  # type: ignore[arg-type]
    controller.nodes = Held(node_objs)  # type: ignore[assignment]
    controller.slices = Held(slice_objs)  # type: ignore[assignment]
    controller.nas = Held(nas_objs)  # type: ignore[assignment]
    controller.classes = Held(classes)  # type: ignore[assignment]
    controller.claims = Held([])  # type: ignore[assignment]
    controller.pods = Held([])  # type: ignore[assignment]
    return controller


def params(controller: V1Controller) -> SolveParams:
    """What the controller's cycle solves with (`controller.cycle.allocating.Allocator.place`)."""
    return SolveParams(
        mode=controller.config.mode,
        time_limit_s=controller.config.time_limit_s,
        cache=controller.solver_cache,
    )


def hold(controller: V1Controller, share: float, seed: int) -> int:
    """Place pods of the fill mix, up to 256 a solve, until about `share` of the fleet's GPUs are
    held (a pod of the mix holds about one GPU's worth): their claims get the statuses, their
    pods the nodes, the nodes' NASes the ledger entries that the controller's own cycles would
    have written. Refused pods are dropped. How many pods are held."""
    gpus = len(controller.nodes.items()) * kube_alloc.GPUS_PER_NODE
    pods_held: list[Obj] = controller.pods.objects  # type: ignore[attr-defined]
    claims_held: list[Obj] = controller.claims.objects  # type: ignore[attr-defined]
    nas_by_name = {n["metadata"]["name"]: n for n in controller.nas.items()}
    batch = 0
    while len(pods_held) < share * gpus:
        wanted = min(256, math.ceil(share * gpus - len(pods_held)))
        pods, claims = workload(wanted, seed + batch, f"held{batch}")
        batch += 1
        controller.pods.objects = pods_held + pods  # type: ignore[attr-defined]
        controller.claims.objects = claims_held + claims  # type: ignore[attr-defined]
        snapshot = controller.snapshot()
        pending, _ = v1inputs.pending_pods(snapshot)
        nodes = v1inputs.node_inputs(v1inputs.with_status_holds(snapshot))
        outcome = v1.allocate(
            nodes, [p.input for p in pending], snapshot.classes, params=params(controller)
        )
        by_key = {p.input.key: p for p in pending}
        for key, node in outcome.placed.items():
            item = by_key[key]
            item.pod["spec"]["nodeName"] = node
            pods_held.append(item.pod)
            for claim in item.claims:
                found = outcome.allocations[claim["metadata"]["uid"]]
                claim["status"] = {"allocation": found.allocation}
                claim["metadata"]["resourceVersion"] = "2"
                claims_held.append(claim)
                body = nas_by_name[node]
                allocation.nas_with(body, dict(found.ledger))
                version = int(body["metadata"]["resourceVersion"]) + 1
                body["metadata"]["resourceVersion"] = str(version)
        if not outcome.placed:
            break
    controller.pods.objects = pods_held  # type: ignore[attr-defined]
    controller.claims.objects = claims_held  # type: ignore[attr-defined]
    return len(pods_held)


def measure(nodes: int, args: argparse.Namespace) -> Obj:
    started = time.perf_counter()
    node_objs, slice_objs, nas_objs = fleet(nodes, "drasat")
    from drasat.api.devicemodel import classes as device_classes

    classes = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", **c}
        for c in device_classes.device_classes()
    ]
    built = time.perf_counter() - started
    controller = controller_over(node_objs, slice_objs, nas_objs, classes)
    held = hold(controller, args.held, nodes)
    out: Obj = {"nodes": nodes, "built_s": round(built, 1), "held_pods": held, "rounds": []}
    gc.collect()
    out["rss_mib"] = round(controller_scale.rss_mib(), 1)
    profile = cProfile.Profile() if nodes == args.profile else None
    base_pods = list(controller.pods.objects)  # type: ignore[attr-defined]
    base_claims = list(controller.claims.objects)  # type: ignore[attr-defined]
    for round_ in range(args.rounds + 1):
        pods, claims = workload(args.pods, 1000 + round_, f"r{round_}")
        controller.pods.objects = base_pods + pods  # type: ignore[attr-defined]
        controller.claims.objects = base_claims + claims  # type: ignore[attr-defined]
        if profile is not None and round_ > 0:
            profile.enable()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        snapshot = controller.snapshot()
        t1 = time.perf_counter()
        pending, _ = v1inputs.pending_pods(snapshot)
        t2 = time.perf_counter()
        node_inputs = v1inputs.node_inputs(
            v1inputs.with_status_holds(snapshot, controller._ledgers),
            controller.allocator.node_inputs,
        )
        t3 = time.perf_counter()
        outcome = v1.allocate(
            node_inputs, [p.input for p in pending[: args.pods]], snapshot.classes,
            params=params(controller),
        )  # fmt: skip
        t4 = time.perf_counter()
        controller._ledgers.rotate()
        if profile is not None:
            profile.disable()
        times = {
            "snapshot_s": round(t1 - t0, 3),
            "pending_s": round(t2 - t1, 3),
            "nodes_s": round(t3 - t2, 3),
            "allocate_s": round(t4 - t3, 3),
            "total_s": round(t4 - t0, 3),
            "cpu_s": round(time.process_time() - cpu0, 3),
            "placed": len(outcome.placed),
        }
        if round_ == 0:
            out["first"] = times
        else:
            out["rounds"].append(times)
        kube_alloc.say(f"{nodes} nodes round {round_}: {times}")
    if profile is not None:
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text)
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(30)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"profile-{nodes}.txt").write_text(text.getvalue())
    return out


def summary(results: Obj) -> str:
    lines = [
        "| nodes | held pods | RSS MiB | first round s | round s (p50) | CPU s (p50) "
        "| snapshot | pending | nodes | allocate |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for step in results["steps"]:
        rounds = step["rounds"]

        def mid(key: str, rounds: list[Obj] = rounds) -> float:
            values = sorted(r[key] for r in rounds)
            return values[len(values) // 2]

        lines.append(
            f"| {step['nodes']} | {step['held_pods']} | {step.get('rss_mib', '')} "
            f"| {step['first']['total_s']} "
            f"| {mid('total_s')} | {mid('cpu_s')} | {mid('snapshot_s')} | {mid('pending_s')} "
            f"| {mid('nodes_s')} "
            f"| {mid('allocate_s')} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.controller_profile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nodes", default="250,500,1000,2000")
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--held", type=float, default=0.5)
    parser.add_argument("--profile", type=int, default=0, help="profile at this node count")
    parser.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path("bench/results/controller-profile")
    )
    args = parser.parse_args(argv)
    try:
        args.nodes = [int(n) for n in args.nodes.split(",") if n]
    except ValueError:
        parser.error(f"--nodes {args.nodes}: comma-separated node counts")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    steps = []
    for count in args.nodes:
        gc.collect()
        steps.append(measure(count, args))
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    results = {
        "steps": steps,
        "machine": f"{stamp}; {platform.platform()}; python {platform.python_version()}",
        "argv": list(sys.argv[1:] if argv is None else argv),
        "driver": DRIVER_NAME,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    table = summary(results)
    (args.out / "summary.md").write_text(table)
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
