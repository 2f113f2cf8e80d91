"""Shares of a GPU as consumable capacity (KEP 5075).

A shareable GPU is one device with `allowMultipleAllocations: true` and two capacities, each with
a request policy:

- `memory` (bytes, rounded down to whole MiB): default all of it, any multiple of 1 MiB from
  1 MiB up to all;
- `compute` (percent of the GPU's SMs, 100): default 0, any whole percent from 0 to 100.

The API's rules then do the accounting: a request with `capacity.requests` consumes what it asks
(rounded up to the step), a request without them consumes each default — all of the memory — so
an exclusive claim never lands on a GPU holding a share, and a share never lands on a GPU held
exclusively. A share that names only memory packs by memory (as NVIDIA's `memory` consumable
shares do): it consumes no compute and gets no compute limit (MPS lets its clients use every SM);
one that names only compute takes all of the memory. Results carry `consumedCapacity` and a
`shareID`.

This is a purely computational module.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from drasat.api.nas import GpuInfo
from drasat.api.quantity import to_bytes
from drasat.api.sharing import GpuShare

Obj = dict[str, Any]

MiB = 2**20

#: Capacity names (qualified names in the driver's domain, as `memory` is in NVIDIA's).
MEMORY = "memory"
COMPUTE = "compute"


def shareable_memory(gpu: GpuInfo) -> int:
    """The GPU's memory rounded down to whole MiB (a policy's max must be a multiple of its
    step)."""
    return gpu.memoryBytes // MiB * MiB


def capacities(gpu: GpuInfo) -> dict[str, Obj]:
    """`capacity` of a shareable whole GPU."""
    memory = str(shareable_memory(gpu))
    return {
        MEMORY: {
            "value": memory,
            "requestPolicy": {
                "default": memory,
                "validRange": {"min": str(MiB), "max": memory, "step": str(MiB)},
            },
        },
        COMPUTE: {
            "value": "100",
            "requestPolicy": {
                "default": "0",
                "validRange": {"min": "0", "max": "100", "step": "1"},
            },
        },
    }


def takes_whole(memory: int, compute: int, gpu_memory: int) -> bool:
    """Whether a share that consumed this much (bytes, percent) holds the GPU whole: all of its
    shareable memory, with all of the compute or none asked (nothing else fits beside it)."""
    whole = gpu_memory // MiB * MiB
    return memory >= whole and (compute >= 100 or compute == 0)


def exclusive_capacities(gpu: GpuInfo) -> dict[str, Obj]:
    """`capacity` of a whole GPU that is not shared."""
    return {MEMORY: {"value": str(gpu.memoryBytes)}, COMPUTE: {"value": "100"}}


#: A GPU's compute in the unit shares ask it in: percent of its SMs.
FULL_COMPUTE = 100


def memory_mib(share: GpuShare) -> int:
    """The memory a share holds, in whole MiB rounded up (0 when it names none): the unit the
    solver counts shares in, and `overcommitted` too."""
    if share.memory is None:
        return 0
    return -(-to_bytes(share.memory) // MiB)


def overcommitted(found: Iterable[GpuShare], gpu_memory_bytes: int | None) -> str | None:
    """Why shares side by side on one GPU hold more of it than it has, or None when they fit:
    their compute above 100%, or their memory (each rounded up to whole MiB) above the GPU's
    (whole MiB; None: not known, only compute is checked). The solver places shares by the
    same sums (`solver.model.share_room`); the controller checks what was written with it, the
    node plugin what it prepares."""
    found = list(found)
    compute = sum(share.compute or 0 for share in found)
    if compute > FULL_COMPUTE:
        return f"compute {compute}% of {FULL_COMPUTE}%"
    if gpu_memory_bytes is None:
        return None
    memory, capacity = sum(memory_mib(share) for share in found), gpu_memory_bytes // MiB
    if memory > capacity:
        return f"memory {memory} MiB of {capacity} MiB"
    return None
