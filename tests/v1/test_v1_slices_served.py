"""drasat.v1.slices.read_node with `served=True` (the controller's `Reader`): slices as the API
server serves them are read without validating them again, and the answer is the validated
reading's on every slice the server accepts; a slice the server would refuse never makes the
reading raise."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import kube_alloc, nvidia_alloc
from drasat.v1 import slices
from drasat.v1.slicekinds import ResourceSlice

Obj = dict[str, Any]
GiB = 2**30


@functools.cache
def fleet() -> dict[str, list[Obj]]:
    """One MIG node (A100-40GB, every placement with its counters) and one node of shareable
    H100s, in drasat's format and in NVIDIA's."""
    out = {}
    for node in kube_alloc.plan_fleet("s", 2, 0.5, 0):
        for form, bodies in (
            ("drasat", kube_alloc.node_slices(node, "uid")),
            ("nvidia", nvidia_alloc.nvidia_slices(node, "uid")),
        ):
            for i, body in enumerate(bodies):
                body["metadata"] = {**body["metadata"], "resourceVersion": str(i + 1)}
            out[f"{node.name}/{form}"] = bodies
    return out


def both(
    bodies: list[Obj], node: str, driver: str = slices.DRIVER_NAME
) -> tuple[slices.NodeDevices, slices.NodeDevices]:
    served = slices.read_node(node, bodies, driver=driver, served=True)
    validated = slices.read_node(node, bodies, driver=driver, served=False)
    return served, validated


def _devices(bodies: list[Obj]) -> list[Obj]:
    return [d for b in bodies for d in b["spec"].get("devices") or []]


# Changes the API server accepts: optional fields left out, taints, qualified attribute names,
# quantities in other units, pools incomplete or of an older generation, other drivers' slices.


def drop_field(draw: st.DrawFn, bodies: list[Obj]) -> None:
    if not _devices(bodies):
        return
    device = draw(st.sampled_from(_devices(bodies)))
    optional = ["taints", "consumesCounters", "capacity", "allowMultipleAllocations"]
    optional += [f"attributes.{k}" for k in device.get("attributes") or {}]
    optional += [f"capacity.{k}" for k in device.get("capacity") or {}]
    what = draw(st.sampled_from(optional))
    if what.startswith(("attributes.", "capacity.")):
        part, _, key = what.partition(".")
        device[part].pop(key, None)
    else:
        device.pop(what, None)


def taint(draw: st.DrawFn, bodies: list[Obj]) -> None:
    if not _devices(bodies):
        return
    device = draw(st.sampled_from(_devices(bodies)))
    effect = draw(st.sampled_from(["NoSchedule", "NoExecute", "None"]))
    key = draw(st.sampled_from([slices.OWN_ALLOCATOR_TAINT, "gpu.nvidia.com/xid"]))
    device.setdefault("taints", []).append({"key": key, "value": "48", "effect": effect})


def qualify(draw: st.DrawFn, bodies: list[Obj]) -> None:
    if not _devices(bodies):
        return
    device = draw(st.sampled_from(_devices(bodies)))
    attributes = device.get("attributes") or {}
    if attributes:
        name = draw(st.sampled_from(sorted(attributes)))
        if "/" not in name:
            driver = bodies[0]["spec"]["driver"]
            attributes[f"{driver}/{name}"] = attributes.pop(name)


def in_gib(draw: st.DrawFn, bodies: list[Obj]) -> None:
    for device in _devices(bodies):
        for quantity in (device.get("capacity") or {}).values():
            value = int(quantity["value"]) if str(quantity["value"]).isdigit() else 0
            if value and value % GiB == 0 and draw(st.booleans()):
                quantity["value"] = f"{value // GiB}Gi"


def drop_slice(draw: st.DrawFn, bodies: list[Obj]) -> None:
    if len(bodies) > 1:
        bodies.pop(draw(st.integers(0, len(bodies) - 1)))


def older_generation(draw: st.DrawFn, bodies: list[Obj]) -> None:
    old = copy.deepcopy(bodies[draw(st.integers(0, len(bodies) - 1))])
    old["metadata"]["name"] += "-old"
    old["spec"]["pool"]["generation"] = 0
    bodies.append(old)


def other_driver(draw: st.DrawFn, bodies: list[Obj]) -> None:
    device = {"name": "nic-0", "attributes": {"type": {"string": "nic"}}}
    spec = dict(bodies[0]["spec"], driver="nic.example.com", devices=[device])
    spec.pop("sharedCounters", None)
    spec["pool"] = dict(spec["pool"], resourceSliceCount=1)
    bodies.append({**bodies[0], "metadata": {"name": "nic", "resourceVersion": "9"}, "spec": spec})


def no_whole_gpus(draw: st.DrawFn, bodies: list[Obj]) -> None:
    """Static MIG as NVIDIA's driver publishes it: MIG devices, their parents not whole."""
    for body in bodies:
        devices = body["spec"].get("devices") or []
        body["spec"]["devices"] = [
            d for d in devices if (d.get("attributes") or {}).get("type") != {"string": "gpu"}
        ]


CHANGES = [drop_field, taint, qualify, in_gib, drop_slice, older_generation, other_driver]


@st.composite
def served_slices(draw: st.DrawFn) -> list[Obj]:
    """One node's slices as served, with some of the changes above."""
    bodies = copy.deepcopy(fleet()[draw(st.sampled_from(sorted(fleet())))])
    if draw(st.booleans()) and bodies[0]["spec"]["driver"] == nvidia_alloc.NVIDIA:
        no_whole_gpus(draw, bodies)
    for change in draw(st.lists(st.sampled_from(CHANGES), max_size=4)):
        change(draw, bodies)
    return bodies


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(served_slices())
def test_served_slices_read_as_the_validated_reading_reads_them(bodies: list[Obj]) -> None:
    for body in bodies:
        ResourceSlice.model_validate(body)  # what the server accepts, the models accept
    spec = bodies[0]["spec"]
    served, validated = both(bodies, spec["nodeName"], spec["driver"])
    assert served == validated


def test_served_slices_are_not_validated_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = ResourceSlice.model_validate

    def spy(*args: Any, **kw: Any) -> ResourceSlice:
        calls.append(args)
        return real(*args, **kw)

    monkeypatch.setattr(ResourceSlice, "model_validate", spy)
    for bodies in fleet().values():
        served = slices.Reader(str(bodies[0]["spec"]["driver"])).read(bodies)
        assert all(d.read is not None for d in served.values())
    assert calls == []


def _refused(change: str) -> list[Obj]:
    """The MIG node's slices with something the API server refuses."""
    bodies = copy.deepcopy(fleet()["s-0001/drasat"])
    devices = bodies[1]["spec"]["devices"]
    if change == "no pool":
        del bodies[1]["spec"]["pool"]
    elif change == "pool count zero":
        bodies[1]["spec"]["pool"]["resourceSliceCount"] = 0
    elif change == "devices not a list":
        bodies[1]["spec"]["devices"] = {"gpu-0": devices[0]}
    elif change == "device without a name":
        del devices[0]["name"]
    elif change == "attribute not a mapping":
        devices[0]["attributes"]["type"] = "gpu"
    elif change == "quantity that does not parse":
        devices[1]["capacity"]["memory"] = {"value": "forty gigs"}
    elif change == "taint without an effect":
        devices[1]["taints"] = [{"key": "gpu.nvidia.com/xid"}]
    elif change == "counters not a mapping":
        devices[1]["consumesCounters"][0]["counters"] = ["memory"]
    return bodies


@pytest.mark.parametrize(
    "change",
    [
        "no pool",
        "pool count zero",
        "devices not a list",
        "device without a name",
        "attribute not a mapping",
        "quantity that does not parse",
        "taint without an effect",
        "counters not a mapping",
    ],
)
def test_a_slice_the_server_refuses_is_named_not_raised(change: str) -> None:
    served, validated = both(_refused(change), "s-0001")
    assert served.read is None and served.problem
    assert served == validated
