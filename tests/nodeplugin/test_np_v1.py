"""The v1/v1beta1 DRAPlugin prepare: the allocation read from the ResourceClaim's results.

The kubelet names the claim (namespace, name, uid); the plugin takes the results of driver
gpu.drasat.io in its node's pool, prepares those whole GPUs with the same checkpointed preparer as
the classic path and answers one Device per result. Anything it cannot prepare is that claim's
error, naming the device, and leaves nothing behind.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from npfixtures import NODE, V1, Claims, Node, v1_claim

from drasat.nodeplugin.checkpoint import ClaimStatus

CDI_KIND = "k8s.gpu.drasat.io/claim"


@pytest.fixture
def two_t4(node_factory: Any) -> tuple[Node, Claims, V1]:
    node = node_factory("T4 x2")
    claims = Claims()
    return node, claims, V1(node, claims)


def _spec_env(node: Node, uid: str) -> dict[str, str]:
    spec = json.loads((node.config.cdi_root / f"k8s.gpu.drasat.io-claim_{uid}.json").read_text())
    device = spec["devices"][0]  # the whole claim's (each allocated device follows)
    return dict(e.split("=", 1) for e in device["containerEdits"]["env"])


def test_whole_gpus_from_the_results_one_device_per_result(two_t4: Any) -> None:
    node, claims, v1 = two_t4
    claims.add(v1_claim("u1", ("a", NODE, "gpu-1"), ("b", NODE, "gpu-0")))
    answer = v1.prepare(("u1", "claim"))["u1"]
    assert answer.error == ""
    devices = [
        (list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids))
        for d in answer.devices
    ]
    assert devices == [
        (["a"], NODE, "gpu-1", [f"{CDI_KIND}=u1-gpu-1"]),
        (["b"], NODE, "gpu-0", [f"{CDI_KIND}=u1-gpu-0"]),
    ]
    env = _spec_env(node, "u1")
    assert env["DRASAT_GPU_UUIDS"] == f"{node.gpu(1)},{node.gpu(0)}"
    assert env["DRASAT_GPU_COUNT"] == "2"
    # Each device's own CDI device: a container naming request "a" gets gpu-1 and nothing else.
    spec = json.loads((node.config.cdi_root / "k8s.gpu.drasat.io-claim_u1.json").read_text())
    own = {d["name"]: d["containerEdits"] for d in spec["devices"][1:]}
    assert sorted(own) == ["u1-gpu-0", "u1-gpu-1"]
    for name, minor in (("u1-gpu-1", 1), ("u1-gpu-0", 0)):
        device_env = dict(e.split("=", 1) for e in own[name]["env"])
        assert (device_env["DRASAT_GPU_UUIDS"], device_env["DRASAT_GPU_COUNT"]) == (
            node.gpu(minor),
            "1",
        )
        assert device_env["DRASAT_CLAIM_UID"] == "u1"
        nodes = [n["path"] for n in own[name]["deviceNodes"]]
        assert f"/dev/nvidia{minor}" in nodes and f"/dev/nvidia{1 - minor}" not in nodes
    (record,) = node.state.checkpoint.records()
    assert (record.uid, record.status, record.source) == (
        "u1",
        ClaimStatus.PrepareCompleted,
        "claim",
    )
    # Idempotent: a second prepare answers the same, and the preparer does nothing again.
    writes = node.store.writes
    assert v1.prepare(("u1", "claim"))["u1"] == answer
    assert node.store.writes == writes
    assert v1.unprepare("u1")["u1"].error == ""
    assert node.state.checkpoint.records() == []
    assert list(node.config.cdi_root.glob("*.json")) == []
    assert v1.unprepare("u1")["u1"].error == ""  # unknown now: done


def test_results_of_other_drivers_and_the_classic_service_are_apart(two_t4: Any) -> None:
    node, claims, v1 = two_t4
    claim = v1_claim("u2", ("gpu", NODE, "gpu-0"))
    other = {"request": "nic", "driver": "nic.example.com", "pool": NODE, "device": "eth0"}
    claim["status"]["allocation"]["devices"]["results"].append(other)
    claims.add(claim)
    (device,) = v1.prepare(("u2", "claim"))["u2"].devices
    assert device.device_name == "gpu-0"
    assert _spec_env(node, "u2")["DRASAT_GPU_UUIDS"] == node.gpu(0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"device": "gpu-7"}, "device gpu-7 is not on node gpu-node-1 (it has: gpu-0, gpu-1)"),
        (
            {"device": "gpu-0-mig-1g5gb-19-0"},
            "MIG device gpu-0-mig-1g5gb-19-0: GPU gpu-0 GPU-",  # ... is not in MIG mode
        ),
        ({"device": "cpu-fallback-2"}, "device cpu-fallback-2 is not on node gpu-node-1"),
        (
            {"consumedCapacity": {"memory": "1Gi", "engines": "1"}},
            "device gpu-node-1/gpu-1: consumedCapacity of unknown capacity engines",
        ),
        ({"adminAccess": True}, "admin access is not supported"),
        ({"pool": "other-node"}, "device other-node/gpu-1 is not in this node's pool gpu-node-1"),
        ({"driver": "gpu.nvidia.com"}, "its allocation has no device of driver gpu.drasat.io"),
    ],
)
def test_what_this_node_cannot_prepare_fails_the_claim_and_leaves_nothing(
    two_t4: Any, change: dict[str, Any], message: str
) -> None:
    node, claims, v1 = two_t4
    claim = v1_claim("u3", ("gpu", NODE, "gpu-1"))
    claim["status"]["allocation"]["devices"]["results"][0].update(change)
    claims.add(claim)
    claims.add(v1_claim("fine", ("gpu", NODE, "gpu-0"), name="fine"))
    answers = v1.prepare(("u3", "claim"), ("fine", "fine"))
    assert message in answers["u3"].error and list(answers["u3"].devices) == []
    assert answers["fine"].error == ""  # the other claim of the call is prepared
    assert [r.uid for r in node.state.checkpoint.records()] == ["fine"]
    assert [p.name for p in node.config.cdi_root.glob("*.json")] == [
        "k8s.gpu.drasat.io-claim_fine.json"
    ]


def test_claim_level_problems(two_t4: Any) -> None:
    node, claims, v1 = two_t4
    unallocated = v1_claim("u4", name="pending")
    del unallocated["status"]
    claims.add(unallocated)
    claims.add(v1_claim("someone-else", ("gpu", NODE, "gpu-0"), name="recreated"))
    config = {
        "source": "FromClaim",
        "requests": [],
        "opaque": {"driver": "gpu.drasat.io", "parameters": {"kind": "GpuConfig"}},
    }
    claims.add(v1_claim("u6", ("gpu", NODE, "gpu-0"), name="configured", config=[config]))
    answers = v1.prepare(
        ("u4", "pending"), ("u5", "recreated"), ("u6", "configured"), ("u7", "missing")
    )
    assert "default/pending (u4) is not allocated" in answers["u4"].error
    assert "has uid someone-else, not the kubelet's" in answers["u5"].error
    assert (
        "status.allocation.devices.config[0] (source FromClaim): opaque.parameters: apiVersion "
        "None kind 'GpuConfig' is not a configuration of this driver"
    ) in answers["u6"].error
    assert "ResourceClaim default/missing not found" in answers["u7"].error
    assert node.state.checkpoint.records() == []


def test_names_that_cannot_be_kubernetes_names_are_not_read(two_t4: Any) -> None:
    _, claims, v1 = two_t4
    answers = v1.prepare(("u8", "../../secrets"), ("", "claim"), ("u9", ""))
    assert "a v1 request names the claim by a Kubernetes namespace and name" in answers["u8"].error
    assert answers[""].error == "claim without a uid"
    assert "Kubernetes namespace and name" in answers["u9"].error
    assert claims.reads == 0


def test_without_api_access_the_claim_error_says_so(node_factory: Any) -> None:
    v1 = V1(node_factory("T4"), None)
    error = v1.prepare(("u1", "claim"))["u1"].error
    assert "cannot read ResourceClaims (the plugin runs without API access" in error
