"""Whole GPUs as `resource.k8s.io/v1` ResourceSlices: the short way into the device model
(`drasat.api.devicemodel`), for callers that publish whole GPUs only.

Names follow NVIDIA's current DRA driver (`gpu.nvidia.com`), so its users find the same ones under
`gpu.drasat.io`: the pool is the node's name, a whole GPU is `gpu-<minor>`; the attributes and
capacities are the device model's (`devicemodel.devices`).

This is a purely computational module: GpuInfo entries (what the node plugin discovered) in,
ResourceSlice objects as plain dicts out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drasat.api.devicemodel import classes, devices, names, pool
from drasat.api.devicemodel.nodegpus import Inventory
from drasat.api.nas import GpuInfo

API_VERSION = pool.API_VERSION

#: Devices per slice the API allows (`ResourceSliceMaxDevices`; 64 when taints, counters or
#: list attributes are used).
MAX_DEVICES_PER_SLICE = pool.MAX_DEVICES

PCI_BUS_ID = devices.PCI_BUS_ID

Obj = dict[str, Any]

semver = devices.semver


def gpu_device_name(minor: int) -> str:
    """`gpu-<minor>`: the name of a whole GPU, as in NVIDIA's driver."""
    return names.gpu_name(minor)


def gpu_device(gpu: GpuInfo) -> Obj:
    """One whole GPU as an exclusive v1 Device."""
    return devices.gpu_device(gpu)


def node_slices(
    node_name: str,
    gpus: Sequence[GpuInfo],
    *,
    generation: int = 1,
    node_uid: str | None = None,
) -> list[Obj]:
    """The ResourceSlices of one node's pool holding its whole GPUs (exclusive, no MIG, no
    fallback device). With `node_uid`, each slice is owned by the Node."""
    inventory = Inventory(gpus=gpus, shares=False, fallback=False)
    return pool.node_slices(node_name, inventory, generation=generation, node_uid=node_uid)


def gpu_device_class() -> Obj:
    """The `gpu.drasat.io` DeviceClass: every whole GPU drasat publishes."""
    return classes.device_class(classes.GPU_CLASS, devices.TYPE_GPU)
