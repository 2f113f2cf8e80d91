"""drasat.testbed.probes' checks of what probe containers saw, on views made up here: each
check passes on a consistent view and names what is wrong when one thing is not."""

from __future__ import annotations

import copy
from typing import Any

from drasat.testbed import probes

CONTROL = [
    {"path": "/dev/nvidiactl", "type": "char", "major": 195, "minor": 255},
    {"path": "/dev/nvidia-uvm", "type": "char", "major": 120, "minor": 0},
    {"path": "/dev/nvidia-uvm-tools", "type": "char", "major": 120, "minor": 1},
]
LIB = {
    "hostPath": "/run/nvidia/driver/usr/lib/libcuda.so.1",
    "containerPath": "/usr/lib/libcuda.so.1",
}


def _view(
    namespace: str = "a", pod: str = "p", uid: str = "u1", minor: int = 0, *, mps: str = ""
) -> probes.ContainerView:
    """A container with one whole GPU (minor `minor`), seen and applied as its CDI spec says;
    `mps`: its MPS daemon's folder (the claim is a share)."""
    env = {"NVIDIA_VISIBLE_DEVICES": f"GPU-{minor}"}
    if mps:
        env["CUDA_MPS_PIPE_DIRECTORY"] = "/tmp/nvidia-mps"
    gpu = {"path": f"/dev/nvidia{minor}", "type": "char", "major": 195, "minor": minor}
    edits: dict[str, Any] = {
        "env": [f"{k}={v}" for k, v in env.items()],
        "deviceNodes": [{"path": gpu["path"], "hostPath": f"/run/nvidia/driver{gpu['path']}"}],
    }
    if mps:
        edits["mounts"] = [{"hostPath": f"{mps}/pipe", "containerPath": "/tmp/nvidia-mps"}]
    spec = {
        "kind": probes.CDI_KIND,
        "devices": [{"name": f"{uid}-gpu-{minor}", "containerEdits": edits}],
        "containerEdits": {"deviceNodes": [{"path": c["path"]} for c in CONTROL], "mounts": [LIB]},
    }
    seen = {
        "probe": "drasat-probe",
        "devices": [gpu, *CONTROL],
        "env": env,
        "mpsPipeDirectory": (
            {"path": "/tmp/nvidia-mps", "present": True, "mount": {"root": f"{mps}/pipe"}}
            if mps
            else {"path": "/tmp/nvidia-mps", "present": False, "mount": None}
        ),
        "shm": {
            "path": "/dev/shm",
            "present": True,
            "mount": {"fstype": "ext4", "root": f"{mps}/shm"}
            if mps
            else {"fstype": "tmpfs", "root": "/"},
        },
    }
    mounts = [{"destination": LIB["containerPath"], "source": LIB["hostPath"]}]
    if mps:
        mounts.append({"destination": "/tmp/nvidia-mps", "source": f"{mps}/pipe"})
    oci = {
        "process": {"env": ["PATH=/usr/bin", *edits["env"]]},
        "linux": {"devices": copy.deepcopy([gpu, *CONTROL])},
        "mounts": mounts,
    }
    claim = probes.Claim(
        name=f"{pod}-gpu",
        uid=uid,
        namespace=namespace,
        results=[
            {"device": f"gpu-{minor}", "request": "gpu", "pool": "node-1", "driver": probes.DRIVER}
        ],
        cdi_spec=spec,
    )
    return probes.ContainerView(
        namespace=namespace,
        pod=pod,
        container="probe",
        node="node-1",
        container_id="containerd://c",
        view=seen,
        claims=[claim],
        devices={f"gpu-{minor}": {"name": f"gpu-{minor}", "attributes": {"minor": {"int": minor}}}},
        oci=oci,
    )


def test_consistent_views_pass() -> None:
    views = [
        _view("a", "p1", "u1", 0),
        _view("a", "p2", "u2", 1),
        _view("m", "s1", "u3", 2, mps="/var/lib/drasat/mps/m-2"),
        _view("m", "s2", "u4", 2, mps="/var/lib/drasat/mps/m-2"),
    ]
    assert probes.problems(views) == []


def test_a_gpu_the_container_was_not_allocated_is_named() -> None:
    view = _view()
    view.view["devices"].append({"path": "/dev/nvidia1", "type": "char", "major": 195, "minor": 1})
    found = probes.problems([view])
    assert any(
        "sees GPU nodes ['/dev/nvidia0', '/dev/nvidia1'], was allocated ['/dev/nvidia0']" in p
        for p in found
    ), found


def test_a_variable_the_cdi_devices_do_not_give_is_named() -> None:
    view = _view()
    view.view["env"]["NVIDIA_VISIBLE_DEVICES"] = "all"
    assert any("sees variables" in p for p in probes.problems([view]))


def test_a_cdi_edit_missing_from_the_oci_spec_is_named() -> None:
    view = _view()
    view.oci["mounts"] = []
    found = probes.problems([view])
    assert found == [
        f"a/p/probe: the OCI spec lacks the CDI mount {LIB['hostPath']} -> {LIB['containerPath']}"
    ]
    other = _view()
    other.oci["process"]["env"] = ["PATH=/usr/bin"]
    assert any(
        "lacks the CDI variable NVIDIA_VISIBLE_DEVICES=GPU-0" in p for p in probes.problems([other])
    )


def test_a_device_node_that_is_not_the_specs_is_named() -> None:
    view = _view()
    view.view["devices"][0]["minor"] = 7
    assert any(
        "/dev/nvidia0 is not the device its OCI spec names" in p for p in probes.problems([view])
    )


def test_an_mps_daemon_shared_across_namespaces_is_named() -> None:
    daemon = "/var/lib/drasat/mps/x"
    views = [_view("a", "s1", "u1", 2, mps=daemon), _view("b", "s2", "u2", 2, mps=daemon)]
    found = probes.problems(views)
    assert "a/s1/probe shares b/s2/probe's MPS daemon (/var/lib/drasat/mps/x/pipe)" in found


def test_an_mps_client_without_its_daemons_shared_memory_is_named() -> None:
    view = _view(mps="/var/lib/drasat/mps/m")
    view.view["shm"]["mount"] = {"fstype": "tmpfs", "root": "/"}
    assert any("a /dev/shm of its own" in p for p in probes.problems([view]))


def test_a_mig_device_needs_its_two_capability_nodes() -> None:
    view = _view()
    view.devices = {"mig": {"attributes": {"parentMinor": {"int": 0}}}}
    found = probes.problems([view])
    assert any("sees 0 MIG capability nodes for 1 MIG device(s)" in p for p in found), found
    fixed = copy.deepcopy(view)
    caps = [
        {"path": f"/dev/nvidia-caps/nvidia-cap{m}", "type": "char", "major": 121, "minor": m}
        for m in (3, 4)
    ]
    fixed.view["devices"] += caps
    fixed.oci["linux"]["devices"] += caps
    assert probes.problems([fixed]) == []
