"""The offline what-if at cluster scale: `drasat whatif` end to end (read, translate, solve,
render), v1 inputs beside the classic what-if on the same fleet.

    python -m bench.whatif_scale [--fleet 60x220 300x1100 5000x1000] [--mode batch]
                                 [--out bench/results/whatif_scale] [--keep DIR] [--shares]

Each configuration `NODESxPODS` writes its inputs to files and runs `drasat whatif` on them in a
fresh process (`python -m drasat whatif ... -o table`), timing the whole command as a user meets
it (Python start, reading, the solver, the table). Three runs per configuration:

- `v1 nvidia`: NVIDIA's current driver's ResourceSlices and Nodes (what `kubectl get
  resourceslices,nodes -o yaml` prints), two kinds of node cloned from
  deploy/examples/v1-nvidia-quickstart/cluster/nvidia-slices.yaml: three Tesla T4 (one tainted
  by an XID) and one A100-40GB with dynamic MIG (a counter set, the whole GPU and every MIG
  placement), two T4 nodes per A100 node; pods of NVIDIA's quickstart shapes with the classes
  gpu.nvidia.com and mig.nvidia.com (a GPU each, a GPU of a product chosen by CEL, a 1g.5gb MIG
  device chosen by CEL on `profile`, a claim shared by two pods);
- `v1 compact`: the same fleet as a compact `Cluster` (3 x T4, 1 x A100-40GB with MIG), whose
  nodes publish what drasat's node plugin would, the same pods with drasat's classes;
- `classic`: the same compact fleet, the same pods as classic DRA (resource.k8s.io/v1alpha2
  claims with GpuClaimParameters and MigDeviceClaimParameters).

Reports per run the wall time, the CPU time (user + system: on a shared machine the steadier of
the two), pods placed, the solver line, and how many lines of reasons (one per distinct reason)
were cut short by the time limit (`unexplained_lines`). Writes the rows as JSON and prints where.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from typing import Any

import yaml

Obj = dict[str, Any]

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "deploy/examples/v1-nvidia-quickstart/cluster/nvidia-slices.yaml"
#: Node kinds of the example, cloned in this ratio (per three nodes: two T4, one A100).
KINDS = ("nv-t4", "nv-t4", "nv-a100")
COMPACT = {
    "nv-t4": {"product": "T4", "count": 3},
    "nv-a100": {"product": "A100-40GB", "count": 1, "mig": True},
}
NVIDIA, DRASAT = "gpu.nvidia.com", "gpu.drasat.io"
#: NVIDIA's slices of a larger fleet are over the what-if's default input size (64 MiB of YAML):
#: such a fleet is measured in the compact form only.
MAX_SLICE_NODES = 1000
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


# The fleet.


def _example_nodes() -> dict[str, list[Obj]]:
    """node name -> its Node and ResourceSlices, as in the example."""
    items = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))["items"]
    out: dict[str, list[Obj]] = {}
    for item in items:
        if item["kind"] == "Node":
            out.setdefault(item["metadata"]["name"], []).append(item)
        else:
            out.setdefault(item["spec"]["nodeName"], []).append(item)
    return out


def _rename(value: Any, old: str, new: str, node: str) -> Any:
    """`value` with the node's name and the GPUs' UUIDs made this clone's own."""
    if isinstance(value, dict):
        return {k: _rename(v, old, new, node) for k, v in value.items()}
    if isinstance(value, list):
        return [_rename(v, old, new, node) for v in value]
    if isinstance(value, str):
        if value == old:
            return new
        if value.startswith(f"{old}-gpu.nvidia.com"):
            return new + value[len(old) :]
        if value.startswith("GPU-"):
            return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_OID, f"{node}/{value}"))
    return value


def nvidia_fleet(nodes: int) -> list[Obj]:
    """`nodes` Nodes with NVIDIA's driver's slices (see the module's docstring)."""
    example = _example_nodes()
    out: list[Obj] = []
    for i in range(nodes):
        kind = KINDS[i % len(KINDS)]
        name = f"{kind}-{i:05d}"
        for item in example[kind]:
            clone = _rename(copy.deepcopy(item), kind, name, name)
            if clone["kind"] == "Node":
                clone["metadata"]["labels"]["kubernetes.io/hostname"] = name
            out.append(clone)
    return out


def compact_fleet(nodes: int) -> list[Obj]:
    """The same fleet as one compact Cluster description."""
    described = [
        {
            "name": f"{KINDS[i % len(KINDS)]}-{i:05d}",
            "gpus": [COMPACT[KINDS[i % len(KINDS)]]],
            "cpu": 32,
            "memory": "251Gi",
        }
        for i in range(nodes)
    ]
    return [
        {
            "apiVersion": "whatif.drasat.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "fleet"},
            "spec": {"nodes": described},
        }
    ]


# The pods, per ten: four take a GPU, one a T4 chosen by CEL, two a 1g.5gb MIG device chosen by
# CEL, one is two pods sharing one claim (gpu-test3's shape), one takes four MIG devices of one
# GPU (gpu-test4's shape: matchAttribute parentUUID), one a T4 if one is free, else a 1g.5gb MIG
# device (firstAvailable). Classic DRA has no firstAvailable and pairs MIG claims differently:
# there the last two are a pod of two MIG claims (1g.5gb, 2g.10gb) and a GPU pod.


def _pod(namespace: str, name: str, claim: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {
            "containers": [
                {
                    "name": "ctr",
                    "image": "ubuntu:24.04",
                    "command": ["sh", "-c", "nvidia-smi -L && sleep infinity"],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", **claim}],
            "tolerations": [TOLERATION],
        },
    }


def _shape(i: int) -> str:
    return ("gpu", "gpu", "gpu", "gpu", "t4", "mig", "mig", "shared", "mig4", "either")[i % 10]


def v1_pods(pods: int, driver: str, *, shares: bool = False) -> list[Obj]:
    """v1 manifests: templates, shared claims and pods, with NVIDIA's classes (`driver`
    gpu.nvidia.com) or drasat's (gpu.drasat.io); `shares`: the four pods in ten that take a GPU
    take an integer share of one instead (compute 30, memory 4Gi: drasat's capacity)."""
    gpu_class, mig_class = (
        ("gpu.nvidia.com", "mig.nvidia.com")
        if driver == NVIDIA
        else ("gpu.drasat.io", "mig.drasat.io")
    )
    namespace = "bench"

    def template(name: str, request: Obj) -> Obj:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
        }

    product = f"device.attributes['{driver}'].productName == 'Tesla T4'"
    t4 = {"deviceClassName": gpu_class, "selectors": [{"cel": {"expression": product}}]}

    def mig(profile: str) -> Obj:
        expression = f"device.attributes['{driver}'].profile == '{profile}'"
        return {"deviceClassName": mig_class, "selectors": [{"cel": {"expression": expression}}]}

    mig4 = template("mig4", mig("1g.5gb"))
    mig4["spec"]["spec"]["devices"] = {
        "requests": [
            {"name": f"mig-{i}", "exactly": mig(profile)}
            for i, profile in enumerate(("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"))
        ],
        "constraints": [{"requests": [], "matchAttribute": f"{driver}/parentUUID"}],
    }
    either = template("either", {})
    either["spec"]["spec"]["devices"]["requests"] = [
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "t4", **t4},
                {"name": "mig", **mig("1g.5gb")},
            ],
        }
    ]  # fmt: skip
    out: list[Obj] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        mig4,
        either,
        template("gpu", {"deviceClassName": gpu_class, **(_SHARE if shares else {})}),
        template("t4", t4),
        template("mig", mig("1g.5gb")),
    ]
    for i in range(pods):
        shape = _shape(i)
        if shape == "shared":
            claim_name = f"shared-{i:05d}"
            out.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"namespace": namespace, "name": claim_name},
                    "spec": {
                        "devices": {
                            "requests": [{"name": "gpu", "exactly": {"deviceClassName": gpu_class}}]
                        }
                    },
                }
            )
            out.append(_pod(namespace, f"pod-{i:05d}-a", {"resourceClaimName": claim_name}))
            out.append(_pod(namespace, f"pod-{i:05d}-b", {"resourceClaimName": claim_name}))
        else:
            out.append(_pod(namespace, f"pod-{i:05d}", {"resourceClaimTemplateName": shape}))
    return out


#: A share of a GPU by drasat's capacity (`v1_pods(shares=True)`).
_SHARE: Obj = {"capacity": {"requests": {"compute": "30", "memory": "4Gi"}}}


def classic_pods(pods: int) -> list[Obj]:
    """The same pods as classic DRA (resource.k8s.io/v1alpha2)."""
    namespace = "bench"
    group = "gpu.drasat.io"

    def parameters(kind: str, name: str, spec: Obj) -> Obj:
        return {
            "apiVersion": f"{group}/v1alpha1",
            "kind": kind,
            "metadata": {"namespace": namespace, "name": name},
            "spec": spec,
        }

    def template(name: str, kind: str) -> Obj:
        return {
            "apiVersion": "resource.k8s.io/v1alpha2",
            "kind": "ResourceClaimTemplate",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {
                "spec": {
                    "resourceClassName": group,
                    "parametersRef": {"apiGroup": group, "kind": kind, "name": name},
                }
            },
        }

    out: list[Obj] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "resource.k8s.io/v1alpha2",
            "kind": "ResourceClass",
            "metadata": {"name": group},
            "driverName": group,
        },
        parameters("GpuClaimParameters", "gpu", {"count": 1}),
        template("gpu", "GpuClaimParameters"),
        parameters("GpuClaimParameters", "t4", {"count": 1, "selector": {"productName": "*T4*"}}),
        template("t4", "GpuClaimParameters"),
        parameters("MigDeviceClaimParameters", "mig", {"profile": "1g.5gb"}),
        template("mig", "MigDeviceClaimParameters"),
        parameters("MigDeviceClaimParameters", "mig2", {"profile": "2g.10gb"}),
        template("mig2", "MigDeviceClaimParameters"),
    ]
    for i in range(pods):
        shape = _shape(i)
        if shape == "shared":
            name = f"shared-{i:05d}"
            out.append(parameters("GpuClaimParameters", name, {"count": 1}))
            out.append(
                {
                    "apiVersion": "resource.k8s.io/v1alpha2",
                    "kind": "ResourceClaim",
                    "metadata": {"namespace": namespace, "name": name},
                    "spec": {
                        "resourceClassName": group,
                        "parametersRef": {
                            "apiGroup": group,
                            "kind": "GpuClaimParameters",
                            "name": name,
                        },
                    },
                }
            )
            for suffix in ("a", "b"):
                pod = _pod(namespace, f"pod-{i:05d}-{suffix}", {})
                pod["spec"]["resourceClaims"] = [
                    {"name": "gpu", "source": {"resourceClaimName": name}}
                ]
                out.append(pod)
        elif shape == "mig4":
            pod = _pod(namespace, f"pod-{i:05d}", {})
            pod["spec"]["resourceClaims"] = [
                {"name": "gpu", "source": {"resourceClaimTemplateName": "mig"}},
                {"name": "gpu2", "source": {"resourceClaimTemplateName": "mig2"}},
            ]
            pod["spec"]["containers"][0]["resources"]["claims"].append({"name": "gpu2"})
            out.append(pod)
        else:
            pod = _pod(namespace, f"pod-{i:05d}", {})
            template_name = "gpu" if shape == "either" else shape
            pod["spec"]["resourceClaims"] = [
                {"name": "gpu", "source": {"resourceClaimTemplateName": template_name}}
            ]
            out.append(pod)
    return out


# Running.


def write_inputs(
    directory: pathlib.Path, nodes: int, pods: int, *, shares: bool = False
) -> dict[str, list[str]]:
    """The input files of each run, as `drasat whatif` arguments (`shares`: see v1_pods; the
    v1 compact run only)."""

    def dump(name: str, documents: list[Obj]) -> str:
        path = directory / name
        path.write_text(yaml.safe_dump_all(documents, sort_keys=False), encoding="utf-8")
        return str(path)

    compact = dump("compact-fleet.yaml", compact_fleet(nodes))
    runs = {
        "v1 compact": [
            "--cluster",
            compact,
            "-f",
            dump("v1-drasat.yaml", v1_pods(pods, DRASAT, shares=shares)),
        ],
        "classic": ["--cluster", compact, "-f", dump("classic.yaml", classic_pods(pods))],
    }
    if nodes <= MAX_SLICE_NODES:
        nvidia = dump("nvidia-fleet.yaml", nvidia_fleet(nodes))
        runs["v1 nvidia"] = [
            "--cluster",
            nvidia,
            "-f",
            dump("v1-nvidia.yaml", v1_pods(pods, NVIDIA)),
        ]
    return runs


def run_whatif(arguments: Sequence[str], timeout_s: float) -> Obj:
    """`drasat whatif` in a fresh process: wall time, pods placed, the solver line."""
    command = [sys.executable, "-m", "drasat", "whatif", *arguments, "-o", "table"]
    started = time.perf_counter()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, env={**os.environ}
        )
    except subprocess.TimeoutExpired:
        return {"wall_s": None, "error": f"over {timeout_s:.0f} s"}
    wall = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU time of the run (user + system): less affected than wall time by other work on a
    # shared machine.
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    found: Obj = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
    if done.returncode != 0:
        return {**found, "error": done.stderr.strip()[-300:]}
    summary = [line for line in done.stdout.splitlines() if line.startswith(("pods:", "solver:"))]
    cut = sum("the time limit ran out" in line for line in done.stdout.splitlines())
    return {**found, "summary": summary, "unexplained_lines": cut}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", nargs="+", default=["60x220", "300x1100", "5000x1000"])
    parser.add_argument("--mode", choices=("batch", "online"), default="batch")
    parser.add_argument("--only", nargs="+", default=["v1 nvidia", "v1 compact", "classic"])
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--out", default="bench/results/whatif_scale")
    parser.add_argument("--keep", metavar="DIR", help="write the inputs here and keep them")
    parser.add_argument(
        "--shares",
        action="store_true",
        help="v1 compact: the pods that take a GPU take an integer share of one (folder NxMs)",
    )
    args = parser.parse_args(argv)
    rows = []
    for fleet in args.fleet:
        nodes, pods = (int(x) for x in fleet.split("x"))
        with tempfile.TemporaryDirectory() as scratch:
            directory = pathlib.Path(args.keep or scratch) / (fleet + ("s" if args.shares else ""))
            directory.mkdir(parents=True, exist_ok=True)
            runs = write_inputs(directory, nodes, pods, shares=args.shares)
            for label in args.only:
                if label not in runs:
                    continue
                found = run_whatif([*runs[label], "--mode", args.mode], args.timeout)
                row = {"nodes": nodes, "pods": pods, "run": label, "mode": args.mode, **found}
                print(json.dumps(row), flush=True)
                rows.append(row)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out.with_suffix('.json')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
