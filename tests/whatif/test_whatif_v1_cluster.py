"""`--cluster` in v1 terms: ResourceSlices (drasat's and NVIDIA's gpu.nvidia.com) and Nodes
read into the solver's NAS-shaped nodes, with the way back to each published device."""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from drasat import loading
from drasat.api import cluster
from drasat.api.devicemodel import pool
from drasat.api.devicemodel.nodegpus import Inventory, profiles_by_gpu
from drasat.api.inputerrors import InputError
from drasat.api.nas import Health
from drasat.whatif import clusternodes, v1cluster

REPO = pathlib.Path(__file__).resolve().parents[2]
NVIDIA_SLICES = REPO / "deploy/examples/v1-nvidia-quickstart/cluster/nvidia-slices.yaml"
T4_UUID = "GPU-4a8c1f0e-0000-4000-8000-000000000000"


def docs(*objects: dict[str, Any], source: str = "c.yaml") -> list[loading.Document]:
    return [loading.Document(source, n, o) for n, o in enumerate(objects, start=1)]


def nv_slice(node: str, devices: list[Any], **spec: Any) -> dict[str, Any]:
    pool_spec = spec.pop("pool", {"name": node, "generation": 1, "resourceSliceCount": 1})
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-slice-{len(devices)}"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": pool_spec,
            "devices": devices,
            **spec,
        },
    }


def nv_t4(minor: int, uuid: str = T4_UUID, **extra: Any) -> dict[str, Any]:
    return {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": uuid},
            "productName": {"string": "Tesla T4"},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Turing"},
            "cudaComputeCapability": {"version": "7.5.0"},
            "driverVersion": {"version": "570.124.6"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"},
        },
        "capacity": {"memory": {"value": "15Gi"}},
        **extra,
    }


def nv_mig(name: str, profile: str, parent: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {
            "type": {"string": "mig"},
            "parentUUID": {"string": parent},
            "profile": {"string": profile},
            "productName": {"string": "NVIDIA A100-SXM4-40GB"},
            "architecture": {"string": "Ampere"},
        },
        **extra,
    }


# ---------------------------------------------------------------- drasat's own slices


@settings(max_examples=15, deadline=None)
@given(
    gpus=st.lists(
        st.tuples(
            st.sampled_from(["T4", "A100-40GB", "A100-80GB", "H100-80GB", "L4"]), st.booleans()
        ),
        min_size=1,
        max_size=4,
    ),
    shares=st.booleans(),
)
def test_drasat_slices_read_back_to_the_nas_they_were_published_from(
    gpus: list[tuple[str, bool]], shares: bool
) -> None:
    # Round trip through the node plugin's device model: what drasat publishes for a node is
    # read back to the same GPUs and MIG profiles (placements, ids, memory, compute slices).
    groups = [{"product": p, "mig": mig and p != "T4" and p != "L4"} for p, mig in gpus]
    spec = cluster.ClusterSpec.model_validate({"nodes": [{"name": "n", "gpus": groups}]})
    (expanded,) = cluster.expand(spec)
    found = expanded.nas.spec
    inventory = Inventory(
        gpus=found.gpus(),
        mig_profiles=profiles_by_gpu(found.gpus(), found.mig_profiles()),
        shares=shares,
    )
    read = v1cluster.load(docs(*pool.node_slices("n", inventory)))
    (node,) = read.nodes
    want = [g.model_copy(update={"nvlinkPeers": None}) for g in found.gpus()]
    assert node.nas.spec.gpus() == want
    key = lambda m: (m.parentProductName, m.profile)  # noqa: E731
    assert sorted(node.nas.spec.mig_profiles(), key=key) == sorted(found.mig_profiles(), key=key)
    # Every published device is found by its own name; the fallback device too.
    assert set(node.devices) == {d["name"] for d in pool.all_devices(inventory)}
    assert read.ignored == ()


# ---------------------------------------------------------------- NVIDIA's slices


def test_nvidia_whole_gpus_become_gpu_info_with_their_source() -> None:
    tainted = nv_t4(
        1,
        "GPU-other",
        taints=[{"key": "gpu.nvidia.com/xid", "value": "48", "effect": "NoSchedule"}],
    )
    informing = nv_t4(
        2, "GPU-third", taints=[{"key": "gpu.nvidia.com/unmonitored", "effect": "None"}]
    )
    read = v1cluster.load(docs(nv_slice("n1", [nv_t4(0), tainted, informing])))
    (node,) = read.nodes
    first, second, third = node.nas.spec.gpus()
    assert first.model_dump(exclude_none=True) == {
        "index": 0,
        "uuid": T4_UUID,
        "minor": 0,
        "migEnabled": False,
        "memoryBytes": 15 * 2**30,
        "productName": "Tesla T4",
        "brand": "Nvidia",
        "architecture": "Turing",
        "cudaComputeCapability": "7.5",
        "driverVersion": "570.124.6",
        "cudaDriverVersion": "",
        "pciBusID": "0000:3b:00.0",
        "health": Health.Healthy,
    }
    # NoSchedule/NoExecute taints make the GPU unhealthy; effect None only informs.
    assert (second.health, third.health) == (Health.Unhealthy, Health.Healthy)
    source = node.devices["gpu-1"]
    assert (source.driver, source.pool, source.name, source.kind, source.gpu_uuid) == (
        "gpu.nvidia.com",
        "n1",
        "gpu-1",
        "gpu",
        "GPU-other",
    )
    # Quantities are normalised to bytes for the selectors and capacity checks.
    assert source.device["capacity"]["memory"] == {"value": str(15 * 2**30)}


def test_an_older_driver_index_and_minor_attributes_are_used() -> None:
    device = nv_t4(0)
    device["attributes"] |= {"index": {"int": 3}, "minor": {"int": 5}}
    (node,) = v1cluster.load(docs(nv_slice("n", [device]))).nodes
    (gpu,) = node.nas.spec.gpus()
    assert (gpu.index, gpu.minor) == (3, 5)
    assert set(node.devices) == {"gpu-5"}


def test_nvidia_dynamic_mig_devices_become_profiles_and_keep_their_names() -> None:
    parent = "GPU-a100"
    whole = nv_t4(0, parent)
    whole["attributes"]["productName"] = {"string": "NVIDIA A100-SXM4-40GB"}
    whole["capacity"] = {"memory": {"value": "40192Mi"}}

    def consumes(start: int, size: int, memory: str) -> list[Any]:
        counters = {"memory": {"value": memory}}
        counters |= {f"memory-slice-{i}": {"value": "1"} for i in range(start, start + size)}
        return [{"counterSet": "gpu-0-counter-set", "counters": counters}]

    me = nv_mig(
        "gpu-0-mig-1g5gb-me-20-6",
        "1g.5gb+me",
        parent,
        capacity={"memory": {"value": "4864Mi"}},
        consumesCounters=consumes(6, 1, "4864Mi"),
    )
    three = nv_mig(
        "gpu-0-mig-3g20gb-9-4",
        "3g.20gb",
        parent,
        capacity={"memory": {"value": "19968Mi"}},
        consumesCounters=consumes(4, 4, "19968Mi"),
    )
    counter_set = {
        "name": "gpu-0-counter-set",
        "counters": {"memory": {"value": "40192Mi"}}
        | {f"memory-slice-{i}": {"value": "1"} for i in range(8)},
    }
    pool_of_two = {"name": "a", "generation": 2, "resourceSliceCount": 2}
    read = v1cluster.load(
        docs(
            nv_slice("a", [], pool=pool_of_two, sharedCounters=[counter_set]),
            nv_slice("a", [whole, me, three], pool=pool_of_two),
        )
    )
    (node,) = read.nodes
    (gpu,) = node.nas.spec.gpus()
    assert gpu.migEnabled and gpu.memoryBytes == 40192 * 2**20
    profiles = {m.profile: m for m in node.nas.spec.mig_profiles()}
    assert {p: [(x.start, x.size) for x in m.placements] for p, m in profiles.items()} == {
        "3g.20gb": [(4, 4)],
        "1g.5gb+me": [(6, 1)],
    }
    assert (profiles["1g.5gb+me"].giProfileId, profiles["1g.5gb+me"].computeSlices) == (20, 1)
    assert profiles["3g.20gb"].memoryBytes == 19968 * 2**20
    # drasat's name for a placement finds NVIDIA's device (`1g5gbme` vs NVIDIA's `1g5gb-me`).
    source = node.devices["gpu-0-mig-1g5gbme-20-6"]
    assert (source.name, source.kind, source.gpu_uuid, source.profile, source.start) == (
        "gpu-0-mig-1g5gb-me-20-6",
        "mig",
        parent,
        "1g.5gb+me",
        6,
    )
    assert read.counter_sets[("gpu.nvidia.com", "a", "gpu-0-counter-set")]["memory-slice-7"] == 1


def test_static_mig_builds_the_unpublished_parent_from_its_mig_devices() -> None:
    slices = {f"memorySlice{i}": {"value": "1"} for i in (0, 1, 2, 3)}
    static = nv_mig(
        "gpu-2-mig-3g20gb-9-0",
        "3g.20gb",
        "GPU-parent",
        capacity={"memory": {"value": "19968Mi"}, **slices},
    )
    static["attributes"]["uuid"] = {"string": "MIG-1"}
    (node,) = v1cluster.load(docs(nv_slice("s", [static]))).nodes
    (gpu,) = node.nas.spec.gpus()
    assert (gpu.uuid, gpu.minor, gpu.migEnabled, gpu.productName) == (
        "GPU-parent",
        2,
        True,
        "NVIDIA A100-SXM4-40GB",
    )
    assert gpu.memoryBytes == 40 * 2**30  # the catalog's A100-40GB: the slices do not say
    (mig,) = node.nas.spec.mig_profiles()
    assert [(p.start, p.size) for p in mig.placements] == [(0, 4)]
    # The parent is not published whole, so nothing maps to `gpu-2`.
    assert set(node.devices) == {"gpu-2-mig-3g20gb-9-0"}


def test_the_example_nvidia_dump_reads_as_three_nodes() -> None:
    read = clusternodes.load(loading.read_documents(NVIDIA_SLICES))
    assert [s.name for s in read.states] == ["nv-t4", "nv-a100", "nv-a100-static"]
    t4 = read.states[0]
    assert (t4.cpu_milli, t4.memory_mib, t4.ready) == (32_000, 251 * 1024, True)
    assert ("nvidia.com/gpu.product", "Tesla-T4") in t4.labels
    assert [g.healthy for g in t4.devices.gpus] == [True, True, False]
    assert len(read.published("nv-a100")) == 26  # the whole GPU and 25 MIG placements
    assert read.node_objects["nv-t4"]["spec"]["taints"][0]["key"] == "nvidia.com/gpu"


# ---------------------------------------------------------------- pools, versions, nodes


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = nv_slice("n", [nv_t4(0)], pool={"name": "n", "generation": 1, "resourceSliceCount": 1})
    new = nv_slice("n", [nv_t4(1, "GPU-new")], pool={"name": "n", "generation": 2})
    read = v1cluster.load(docs(old, new))
    assert [g.uuid for g in read.nodes[0].nas.spec.gpus()] == ["GPU-new"]
    read = v1cluster.load(docs(new, old))
    assert [g.uuid for g in read.nodes[0].nas.spec.gpus()] == ["GPU-new"]
    assert [i.reason for i in read.ignored] == ["an older generation of its pool"]


def test_v1beta1_slices_with_basic_devices_are_read() -> None:
    device = nv_t4(0)
    beta = {"name": "gpu-0", "basic": {k: v for k, v in device.items() if k != "name"}}
    found = nv_slice("n", [beta])
    found["apiVersion"] = "resource.k8s.io/v1beta1"
    (node,) = v1cluster.load(docs(found)).nodes
    assert [g.uuid for g in node.nas.spec.gpus()] == [T4_UUID]


def test_other_drivers_and_slices_of_nodes_not_given_are_listed_as_ignored() -> None:
    other = nv_slice("n", [{"name": "nic-0"}])
    other["spec"]["driver"] = "dra.net"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "m"}}
    read = v1cluster.load(docs(other, nv_slice("n", [nv_t4(0)]), node))
    assert [n.name for n in read.nodes] == ["m"]
    assert [i.reason for i in read.ignored] == [
        "driver dra.net is not a GPU driver",
        "node 'n' is not among the Nodes given",
    ]


def test_a_node_that_is_not_ready_is_unsuitable() -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n"},
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletDown"}]},
    }
    (found,) = v1cluster.load(docs(node, nv_slice("n", [nv_t4(0)]))).nodes
    assert (found.state.ready, found.state.unready_reason) == (
        False,
        "the Node is not Ready (KubeletDown)",
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda s: s["spec"]["devices"][0]["attributes"].pop("uuid"),
            "c.yaml: document 1: ResourceSlice n-slice-1: spec.devices[0] (gpu-0): "
            "attributes.uuid: missing",
        ),
        (
            lambda s: s["spec"]["devices"][0]["capacity"].update(memory={"value": "lots"}),
            "c.yaml: document 1: ResourceSlice n-slice-1: spec.devices[0].capacity.memory.value: "
            "not a Kubernetes quantity: 'lots'",
        ),
        (
            lambda s: s["spec"]["pool"].update(resourceSliceCount=2),
            "c.yaml: document 1: ResourceSlice n-slice-1: pool 'n' of driver gpu.nvidia.com "
            "generation 1 has 1 of its 2 slices",
        ),
        (
            lambda s: s["spec"]["devices"].append(nv_mig("gpu-0-mig-x", "1g.5gb", "GPU-p")),
            "spec.devices[1] (gpu-0-mig-x): name: not gpu-<minor>-mig-<profile>-<profileID>-"
            "<start>",
        ),
        (
            lambda s: s["spec"]["devices"][0]["attributes"].update(type={"int": 1, "string": "x"}),
            "spec.devices[0].attributes: type: exactly one of int, bool, string or version must "
            "be set",
        ),
    ],
)
def test_bad_slices_are_refused_naming_file_object_and_field(change: Any, message: str) -> None:
    found = nv_slice("n", [nv_t4(0)])
    change(found)
    with pytest.raises(InputError) as error:
        v1cluster.load(docs(found))
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_a_slice_and_a_nas_for_one_node_are_refused() -> None:
    nas = {
        "apiVersion": "nas.gpu.drasat.io/v1alpha1",
        "kind": "NodeAllocationState",
        "metadata": {"name": "n", "namespace": "drasat"},
        "spec": {},
    }
    with pytest.raises(InputError, match=r"node 'n' is also described at c\.yaml: document 1"):
        clusternodes.load(docs(nas, nv_slice("n", [nv_t4(0)])))


def test_the_example_drasat_dump_is_what_the_plugin_publishes() -> None:
    text = (REPO / "deploy/examples/v1-nvidia-quickstart/cluster/drasat-slices.yaml").read_text()
    listing = yaml.safe_load(text)
    read = clusternodes.load(loading.parse_documents(text, "drasat.yaml"))
    for state in read.states:
        published = [
            i["spec"].get("devices", [])
            for i in listing["items"]
            if i["kind"] == "ResourceSlice" and i["spec"]["nodeName"] == state.name
        ]
        names = sorted(d["name"] for devices in published for d in devices)
        assert sorted(d.name for d in read.published(state.name)) == names
    assert copy.deepcopy(read.node_objects)["nv-a100"]["metadata"]["name"] == "nv-a100"


def test_device_taint_rules_make_the_devices_they_select_unhealthy() -> None:
    def rule(name: str, selector: dict[str, str], key: str, effect: str) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": name},
            "spec": {"deviceSelector": selector, "taint": {"key": key, "effect": effect}},
        }

    read = v1cluster.load(
        docs(
            nv_slice("n", [nv_t4(0), nv_t4(1, "GPU-1"), nv_t4(2, "GPU-2")]),
            rule(
                "broken", {"driver": "gpu.nvidia.com", "device": "gpu-1"}, "ops/broken", "NoExecute"
            ),
            rule("note", {"device": "gpu-2"}, "ops/note", "None"),
            # drasat's controller taints all of its devices to keep kube-scheduler off them.
            rule("own", {"driver": "gpu.nvidia.com"}, "gpu.drasat.io/allocator", "NoSchedule"),
        )
    )
    health = [g.health for g in read.nodes[0].nas.spec.gpus()]
    assert health == [Health.Healthy, Health.Unhealthy, Health.Healthy]
