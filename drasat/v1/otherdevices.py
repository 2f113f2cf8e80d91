"""Other drivers' devices (a NIC, an FPGA: any driver whose devices drasat does not model as
GPUs), read from their ResourceSlices as upstream's allocator reads them, for the claims drasat
takes that ask for them beside its GPUs (a GPU and a NIC on one PCIe root).

The solver knows such a device by its key alone (`<driver>/<pool>/<device>`,
`Published.key`): what taking it draws on its node's amounts (`solver.DeviceDemand`). The
amounts, each by a name unique in the cluster:

- `device/<key>`: 1, a device that takes one allocation at a time;
- `capacity/<key>/<capacity>`: a capacity of a device that allows several allocations
  (`allowMultipleAllocations`), each allocation drawing what its request asks, rounded up by
  the capacity's request policy, or the policy's default (all of it without a policy);
- `counter/<driver>/<pool>/<counter set>/<counter>`: a shared counter (partitionable devices)
  that a device consumes while it is allocated.

What is left of them is what the slices publish less what the allocated claims' results hold:
the ledger of another driver's devices is the claims' statuses (`held`), as on NVIDIA's nodes;
drasat writes no NodeAllocationState entry for them.

Pools are read as `drasat.v1.slices` reads them (the highest generation, complete ones only);
pools not local to one node (a network-attached device's `nodeSelector` or `allNodes`) are not
read, nor a device that allows several allocations and also consumes shared counters. This is
a purely computational module.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from drasat.api.inputerrors import describe_validation_error
from drasat.api.quantity import to_bytes
from drasat.v1 import slices
from drasat.v1.publisheddevices import OTHER, Published
from drasat.v1.slicekinds import Quantity, ResourceSlice, amount

Obj = dict[str, Any]
#: What taking a device draws on its node's amounts: ((amount name, how much), ...).
Draws = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class NodeOthers:
    """What one node publishes of other drivers' devices."""

    node: str
    devices: tuple[Published, ...] = ()
    #: Every amount the devices draw on, as published (before any allocation).
    amounts: Mapping[str, int] = field(default_factory=dict)
    #: Pools and devices not read, with why (for a log line).
    notes: tuple[str, ...] = ()


def read(found: Iterable[Obj], gpu_drivers: Container[str]) -> dict[str, NodeOthers]:
    """node -> its other drivers' devices, for every node with a slice of a driver not in
    `gpu_drivers` (the drivers drasat models as GPUs). Never raises: a slice that does not
    validate leaves its pool out, with the reason in `notes`."""
    pools: dict[tuple[str, str], slices.Pool] = {}
    notes: dict[str, list[str]] = {}
    for obj in found:
        spec = obj.get("spec") or {}
        driver, node = spec.get("driver"), spec.get("nodeName")
        if not node or driver in gpu_drivers:
            continue
        name = str((obj.get("metadata") or {}).get("name", ""))
        where = f"ResourceSlice {name}"
        envelope = {k: obj.get(k) for k in ("apiVersion", "kind", "metadata", "spec")}
        try:
            parsed = ResourceSlice.model_validate(envelope)
        except ValidationError as error:
            notes.setdefault(str(node), []).append(f"{where}: {describe_validation_error(error)}")
            continue
        if (too_big := _over_64_bits(parsed)) is not None:
            notes.setdefault(str(node), []).append(f"{where}: {too_big}")
            continue
        _add(pools, parsed, obj, where)
    per_node: dict[str, list[slices.Pool]] = {}
    for pool in pools.values():
        if pool.node is None:
            continue
        why = pool.incomplete()
        if why is not None:
            notes.setdefault(pool.node, []).append(why)
            continue
        per_node.setdefault(pool.node, []).append(pool)
    out = {}
    for node in sorted(set(per_node) | set(notes)):
        out[node] = _node(node, per_node.get(node, []), notes.get(node, []))
    return out


def _over_64_bits(found: ResourceSlice) -> str | None:
    """The first quantity of the slice that is over 64 bits, with its field path (the API
    server accepts one; drasat counts every capacity and counter of another driver's device in
    the solver's 64-bit integers), or None."""
    spec = found.spec
    paths: list[tuple[str, dict[str, Quantity]]] = [
        (f"spec.sharedCounters[{i}].counters", c.counters)
        for i, c in enumerate(spec.sharedCounters or [])
    ]
    for i, device in enumerate(spec.devices):
        paths.append((f"spec.devices[{i}].capacity", device.capacity))
        paths += [
            (f"spec.devices[{i}].consumesCounters[{j}].counters", c.counters)
            for j, c in enumerate(device.consumesCounters or [])
        ]
    for path, quantities in paths:
        for name, quantity in quantities.items():
            try:
                amount(quantity)
            except ValueError as error:
                return f"{path}.{name}: {error}"
    return None


def _add(
    pools: dict[tuple[str, str], slices.Pool], found: ResourceSlice, data: Obj, where: str
) -> None:
    """The slice in its pool: the newest generation replaces what was read before, an older
    one is dropped; two nodes for one pool leave the pool to the first (upstream refuses it)."""
    spec = found.spec
    key = (spec.driver, spec.pool.name)
    known = pools.get(key)
    if known is None or spec.pool.generation > known.generation:
        known = slices.Pool(
            spec.driver, spec.pool.name, spec.pool.generation, spec.pool.resourceSliceCount, None
        )
        pools[key] = known
    elif spec.pool.generation < known.generation:
        return
    if known.node not in (None, spec.nodeName):
        return
    known.node = spec.nodeName
    known.count = spec.pool.resourceSliceCount
    known.slices.append((where, found, data))


def _validated(pool: slices.Pool) -> list[tuple[str, ResourceSlice, Obj]]:
    """The pool's slices with their models (this module's pools hold validated slices only:
    `_add`)."""
    return [(where, item, data) for where, item, data in pool.slices if item is not None]


def _node(node: str, pools: Sequence[slices.Pool], notes: list[str]) -> NodeOthers:
    devices: list[Published] = []
    amounts: dict[str, int] = {}
    for pool in pools:
        for _, item, _ in _validated(pool):
            for counter_set in item.spec.sharedCounters or []:
                for counter, quantity in counter_set.counters.items():
                    amounts[_counter(pool.driver, pool.name, counter_set.name, counter)] = amount(
                        quantity
                    )
        for where, item, data in _validated(pool):
            for index, device in enumerate(item.spec.devices):
                raw = data["spec"]["devices"][index]
                published = Published(pool.driver, pool.name, slices.published_device(raw), OTHER)
                if device.allowMultipleAllocations and device.consumesCounters:
                    notes.append(
                        f"{where}: device {device.name}: a device that allows several "
                        "allocations and consumes shared counters is not allocated by drasat"
                    )
                    continue
                if device.allowMultipleAllocations:
                    for name, quantity in device.capacity.items():
                        amounts[_capacity(published.key, name)] = amount(quantity)
                else:
                    amounts[_device(published.key)] = 1
                devices.append(published)
    return NodeOthers(node, tuple(devices), amounts, tuple(notes))


def _device(key: str) -> str:
    return f"device/{key}"


def _capacity(key: str, name: str) -> str:
    return f"capacity/{key}/{name}"


def _counter(driver: str, pool: str, counter_set: str, counter: str) -> str:
    return f"counter/{driver}/{pool}/{counter_set}/{counter}"


# What taking a device draws.


def draws(device: Published, requested: Mapping[str, int] = {}) -> Draws | None:
    """What taking `device` for a request asking `requested` of its capacities draws on its
    node's amounts (None: the request cannot take it)."""
    capacity = device.device.get("capacity") or {}
    for name, asked in requested.items():
        entry = capacity.get(name)
        if not isinstance(entry, dict) or _value(entry) < asked:
            return None  # upstream skips a device without the capacity or with too little
    if not device.device.get("allowMultipleAllocations"):
        out = [(_device(device.key), 1)]
        for consumed in device.device.get("consumesCounters") or []:
            for counter, entry in (consumed.get("counters") or {}).items():
                name = _counter(device.driver, device.pool, consumed["counterSet"], counter)
                out.append((name, _value(entry)))
        return tuple(out)
    shared = []
    for name, entry in capacity.items():
        taken = consumed_capacity(entry, requested.get(name))
        if taken is None:
            return None
        shared.append((_capacity(device.key, name), taken))
    return tuple(shared)


def consumed_capacity(entry: Obj, requested: int | None) -> int | None:
    """What one allocation draws of a capacity of a device that allows several: what the
    request asks, raised to the request policy's smallest valid value (`validValues`) or onto
    its range's steps (`validRange`), or the policy's default when it asks nothing (the whole
    capacity without a policy); None: the policy refuses the request (upstream's consumable
    capacity rules)."""
    policy = entry.get("requestPolicy") or {}
    if requested is None:
        default = policy.get("default")
        return _quantity(default) if default is not None else _value(entry)
    valid = policy.get("validValues")
    if valid:
        fitting = [v for v in (_quantity(x) for x in valid) if v >= requested]
        return min(fitting) if fitting else None
    bounds = policy.get("validRange")
    if bounds:
        low = _quantity(bounds.get("min", 0))
        much = max(low, requested)
        step = _quantity(bounds["step"]) if bounds.get("step") is not None else 0
        if step:
            much = low + -(-(much - low) // step) * step
        high = bounds.get("max")
        if high is not None and much > _quantity(high):
            return None
        return much
    return requested


def _value(entry: Obj) -> int:
    return _quantity(entry.get("value", 0))


def _quantity(value: object) -> int:
    return to_bytes(str(value))


# What allocated claims hold.


def held(claims: Iterable[Obj], others: Mapping[str, NodeOthers]) -> dict[str, dict[str, int]]:
    """node -> amount -> what the allocated claims' results hold of it: each result naming
    another driver's device (driver, pool, device) of a node here draws what that device's
    allocation draws (a shared device's `consumedCapacity` as written)."""
    by_key = {d.key: (node, d) for node, found in others.items() for d in found.devices}
    out: dict[str, dict[str, int]] = {}
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            if not isinstance(result, dict):
                continue
            key = f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
            found = by_key.get(key)
            if found is None:
                continue
            node, device = found
            used = out.setdefault(node, {})
            for name, much in result_draws(device, result):
                used[name] = used.get(name, 0) + much
    return out


def result_draws(device: Published, result: Obj) -> Draws:
    """What one allocation result naming `device` holds of its node's amounts."""
    if not device.device.get("allowMultipleAllocations"):
        return draws(device) or ()
    consumed = result.get("consumedCapacity") or {}
    capacity = device.device.get("capacity") or {}
    out = []
    for name, entry in capacity.items():
        written = consumed.get(name)
        much = _quantity(written) if written is not None else consumed_capacity(entry, None)
        out.append((_capacity(device.key, name), much or 0))
    return tuple(out)


def left(found: NodeOthers, used: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """The node's amounts less what is held (never below 0: an over-commitment someone else
    wrote leaves nothing, not less)."""
    return tuple(
        (name, max(0, total - used.get(name, 0))) for name, total in sorted(found.amounts.items())
    )


def consumed_of(device: Published, drawn: Draws) -> Obj | None:
    """A result's `consumedCapacity` for a shared device from what its allocation draws
    (None: a device taken whole writes none)."""
    if not device.device.get("allowMultipleAllocations"):
        return None
    prefix = f"capacity/{device.key}/"
    return {name.removeprefix(prefix): str(much) for name, much in drawn if name.startswith(prefix)}
