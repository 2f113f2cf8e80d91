"""CDI specs a container runtime can use: the driver's files found under a fake driver root (named
as a real 550.54.15 install names them), exactly the right paths in the spec, MIG capability
nodes located from mig-minors, and a prepare that fails naming whatever is missing."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from npfixtures import NODE, V1, Claims, gpu_allocation, mig_allocation, ref, v1_claim
from test_np_cdi import CDI_SCHEMA

from drasat.nodeplugin import cdi, driverfiles, state
from drasat.testbed import fakedriver
from drasat.testbed.fakedriver import LIBDIR, VERSION

UID = "claim-0001"
LIBS = [f"{LIBDIR}/{name}.{VERSION}" for name, _, _ in fakedriver.LIBRARIES]
ALL_LIBS = sorted([*LIBS, f"{LIBDIR}/vdpau/libvdpau_nvidia.so.{VERSION}"])
#: The host has the MPS programs too; containers never get them (tenant isolation).
BINS = [f"/usr/bin/{b}" for b in fakedriver.BINARIES if b not in driverfiles.WITHHELD_BINARIES]
FIRMWARE = [f"/lib/firmware/nvidia/{VERSION}/{f}" for f in fakedriver.FIRMWARE]


def _node(node_factory: Any, root: Path, fleet: str = "2xA100-40GB,mig=1", **extra: Any) -> Any:
    return node_factory(fleet, driver_root=str(root), proc_root=root / "proc", **extra)


def _spec(node: Any, uid: str = UID) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(node.state.cdi.path(uid).read_text())
    jsonschema.validate(spec, CDI_SCHEMA)
    return spec


def test_discovery_finds_the_running_versions_files(short_tmp: Path) -> None:
    root = fakedriver.make(short_tmp / "drv", modeset=True)
    files = driverfiles.discover(driverfiles.Roots(str(root)), VERSION, kernel_release="6.8.0")
    assert sorted(files.libraries) == ALL_LIBS  # not libcuda.so.535.104.05, not libfoo.so.1
    assert list(files.binaries) == BINS  # not nvidia-settings
    assert list(files.firmware) == FIRMWARE  # not the 535 firmware
    assert files.lib_dirs == (LIBDIR,)
    assert files.control_nodes == driverfiles.CONTROL_NODES  # modeset too, being present
    assert files.found_in == "lib dirs"
    assert set(files.links) == {
        f"libcuda.so.1::{LIBDIR}/libcuda.so",
        f"libcuda.so.{VERSION}::{LIBDIR}/libcuda.so.1",
        f"libnvidia-ml.so.{VERSION}::{LIBDIR}/libnvidia-ml.so.1",
        f"libnvidia-ml.so.1::{LIBDIR}/libnvidia-ml.so",
        f"libnvidia-ptxjitcompiler.so.{VERSION}::{LIBDIR}/libnvidia-ptxjitcompiler.so.1",
        f"libnvidia-nvvm.so.{VERSION}::{LIBDIR}/libnvidia-nvvm.so.4",
        f"libcudadebugger.so.{VERSION}::{LIBDIR}/libcudadebugger.so.1",
        f"libnvidia-cfg.so.{VERSION}::{LIBDIR}/libnvidia-cfg.so.1",
    }


def test_the_spec_lists_exactly_the_drivers_paths(node_factory: Any, short_tmp: Path) -> None:
    """A whole GPU: its node on the device; control nodes, libraries, binaries, firmware and the
    two hooks at the spec level, host paths under the driver root, container paths without."""
    root = fakedriver.make(short_tmp / "drv")
    node = _node(node_factory, root)
    node.allocate(UID, gpu_allocation(UID, node.gpu(0)))
    assert node.state.prepare(ref(UID)) == [f"k8s.gpu.drasat.io/claim={UID}"]
    spec = _spec(node)
    shared = spec["containerEdits"]
    assert [n["path"] for n in shared["deviceNodes"]] == list(fakedriver.CONTROL)  # no modeset
    assert all(n["hostPath"] == f"{root}{n['path']}" for n in shared["deviceNodes"])
    mounts = {m["containerPath"]: m for m in shared["mounts"]}
    assert sorted(mounts) == sorted([*ALL_LIBS, *BINS, *FIRMWARE])
    for path, mount in mounts.items():
        assert mount["hostPath"] == f"{root}{path}"
        assert mount["options"] == ["ro", "nosuid", "nodev", "rbind", "rprivate"]
    symlinks, ldcache, nodes = shared["hooks"]
    assert symlinks["hookName"] == ldcache["hookName"] == nodes["hookName"] == "createContainer"
    assert symlinks["path"] == ldcache["path"] == nodes["path"] == "/usr/bin/nvidia-cdi-hook"
    assert symlinks["args"][:3] == ["nvidia-cdi-hook", "create-symlinks", "--link"]
    assert symlinks["args"][2::2] == ["--link"] * 8
    assert ldcache["args"] == [
        "nvidia-cdi-hook",
        "update-ldcache",
        "--folder",
        LIBDIR,
        "--folder",
        f"{LIBDIR}/vdpau",
    ]
    assert ldcache["env"] == nodes["env"] == ["NVIDIA_CTK_DEBUG=false"]
    # libnvidia-ml and nvidia-smi in the container make no device node of another GPU
    assert nodes["args"] == ["nvidia-cdi-hook", "disable-device-node-modification"]
    (device,) = spec["devices"]
    edits = device["containerEdits"]
    assert edits["deviceNodes"] == [{"path": "/dev/nvidia0", "hostPath": f"{root}/dev/nvidia0"}]
    assert "mounts" not in edits and "hooks" not in edits
    # the spec gives the GPU; nvidia-container-runtime's hook adds nothing (void), and the
    # container learns its devices from drasat's own variable
    assert "NVIDIA_VISIBLE_DEVICES=void" in edits["env"]
    assert f"DRASAT_GPU_UUIDS={node.gpu(0)}" in edits["env"]
    assert spec["cdiVersion"] == "0.5.0"  # hostPath; hooks need nothing newer


def test_mig_device_gets_its_capability_nodes(node_factory: Any, short_tmp: Path) -> None:
    root = fakedriver.make(short_tmp / "drv")
    node = _node(node_factory, root)
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "3g.20gb", 4, 4))
    node.state.prepare(ref(UID))
    (step,) = [s for s in node.state.checkpoint.get(UID).applied if s.kind == "mig"]
    spec = _spec(node)
    paths = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert paths == [
        "/dev/nvidia1",
        f"/dev/nvidia-caps/nvidia-cap{fakedriver.cap_minor(1, step.gi_id)}",
        f"/dev/nvidia-caps/nvidia-cap{fakedriver.cap_minor(1, step.gi_id, step.ci_id)}",
    ]


def test_a_missing_capability_node_fails_the_prepare_naming_it(
    node_factory: Any, short_tmp: Path
) -> None:
    root = fakedriver.make(short_tmp / "drv", caps_nodes=False)
    node = _node(node_factory, root)
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "7g.40gb", 0, 8))
    with pytest.raises(state.ClaimError) as raised:
        node.state.prepare(ref(UID))
    message = str(raised.value)
    cap = f"{root}/dev/nvidia-caps/nvidia-cap{fakedriver.cap_minor(1, 1)}"
    assert f"MIG capability device node {cap} (gpu1/gi1/access) is missing" in message
    assert "nvidia-modprobe -f /proc/driver/nvidia/capabilities/gpu1/mig/gi1/access" in message
    # nothing half-made: no spec, no MIG instance, no record
    assert node.state.cdi.claim_uids() == []
    assert node.sim.gpus[1].gpu_instances == {}
    assert node.state.checkpoint.get(UID) is None


def test_missing_mig_minors_fails_naming_the_file(node_factory: Any, short_tmp: Path) -> None:
    root = fakedriver.make(short_tmp / "drv")
    (root / "proc/driver/nvidia-caps/mig-minors").unlink()
    node = _node(node_factory, root)
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "7g.40gb", 0, 8))
    with pytest.raises(state.ClaimError, match=f"cannot read {root}/proc/driver/nvidia-caps/mig"):
        node.state.prepare(ref(UID))
    assert node.sim.gpus[1].gpu_instances == {}


def test_a_missing_gpu_node_fails_the_prepare(node_factory: Any, short_tmp: Path) -> None:
    root = fakedriver.make(short_tmp / "drv", gpus=1)
    node = _node(node_factory, root)
    node.allocate(UID, gpu_allocation(UID, node.gpu(1)))
    with pytest.raises(state.ClaimError, match=f"GPU device node {root}/dev/nvidia1 is missing"):
        node.state.prepare(ref(UID))


def test_another_driver_version_fails_naming_the_libraries(
    node_factory: Any, short_tmp: Path
) -> None:
    """The running driver (NVML) is 560.35.03, the root holds 550.54.15: nothing is mounted
    from a driver that does not match the kernel module."""
    root = fakedriver.make(short_tmp / "drv")
    node = _node(node_factory, root, fleet="T4,driver=560.35.03")
    node.allocate(UID, gpu_allocation(UID, node.gpu(0)))
    with pytest.raises(state.ClaimError) as raised:
        node.state.prepare(ref(UID))
    message = str(raised.value)
    assert (
        f"driver root {root}: no libcuda.so.560.35.03 and no libnvidia-ml.so.560.35.03" in message
    )
    assert "the running driver is 560.35.03" in message
    assert node.state.cdi.claim_uids() == []


def test_no_control_node_fails(node_factory: Any, short_tmp: Path) -> None:
    root = fakedriver.make(short_tmp / "drv")
    (root / "dev/nvidiactl").unlink()
    node = _node(node_factory, root, dev_root=str(root))
    node.allocate(UID, gpu_allocation(UID, node.gpu(0)))
    with pytest.raises(state.ClaimError, match=f"dev root {root}: no /dev/nvidiactl"):
        node.state.prepare(ref(UID))


def test_the_dev_root_defaults_to_the_driver_roots_only_with_its_nodes(short_tmp: Path) -> None:
    """A driver container's root has its dev/ nodes; a host install's are in the host's /dev."""
    root = fakedriver.make(short_tmp / "drv")
    with_nodes = driverfiles.Roots("/run/nvidia/driver", driver_mount=str(root))
    assert (with_nodes.host_dev_root, with_nodes.read_dev_root) == ("/run/nvidia/driver", root)
    shutil.rmtree(root / "dev")
    without = driverfiles.Roots("/run/nvidia/driver", driver_mount=str(root))
    assert (without.host_dev_root, without.read_dev_root) == ("/", Path("/"))
    given = driverfiles.Roots("/run/nvidia/driver", dev_root="/host", dev_mount="/mnt/host")
    assert (given.host_dev_root, given.read_dev_root) == ("/host", Path("/mnt/host"))


def test_a_cpu_only_claim_gets_nothing_of_the_driver(node_factory: Any, short_tmp: Path) -> None:
    root = fakedriver.make(short_tmp / "drv")
    node = _node(node_factory, root)
    node.allocate(UID, {**gpu_allocation(UID), "optional": True})
    node.state.prepare(ref(UID))
    spec = _spec(node)
    assert "containerEdits" not in spec
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec["devices"][0]["containerEdits"]["env"]


def test_discovered_once_and_retried_after_a_failure(
    node_factory: Any, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = fakedriver.make(short_tmp / "drv", gpus=3)
    calls = []
    real = driverfiles.discover

    def counting(*args: Any, **kwargs: Any) -> driverfiles.DriverFiles:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(driverfiles, "discover", counting)
    (root / "dev/nvidiactl").rename(root / "dev/away")
    node = _node(node_factory, root, fleet="T4 x3", dev_root=str(root))
    node.allocate("a", gpu_allocation("a", node.gpu(0)))
    with pytest.raises(state.ClaimError, match="no /dev/nvidiactl"):
        node.state.prepare(ref("a"))
    (root / "dev/away").rename(root / "dev/nvidiactl")  # the driver came up
    for uid, index in (("a", 0), ("b", 1), ("c", 2)):
        node.allocate(uid, gpu_allocation(uid, node.gpu(index)))
        node.state.prepare(ref(uid))
    assert len(calls) == 2  # the failed one, then once for all three claims


def test_start_logs_a_bad_driver_root_and_serves(
    node_factory: Any, short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node = node_factory("T4", driver_root=str(short_tmp / "nowhere"))
    with caplog.at_level(logging.ERROR):
        node.plugin.start()
    try:
        assert f"CDI specs: driver root {short_tmp}/nowhere: no such directory" in caplog.text
    finally:
        node.plugin.stop(grace_s=0)


def test_driver_read_at_a_mount_named_by_its_host_path(node_factory: Any, short_tmp: Path) -> None:
    """The Helm chart's pod reads the host's /run/nvidia/driver at /driver-root: the spec names
    the host's paths."""
    mounted = fakedriver.make(short_tmp / "drv")
    node = node_factory(
        "T4",
        driver_root="/run/nvidia/driver",
        driver_root_mount=str(mounted),
        proc_root=mounted / "proc",
    )
    node.allocate(UID, gpu_allocation(UID, node.gpu(0)))
    node.state.prepare(ref(UID))
    spec = _spec(node)
    host_paths = [m["hostPath"] for m in spec["containerEdits"]["mounts"]]
    assert f"/run/nvidia/driver{LIBDIR}/libcuda.so.{VERSION}" in host_paths
    assert all(p.startswith("/run/nvidia/driver/") for p in host_paths)
    nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
    assert nodes == [{"path": "/dev/nvidia0", "hostPath": "/run/nvidia/driver/dev/nvidia0"}]


def test_absolute_links_resolve_inside_the_root(short_tmp: Path) -> None:
    """A driver container's links are absolute in its own tree: they are followed inside the
    root (never to the host's file of that name), to the file that is mounted."""
    root = fakedriver.make(short_tmp / "drv")
    lib = root / LIBDIR.lstrip("/")
    real = f"/opt/nvidia-{short_tmp.name}/libnvidia-ml.so.{VERSION}"  # not on this machine
    (root / real.lstrip("/")).parent.mkdir(parents=True)
    (lib / f"libnvidia-ml.so.{VERSION}").rename(root / real.lstrip("/"))
    os.symlink(real, lib / f"libnvidia-ml.so.{VERSION}")
    files = driverfiles.discover(driverfiles.Roots(str(root)), VERSION)
    assert real in files.libraries
    assert f"{LIBDIR}/libnvidia-ml.so.{VERSION}" not in files.libraries
    assert files.lib_dirs == (LIBDIR, real.rpartition("/")[0])
    (root / real.lstrip("/")).unlink()
    with pytest.raises(driverfiles.DriverFilesError, match=r"no libnvidia-ml\.so\.550\.54\.15"):
        driverfiles.discover(driverfiles.Roots(str(root)), VERSION)


def test_a_linked_binary_is_mounted_where_path_finds_it(short_tmp: Path) -> None:
    """/usr/bin/nvidia-smi linking into the driver's own folder (absolute, inside the root): the
    container gets /usr/bin/nvidia-smi, bound from the file the link names in the root."""
    root = fakedriver.make(short_tmp / "drv")
    real = root / "opt/nvidia/bin/nvidia-smi"
    real.parent.mkdir(parents=True)
    (root / "usr/bin/nvidia-smi").rename(real)
    os.symlink("/opt/nvidia/bin/nvidia-smi", root / "usr/bin/nvidia-smi")
    files = driverfiles.discover(
        driverfiles.Roots("/run/nvidia/driver", driver_mount=str(root)), VERSION
    )
    assert "/usr/bin/nvidia-smi" in files.binaries
    edits = cdi.driver_edits(files, driver_root="/run/nvidia/driver")
    (smi,) = [m for m in edits.mounts if m.container_path == "/usr/bin/nvidia-smi"]
    assert smi.host_path == "/run/nvidia/driver/opt/nvidia/bin/nvidia-smi"


@pytest.mark.parametrize("old_format", [False, True])
def test_libraries_outside_the_standard_dirs_come_from_the_ldcache(
    short_tmp: Path, old_format: bool
) -> None:
    libdir = "/usr/lib64/nvidia"  # e.g. a distribution's own folder, known to ldconfig only
    root = fakedriver.make(short_tmp / "drv", libdir=libdir)
    cached = [f"{libdir}/{name}.{VERSION}" for name, _, _ in fakedriver.LIBRARIES]
    (root / "etc").mkdir()
    (root / "etc/ld.so.cache").write_bytes(
        fakedriver.ldcache(["/usr/lib64/libz.so.1", *cached], old_format=old_format)
    )
    files = driverfiles.discover(driverfiles.Roots(str(root)), VERSION)
    assert files.found_in == "ldcache"
    assert files.lib_dirs == (libdir,)
    assert sorted(files.libraries) == sorted(
        [*cached, f"{libdir}/vdpau/libvdpau_nvidia.so.{VERSION}"]
    )


def test_without_ldcache_or_lib_dirs_the_error_says_where_it_looked(short_tmp: Path) -> None:
    root = fakedriver.make(short_tmp / "drv", libdir="/opt/nvidia/lib")
    with pytest.raises(driverfiles.DriverFilesError) as raised:
        driverfiles.discover(driverfiles.Roots(str(root)), VERSION)
    assert "/usr/lib/x86_64-linux-gnu" in str(raised.value)
    assert "/etc/ld.so.cache" in str(raised.value)


@pytest.mark.skipif(
    not (shutil.which("ldconfig") and Path("/etc/ld.so.cache").exists()),
    reason="needs glibc's ldconfig and its cache",
)
def test_ldcache_reader_agrees_with_ldconfig() -> None:
    """This machine's real cache, read by drasat, lists the 64-bit libraries `ldconfig -p` does."""
    paths = driverfiles.read_ldcache(Path("/etc/ld.so.cache").read_bytes())
    listing = subprocess.run(
        ["ldconfig", "-p"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    machine = os.uname().machine
    arch = {"x86_64": "x86-64", "aarch64": "AArch64", "ppc64le": "64bit"}.get(machine, machine)
    expected = {
        line.split(" => ")[1].strip()
        for line in listing.splitlines()[1:]
        if " => " in line and arch in line
    }
    assert expected and set(paths) == expected


_SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    paths=st.lists(st.lists(_SEGMENT, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p))),
    old_format=st.booleans(),
)
def test_ldcache_reader_reads_what_was_written(paths: list[str], old_format: bool) -> None:
    """Any list of paths written as glibc lays the cache out comes back in order, each once."""
    data = fakedriver.ldcache(paths, old_format=old_format)
    assert driverfiles.read_ldcache(data) == list(dict.fromkeys(paths))


def test_ldcache_reader_refuses_other_files() -> None:
    with pytest.raises(ValueError, match=r"not a glibc ld\.so\.cache"):
        driverfiles.read_ldcache(b"\0" * 64)


def test_mig_minors_lines() -> None:
    text = "config 1\nmonitor 2\ngpu0/gi3/access 30\ngpu0/gi3/ci0/access 31\nbad line here\n"
    assert driverfiles.mig_minors(text) == {
        "config": 1,
        "monitor": 2,
        "gpu0/gi3/access": 30,
        "gpu0/gi3/ci0/access": 31,
    }


def test_no_hook_path_no_hooks(node_factory: Any, short_tmp: Path) -> None:
    root = fakedriver.make(short_tmp / "drv")
    node = _node(node_factory, root, fleet="T4", cdi_hook_path="")
    node.allocate(UID, gpu_allocation(UID, node.gpu(0)))
    node.state.prepare(ref(UID))
    assert "hooks" not in _spec(node)["containerEdits"]


def _toolkit_spec(folder: Path, uuids: list[str], *, by: str = "uuid") -> None:
    devices = []
    for minor, uuid in enumerate(uuids):
        name = uuid if by == "uuid" else str(minor)
        nodes = [{"path": f"/dev/nvidia{minor}"}]
        devices.append({"name": name, "containerEdits": {"deviceNodes": nodes}})
    mig_nodes = [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia-caps/nvidia-cap12"}]
    devices.append({"name": "0:0", "containerEdits": {"deviceNodes": mig_nodes}})
    devices.append({"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}})
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices}
    (folder / "nvidia.json").write_text(json.dumps(spec))


@pytest.mark.parametrize("by", ["uuid", "index"])
def test_toolkit_mode_names_the_toolkits_devices(
    node_factory: Any, short_tmp: Path, by: str
) -> None:
    folder = short_tmp / "etc-cdi"
    node = node_factory(
        "T4 x2", cdi_mode=cdi.CdiMode.toolkit, toolkit_spec_dirs=(folder,), driver_root="/"
    )
    _toolkit_spec(folder, [node.gpu(0), node.gpu(1)], by=by)
    node.allocate(UID, gpu_allocation(UID, node.gpu(1)))
    name = node.gpu(1) if by == "uuid" else "1"
    assert node.state.prepare(ref(UID)) == [
        f"k8s.gpu.drasat.io/claim={UID}",
        f"nvidia.com/gpu={name}",
    ]
    spec = _spec(node)
    assert "containerEdits" not in spec  # the toolkit's spec has the driver
    edits = spec["devices"][0]["containerEdits"]
    assert "deviceNodes" not in edits and "mounts" not in edits
    assert f"DRASAT_GPU_UUIDS={node.gpu(1)}" in edits["env"]


def test_toolkit_mode_without_the_toolkits_device_fails(node_factory: Any, short_tmp: Path) -> None:
    folder = short_tmp / "etc-cdi"
    node = node_factory("T4 x2", cdi_mode=cdi.CdiMode.toolkit, toolkit_spec_dirs=(folder,))
    _toolkit_spec(folder, [node.gpu(0)])
    node.allocate(UID, gpu_allocation(UID, node.gpu(1)))
    with pytest.raises(state.ClaimError, match=r"no nvidia.com/gpu device with /dev/nvidia1"):
        node.state.prepare(ref(UID))
    assert node.state.cdi.claim_uids() == []


def test_toolkit_mode_mig_device(node_factory: Any, short_tmp: Path) -> None:
    """A MIG device made at prepare is in no toolkit spec: the kubelet gets its parent GPU's
    toolkit device (its node and the driver) and the claim's spec its capability nodes."""
    root = fakedriver.make(short_tmp / "drv")
    folder = short_tmp / "etc-cdi"
    node = _node(node_factory, root, cdi_mode=cdi.CdiMode.toolkit, toolkit_spec_dirs=(folder,))
    _toolkit_spec(folder, [node.gpu(0), node.gpu(1)])
    node.allocate(UID, mig_allocation(UID, node.gpu(1), "7g.40gb", 0, 8))
    ids = node.state.prepare(ref(UID))
    assert ids == [f"k8s.gpu.drasat.io/claim={UID}", f"nvidia.com/gpu={node.gpu(1)}"]
    spec = _spec(node)
    assert "containerEdits" not in spec
    paths = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert paths == [
        f"/dev/nvidia-caps/nvidia-cap{fakedriver.cap_minor(1, 1)}",
        f"/dev/nvidia-caps/nvidia-cap{fakedriver.cap_minor(1, 1, 0)}",
    ]


def test_toolkit_mode_v1_each_device_gets_its_own_gpus_toolkit_device(
    node_factory: Any, short_tmp: Path
) -> None:
    """A v1 claim of two GPUs in toolkit mode: each result's ids are its own CDI device and the
    toolkit's device of its own GPU, not the other's."""
    folder = short_tmp / "etc-cdi"
    node = node_factory(
        "T4 x2", cdi_mode=cdi.CdiMode.toolkit, toolkit_spec_dirs=(folder,), driver_root="/"
    )
    _toolkit_spec(folder, [node.gpu(0), node.gpu(1)])
    claims = Claims()
    claims.add(v1_claim(UID, ("a", NODE, "gpu-1"), ("b", NODE, "gpu-0")))
    answer = V1(node, claims).prepare((UID, "claim"))[UID]
    assert answer.error == ""
    assert [(d.device_name, list(d.cdi_device_ids)) for d in answer.devices] == [
        ("gpu-1", [f"k8s.gpu.drasat.io/claim={UID}-gpu-1", f"nvidia.com/gpu={node.gpu(1)}"]),
        ("gpu-0", [f"k8s.gpu.drasat.io/claim={UID}-gpu-0", f"nvidia.com/gpu={node.gpu(0)}"]),
    ]
    jsonschema.validate(_spec(node), CDI_SCHEMA)
