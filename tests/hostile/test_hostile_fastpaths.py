"""Hostile review of the fast paths: slices read as served (`read_node(served=True)`) against
the validated reading, on slices the real API server accepts."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.v1.test_v1_slices_served import both, fleet

Obj = dict[str, Any]


def _drasat_node() -> tuple[str, list[Obj]]:
    key = next(k for k in fleet() if k.endswith("/drasat"))
    return key.split("/")[0], copy.deepcopy(fleet()[key])


def test_unmodelled_device_with_big_quantity_same_answer() -> None:
    node, bodies = _drasat_node()
    bodies[0]["spec"]["devices"].append(
        {
            "name": "nic-0",
            "attributes": {"type": {"string": "nic"}},
            "capacity": {"bandwidth": {"value": "10E"}},
        }
    )
    served, validated = both(bodies, node)
    assert (served.read is None) == (validated.read is None), (served.problem, validated.problem)
    assert served.read is not None, served.problem


def test_extra_capacity_over_64_bits_keeps_node_usable() -> None:
    node, bodies = _drasat_node()
    bodies[0]["spec"]["devices"][0]["capacity"]["vendorExtra"] = {"value": "10E"}
    served, validated = both(bodies, node)
    assert served.read is not None, served.problem
    assert validated.read is not None, validated.problem
    assert served == validated
    # Kept as published, for a selector to read: only memory is read as an integer.
    device = validated.read.devices["gpu-0"].device
    assert device["capacity"]["vendorExtra"] == {"value": "10E"}
    assert device["capacity"]["memory"]["value"].isdigit()


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (
            lambda bodies: _first(bodies, "gpu")["capacity"].update(memory={"value": "10E"}),
            "spec.devices[0] (gpu-0): capacity.memory: quantity '10E' is over",
        ),
        (
            lambda bodies: _first(bodies, "mig")["capacity"].update(memory={"value": "10E"}),
            "capacity.memory: quantity '10E' is over",
        ),
    ],
    ids=["gpu-memory", "mig-memory"],
)
def test_memory_over_64_bits_refused_naming_slice_and_field(change: Any, path: str) -> None:
    """A capacity drasat reads as an integer must fit 64 bits: refused on both readings, the
    message naming the slice and the field."""
    kind = "gpu" if "gpu-0" in path else "mig"
    node, bodies = next(
        (key.split("/")[0], copy.deepcopy(found))
        for key, found in fleet().items()
        if key.endswith("/drasat") and _devices(found, kind)
    )
    change(bodies)
    for reading in both(bodies, node):
        assert reading.read is None
        assert reading.problem.startswith("ResourceSlice "), reading.problem
        assert path in reading.problem, reading.problem


def _devices(bodies: list[Obj], kind: str) -> list[Obj]:
    return [
        d
        for b in bodies
        for d in b["spec"].get("devices") or []
        if d["attributes"]["type"]["string"] == kind
    ]


def _first(bodies: list[Obj], kind: str) -> Obj:
    return _devices(bodies, kind)[0]
