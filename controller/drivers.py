"""Which drivers' devices drasat's v1 controller allocates (`drasat controller --driver`):
drasat's own `gpu.drasat.io` (the default), NVIDIA's `gpu.nvidia.com` (its DRA driver, as
`kubernetes-sigs/dra-driver-nvidia-gpu` and the GPU Operator ship it), or both.

For each driver named:

- its DeviceClasses are drasat's to allocate (`v1inputs.our_classes`: a class whose selectors
  name the driver; NVIDIA's `gpu.nvidia.com` and `mig.nvidia.com` select on `device.driver`);
- its devices are read from the ResourceSlices its plugin publishes (`Published`), one driver per
  node: a node publishing both is not used (the same GPUs would count twice);
- a DeviceTaintRule of its own (`taint_rule_name`) taints every one of its devices with drasat's
  allocator taint, so kube-scheduler's allocator never hands them out first; NVIDIA's plugin
  prepares what an allocation names whoever wrote it, so its chart needs no change.

A node without drasat's node plugin keeps no NodeAllocationState: its ledger is the claims'
statuses (`controller.statusledger`). This is a purely computational module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from drasat.api.groups import DRIVER_NAME
from drasat.api.inputerrors import InputError
from drasat.v1 import slices

Obj = dict[str, Any]

#: What the controller allocates by default: drasat's own devices.
DEFAULT: tuple[str, ...] = (DRIVER_NAME,)
#: The drivers whose devices drasat's model reads (`drasat.v1.slices`).
KNOWN: tuple[str, ...] = slices.DRIVERS
NVIDIA = slices.NVIDIA_DRIVER


def parse(values: Iterable[str]) -> tuple[str, ...]:
    """`--driver` values (each may be a comma-separated list) as the drivers, in the order
    given, each once; InputError naming a driver drasat cannot allocate, or none given."""
    out: list[str] = []
    for value in values:
        for name in (part.strip() for part in value.split(",")):
            if not name:
                continue
            if name not in KNOWN:
                raise InputError(
                    f"--driver {name!r}: drasat allocates the devices of {' and '.join(KNOWN)} only"
                )
            if name not in out:
                out.append(name)
    if not out:
        raise InputError(f"--driver: name at least one driver ({', '.join(KNOWN)})")
    return tuple(out)


def taint_rule_name(driver: str) -> str:
    """The DeviceTaintRule that keeps kube-scheduler's allocator off the driver's devices:
    `drasat-allocator` for drasat's own (its name since the rule exists), else
    `drasat-allocator-<driver>`."""
    return "drasat-allocator" if driver == DRIVER_NAME else f"drasat-allocator-{driver}"


def driver_of(found: slices.NodeDevices) -> str:
    """The driver whose slices a node's devices were read from (drasat's when none is read)."""
    if found.read is None:
        return DRIVER_NAME
    return next((d.driver for d in found.read.devices.values()), DRIVER_NAME)


class Published:
    """`slices.Reader` for each driver, one answer per node. A node whose slices of two drivers
    are both complete is not used, with the reason: drasat would count its GPUs twice."""

    def __init__(self, drivers: Iterable[str] = DEFAULT) -> None:
        self.drivers = tuple(drivers)
        self._readers = [slices.Reader(driver) for driver in self.drivers]

    def read(self, found: Iterable[Obj]) -> dict[str, slices.NodeDevices]:
        items = list(found) if len(self._readers) > 1 else found
        out: dict[str, slices.NodeDevices] = {}
        seen: dict[str, list[str]] = {}
        for reader in self._readers:
            for node, devices in reader.read(items).items():
                seen.setdefault(node, []).append(reader.driver)
                if node not in out:
                    out[node] = devices
                    continue
                out[node] = slices.NodeDevices(
                    node,
                    None,
                    f"it publishes devices of {' and '.join(seen[node])}: one GPU driver per "
                    "node (its GPUs would count twice)",
                )
        return out


def by_driver(published: Mapping[str, slices.NodeDevices]) -> dict[str, str]:
    """node -> the driver of its devices, for nodes whose devices can be used."""
    return {n: driver_of(f) for n, f in published.items() if f.read is not None}
