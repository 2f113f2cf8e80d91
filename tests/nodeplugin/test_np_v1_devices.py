"""The v1 prepare of every kind of device and of opaque configuration.

MIG placement devices are created at exactly the placement their name gives; a share
(`consumedCapacity` below the GPU's whole) gets its limits under MPS; a result that consumed the
whole GPU is exclusive; `cpu-fallback` prepares to the classic optional claim without devices;
drasat's GpuConfig and NVIDIA's GpuConfig/MigDeviceConfig become the claim's sharing. All of it
through the classic preparer: same checkpoint, rollback and idempotence.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from npfixtures import NODE, V1, Claims, Node, gpu_instances, v1_claim

from drasat.nodeplugin.devicelib import ComputeMode

CDI_KIND = "k8s.gpu.drasat.io/claim"
MiB = 2**20


def _env(node: Node, uid: str) -> dict[str, str]:
    spec = json.loads((node.config.cdi_root / f"k8s.gpu.drasat.io-claim_{uid}.json").read_text())
    device = spec["devices"][0]  # the whole claim's (each allocated device follows)
    return dict(e.split("=", 1) for e in device["containerEdits"]["env"])


def _devices(answer: Any) -> list[tuple[list[str], str, str, list[str], str]]:
    return [
        (list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids), d.share_id)
        for d in answer.devices
    ]


def _config(parameters: dict[str, Any], source: str = "FromClaim", **more: Any) -> dict[str, Any]:
    return {
        "source": source,
        "opaque": {"driver": "gpu.drasat.io", "parameters": parameters},
        **more,
    }


@pytest.fixture
def mig_node(node_factory: Any) -> tuple[Node, Claims, V1]:
    node = node_factory("2xA100-40GB,mig=1")
    claims = Claims()
    return node, claims, V1(node, claims)


@pytest.fixture
def a100(node_factory: Any) -> tuple[Node, Claims, V1]:
    node = node_factory("2xA100-40GB")
    claims = Claims()
    return node, claims, V1(node, claims)


def test_mig_devices_are_created_at_the_placements_of_their_names(mig_node: Any) -> None:
    node, claims, v1 = mig_node
    names = ["gpu-1-mig-1g5gb-19-6", "gpu-1-mig-3g20gb-9-0", "gpu-1-mig-2g10gb-14-4"]
    claims.add(v1_claim("m1", *[(f"mig-{i}", NODE, n) for i, n in enumerate(names)]))
    answer = v1.prepare(("m1", "claim"))["m1"]
    assert answer.error == ""
    assert [d[2] for d in _devices(answer)] == names
    assert gpu_instances(node, 1) == [(0, 4), (4, 2), (6, 1)]
    prepared = node.store.read().spec.preparedClaims["m1"].mig
    assert prepared is not None
    placed = [(d.profile, d.placement.start, d.placement.size) for d in prepared.devices]
    assert placed == [("1g.5gb", 6, 1), ("3g.20gb", 0, 4), ("2g.10gb", 4, 2)]
    visible = _env(node, "m1")["DRASAT_GPU_UUIDS"].split(",")
    assert visible == [d.uuid for d in prepared.devices]
    writes = node.store.writes
    assert v1.prepare(("m1", "claim"))["m1"] == answer  # idempotent
    assert node.store.writes == writes
    assert v1.unprepare("m1")["m1"].error == ""
    assert gpu_instances(node, 1) == []
    assert node.state.checkpoint.records() == []


def test_a_placement_overlapping_one_in_use_fails_naming_it(mig_node: Any) -> None:
    node, claims, v1 = mig_node
    claims.add(v1_claim("m2", ("mig", NODE, "gpu-1-mig-3g20gb-9-4"), name="first"))
    claims.add(v1_claim("m3", ("mig", NODE, "gpu-1-mig-2g10gb-14-4"), name="second"))
    assert v1.prepare(("m2", "first"))["m2"].error == ""
    error = v1.prepare(("m3", "second"))["m3"].error
    assert "MIG 2g.10gb at start 4 size 2" in error
    assert "overlaps MIG device gpu-1-mig-3g20gb-9-4 (3g.20gb at start 4 size 4" in error
    assert "in use by claim default/first (m2)" in error
    assert gpu_instances(node, 1) == [(4, 4)]
    assert node.state.checkpoint.get("m3") is None


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("gpu-1-mig-1g5gb-19-7", "MIG device gpu-1-mig-1g5gb-19-7 is not on node gpu-node-1"),
        ("gpu-1-mig-2g10gb-19-0", "MIG device gpu-1-mig-2g10gb-19-0 is not on node"),
        ("gpu-0-mig-1g5gb-19-0", "GPU gpu-0 GPU-"),  # ... not in MIG mode
        ("gpu-5-mig-1g5gb-19-0", "device gpu-5-mig-1g5gb-19-0 is not on node gpu-node-1"),
    ],
)
def test_mig_devices_the_node_does_not_offer(mig_node: Any, device: str, message: str) -> None:
    node, claims, v1 = mig_node
    claims.add(v1_claim("m4", ("mig", NODE, device)))
    error = v1.prepare(("m4", "claim"))["m4"].error
    assert message in error
    assert node.state.checkpoint.records() == []


def test_whole_gpu_beside_mig_device_in_one_claim_is_refused(mig_node: Any) -> None:
    _, claims, v1 = mig_node
    claims.add(v1_claim("m5", ("a", NODE, "gpu-0"), ("b", NODE, "gpu-1-mig-1g5gb-19-0")))
    error = v1.prepare(("m5", "claim"))["m5"].error
    assert "whole GPU gpu-0 and MIG device gpu-1-mig-1g5gb-19-0 in one claim" in error


def test_shares_get_their_limits_under_mps(a100: Any) -> None:
    node, claims, v1 = a100
    for uid, compute, memory in (("s1", "30", "8Gi"), ("s2", "70", "16Gi")):
        claim = v1_claim(uid, ("share", NODE, "gpu-0"), name=uid)
        result = claim["status"]["allocation"]["devices"]["results"][0]
        result.update(
            shareID=f"share-{uid}", consumedCapacity={"memory": memory, "compute": compute}
        )
        claims.add(claim)
    answers = v1.prepare(("s1", "s1"), ("s2", "s2"))
    assert _devices(answers["s1"]) == [
        (["share"], NODE, "gpu-0", [f"{CDI_KIND}=s1-gpu-0"], "share-s1")
    ]
    assert list(node.daemons().values()) == [(node.gpu(0),)]  # one daemon for both shares
    assert node.mps_limits("s1") == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8192M",
    }
    assert node.mps_limits("s2")["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "70"
    env = _env(node, "s1")
    assert env["DRASAT_GPU_SHARE_COMPUTE"] == "30"
    assert env["DRASAT_GPU_SHARE_MEMORY"] == str(8 * 2**30)
    assert env["DRASAT_GPU_UUIDS"] == node.gpu(0)
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.ExclusiveProcess
    done = v1.unprepare("s1", "s2")
    assert {uid: answer.error for uid, answer in done.items()} == {"s1": "", "s2": ""}
    assert node.daemons() == {}
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.Default


@pytest.mark.parametrize("compute", ["100", "0"])
def test_a_result_that_consumed_the_whole_gpu_is_exclusive(a100: Any, compute: str) -> None:
    node, claims, v1 = a100
    whole = node.state.gpus()[0].memory_bytes // MiB * MiB
    claim = v1_claim("x1", ("gpu", NODE, "gpu-0"))
    result = claim["status"]["allocation"]["devices"]["results"][0]
    result.update(shareID="abc", consumedCapacity={"memory": str(whole), "compute": compute})
    claims.add(claim)
    answer = v1.prepare(("x1", "claim"))["x1"]
    assert answer.error == "" and answer.devices[0].share_id == "abc"
    env = _env(node, "x1")
    assert "DRASAT_GPU_SHARE_COMPUTE" not in env and "CUDA_MPS_PIPE_DIRECTORY" not in env
    assert node.daemons() == {}
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.Default


def test_a_share_without_compute_limits_only_memory(a100: Any) -> None:
    node, claims, v1 = a100
    claim = v1_claim("s3", ("share", NODE, "gpu-1"))
    result = claim["status"]["allocation"]["devices"]["results"][0]
    result.update(shareID="x", consumedCapacity={"memory": "4Gi", "compute": "0"})
    claims.add(claim)
    assert v1.prepare(("s3", "claim"))["s3"].error == ""
    assert node.mps_limits("s3") == {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096M"}


def test_cpu_fallback_prepares_to_the_optional_claim_without_devices(a100: Any) -> None:
    node, claims, v1 = a100
    claims.add(v1_claim("f1", ("gpu-or-cpu/cpu", NODE, "cpu-fallback")))
    answer = v1.prepare(("f1", "claim"))["f1"]
    assert _devices(answer) == [
        (["gpu-or-cpu"], NODE, "cpu-fallback", [f"{CDI_KIND}=f1-cpu-fallback"], "")
    ]
    env = _env(node, "f1")
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void" and "DRASAT_GPU_UUIDS" not in env
    assert env["DRASAT_GPU_ALLOCATED"] == "false" and env["DRASAT_GPU_COUNT"] == "0"
    spec = json.loads((node.config.cdi_root / "k8s.gpu.drasat.io-claim_f1.json").read_text())
    assert "deviceNodes" not in spec["devices"][0]["containerEdits"]
    assert v1.unprepare("f1")["f1"].error == ""
    assert list(node.config.cdi_root.glob("*.json")) == []


def test_cpu_fallback_beside_a_gpu_adds_nothing(a100: Any) -> None:
    node, claims, v1 = a100
    claims.add(v1_claim("f2", ("gpu", NODE, "gpu-1"), ("maybe/cpu", NODE, "cpu-fallback")))
    answer = v1.prepare(("f2", "claim"))["f2"]
    assert [d[2] for d in _devices(answer)] == ["gpu-1", "cpu-fallback"]
    assert _env(node, "f2")["DRASAT_GPU_UUIDS"] == node.gpu(1)


TIME_SLICING_LONG = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "GpuConfig",
    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
}


@pytest.mark.parametrize(
    "parameters",
    [
        TIME_SLICING_LONG,
        {
            "apiVersion": "gpu.drasat.io/v1alpha1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}},
        },
    ],
)
def test_time_slicing_config_of_either_group(a100: Any, parameters: dict[str, Any]) -> None:
    node, claims, v1 = a100
    claims.add(v1_claim("t1", ("gpu", NODE, "gpu-0"), config=[_config(parameters)]))
    assert v1.prepare(("t1", "claim"))["t1"].error == ""
    assert node.sim.gpus[0].time_slice == 3
    assert v1.unprepare("t1")["t1"].error == ""
    assert node.sim.gpus[0].time_slice == 0


def test_nvidia_mps_config_on_a_mig_device(mig_node: Any) -> None:
    node, claims, v1 = mig_node
    mps = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "MigDeviceConfig",
        "sharing": {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 50,
                "defaultPinnedDeviceMemoryLimit": "2Gi",
            },
        },
    }
    claims.add(v1_claim("t2", ("mig", NODE, "gpu-1-mig-1g5gb-19-0"), config=[_config(mps)]))
    assert v1.prepare(("t2", "claim"))["t2"].error == ""
    visible = _env(node, "t2")["DRASAT_GPU_UUIDS"]
    assert visible.startswith("MIG-")
    assert list(node.daemons().values()) == [(visible,)]  # the MIG device's own daemon
    ((name, _),) = node.daemons().items()
    assert node.state.mps.query(name, "get_default_active_thread_percentage") == "50"
    limit = node.state.mps.query(name, f"get_default_device_pinned_mem_limit {visible}")
    assert limit == "2048M"
    assert node.mps_limits("t2") == {}  # enforced by the daemon, not the environment
    assert "CUDA_MPS_PIPE_DIRECTORY" in _env(node, "t2")
    assert v1.unprepare("t2")["t2"].error == ""
    assert node.daemons() == {} and gpu_instances(node, 1) == []


def test_the_claims_config_wins_over_the_class_and_applies_to_its_requests(a100: Any) -> None:
    node, claims, v1 = a100
    medium = {
        "apiVersion": "gpu.drasat.io/v1alpha1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Medium"}},
    }
    configs = [
        _config(medium, requests=["other"]),  # not this claim's request: ignored
        _config(TIME_SLICING_LONG, requests=["gpu"]),  # the claim's, for request gpu
        _config(medium, source="FromClass"),  # the class's come first, whatever the list order
    ]
    claims.add(v1_claim("t3", ("gpu/whole", NODE, "gpu-0"), config=configs))
    assert v1.prepare(("t3", "claim"))["t3"].error == ""
    assert node.sim.gpus[0].time_slice == 3  # Long


@pytest.mark.parametrize("share", [None, {"compute": 25}])
def test_drasat_config_class_lifecycle_and_claim_share(a100: Any, share: Any) -> None:
    # Lifecycle is the cluster's (the class's config; a claim's own is refused, test_np_isolation)
    # and applies to a GPU held whole and alone; a claim that asks to run as a share (its own
    # `share` limits, under MPS) gets none of it, as every share.
    node, claims, v1 = a100
    drasat = {"apiVersion": "gpu.drasat.io/v1alpha1", "kind": "GpuConfig"}
    lifecycle = {**drasat, "lifecycle": [{"action": "setPowerLimitWatts", "value": 200}]}
    configs = [_config(lifecycle, source="FromClass")]
    if share is not None:
        configs.append(_config({**drasat, "share": share}))
    claims.add(v1_claim("t4", ("gpu", NODE, "gpu-1"), config=configs))
    assert v1.prepare(("t4", "claim"))["t4"].error == ""
    power = node.lib.settings(node.gpu(1)).power_limit_watts
    assert power == (200 if share is None else 300)
    if share is not None:
        (name,) = node.daemons()
        assert node.state.mps.query(name, "get_default_active_thread_percentage") == "25"
        # the daemon bounds every share of the namespace on the GPU; each share's clients also
        # get their own part in their environment
        assert node.mps_limits("t4") == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25"}
    assert v1.unprepare("t4")["t4"].error == ""
    assert node.daemons() == {}


def test_different_configs_for_the_requests_of_one_claim_are_refused(a100: Any) -> None:
    _, claims, v1 = a100
    configs = [_config(TIME_SLICING_LONG, requests=["a"])]
    claims.add(v1_claim("t5", ("a", NODE, "gpu-0"), ("b", NODE, "gpu-1"), config=configs))
    error = v1.prepare(("t5", "claim"))["t5"].error
    assert "requests a, b have different opaque configurations" in error


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "GpuConfig",
                "sharing": {"strategy": "Fair"},
            },
            "opaque.parameters.sharing.strategy: Input should be 'TimeSlicing' or 'MPS'",
        ),
        (
            {
                "apiVersion": "gpu.drasat.io/v1alpha1",
                "kind": "GpuConfig",
                "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 0}},
            },
            "opaque.parameters.sharing.mpsConfig.defaultActiveThreadPercentage: Input should be "
            "greater than or equal to 1",
        ),
        (
            {"apiVersion": "gpu.drasat.io/v1alpha1", "kind": "GpuConfig", "sharng": {}},
            "opaque.parameters.sharng: unknown field",
        ),
        (
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainConfig"},
            "apiVersion 'resource.nvidia.com/v1beta1' kind 'ComputeDomainConfig' is not a "
            "configuration of this driver",
        ),
        ("TimeSlicing", "opaque.parameters: must be an object, not str"),
    ],
)
def test_a_bad_config_fails_the_claim_naming_the_field(
    a100: Any, parameters: Any, message: str
) -> None:
    node, claims, v1 = a100
    other = {"source": "FromClaim", "opaque": {"driver": "gpu.nvidia.com", "parameters": 1}}
    claims.add(v1_claim("b1", ("gpu", NODE, "gpu-0"), config=[other, _config(parameters)]))
    error = v1.prepare(("b1", "claim"))["b1"].error
    assert "status.allocation.devices.config[1] (source FromClaim): " in error
    assert message in error
    assert node.state.checkpoint.records() == []


# -- shapes the allocator writes (issue 22 item 9) -------------------------------------------------


def _shares(uid: str, *parts: tuple[str, str, str, str]) -> dict[str, Any]:
    """A claim of shares: (request, device, compute, memory) each."""
    claim = v1_claim(uid, *[(request, NODE, device) for request, device, _, _ in parts])
    results = claim["status"]["allocation"]["devices"]["results"]
    for index, (result, (_, _, compute, memory)) in enumerate(zip(results, parts, strict=True)):
        result.update(
            shareID=f"{uid}-{index}", consumedCapacity={"compute": compute, "memory": memory}
        )
    return claim


def test_shares_of_different_memory_in_one_claim_get_each_its_own(a100: Any) -> None:
    node, claims, v1 = a100
    claims.add(_shares("d1", ("a", "gpu-0", "30", "8Gi"), ("b", "gpu-1", "30", "16Gi")))
    assert v1.prepare(("d1", "claim"))["d1"].error == ""
    (name,) = node.daemons()
    manager = node.state.mps
    assert manager.query(name, "get_default_active_thread_percentage") == "30"
    assert manager.query(name, f"get_default_device_pinned_mem_limit {node.gpu(0)}") == "8192M"
    assert manager.query(name, f"get_default_device_pinned_mem_limit {node.gpu(1)}") == "16384M"
    assert v1.unprepare("d1")["d1"].error == ""
    assert node.daemons() == {}


def test_two_shares_of_one_gpu_in_one_claim_add_up(a100: Any) -> None:
    # count: 2 with capacity requests may give a claim two shares of the same GPU
    node, claims, v1 = a100
    claims.add(_shares("d2", ("a", "gpu-0", "20", "4Gi"), ("a", "gpu-0", "20", "4Gi")))
    answer = v1.prepare(("d2", "claim"))["d2"]
    assert answer.error == "" and [d.device_name for d in answer.devices] == ["gpu-0", "gpu-0"]
    (name,) = node.daemons()
    assert node.state.mps.query(name, "get_default_active_thread_percentage") == "40"
    pinned = node.state.mps.query(name, f"get_default_device_pinned_mem_limit {node.gpu(0)}")
    assert pinned == "8192M"


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        (
            (("a", "gpu-0", "20", "8Gi"), ("b", "gpu-1", "60", "8Gi")),
            "shares of one claim take different compute (20% of gpu-0, 60% of gpu-1)",
        ),
        (
            (("a", "gpu-0", "20", "8Gi"), ("b", "gpu-1", "100", str(40 * 2**30))),
            "whole GPU gpu-1 and share gpu-0 in one claim",
        ),
    ],
)
def test_share_shapes_mps_cannot_hold_are_refused(a100: Any, parts: Any, message: str) -> None:
    node, claims, v1 = a100
    claims.add(_shares("d3", *parts))
    assert message in v1.prepare(("d3", "claim"))["d3"].error
    assert node.state.checkpoint.records() == [] and node.daemons() == {}


def test_per_gpu_memory_goes_to_the_daemon_by_uuid_whatever_the_order(a100: Any) -> None:
    # A CUDA index in CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is the client's enumeration order, not the
    # order the claim lists its GPUs: different limits per GPU go to the daemon by UUID only.
    node, claims, v1 = a100
    claims.add(_shares("d4", ("a", "gpu-1", "30", "8Gi"), ("b", "gpu-0", "30", "16Gi")))
    assert v1.prepare(("d4", "claim"))["d4"].error == ""
    (name,) = node.daemons()
    manager = node.state.mps
    assert manager.query(name, f"get_default_device_pinned_mem_limit {node.gpu(1)}") == "8192M"
    assert manager.query(name, f"get_default_device_pinned_mem_limit {node.gpu(0)}") == "16384M"
    assert node.mps_limits("d4") == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30"}


def _own_devices(node: Node, uid: str) -> dict[str, dict[str, Any]]:
    """The claim spec's devices other than the whole claim's, by CDI device name."""
    spec = json.loads((node.config.cdi_root / f"k8s.gpu.drasat.io-claim_{uid}.json").read_text())
    assert spec["devices"][0]["name"] == uid
    return {d["name"]: d["containerEdits"] for d in spec["devices"][1:]}


def _device_env(edits: dict[str, Any]) -> dict[str, str]:
    return dict(e.split("=", 1) for e in edits["env"])


#: The CDI specification's device names: letters, digits, `_`, `-`, `.`, `:`.
CDI_DEVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")


def test_each_mig_device_of_gpu_test4_is_a_cdi_device_of_its_own(mig_node: Any) -> None:
    """gpu-test4: four requests of one claim, one MIG device each; a container that names one
    request gets that device's CDI id only, whose spec exposes that MIG device alone."""
    node, claims, v1 = mig_node
    names = ["gpu-1-mig-1g5gb-19-2", "gpu-1-mig-1g5gb-19-3", "gpu-1-mig-2g10gb-14-0"]
    names.append("gpu-1-mig-3g20gb-9-4")
    requests = ["mig-1g-0", "mig-1g-1", "mig-2g", "mig-3g"]
    claims.add(v1_claim("g4", *[(r, NODE, n) for r, n in zip(requests, names, strict=True)]))
    answer = v1.prepare(("g4", "claim"))["g4"]
    assert answer.error == ""
    assert [(d[0], d[3]) for d in _devices(answer)] == [
        ([r], [f"{CDI_KIND}=g4-{n}"]) for r, n in zip(requests, names, strict=True)
    ]
    own = _own_devices(node, "g4")
    assert sorted(own) == sorted(f"g4-{n}" for n in names)
    assert all(CDI_DEVICE_NAME.fullmatch(name) for name in own)
    prepared = node.store.read().spec.preparedClaims["g4"].mig
    assert prepared is not None
    by_start = {d.placement.start: d.uuid for d in prepared.devices}
    for name in names:
        env = _device_env(own[f"g4-{name}"])
        start = int(name.rsplit("-", 1)[1])
        assert (env["DRASAT_GPU_UUIDS"], env["DRASAT_GPU_COUNT"]) == (by_start[start], "1")
        assert env["DRASAT_CLAIM_UID"] == "g4" and env["DRASAT_GPU_ALLOCATED"] == "true"
        assert [n["path"] for n in own[f"g4-{name}"]["deviceNodes"]][-1] == "/dev/nvidia1"
    # The whole claim's device still has all four (what a container naming no request sees).
    assert _env(node, "g4")["DRASAT_GPU_COUNT"] == "4"
    # Idempotent, and answered from the checkpoint the same way.
    assert v1.prepare(("g4", "claim"))["g4"] == answer
    (record,) = node.state.checkpoint.records()
    assert record.device_cdi == {n: [f"{CDI_KIND}=g4-{n}"] for n in names}
    assert v1.unprepare("g4")["g4"].error == ""
    assert list(node.config.cdi_root.glob("*.json")) == []


def test_devices_of_one_request_each_list_the_whole_request(a100: Any) -> None:
    """CDI environment variables do not add up across devices, so each device of a request says
    every device of that request; another request's device says only its own. MPS edits of the
    claim are on every device."""
    node, claims, v1 = a100
    mps = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "MPS"},
    }
    claims.add(
        v1_claim(
            "r2",
            ("pair", NODE, "gpu-0"),
            ("pair", NODE, "gpu-1"),
            config=[_config(mps)],
        )
    )
    assert v1.prepare(("r2", "claim"))["r2"].error == ""
    own = _own_devices(node, "r2")
    both = f"{node.gpu(0)},{node.gpu(1)}"
    for minor in (0, 1):
        edits = own[f"r2-gpu-{minor}"]
        env = _device_env(edits)
        assert (env["DRASAT_GPU_UUIDS"], env["DRASAT_GPU_COUNT"]) == (both, "2")
        assert "CUDA_MPS_PIPE_DIRECTORY" in env
        mounts = {m["containerPath"] for m in edits["mounts"]}
        assert {"/tmp/nvidia-mps", "/dev/shm"} <= mounts
        nodes = [n["path"] for n in edits["deviceNodes"]]
        assert f"/dev/nvidia{minor}" in nodes and f"/dev/nvidia{1 - minor}" not in nodes
    assert v1.unprepare("r2")["r2"].error == ""


def test_a_record_from_before_per_device_cdi_answers_the_claims_id(a100: Any) -> None:
    """A claim prepared by a plugin that wrote one CDI device per claim (no `device_cdi` in its
    record) is answered with that device, which its spec file still has."""
    node, claims, v1 = a100
    claims.add(v1_claim("old", ("gpu", NODE, "gpu-0")))
    assert v1.prepare(("old", "claim"))["old"].error == ""
    (record,) = node.state.checkpoint.records()
    record.device_cdi = {}
    node.state.checkpoint.put(record)
    (device,) = v1.prepare(("old", "claim"))["old"].devices
    assert list(device.cdi_device_ids) == [f"{CDI_KIND}=old"]
    assert v1.unprepare("old")["old"].error == ""
