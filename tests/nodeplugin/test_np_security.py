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

import fakedriver
from hypothesis import given, settings
from hypothesis import strategies as st
from npfixtures import Node, gpu_allocation, make_node, mig_allocation, ref

from drasat.nodeplugin import driverfiles, mps

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
    allocation = record.allocated()
    own = set(driverfiles.CONTROL_NODES)
    for device in allocation.gpu.devices if allocation.gpu else ():
        own.add(f"/dev/nvidia{_minor(node, device.uuid)}")
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
