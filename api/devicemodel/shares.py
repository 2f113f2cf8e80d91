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

from typing import Any

from drasat.api.nas import GpuInfo

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
