"""Small v1 inputs for the translation tests: nodes as the node plugin would publish them,
drasat's classes, and claims written as users write them."""

from __future__ import annotations

import dataclasses
from typing import Any

from checker import make_node

from drasat import v1
from drasat.api import catalog
from drasat.api.devicemodel import classes
from drasat.v1 import publisheddevices

Obj = dict[str, Any]

CLASSES = {c["metadata"]["name"]: c for c in classes.device_classes()}
GPU, MIG, FALLBACK = classes.GPU_CLASS, classes.MIG_CLASS, classes.FALLBACK_CLASS


def node(name: str, product: str, count: int = 1, *, mig: bool = False, **options: Any) -> v1.Node:
    """A node whose NAS carries what the node plugin reads from NVML (MIG profile ids too)."""
    state = make_node(name, product, count, mig=mig, **options)
    ids = (
        {p.name: p.gi_profile_id for p in catalog.find_product(product).mig_profiles} if mig else {}
    )
    profiles = tuple(
        dataclasses.replace(m, giProfileId=ids[m.profile]) for m in state.devices.mig_profiles
    )
    devices = dataclasses.replace(state.devices, mig_profiles=profiles)
    state = dataclasses.replace(state, devices=devices)
    return v1.Node(state, tuple(publisheddevices.drasat_devices(name, devices)))


def exactly(device_class: str = GPU, *cel: str, **fields: Any) -> Obj:
    spec: Obj = {"deviceClassName": device_class, **fields}
    if cel:
        spec["selectors"] = [{"cel": {"expression": e}} for e in cel]
    return spec


def claim(
    name: str,
    requests: dict[str, Obj],
    *,
    constraints: list[Obj] | None = None,
    config: list[Obj] | None = None,
) -> Obj:
    """A claim; each request is `exactly` unless its value holds `firstAvailable`."""
    written = []
    for request, spec in requests.items():
        if "firstAvailable" in spec:
            written.append({"name": request, **spec})
        else:
            written.append({"name": request, "exactly": spec})
    devices_spec: Obj = {"requests": written}
    if constraints:
        devices_spec["constraints"] = constraints
    if config:
        devices_spec["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": devices_spec},
    }


def pod(name: str, *claims: Obj, **fields: Any) -> v1.PodInput:
    return v1.PodInput(f"default/{name}", "default", tuple(claims), **fields)


def attr(name: str) -> str:
    return f'device.attributes["gpu.drasat.io"].{name}'
