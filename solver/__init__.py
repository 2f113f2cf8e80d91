"""The placement solver: compiles a Problem into CP-SAT, solves, extracts a Solution. Pure.

Imports only `drasat.api` (never the claim parameters of `drasat.api.claims`: a claim reaches it
as `claimspec`'s GpuDemand or MigDemand; never the NodeAllocationState of `drasat.api.nas`: a
node reaches it as `nodemodel`'s devices and `ledger`'s Ledger) and ortools: no Kubernetes, gRPC
or NVML.
`solve(problem, params)` is deterministic: same input, same output (fixed seed; one worker unless
the policy asks for more in batch mode, where a time limit can then make results differ between
runs). It keeps no state of its own: its memo tables live in a `SolverCache` the caller passes
in `SolveParams.cache` (one per controller; none: a fresh one per solve), safe to share between
concurrent solves and never changing an answer (`cache`).

What it decides (the modules say why):

- devices (`inventory`): healthy GPUs of ready nodes; the ledger's existing allocations are
  facts (GPUs held whole, share sums, occupied MIG slices) and are never moved; claims still
  prepared without an allocation (being torn down) and reported orphan MIG devices are busy too;
- claims (`demand`): whole GPUs by count and selector, on non-MIG GPUs unless the claim allows
  MIG-mode GPUs; MIG by profile or by needs (least waste), at a placement its product offers on
  a MIG-enabled GPU, no overlap, one "+me" per GPU, paired by `gpuClaimName` with a GPU claim
  of the same pod; shares (compute %, memory) on non-MIG GPUs within 100 % and the GPU's
  memory, never beside an exclusive claim; optional claims get devices when possible, else none;
  a claim used by several pods is allocated once and its pods share a node (claims of
  non-sharable classes serve one pod);
- policy (`rules`): allowedProducts and reservations without count remove GPUs; reservations
  with count and namespace limits are budgets that count existing allocations;
- objective (`model`): lexicographic — placed pods weighted by priority (namespacePriorities
  added), optional devices, earlier pods first — then the policy's weighted terms (binpack,
  spread, fragmentation, preferNode, preferProduct, minimizeMigWaste, Preferred topology);
  fragmentation is workload-aware (`workload`): it charges the free GPU compute that the
  target workload's claim shapes can no longer use on the node (FGD's measure), CPU included;
  the target is the policy's `workload` list, else `Problem.workload`, else the pods' shapes;
- modes (`placement`): online decides pod by pod, each the best node's per-node optimum
  (`nodes`: exact enumeration for one-claim pods, a small CP-SAT model otherwise, memoized by
  canonical node state); batch solves all pods in one model warm-started from online;
- explanations (`filters`, `explain`): exact per-node checks name selector, count, MIG overlap,
  share capacity, policy rule, readiness, CPU/memory; otherwise rules behind assumption literals
  and CP-SAT's sufficient assumptions name the blocking rule. Reasons are data naming the pod's
  claims and the node by reference (`reasons`), rendered with their names at the end.

`Solution.objective`: batch reports `primary * (secondary bound + 1) - secondary` of its model
(higher is better); online reports minus the sum of the chosen per-node secondary costs.
`Solution.status` claims only what is proven (`Status.meaning`): OPTIMAL only where CP-SAT proved
the whole set; online mode is PER_POD_OPTIMAL with no bound (`best_bound`, `gap` None).
"""

from drasat.solver.cache import SolverCache
from drasat.solver.claimspec import DeviceDemand, GpuDemand, MigDemand, Requirement, Topology
from drasat.solver.ledger import Allocation, InitStep, Ledger, MigTaken, Prepared
from drasat.solver.placement import solve
from drasat.solver.problem import (
    ClaimRequest,
    DeviceConstraint,
    Gang,
    Mode,
    NodeState,
    PodPlacement,
    PodRejection,
    PodRequest,
    Problem,
    Solution,
    SolveParams,
    Status,
)

__all__ = [
    "Allocation",
    "ClaimRequest",
    "DeviceConstraint",
    "DeviceDemand",
    "Gang",
    "GpuDemand",
    "InitStep",
    "Ledger",
    "MigDemand",
    "MigTaken",
    "Mode",
    "NodeState",
    "PodPlacement",
    "PodRejection",
    "PodRequest",
    "Prepared",
    "Problem",
    "Requirement",
    "Solution",
    "SolveParams",
    "SolverCache",
    "Status",
    "Topology",
    "solve",
]
