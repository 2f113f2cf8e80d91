"""The devices a node publishes, read from its ResourceSlices: the solver's node model of each
node (`drasat.solver.nodemodel`) with the way back to each published device.

The controller and the what-if read slices here and nowhere else: the controller the slices of
drasat's driver as the API server serves them (the source kube-scheduler reads), the what-if
those of a file or a live cluster, drasat's or NVIDIA's.

Pools are read as upstream's allocator reads them (`structured.GatherPools`): per (driver, pool
name), only the highest generation counts, and a pool missing some of its `resourceSliceCount`
slices is not used (its devices are not all known yet: the driver is publishing).

Devices of two drivers become the solver's model:

- drasat's `gpu.drasat.io`: the device model's own names and attributes (`api.devicemodel`):
  `gpu-<minor>` whole GPUs, `gpu-<minor>-mig-<profile>-<id>-<start>` MIG placements with
  `placementStart`/`placementSize`, `cpu-fallback`;
- NVIDIA's `gpu.nvidia.com`: `gpu-<minor>` (attributes `uuid`, `productName`, `brand`,
  `architecture`, versions, `resource.kubernetes.io/pciBusID`; `index` and `minor` where an
  older driver publishes them; capacity `memory`), MIG devices `gpu-<minor>-mig-<profile>-<id>-
  <start>` (`parentUUID`, `profile`; capacity `memory` and engines) whose memory slices are
  capacities `memorySlice<i>` (static MIG, devices that exist) or counters `memory-slice-<i>`
  of the GPU's counter set `gpu-<minor>-counter-set` (dynamic MIG). A MIG-enabled GPU that
  NVIDIA does not publish whole (static MIG) is built from its MIG devices' parent attributes.

Each whole GPU is a `Gpu`, MIG placements become one `MigProfile` per product and profile with
the placements published (plain dataclasses: nothing read is validated twice). A device taint
with effect NoSchedule or NoExecute (its own, or a DeviceTaintRule's: `gpu.nvidia.com/xid`,
`gpu.drasat.io/gpu-lost`, ...) makes its GPU unhealthy,
so nothing new is allocated on it; drasat's allocator taint (`gpu.drasat.io/allocator`, put on
every device of drasat's by the DeviceTaintRule of drasat's own controller, to keep
kube-scheduler's allocator away) is not a health problem to drasat. Every device keeps its source
(driver, pool, name, the published device), found by drasat's device name, so output can name
NVIDIA's devices and selectors are evaluated on what was published; the model's GPUs and MIG
placements carry it too (`Gpu.device`, `Gpu.mig_devices`), so the solver's answer names it.

This is a purely computational module.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from drasat.api import catalog
from drasat.api.base import ObjectMeta
from drasat.api.cluster import cpu_millis
from drasat.api.devicemodel import devices, names
from drasat.api.groups import DRIVER_NAME
from drasat.api.inputerrors import InputError, describe_validation_error, show
from drasat.api.nas import NodeAllocationState
from drasat.api.quantity import base_units as unbounded
from drasat.api.quantity import to_bytes
from drasat.solver import nodemodel
from drasat.solver.ledger import Ledger
from drasat.solver.nodemodel import Gpu, MigProfile, Placement
from drasat.solver.problem import NodeState
from drasat.v1 import nasinventory
from drasat.v1.publisheddevices import FALLBACK, GPU, MIG, Published
from drasat.v1.slicekinds import DeviceTaintRule, ResourceSlice, base_units

Obj = dict[str, Any]

NVIDIA_DRIVER = "gpu.nvidia.com"
DRIVERS = (DRIVER_NAME, NVIDIA_DRIVER)
#: Device taint effects that keep new allocations off a device (`None` only informs).
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
#: The taint drasat's controller puts on all of its devices (a DeviceTaintRule) so that
#: kube-scheduler's own allocator leaves them to drasat: not a health problem to drasat.
OWN_ALLOCATOR_TAINT = f"{DRIVER_NAME}/allocator"
#: NVIDIA's MIG device names: `gpu-<minor>-mig-<profile>-<profileID>-<start>` (the profile
#: part is NVIDIA's own DNS form, `1g10gb-me` for `1g.10gb+me`).
_NVIDIA_MIG = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")
_STATIC_SLICE = re.compile(r"^memorySlice(\d+)$")
_COUNTER_SLICE = re.compile(r"^memory-slice-(\d+)$")
_COMPUTE = re.compile(r"^(\d+)g\.")
MiB = 2**20

#: (driver, pool, counter set name) -> counter -> value.
CounterSets = dict[tuple[str, str, str], dict[str, int]]


@dataclass(frozen=True)
class V1Node:
    name: str
    #: The solver's node: its devices (`state.devices`), CPU, memory, labels, readiness.
    state: NodeState
    #: The Node object when one was given.
    node: Obj | None
    #: drasat's device name (`api.devicemodel.names`) -> the device it stands for.
    devices: Mapping[str, Published]

    @functools.cached_property
    def nas(self) -> NodeAllocationState:
        """The devices as a NodeAllocationState (the what-if shows and writes one), built on
        first use: the controller's reading never needs it."""
        return NodeAllocationState(
            metadata=ObjectMeta(name=self.name),
            spec=nasinventory.nas_spec(self.state.devices),
        )


@dataclass(frozen=True)
class Skipped:
    """Something published that is not read, and why (`where`: the input it came from)."""

    where: str
    what: str
    reason: str


# Pools.


@dataclass
class Pool:
    driver: str
    name: str
    generation: int
    count: int
    node: str | None
    #: (where, validated slice, the slice in v1's shape as given). The validated slice is None
    #: for a slice read as the API server served it (`read_node`): the reader reads the slice
    #: as given, never the model.
    slices: list[tuple[str, ResourceSlice | None, Obj]] = field(default_factory=list)

    def incomplete(self) -> str | None:
        """Why the pool cannot be used yet (some of its slices are missing), or None."""
        if len(self.slices) == self.count:
            return None
        return (
            f"pool {self.name!r} of driver {self.driver} generation {self.generation} has "
            f"{len(self.slices)} of its {self.count} slices (spec.pool.resourceSliceCount): "
            "its devices are not all known"
        )


@dataclass(frozen=True, slots=True)
class _Head:
    """What a slice says of its pool."""

    driver: str
    pool: str
    generation: int
    count: int
    node: str | None

    @classmethod
    def of(cls, found: ResourceSlice) -> _Head:
        spec = found.spec
        return cls(
            spec.driver,
            spec.pool.name,
            spec.pool.generation,
            spec.pool.resourceSliceCount,
            spec.nodeName,
        )

    @classmethod
    def served(cls, data: Obj) -> _Head:
        """The head of a slice as the API server serves it (validated there); raises
        `NotAsServed` on what the server never serves, so the slice is validated here."""
        spec = data["spec"]
        pool = spec["pool"]
        head = cls(
            spec["driver"],
            pool["name"],
            pool.get("generation", 0),
            pool.get("resourceSliceCount", 1),
            spec.get("nodeName"),
        )
        texts_ok = all(isinstance(t, str) and t for t in (head.driver, head.pool))
        counts_ok = all(type(n) is int for n in (head.generation, head.count))
        if not (texts_ok and counts_ok and head.generation >= 0 and head.count >= 1):
            raise NotAsServed("spec.pool")
        if head.node is not None and not isinstance(head.node, str):
            raise NotAsServed("spec.nodeName")
        return head


class NotAsServed(Exception):
    """A slice read without validating it again is not as the API server serves it: it is read
    again with full validation, which names what is wrong."""


def add_slice(
    pools: dict[tuple[str, str], Pool],
    skipped: list[Skipped],
    found: ResourceSlice,
    data: Obj,
    *,
    where: str,
    source: str,
    what: str,
) -> None:
    """Put one validated slice in its pool: a newer generation replaces the pool read so far,
    an older one is skipped, as is a driver that is not a GPU driver. Raises InputError when
    two slices of one pool name different nodes."""
    _add(pools, skipped, _Head.of(found), found, data, where=where, source=source, what=what)


def _add(
    pools: dict[tuple[str, str], Pool],
    skipped: list[Skipped],
    head: _Head,
    found: ResourceSlice | None,
    data: Obj,
    *,
    where: str,
    source: str,
    what: str,
) -> None:
    if head.driver not in DRIVERS:
        skipped.append(Skipped(source, what, f"driver {head.driver} is not a GPU driver"))
        return
    key = (head.driver, head.pool)
    known = pools.get(key)
    if known is None or head.generation > known.generation:
        known = Pool(head.driver, head.pool, head.generation, head.count, None)
        pools[key] = known
    elif head.generation < known.generation:
        skipped.append(Skipped(source, what, "an older generation of its pool"))
        return
    if head.node:
        if known.node not in (None, head.node):
            raise InputError(
                f"spec.nodeName: {show(head.node)}, but pool {head.pool!r} is on node "
                f"{known.node!r}",
                where=where,
            )
        known.node = head.node
    known.count = head.count
    known.slices.append((where, found, data))


# One node's devices, read from the slices in v1's shape (validated by the models of
# `slicekinds`, or by the API server that served them): plain dicts, one reading for both.


def _attribute(attributes: Obj, driver: str, name: str) -> int | bool | str | None:
    """An attribute by its short name or qualified in the driver's domain."""
    found = attributes.get(name)
    if found is None:
        found = attributes.get(f"{driver}/{name}")
        if found is None:
            return None
    # Its one value (the API server or `slicekinds` checked there is one), read in line: a MIG
    # fleet's first read looks up a million attributes.
    for value in found.values():
        if value is not None:
            return value  # type: ignore[no-any-return]
    return None


def _text(attributes: Obj, driver: str, name: str) -> str:
    value = _attribute(attributes, driver, name)
    return value if isinstance(value, str) else ""


def _int(attributes: Obj, driver: str, name: str) -> int | None:
    value = _attribute(attributes, driver, name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _quantity(given: Any) -> int:
    """A capacity or counter in its base unit: `{value}`, or a bare quantity (v1alpha3)."""
    return base_units(given["value"] if isinstance(given, dict) else given)


def _memory_slices(counters: Obj, where: str, path: str) -> dict[str, int]:
    """A counter set's counters as integers: the memory-slice counters must be (a MIG device
    of dynamic MIG consumes them), another that is over 64 bits is left out (nothing reads it).
    Raises InputError naming the counter."""
    out = {}
    for name, given in counters.items():
        try:
            out[name] = _quantity(given)
        except ValueError as error:
            if _COUNTER_SLICE.match(name):
                raise InputError(f"{path}.counters.{name}: {error}", where=where) from None
            unbounded(given["value"] if isinstance(given, dict) else given)
    return out


def _healthy(device: Obj, ruled: bool = False) -> bool:
    """No taint that keeps allocations off it: its own (drasat's allocator taint aside) or,
    `ruled`, a DeviceTaintRule's."""
    taints = device.get("taints")
    if not taints:
        return not ruled
    own = any(t["effect"] in BLOCKING_EFFECTS and t["key"] != OWN_ALLOCATOR_TAINT for t in taints)
    return not (own or ruled)


def published_device(raw: Obj) -> Obj:
    """The device as given (v1's shape), its capacities and counters as plain integers
    (`4864Mi` -> `5100273664`), the form drasat's device model writes. One over 64 bits (`10E`,
    which the API server accepts) is kept as given: only memory and the memory-slice counters
    are read as integers (`_memory`, `_memory_slices`), and a selector reads the text."""
    out = dict(raw)
    if capacity := raw.get("capacity"):
        out["capacity"] = {
            name: {**given, "value": _plain(given["value"])}
            if isinstance(given, dict)
            else {"value": _plain(given)}
            for name, given in capacity.items()
        }
    if consumed := raw.get("consumesCounters"):
        out["consumesCounters"] = [
            {
                "counterSet": c["counterSet"],
                "counters": {n: {"value": _plain(q["value"])} for n, q in c["counters"].items()},
            }
            for c in consumed
        ]
    return out


@functools.lru_cache(maxsize=4096, typed=True)
def _plain(value: int | str) -> str:
    """A quantity as a plain integer (slices repeat few distinct quantities many times), or as
    given when it is over 64 bits; raises ValueError on one that is not a quantity."""
    try:
        return str(base_units(value))
    except ValueError:
        unbounded(value)
        return str(value)


def _memory(capacity: Obj) -> int:
    """A device's `memory` capacity in bytes; raises ValueError naming the field."""
    try:
        return _quantity(capacity["memory"])
    except ValueError as error:
        raise ValueError(f"capacity.memory: {error}") from None


def _path(index: int, device: Obj) -> str:
    return f"spec.devices[{index}] ({device['name']})"


@dataclass(slots=True)
class _Mig:
    """One MIG device read from a slice."""

    source: Published
    parent_uuid: str
    minor: int
    profile: str
    profile_id: int
    start: int
    size: int
    memory: int
    #: The device's attributes, for its product's facts when its parent is not published whole.
    attributes: Obj
    driver: str
    healthy: bool


class NodeReader:
    """Reads the pools of one node, then `finish` gives its inventory."""

    def __init__(self, node: str, rules: Sequence[DeviceTaintRule] = ()) -> None:
        self.node = node
        self.rules = rules
        self.gpus: dict[str, Gpu] = {}
        self.migs: list[_Mig] = []
        self.sources: dict[str, Published] = {}
        self.skipped: list[Skipped] = []
        self.where: dict[str, str] = {}

    def read_pool(self, found: Pool, counter_sets: CounterSets) -> None:
        """Raises InputError naming the slice and the device's field."""
        for where, _, data in found.slices:
            for index, counter_set in enumerate(data["spec"].get("sharedCounters") or []):
                counter_sets[(found.driver, found.name, counter_set["name"])] = _memory_slices(
                    counter_set["counters"], where, f"spec.sharedCounters[{index}]"
                )
        for where, _, data in found.slices:
            for index, device in enumerate(data["spec"].get("devices") or []):
                try:
                    self._device(found, device, where, index)
                except ValueError as error:
                    path = _path(index, device)
                    raise InputError(f"{path}: {error}", where=where) from None

    def _device(self, found: Pool, device: Obj, in_slice: str, index: int) -> None:
        """`in_slice`: the slice's name for messages (the device's path in it is put together
        only when a message needs it: a MIG device never does)."""
        driver = found.driver
        name = device["name"]
        attributes = device.get("attributes") or {}
        where = ""
        if (kind := _text(attributes, driver, "type")) != devices.TYPE_MIG:
            where = f"{in_slice}: {_path(index, device)}"
        ruled = bool(self.rules) and any(
            r.spec.taint.effect in BLOCKING_EFFECTS
            and r.spec.deviceSelector is not None
            and r.spec.deviceSelector.selects(driver, found.name, name)
            for r in self.rules
        )
        if kind == devices.TYPE_GPU:
            self._gpu(found.name, device, attributes, driver, where, ruled)
        elif kind == devices.TYPE_MIG:
            self.migs.append(self._mig(found.name, device, attributes, driver, ruled))
        elif kind == devices.TYPE_FALLBACK and driver == DRIVER_NAME:
            source = Published(driver, found.name, published_device(device), FALLBACK)
            self._source(names.CPU_FALLBACK, source, where)
        elif kind == "vfio":
            self.skipped.append(
                Skipped(where, f"device {name}", "VFIO passthrough is not supported")
            )
        else:
            self.skipped.append(
                Skipped(where, f"device {name}", f"type {show(kind)} is not modelled")
            )

    def _source(self, name: str, source: Published, where: str) -> None:
        if name in self.sources:
            raise ValueError(f"the same device as {self.where[name]}")
        self.sources[name] = source
        self.where[name] = where

    def _gpu(
        self, pool: str, device: Obj, attributes: Obj, driver: str, where: str, ruled: bool
    ) -> None:
        parsed = names.parse(device["name"])
        minor = _int(attributes, driver, "minor")
        if minor is None:
            if not isinstance(parsed, names.GpuName):
                raise ValueError("name: not gpu-<minor>, and no minor attribute")
            minor = parsed.minor
        uuid = _text(attributes, driver, "uuid")
        if not uuid:
            raise ValueError("attributes.uuid: missing")
        if uuid in self.gpus:
            raise ValueError(f"GPU {uuid} is published twice on node {self.node}")
        capacity = device.get("capacity") or {}
        if "memory" not in capacity:
            raise ValueError("capacity.memory: missing")
        index = _int(attributes, driver, "index")
        for what, value in (("minor", minor), ("index", index)):
            if value is not None and value < 0:
                raise ValueError(f"attributes.{what}: {value} is negative")
        memory = _memory(capacity)
        if memory < 0:
            raise ValueError("capacity.memory: negative")
        source = Published(driver, pool, published_device(device), GPU, uuid)
        self.gpus[uuid] = Gpu(
            index=minor if index is None else index,
            uuid=uuid,
            minor=minor,
            migEnabled=bool(_attribute(attributes, driver, "migEnabled")),
            memoryBytes=memory,
            pciBusID=_text(attributes, driver, devices.PCI_BUS_ID) or None,
            numaNode=_int(attributes, driver, "numaNode"),
            healthy=_healthy(device, ruled),
            device=source,
            **_product(attributes, driver),
        )
        self._source(names.gpu_name(minor), source, where)

    def _mig(self, pool: str, device: Obj, attributes: Obj, driver: str, ruled: bool) -> _Mig:
        parent = _text(attributes, driver, "parentUUID")
        profile = _text(attributes, driver, "profile")
        if not parent or not profile:
            raise ValueError("attributes: a MIG device names its parentUUID and profile")
        if not _text(attributes, driver, "productName"):
            raise ValueError("attributes.productName: missing")
        minor, profile_id, start = _mig_numbers(device["name"], attributes, driver)
        size = _placement_size(device, attributes, driver, start)
        if size is None:
            known = catalog.product_for_name(_text(attributes, driver, "productName"))
            found = known.profile(profile) if known else None
            if found is None:
                raise ValueError(
                    "cannot tell which memory slices it uses (no placementSize attribute, "
                    "memorySlice<i> capacities or memory-slice-<i> counters)"
                )
            size = found.memory_slices
        if start + size > 8:
            raise ValueError(f"placement {start}+{size} is beyond a GPU's 8 memory slices")
        capacity = device.get("capacity") or {}
        memory = _memory(capacity) if "memory" in capacity else 0
        return _Mig(
            source=Published(driver, pool, published_device(device), MIG, parent, profile, start),
            parent_uuid=parent,
            minor=minor,
            profile=profile,
            profile_id=profile_id,
            start=start,
            size=size,
            memory=memory,
            attributes=attributes,
            driver=driver,
            healthy=_healthy(device, ruled),
        )

    def finish(self, node: Obj | None, where: str = "") -> V1Node:
        """The node's devices and NodeState, once every pool is read."""
        placed: dict[str, dict[tuple[str, int], Published]] = {}
        for mig in self.migs:
            self._parent_of(mig)
            placed.setdefault(mig.parent_uuid, {})[(mig.profile, mig.start)] = mig.source
        for uuid, found_migs in placed.items():
            self.gpus[uuid] = replace(self.gpus[uuid], mig_devices=found_migs)
        by_key: dict[tuple[str, str], _Profile] = {}
        for mig in sorted(self.migs, key=lambda m: (m.profile_id, m.profile, m.start)):
            parent = self.gpus[mig.parent_uuid]
            key = (parent.productName, mig.profile)
            found = by_key.get(key)
            if found is None:
                found = by_key[key] = _Profile(mig.profile_id, mig.memory or None, {})
            found.placements.setdefault((mig.start, mig.size), None)
            name = _mig_name(mig.minor, mig.profile, mig.profile_id, mig.start)
            where_mig = f"{mig.source.pool}/{mig.source.name}"
            try:
                self._source(name, mig.source, where_mig)
            except ValueError as error:  # one MIG device published twice (in two pools)
                raise InputError(str(error), where=f"MIG device {where_mig}") from None
        profiles = tuple(
            MigProfile(
                profile=profile,
                parentProductName=product,
                placements=tuple(Placement(start, size) for start, size in found.placements),
                giProfileId=found.profile_id,
                memoryBytes=found.memory,
                computeSlices=_compute_slices(profile),
            )
            for (product, profile), found in by_key.items()
        )
        gpus = tuple(sorted(self.gpus.values(), key=lambda g: g.minor))
        drivers = sorted({d.driver for d in self.sources.values()}) or sorted(DRIVERS)
        read = nodemodel.NodeDevices(gpus, profiles, f"ResourceSlices of {', '.join(drivers)}")
        state = node_state(self.node, read, node, where)
        return V1Node(self.node, state, node, dict(self.sources))

    def _parent_of(self, mig: _Mig) -> None:
        """Mark the parent MIG-enabled, or build it from the MIG device when NVIDIA does not
        publish it whole (static MIG)."""
        gpu = self.gpus.get(mig.parent_uuid)
        healthy = gpu.healthy if gpu else True
        healthy = healthy and mig.healthy
        if gpu is None:
            memory = 0
            facts = _product(mig.attributes, mig.driver)
            product = catalog.product_for_name(str(facts["productName"]))
            if product is not None:
                memory = product.memory_bytes
            gpu = Gpu(
                index=mig.minor, uuid=mig.parent_uuid, minor=mig.minor, memoryBytes=memory,
                **facts,
            )  # fmt: skip
        if not gpu.migEnabled or gpu.healthy != healthy:
            self.gpus[mig.parent_uuid] = replace(gpu, migEnabled=True, healthy=healthy)


@dataclass
class _Profile:
    """One MIG profile of one product while a node is read: its placements in order."""

    profile_id: int
    memory: int | None
    placements: dict[tuple[int, int], None]


def _product(attributes: Obj, driver: str) -> dict[str, Any]:
    out: dict[str, Any] = {"productName": _text(attributes, driver, "productName")}
    if not out["productName"]:
        raise ValueError("attributes.productName: missing")
    for name in ("brand", "architecture"):
        if value := _text(attributes, driver, name):
            out[name] = value
    for name in ("cudaComputeCapability", "driverVersion", "cudaDriverVersion"):
        if value := _text(attributes, driver, name):
            out[name] = _short_version(value)
    return out


def _short_version(version: str) -> str:
    """`8.0.0` -> `8.0` for a compute capability: the NAS holds NVML's spelling; the version
    compare of selectors reads both alike."""
    parts = version.split(".")
    while len(parts) > 2 and parts[-1] == "0":
        parts.pop()
    return ".".join(parts)


def _mig_numbers(name: str, attributes: Obj, driver: str) -> tuple[int, int, int]:
    """(parent minor, GPU-instance profile id, placement start) of a MIG device."""
    numbers = _numbers_in_name(name)
    if numbers is None:
        raise ValueError("name: not gpu-<minor>-mig-<profile>-<profileID>-<start>")
    minor, profile_id, start = numbers
    for attribute, value in (("parentMinor", minor), ("placementStart", start)):
        given = _int(attributes, driver, attribute)
        if given is not None and given != value:
            raise ValueError(f"attributes.{attribute}: {given}, but the name says {value}")
    return minor, profile_id, start


@functools.lru_cache(maxsize=4096)
def _numbers_in_name(name: str) -> tuple[int, int, int] | None:
    """(parent minor, profile id, start) that a MIG device's name says, drasat's or NVIDIA's
    (every node of a fleet repeats the same few hundred names)."""
    parsed = names.parse(name)
    if isinstance(parsed, names.MigName):
        return parsed.minor, parsed.profile_id, parsed.start
    if match := _NVIDIA_MIG.match(name):
        return int(match[1]), int(match[3]), int(match[4])
    return None


#: `names.mig_name`, remembered: every node of a fleet names the same few hundred placements.
_mig_name = functools.lru_cache(maxsize=4096)(names.mig_name)


def _placement_size(device: Obj, attributes: Obj, driver: str, start: int) -> int | None:
    if (size := _int(attributes, driver, "placementSize")) is not None:
        return size
    slices = [int(m[1]) for k in device.get("capacity") or {} if (m := _STATIC_SLICE.match(k))]
    for consumption in device.get("consumesCounters") or []:
        slices += [int(m[1]) for k in consumption["counters"] if (m := _COUNTER_SLICE.match(k))]
    if not slices:
        return None
    if sorted(slices) != list(range(start, start + len(slices))):
        raise ValueError(
            f"memory slices {sorted(slices)} are not consecutive from the placement start {start}"
        )
    return len(slices)


def _compute_slices(profile: str) -> int | None:
    match = _COMPUTE.match(profile)
    return int(match[1]) if match else None


# Nodes.


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def node_state(
    name: str,
    devices: nodemodel.NodeDevices,
    node: Obj | None,
    where: str = "",
    ledger: Ledger | None = None,
) -> NodeState:
    """The solver's node: its devices, its ledger (None: nothing allocated), CPU, memory, labels
    and readiness from the Node (None: unconstrained and Ready)."""
    held = ledger if ledger is not None else Ledger()
    if node is None:
        return NodeState(name=name, devices=devices, ledger=held)
    status = _mapping(node.get("status"))
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    if not isinstance(allocatable, dict):
        raise InputError("status.allocatable: must be a mapping", where=where)
    # Cordons, taints, selectors and pod counts are per pod: `drasat.api.nodefit` decides them.
    reason = ""
    for condition in status.get("conditions") or []:
        ready = isinstance(condition, dict) and condition.get("type") == "Ready"
        if ready and condition.get("status") != "True":
            reason = reason or f"the Node is not Ready ({condition.get('reason') or '?'})"
    try:
        cpu = cpu_millis(allocatable["cpu"]) if "cpu" in allocatable else None
        memory = to_bytes(allocatable["memory"]) // MiB if "memory" in allocatable else None
    except (ValueError, TypeError) as error:
        raise InputError(f"status.allocatable: {error}", where=where) from None
    labels = _mapping(_mapping(node.get("metadata")).get("labels"))
    return NodeState(
        name=name,
        devices=devices,
        ledger=held,
        ready=not reason,
        unready_reason=reason,
        cpu_milli=cpu,
        memory_mib=memory,
        labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
    )


# The published inventory of a live cluster (the controller's view).


@dataclass(frozen=True)
class NodeDevices:
    """What one node publishes of one driver, as read from the API server's slices."""

    node: str
    #: Its inventory; None when its slices cannot be used (`problem` says why).
    read: V1Node | None
    problem: str = ""
    #: Pools left out (incomplete) and devices not modelled, for a log line.
    notes: tuple[str, ...] = ()
    #: The resourceVersions of the node's slices (what the answer was read from).
    versions: tuple[str, ...] = ()


def read_node(
    node: str, found: Sequence[Obj], *, driver: str = DRIVER_NAME, served: bool = False
) -> NodeDevices:
    """One node's devices of `driver` from its slices (v1 objects): the complete pools of their
    newest generation. Never raises: a slice that does not validate, or a device the model
    cannot read, makes the node's devices unusable, with the reason.

    `served`: the slices are as the API server serves them, validated there against v1's rules
    (which the models of `slicekinds` hold too), so they are read without validating them again
    (validating was a third of the controller's first read of a fleet). The answer is the same:
    a node whose slices the reading cannot use (anything the server never serves, or a device
    the model cannot read) is read again with validation, which names what is wrong
    (tests/v1/test_v1_slices_served.py holds both)."""
    found_versions = tuple(sorted(_version(o)[1] for o in found))
    answer = None
    if served:
        # The fallback below catches everything: whatever a slice the server never serves
        # makes the unvalidated reading raise, the validated reading answers it.
        with contextlib.suppress(Exception):
            answer = _read_node(node, found, driver, validate=False)
    if answer is None or answer.read is None:
        answer = _read_node(node, found, driver, validate=True)
    return replace(answer, versions=found_versions)


def _read_node(node: str, found: Sequence[Obj], driver: str, *, validate: bool) -> NodeDevices:
    pools: dict[tuple[str, str], Pool] = {}
    skipped: list[Skipped] = []
    for obj in found:
        name = str((obj.get("metadata") or {}).get("name", ""))
        where = f"ResourceSlice {name}"
        try:
            if validate:
                envelope = {k: obj.get(k) for k in ("apiVersion", "kind", "metadata", "spec")}
                model = ResourceSlice.model_validate(envelope)
                parsed: ResourceSlice | None = model
                head = _Head.of(model)
            else:
                parsed, head = None, _Head.served(obj)
            _add(pools, skipped, head, parsed, obj, where=where, source=where, what=where)
        except ValidationError as error:
            return NodeDevices(node, None, f"{where}: {describe_validation_error(error)}")
        except InputError as error:
            return NodeDevices(node, None, str(error))
    notes = [f"{s.what}: {s.reason}" for s in skipped]
    complete = []
    for pool in pools.values():
        why = pool.incomplete()
        if why is None:
            complete.append(pool)
        else:
            notes.append(why)
    if not complete:
        problem = "; ".join(notes) or f"it publishes no ResourceSlice of {driver}"
        return NodeDevices(node, None, problem, tuple(notes))
    reader = NodeReader(node)
    try:
        for pool in complete:
            reader.read_pool(pool, {})
        read = reader.finish(None)
    except InputError as error:
        return NodeDevices(node, None, str(error), tuple(notes))
    notes += [f"{s.what}: {s.reason}" for s in reader.skipped]
    return NodeDevices(node, read, "", tuple(notes))


class Reader:
    """`read_node` for every node, remembering each node's answer while its slices are the
    same (a cycle reads every node; slices change rarely). Keeps no I/O, only memory."""

    def __init__(self, driver: str = DRIVER_NAME, *, served: bool = True) -> None:
        self.driver = driver
        #: The slices are as the API server serves them (`read_node`'s `served`).
        self.served = served
        self._known: dict[str, tuple[tuple[tuple[str, str], ...], NodeDevices]] = {}

    def read(self, found: Iterable[Obj]) -> dict[str, NodeDevices]:
        """node name -> its devices, for every node with a slice of the driver (slices not
        local to one node are not read: drasat's plugin publishes per node)."""
        by_node: dict[str, list[Obj]] = {}
        for obj in found:
            spec = obj.get("spec") or {}
            if spec.get("driver") == self.driver and spec.get("nodeName"):
                by_node.setdefault(str(spec["nodeName"]), []).append(obj)
        out = {}
        unread = []
        for node, objs in sorted(by_node.items()):
            key = tuple(sorted(_version(o) for o in objs))
            known = self._known.get(node)
            if known is not None and known[0] == key and all(v for _, v in key):
                out[node] = known[1]
            else:
                unread.append((node, objs, key))
        with _collector_paused() if len(unread) > 1 else contextlib.nullcontext():
            for node, objs, key in unread:
                out[node] = read_node(node, objs, driver=self.driver, served=self.served)
                self._known[node] = (key, out[node])
        for node in set(self._known) - set(out):
            del self._known[node]
        return out


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while many nodes are read at once (the first
    cycle reads every node): reading allocates millions of objects, each full collection walks
    every object alive (the informers' caches of every slice, growing with the nodes), and the
    number of collections grows with the objects allocated, so the first read grew with the
    square of the nodes (192 nodes of bench.kube_alloc's fleet: 8.2 s with the collector,
    2.4 s without). What a read allocates holds no reference cycles; the collector runs again
    as usual afterwards."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _version(obj: Obj) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("name", "")), str(metadata.get("resourceVersion") or "")
