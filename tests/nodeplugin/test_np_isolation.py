"""Tenants kept apart on a node (issue 23 items 1 and 2): who may change a GPU, and what MPS shares.

The rule (docs/NODEPLUGIN.md, "Isolation"):

- device initialisation (`lifecycle`: power limit, locked clocks, compute mode, time-slice,
  persistence) is the cluster's: a DeviceClass config or the AllocationPolicy, never a claim's
  own config, which is refused naming the entry;
- every such setting is GPU-wide, so even the cluster's is applied only to a GPU the claim holds
  whole and alone: never to the parent of a MIG slice, never to a GPU holding shares;
- a share's sharing is MPS (time-slicing is a GPU-wide setting a share may not make);
- MPS state is the claim's own (its own control daemon, pipe and shared-memory folders), but
  shares, which the hardware makes use one MPS server per GPU, share it with the shares of
  their own namespace only; the daemon enforces the limits (its per-client defaults, set through
  its control interface), the MPS programs are not given to containers.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from npfixtures import (
    NODE,
    V1,
    Claims,
    Node,
    gpu_allocation,
    gpu_instances,
    make_node,
    ref,
    v1_claim,
)

from drasat.nodeplugin import mps
from drasat.nodeplugin.devicelib import ComputeMode
from drasat.nodeplugin.state import ClaimError
from drasat.testbed import fakedriver

POWER_LIMIT = {"action": "setPowerLimitWatts", "value": 200}
LOCKED_CLOCKS = {"action": "lockGpuClocksMHz", "value": 210}


def _drasat(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": "gpu.drasat.io/v1alpha1", "kind": "GpuConfig", **fields}


def _config(parameters: dict[str, Any], source: str = "FromClaim", **more: Any) -> dict[str, Any]:
    return {
        "source": source,
        "opaque": {"driver": "gpu.drasat.io", "parameters": parameters},
        **more,
    }


def _share(claim: dict[str, Any], compute: int, memory: str) -> dict[str, Any]:
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    uid = claim["metadata"]["uid"]
    result.update(
        shareID=f"share-{uid}", consumedCapacity={"compute": str(compute), "memory": memory}
    )
    return claim


def _env(node: Node, uid: str) -> dict[str, str]:
    spec = json.loads(node.state.cdi.path(uid).read_text())
    return dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])


def _mounts(node: Node, uid: str) -> dict[str, str]:
    spec = json.loads(node.state.cdi.path(uid).read_text())
    edits = spec["devices"][0]["containerEdits"]
    return {m["containerPath"]: m["hostPath"] for m in edits.get("mounts", [])}


def _power_and_clocks(node: Node, index: int) -> tuple[int | None, int | None]:
    settings = node.lib.settings(node.gpu(index))
    return settings.power_limit_watts, settings.locked_clocks_mhz


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


# -- 23.1: device initialisation is the cluster's, and only on a GPU held whole and alone ----------


def test_a_slices_own_config_cannot_set_the_power_limit_under_another_tenant(mig_node: Any) -> None:
    node, claims, v1 = mig_node
    claims.add(v1_claim("b-3g", ("mig", NODE, "gpu-1-mig-3g20gb-9-4"), namespace="team-b"))
    assert v1.prepare(("b-3g", "claim"), namespace="team-b")["b-3g"].error == ""
    hostile = _drasat(lifecycle=[POWER_LIMIT, LOCKED_CLOCKS])
    claims.add(
        v1_claim(
            "a-1g",
            ("mig", NODE, "gpu-1-mig-1g5gb-19-0"),
            namespace="team-a",
            config=[_config(hostile)],
        )
    )
    error = v1.prepare(("a-1g", "claim"), namespace="team-a")["a-1g"].error
    assert (
        "status.allocation.devices.config[0] (source FromClaim): opaque.parameters.lifecycle"
        in error
    )
    assert "the cluster's" in error
    assert _power_and_clocks(node, 1) == (300, None)  # the A100's own power limit, clocks free
    assert node.state.checkpoint.get("a-1g") is None
    assert gpu_instances(node, 1) == [(4, 4)]  # team-b's 3g.20gb runs on
    assert node.state.checkpoint.get("b-3g") is not None


def test_a_whole_gpus_own_config_cannot_set_the_power_limit_either(a100: Any) -> None:
    node, claims, v1 = a100
    claims.add(
        v1_claim("w1", ("gpu", NODE, "gpu-0"), config=[_config(_drasat(lifecycle=[POWER_LIMIT]))])
    )
    error = v1.prepare(("w1", "claim"))["w1"].error
    assert "opaque.parameters.lifecycle" in error and "source FromClaim" in error
    assert _power_and_clocks(node, 0) == (300, None)


def test_the_class_lifecycle_applies_to_an_exclusive_whole_gpu(a100: Any) -> None:
    node, claims, v1 = a100
    config = _config(_drasat(lifecycle=[POWER_LIMIT, LOCKED_CLOCKS]), source="FromClass")
    claims.add(v1_claim("w2", ("gpu", NODE, "gpu-0"), config=[config]))
    assert v1.prepare(("w2", "claim"))["w2"].error == ""
    assert _power_and_clocks(node, 0) == (200, 210)
    assert v1.unprepare("w2")["w2"].error == ""
    assert _power_and_clocks(node, 0) == (300, None)


def test_the_class_lifecycle_never_reaches_the_parent_of_a_slice(mig_node: Any) -> None:
    node, claims, v1 = mig_node
    config = _config(_drasat(lifecycle=[POWER_LIMIT, LOCKED_CLOCKS]), source="FromClass")
    claims.add(v1_claim("s1", ("mig", NODE, "gpu-1-mig-1g5gb-19-0"), config=[config]))
    assert v1.prepare(("s1", "claim"))["s1"].error == ""
    assert _power_and_clocks(node, 1) == (300, None)
    assert not [s for s in node.state.checkpoint.get("s1").applied if s.kind == "hold"]


def test_shares_with_different_class_lifecycles_do_not_block_each_other(a100: Any) -> None:
    # On main the first share's power limit held the GPU and the second share was refused.
    node, claims, v1 = a100
    for uid, watts in (("p1", 250), ("p2", 200)):
        config = _config(
            _drasat(lifecycle=[{"action": "setPowerLimitWatts", "value": watts}]),
            source="FromClass",
        )
        claims.add(
            _share(v1_claim(uid, ("share", NODE, "gpu-0"), name=uid, config=[config]), 30, "8Gi")
        )
    answers = v1.prepare(("p1", "p1"), ("p2", "p2"))
    assert {uid: a.error for uid, a in answers.items()} == {"p1": "", "p2": ""}
    assert _power_and_clocks(node, 0) == (300, None)


def test_a_share_may_not_set_the_gpus_time_slice(a100: Any) -> None:
    node, claims, v1 = a100
    sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}}
    claim = v1_claim("ts", ("share", NODE, "gpu-0"), config=[_config(_drasat(sharing=sharing))])
    claims.add(_share(claim, 30, "8Gi"))
    error = v1.prepare(("ts", "claim"))["ts"].error
    assert f"the claim is a share of {node.gpu(0)}" in error and "TimeSlicing" in error
    assert node.sim.gpus[0].time_slice == 0
    assert node.state.checkpoint.get("ts") is None


def test_a_classic_share_may_not_set_the_gpus_time_slice_either(a100: Any) -> None:
    # One rule for both kubelet generations: a classic share asking for TimeSlicing set the
    # whole GPU's time-slice (the refusal was the v1 translation's only).
    node, _, _ = a100
    sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}}
    share = {"compute": 30, "memory": "8Gi"}
    node.allocate("ts-1", gpu_allocation("ts-1", node.gpu(0), sharing=sharing, share=share))
    with pytest.raises(ClaimError, match=f"the claim is a share of {node.gpu(0)}.*TimeSlicing"):
        node.state.prepare(ref("ts-1"))
    assert (node.sim.gpus[0].time_slice, node.sim.gpus[0].compute_mode) == (0, 0)
    assert node.state.checkpoint.get("ts-1") is None
    assert not node.daemons()


def test_the_policys_lifecycle_is_not_applied_to_a_slices_parent(node_factory: Any) -> None:
    # The classic path: the solver copies the policy's init actions into every allocation.
    node = node_factory("2xA100-40GB,mig=1")
    device = {"profile": "1g.5gb", "parentUUID": node.gpu(1), "placement": {"start": 0, "size": 1}}
    allocation = {
        "claimInfo": {"namespace": "default", "name": "claim", "uid": "mig-1"},
        "mig": {"devices": [device]},
        "lifecycle": [POWER_LIMIT, LOCKED_CLOCKS],
    }
    node.allocate("mig-1", allocation)
    node.state.prepare(ref("mig-1"))
    assert _power_and_clocks(node, 1) == (300, None)
    shared = gpu_allocation("sh-1", node.gpu(0), share={"compute": 50}, lifecycle=[POWER_LIMIT])
    node.allocate("sh-1", shared)
    node.state.prepare(ref("sh-1"))
    assert _power_and_clocks(node, 0) == (300, None)


# -- 23.2: MPS state per claim (shares: per namespace), limits in the daemon -----------------------


def test_shares_of_another_namespace_do_not_join_a_gpus_mps_server(a100: Any) -> None:
    node, claims, v1 = a100
    claims.add(_share(v1_claim("ns-a", ("share", NODE, "gpu-0"), namespace="team-a"), 30, "8Gi"))
    claims.add(_share(v1_claim("ns-b", ("share", NODE, "gpu-0"), namespace="team-b"), 30, "8Gi"))
    assert v1.prepare(("ns-a", "claim"), namespace="team-a")["ns-a"].error == ""
    error = v1.prepare(("ns-b", "claim"), namespace="team-b")["ns-b"].error
    assert f"GPU {node.gpu(0)} runs the MPS server of namespace team-a's shares" in error
    assert node.state.checkpoint.get("ns-b") is None
    (name,) = node.daemons()
    assert node.state.mps.users(name) == {"ns-a"}


def test_mps_claims_get_their_own_daemon_and_folders(mig_node: Any) -> None:
    node, claims, v1 = mig_node
    sharing = _drasat(sharing={"strategy": "MPS"})
    for uid, device in (("m-a", "gpu-1-mig-3g20gb-9-4"), ("m-b", "gpu-1-mig-3g20gb-9-0")):
        claims.add(v1_claim(uid, ("mig", NODE, device), name=uid, config=[_config(sharing)]))
        assert v1.prepare((uid, uid))[uid].error == ""
    assert len(node.daemons()) == 2
    a, b = _mounts(node, "m-a"), _mounts(node, "m-b")
    assert set(a) == set(b) == {mps.CONTAINER_PIPE_DIR, mps.CONTAINER_SHM_DIR}
    assert not set(a.values()) & set(b.values())  # nothing of one claim's MPS is the other's


def test_the_daemon_enforces_the_claims_limits(mig_node: Any) -> None:
    node, claims, v1 = mig_node
    config = _drasat(
        sharing={
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 40,
                "defaultPinnedDeviceMemoryLimit": "2Gi",
            },
        }
    )
    claims.add(v1_claim("lim", ("mig", NODE, "gpu-1-mig-3g20gb-9-4"), config=[_config(config)]))
    assert v1.prepare(("lim", "claim"))["lim"].error == ""
    (name,) = node.daemons()
    (device,) = node.daemons()[name]
    manager = node.state.mps
    assert manager.query(name, "get_default_active_thread_percentage") == "40"
    assert manager.query(name, f"get_default_device_pinned_mem_limit {device}") == "2048M"
    env = _env(node, "lim")
    # nothing for the tenant to loosen: the limits live in the daemon, not in the environment
    assert not {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"} & set(env)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == mps.CONTAINER_PIPE_DIR


def test_a_namespaces_shares_of_different_sizes_under_one_daemon(a100: Any) -> None:
    node, claims, v1 = a100
    claims.add(_share(v1_claim("big", ("share", NODE, "gpu-0"), name="big"), 60, "16Gi"))
    claims.add(_share(v1_claim("small", ("share", NODE, "gpu-0"), name="small"), 20, "4Gi"))
    answers = v1.prepare(("small", "small"), ("big", "big"))
    assert {uid: a.error for uid, a in answers.items()} == {"small": "", "big": ""}
    (name,) = node.daemons()
    manager = node.state.mps
    # the daemon bounds every client of the namespace by its largest share on the GPU ...
    assert manager.query(name, "get_default_active_thread_percentage") == "60"
    assert manager.query(name, f"get_default_device_pinned_mem_limit {node.gpu(0)}") == "16384M"
    # ... and each share's clients get their own part on top (binding within the namespace)
    assert node.mps_limits("small") == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "20",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096M",
    }
    assert node.mps_limits("big")["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "60"


def test_the_daemons_limits_survive_its_restart(node_factory: Any) -> None:
    node = node_factory("T4")
    node.allocate("one", gpu_allocation("one", node.gpu(0), share={"compute": 50, "memory": "4Gi"}))
    node.state.prepare(ref("one"))
    ((name, daemon),) = node.state.mps.running().items()
    os.kill(daemon.pid, signal.SIGKILL)
    while mps.start_time(daemon.pid) is not None:
        time.sleep(0.02)
    restarted = node.restart()
    assert any("): restarted: it was not running" in line for line in restarted.state.reconcile())
    assert restarted.state.mps.query(name, "get_default_active_thread_percentage") == "50"
    limit = f"get_default_device_pinned_mem_limit {node.gpu(0)}"
    assert restarted.state.mps.query(name, limit) == "4096M"


def test_the_mps_programs_are_not_given_to_containers(node_factory: Any, short_tmp: Path) -> None:
    root = fakedriver.make(short_tmp / "drv")
    node = node_factory("T4", driver_root=str(root), proc_root=root / "proc")
    node.allocate("c1", gpu_allocation("c1", node.gpu(0), share={"compute": 50}))
    node.state.prepare(ref("c1"))
    spec = json.loads(node.state.cdi.path("c1").read_text())
    mounted = {m["containerPath"] for m in spec["containerEdits"]["mounts"]}
    assert "/usr/bin/nvidia-smi" in mounted
    assert not {p for p in mounted if "nvidia-cuda-mps" in p}


def test_a_refused_share_leaves_the_gpu_as_it_was(node_factory: Any) -> None:
    node = node_factory("T4")
    node.allocate("one", gpu_allocation("one", node.gpu(0), share={"compute": 50}))
    node.state.prepare(ref("one"))
    other = gpu_allocation("two", node.gpu(0), share={"compute": 20})
    other["claimInfo"]["namespace"] = "elsewhere"
    node.allocate("two", other)
    with pytest.raises(ClaimError, match="namespace default's shares"):
        node.state.prepare(ref("two", namespace="elsewhere"))
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.ExclusiveProcess
    node.state.unprepare(ref("one"))
    assert node.lib.settings(node.gpu(0)).compute_mode is ComputeMode.Default
    assert node.daemons() == {}


# -- property: whatever tenants ask, in any order --------------------------------------------------

_KINDS = ("whole", "share", "mig", "mig-mps")
_OPS = st.lists(
    st.tuples(
        st.sampled_from(("prepare", "unprepare")),
        st.integers(0, 5),  # claim
        st.sampled_from(_KINDS),
        st.sampled_from(("team-a", "team-b")),
        st.integers(0, 6),  # MIG start
    ),
    max_size=10,
)
_ACCEPTED = ("runs the MPS server of namespace", "overlaps MIG device")


def _tenant_allocation(node: Node, uid: str, kind: str, namespace: str, start: int) -> Any:
    lifecycle = [POWER_LIMIT, LOCKED_CLOCKS]  # the policy's, copied into every allocation
    info = {"namespace": namespace, "name": uid, "uid": uid}
    if kind == "whole":
        return {
            "claimInfo": info,
            "gpu": {"devices": [{"uuid": node.gpu(0)}]},
            "lifecycle": lifecycle,
        }
    if kind == "share":
        share = {"compute": 20, "memory": "4Gi"}
        gpu = {"devices": [{"uuid": node.gpu(0)}]}
        return {"claimInfo": info, "gpu": gpu, "share": share, "lifecycle": lifecycle}
    device = {
        "profile": "1g.5gb",
        "parentUUID": node.gpu(1),
        "placement": {"start": start, "size": 1},
    }
    mig: dict[str, Any] = {"devices": [device]}
    if kind == "mig-mps":
        mig["sharing"] = {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}}
    return {"claimInfo": info, "mig": mig, "lifecycle": lifecycle}


@settings(max_examples=12, deadline=None)
@given(ops=_OPS)
def test_no_tenant_reaches_another(ops: list[Any]) -> None:
    """Any sequence of claims (an exclusive GPU, shares of it, MIG slices with and without MPS)
    from two namespaces, each with the policy's power limit and locked clocks: a GPU leaves its
    300 W / free clocks only while one claim holds it whole; every MPS daemon, and every pipe and
    shared-memory folder a container mounts, serves one namespace, and more than one claim only
    when they are shares; after the last unprepare the node is as it was."""
    root = Path(tempfile.mkdtemp(prefix="np-", dir="/tmp"))
    node = make_node(root, "2xA100-40GB,mig=1")
    prepared: dict[str, tuple[str, str]] = {}  # uid -> (kind, namespace)
    try:
        for op, claim, kind, namespace, start in ops:
            uid = f"t{claim}"
            if op == "unprepare":
                if uid in prepared:
                    node.state.unprepare(ref(uid, name=uid, namespace=prepared.pop(uid)[1]))
                    node.store.deallocate(uid)
                continue
            kinds = {k for k, _ in prepared.values()}
            if (
                uid in prepared
                or (kind == "whole" and kinds & {"share", "whole"})
                or (kind == "share" and "whole" in kinds)
            ):
                continue  # an allocator never gives a GPU whole and in shares at once
            node.allocate(uid, _tenant_allocation(node, uid, kind, namespace, start))
            try:
                node.state.prepare(ref(uid, name=uid, namespace=namespace))
                prepared[uid] = (kind, namespace)
            except ClaimError as error:
                assert any(reason in str(error) for reason in _ACCEPTED), error
                node.store.deallocate(uid)
            _check_isolation(node, prepared)
        for uid, (_, namespace) in list(prepared.items()):
            node.state.unprepare(ref(uid, name=uid, namespace=namespace))
        assert node.daemons() == {}
        for index in (0, 1):
            assert _power_and_clocks(node, index) == (300, None)
            assert node.lib.settings(node.gpu(index)).compute_mode is ComputeMode.Default
    finally:
        mps.stop_simulated()
        shutil.rmtree(root, ignore_errors=True)


def _check_isolation(node: Node, prepared: dict[str, tuple[str, str]]) -> None:
    whole = [uid for uid, (kind, _) in prepared.items() if kind == "whole"]
    assert _power_and_clocks(node, 0) == ((200, 210) if whole else (300, None))
    assert _power_and_clocks(node, 1) == (300, None)  # the MIG GPU: never one claim's alone
    for name in node.daemons():
        users = node.state.mps.users(name)
        assert len({prepared[u][1] for u in users}) == 1, users
        assert len(users) == 1 or all(prepared[u][0] == "share" for u in users), users
    mounted: dict[str, set[str]] = {}
    for uid in prepared:
        for host in _mounts(node, uid).values() if node.state.cdi.path(uid).exists() else ():
            mounted.setdefault(host, set()).add(uid)
    for host, users in mounted.items():
        assert len({prepared[u][1] for u in users}) == 1, (host, users)
        assert len(users) == 1 or all(prepared[u][0] == "share" for u in users), (host, users)


# Shares prepared on one GPU hold no more of it than it has: the MPS limits the plugin sets add
# up to at most the GPU's compute and memory (`shares.overcommitted`, the sums the allocator
# places by). An allocation that says otherwise (two allocators, a stale ledger) is refused
# here rather than run two tenants past the GPU.
@pytest.mark.parametrize(
    ("first", "second", "why"),
    [
        ({"memory": "12Gi"}, {"memory": "12Gi"}, "memory 24576 MiB of 15360 MiB"),
        ({"compute": 60}, {"compute": 60}, "compute 120% of 100%"),
    ],
)
def test_a_share_past_what_the_gpu_has_beside_those_prepared_is_refused(
    node_factory: Any, first: dict[str, Any], second: dict[str, Any], why: str
) -> None:
    node = node_factory("T4")
    node.allocate("one", gpu_allocation("one", node.gpu(0), share=first))
    node.state.prepare(ref("one"))
    node.allocate("two", gpu_allocation("two", node.gpu(0), share=second))
    with pytest.raises(ClaimError, match=rf"claims default/claim \(one\).*{why}"):
        node.state.prepare(ref("two"))
    assert node.state.checkpoint.get("two") is None
    (name,) = node.daemons()
    assert node.state.mps.users(name) == {"one"}
    # What fits beside it is prepared.
    node.allocate("three", gpu_allocation("three", node.gpu(0), share={"memory": "3Gi"}))
    node.state.prepare(ref("three"))


def test_a_v1_share_past_what_the_gpu_has_is_refused(a100: Any) -> None:
    _, claims, v1 = a100
    claims.add(_share(v1_claim("big", ("share", NODE, "gpu-0"), name="big"), 60, "16Gi"))
    claims.add(_share(v1_claim("more", ("share", NODE, "gpu-0"), name="more"), 50, "4Gi"))
    assert v1.prepare(("big", "big"))["big"].error == ""
    error = v1.prepare(("more", "more"))["more"].error
    assert "compute 110% of 100%" in error and "default/big (big)" in error
