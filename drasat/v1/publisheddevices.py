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

import dataclasses
import functools
import pickle
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


def shape_of(found: NodeDevices) -> tuple[object, ...] | None:
    """What `drasat_devices` reads of the devices besides the GPUs' UUIDs: nodes of one shape
    publish the same devices but for the UUIDs (and their pool), so `alike` makes one node's
    devices from another's. None: a GPU names others (NVLink peers), so is left uncopied."""
    if any(g.nvlinkPeers is not None for g in found.gpus):
        return None
    return (tuple(dataclasses.replace(g, uuid="") for g in found.gpus), found.mig_profiles)


@dataclass(frozen=True)
class Template:
    """One node's published devices, to be copied for the other nodes of its `shape_of`."""

    devices: NodeDevices
    published: tuple[Published, ...]
    #: The devices' objects pickled: unpickling copies them whole faster than Python can.
    pickled: bytes


def template_of(found: NodeDevices, published: Sequence[Published]) -> Template | None:
    """A template of what `drasat_devices` made of `found`; None where a GPU's UUID is in a
    device elsewhere than an attribute's value (`alike` replaces only those)."""
    uuids = {g.uuid for g in found.gpus}
    for d in published:
        rest = {k: v for k, v in d.device.items() if k != "attributes"}
        if _holds(rest, uuids) or any(
            not isinstance(v, dict) or any(isinstance(x, dict | list) for x in v.values())
            for v in d.device.get("attributes", {}).values()
        ):
            return None
    devices = [d.device for d in published]
    return Template(found, tuple(published), pickle.dumps(devices, pickle.HIGHEST_PROTOCOL))


def alike(template: Template, node: str, found: NodeDevices) -> list[Published]:
    """`drasat_devices(node, found)` made from a template of the same `shape_of`: the
    template's GPU UUIDs replaced by the node's (GPU by GPU, in order), the pool by the node,
    without building every device again."""
    uuids = {old.uuid: new.uuid for old, new in zip(template.devices.gpus, found.gpus, strict=True)}
    copies: list[Obj] = pickle.loads(template.pickled)
    out = []
    for d, device in zip(template.published, copies, strict=True):
        for value in device.get("attributes", {}).values():
            for kind, x in value.items():
                if isinstance(x, str) and x in uuids:
                    value[kind] = uuids[x]
        gpu_uuid = None if d.gpu_uuid is None else uuids[d.gpu_uuid]
        out.append(Published(d.driver, node, device, d.kind, gpu_uuid, d.profile, d.start))
    return out


def same_kinds(template: Sequence[Published], copies: Sequence[Published]) -> bool:
    """Whether each copy (`alike`) is of its template device's kind (`cel.kind_key`: the UUIDs
    replaced are identity attributes, which it leaves out). Once true of one node's copies, it
    is of every node's copies of that template: they differ from it in the same places."""
    return all(
        cel.kind_key(t.driver, t.device) == cel.kind_key(c.driver, c.device)
        for t, c in zip(template, copies, strict=True)
    )


def keep_kinds(template: Sequence[Published], copies: Sequence[Published]) -> None:
    """Give each copy its template device's `kind_id` (where `same_kinds`), instead of each
    computing it again."""
    for t, c in zip(template, copies, strict=True):
        c.__dict__["kind_id"] = t.kind_id  # the cached_property's own slot


def _holds(value: Any, strings: set[str]) -> bool:
    """Whether one of `strings` is a string in `value` (dicts, lists, scalars)."""
    if isinstance(value, dict):
        return any(_holds(v, strings) for v in value.values())
    if isinstance(value, list):
        return any(_holds(v, strings) for v in value)
    return isinstance(value, str) and value in strings


def identified(found: NodeDevices, devices: Iterable[Published]) -> NodeDevices:
    """The node's devices, each GPU and MIG placement carrying the published device it is
    (`nodemodel.Gpu.device`, `Gpu.mig_devices`), for a node whose model was not read from its
    slices (a NodeAllocationState: the what-if's compact cluster) but whose published devices
    are known (`drasat_devices`): the solver's answer then names the devices it takes, as it
    does for a node read from slices."""
    whole: dict[str, Published] = {}
    migs: dict[str, dict[tuple[str, int], Published]] = {}
    for d in devices:
        if d.kind == GPU and d.gpu_uuid is not None:
            whole[d.gpu_uuid] = d
        elif d.kind == MIG and d.gpu_uuid is not None and d.profile is not None:
            migs.setdefault(d.gpu_uuid, {})[(d.profile, d.start or 0)] = d
    gpus = tuple(
        dataclasses.replace(g, device=whole.get(g.uuid), mig_devices=migs.get(g.uuid, {}))
        for g in found.gpus
    )
    return dataclasses.replace(found, gpus=gpus)


def unidentified(found: NodeDevices) -> bool:
    """Whether some GPU of the node carries no published device (its model was read from a
    NodeAllocationState): a GPU read from slices is published whole or by its MIG devices."""
    return any(g.device is None and not g.mig_devices for g in found.gpus)


def kinds(devices: Sequence[Published]) -> set[str]:
    return {d.kind for d in devices}
