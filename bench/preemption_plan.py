"""How long drasat's preemption plan takes on a full fleet (docs/PERFORMANCE.md, *Preemption
plans*).

Whole GPUs: nodes of 8 T4s are filled with running pods of 1 or 2 whole GPUs at priorities 0,
10 and 20 (seeded); a preemptor of priority 100 asks 1, 3 or 4 whole GPUs. MIG (`--mig`): nodes
of one A100-40GB in MIG mode, each full of seven 1g.5gb pods at priorities 0, 10 and 20; a
preemptor asks a 1g.5gb, 2g.10gb, 3g.20gb or 7g.40gb device. Shares (`--shares`): nodes of one T4
full of four 25% shares; a preemptor asks a 50% share. Each line: the victims chosen, how many
sets the allocator was asked about, whether the choice is proven optimal (or none proven to
exist), and the wall time of `drasat.v1.preemption.plan` and its CPU time (one call, this
process, one CP-SAT worker).

    .venv/bin/python -m bench.preemption_plan --nodes 10 100
    .venv/bin/python -m bench.preemption_plan --mig --nodes 10 100
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time

from drasat import v1
from drasat.api import catalog
from drasat.api.devicemodel import classes
from drasat.api.nas import (
    AllocatableDevice,
    GpuInfo,
    MigInfo,
    MigPlacement,
    NodeAllocationStateSpec,
)
from drasat.v1 import nasinventory, preemption, publisheddevices
from drasat.v1.preemption import Running

CLASSES = {c["metadata"]["name"]: c for c in classes.device_classes()}
Obj = dict[str, object]


def _claim(name: str, count: int) -> Obj:
    request = {"name": "g", "exactly": {"deviceClassName": classes.GPU_CLASS, "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [request]}},
    }


def _node(name: str) -> v1.Node:
    product = catalog.find_product("T4")
    assert product is not None
    gpus = [
        AllocatableDevice(
            gpu=GpuInfo(
                index=i,
                uuid=f"GPU-{name}-{i}",
                minor=i,
                memoryBytes=product.memory_bytes,
                productName=product.product_name,
                brand=product.brand,
                architecture=product.architecture,
                cudaComputeCapability=product.compute_capability,
                driverVersion="550.54.15",
                cudaDriverVersion="12.4",
            )
        )
        for i in range(8)
    ]
    spec = NodeAllocationStateSpec(allocatableDevices=gpus)
    state = nasinventory.node_state(name, spec)
    return v1.Node(state, tuple(publisheddevices.drasat_devices(name, state.devices)))


def fleet(count: int, seed: int = 0) -> tuple[list[v1.Node], list[Running]]:
    """`count` full nodes and the pods running on them."""
    rng = random.Random(seed)
    nodes, running = [], []
    for i in range(count):
        node, free, k = _node(f"n{i}"), 8, 0
        while free:
            size = min(free, rng.choice([1, 1, 2]))
            claim = _claim(f"c{i}-{k}", size)
            pod = v1.PodInput(f"bench/p{i}-{k}", "bench", (claim,), rng.choice([0, 10, 20]))
            (placed,) = v1.allocate([node], [pod], CLASSES).allocations.values()
            state = nasinventory.with_entries(node.state, placed.ledger)
            node = dataclasses.replace(node, state=state)
            running.append(Running(pod.key, node.state.name, pod.priority, (placed.uid,)))
            free, k = free - size, k + 1
        nodes.append(node)
    return nodes, running


def _profile_claim(name: str, profile: str) -> Obj:
    selector = f'device.attributes["gpu.drasat.io"].profile == "{profile}"'
    exactly = {
        "deviceClassName": classes.MIG_CLASS,
        "selectors": [{"cel": {"expression": selector}}],
    }
    request = {"name": "m", "exactly": exactly}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [request]}},
    }


def _share_claim(name: str, compute: int) -> Obj:
    capacity = {"requests": {"compute": str(compute), "memory": "2Gi"}}
    request = {"name": "s", "exactly": {"deviceClassName": classes.GPU_CLASS,
                                        "capacity": capacity}}  # fmt: skip
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [request]}},
    }


def _copies(
    template: v1.Node, running: list[Running], count: int
) -> tuple[list[v1.Node], list[Running]]:
    """`count` nodes like `template` (its uuids renamed per node), with its pods on each."""
    nodes, out = [], []
    for i in range(count):
        name = f"n{i}"
        template_nas = NodeAllocationStateSpec(
            allocatableDevices=nasinventory.allocatable_of(template.state.devices),
            allocatedClaims=nasinventory.entries_of(template.state.ledger.allocated),
        )
        nas = NodeAllocationStateSpec.model_validate_json(
            template_nas.model_dump_json().replace("GPU-n0-", f"GPU-{name}-")
            .replace("uid-n0-", f"uid-{name}-")
        )  # fmt: skip
        state = dataclasses.replace(
            template.state,
            name=name,
            devices=nasinventory.devices_of(nas),
            ledger=nasinventory.ledger_of(nas),
        )
        nodes.append(v1.Node(state, tuple(publisheddevices.drasat_devices(name, state.devices))))
        for r in running:
            uid = r.claims[0].replace("uid-n0-", f"uid-{name}-")
            out.append(Running(r.key.replace("p0-", f"p{i}-"), name, r.priority, (uid,)))
    return nodes, out


def _one_node(product: str, mig: bool) -> v1.Node:
    found = catalog.find_product(product)
    assert found is not None
    gpu = AllocatableDevice(gpu=GpuInfo(
        index=0, uuid="GPU-n0-0", minor=0, migEnabled=mig, memoryBytes=found.memory_bytes,
        productName=found.product_name, brand=found.brand, architecture=found.architecture,
        cudaComputeCapability=found.compute_capability, driverVersion="550.54.15",
        cudaDriverVersion="12.4"))  # fmt: skip
    devices = [gpu]
    if mig:
        devices += [
            AllocatableDevice(
                mig=MigInfo(
                    profile=p.name,
                    parentProductName=found.product_name,
                    placements=[MigPlacement(start=s, size=p.memory_slices) for s in p.starts],
                    giProfileId=p.gi_profile_id,
                )
            )
            for p in found.mig_profiles
        ]
    spec = NodeAllocationStateSpec(allocatableDevices=devices)
    state = nasinventory.node_state("n0", spec)
    return v1.Node(state, tuple(publisheddevices.drasat_devices("n0", state.devices)))


def filled(count: int, kind: str, seed: int = 0) -> tuple[list[v1.Node], list[Running]]:
    """`count` nodes of one GPU, full: seven 1g.5gb pods (`mig`) or four 25% shares."""
    rng = random.Random(seed)
    node = _one_node("A100-40GB" if kind == "mig" else "T4", kind == "mig")
    running: list[Running] = []
    for k in range(7 if kind == "mig" else 4):
        name = f"n0-{k}"
        claim = _profile_claim(name, "1g.5gb") if kind == "mig" else _share_claim(name, 25)
        pod = v1.PodInput(f"bench/p0-{k}", "bench", (claim,), rng.choice([0, 10, 20]))
        (placed,) = v1.allocate([node], [pod], CLASSES).allocations.values()
        state = nasinventory.with_entries(node.state, placed.ledger)
        node = dataclasses.replace(node, state=state)
        running.append(Running(pod.key, "n0", pod.priority, (placed.uid,)))
    return _copies(node, running, count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--mig", action="store_true", help="full A100 MIG nodes")
    parser.add_argument("--shares", action="store_true", help="T4s full of shares")
    args = parser.parse_args()
    if args.mig or args.shares:
        kind = "mig" if args.mig else "shares"
        profiles = ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")
        wants = [(p, _profile_claim("hi", p)) for p in profiles]
        if not args.mig:
            wants = [("50%", _share_claim("hi", 50))]
        for count in args.nodes:
            nodes, running = filled(count, kind)
            users = {r.claims[0]: frozenset({r.key}) for r in running}
            for label, claim in wants:
                _run(f"nodes={count} pods={len(running)} want={label}", claim, nodes, running,
                     users)  # fmt: skip
        return
    for count in args.nodes:
        nodes, running = fleet(count)
        users = {r.claims[0]: frozenset({r.key}) for r in running}
        for want in (1, 3, 4):
            _run(f"nodes={count} pods={len(running)} want={want} GPUs:", _claim("hi", want),
                 nodes, running, users)  # fmt: skip


def _run(
    label: str,
    claim: Obj,
    nodes: list[v1.Node],
    running: list[Running],
    users: dict[str, frozenset[str]],
) -> None:
    pod = v1.PodInput("bench/hi", "bench", (claim,), 100)
    started, cpu = time.perf_counter(), time.process_time()
    found = preemption.plan(pod, nodes, running, users, CLASSES)
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    said = f"victims={len(found.victims)} {preemption.checked(found.checks)}"
    if found.node is None:
        said = f"none ({found.reason}) {preemption.checked(found.checks)}"
    print(f"{label} {said} proven={found.proven} {took * 1e3:.0f} ms ({cpu * 1e3:.0f} ms CPU)")


if __name__ == "__main__":
    main()
