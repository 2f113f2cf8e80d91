"""ResourceSlices for v1 controller tests, published by the node plugin's own publisher
(`nodeplugin.slicepublisher`, over the device model `drasat.api.devicemodel`): what a real node
plugin with these GPUs (and `--no-shares` or not) puts in the API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drasat.api.devicemodel import pool
from drasat.api.devicemodel.nodegpus import GpuHealth, Inventory, profiles_by_gpu
from drasat.api.nas import NodeAllocationStateSpec
from drasat.kube.client import Api
from drasat.nodeplugin import slicepublisher
from drasat.solver import nodemodel
from drasat.v1 import nasinventory
from drasat.v1 import slices as v1slices

Obj = dict[str, Any]


def inventory(
    devices: list[Obj], *, shares: bool = True, unhealthy: dict[str, GpuHealth] | None = None
) -> Inventory:
    """The device model's input for NAS-shaped `allocatableDevices` (`ctl_cluster.t4`, ...)."""
    spec = NodeAllocationStateSpec.model_validate({"allocatableDevices": devices})
    gpus = spec.gpus()
    return Inventory(
        gpus=gpus,
        mig_profiles=profiles_by_gpu(gpus, spec.mig_profiles()),
        health=dict(unhealthy or {}),
        shares=shares,
    )


def publish(api: Api, node: str, devices: list[Obj], **kw: Any) -> slicepublisher.SyncResult:
    """Publish the node's slices as its plugin would (the Node must exist: it owns them)."""
    return slicepublisher.SlicePublisher(api, node_name=node).sync(inventory(devices, **kw))


def published(
    by_node: Mapping[str, nodemodel.NodeDevices], *, shares: bool = True
) -> dict[str, v1slices.NodeDevices]:
    """`Snapshot.published` for unit tests: what each node's plugin publishes for its devices
    (the device model's slices, read back by the controller's reader)."""
    found: list[Obj] = []
    for node, devices in by_node.items():
        spec = nasinventory.nas_spec(devices)
        wanted = Inventory(
            gpus=spec.gpus(),
            mig_profiles=profiles_by_gpu(spec.gpus(), spec.mig_profiles()),
            shares=shares,
        )
        for n, body in enumerate(pool.node_slices(node, wanted)):
            body["metadata"]["resourceVersion"] = str(n + 1)
            found.append(body)
    return v1slices.Reader().read(found)
