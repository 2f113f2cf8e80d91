"""The nodes of a compact `Cluster` whose GPUs NVIDIA's DRA driver publishes (`driver:
gpu.nvidia.com` on a node group), as that driver publishes them: the Node and the node's
ResourceSlices, which the what-if then reads with the reader of real NVIDIA slices
(`drasat.v1.slices`), so a hypothetical fleet is planned over the devices NVIDIA's driver would
publish, in its format (what `kubectl get resourceslices,nodes -o yaml` prints on such a
cluster; deploy/examples/v1-nvidia-quickstart/cluster/nvidia-slices.yaml is one):

- a GPU not in MIG mode: `gpu-<minor>`, attributes `type: gpu`, `uuid`, `productName`,
  `brand`, `architecture`, `cudaComputeCapability`, `driverVersion`, `cudaDriverVersion`
  (versions), `resource.kubernetes.io/pciBusID` and `pcieRoot`; capacity `memory`;
- a MIG-mode GPU, dynamic MIG (KEP 4815): the counter set `gpu-<minor>-counter-set` (`memory`
  and `memory-slice-<i>` = 1) in a slice of its own, the whole GPU consuming all of it, and every
  placement of every profile `gpu-<minor>-mig-<profile>-<profileID>-<start>` (`type: mig`,
  `parentUUID`, `profile`; capacity `memory`) consuming its memory and memory slices;
- a MIG-mode GPU, static MIG (`migDevices`): only the MIG devices made beforehand, each with its
  own `uuid` and capacities `memory` and `memorySlice<i>` = 1; the parent is not published.

NVIDIA's driver also publishes each profile's engines (multiprocessors, copy, decode, encode,
JPEG and OFA engines) as capacities and counters, read from NVML; the catalog does not hold
them, so they are left out (a selector on them matches no device here) and a GPU's media
extensions are limited by the catalog's rule (one `+me` device per GPU) instead.

GPU UUIDs, bus IDs and versions are those of the compact form's expansion
(`drasat.api.cluster.expand`). This is a purely computational module.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from drasat.api import catalog
from drasat.api.cluster import NVIDIA_FORMAT as DRIVER
from drasat.api.cluster import UUID_NAMESPACE, ClusterNode, ExpandedNode, static_mig_starts
from drasat.api.devicemodel import devices
from drasat.api.nas import GpuInfo

Obj = dict[str, Any]

MiB = 2**20
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
#: The API's limits per slice (as `drasat.api.devicemodel.pool` keeps them for drasat's own).
MAX_COUNTER_SETS = 8
MAX_DEVICES = 128
MAX_DEVICES_WITH_COUNTERS = 64


def node_documents(group: ClusterNode, expanded: ExpandedNode) -> list[Obj]:
    """The Node and ResourceSlices of one described node of NVIDIA's driver."""
    name = expanded.nas.metadata.name
    return [node_object(group, name), *node_slices(name, group, expanded)]


def node_object(group: ClusterNode, name: str) -> Obj:
    """The Node: the group's labels (and the hostname), CPU and memory, Ready or not."""
    allocatable = {}
    if group.cpu is not None:
        allocatable["cpu"] = str(group.cpu)
    if group.memory is not None:
        allocatable["memory"] = str(group.memory)
    ready = {"type": "Ready", "status": "True" if group.ready else "False"}
    ready["reason"] = "KubeletReady" if group.ready else "KubeletNotReady"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **group.labels}},
        "status": {"allocatable": allocatable, "conditions": [ready]},
    }


def node_slices(name: str, group: ClusterNode, expanded: ExpandedNode) -> list[Obj]:
    """The node's pool: `gpu_slices` of its GPUs, each group's `migDevices` static MIG."""
    static = [g.migDevices for g in group.gpus for _ in range(g.count)]
    return gpu_slices(name, expanded.nas.spec.gpus(), static)


def gpu_slices(
    name: str, gpus: Sequence[GpuInfo], static: Sequence[list[str] | None] | None = None
) -> list[Obj]:
    """The pool NVIDIA's driver publishes for node `name`'s GPUs (named after the node): counter
    sets first, 8 to a slice, then the devices in minor order, 64 to a slice where they consume
    counters, else 128. `static`: per GPU, the MIG devices made beforehand (static MIG), or
    None for dynamic MIG; left out, every MIG-enabled GPU is in dynamic MIG."""
    counter_sets: list[Obj] = []
    found: list[Obj] = []
    made_per_gpu = [None] * len(gpus) if static is None else static
    for gpu, made in zip(gpus, made_per_gpu, strict=True):
        product = catalog.product_for_name(gpu.productName)
        if not gpu.migEnabled or product is None:
            found.append(_whole(gpu, {"memory": _mib(gpu.memoryBytes)}))
        elif made is None:
            counter_sets.append(_counter_set(gpu, product))
            found.extend(_dynamic(gpu, product))
        else:
            found.extend(_static(gpu, product, made))
    specs: list[Obj] = [
        {"sharedCounters": counter_sets[i : i + MAX_COUNTER_SETS]}
        for i in range(0, len(counter_sets), MAX_COUNTER_SETS)
    ]
    size = MAX_DEVICES_WITH_COUNTERS if counter_sets else MAX_DEVICES
    specs += [{"devices": found[i : i + size]} for i in range(0, len(found), size)]
    specs = specs or [{"devices": []}]
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-{DRIVER}-{number}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": name,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": len(specs)},
                **content,
            },
        }
        for number, content in enumerate(specs)
    ]


def profile_dns(profile: str) -> str:
    """NVIDIA's spelling of a MIG profile in a device name: `1g.5gb` -> `1g5gb`, `1g.5gb+me`
    -> `1g5gb-me`."""
    return profile.lower().replace(".", "").replace("+", "-")


def _mib(amount: int) -> Obj:
    return {"value": f"{amount // MiB}Mi"}


def _one() -> Obj:
    return {"value": "1"}


def _attributes(gpu: GpuInfo, kind: str) -> Obj:
    """What NVIDIA's driver publishes of a GPU on it and each of its MIG devices."""
    out: Obj = {
        "type": {"string": kind},
        "productName": {"string": gpu.productName},
        "brand": {"string": gpu.brand},
        "architecture": {"string": gpu.architecture},
    }
    for name in ("cudaComputeCapability", "driverVersion", "cudaDriverVersion"):
        version = devices.semver(getattr(gpu, name))
        if version is not None:
            out[name] = {"version": version}
    if gpu.pciBusID:
        out[devices.PCI_BUS_ID] = {"string": gpu.pciBusID.lower()}
        out[PCIE_ROOT] = {"string": f"pci{gpu.pciBusID.lower()[:4]}:00"}
    return out


def _whole(gpu: GpuInfo, capacity: Obj) -> Obj:
    return {
        "name": f"gpu-{gpu.minor}",
        "attributes": {**_attributes(gpu, devices.TYPE_GPU), "uuid": {"string": gpu.uuid}},
        "capacity": capacity,
    }


def _counter_set_name(gpu: GpuInfo) -> str:
    return f"gpu-{gpu.minor}-counter-set"


def _counters(memory: int, slices: Sequence[int]) -> Obj:
    return {"memory": _mib(memory), **{f"memory-slice-{i}": _one() for i in slices}}


def _counter_set(gpu: GpuInfo, product: catalog.Product) -> Obj:
    return {
        "name": _counter_set_name(gpu),
        "counters": _counters(gpu.memoryBytes, range(product.memory_slices)),
    }


def _mig_name(gpu: GpuInfo, profile: catalog.MigProfile, start: int) -> str:
    return f"gpu-{gpu.minor}-mig-{profile_dns(profile.name)}-{profile.gi_profile_id}-{start}"


def _mig(gpu: GpuInfo, profile: catalog.MigProfile, start: int) -> Obj:
    attributes = {
        **_attributes(gpu, devices.TYPE_MIG),
        "parentUUID": {"string": gpu.uuid},
        "profile": {"string": profile.name},
    }
    return {
        "name": _mig_name(gpu, profile, start),
        "attributes": attributes,
        "capacity": {"memory": _mib(profile.memory_bytes)},
    }


def _dynamic(gpu: GpuInfo, product: catalog.Product) -> list[Obj]:
    """The whole GPU and every placement of every profile, sharing the GPU's counter set."""
    whole = _whole(gpu, {"memory": _mib(gpu.memoryBytes)})
    whole["consumesCounters"] = [
        {
            "counterSet": _counter_set_name(gpu),
            "counters": _counters(gpu.memoryBytes, range(product.memory_slices)),
        }
    ]
    out = [whole]
    for profile in product.mig_profiles:
        for start in profile.starts:
            device = _mig(gpu, profile, start)
            slices = range(start, start + profile.memory_slices)
            device["consumesCounters"] = [
                {
                    "counterSet": _counter_set_name(gpu),
                    "counters": _counters(profile.memory_bytes, slices),
                }
            ]
            out.append(device)
    return out


def _static(gpu: GpuInfo, product: catalog.Product, made: list[str]) -> list[Obj]:
    """The MIG devices made beforehand, each with its UUID and memory slices."""
    out = []
    for name, start in zip(made, static_mig_starts(product, made), strict=True):
        profile = product.profile(name)
        assert profile is not None  # static_mig_starts checked it
        device = _mig(gpu, profile, start)
        mig_uuid = uuid.uuid5(UUID_NAMESPACE, f"{gpu.uuid}/mig/{start}")
        device["attributes"]["uuid"] = {"string": f"MIG-{mig_uuid}"}
        for i in range(start, start + profile.memory_slices):
            device["capacity"][f"memorySlice{i}"] = _one()
        out.append(device)
    return out
