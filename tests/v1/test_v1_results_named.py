"""The v1 result names the published device the solver chose: the one the node's model carries
for the GPU or MIG placement it took, never another device found again by the GPU's UUID."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import nvidiaslices
import pytest
import yaml
from v1kit import CLASSES, MIG, claim, exactly, node, pod

from drasat import v1
from drasat.api.groups import DRIVER_NAME
from drasat.solver import Problem, Solution, SolveParams
from drasat.solver import solve as default_solve
from drasat.v1 import publisheddevices, slices

DEFAULT_SLICES = pathlib.Path(slices.__file__).parents[1] / "whatif" / "default-slices.yaml"


def _results(outcome: v1.Outcome) -> list[dict[str, Any]]:
    (found,) = outcome.allocations.values()
    return list(found.allocation["devices"]["results"])


def _with_copies_elsewhere(base: v1.Node, kind: str) -> v1.Node:
    """The node whose model names its own devices, publishing after them a copy of each
    device of `kind` in pool `elsewhere` (the same GPU UUID, MIG parent and placement)."""
    devices = publisheddevices.identified(base.state.devices, base.devices)
    copies = tuple(
        dataclasses.replace(d, pool="elsewhere", device={**d.device, "name": f"{d.name}-copy"})
        for d in base.devices
        if d.kind == kind
    )
    return v1.Node(dataclasses.replace(base.state, devices=devices), (*base.devices, *copies))


def test_a_whole_gpus_result_is_the_device_the_model_names_for_it() -> None:
    both = _with_copies_elsewhere(node("n", "T4", 1), publisheddevices.GPU)
    out = v1.allocate([both], [pod("p", claim("c", {"g": exactly()}))], CLASSES)
    assert out.placed == {"default/p": "n"}
    assert [(r["pool"], r["device"]) for r in _results(out)] == [("n", "gpu-0")]


def test_a_mig_devices_result_is_the_device_the_model_names_for_its_placement() -> None:
    both = _with_copies_elsewhere(node("m", "A100-40GB", 1, mig=True), publisheddevices.MIG)
    out = v1.allocate([both], [pod("p", claim("c", {"m": exactly(MIG)}))], CLASSES)
    assert out.placed == {"default/p": "m"}
    (result,) = _results(out)
    assert result["pool"] == "m" and not result["device"].endswith("-copy")


def test_the_solvers_answer_carries_the_published_devices_it_took() -> None:
    base = node("n", "T4", 2)
    model = {g.uuid: g.device for g in base.state.devices.gpus}
    answers: list[Solution] = []

    def solve(problem: Problem, params: SolveParams) -> Solution:
        answers.append(default_solve(problem, params))
        return answers[-1]

    out = v1.allocate([base], [pod("p", claim("c", {"g": exactly(count=2)}))], CLASSES, solve=solve)
    ((entry,),) = [list(p.allocations.values()) for a in answers for p in a.placements]
    assert all(d is model[u] for u, d in zip(entry.gpus, entry.devices, strict=True))
    written = [(r["pool"], r["device"]) for r in _results(out)]
    assert written == [(d.pool, d.name) for d in entry.devices]


def _slices_read(node_name: str, found: list[dict[str, Any]], driver: str) -> v1.Node:
    read = slices.read_node(node_name, found, driver=driver).read
    assert read is not None
    return v1.Node(read.state, tuple(read.devices.values()))


def _assert_model_names_each_published_device(read: v1.Node) -> None:
    model = {g.uuid: g for g in read.state.devices.gpus}
    published = [d for d in read.devices if d.kind in (publisheddevices.GPU, publisheddevices.MIG)]
    assert published
    for device in published:
        gpu = model[str(device.gpu_uuid)]
        if device.kind == publisheddevices.GPU:
            assert gpu.device is device
        else:
            assert gpu.mig_devices[(str(device.profile), device.start or 0)] is device
    named = sum(g.device is not None for g in model.values())
    named += sum(len(g.mig_devices) for g in model.values())
    assert named == len(published)


@pytest.mark.parametrize("kind", nvidiaslices.KINDS)
def test_nvidias_slices_give_each_gpu_and_mig_placement_its_published_device(kind: str) -> None:
    _, found = nvidiaslices.node(kind, "n")
    _assert_model_names_each_published_device(_slices_read("n", found, nvidiaslices.DRIVER))


def test_drasats_slices_give_each_gpu_and_mig_placement_its_published_device() -> None:
    found = list(yaml.safe_load_all(DEFAULT_SLICES.read_text()))
    here = [s for s in found if s and (s.get("spec") or {}).get("nodeName") == "a100-node"]
    read = _slices_read("a100-node", here, DRIVER_NAME)
    assert any(g.mig_devices for g in read.state.devices.gpus)
    _assert_model_names_each_published_device(read)


def test_a_mig_device_on_nvidias_static_mig_gpu_is_written_as_nvidia_names_it() -> None:
    _, found = nvidiaslices.node("nv-a100-static", "n")
    read = _slices_read("n", found, nvidiaslices.DRIVER)
    classes = {c["metadata"]["name"]: c for c in nvidiaslices.device_classes()}
    mig_class = next(n for n in classes if "mig" in n)
    out = v1.allocate([read], [pod("p", claim("c", {"m": exactly(mig_class)}))], classes)
    assert out.placed == {"default/p": "n"}
    (result,) = _results(out)
    assert result["device"] in nvidiaslices.devices(found)
    assert result["driver"] == nvidiaslices.DRIVER
