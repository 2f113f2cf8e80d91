"""What a workload and the node's other users can reach of the node plugin (docs/SECURITY.md):
a claim's CDI spec gives its containers only the claim's own device nodes, never another GPU's
and never the MIG management capabilities (`config`, `monitor`); the plugin's sockets, state
folder and checkpoint files are not open to other users of the node."""

from __future__ import annotations

import json
import shutil
import stat
import tempfile
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
    claim_info,
    gpu_allocation,
    gpu_instances,
    make_node,
    mig_allocation,
    ref,
    v1_claim,
)

from drasat.nodeplugin import driverfiles, mps
from drasat.testbed import fakedriver

#: `/proc/driver/nvidia-caps/mig-minors`'s management capabilities in the fake driver: whoever
#: opens `config` may create and destroy any GPU's MIG devices, `monitor` may watch them all.
MANAGEMENT_CAPS = ("/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _device_nodes(node: Node, uid: str) -> set[str]:
    """Every device node the claim's CDI spec gives a container (the spec-wide edits and each
    device's)."""
    spec = json.loads(node.state.cdi.path(uid).read_text())
    edits = [spec.get("containerEdits", {}), *(d["containerEdits"] for d in spec["devices"])]
    return {n["path"] for e in edits for n in e.get("deviceNodes", [])}


def _own_nodes(node: Node, uid: str) -> set[str]:
    """The nodes the claim may have: the control nodes, its GPUs' (a MIG device's parent's) and
    its MIG devices' own access capabilities, from what the plugin recorded it made."""
    record = node.state.checkpoint.get(uid)
    assert record is not None
    own = set(driverfiles.CONTROL_NODES)
    for uuid in record.allocated().gpus:
        own.add(f"/dev/nvidia{_minor(node, uuid)}")
    for step in record.applied:
        if step.kind == "mig":
            assert step.gi_id is not None and step.ci_id is not None
            minor = _minor(node, step.gpu)
            own.add(f"/dev/nvidia{minor}")
            own.add(f"/dev/nvidia-caps/nvidia-cap{fakedriver.cap_minor(minor, step.gi_id)}")
            cap = fakedriver.cap_minor(minor, step.gi_id, step.ci_id)
            own.add(f"/dev/nvidia-caps/nvidia-cap{cap}")
    return own


def _minor(node: Node, uuid: str) -> int:
    (index,) = [i for i, gpu in enumerate(node.sim.gpus) if gpu.uuid == uuid]
    return index


_CLAIMS = st.lists(
    st.tuples(st.sampled_from(("whole", "share", "mig")), st.integers(0, 6)),
    min_size=1,
    max_size=5,
)


@settings(max_examples=10, deadline=None)
@given(claims=_CLAIMS)
def test_a_claims_cdi_spec_holds_only_its_own_device_nodes(claims: list[tuple[str, int]]) -> None:
    """Whole GPUs, MPS shares and MIG slices side by side on a node with a driver root: each
    claim's spec names the control nodes, its own GPU's node and its own MIG device's two access
    capabilities; never another claim's GPU or MIG device, never `config` or `monitor`."""
    root = Path(tempfile.mkdtemp(prefix="np-", dir="/tmp"))
    driver = fakedriver.make(root / "drv")
    node = make_node(root, "2xA100-40GB,mig=1", driver_root=str(driver), proc_root=driver / "proc")
    prepared: list[str] = []
    try:
        taken: set[str] = set()
        for index, (kind, start) in enumerate(claims):
            uid = f"c{index}"
            if kind == "mig":
                allocation = mig_allocation(uid, node.gpu(1), "1g.5gb", start, 1)
            elif kind == "whole" and not taken:
                allocation = gpu_allocation(uid, node.gpu(0))
                taken.add("whole")
            elif kind == "share" and "whole" not in taken:
                allocation = gpu_allocation(uid, node.gpu(0), share={"compute": 10})
                taken.add("share")
            else:
                continue  # an allocator never gives a GPU whole and in shares at once
            node.allocate(uid, allocation)
            try:
                node.state.prepare(ref(uid))
            except Exception as error:  # a MIG start taken already: refused, nothing made
                assert "overlaps MIG device" in str(error), error
                node.store.deallocate(uid)
                continue
            prepared.append(uid)
            for held in prepared:
                nodes = _device_nodes(node, held)
                assert nodes <= _own_nodes(node, held), (held, nodes - _own_nodes(node, held))
                assert not nodes & set(MANAGEMENT_CAPS)
    finally:
        mps.stop_simulated()
        shutil.rmtree(root, ignore_errors=True)


def test_every_claims_spec_says_void_and_names_its_devices_in_drasats_variable(
    node_factory: Any,
) -> None:
    """Every device of every claim's spec (a whole GPU, a MIG slice, a share, an optional claim
    without a device) sets `NVIDIA_VISIBLE_DEVICES=void`, so nvidia-container-runtime (the GPU
    operator's default runtime) injects nothing beyond the spec: no other GPU (CUDA images say
    `all`), no MPS programs. The container's own devices are in `DRASAT_GPU_UUIDS`."""
    node = node_factory("2xA100-40GB,mig=1")

    def check(uid: str, uuids: str | None) -> None:
        spec = json.loads(node.state.cdi.path(uid).read_text())
        shared = spec.get("containerEdits", {}).get("env", [])
        assert not any(e.startswith("NVIDIA_VISIBLE_DEVICES") for e in shared)
        for device in spec["devices"]:
            env = dict(e.split("=", 1) for e in device["containerEdits"]["env"])
            assert env["NVIDIA_VISIBLE_DEVICES"] == "void", (uid, device["name"])
            assert env.get("DRASAT_GPU_UUIDS") == uuids, (uid, device["name"])

    node.allocate("whole", gpu_allocation("whole", node.gpu(0)))
    node.allocate("slice", mig_allocation("slice", node.gpu(1), "1g.5gb", 0, 1))
    optional = {"claimInfo": claim_info("none"), "gpu": {"devices": []}, "optional": True}
    node.allocate("none", optional)
    for uid in ("whole", "slice", "none"):
        node.state.prepare(ref(uid))
    (slice_step,) = [s for s in node.state.checkpoint.get("slice").applied if s.kind == "mig"]
    check("whole", node.gpu(0))
    check("slice", slice_step.mig_uuid)
    check("none", None)
    node.state.unprepare(ref("whole"))
    node.allocate("share", gpu_allocation("share", node.gpu(0), share={"compute": 30}))
    node.state.prepare(ref("share"))
    check("share", node.gpu(0))
    mps.stop_simulated()


def test_the_state_folder_is_the_plugins_alone_even_when_it_existed(short_tmp: Path) -> None:
    """The chart's hostPath (DirectoryOrCreate) makes the state folder 0755 before the plugin
    starts: the plugin closes it, and its checkpoint files are its own."""
    (short_tmp / "state").mkdir(mode=0o755)
    (short_tmp / "state").chmod(0o755)
    node = make_node(short_tmp, "2xA100-40GB,mig=1")
    node.allocate("c1", gpu_allocation("c1", node.gpu(0), share={"compute": 50}))
    node.state.prepare(ref("c1"))
    assert _mode(short_tmp / "state") == 0o700
    files = [p for p in (short_tmp / "state" / "checkpoint").rglob("*") if p.is_file()]
    assert files, "the prepare wrote no checkpoint"
    for path in files:
        assert _mode(path) & 0o077 == 0, (path, oct(_mode(path)))


def test_the_sockets_and_their_folders_are_closed_to_other_users(served_node: Node) -> None:
    """Only the kubelet (root, or the group it shares) may call the plugin."""
    config = served_node.config
    for socket in (config.dra_socket, config.registration_socket):
        assert stat.S_ISSOCK(socket.stat().st_mode)
        assert _mode(socket) == 0o660, (socket, oct(_mode(socket)))
    assert _mode(config.dra_socket.parent) & 0o007 == 0
    assert _mode(config.registry_dir) & 0o007 == 0


# -- a bad claim configuration is refused before any hardware change ------------------------------

#: NVML calls that change a GPU (the simulator records every call by name).
_WRITES = ("Set", "Create", "Destroy", "Reset", "Clear")


def _gpu_config(**fields: object) -> dict[str, object]:
    parameters = {"apiVersion": "gpu.drasat.io/v1alpha1", "kind": "GpuConfig", **fields}
    return {"source": "FromClaim", "opaque": {"driver": "gpu.drasat.io", "parameters": parameters}}


@pytest.mark.parametrize(
    ("result", "config", "field"),
    [
        (("gpu", "gpu-0"), _gpu_config(sharing={"strategy": "Bogus"}), "sharing.strategy"),
        (
            ("gpu", "gpu-0"),
            _gpu_config(
                sharing={"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 150}}
            ),
            "defaultActiveThreadPercentage",
        ),
        (
            ("gpu", "gpu-0"),
            _gpu_config(
                sharing={"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "lots"}}
            ),
            "defaultPinnedDeviceMemoryLimit",
        ),
        (
            ("gpu", "gpu-0"),
            _gpu_config(
                sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "X"}}
            ),
            "interval",
        ),
        (
            ("gpu", "gpu-0"),
            _gpu_config(lifecycle=[{"action": "setComputeMode", "value": "Turbo"}]),
            "lifecycle",
        ),
        (("gpu", "gpu-0"), _gpu_config(migLayout="7x1g.5gb"), "migLayout"),
        (
            ("mig", "gpu-1-mig-1g5gb-19-0"),
            _gpu_config(lifecycle=[{"action": "setPowerLimitWatts", "value": 100}]),
            "lifecycle",
        ),
    ],
    ids=["strategy", "mps-threads", "mps-memory", "time-slice", "compute-mode", "field", "mig"],
)
def test_a_bad_claim_config_is_refused_before_any_hardware_change(
    node_factory: Any, result: tuple[str, str], config: dict[str, Any], field: str
) -> None:
    """A claim's own configuration with a value outside its schema, or a setting only the cluster
    may make, fails the prepare naming the field, and no NVML call that changes a GPU was made:
    no MIG device, no compute mode, no MPS daemon, no CDI spec, no checkpoint record."""
    node = node_factory("2xA100-40GB,mig=1")
    claims = Claims()
    v1 = V1(node, claims)
    before = [node.lib.settings(node.gpu(i)) for i in (0, 1)]
    node.sim.calls.clear()
    request, device = result
    claims.add(v1_claim("bad", (request, NODE, device), config=[config]))
    error = v1.prepare(("bad", "claim"))["bad"].error
    assert field in error and "config[0]" in error, error
    writes = [c for c in node.sim.calls if any(w in c for w in _WRITES)]
    assert writes == []
    assert [node.lib.settings(node.gpu(i)) for i in (0, 1)] == before
    assert gpu_instances(node, 1) == []
    assert node.daemons() == {}
    assert node.state.cdi.claim_uids() == []
    assert node.state.checkpoint.get("bad") is None
