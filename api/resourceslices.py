"""drasat's devices as `resource.k8s.io/v1` ResourceSlices: one device model for the node plugin
that publishes them, the what-if that reads them and the controller that allocates from them.

Names follow NVIDIA's current DRA driver (`gpu.nvidia.com`), so its users find the same ones under
`gpu.drasat.io`: the pool is the node's name, a whole GPU is `gpu-<minor>` with the attributes
`type`, `uuid`, `index`, `minor`, `productName`, `brand`, `architecture`, `migEnabled`,
`cudaComputeCapability`, `driverVersion`, `cudaDriverVersion` (the last three as versions),
`resource.kubernetes.io/pciBusID` and `numaNode` where known, and the capacity `memory` in bytes.

This is a purely computational module: GpuInfo entries (what the node plugin discovered) in,
ResourceSlice objects as plain dicts out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from drasat.api.groups import DRIVER_NAME
from drasat.api.nas import GpuInfo

API_VERSION = "resource.k8s.io/v1"

#: Devices per slice the API allows (`ResourceSliceMaxDevices`; 64 when taints, counters or
#: list attributes are used: drasat's whole-GPU devices use none of them).
MAX_DEVICES_PER_SLICE = 128

#: The qualified name Kubernetes reserves for a device's PCI address (KEP 4381).
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"

_VERSION_PARTS = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?$")

Obj = dict[str, Any]


def gpu_device_name(minor: int) -> str:
    """`gpu-<minor>`: the name of a whole GPU, as in NVIDIA's driver."""
    return f"gpu-{minor}"


def semver(text: str) -> str | None:
    """A version attribute's value: NVML's `8.0` or `12.4` padded to semver (`8.0.0`), None
    when `text` is not a dotted number (the attribute is then left out)."""
    match = _VERSION_PARTS.match(text.strip())
    if match is None:
        return None
    return ".".join(str(int(part or 0)) for part in match.groups())


def gpu_device(gpu: GpuInfo) -> Obj:
    """One whole GPU as a v1 Device."""
    attributes: Obj = {
        "type": {"string": "gpu"},
        "uuid": {"string": gpu.uuid},
        "index": {"int": gpu.index},
        "minor": {"int": gpu.minor},
        "productName": {"string": gpu.productName},
        "brand": {"string": gpu.brand},
        "architecture": {"string": gpu.architecture},
        "migEnabled": {"bool": gpu.migEnabled},
    }
    for name in ("cudaComputeCapability", "driverVersion", "cudaDriverVersion"):
        version = semver(getattr(gpu, name))
        if version is not None:
            attributes[name] = {"version": version}
    if gpu.pciBusID:
        attributes[PCI_BUS_ID] = {"string": gpu.pciBusID.lower()}
    if gpu.numaNode is not None:
        attributes["numaNode"] = {"int": gpu.numaNode}
    return {
        "name": gpu_device_name(gpu.minor),
        "attributes": attributes,
        "capacity": {"memory": {"value": str(gpu.memoryBytes)}},
    }


def node_slices(
    node_name: str,
    gpus: Sequence[GpuInfo],
    *,
    generation: int = 1,
    node_uid: str | None = None,
) -> list[Obj]:
    """The ResourceSlices of one node's pool: its GPUs in minor order, split at the API's
    per-slice limit, each slice naming the pool's generation and slice count; at least one slice
    (an empty pool still says the node has no devices). With `node_uid`, each slice is owned by
    the Node (deleted with it), as the kubelet-plugin helper library does."""
    devices = [gpu_device(gpu) for gpu in sorted(gpus, key=lambda g: g.minor)]
    chunks = [
        devices[start : start + MAX_DEVICES_PER_SLICE]
        for start in range(0, len(devices), MAX_DEVICES_PER_SLICE)
    ] or [[]]
    slices = []
    for number, chunk in enumerate(chunks):
        metadata: Obj = {"name": f"{node_name}-{DRIVER_NAME}-{number}"}
        if node_uid is not None:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node_name,
                    "uid": node_uid,
                    "controller": True,
                }
            ]
        slices.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceSlice",
                "metadata": metadata,
                "spec": {
                    "driver": DRIVER_NAME,
                    "nodeName": node_name,
                    "pool": {
                        "name": node_name,
                        "generation": generation,
                        "resourceSliceCount": len(chunks),
                    },
                    "devices": chunk,
                },
            }
        )
    return slices


def gpu_device_class() -> Obj:
    """The `gpu.drasat.io` DeviceClass: every whole GPU drasat publishes."""
    selector = (
        f'device.driver == "{DRIVER_NAME}" && device.attributes["{DRIVER_NAME}"].type == "gpu"'
    )
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER_NAME},
        "spec": {"selectors": [{"cel": {"expression": selector}}]},
    }
