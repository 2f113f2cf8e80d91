"""Random drasat nodes for the differential tests, built with the node plugin's device model:
whole GPUs of several products, MIG-enabled GPUs (their placements and counter sets), shareable
GPUs (consumable capacity), NUMA nodes and PCI addresses (present or not), unhealthy GPUs
(tainted devices). Each node is both what upstream's allocator reads (its ResourceSlices) and
what drasat's allocator solves over (`drasat.v1.Node`)."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any

from checker import make_gpus, make_node
from hypothesis import strategies as st

from drasat import v1
from drasat.api import catalog
from drasat.api.devicemodel import classes, pool
from drasat.api.devicemodel.nodegpus import Inventory, profiles_by_gpu
from drasat.api.nas import AllocatableDevice, Health, NodeAllocationStateSpec
from drasat.v1 import nasinventory, publisheddevices

Obj = dict[str, Any]

DRIVER = "gpu.drasat.io"
CLASSES = {c["metadata"]["name"]: c for c in classes.device_classes()}
PRODUCTS = ("T4", "L4", "A100-40GB", "A100-80GB", "H100-80GB")
MIG_CAPABLE = ("A100-40GB", "A100-80GB", "H100-80GB")


@dataclass(frozen=True)
class GpuCase:
    product: str
    mig: bool
    numa: int | None
    pci: bool
    unhealthy: bool


@dataclass(frozen=True)
class NodeCase:
    name: str
    gpus: tuple[GpuCase, ...]
    shares: bool


@dataclass(frozen=True)
class Built:
    case: NodeCase
    nas: NodeAllocationStateSpec
    node: v1.Node
    slices: list[Obj]

    def published(self) -> list[Obj]:
        """Every device of the node as its slices publish it."""
        return [d for s in self.slices for d in s["spec"].get("devices") or []]


def gpu_cases() -> st.SearchStrategy[GpuCase]:
    return st.builds(
        GpuCase,
        product=st.sampled_from(PRODUCTS),
        mig=st.booleans(),
        numa=st.one_of(st.none(), st.integers(0, 1)),
        pci=st.booleans(),
        unhealthy=st.sampled_from([False, False, False, True]),
    ).map(lambda g: g if g.product in MIG_CAPABLE else dataclasses.replace(g, mig=False))


def node_cases(
    name: str = "n1", max_gpus: int = 3, shares: bool | None = None
) -> st.SearchStrategy[NodeCase]:
    """Nodes of 1 to `max_gpus` GPUs; publishing shares or not (`shares` None: either)."""
    return st.builds(
        NodeCase,
        name=st.just(name),
        gpus=st.lists(gpu_cases(), min_size=1, max_size=max_gpus).map(tuple),
        shares=st.booleans() if shares is None else st.just(shares),
    )


def build(case: NodeCase) -> Built:
    """The node's NAS (as the node plugin reads NVML), slices and drasat's view of it."""
    gpus = []
    migs: dict[str, Any] = {}
    for i, g in enumerate(case.gpus):
        (gpu,) = make_gpus(case.name, g.product, 1, mig=g.mig, first_index=i)
        update: Obj = {"numaNode": g.numa}
        if g.pci:
            update["pciBusID"] = f"0000:{0x10 + i:02X}:00.0"
        if g.unhealthy:
            update["health"] = Health.Unhealthy
        gpus.append(gpu.model_copy(update=update))
        if g.mig:
            migs.setdefault(g.product, None)
    state = make_node(case.name, case.gpus[0].product, 0, extra_gpus=gpus)
    allocatable = nasinventory.allocatable_of(state.devices)
    for product in sorted(migs):
        template = make_node("t", product, 1, mig=True)
        ids = {p.name: p.gi_profile_id for p in catalog.find_product(product).mig_profiles}
        allocatable += [
            AllocatableDevice(mig=d.mig.model_copy(update={"giProfileId": ids[d.mig.profile]}))
            for d in nasinventory.allocatable_of(template.devices)
            if d.mig is not None
        ]
    nas = NodeAllocationStateSpec(allocatableDevices=allocatable)
    state = dataclasses.replace(state, devices=nasinventory.devices_of(nas))
    inventory = Inventory(
        gpus=nas.gpus(),
        mig_profiles=profiles_by_gpu(nas.gpus(), nas.mig_profiles()),
        shares=case.shares,
    )
    slices = pool.node_slices(case.name, inventory)
    return Built(case, nas, v1.Node(state, tuple(_drasat_devices(case, nas))), slices)


def _drasat_devices(
    case: NodeCase, nas: NodeAllocationStateSpec
) -> list[publisheddevices.Published]:
    # drasat's model of the node; where it can be told whether the node publishes shares, it is.
    parameters = inspect.signature(publisheddevices.drasat_devices).parameters
    if "shares" in parameters:
        return publisheddevices.drasat_devices(
            case.name, nasinventory.devices_of(nas), shares=case.shares
        )
    return publisheddevices.drasat_devices(case.name, nasinventory.devices_of(nas))
