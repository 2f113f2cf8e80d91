"""Dynamic MIG as partitionable devices (KEP 4815): counter sets and what each device consumes.

Each MIG-enabled GPU shares one counter set, `gpu-<minor>-counter-set`, among its devices: the
GPU's capacities as counters (`memory` in bytes, `compute-slices`) plus one counter per memory
slice (`memory-slice-<i>`, value 1). The whole GPU consumes all of it; a MIG placement consumes
its profile's capacities and exactly the memory slices of its placement. So the API's own
accounting forbids two overlapping placements and a whole GPU beside any of its MIG devices,
whoever allocates.

The `memory` and `compute-slices` counters must never forbid a layout the memory slices allow:
real profiles do not always add up to the GPU (H200's 3g.71gb twice is 142 GiB of a 141 GiB
GPU). Their values are therefore the most any set of non-overlapping placements can use, and at
least the GPU's own memory.

A profile NVML allows fewer instances of than its placements could hold (`1g.5gb+me`: one, for
the GPU's one set of media engines) gets a counter of its own, `profile-<id>-instances`, with
that maximum; each of its placements consumes 1.

This is a purely computational module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from drasat.api.devicemodel import names
from drasat.api.nas import GpuInfo, MigInfo

Obj = dict[str, Any]

#: Counter names are DNS labels; these mirror the capacities `memory` and `computeSlices`.
MEMORY = "memory"
COMPUTE_SLICES = "compute-slices"


def memory_slices(profiles: Sequence[MigInfo]) -> int:
    """How many memory slices the GPU has: the end of the furthest placement (8 on
    A100/H100/H200, 4 on A30)."""
    return max((p.end for m in profiles for p in m.placements), default=0)


def most_used(profiles: Sequence[MigInfo], weight: Callable[[MigInfo], int]) -> int:
    """The largest sum of `weight` over non-overlapping placements of any profiles (weighted
    interval scheduling over the memory slices)."""
    slices = memory_slices(profiles)
    best = [0] * (slices + 1)  # best[i]: the most over placements ending at or before slice i
    for end in range(1, slices + 1):
        best[end] = best[end - 1]
        for mig in profiles:
            for placement in mig.placements:
                if placement.end == end:
                    best[end] = max(best[end], best[placement.start] + weight(mig))
    return best[slices]


def instance_caps(profiles: Sequence[MigInfo], limits: Mapping[int, int]) -> dict[int, int]:
    """GPU-instance profile id -> most instances, for the profiles whose limit (NVML's
    `instanceCount`) is below what their placements alone could hold at once."""
    caps = {}
    for mig in profiles:
        limit = limits.get(mig.giProfileId) if mig.giProfileId is not None else None
        if limit is not None and limit < most_used([mig], lambda _: 1):
            caps[mig.giProfileId or 0] = limit
    return caps


def _memory(mig: MigInfo) -> int:
    return mig.memoryBytes or 0


def _compute(mig: MigInfo) -> int:
    return mig.computeSlices or 0


def counters(
    gpu: GpuInfo, profiles: Sequence[MigInfo], limits: Mapping[int, int] | None = None
) -> dict[str, int]:
    """The counter set's counters (name -> value), in a fixed order; `limits`: most instances
    per GPU-instance profile id, as NVML reports them."""
    values = {MEMORY: max(gpu.memoryBytes, most_used(profiles, _memory))}
    compute = most_used(profiles, _compute)
    if compute:
        values[COMPUTE_SLICES] = compute
    for index in range(memory_slices(profiles)):
        values[names.memory_slice_counter(index)] = 1
    for profile_id, cap in sorted(instance_caps(profiles, limits or {}).items()):
        values[names.instances_counter(profile_id)] = cap
    return values


def counter_set(
    gpu: GpuInfo, profiles: Sequence[MigInfo], limits: Mapping[int, int] | None = None
) -> Obj:
    """`{name, counters}` of one MIG-enabled GPU."""
    return {
        "name": names.counter_set_name(gpu.minor),
        "counters": {
            name: {"value": str(value)} for name, value in counters(gpu, profiles, limits).items()
        },
    }


def whole_gpu_consumption(
    gpu: GpuInfo, profiles: Sequence[MigInfo], limits: Mapping[int, int] | None = None
) -> list[Obj]:
    """The whole GPU consumes every counter of its set."""
    return [
        {
            "counterSet": names.counter_set_name(gpu.minor),
            "counters": counter_set(gpu, profiles, limits)["counters"],
        }
    ]


def mig_consumption(
    gpu: GpuInfo, mig: MigInfo, start: int, size: int, *, capped: bool = False
) -> list[Obj]:
    """A placement consumes its profile's memory and compute slices, exactly its memory slices
    and, for a `capped` profile, one of its instances."""
    used: dict[str, int] = {MEMORY: _memory(mig)}
    if mig.computeSlices:
        used[COMPUTE_SLICES] = mig.computeSlices
    for index in range(start, start + size):
        used[names.memory_slice_counter(index)] = 1
    if capped and mig.giProfileId is not None:
        used[names.instances_counter(mig.giProfileId)] = 1
    return [
        {
            "counterSet": names.counter_set_name(gpu.minor),
            "counters": {name: {"value": str(value)} for name, value in used.items()},
        }
    ]
