"""The devices a node publishes, as the allocator sees them: each v1 Device with its driver and
pool, tied to what the solver models (a whole GPU by UUID, a MIG placement by parent UUID,
profile and start, the CPU fallback).

drasat's own devices are computed from the node's devices through the node plugin's device model
(`drasat.api.devicemodel`), so the controller and the what-if see exactly what the plugin
publishes; other drivers' slices (NVIDIA's GPUs, `drasat.v1.slices`; any other driver's
devices, `drasat.v1.otherdevices`) are read into the same shape by the caller. This is a
purely computational module.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from drasat.api.devicemodel import devices as model
from drasat.api.devicemodel import names, pool
from drasat.api.devicemodel.nodegpus import Inventory, profiles_by_gpu
from drasat.api.groups import DRIVER_NAME
from drasat.solver.nodemodel import NodeDevices
from drasat.v1 import cel, nasinventory

Obj = dict[str, Any]

GPU = model.TYPE_GPU
MIG = model.TYPE_MIG
FALLBACK = model.TYPE_FALLBACK
#: Another driver's device (a NIC, an FPGA: `drasat.v1.otherdevices`), known by its key alone.
OTHER = "other"


@dataclass(frozen=True)
class Published:
    """One published device and what it is in the solver's terms."""

    driver: str
    pool: str
    device: Obj
    #: GPU, MIG, FALLBACK or OTHER.
    kind: str
    #: The GPU (whole) or the MIG device's parent; None for the fallback.
    gpu_uuid: str | None = None
    profile: str | None = None
    start: int | None = None

    @property
    def name(self) -> str:
        return str(self.device["name"])

    @property
    def key(self) -> str:
        """`<driver>/<pool>/<device>`: the device, unique in the cluster (the solver's name
        for another driver's device)."""
        return f"{self.driver}/{self.pool}/{self.name}"

    @functools.cached_property
    def kind_id(self) -> int:
        """`cel.kind_id` of the device, kept with it: the controller's slice reader keeps a
        node's devices while its slices are the same, so each cycle's selector matching looks
        the kind up instead of computing it again for every device of the cluster."""
        return cel.kind_id(self.driver, self.device)

    def typed(self, qualified: str) -> tuple[str, object] | None:
        """An attribute's type and value by qualified name, looked up as upstream's allocator
        does: the qualified name itself, then (in the driver's own domain) the bare name; None
        when the device lacks it. A bare name is read in the driver's domain."""
        attributes = self.device.get("attributes") or {}
        found = attributes.get(qualified)
        domain, _, bare = qualified.rpartition("/")
        if found is None and domain in ("", self.driver):
            found = attributes.get(bare)
        if not isinstance(found, dict) or not found:
            return None
        kind, value = next(iter(found.items()))
        return str(kind), value

    def attribute(self, qualified: str) -> object:
        """The value of an attribute by qualified name; None when the device lacks it."""
        found = self.typed(qualified)
        return None if found is None else found[1]


def drasat_devices(node: str, found: NodeDevices, *, shares: bool = True) -> list[Published]:
    """What drasat's node plugin publishes for a node of these devices (the fallback device on,
    as the plugin's default; shares unless the node plugin runs with `--no-shares`)."""
    nas = nasinventory.nas_spec(found)
    gpus = nas.gpus()
    inventory = Inventory(
        gpus=gpus, mig_profiles=profiles_by_gpu(gpus, nas.mig_profiles()), shares=shares
    )
    by_minor = {gpu.minor: gpu for gpu in gpus}
    profiles = {(m.parentProductName, m.giProfileId): m.profile for m in nas.mig_profiles()}
    out = []
    for device in pool.all_devices(inventory):
        parsed = names.parse(device["name"])
        if isinstance(parsed, names.GpuName):
            uuid = by_minor[parsed.minor].uuid
            out.append(Published(DRIVER_NAME, node, device, GPU, uuid))
        elif isinstance(parsed, names.MigName):
            parent = by_minor[parsed.minor]
            profile = profiles[(parent.productName, parsed.profile_id)]
            out.append(
                Published(DRIVER_NAME, node, device, MIG, parent.uuid, profile, parsed.start)
            )
        else:
            out.append(Published(DRIVER_NAME, node, device, FALLBACK))
    return out


def index(devices: Iterable[Published]) -> dict[tuple[object, ...], Published]:
    """Lookup from the solver's terms to a device: ("gpu", uuid), ("mig", parent, profile,
    start), ("other", key), ("fallback",)."""
    out: dict[tuple[object, ...], Published] = {}
    for d in devices:
        if d.kind == GPU:
            out[(GPU, d.gpu_uuid)] = d
        elif d.kind == MIG:
            out[(MIG, d.gpu_uuid, d.profile, d.start)] = d
        elif d.kind == OTHER:
            out[(OTHER, d.key)] = d
        else:
            out.setdefault((FALLBACK,), d)
    return out


def kinds(devices: Sequence[Published]) -> set[str]:
    return {d.kind for d in devices}
