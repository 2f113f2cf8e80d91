"""How long drasat's preemption plan takes on a full fleet (docs/CONTROLLER.md, *Preemption*).

Nodes of 8 T4s are filled with running pods of 1 or 2 whole GPUs at priorities 0, 10 and 20
(seeded); a preemptor of priority 100 asks 1, 3 or 4 whole GPUs. Each line: the victims chosen,
how many sets the allocator was asked about, whether the choice is proven optimal, and the wall
time of `drasat.v1.preemption.plan` and its CPU time (one call, this process, one CP-SAT
worker).

    .venv/bin/python -m bench.preemption_plan --nodes 10 100
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time

from drasat import v1
from drasat.api import catalog
from drasat.api.devicemodel import classes
from drasat.api.nas import AllocatableDevice, GpuInfo, NodeAllocationStateSpec
from drasat.solver import NodeState
from drasat.v1 import preemption, publisheddevices
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
    state = NodeState(name=name, nas=NodeAllocationStateSpec(allocatableDevices=gpus))
    return v1.Node(state, tuple(publisheddevices.drasat_devices(name, state.nas)))


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
            entries = {**node.state.nas.allocatedClaims, **placed.ledger}
            nas = node.state.nas.model_copy(update={"allocatedClaims": entries})
            node = dataclasses.replace(node, state=dataclasses.replace(node.state, nas=nas))
            running.append(Running(pod.key, node.state.name, pod.priority, (placed.uid,)))
            free, k = free - size, k + 1
        nodes.append(node)
    return nodes, running


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10, 100])
    args = parser.parse_args()
    for count in args.nodes:
        nodes, running = fleet(count)
        users = {r.claims[0]: frozenset({r.key}) for r in running}
        for want in (1, 3, 4):
            pod = v1.PodInput("bench/hi", "bench", (_claim("hi", want),), 100)
            started, cpu = time.perf_counter(), time.process_time()
            found = preemption.plan(pod, nodes, running, users, CLASSES)
            took, cpu = time.perf_counter() - started, time.process_time() - cpu
            said = f"victims={len(found.victims)} {preemption.checked(found.checks)}"
            print(
                f"nodes={count} pods={len(running)} want={want} GPUs: {said} "
                f"proven={found.proven} {took * 1e3:.0f} ms ({cpu * 1e3:.0f} ms CPU)"
            )


if __name__ == "__main__":
    main()
