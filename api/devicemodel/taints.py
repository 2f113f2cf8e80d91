"""Unhealthy GPUs as device taints, as NVIDIA's driver does (`gpu.nvidia.com/xid`,
`gpu.nvidia.com/gpu-lost`), under drasat's domain:

- a critical XID that makes the GPU unusable: `gpu.drasat.io/xid=<xid>:NoSchedule` — nothing new
  is allocated on it, running pods stay (a drain decides);
- a lost GPU (XID 79, off the bus): `gpu.drasat.io/gpu-lost:NoExecute` — nothing on it can keep
  running, so pods using it are evicted once device taints are enforced.

The whole GPU and each of its MIG devices carry the taint. This is a purely computational
module.
"""

from __future__ import annotations

from typing import Any

from drasat.api.devicemodel.nodegpus import GpuHealth
from drasat.api.groups import DRIVER_NAME

Obj = dict[str, Any]

XID = f"{DRIVER_NAME}/xid"
GPU_LOST = f"{DRIVER_NAME}/gpu-lost"


def taints(health: GpuHealth | None) -> list[Obj]:
    """The taints of every device of a GPU in this state ([] when healthy)."""
    if health is None:
        return []
    if health.lost:
        return [{"key": GPU_LOST, "effect": "NoExecute"}]
    taint: Obj = {"key": XID, "effect": "NoSchedule"}
    if health.xid is not None:
        taint["value"] = str(health.xid)
    return [taint]
