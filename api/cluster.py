"""A compact cluster description (kind `Cluster`) and its expansion into NodeAllocationStates.

Writing NodeAllocationState objects by hand is tedious: a user of the what-if states nodes by
product and count and the hardware catalog fills in the rest. Expansion is a purely computational
function with no side-effects: the same description always gives the same objects (GPU UUIDs are
derived from node name and GPU index).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from drasat.api import catalog, groups, limits
from drasat.api.base import Object, ObjectMeta, Spec
from drasat.api.nas import (
    AllocatableDevice,
    GpuInfo,
    MigInfo,
    MigPlacement,
    NasStatus,
    NodeAllocationState,
    NodeAllocationStateSpec,
)
from drasat.api.quantity import MAX_QUANTITY, Quantity, to_bytes

CLUSTER_GROUP = "whatif.drasat.io"
CLUSTER_API_VERSION = f"{CLUSTER_GROUP}/{groups.VERSION}"
CLUSTER_KIND = "Cluster"

#: Namespace of the uuid5 names of generated objects; fixed so expansion is reproducible.
UUID_NAMESPACE = uuid.UUID("6f0d7a1e-2c4b-5d8e-9f10-7a6b5c4d3e2f")


def cpu_millis(quantity: int | str) -> int:
    """Kubernetes CPU quantity (`2`, `500m`, `1.5`) in millicores, rounded up."""
    if isinstance(quantity, bool):
        raise ValueError(f"not a CPU quantity: {quantity!r}")
    text = str(quantity).strip()
    scale = Decimal(1) if text.endswith("m") else Decimal(1000)
    try:
        value = Decimal(text.removesuffix("m")) * scale
        if value < 0:
            raise ValueError(f"CPU quantity must not be negative: {quantity!r}")
        if value > MAX_QUANTITY:
            raise ValueError(f"CPU quantity {quantity!r} is over {MAX_QUANTITY} millicores")
        return int(value.to_integral_value(rounding="ROUND_CEILING"))
    except ArithmeticError:  # InvalidOperation, Overflow (`1e999999`)
        raise ValueError(f"not a CPU quantity: {quantity!r} (expected e.g. 32, 500m)") from None


def _check_cpu(value: int | str) -> int | str:
    cpu_millis(value)
    return value


CpuQuantity = Annotated[int | str, AfterValidator(_check_cpu)]


def _known_product(name: str) -> str:
    if catalog.find_product(name) is None:
        known = ", ".join(p.key for p in catalog.PRODUCTS)
        raise ValueError(f"unknown GPU product {name!r} (known: {known})")
    return name


#: The drivers a compact node's devices may be published by: drasat's node plugin, or NVIDIA's
#: DRA driver (its device names, attributes, capacities and MIG forms).
DriverName = Literal["gpu.drasat.io", "gpu.nvidia.com"]
DRASAT_FORMAT: DriverName = "gpu.drasat.io"
NVIDIA_FORMAT: DriverName = "gpu.nvidia.com"


def static_mig_starts(product: catalog.Product, profiles: list[str]) -> list[int]:
    """Where MIG devices made beforehand sit on one GPU: each profile in the order given at its
    lowest free placement start (as `nvidia-smi mig -cgi` places them). ValueError naming the
    first profile that the product lacks or that no longer fits. Pure."""
    used: set[int] = set()
    media = False
    starts: list[int] = []
    for name in profiles:
        profile = product.profile(name)
        if profile is None:
            known = ", ".join(p.name for p in product.mig_profiles)
            raise ValueError(f"{product.key} has no MIG profile {name!r} (known: {known})")
        free = [
            start
            for start in profile.starts
            if not used & set(range(start, start + profile.memory_slices))
        ]
        if not free or (profile.media_extensions and media):
            before = ", ".join(profiles[: len(starts)])
            raise ValueError(f"no room for {name} on a {product.key} after {before}")
        media = media or profile.media_extensions
        starts.append(free[0])
        used |= set(range(free[0], free[0] + profile.memory_slices))
    return starts


class ClusterGpus(Spec):
    """`count` GPUs of one product on each node of the group."""

    product: Annotated[str, AfterValidator(_known_product)] = Field(
        description="Catalog key, alias or NVML product name, e.g. A100-40GB, T4."
    )
    count: int = Field(
        1, ge=1, le=limits.MAX_GPUS_PER_NODE, description="GPUs of this product per node."
    )
    mig: bool = Field(False, description="MIG mode enabled (MIG-capable products only).")
    migDevices: list[str] | None = Field(
        None,
        description="Static MIG (NVIDIA's format only): the MIG devices made beforehand on each "
        "GPU, by profile, each at its lowest free placement; only they are published. Without "
        "it a MIG-mode GPU is dynamic MIG: every placement of every profile, made to order.",
    )

    @model_validator(mode="after")
    def _mig_needs_capable_product(self) -> ClusterGpus:
        product = catalog.find_product(self.product)
        if self.mig and product is not None and not product.mig_capable:
            raise ValueError(f"{product.key} does not support MIG; set mig: false")
        if self.migDevices is not None:
            if not self.mig:
                raise ValueError("migDevices: MIG devices need mig: true")
            if product is not None:
                static_mig_starts(product, self.migDevices)
        return self


class ClusterNode(Spec):
    """One node, or `count` identical nodes named `<name>-0` … `<name>-<count-1>`."""

    name: str = Field(min_length=1, description="Node name (a prefix when count > 1).")
    count: int = Field(
        1, ge=1, le=limits.MAX_NODES_PER_GROUP, description="Identical nodes of this shape."
    )
    gpus: list[ClusterGpus] = Field(default_factory=list, description="GPUs, indexed in order.")
    cpu: CpuQuantity | None = Field(None, description="Allocatable CPU, e.g. 64 or 63500m.")
    memory: Quantity | None = Field(None, description="Allocatable memory, e.g. 512Gi.")
    labels: dict[str, str] = Field(default_factory=dict, description="Node labels.")
    ready: bool = Field(True, description="False: the node plugin has not published (NotReady).")
    nvlink: bool = Field(False, description="All GPUs of the node are NVLink peers.")
    driver: DriverName = Field(
        DRASAT_FORMAT,
        description="Whose DRA driver publishes the node's GPUs: drasat's (gpu.drasat.io) or "
        "NVIDIA's (gpu.nvidia.com: its device names, attributes and capacities; MIG-mode GPUs "
        "as dynamic MIG, or static MIG with migDevices).",
    )

    @model_validator(mode="after")
    def _static_mig_is_nvidias(self) -> ClusterNode:
        if self.driver != NVIDIA_FORMAT and any(g.migDevices is not None for g in self.gpus):
            raise ValueError(
                "migDevices: drasat's node plugin makes MIG devices to order; static MIG is "
                f"NVIDIA's driver's (driver: {NVIDIA_FORMAT})"
            )
        return self

    @model_validator(mode="after")
    def _gpus_fit_a_node(self) -> ClusterNode:
        total = sum(g.count for g in self.gpus)
        if total > limits.MAX_GPUS_PER_NODE:
            raise ValueError(
                f"{total} GPUs on one node: at most {limits.MAX_GPUS_PER_NODE} (real servers "
                "hold up to 20)"
            )
        return self

    def node_names(self) -> list[str]:
        if self.count == 1:
            return [self.name]
        return [f"{self.name}-{i}" for i in range(self.count)]


class ClusterSpec(Spec):
    driverNamespace: str = Field("drasat", description="Namespace of the NodeAllocationStates.")
    driverVersion: str = Field("550.54.15", description="Reported NVIDIA driver version.")
    cudaDriverVersion: str = Field("12.4", description="Reported CUDA driver version.")
    nodes: list[ClusterNode] = Field(min_length=1, description="Nodes or groups of nodes.")

    @model_validator(mode="after")
    def _unique_node_names(self) -> ClusterSpec:
        seen: set[str] = set()
        for node in self.nodes:
            for name in node.node_names():
                if name in seen:
                    raise ValueError(f"node name {name!r} is used twice")
                seen.add(name)
        return self


class Cluster(Object):
    kind: Literal["Cluster"] = "Cluster"
    apiVersion: str = CLUSTER_API_VERSION
    spec: ClusterSpec


@dataclass(frozen=True)
class ExpandedNode:
    """A node of the description: its NodeAllocationState plus what NAS does not hold."""

    nas: NodeAllocationState
    cpu_milli: int | None
    memory_mib: int | None
    labels: dict[str, str]


def gpu_uuid(node: str, index: int) -> str:
    """Deterministic NVML-style UUID of a described GPU: `GPU-` + uuid5(node, index)."""
    return f"GPU-{uuid.uuid5(UUID_NAMESPACE, f'{node}/gpu/{index}')}"


def expand(spec: ClusterSpec) -> list[ExpandedNode]:
    """Every node of the description as a Ready (or NotReady) NodeAllocationState. Pure."""
    out: list[ExpandedNode] = []
    #: A MIG product's profiles, built once and shared by its nodes' NAS (read only).
    profiles: dict[str, list[MigInfo]] = {}
    for group in spec.nodes:
        for name in group.node_names():
            nas = NodeAllocationState(
                metadata=ObjectMeta(
                    name=name,
                    namespace=spec.driverNamespace,
                    ownerReferences=[
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": name,
                            "uid": str(uuid.uuid5(UUID_NAMESPACE, f"node/{name}")),
                        }
                    ],
                ),
                spec=NodeAllocationStateSpec(
                    allocatableDevices=_devices(spec, group, name, profiles)
                ),
                status=NasStatus.Ready if group.ready else NasStatus.NotReady,
            )
            memory = None if group.memory is None else to_bytes(group.memory) // 2**20
            cpu = None if group.cpu is None else cpu_millis(group.cpu)
            out.append(ExpandedNode(nas, cpu, memory, dict(group.labels)))
    return out


def _devices(
    spec: ClusterSpec, group: ClusterNode, node: str, profiles: dict[str, list[MigInfo]]
) -> list[AllocatableDevice]:
    products = [(_product(g), g.mig) for g in group.gpus for _ in range(g.count)]
    uuids = [gpu_uuid(node, i) for i in range(len(products))]
    devices: list[AllocatableDevice] = []
    for index, (product, mig) in enumerate(products):
        gpu = GpuInfo(
            index=index,
            uuid=uuids[index],
            minor=index,
            migEnabled=mig,
            memoryBytes=product.memory_bytes,
            productName=product.product_name,
            brand=product.brand,
            architecture=product.architecture,
            cudaComputeCapability=product.compute_capability,
            driverVersion=spec.driverVersion,
            cudaDriverVersion=spec.cudaDriverVersion,
            # distinct, well-formed bus IDs for up to 16 GPUs per PCI domain
            pciBusID=f"{index // 16:04x}:{0x10 + 0x0E * (index % 16):02x}:00.0",
            # The first half of the GPUs sit on NUMA node 0, the rest on 1, as on 2-socket hosts.
            numaNode=(2 * index) // len(products),
            nvlinkPeers=[u for u in uuids if u != uuids[index]] if group.nvlink else None,
        )
        devices.append(AllocatableDevice(gpu=gpu))
    # NAS lists MIG profiles once per product (not per GPU), for MIG-enabled products only.
    mig_products = dict.fromkeys(p for p, mig in products if mig)
    for product in mig_products:
        found = profiles.get(product.product_name)
        if found is None:
            found = profiles[product.product_name] = [
                _mig_info(product, p) for p in product.mig_profiles
            ]
        devices.extend(AllocatableDevice(mig=m) for m in found)
    return devices


def _mig_info(product: catalog.Product, profile: catalog.MigProfile) -> MigInfo:
    return MigInfo(
        profile=profile.name,
        parentProductName=product.product_name,
        placements=[MigPlacement(start=s, size=n) for s, n in profile.placements],
        giProfileId=profile.gi_profile_id,
        memoryBytes=profile.memory_bytes,
        computeSlices=profile.compute_slices,
    )


def _product(gpus: ClusterGpus) -> catalog.Product:
    product = catalog.find_product(gpus.product)
    if product is None:  # pragma: no cover - the model validator rejected it already
        raise ValueError(f"unknown GPU product {gpus.product!r}")
    return product
