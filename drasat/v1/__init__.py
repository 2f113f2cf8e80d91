"""`resource.k8s.io/v1` claims placed by drasat's solver: the translation the controller's v1
mode and the what-if share (never a second copy).

- `cel`: CEL device selectors, evaluated with cel-python on published devices;
- `devices`: what a node publishes, tied to the solver's terms (drasat's from the NAS through the
  node plugin's device model; other drivers' read by the caller);
- `slices` (models in `slicekinds`): ResourceSlices read into each node's devices, as upstream
  reads pools (the controller's inventory, and the what-if's for slices it is given);
- `otherdevices`: other drivers' devices (a NIC beside a GPU in one claim) from their slices,
  what taking each draws, and what allocated claims hold of them;
- `requests`: a claim's requests, alternatives, constraints and configs, or why not;
- `variants`: the ways a pod's claims can be met, as solver claims, best first;
- `results`: placements as `status.allocation` and NAS ledger entries, and back;
- `allocate`: the rounds of solver calls that place a batch of pods.

Purely computational: no Kubernetes client, no I/O.
"""

from drasat.v1.allocate import (
    ClaimAllocation,
    Node,
    Outcome,
    PodInput,
    allocate,
    with_allocations,
    with_other_devices,
)

__all__ = [
    "ClaimAllocation",
    "Node",
    "Outcome",
    "PodInput",
    "allocate",
    "with_allocations",
    "with_other_devices",
]
