"""Publishing the node's ResourceSlices (`resource.k8s.io/v1`), the one module that writes them.

What to publish comes from the pure device model (`drasat.api.devicemodel.pool`); this module
reads the hardware into its input (`inventory`) and keeps the API in step with it
(`SlicePublisher`), as the kubelet-plugin helper library does: slices owned by the Node
(controller ownerReference) with `spec.nodeName`; when what the node has changes (MIG mode,
health, driver), the pool's generation becomes the highest existing one + 1 and slices no longer
wanted are deleted; nothing is written while the published slices already say the same; a pool
always has one slice.
`drasat resourceslices` prints `desired` of the same inventory without a cluster.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drasat.api.devicemodel import pool
from drasat.api.devicemodel.nodegpus import GpuHealth, Inventory
from drasat.api.groups import DRIVER_NAME
from drasat.api.nas import MigInfo, MigPlacement
from drasat.kube import errors
from drasat.kube.client import Api
from drasat.kube.resources import NODES, Resource
from drasat.nodeplugin import publish
from drasat.nodeplugin.devicelib import DeviceLib, GpuDevice, GpuLostError, MigProfileInfo

log = logging.getLogger(__name__)

Obj = dict[str, Any]

RESOURCE_SLICES = Resource(
    "resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False
)

#: Whole syncs tried when another writer changed a slice between our read and write.
SYNC_ATTEMPTS = 5


def mig_info(product_name: str, profile: MigProfileInfo) -> MigInfo:
    """One profile NVML reported for a GPU, in the device model's terms."""
    return MigInfo(
        profile=profile.name,
        parentProductName=product_name,
        placements=[MigPlacement(start=s, size=z) for s, z in profile.placements],
        giProfileId=profile.gi_profile_id,
        memoryBytes=profile.memory_bytes,
        computeSlices=profile.compute_slices,
    )


def mig_profiles(lib: DeviceLib, gpus: Sequence[GpuDevice]) -> dict[str, list[MigProfileInfo]]:
    """Each MIG-enabled GPU's profiles; a lost GPU's as read before it was lost (the lib keeps
    them), none when never read (its MIG devices cannot be published then)."""
    profiles = {}
    for gpu in gpus:
        if not gpu.mig_enabled:
            continue
        try:
            profiles[gpu.uuid] = lib.mig_profiles(gpu.uuid)
        except GpuLostError as error:
            log.error("GPU %s: MIG profiles unknown: %s", gpu.uuid, error)
    return profiles


def inventory(
    lib: DeviceLib,
    *,
    health: Mapping[str, GpuHealth] | None = None,
    shares: bool = False,
    fallback: bool = True,
    gpus: Sequence[GpuDevice] | None = None,
    consumable_capacity: bool = True,
    counters: bool = True,
) -> Inventory:
    """What the hardware has now: GPUs (`gpus`, or the lib's discovery), each MIG-enabled GPU's
    profiles and placements (NVML's `nvmlDeviceGetGpuInstancePossiblePlacements`), and the
    unhealthy GPUs. A lost GPU is published with its health (a NoExecute taint) as long as it is
    known by its uuid. `consumable_capacity`, `counters`: what the API server keeps
    (drasat.api.devicemodel.nodegpus.Inventory)."""
    found = [g for g in (lib.gpus() if gpus is None else gpus) if g.uuid]
    health = dict(health or {})
    nvml_profiles = mig_profiles(lib, found)
    by_uuid = {gpu.uuid: gpu for gpu in found}
    profiles = {
        uuid: [mig_info(by_uuid[uuid].product_name, p) for p in listed]
        for uuid, listed in nvml_profiles.items()
    }
    limits = {
        uuid: {p.gi_profile_id: p.max_instances for p in listed if p.max_instances > 0}
        for uuid, listed in nvml_profiles.items()
    }
    return Inventory(
        gpus=[publish.gpu_info(g, healthy=g.uuid not in health) for g in found],
        mig_profiles=profiles,
        health=health,
        instance_limits=limits,
        shares=shares,
        fallback=fallback,
        consumable_capacity=consumable_capacity,
        counters=counters,
    )


def desired(
    node_name: str, wanted: Inventory, *, generation: int = 1, node_uid: str | None = None
) -> list[Obj]:
    """The slices to publish (the device model's, unchanged)."""
    return pool.node_slices(node_name, wanted, generation=generation, node_uid=node_uid)


def _without_times(device: Obj) -> Obj:
    """A device without its taints' `timeAdded` (the API server sets it when it is missing)."""
    if not device.get("taints"):
        return device
    taints = [{k: v for k, v in t.items() if k != "timeAdded"} for t in device["taints"]]
    return {**device, "taints": taints}


def _content(body: Obj) -> Obj:
    """What a slice says, without what changes on every publish (generation, server fields)."""
    spec = dict(body.get("spec") or {})
    spec["pool"] = {k: v for k, v in (spec.get("pool") or {}).items() if k != "generation"}
    if "devices" in spec:
        spec["devices"] = [_without_times(d) for d in spec["devices"] or []]
    owners = [
        {k: o.get(k) for k in ("kind", "name", "uid", "controller")}
        for o in (body.get("metadata") or {}).get("ownerReferences") or []
    ]
    return {"name": body["metadata"]["name"], "owners": owners, "spec": spec}


def _taint_times(slices: list[Obj]) -> dict[tuple[str, str, str], Any]:
    """(device, taint key, effect) -> the `timeAdded` the API server holds for it."""
    return {
        (device["name"], taint.get("key", ""), taint.get("effect", "")): taint["timeAdded"]
        for body in slices
        for device in (body.get("spec") or {}).get("devices") or []
        for taint in device.get("taints") or []
        if taint.get("timeAdded")
    }


def _keep_taint_times(body: Obj, times: dict[tuple[str, str, str], Any]) -> None:
    """A taint that stays keeps the time it was first added (eviction counts from it)."""
    for device in body["spec"].get("devices") or []:
        for taint in device.get("taints") or []:
            held = times.get((device["name"], taint.get("key", ""), taint.get("effect", "")))
            if held is not None:
                taint["timeAdded"] = held


def _generation(body: Obj) -> int:
    return int(((body.get("spec") or {}).get("pool") or {}).get("generation") or 0)


@dataclass(frozen=True)
class SyncResult:
    """What one sync did: the generation now published, and the slices written and deleted."""

    generation: int
    written: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.written or self.deleted)


class SlicePublisher:
    """Keeps one node's pool of drasat's ResourceSlices equal to an inventory."""

    def __init__(self, api: Api, *, node_name: str) -> None:
        self.api = api
        self.node_name = node_name

    def existing(self) -> list[Obj]:
        """drasat's slices of this node, as the API holds them."""
        selector = f"spec.nodeName={self.node_name},spec.driver={DRIVER_NAME}"
        listed = self.api.list(RESOURCE_SLICES, field_selector=selector).items
        return [
            s
            for s in listed
            if (s.get("spec") or {}).get("driver") == DRIVER_NAME
            and (s.get("spec") or {}).get("nodeName") == self.node_name
        ]

    def sync(self, wanted: Inventory) -> SyncResult:
        """Publish `wanted`; retried from a fresh read when a slice changed under us."""
        for attempt in range(SYNC_ATTEMPTS):
            try:
                return self._sync_once(wanted)
            except errors.Conflict:
                log.info("ResourceSlices of %s changed while publishing; again", self.node_name)
                if attempt == SYNC_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def _sync_once(self, wanted: Inventory) -> SyncResult:
        node = self.api.get(NODES, self.node_name)
        node_uid = str(node["metadata"]["uid"])
        existing = {s["metadata"]["name"]: s for s in self.existing()}
        newest = max((_generation(s) for s in existing.values()), default=0)
        target = desired(self.node_name, wanted, generation=newest, node_uid=node_uid)
        same = sorted(map(_content, target), key=lambda c: c["name"]) == sorted(
            map(_content, existing.values()), key=lambda c: c["name"]
        )
        if same and all(_generation(s) == newest for s in existing.values()):
            return SyncResult(generation=newest)
        generation = newest + 1
        target = desired(self.node_name, wanted, generation=generation, node_uid=node_uid)
        times = _taint_times(list(existing.values()))
        written = []
        for body in target:
            _keep_taint_times(body, times)
            name = body["metadata"]["name"]
            held = existing.get(name)
            if held is None:
                self.api.create(RESOURCE_SLICES, body)
            else:
                body["metadata"]["resourceVersion"] = held["metadata"].get("resourceVersion")
                self.api.replace(RESOURCE_SLICES, body)
            written.append(name)
        wanted_names = {b["metadata"]["name"] for b in target}
        deleted = []
        for name in sorted(set(existing) - wanted_names):
            with contextlib.suppress(errors.NotFound):
                self.api.delete(RESOURCE_SLICES, name)
            deleted.append(name)
        log.info(
            "published %d ResourceSlice(s) of %s at generation %d; deleted %d stale",
            len(written),
            self.node_name,
            generation,
            len(deleted),
        )
        return SyncResult(generation=generation, written=tuple(written), deleted=tuple(deleted))

    def remove_all(self) -> list[str]:
        """Delete every slice of this node (the plugin is uninstalled)."""
        names = [s["metadata"]["name"] for s in self.existing()]
        for name in names:
            with contextlib.suppress(errors.NotFound):
                self.api.delete(RESOURCE_SLICES, name)
        return names
