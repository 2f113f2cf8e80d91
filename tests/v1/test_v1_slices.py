"""drasat.v1.slices as the controller reads the API server's slices (`read_node`, `Reader`):
whole pools of the newest generation only, taints as health, a bad slice named, and each node read
again only when its slices change. The what-if's use of the same reader is tested in
tests/whatif/test_whatif_v1_cluster.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from drasat.api.devicemodel import pool
from drasat.api.devicemodel.nodegpus import GpuHealth, Inventory
from drasat.api.groups import DRIVER_NAME
from drasat.api.inputerrors import InputError
from drasat.api.nas import GpuInfo, Health
from drasat.solver import Problem, solve
from drasat.v1 import slices

Obj = dict[str, Any]


def gpu(minor: int) -> GpuInfo:
    return GpuInfo(
        index=minor,
        uuid=f"GPU-{minor}",
        minor=minor,
        memoryBytes=16 * 2**30,
        productName="Tesla T4",
    )


def published(node: str, gpus: int, *, generation: int = 1, **kw: Any) -> list[Obj]:
    """The slices drasat's plugin publishes for `gpus` T4s, each with a resourceVersion."""
    wanted = Inventory(gpus=[gpu(i) for i in range(gpus)], **kw)
    out = pool.node_slices(node, wanted, generation=generation)
    for n, body in enumerate(out):
        body["apiVersion"], body["kind"] = "resource.k8s.io/v1", "ResourceSlice"
        body["metadata"]["resourceVersion"] = f"{generation}{n}"
    return out


def test_a_node_reads_as_its_plugin_published_it() -> None:
    found = slices.read_node("n1", published("n1", 2, shares=False))
    assert found.problem == "" and found.read is not None
    assert [g.uuid for g in found.read.nas.spec.gpus()] == ["GPU-0", "GPU-1"]
    whole = found.read.devices["gpu-0"]
    assert (whole.driver, whole.pool, whole.kind, whole.gpu_uuid) == (
        DRIVER_NAME,
        "n1",
        "gpu",
        "GPU-0",
    )
    assert not whole.device.get("allowMultipleAllocations")
    assert "cpu-fallback" in found.read.devices


def test_only_the_newest_generation_counts() -> None:
    old = published("n1", 2, generation=1)
    new = published("n1", 1, generation=2)
    for body in new:
        body["metadata"]["name"] += "-new"
    found = slices.read_node("n1", old + new)
    assert found.read is not None
    assert [g.uuid for g in found.read.nas.spec.gpus()] == ["GPU-0"]


def test_an_incomplete_pool_is_not_used_and_says_so() -> None:
    (body,) = published("n1", 1)
    body["spec"]["pool"]["resourceSliceCount"] = 2
    found = slices.read_node("n1", [body])
    assert found.read is None
    assert "has 1 of its 2 slices" in found.problem


def test_a_blocking_taint_makes_the_gpu_unhealthy_but_drasats_allocator_taint_does_not() -> None:
    (body,) = published("n1", 3, health={"GPU-0": GpuHealth.from_xid(48)})
    devices = {d["name"]: d for d in body["spec"]["devices"]}
    devices["gpu-1"]["taints"] = [{"key": slices.OWN_ALLOCATOR_TAINT, "effect": "NoSchedule"}]
    devices["gpu-2"]["taints"] = [{"key": "example.com/note", "effect": "None"}]
    found = slices.read_node("n1", [body])
    assert found.read is not None
    health = {g.uuid: g.health for g in found.read.nas.spec.gpus()}
    assert health == {
        "GPU-0": Health.Unhealthy,
        "GPU-1": Health.Healthy,
        "GPU-2": Health.Healthy,
    }


def test_a_slice_that_does_not_validate_names_itself_and_never_raises() -> None:
    (body,) = published("n1", 1)
    body["spec"]["devices"][0]["attributes"]["uuid"] = {"string": "x", "int": 1}
    found = slices.read_node("n1", [body])
    assert found.read is None
    assert found.problem.startswith(f"ResourceSlice {body['metadata']['name']}: ")
    assert "exactly one of int, bool, string or version" in found.problem
    (body,) = published("n1", 1)
    del body["spec"]["devices"][0]["attributes"]["uuid"]
    found = slices.read_node("n1", [body])
    assert found.read is None and "attributes.uuid: missing" in found.problem


def test_the_reader_reads_a_node_again_only_when_its_slices_change() -> None:
    reader = slices.Reader()
    one, two = published("n1", 1), published("n2", 1)
    first = reader.read(one + two)
    assert set(first) == {"n1", "n2"}
    again = reader.read(copy.deepcopy(one + two))
    assert again["n1"] is first["n1"] and again["n2"] is first["n2"]
    changed = copy.deepcopy(one)
    changed[0]["metadata"]["resourceVersion"] = "99"
    changed[0]["spec"]["devices"][0]["taints"] = [{"key": "k", "effect": "NoExecute"}]
    later = reader.read(changed + two)
    assert later["n2"] is first["n2"] and later["n1"] is not first["n1"]
    assert later["n1"].read is not None
    assert later["n1"].read.nas.spec.gpus()[0].health is Health.Unhealthy
    assert set(reader.read(two)) == {"n2"}


def test_other_drivers_and_slices_without_a_node_are_not_read() -> None:
    (body,) = published("n1", 1)
    other = copy.deepcopy(body)
    other["spec"]["driver"] = "gpu.nvidia.com"
    shared = copy.deepcopy(body)
    del shared["spec"]["nodeName"]
    shared["spec"]["allNodes"] = True
    assert slices.Reader().read([other, shared]) == {}


def test_reading_slices_builds_the_solvers_devices_and_no_nas() -> None:
    # The controller's first cycle reads every node: each becomes the solver's devices, and the
    # NAS-shaped record (what the what-if shows) is built only when asked for.
    found = slices.read_node("n1", published("n1", 2, health={"GPU-1": GpuHealth.from_xid(48)}))
    assert found.read is not None
    assert [(g.uuid, g.healthy) for g in found.read.state.devices.gpus] == [
        ("GPU-0", True),
        ("GPU-1", False),
    ]
    assert "nas" not in vars(found.read)
    assert [g.health for g in found.read.nas.spec.gpus()] == [Health.Healthy, Health.Unhealthy]


def test_one_gpu_on_two_nodes_is_named_by_the_slices_it_was_read_from() -> None:
    first = slices.read_node("n1", published("n1", 1))
    second = slices.read_node("n2", published("n2", 1))  # the same uuid, GPU-0
    assert first.read is not None and second.read is not None
    nodes = (first.read.state, second.read.state)
    with pytest.raises(InputError) as raised:
        solve(Problem(nodes=nodes, pods=()))
    assert str(raised.value) == (
        "node n2: gpu.uuid GPU-0 (its ResourceSlices of gpu.drasat.io) is also on node n1 "
        "(its ResourceSlices of gpu.drasat.io)"
    )


@pytest.mark.parametrize("served", [False, True])
def test_a_mig_device_published_in_two_pools_makes_the_node_unusable_and_never_raises(
    served: bool,
) -> None:
    """Two pools of a node publishing one MIG device (same parent, profile and placement) are
    one device twice: the node is left out, naming both, rather than the reading raising (its
    promise: a node it cannot use comes back with the reason)."""
    import pathlib

    import yaml

    example = pathlib.Path(slices.__file__).parents[1] / "whatif" / "default-slices.yaml"
    objs = [
        d
        for d in yaml.safe_load_all(example.read_text())
        if d and d.get("kind") == "ResourceSlice" and d["spec"].get("nodeName") == "a100-node"
    ]
    source = next(o for o in objs if o["spec"].get("devices"))
    twin = copy.deepcopy(source)
    twin["metadata"]["name"] = "twin"
    twin["spec"]["pool"] = {"name": "elsewhere", "generation": 1, "resourceSliceCount": 1}
    twin["spec"].pop("sharedCounters", None)
    mig = "gpu-0-mig-7g40gb-0-0"
    twin["spec"]["devices"] = [d for d in source["spec"]["devices"] if d["name"] == mig]
    read = slices.read_node("a100-node", [*objs, twin], served=served)
    assert read.read is None
    assert f"elsewhere/{mig}" in read.problem and f"a100-node/{mig}" in read.problem
