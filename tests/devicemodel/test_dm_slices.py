"""The device model on small instances: exact devices, counters, consumption, shares, taints and
the split of a pool into slices within the API's limits."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml

from drasat.api import resourceslices
from drasat.api.devicemodel import classes, devices, names, partitions, pool, shares
from drasat.api.devicemodel.nodegpus import GpuHealth, Inventory, profiles_by_gpu
from drasat.api.nas import GpuInfo, Health, MigInfo, MigPlacement

GiB = 2**30


def gpu(minor: int, *, mig: bool = False, product: str = "NVIDIA A100-SXM4-40GB") -> GpuInfo:
    return GpuInfo(
        index=minor,
        minor=minor,
        uuid=f"GPU-{minor}",
        migEnabled=mig,
        memoryBytes=40 * GiB,
        productName=product,
        architecture="Ampere",
        cudaComputeCapability="8.0",
        driverVersion="550.54.15",
        cudaDriverVersion="12.4",
        pciBusID=f"0000:{minor:02X}:00.0",
    )


def mig(profile: str, pid: int, size: int, starts: list[int], memory_gib: int, cs: int) -> MigInfo:
    return MigInfo(
        profile=profile,
        parentProductName="NVIDIA A100-SXM4-40GB",
        placements=[MigPlacement(start=s, size=size) for s in starts],
        giProfileId=pid,
        memoryBytes=memory_gib * GiB,
        computeSlices=cs,
    )


A100_PROFILES = [
    mig("1g.5gb", 19, 1, [0, 1, 2, 3, 4, 5, 6], 5, 1),
    mig("2g.10gb", 14, 2, [0, 2, 4], 10, 2),
    mig("3g.20gb", 9, 4, [0, 4], 20, 3),
    mig("7g.40gb", 0, 8, [0], 40, 7),
]


def devices_of(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for s in slices for d in s["spec"].get("devices", [])]


def by_name(slices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in devices_of(slices)}


def test_a_mig_gpu_counter_set_consumption_and_placements() -> None:
    inv = Inventory(gpus=[gpu(0, mig=True)], mig_profiles={"GPU-0": A100_PROFILES})
    slices = pool.node_slices("n", inv)
    # One slice of counters, one of devices (a slice holds either, since 1.35).
    assert [sorted(s["spec"].keys() - {"driver", "nodeName", "pool"}) for s in slices] == [
        ["sharedCounters"],
        ["devices"],
    ]
    ((counter_set,),) = [s["spec"]["sharedCounters"] for s in slices[:1]]
    assert counter_set["name"] == "gpu-0-counter-set"
    assert counter_set["counters"] == {
        "memory": {"value": str(40 * GiB)},
        "compute-slices": {"value": "7"},
        **{f"memory-slice-{i}": {"value": "1"} for i in range(8)},
    }
    found = by_name(slices)
    assert list(found) == [
        "gpu-0",
        "gpu-0-mig-7g40gb-0-0",
        "gpu-0-mig-3g20gb-9-0",
        "gpu-0-mig-3g20gb-9-4",
        "gpu-0-mig-2g10gb-14-0",
        "gpu-0-mig-2g10gb-14-2",
        "gpu-0-mig-2g10gb-14-4",
        *[f"gpu-0-mig-1g5gb-19-{s}" for s in range(7)],
        "cpu-fallback",
    ]
    # The whole GPU consumes all of its set and is not shareable in MIG mode.
    assert found["gpu-0"]["consumesCounters"] == [
        {"counterSet": "gpu-0-counter-set", "counters": counter_set["counters"]}
    ]
    assert "allowMultipleAllocations" not in found["gpu-0"]
    # A placement consumes its profile's capacities and exactly its slices.
    assert found["gpu-0-mig-2g10gb-14-2"]["consumesCounters"] == [
        {
            "counterSet": "gpu-0-counter-set",
            "counters": {
                "memory": {"value": str(10 * GiB)},
                "compute-slices": {"value": "2"},
                "memory-slice-2": {"value": "1"},
                "memory-slice-3": {"value": "1"},
            },
        }
    ]
    attributes = found["gpu-0-mig-3g20gb-9-4"]["attributes"]
    assert attributes["type"] == {"string": "mig"}
    assert attributes["profile"] == {"string": "3g.20gb"}
    assert attributes["parentUUID"] == {"string": "GPU-0"}
    assert attributes["parentMinor"] == {"int": 0}
    assert attributes["productName"] == {"string": "NVIDIA A100-SXM4-40GB"}
    assert attributes["cudaComputeCapability"] == {"version": "8.0.0"}
    assert (attributes["placementStart"], attributes["placementSize"]) == ({"int": 4}, {"int": 4})
    assert found["gpu-0-mig-3g20gb-9-4"]["capacity"] == {
        "memory": {"value": str(20 * GiB)},
        "computeSlices": {"value": "3"},
    }


def test_a_mig_gpus_product_attributes_are_read_once_for_all_its_placements(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An A100 publishes 13 placements: the product's attributes (three version strings parsed
    # each) were built for each of them, most of the device model of a large compact what-if.
    calls = 0
    real = devices.product_attributes

    def counted(info: GpuInfo) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return real(info)

    monkeypatch.setattr(devices, "product_attributes", counted)
    found = devices.mig_devices(gpu(0, mig=True), A100_PROFILES)
    assert len(found) == 13 and calls == 1
    # Each device still has attribute objects of its own.
    first, second = found[0]["attributes"], found[1]["attributes"]
    assert first["productName"] == second["productName"]
    assert first["productName"] is not second["productName"]
    # A GPU without MIG profiles (a T4) publishes none and reads nothing.
    assert devices.mig_devices(gpu(1), []) == [] and calls == 1


def test_every_name_parses_back_to_what_it_was_built_from() -> None:
    inv = Inventory(gpus=[gpu(0, mig=True), gpu(1)], mig_profiles={"GPU-0": A100_PROFILES})
    for device in devices_of(pool.node_slices("n", inv)):
        parsed = names.parse(device["name"])
        attributes = device["attributes"]
        if isinstance(parsed, names.MigName):
            assert parsed.minor == attributes["parentMinor"]["int"]
            assert parsed.start == attributes["placementStart"]["int"]
        elif isinstance(parsed, names.GpuName):
            assert parsed.minor == attributes["minor"]["int"]
        else:
            assert parsed == names.FallbackName()


def test_memory_counter_never_forbids_a_layout_the_slices_allow() -> None:
    """H200: 3g.71gb twice is 142 GiB of a 141 GiB GPU; the counter must still allow it."""
    h200 = gpu(0, mig=True).model_copy(update={"memoryBytes": 141 * GiB})
    profiles = [mig("3g.71gb", 9, 4, [0, 4], 71, 3), mig("7g.141gb", 0, 8, [0], 141, 7)]
    assert partitions.counters(h200, profiles)["memory"] == 142 * GiB
    # Weighted interval scheduling: the best mix, not the best single profile.
    mixed = [mig("4g.71gb", 5, 4, [0], 71, 4), mig("3g.71gb", 9, 4, [0, 4], 71, 3)]
    assert partitions.most_used(mixed, lambda m: m.computeSlices or 0) == 7


def test_a_shareable_gpu_and_what_an_exclusive_gpu_looks_like() -> None:
    odd = gpu(0).model_copy(update={"memoryBytes": 15 * GiB + 123})  # not whole MiB
    published = devices_of(pool.node_slices("n", Inventory([odd], shares=True)))
    (shared,) = [d for d in published if d["name"] == "gpu-0"]
    assert shared["allowMultipleAllocations"] is True
    assert shared["capacity"] == {
        "memory": {
            "value": str(15 * GiB),
            "requestPolicy": {
                "default": str(15 * GiB),
                "validRange": {"min": str(2**20), "max": str(15 * GiB), "step": str(2**20)},
            },
        },
        "compute": {
            "value": "100",
            "requestPolicy": {
                "default": "0",
                "validRange": {"min": "0", "max": "100", "step": "1"},
            },
        },
    }
    exclusive = resourceslices.gpu_device(odd)
    assert "allowMultipleAllocations" not in exclusive
    assert exclusive["capacity"] == shares.exclusive_capacities(odd)


def test_unhealthy_gpus_taint_the_gpu_and_its_mig_devices() -> None:
    inv = Inventory(
        gpus=[gpu(0, mig=True), gpu(1), gpu(2).model_copy(update={"health": Health.Unhealthy})],
        mig_profiles={"GPU-0": A100_PROFILES[-1:]},
        health={"GPU-0": GpuHealth.from_xid(48), "GPU-1": GpuHealth.from_xid(79)},
    )
    found = by_name(pool.node_slices("n", inv))
    xid = [{"key": "gpu.drasat.io/xid", "value": "48", "effect": "NoSchedule"}]
    assert found["gpu-0"]["taints"] == xid
    assert found["gpu-0-mig-7g40gb-0-0"]["taints"] == xid
    assert found["gpu-1"]["taints"] == [{"key": "gpu.drasat.io/gpu-lost", "effect": "NoExecute"}]
    # Unhealthy in the NAS, cause unknown: no schedule, no value.
    assert found["gpu-2"]["taints"] == [{"key": "gpu.drasat.io/xid", "effect": "NoSchedule"}]
    assert "taints" not in found["cpu-fallback"]


def test_a_large_pool_is_split_within_the_api_limits_consistently() -> None:
    gpus = [gpu(m, mig=True) for m in range(10)]
    inv = Inventory(gpus=gpus, mig_profiles={g.uuid: A100_PROFILES for g in gpus})
    slices = pool.node_slices("node-a", inv, generation=7, node_uid="u-1")
    counter_slices = [s for s in slices if "sharedCounters" in s["spec"]]
    device_slices = [s for s in slices if "devices" in s["spec"]]
    # 10 counter sets: 8 + 2; 10 x 14 devices + fallback = 141: 64 + 64 + 13.
    assert [len(s["spec"]["sharedCounters"]) for s in counter_slices] == [8, 2]
    assert [len(s["spec"]["devices"]) for s in device_slices] == [64, 64, 13]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {5}
    assert {s["spec"]["pool"]["generation"] for s in slices} == {7}
    assert [s["metadata"]["name"] for s in slices] == [
        f"node-a-gpu.drasat.io-{i}" for i in range(5)
    ]
    assert all(s["metadata"]["ownerReferences"][0]["uid"] == "u-1" for s in slices)
    for device in devices_of(slices):
        assert len(device.get("consumesCounters", [])) <= 2
        assert len(device["attributes"]) + len(device.get("capacity", {})) <= 32


def test_plain_gpus_fill_128_to_a_slice_and_an_empty_pool_has_one_slice() -> None:
    inv = Inventory(gpus=[gpu(m) for m in range(130)], fallback=False)
    assert [len(s["spec"]["devices"]) for s in pool.node_slices("n", inv)] == [128, 2]
    (empty,) = pool.node_slices("n", Inventory(gpus=[], fallback=False))
    assert empty["spec"]["devices"] == [] and empty["spec"]["pool"]["resourceSliceCount"] == 1


def test_nas_shaped_input_gives_each_mig_gpu_its_products_profiles() -> None:
    t4 = gpu(2, product="Tesla T4")
    mapped = profiles_by_gpu([gpu(0, mig=True), gpu(1), t4], A100_PROFILES)
    assert list(mapped) == ["GPU-0"] and mapped["GPU-0"] == A100_PROFILES


def test_device_classes_select_by_driver_and_type() -> None:
    shipped = {c["metadata"]["name"]: c for c in classes.device_classes()}
    assert list(shipped) == ["gpu.drasat.io", "mig.drasat.io", "cpu-fallback.drasat.io"]
    (selector,) = shipped["mig.drasat.io"]["spec"]["selectors"]
    assert selector["cel"]["expression"] == (
        'device.driver == "gpu.drasat.io" && device.attributes["gpu.drasat.io"].type == "mig"'
    )
    assert resourceslices.gpu_device_class() == shipped["gpu.drasat.io"]


def test_the_device_classes_example_is_what_drasat_ships() -> None:
    path = (
        pathlib.Path(__file__).parents[2] / "deploy/examples/v1-device-classes/device-classes.yaml"
    )
    assert list(yaml.safe_load_all(path.read_text())) == classes.device_classes()


def test_a_profile_nvml_caps_below_its_placements_gets_an_instances_counter() -> None:
    """`1g.5gb+me`: seven placements, one instance (the GPU has one set of media engines)."""
    me = mig("1g.5gb+me", 20, 1, [0, 1, 2, 3, 4, 5, 6], 5, 1)
    profiles = [A100_PROFILES[0], me]
    inv = Inventory(
        gpus=[gpu(0, mig=True)],
        mig_profiles={"GPU-0": profiles},
        instance_limits={"GPU-0": {19: 7, 20: 1}},  # 1g.5gb's 7 bind nothing
    )
    slices = pool.node_slices("n", inv)
    (counter_set,) = slices[0]["spec"]["sharedCounters"]
    assert counter_set["counters"]["profile-20-instances"] == {"value": "1"}
    assert "profile-19-instances" not in counter_set["counters"]
    found = by_name(slices)
    (used,) = found["gpu-0-mig-1g5gbme-20-3"]["consumesCounters"]
    assert used["counters"]["profile-20-instances"] == {"value": "1"}
    (plain,) = found["gpu-0-mig-1g5gb-19-3"]["consumesCounters"]
    assert "profile-20-instances" not in plain["counters"]
    (whole,) = found["gpu-0"]["consumesCounters"]
    assert whole["counters"] == counter_set["counters"]


def test_slice_names_stay_dns_subdomains_for_the_longest_node_names() -> None:
    node = "n" * 120 + "." + "x" * 132  # 253 characters, a valid node name
    inv = Inventory(gpus=[gpu(m, mig=True) for m in range(2)], mig_profiles={})
    names_ = [s["metadata"]["name"] for s in pool.node_slices(node, inv)]
    assert all(len(n) <= 253 and not n.startswith("-") for n in names_)
    assert len(set(names_)) == len(names_)
    assert names_[0].endswith("-gpu.drasat.io-0")
