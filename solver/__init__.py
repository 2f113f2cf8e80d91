"""The placement solver: compiles a Problem into CP-SAT, solves, extracts a Solution. Pure.

Imports only `drasat.api` and ortools: no Kubernetes, gRPC or NVML.
"""

from drasat.solver.placement import solve
from drasat.solver.problem import (
    ClaimRequest,
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
    "ClaimRequest",
    "Mode",
    "NodeState",
    "PodPlacement",
    "PodRejection",
    "PodRequest",
    "Problem",
    "Solution",
    "SolveParams",
    "Status",
    "solve",
]
