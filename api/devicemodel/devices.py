"""The devices of a node: one v1 `Device` per whole GPU, MIG placement and the CPU fallback,
with NVIDIA's attribute names and capacities.

- whole GPU `gpu-<minor>`: `type` "gpu", `uuid`, `index`, `minor`, `productName`, `brand`,
  `architecture`, `migEnabled`, `cudaComputeCapability`, `driverVersion`, `cudaDriverVersion`
  (the last three as versions), `resource.kubernetes.io/pciBusID` and `numaNode` where known;
  capacity `memory` (bytes) and `compute` (percent); shareable (`shares`) or exclusive; on a
  MIG-enabled GPU it consumes its whole counter set;
- MIG placement `gpu-<minor>-mig-<profile>-<profileID>-<start>`: `type` "mig", `profile`,
  `parentUUID`, `parentMinor`, `parentIndex`, the parent's product attributes, `placementStart`
  and `placementSize` (memory slices); capacity `memory` and `computeSlices`; consumes its
  counters;
- `cpu-fallback`: `type` "cpu-fallback", allocatable any number of times.

This is a purely computational module.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from drasat.api.devicemodel import names, partitions, shares, taints
from drasat.api.devicemodel.nodegpus import GpuHealth
from drasat.api.nas import GpuInfo, MigInfo

Obj = dict[str, Any]

#: The qualified name Kubernetes reserves for a device's PCI address (KEP 4381).
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"

#: Values of the `type` attribute.
TYPE_GPU = "gpu"
TYPE_MIG = "mig"
TYPE_FALLBACK = "cpu-fallback"

_VERSION_PARTS = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?$")


def semver(text: str) -> str | None:
    """A version attribute's value: NVML's `8.0` or `12.4` padded to semver (`8.0.0`), None
    when `text` is not a dotted number (the attribute is then left out)."""
    match = _VERSION_PARTS.match(text.strip())
    if match is None:
        return None
    return ".".join(str(int(part or 0)) for part in match.groups())


def product_attributes(gpu: GpuInfo) -> Obj:
    """What a GPU and its MIG devices share: product, architecture, versions, NUMA node."""
    attributes: Obj = {
        "productName": {"string": gpu.productName},
        "brand": {"string": gpu.brand},
        "architecture": {"string": gpu.architecture},
    }
    for name in ("cudaComputeCapability", "driverVersion", "cudaDriverVersion"):
        version = semver(getattr(gpu, name))
        if version is not None:
            attributes[name] = {"version": version}
    if gpu.numaNode is not None:
        attributes["numaNode"] = {"int": gpu.numaNode}
    return attributes


def gpu_attributes(gpu: GpuInfo) -> Obj:
    attributes: Obj = {
        "type": {"string": TYPE_GPU},
        "uuid": {"string": gpu.uuid},
        "index": {"int": gpu.index},
        "minor": {"int": gpu.minor},
        "migEnabled": {"bool": gpu.migEnabled},
        **product_attributes(gpu),
    }
    if gpu.pciBusID:
        attributes[PCI_BUS_ID] = {"string": gpu.pciBusID.lower()}
    return attributes


def _with_taints(device: Obj, health: GpuHealth | None) -> Obj:
    found = taints.taints(health)
    if found:
        device["taints"] = found
    return device


def gpu_device(
    gpu: GpuInfo,
    *,
    profiles: Sequence[MigInfo] = (),
    limits: Mapping[int, int] | None = None,
    shareable: bool = False,
    health: GpuHealth | None = None,
) -> Obj:
    """One whole GPU; `profiles` (a MIG-enabled GPU's, with NVML's instance `limits`) make it
    consume its counter set."""
    shareable = shareable and shares.shareable_memory(gpu) >= shares.MiB
    device: Obj = {
        "name": names.gpu_name(gpu.minor),
        "attributes": gpu_attributes(gpu),
        "capacity": shares.capacities(gpu) if shareable else shares.exclusive_capacities(gpu),
    }
    if shareable:
        device["allowMultipleAllocations"] = True
    if profiles:
        device["consumesCounters"] = partitions.whole_gpu_consumption(gpu, profiles, limits)
    return _with_taints(device, health)


def mig_devices(
    gpu: GpuInfo,
    profiles: Sequence[MigInfo],
    *,
    limits: Mapping[int, int] | None = None,
    health: GpuHealth | None = None,
    counters: bool = True,
) -> list[Obj]:
    """One device per (profile, placement) of a MIG-enabled GPU, by profile id then start.
    Profiles without a GPU-instance profile id (it names the device) are left out. `counters`:
    each consumes its memory slices of the GPU's counter set (off: the placement alone)."""
    out: list[Obj] = []
    caps = partitions.instance_caps(profiles, limits or {})
    ordered = sorted(
        (m for m in profiles if m.giProfileId is not None),
        key=lambda m: (m.giProfileId or 0, m.profile),
    )
    if not ordered:
        return out
    # The parent's product attributes, read once per GPU (not per placement: an A100 has 19).
    product = product_attributes(gpu)
    for mig in ordered:
        assert mig.giProfileId is not None
        for placement in sorted(mig.placements, key=lambda p: p.start):
            attributes: Obj = {
                "type": {"string": TYPE_MIG},
                "profile": {"string": mig.profile},
                "parentUUID": {"string": gpu.uuid},
                "parentMinor": {"int": gpu.minor},
                "parentIndex": {"int": gpu.index},
                "placementStart": {"int": placement.start},
                "placementSize": {"int": placement.size},
                # Each device its own attribute objects, as when built one by one.
                **{name: dict(value) for name, value in product.items()},
            }
            capacity: Obj = {"memory": {"value": str(mig.memoryBytes or 0)}}
            if mig.computeSlices:
                capacity["computeSlices"] = {"value": str(mig.computeSlices)}
            device: Obj = {
                "name": names.mig_name(gpu.minor, mig.profile, mig.giProfileId, placement.start),
                "attributes": attributes,
                "capacity": capacity,
            }
            if counters:
                device["consumesCounters"] = partitions.mig_consumption(
                    gpu, mig, placement.start, placement.size, capped=mig.giProfileId in caps
                )
            out.append(_with_taints(device, health))
    return out


def fallback_device(*, multiple: bool = True) -> Obj:
    """`cpu-fallback`: the node's "no GPU" device, allocatable any number of times; prepared
    as an empty CDI edit. `multiple`: say so (`allowMultipleAllocations`, which a server without
    DRAConsumableCapacity drops; drasat's controller knows the device by its type either way)."""
    device: Obj = {"name": names.CPU_FALLBACK, "attributes": {"type": {"string": TYPE_FALLBACK}}}
    if multiple:
        device["allowMultipleAllocations"] = True
    return device
