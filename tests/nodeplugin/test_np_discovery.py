"""Discovery through the production NVML code on the simulator -> NAS allocatableDevices."""

from __future__ import annotations

from typing import Any

from drasat.api.nas import NasStatus


def test_two_t4(node_factory: Any) -> None:
    node = node_factory("T4 x2")
    nas = node.store.read()
    assert nas.status is NasStatus.Ready
    gpus = nas.spec.gpus()
    assert [g.index for g in gpus] == [0, 1]
    assert [g.minor for g in gpus] == [0, 1]
    first = gpus[0]
    assert first.productName == "Tesla T4"
    assert first.memoryBytes == 15 * 2**30
    assert (first.architecture, first.cudaComputeCapability, first.brand) == (
        "Turing",
        "7.5",
        "Nvidia",
    )
    assert (first.driverVersion, first.cudaDriverVersion) == ("550.54.15", "12.4")
    assert first.pciBusID == "0000:17:00.0"  # Linux spelling of NVML's 00000000:17:00.0
    assert first.numaNode == 0
    assert not first.migEnabled
    assert first.nvlinkPeers is None  # T4 has no NVLink
    assert nas.spec.mig_profiles() == []
    assert len({g.uuid for g in gpus}) == 2


def test_two_a100_mig_on_gpu_1(node_factory: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    spec = node.store.read().spec
    gpus = spec.gpus()
    assert [g.migEnabled for g in gpus] == [False, True]
    assert gpus[0].nvlinkPeers == [gpus[1].uuid]
    assert gpus[1].nvlinkPeers == [gpus[0].uuid]
    migs = {m.profile: m for m in spec.mig_profiles()}
    # one entry per product x profile, placements as NVML reports them
    assert set(migs) == {
        "1g.5gb",
        "1g.5gb+me",
        "1g.10gb",
        "2g.10gb",
        "3g.20gb",
        "4g.20gb",
        "7g.40gb",
    }
    assert {m.parentProductName for m in migs.values()} == {"NVIDIA A100-SXM4-40GB"}
    three = migs["3g.20gb"]
    assert [(p.start, p.size) for p in three.placements] == [(0, 4), (4, 4)]
    assert (three.giProfileId, three.computeSlices, three.memoryBytes) == (9, 3, 20 * 2**30)
    assert [p.start for p in migs["1g.5gb"].placements] == [0, 1, 2, 3, 4, 5, 6]
    assert [(p.start, p.size) for p in migs["7g.40gb"].placements] == [(0, 8)]


def test_two_mig_gpus_of_one_product_share_entries(node_factory: Any) -> None:
    spec = node_factory("2xA100-40GB,mig=all").store.read().spec
    assert len(spec.mig_profiles()) == 7  # not 14: entries are per product, not per GPU


def test_numa_split(node_factory: Any) -> None:
    spec = node_factory("4xH100-80GB,numa=2").store.read().spec
    assert [g.numaNode for g in spec.gpus()] == [0, 0, 1, 1]


def test_publish_keeps_allocations_and_stop_marks_not_ready(node_factory: Any) -> None:
    node = node_factory("T4")
    node.allocate(
        "c1", {"claimInfo": {"namespace": "a", "name": "b", "uid": "c1"}, "gpu": {"devices": []}}
    )
    node.plugin.publish()
    assert "c1" in node.store.read().spec.allocatedClaims  # the controller's part is untouched
    node.plugin.stop(grace_s=0)
    assert node.store.read().status is NasStatus.NotReady
