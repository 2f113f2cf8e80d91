"""Prepare/unprepare on the simulated fleet: whole GPUs, MIG, sharing, lifecycle, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from npfixtures import gpu_allocation, gpu_instances, mig_allocation, ref

from drasat.nodeplugin import cdi
from drasat.nodeplugin.devicelib import ComputeMode
from drasat.nodeplugin.state import ClaimError, ClaimRef

UID = "5b0a6c1e-1111-4a6f-9f0e-000000000001"
UID2 = "5b0a6c1e-2222-4a6f-9f0e-000000000002"


def spec_of(node: Any, uid: str) -> dict[str, Any]:
    return json.loads(node.state.cdi.path(uid).read_text())


def env_of(node: Any, uid: str) -> dict[str, str]:
    edits = spec_of(node, uid)["devices"][0]["containerEdits"]
    return dict(e.split("=", 1) for e in edits["env"])


def test_exclusive_gpus(node_factory: Any) -> None:
    node = node_factory("T4 x2")
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), node.gpu(1)))
    ids = node.state.prepare(ref(UID))
    assert ids == [f"k8s.gpu.drasat.io/claim={UID}"]
    env = env_of(node, UID)
    assert env["DRASAT_GPU_UUIDS"] == f"{node.gpu(0)},{node.gpu(1)}"
    nodes = [n["path"] for n in spec_of(node, UID)["devices"][0]["containerEdits"]["deviceNodes"]]
    assert {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"} <= set(nodes)
    prepared = node.store.read().spec.preparedClaims[UID]
    assert prepared.gpu is not None
    assert [d.uuid for d in prepared.gpu.devices] == [node.gpu(0), node.gpu(1)]
    node.state.unprepare(ref(UID))
    assert not node.state.cdi.path(UID).exists()
    assert UID not in node.store.read().spec.preparedClaims
    assert node.state.checkpoint.get(UID) is None


def test_prepare_twice_same_ids_unprepare_twice_ok(node_factory: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "3g.20gb", 4, 4))
    first = node.state.prepare(ref(UID))
    calls = len(node.sim.calls)
    assert node.state.prepare(ref(UID)) == first
    assert not any("Create" in c for c in node.sim.calls[calls:])  # nothing done the second time
    assert gpu_instances(node, 1) == [(4, 4)]
    node.state.unprepare(ref(UID))
    node.state.unprepare(ref(UID))
    assert gpu_instances(node, 1) == []


def test_mig_created_at_allocated_placement(node_factory: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "1g.5gb", 6, 1))
    node.state.prepare(ref(UID))
    assert gpu_instances(node, 1) == [(6, 1)]
    prepared = node.store.read().spec.preparedClaims[UID].mig
    assert prepared is not None
    device = prepared.devices[0]
    assert (device.profile, device.placement.start, device.parentUUID) == ("1g.5gb", 6, node.gpu(1))
    assert device.uuid.startswith("MIG-")
    assert env_of(node, UID)["DRASAT_GPU_UUIDS"] == device.uuid
    node.state.unprepare(ref(UID))
    assert gpu_instances(node, 1) == []


def test_mig_overlap_is_a_claim_error_and_nothing_half_made(node_factory: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "3g.20gb", 4, 4))
    node.state.prepare(ref(UID))
    node.allocate(UID2, mig_allocation(UID2, node.gpu(1), "2g.10gb", 4, 2))
    in_use = (
        f"MIG 2g.10gb at start 4 size 2 on {node.gpu(1)} overlaps MIG device "
        r"gpu-1-mig-3g20gb-9-4 \(3g.20gb at start 4 size 4, GPU instance \d+\) "
        f"in use by claim default/claim \\({UID}\\)"
    )
    with pytest.raises(ClaimError, match=in_use):
        node.state.prepare(ref(UID2))
    assert gpu_instances(node, 1) == [(4, 4)]  # only the first claim's instance
    assert node.state.checkpoint.get(UID2) is None
    assert not node.state.cdi.path(UID2).exists()
    assert UID2 not in node.store.read().spec.preparedClaims


def test_compute_instance_failure_rolls_back_the_gpu_instance(node_factory: Any) -> None:
    import pynvml

    node = node_factory("2xA100-40GB,mig=1")
    node.sim.inject_fault("nvmlGpuInstanceCreateComputeInstance", pynvml.NVML_ERROR_UNKNOWN)
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "2g.10gb", 2, 2))
    with pytest.raises(ClaimError, match="NVML_ERROR_UNKNOWN"):
        node.state.prepare(ref(UID))
    assert gpu_instances(node, 1) == []
    node.state.prepare(ref(UID))  # the next try works
    assert gpu_instances(node, 1) == [(2, 2)]


def test_two_mig_devices_second_fails_first_destroyed(node_factory: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    devices = [
        {"profile": "1g.5gb", "parentUUID": node.gpu(1), "placement": {"start": 0, "size": 1}},
        {"profile": "1g.5gb", "parentUUID": node.gpu(1), "placement": {"start": 0, "size": 1}},
    ]
    node.allocate(
        UID,
        {
            "claimInfo": {"namespace": "default", "name": "claim", "uid": UID},
            "mig": {"devices": devices},
        },
    )
    with pytest.raises(ClaimError, match="INSUFFICIENT_RESOURCES"):
        node.state.prepare(ref(UID))
    assert gpu_instances(node, 1) == []


@pytest.mark.parametrize(
    ("allocation", "message"),
    [
        # a MIG parent the node does not have
        (lambda n: mig_allocation(UID, "GPU-nope", "1g.5gb", 0, 1), "GPU-nope is not on this node"),
        # a GPU not in MIG mode
        (lambda n: mig_allocation(UID, n.gpu(0), "1g.5gb", 0, 1), "is not in MIG mode"),
        # a profile of another product
        (lambda n: mig_allocation(UID, n.gpu(1), "1g.10gb+me", 0, 1), "does not exist on"),
        # a placement NVML does not offer for the profile
        (lambda n: mig_allocation(UID, n.gpu(1), "3g.20gb", 2, 4), "cannot be placed at start 2"),
        # a whole GPU the node does not have
        (lambda n: gpu_allocation(UID, "GPU-missing"), "GPU-missing is not on this node"),
    ],
)
def test_bad_allocations_are_clear_claim_errors(
    node_factory: Any, allocation: Any, message: str
) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, allocation(node))
    with pytest.raises(ClaimError, match=message):
        node.state.prepare(ref(UID))
    assert gpu_instances(node, 1) == []
    assert node.state.checkpoint.get(UID) is None


def test_claim_not_in_nas(node_factory: Any) -> None:
    node = node_factory("T4")
    with pytest.raises(ClaimError, match=r"not allocated on node gpu-node-1.*spec.allocatedClaims"):
        node.state.prepare(ref(UID))


def test_bad_resource_handle_json(node_factory: Any) -> None:
    node = node_factory("T4")
    claim = ClaimRef(uid=UID, namespace="default", name="claim", resource_handle="{not json")
    with pytest.raises(ClaimError, match="resource handle is not valid JSON"):
        node.state.prepare(claim)


def test_resource_handle_allocation_used_when_nas_lacks_it(node_factory: Any) -> None:
    node = node_factory("T4")
    handle = json.dumps(gpu_allocation(UID, node.gpu(0)))
    ids = node.state.prepare(ClaimRef(UID, "default", "claim", handle))
    assert ids == [cdi.device_id(UID)]


def test_claim_name_must_match_nas(node_factory: Any) -> None:
    node = node_factory("T4")
    node.allocate(UID, gpu_allocation(UID, node.gpu(0)))
    with pytest.raises(ClaimError, match="names it default/claim"):
        node.state.prepare(ClaimRef(UID, "other", "thing"))


def test_time_slicing(node_factory: Any) -> None:
    node = node_factory("T4")
    sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}}
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), sharing=sharing))
    node.sim.gpus[0].compute_mode = 0
    node.state.prepare(ref(UID))
    assert node.sim.gpus[0].time_slice == 3
    node.state.unprepare(ref(UID))
    assert node.sim.gpus[0].time_slice == 0


def test_mps_with_limits(node_factory: Any) -> None:
    node = node_factory("T4")
    sharing = {
        "strategy": "MPS",
        "mpsConfig": {"defaultActiveThreadPercentage": 40, "defaultPinnedDeviceMemoryLimit": "4Gi"},
    }
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), sharing=sharing))
    node.state.prepare(ref(UID))
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.ExclusiveProcess
    ((name, daemon),) = node.state.mps.running().items()
    assert daemon.devices == (node.gpu(0),)
    assert daemon.description["command"][-1] == "-f"  # foreground: the plugin knows its pid
    assert daemon.description["env"]["CUDA_VISIBLE_DEVICES"] == node.gpu(0)
    daemon_dir = node.state.mps.daemon_dir(name)
    env = env_of(node, UID)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
    # the claim's own daemon enforces its limits; nothing of them in the tenant's environment
    assert node.state.mps.query(name, "get_default_active_thread_percentage") == "40"
    pinned = node.state.mps.query(name, f"get_default_device_pinned_mem_limit {node.gpu(0)}")
    assert pinned == "4096M"
    assert node.mps_limits(UID) == {}
    mounts = spec_of(node, UID)["devices"][0]["containerEdits"]["mounts"]
    assert [(m["hostPath"], m["containerPath"]) for m in mounts] == [
        (str(daemon_dir / "pipe"), "/tmp/nvidia-mps"),
        (str(daemon_dir / "shm"), "/dev/shm"),
    ]
    node.state.unprepare(ref(UID))
    assert node.daemons() == {}
    assert not daemon_dir.exists()
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.Default


def test_share_claims_get_mps_limits_from_the_share(node_factory: Any) -> None:
    node = node_factory("A100-40GB")
    for uid, compute, memory in ((UID, 30, "8Gi"), (UID2, 50, "16Gi")):
        node.allocate(
            uid, gpu_allocation(uid, node.gpu(0), share={"compute": compute, "memory": memory})
        )
        node.state.prepare(ref(uid))
    assert node.mps_limits(UID) == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8192M",
    }
    assert node.mps_limits(UID2) == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=16384M",
    }
    assert env_of(node, UID)["DRASAT_GPU_SHARE_MEMORY"] == str(8 * 2**30)
    # both hold ExclusiveProcess; it is reset only when the last one goes
    node.state.unprepare(ref(UID))
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.ExclusiveProcess
    node.state.unprepare(ref(UID2))
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.Default


def test_conflicting_settings_on_one_gpu_are_refused(node_factory: Any) -> None:
    node = node_factory("T4")
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), share={"compute": 50}))
    node.state.prepare(ref(UID))
    sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Short"}}
    node.allocate(UID2, gpu_allocation(UID2, node.gpu(0), sharing=sharing))
    with pytest.raises(ClaimError, match="computeMode is ExclusiveProcess for claim"):
        node.state.prepare(ref(UID2))
    assert node.sim.gpus[0].time_slice == 0
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.ExclusiveProcess


def test_lifecycle_actions_applied_and_undone(node_factory: Any) -> None:
    node = node_factory("A100-40GB")
    lifecycle = [
        {"action": "setPowerLimitWatts", "value": 250},
        {"action": "lockGpuClocksMHz", "value": 1200},
        {"action": "setComputeMode", "value": "Prohibited"},
    ]
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), lifecycle=lifecycle))
    node.state.prepare(ref(UID))
    gpu = node.sim.gpus[0]
    assert (gpu.power_mw, gpu.locked_clocks, gpu.compute_mode) == (250_000, (1200, 1200), 2)
    node.state.unprepare(ref(UID))
    assert (gpu.power_mw, gpu.locked_clocks, gpu.compute_mode) == (300_000, None, 0)


def test_a_lifecycle_action_overrides_the_claims_own_sharing_setting(node_factory: Any) -> None:
    # Time-slicing holds computeMode Default; the policy's init action of the same claim
    # (applied after it) asks ExclusiveProcess: the claim's later step wins, no conflict.
    node = node_factory("T4")
    sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}}
    lifecycle = [{"action": "setComputeMode", "value": "ExclusiveProcess"}]
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), sharing=sharing, lifecycle=lifecycle))
    node.state.prepare(ref(UID))
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.ExclusiveProcess
    node.state.unprepare(ref(UID))
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.Default


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ({"action": "runShell", "value": "rm -rf /"}, "not in the fixed vocabulary"),
        ({"action": "setComputeMode", "value": "Turbo"}, "bad value 'Turbo'"),
    ],
)
def test_lifecycle_outside_vocabulary_refused(node_factory: Any, step: Any, message: str) -> None:
    node = node_factory("T4")
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), lifecycle=[step]))
    with pytest.raises(ClaimError, match=message):
        node.state.prepare(ref(UID))


def test_failed_lifecycle_action_rolls_back_earlier_ones(node_factory: Any) -> None:
    node = node_factory("T4")
    lifecycle = [
        {"action": "lockGpuClocksMHz", "value": 900},
        {"action": "setPowerLimitWatts", "value": 5},
    ]
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), lifecycle=lifecycle))
    with pytest.raises(ClaimError, match="NVML_ERROR_INVALID_ARGUMENT"):  # 5 W is below the minimum
        node.state.prepare(ref(UID))
    assert node.sim.gpus[0].locked_clocks is None


def test_optional_claim_without_devices(node_factory: Any) -> None:
    node = node_factory("T4")
    node.allocate(
        UID,
        {
            "claimInfo": {"namespace": "default", "name": "claim", "uid": UID},
            "gpu": {"devices": []},
            "optional": True,
        },
    )
    node.state.prepare(ref(UID))
    env = env_of(node, UID)
    assert (env["NVIDIA_VISIBLE_DEVICES"], env["DRASAT_GPU_ALLOCATED"]) == ("void", "false")
    assert "deviceNodes" not in spec_of(node, UID)["devices"][0]["containerEdits"]


def test_cleanup_verification_finds_a_leftover(node_factory: Any, monkeypatch: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "3g.20gb", 0, 4))
    node.state.prepare(ref(UID))
    real_destroy = node.lib.destroy_mig_device
    monkeypatch.setattr(node.lib, "destroy_mig_device", lambda *a, **k: True)  # says done, is not
    with pytest.raises(ClaimError, match=r"not verified: MIG device MIG-.* still exists"):
        node.state.unprepare(ref(UID))
    assert node.state.checkpoint.get(UID) is not None  # kept for the retry
    monkeypatch.setattr(node.lib, "destroy_mig_device", real_destroy)
    node.state.unprepare(ref(UID))
    assert gpu_instances(node, 1) == []
    assert node.state.checkpoint.get(UID) is None


def test_cleanup_verification_finds_a_mode_not_reset(node_factory: Any, monkeypatch: Any) -> None:
    node = node_factory("T4")
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), share={"compute": 50}))
    node.state.prepare(ref(UID))
    monkeypatch.setattr(node.lib, "set_compute_mode", lambda *a, **k: None)  # reset is lost
    with pytest.raises(ClaimError, match="computeMode is ExclusiveProcess, baseline Default"):
        node.state.unprepare(ref(UID))


def test_unprepare_in_use_mig_errors_then_retry_succeeds(node_factory: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "1g.5gb", 3, 1))
    node.state.prepare(ref(UID))
    mig_uuid = node.store.read().spec.preparedClaims[UID].mig.devices[0].uuid
    node.sim.set_processes(mig_uuid, 1)
    with pytest.raises(ClaimError, match="NVML_ERROR_IN_USE"):
        node.state.unprepare(ref(UID))
    node.sim.set_processes(mig_uuid, 0)
    node.state.unprepare(ref(UID))
    assert gpu_instances(node, 1) == []


def test_garbage_collection_unprepares_deallocated_claims(node_factory: Any) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "1g.5gb", 0, 1))
    node.allocate(UID2, gpu_allocation(UID2, node.gpu(0)))
    node.state.prepare(ref(UID))
    node.state.prepare(ref(UID2))
    node.store.deallocate(UID)
    assert node.state.garbage_collect() == [UID]
    assert gpu_instances(node, 1) == []
    assert set(node.store.read().spec.preparedClaims) == {UID2}


def test_baseline_is_what_the_gpu_had_not_a_default(node_factory: Any) -> None:
    node = node_factory("T4")
    node.sim.gpus[0].compute_mode = 2  # the admin keeps this GPU Prohibited between workloads
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), share={"compute": 50}))
    node.state.prepare(ref(UID))
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.ExclusiveProcess
    node.state.unprepare(ref(UID))  # verification compares with Prohibited, and passes
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.Prohibited


def test_garbage_collection_leaves_handle_claims_alone(node_factory: Any) -> None:
    node = node_factory("T4")
    handle = json.dumps(gpu_allocation(UID, node.gpu(0)))
    node.state.prepare(ClaimRef(UID, "default", "claim", handle))  # never in the NAS
    assert node.state.garbage_collect() == []
    assert node.state.checkpoint.get(UID) is not None


def test_nas_gone_is_a_claim_error_not_a_crash(node_factory: Any) -> None:
    node = node_factory("T4")
    node.store.obj = None  # the NAS was deleted under the plugin
    with pytest.raises(ClaimError, match="NodeAllocationState drasat/gpu-node-1 not found"):
        node.state.prepare(ref(UID))
    with pytest.raises(ClaimError, match=r"unprepare .* not found"):
        node.state.unprepare(ref(UID))


def test_nvml_failure_while_planning_is_a_claim_error(node_factory: Any) -> None:
    import pynvml

    node = node_factory("2xA100-40GB,mig=1")
    node.lib._profiles.clear()  # force a fresh read of the profiles
    node.sim.inject_fault("nvmlDeviceGetHandleByUUID", pynvml.NVML_ERROR_GPU_IS_LOST)
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "1g.5gb", 0, 1))
    with pytest.raises(ClaimError, match="NVML_ERROR_GPU_IS_LOST"):
        node.state.prepare(ref(UID))


@pytest.mark.parametrize("private_shm", [False, True], ids=["direct", "unshare"])
def test_mps_daemon_that_cannot_start_rolls_back(node_factory: Any, private_shm: bool) -> None:
    from drasat.nodeplugin import mps

    node = node_factory("T4")
    # No nvidia-cuda-mps-control on this machine: run directly, or (as on a GPU host) inside
    # `unshare`, which fails or finds no program; either way the prepare names the program.
    node.state.mps.runner = mps.ProcessRunner(private_shm=private_shm, start_timeout_s=5)
    node.allocate(UID, gpu_allocation(UID, node.gpu(0), sharing={"strategy": "MPS"}))
    with pytest.raises(ClaimError, match=r"MPS: .*nvidia-cuda-mps-control"):
        node.state.prepare(ref(UID))
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.Default
    assert node.state.mps.names() == []
    assert node.state.checkpoint.get(UID) is None


def test_unexpected_error_still_leaves_nothing_half_made(
    node_factory: Any, monkeypatch: Any
) -> None:
    node = node_factory("2xA100-40GB,mig=1")
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "4g.20gb", 0, 4))

    def broken(*args: Any) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(node.state.cdi, "write", broken)
    with pytest.raises(ClaimError, match="internal error: RuntimeError"):
        node.state.prepare(ref(UID))
    assert gpu_instances(node, 1) == []


def test_concurrent_share_claims_on_one_gpu_keep_the_count(node_factory: Any) -> None:
    from concurrent import futures

    node = node_factory("A100-40GB")
    uids = [f"share-{i}" for i in range(16)]
    for uid in uids:
        node.allocate(uid, gpu_allocation(uid, node.gpu(0), share={"compute": 5}))
    with futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda u: node.state.prepare(ref(u)), uids))
        hold = node.state.checkpoint.data.settings[node.gpu(0)]["computeMode"]
        assert sorted(hold.holders) == sorted(uids)
        list(pool.map(lambda u: node.state.unprepare(ref(u)), uids))
    assert node.state.checkpoint.data.settings == {}
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.Default
