"""drasat's own placement as a policy of the openb replay: the product's solver, online mode.

The trace's nodes become NodeStates (CPU, memory, one GpuInfo per GPU with a product name for
the trace's model) and each task a pod with one GpuClaimParameters claim: `count` whole GPUs, or
a `share` of one GPU (compute = gpu_milli / 10 percent), and a productName selector for its
gpu_spec. The solver places the pods in arrival order, one decision at a time
(`SolveParams(mode=Mode.online)`), one pod per solver call by default (as a pod arriving alone
meets it: the replay's time per pod is the decision's latency), or in chunks of consecutive pods
(one call covers many decisions); the replay's own capacity model checks every decision it
returns.

The fragmentation term's target workload (`Problem.workload`) is the one FGD gets: the trace's
popular pod classes covering 95% of the pod list, with their frequencies (`target_shapes`).
The `-local` policies leave it out, so the solver estimates it from each call's chunk of pods.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable

import numpy as np

from bench.openb_sim import Cluster, Policy
from bench.openb_trace import MILLI, IntArray, Nodes, Pods, TargetWorkload
from drasat.api.nas import AllocatableDevice, GpuInfo, NodeAllocationStateSpec
from drasat.api.policy import AllocationPolicySpec, ObjectiveTerm, Term, WorkloadShape
from drasat.api.selectors import GpuSelector
from drasat.api.sharing import GpuShare
from drasat.solver import (
    ClaimRequest,
    GpuDemand,
    Mode,
    NodeState,
    PodRequest,
    Problem,
    Solution,
    SolveParams,
    SolverCache,
    solve,
)
from drasat.v1 import nasinventory

GiB = 2**30
NAMESPACE = "openb"

#: The trace's GPU models as NVML would name them (G1-G3 are undisclosed internal codes).
PRODUCTS: dict[str, tuple[str, int]] = {
    "A10": ("NVIDIA A10", 24 * GiB),
    "G1": ("openb-G1", 16 * GiB),
    "G2": ("openb-G2", 16 * GiB),
    "G3": ("openb-G3", 32 * GiB),
    "P100": ("Tesla P100-PCIE-16GB", 16 * GiB),
    "T4": ("Tesla T4", 15 * GiB),
    "V100M16": ("Tesla V100-SXM2-16GB", 16 * GiB),
    "V100M32": ("Tesla V100-SXM2-32GB", 32 * GiB),
}

POLICIES: dict[str, AllocationPolicySpec] = {
    # The shipped default: fragmentation 4, binpack 2, minimizeMigWaste 1.
    "drasat": AllocationPolicySpec(),
    "drasat-frag": AllocationPolicySpec(objective=[ObjectiveTerm(term=Term.fragmentation)]),
    "drasat-binpack": AllocationPolicySpec(objective=[ObjectiveTerm(term=Term.binpack)]),
}
#: Suffix of a policy that gets no target workload (the solver estimates it per chunk).
LOCAL = "-local"
#: Weights of the target shapes: frequencies in these units.
WEIGHT_SCALE = 10_000


def _uuid(node: str, index: int) -> str:
    return f"GPU-{node}-{index}"


def node_states(nodes: Nodes) -> list[NodeState]:
    """One NodeState per trace node: its GPUs, CPU and memory capacity, nothing allocated."""
    states: list[NodeState] = []
    for i, name in enumerate(nodes.names):
        product, memory = PRODUCTS.get(nodes.models[nodes.model[i]], ("openb-other", 16 * GiB))
        devices = [
            AllocatableDevice(
                gpu=GpuInfo(
                    index=g,
                    uuid=_uuid(name, g),
                    minor=g,
                    memoryBytes=memory,
                    productName=product,
                    architecture="openb",
                )
            )
            for g in range(int(nodes.gpus[i]))
        ]
        states.append(
            nasinventory.node_state(
                name,
                NodeAllocationStateSpec(allocatableDevices=devices),
                cpu_milli=int(nodes.cpu_milli[i]),
                memory_mib=int(nodes.memory_mib[i]),
            )
        )
    return states


def _selector(spec: str) -> GpuSelector | None:
    names = [PRODUCTS.get(m, (m, 0))[0] for m in spec.split("|") if m]
    if not names:
        return None
    if len(names) == 1:
        return GpuSelector(productName=names[0])
    return GpuSelector(orExpression=[GpuSelector(productName=n) for n in names])


def target_shapes(target: TargetWorkload) -> tuple[WorkloadShape, ...]:
    """FGD's target workload as the solver's: one shape per GPU class (CPU-only classes can use
    no GPU on any node, so they add the same to every node's measure and are left out)."""
    shapes: list[WorkloadShape] = []
    for k in range(target.count):
        n, m = int(target.num_gpu[k]), int(target.milli[k])
        if n <= 0 or m <= 0:
            continue
        shapes.append(
            WorkloadShape(
                count=n,
                share=GpuShare(compute=max(1, m * 100 // MILLI)) if m < MILLI else None,
                selector=_selector(target.spec[k]),
                namespace=NAMESPACE,
                cpu=f"{int(target.cpu_milli[k])}m",
                weight=max(1, round(float(target.freq[k]) * WEIGHT_SCALE)),
            )
        )
    return tuple(shapes)


def pod_request(pods: Pods, p: int, key: str) -> PodRequest:
    """The trace task as a pod with (at most) one GPU claim."""
    n, m = int(pods.num_gpu[p]), int(pods.milli[p])
    claims: tuple[ClaimRequest, ...] = ()
    if n > 0 and m > 0:
        share = GpuShare(compute=m * 100 // MILLI) if m < MILLI else None
        spec = GpuDemand(count=n, selector=_selector(pods.spec[p]), share=share)
        claims = (ClaimRequest(uid=f"{key}-gpu", namespace=NAMESPACE, name=f"{key}-gpu", gpu=spec),)
    return PodRequest(
        key=f"{NAMESPACE}/{key}",
        namespace=NAMESPACE,
        claims=claims,
        cpu_milli=int(pods.cpu_milli[p]),
        memory_mib=int(pods.memory_mib[p]),
    )


@dataclasses.dataclass
class _Decided:
    node: int
    gpus: list[int]


class DrasatOnline(Policy):
    """Decisions of `drasat.solver.solve` in online mode, computed `chunk` pods at a time."""

    def __init__(
        self, name: str, policy: AllocationPolicySpec, *, chunk: int = 64, target: bool = True
    ) -> None:
        super().__init__()
        self.name, self.policy, self.chunk, self.target = name, policy, chunk, target
        self.shapes: tuple[WorkloadShape, ...] | None = None
        self.states: list[NodeState] | None = None
        self.index: dict[str, int] = {}
        self.decided: dict[int, _Decided | None] = {}
        self.solver_s: list[tuple[int, float]] = []  # (decisions, wall seconds) per call
        #: One solver cache for the replay, as the controller keeps one.
        self.cache = SolverCache()

    def _solve_from(self, pods: Pods, start: int, cluster: Cluster) -> None:
        nodes = cluster.nodes
        if self.states is None:
            self.states = node_states(nodes)
            self.index = {name: i for i, name in enumerate(nodes.names)}
            self.shapes = target_shapes(cluster.target) if self.target else None
        stop = min(start + self.chunk, pods.count)
        keys = {f"{NAMESPACE}/{p:06d}": p for p in range(start, stop)}
        requests = tuple(pod_request(pods, p, f"{p:06d}") for p in range(start, stop))
        problem = Problem(
            nodes=tuple(self.states), pods=requests, policy=self.policy, workload=self.shapes
        )
        began = time.perf_counter()
        solution = self.solve_chunk(problem)
        self.solver_s.append((stop - start, time.perf_counter() - began))
        for p in range(start, stop):
            self.decided[p] = None
        for placement in solution.placements:
            p = keys[placement.pod]
            node = self.index[placement.node]
            gpus: list[int] = []
            for entry in placement.allocations.values():
                gpus += [int(uuid.rsplit("-", 1)[1]) for uuid in entry.gpus]
            self.decided[p] = _Decided(node, sorted(gpus))
            state = self.states[node]
            self.states[node] = dataclasses.replace(
                state,
                ledger=state.ledger.with_allocated(placement.allocations),
                used_cpu_milli=state.used_cpu_milli + int(pods.cpu_milli[p]),
                used_memory_mib=state.used_memory_mib + int(pods.memory_mib[p]),
            )

    def solve_chunk(self, problem: Problem) -> Solution:
        """One solver call over the chunk's pods: online, each decision final before the next."""
        return solve(problem, SolveParams(mode=Mode.online, explain=False, cache=self.cache))

    def decision(self, cluster: Cluster, pods: Pods, p: int) -> _Decided | None:
        if p not in self.decided:
            self._solve_from(pods, p, cluster)
        return self.decided.pop(p)

    def choose(
        self, cluster: Cluster, pods: Pods, p: int, feasible: IntArray, rng: np.random.Generator
    ) -> tuple[int, list[int]] | None:
        decided = self.decision(cluster, pods, p)
        if decided is None:
            return None
        if decided.node not in set(feasible.tolist()):
            raise AssertionError(
                f"solver placed pod {p} on node {decided.node}, which cannot host it"
            )
        return decided.node, decided.gpus

    def unplaceable(self, cluster: Cluster, pods: Pods, p: int) -> None:
        if self.decision(cluster, pods, p) is not None:
            raise AssertionError(f"solver placed pod {p}, which no node can host")

    def decisions_per_s(self) -> float:
        decisions = sum(n for n, _ in self.solver_s)
        seconds = sum(s for _, s in self.solver_s)
        return decisions / seconds if seconds else float("nan")


#: Pods per solver call of the `-local` policies: the solver estimates their workload from the
#: call's pods, so the chunk is part of the policy.
LOCAL_CHUNK = 64


def factory(name: str, *, chunk: int | None = None) -> Callable[[], Policy]:
    """`drasat`, `drasat-frag`, `drasat-binpack`, `drasat-f<N>b<M>` (`weighted`), each also with
    the `-local` suffix.

    `chunk`: pods per solver call. Default: 1 (each decision its own call, so the time the
    replay records per pod is the decision's latency; with a target workload the decisions do
    not depend on the chunk), LOCAL_CHUNK for the `-local` policies."""
    base = name.removesuffix(LOCAL)
    policy = POLICIES.get(base) or weighted(base)
    if policy is None:
        known = ", ".join([*POLICIES, *(p + LOCAL for p in POLICIES), "drasat-f<N>b<M>"])
        raise SystemExit(f"unknown drasat policy {name!r}; known: {known}")
    target = not name.endswith(LOCAL)
    size = chunk if chunk is not None else (1 if target else LOCAL_CHUNK)
    return lambda: DrasatOnline(name, policy, chunk=size, target=target)


def weighted(name: str) -> AllocationPolicySpec | None:
    """`drasat-f<N>b<M>`: the default objective with fragmentation weight N and binpack weight
    M (0: no binpack term), minimizeMigWaste 1, for sweeping the weights; None for other names."""
    match = re.fullmatch(r"drasat-f(\d+)b(\d+)", name)
    if match is None:
        return None
    frag, binpack = int(match[1]), int(match[2])
    terms = [ObjectiveTerm(term=Term.fragmentation, weight=frag)] if frag else []
    if binpack:
        terms.append(ObjectiveTerm(term=Term.binpack, weight=binpack))
    terms.append(ObjectiveTerm(term=Term.minimizeMigWaste, weight=1))
    return AllocationPolicySpec(objective=terms)
