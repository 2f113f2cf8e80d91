"""bench/nvidia_alloc.py without a cluster: its NVIDIA-format slices are what drasat's and
NVIDIA's readers take for the same GPUs, and its requests select what drasat's select."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from bench import kube_alloc, nvidia_alloc
from drasat.v1 import slices
from drasat.whatif import nvidiaformat

#: The attributes NVIDIA's driver publishes (deploy/examples/v1-nvidia-quickstart/cluster).
NVIDIA_ATTRIBUTES = {
    "type", "uuid", "productName", "brand", "architecture", "cudaComputeCapability",
    "driverVersion", "cudaDriverVersion", "parentUUID", "profile",
    "resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot",
}  # fmt: skip


@pytest.fixture
def nvidia_format() -> Iterator[None]:
    saved = {name: getattr(kube_alloc, name) for name in (
        "node_slices", "mig_request", "needs_request", "class_bodies")}  # fmt: skip
    allocators = dict(kube_alloc.ALLOCATORS)
    nvidia_alloc.use_nvidia_format()
    yield
    for name, value in saved.items():
        setattr(kube_alloc, name, value)
    kube_alloc.ALLOCATORS.clear()
    kube_alloc.ALLOCATORS.update(allocators)


def _read(bodies: list[dict], driver: str) -> slices.NodeDevices:
    for i, body in enumerate(bodies):
        body["metadata"]["resourceVersion"] = str(i + 1)
    return slices.read_node(bodies[0]["spec"]["nodeName"], bodies, driver=driver)


def test_nvidia_format_slices_read_as_the_same_gpus_and_placements(nvidia_format: None) -> None:
    (node,) = kube_alloc.plan_fleet("t", 1, 1.0, 1)
    drasat = _read(nvidia_alloc.drasat_slices(node, "uid"), "gpu.drasat.io")
    nvidia_bodies = kube_alloc.node_slices(node, "uid")
    nvidia = _read(nvidia_bodies, "gpu.nvidia.com")
    assert drasat.read is not None and nvidia.read is not None, nvidia.problem
    # The same GPUs and MIG placements; NVIDIA's driver publishes no NUMA node.
    mine = drasat.read.nas.spec
    gpus = [g.model_copy(update={"numaNode": None}) for g in mine.gpus()]
    assert nvidia.read.nas.spec.gpus() == gpus
    assert nvidia.read.nas.spec.mig_profiles() == mine.mig_profiles()
    devices = [d for b in nvidia_bodies for d in b["spec"].get("devices") or []]
    assert {b["spec"]["driver"] for b in nvidia_bodies} == {"gpu.nvidia.com"}
    # NVIDIA's attributes only: no placement or index attributes of drasat's.
    for device in devices:
        assert set(device["attributes"]) <= NVIDIA_ATTRIBUTES
    assert not [d for d in devices if d["attributes"]["type"]["string"] == "cpu-fallback"]
    # NVIDIA's own device and counter set names (`1g5gb`, not drasat's `1g.5gb`): the slices
    # the what-if's NVIDIA format writes for the same GPUs.
    migs = [d["name"] for d in devices if d["attributes"]["type"]["string"] == "mig"]
    assert migs and all(re.fullmatch(r"gpu-\d+-mig-[0-9a-z-]+-\d+-\d+", n) for n in migs), migs
    assert "gpu-0-mig-1g5gb-19-0" in migs
    sets = [c["name"] for b in nvidia_bodies for c in b["spec"].get("sharedCounters") or []]
    assert sets == [f"gpu-{i}-counter-set" for i in range(kube_alloc.GPUS_PER_NODE)]
    gpus_of_node = kube_alloc.node_inventory(node).gpus
    expected = nvidiaformat.gpu_slices(node.name, gpus_of_node)
    assert [b["spec"] for b in nvidia_bodies] == [b["spec"] for b in expected]
    owners = {o["uid"] for b in nvidia_bodies for o in b["metadata"]["ownerReferences"]}
    assert owners == {"uid"}


def test_requests_name_nvidias_class_and_attributes(nvidia_format: None) -> None:
    bodies = kube_alloc.churn_templates()
    classes = {b["deviceClassName"] for b in bodies.values()}
    assert classes == {"mig.nvidia.com"}
    text = str(bodies)
    assert "gpu.drasat.io" not in text and 'device.attributes["gpu.nvidia.com"].profile' in text
