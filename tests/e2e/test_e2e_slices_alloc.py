"""The real kube-scheduler v1.37.2 allocating from drasat's ResourceSlices alone (no drasat
controller, no kubelet): MIG by profile in NVIDIA's `gpu-test4` shape, the API's counters forbid
every overlapping pair of MIG placements and a whole GPU beside them, shares by consumable
capacity, the cpu-fallback alternative. The experiments that fixed the semantics written in
docs/OBJECTS.md ("ResourceSlices (v1)") are here too."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubecluster import create_fake_node
from slicekit import (
    RESOURCE,
    GpuNode,
    Workload,
    attribute,
    delete_slice,
    device_classes,
    exactly,
    gpu_node,
    unique,
)

from drasat.api import catalog
from drasat.api.devicemodel import names

pytestmark = pytest.mark.timeout(600)

GPU = "gpu.drasat.io"
MIG = "mig.drasat.io"
FALLBACK = "cpu-fallback.drasat.io"


@pytest.fixture(scope="module")
def classes(kube_api: kubernetes.client.ApiClient) -> Iterator[None]:
    with device_classes(kube_api):
        yield


@pytest.fixture(scope="module")
def mig_node(kube_api: kubernetes.client.ApiClient, classes: None) -> Iterator[GpuNode]:
    """One A100-40GB in MIG mode: the whole GPU and 25 placements of 7 profiles."""
    with gpu_node(kube_api, "1xA100-40GB,mig=0") as node:
        yield node


@pytest.fixture
def work(kube_api: kubernetes.client.ApiClient, kube_namespace: str) -> Iterator[Workload]:
    workload = Workload(kube_api, kube_namespace)
    yield workload
    workload.close()


def placement(node: GpuNode, device: str) -> tuple[int, int] | None:
    """(start, size) of a MIG device; None for a whole GPU."""
    attributes = node.devices[device]["attributes"]
    if attributes["type"]["string"] != "mig":
        return None
    return attributes["placementStart"]["int"], attributes["placementSize"]["int"]


def overlap(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    """Two devices of one GPU that cannot be used together (a whole GPU overlaps everything)."""
    if a is None or b is None:
        return True
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def capped_together(node: GpuNode, a: str, b: str) -> bool:
    """Both consume the same `profile-<id>-instances` counter, which allows one instance."""
    (counter_set,) = [c for s in node.slices for c in s["spec"].get("sharedCounters", [])]

    def capped(device: str) -> set[str]:
        used = node.devices[device].get("consumesCounters", [])
        return {
            name
            for c in used
            for name in c["counters"]
            if name.endswith("-instances") and counter_set["counters"][name]["value"] == "1"
        }

    return bool(capped(a) & capped(b)) and "mig" in a and "mig" in b


def profile_request(name: str, profile: str) -> dict[str, Any]:
    return {"name": name, **exactly(MIG, f'{attribute("profile")} == "{profile}"')}


def by_name_request(node: GpuNode, name: str, device: str) -> dict[str, Any]:
    """A request that only `device` satisfies (by its attributes: CEL cannot see names)."""
    attributes = node.devices[device]["attributes"]
    if attributes["type"]["string"] == "gpu":
        return {
            "name": name,
            **exactly(GPU, f"{attribute('minor')} == {attributes['minor']['int']}"),
        }
    start = attributes["placementStart"]["int"]
    return {
        "name": name,
        **exactly(
            MIG,
            f'{attribute("profile")} == "{attributes["profile"]["string"]}"',
            f"{attribute('placementStart')} == {start}",
        ),
    }


def test_gpu_test4_four_mig_devices_of_one_parent_never_overlap(
    mig_node: GpuNode, work: Workload
) -> None:
    """NVIDIA's gpu-test4 shape: four MIG devices by profile, matchAttribute on parentUUID."""
    requests = [
        profile_request("mig-1g-0", "1g.5gb"),
        profile_request("mig-1g-1", "1g.5gb"),
        profile_request("mig-2g", "2g.10gb"),
        profile_request("mig-3g", "3g.20gb"),
    ]
    constraints = [{"matchAttribute": f"{GPU}/parentUUID"}]
    first = work.run(mig_node.name, requests, constraints=constraints)
    assert first.node == mig_node.name
    assert [r["request"] for r in first.results] == [r["name"] for r in requests]
    used = [placement(mig_node, d) for d in first.devices]
    # 1 + 1 + 2 + 4 memory slices: exactly the GPU's eight, none shared.
    assert sorted(s for p in used if p for s in range(p[0], p[0] + p[1])) == list(range(8))
    parents = {mig_node.devices[d]["attributes"]["parentUUID"]["string"] for d in first.devices}
    assert len(parents) == 1
    # The GPU is full: the same claim again, and the whole GPU, find no room.
    assert work.run(mig_node.name, requests, constraints=constraints).node is None
    whole = work.run(mig_node.name, [{"name": "g", **exactly(GPU)}])
    assert whole.node is None and "cannot allocate all claims" in whole.message


def test_at_most_one_media_extension_instance(mig_node: GpuNode, work: Workload) -> None:
    """NVML allows one `1g.5gb+me` per GPU although seven placements exist: the second is
    refused even where it would not overlap the first."""
    first = work.run(mig_node.name, [by_name_request(mig_node, "a", "gpu-0-mig-1g5gbme-20-0")])
    assert first.devices == ["gpu-0-mig-1g5gbme-20-0"]
    assert work.run(mig_node.name, [profile_request("b", "1g.5gb+me")]).node is None
    # A plain 1g.5gb still fits beside it.
    assert work.run(mig_node.name, [profile_request("c", "1g.5gb")]).node == mig_node.name


def test_a_whole_mig_gpu_forbids_every_placement(mig_node: GpuNode, work: Workload) -> None:
    assert work.run(mig_node.name, [{"name": "g", **exactly(GPU)}]).devices == ["gpu-0"]
    assert work.run(mig_node.name, [profile_request("m", "1g.5gb")]).node is None


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_the_api_counters_forbid_every_overlapping_pair(
    mig_node: GpuNode, kube_api: kubernetes.client.ApiClient, kube_namespace: str, data: Any
) -> None:
    """Any two devices of the GPU (whole GPU or placements), asked for one after the other by
    two claims: the second is allocated exactly when it does not overlap the first (and is not a
    second `1g.5gb+me`: NVML allows one)."""
    gpu_devices = sorted(d for d in mig_node.devices if names.parse(d) != names.FallbackName())
    first = data.draw(st.sampled_from(gpu_devices), label="first")
    second = data.draw(st.sampled_from(gpu_devices), label="second")
    work = Workload(kube_api, kube_namespace)
    try:
        a = work.run(mig_node.name, [by_name_request(mig_node, "a", first)])
        assert a.devices == [first]
        b = work.run(mig_node.name, [by_name_request(mig_node, "b", second)])
        clash = (
            first == second
            or overlap(placement(mig_node, first), placement(mig_node, second))
            or capped_together(mig_node, first, second)
        )
        assert b.devices == ([] if clash else [second]), (first, second, b.message)
    finally:
        work.close()


@pytest.fixture(scope="module")
def t4_node(kube_api: kubernetes.client.ApiClient, classes: None) -> Iterator[GpuNode]:
    """One shareable T4 (15 GiB, 100 % compute) and the node's cpu-fallback device."""
    with gpu_node(kube_api, "1xT4") as node:
        yield node


def share(name: str, memory: str, compute: str) -> dict[str, Any]:
    return {"name": name, **exactly(GPU, capacity={"memory": memory, "compute": compute})}


def test_shares_fit_while_the_sums_fit_and_exclude_an_exclusive_claim(
    t4_node: GpuNode, work: Workload
) -> None:
    one = work.run(t4_node.name, [share("s", "4Gi", "30")])
    two = work.run(t4_node.name, [share("s", "4Gi", "30")])
    for got in (one, two):
        (result,) = got.results
        assert result["device"] == "gpu-0"
        assert result["consumedCapacity"] == {"memory": str(4 * 2**30), "compute": "30"}
    assert one.results[0]["shareID"] != two.results[0]["shareID"]
    # A request without capacity.requests consumes each default: all of the GPU.
    exclusive = work.run(t4_node.name, [{"name": "g", **exactly(GPU)}])
    assert exclusive.node is None and "cannot allocate all claims" in exclusive.message
    # What a share leaves out it takes as the default says: memory alone consumes no compute
    # (default 0) and fits beside them; compute alone takes all of the memory and does not.
    memory_only = work.run(
        t4_node.name, [{"name": "m", **exactly(GPU, capacity={"memory": "1Gi"})}]
    )
    assert memory_only.results[0]["consumedCapacity"] == {"memory": str(2**30), "compute": "0"}
    compute_only = exactly(GPU, capacity={"compute": "1"})
    assert work.run(t4_node.name, [{"name": "c", **compute_only}]).node is None
    # Requests round up to the step (1 MiB) and stop at the capacity: 41 % compute is too much.
    assert work.run(t4_node.name, [share("s", "1", "41")]).node is None
    rounded = work.run(t4_node.name, [share("s", "1", "40")])
    assert rounded.results[0]["consumedCapacity"] == {"memory": str(2**20), "compute": "40"}


def test_an_exclusive_claim_keeps_every_share_out(t4_node: GpuNode, work: Workload) -> None:
    exclusive = work.run(t4_node.name, [{"name": "g", **exactly(GPU)}])
    (result,) = exclusive.results
    # An exclusive claim on a shareable device consumes the defaults: all of its memory (which
    # keeps every share out), no compute.
    assert result["consumedCapacity"] == {"memory": str(15 * 2**30), "compute": "0"}
    assert "shareID" in result
    assert work.run(t4_node.name, [share("s", "1Mi", "0")]).node is None


def test_first_available_falls_back_to_cpu_when_no_gpu_is_free(
    t4_node: GpuNode, work: Workload
) -> None:
    optional = [
        {
            "name": "gpu-or-cpu",
            "firstAvailable": [
                {"name": "gpu", "deviceClassName": GPU},
                {"name": "cpu", "deviceClassName": FALLBACK},
            ],
        }
    ]
    got = [work.run(t4_node.name, optional) for _ in range(3)]
    assert [(o.results[0]["request"], o.devices) for o in got] == [
        ("gpu-or-cpu/gpu", ["gpu-0"]),
        ("gpu-or-cpu/cpu", ["cpu-fallback"]),
        ("gpu-or-cpu/cpu", ["cpu-fallback"]),  # any number of pods fall back
    ]


def test_experiment_a_shareable_device_that_consumes_counters_charges_them_once(
    kube_api: kubernetes.client.ApiClient, classes: None, work: Workload
) -> None:
    """KEP 4815 x KEP 5075: a multi-allocatable device with consumesCounters is accepted; the
    first share charges its counters, further shares do not, and a partition that needs those
    counters is refused while any share holds them (1.37's allocator: skipCounterCheck)."""
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    node = unique("cc")
    owner = create_fake_node(kube_api, node)
    counters = {f"memory-slice-{i}": {"value": "1"} for i in range(2)}
    pool = {"name": node, "generation": 1, "resourceSliceCount": 2}
    memory = {
        "value": "100",
        "requestPolicy": {"default": "100", "validRange": {"min": "1", "max": "100", "step": "1"}},
    }
    bodies = [
        {
            "metadata": {"name": f"{node}-0"},
            "spec": {
                "driver": GPU,
                "nodeName": node,
                "pool": pool,
                "sharedCounters": [{"name": "cs", "counters": counters}],
            },
        },
        {
            "metadata": {"name": f"{node}-1"},
            "spec": {
                "driver": GPU,
                "nodeName": node,
                "pool": pool,
                "devices": [
                    {
                        "name": "gpu-0",
                        "attributes": {"type": {"string": "gpu"}},
                        "allowMultipleAllocations": True,
                        "capacity": {"memory": memory},
                        "consumesCounters": [{"counterSet": "cs", "counters": counters}],
                    },
                    {
                        "name": "gpu-0-mig-x-1-0",
                        "attributes": {"type": {"string": "mig"}},
                        "consumesCounters": [
                            {"counterSet": "cs", "counters": {"memory-slice-0": {"value": "1"}}}
                        ],
                    },
                ],
            },
        },
    ]
    try:
        for body in bodies:
            custom.create_cluster_custom_object(*RESOURCE, "resourceslices", body)
        small = [{"name": "s", **exactly(GPU, capacity={"memory": "10"})}]
        assert work.run(node, small).devices == ["gpu-0"]
        assert work.run(node, small).devices == ["gpu-0"]
        assert work.run(node, [{"name": "m", **exactly(MIG)}]).node is None
    finally:
        with contextlib.suppress(kubernetes.client.ApiException):
            kubernetes.client.CoreV1Api(kube_api).delete_node(owner.metadata.name)
        for body in bodies:
            delete_slice(custom, body["metadata"]["name"])


PROFILES = ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    claims=st.lists(
        st.lists(st.sampled_from([*PROFILES, "whole GPU"]), min_size=1, max_size=3),
        min_size=1,
        max_size=4,
    )
)
def test_random_mig_requests_never_get_overlapping_devices(
    mig_node: GpuNode,
    kube_api: kubernetes.client.ApiClient,
    kube_namespace: str,
    claims: list[list[str]],
) -> None:
    """Claims of random MIG profiles (and whole GPUs), one after the other: whatever the
    scheduler allocates, no two devices overlap, at most one `+me` instance, and the first claim
    is allocated whenever it fits an empty GPU."""
    work = Workload(kube_api, kube_namespace)
    try:
        taken: list[str] = []
        for number, wanted in enumerate(claims):
            requests = [
                {"name": f"r{i}", **exactly(GPU)}
                if profile == "whole GPU"
                else profile_request(f"r{i}", profile)
                for i, profile in enumerate(wanted)
            ]
            got = work.run(mig_node.name, requests)
            if number == 0 and _fits_empty_gpu(wanted):
                assert got.node == mig_node.name, (wanted, got.message)
            taken.extend(got.devices)
        for i, a in enumerate(taken):
            for b in taken[i + 1 :]:
                assert not overlap(placement(mig_node, a), placement(mig_node, b)), (a, b)
                assert not capped_together(mig_node, a, b), (a, b)
    finally:
        work.close()


def _fits_empty_gpu(wanted: list[str]) -> bool:
    """Whether the profiles fit one empty A100-40GB together (the catalog's placements)."""
    product = catalog.find_product("A100-40GB")
    assert product is not None
    if "whole GPU" in wanted:
        return wanted == ["whole GPU"]
    if wanted.count("1g.5gb+me") > 1:
        return False
    options = [product.profile(p).placements for p in wanted]  # type: ignore[union-attr]

    def place(index: int, used: set[int]) -> bool:
        if index == len(options):
            return True
        for start, size in options[index]:
            cells = set(range(start, start + size))
            if not cells & used and place(index + 1, used | cells):
                return True
        return False

    return place(0, set())
