"""The DeviceClasses drasat ships: each a CEL selector on `device.driver` and the `type`
attribute, as NVIDIA's `gpu.nvidia.com` and `mig.nvidia.com`.

- `gpu.drasat.io`: whole GPUs (exclusive, or a share with `capacity.requests`);
- `mig.drasat.io`: MIG placements (select the profile with CEL on `profile`);
- `cpu-fallback.drasat.io`: the node's `cpu-fallback` device, the last alternative of a
  `firstAvailable` request ("a GPU if one is free, else CPU-only").

This is a purely computational module.
"""

from __future__ import annotations

from typing import Any

from drasat.api.devicemodel import devices
from drasat.api.groups import DRIVER_NAME

Obj = dict[str, Any]

API_VERSION = "resource.k8s.io/v1"

GPU_CLASS = DRIVER_NAME
MIG_CLASS = f"mig.{DRIVER_NAME.removeprefix('gpu.')}"
FALLBACK_CLASS = f"cpu-fallback.{DRIVER_NAME.removeprefix('gpu.')}"


def selector(device_type: str) -> str:
    """CEL: one of drasat's devices of this `type`."""
    return (
        f'device.driver == "{DRIVER_NAME}" && '
        f'device.attributes["{DRIVER_NAME}"].type == "{device_type}"'
    )


def device_class(name: str, device_type: str) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": selector(device_type)}}]},
    }


def device_classes() -> list[Obj]:
    """Every class drasat ships."""
    return [
        device_class(GPU_CLASS, devices.TYPE_GPU),
        device_class(MIG_CLASS, devices.TYPE_MIG),
        device_class(FALLBACK_CLASS, devices.TYPE_FALLBACK),
    ]
