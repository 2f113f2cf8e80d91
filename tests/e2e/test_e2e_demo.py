"""`drasat demo --kube-bin DIR`: the v1 demo on the real control plane (issue 16, item 4).

The command is run as a user runs it, in its own process: it starts etcd, kube-apiserver,
kube-scheduler and kube-controller-manager v1.37.2 from DIR in a temporary folder, runs drasat's
v1 controller and node plugins (simulated GPUs) against them, with real kubelets on fake container
runtimes when DIR holds the kubelet and fakecri (else simulated kubelets; each test runs one way),
applies the manifests, and stops everything. The test reads its output:

- the two reference cases: each pod of case (a) on a GPU of its own, both pods of case (b) on one
  GPU through one claim, time-sliced Long; every node clean; the four components stopped; exit 0;
- what users apply (issue 26 item 8): a Deployment in the shape of NVIDIA's gpu-test4 (with
  drasat's classes), a Job and a StatefulSet whose pods share one claim; kube-controller-manager's
  workload controllers make their pods, and every pod runs.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import oneanswer
import pytest

from drasat.testbed.controlplane import binaries, realcluster

pytestmark = pytest.mark.timeout(300)

_RUNNING = re.compile(r"^pod (\S+)  Pending -> Running on (\S+)$", re.MULTILINE)
_CLAIM = re.compile(r"^pod (\S+)  Pending -> Running on \S+\n  claim (\S+): (\S+)$", re.MULTILINE)
_VISIBLE = re.compile(r"^pod (\S+)  .*\n  claim .*\n  log \[\S+\]: DRASAT_GPU_UUIDS=(\S+)", re.M)
#: CLAIM NODE DEVICES GPU NAS-SHARING TIME-SLICE RESERVED-FOR
_ROW = re.compile(r"^  (\S+/\S+) +(\S+) +(\S+) +GPU \d+ \(\S+\) +(.+?) +(\w+) +(\S+)$", re.M)


def _bin_dir() -> pathlib.Path:
    try:
        return binaries.locate()  # $DRASAT_KUBE_BIN, else the scripts/kube-build cache
    except binaries.MissingBinaries as exc:
        pytest.fail(f"the real control plane is not built: {exc}", pytrace=False)


def _control_plane_only(tmp_path: pathlib.Path) -> pathlib.Path:
    """A folder with the control plane's binaries but no kubelet: the demo's simulated kubelets."""
    folder = tmp_path / "control-plane-only"
    folder.mkdir()
    for name in binaries.NAMES:
        (folder / name).symlink_to(_bin_dir() / name)
    return folder


def _demo(*args: str, bin_dir: pathlib.Path | None = None) -> tuple[pathlib.Path, str]:
    """`drasat demo --kube-bin DIR ARGS` in its own process: DIR and what it printed (exit 0)."""
    bin_dir = bin_dir or _bin_dir()
    done = subprocess.run(
        [sys.executable, "-m", "drasat", "demo", "--kube-bin", str(bin_dir), *args],
        capture_output=True,
        text=True,
        timeout=240,
        preexec_fn=realcluster.sigterm_on_parent_death,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return bin_dir, done.stdout


def test_the_demo_runs_both_reference_cases_on_the_real_control_plane(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With simulated kubelets: DIR holds no kubelet (the demo says so). Each pod runs on the
    devices the what-if places it on (one answer, as tests/test_demo.py holds the simulated
    demo to it)."""
    bin_dir, out = _demo(bin_dir=_control_plane_only(tmp_path))
    planned = oneanswer.run_whatif(oneanswer.inputs(tmp_path)["reference cases"], capsys)
    assert oneanswer.demo_placement(out) == planned, out
    assert f"== starting the real control plane from {bin_dir}" in out
    assert f"  kubelets: simulated ({bin_dir} has no kubelet and fakecri" in out
    assert re.search(
        r"^== cluster \(.*, real control plane v1\.37 \(.*\), simulated kubelets\)", out, re.M
    ), out
    running = dict(_RUNNING.findall(out))
    assert set(running) == {
        "gpu-test1-v1/pod1", "gpu-test1-v1/pod2", "gpu-test2-v1/pod1", "gpu-test2-v1/pod2",
    }, out  # fmt: skip
    devices = {pod: (claim, device) for pod, claim, device in _CLAIM.findall(out)}
    visible = dict(_VISIBLE.findall(out))
    # (a) a claim each, from the template, on two different GPUs, exclusive.
    (claim1, dev1), (claim2, dev2) = devices["gpu-test1-v1/pod1"], devices["gpu-test1-v1/pod2"]
    assert claim1 != claim2 and dev1 != dev2
    assert visible["gpu-test1-v1/pod1"] != visible["gpu-test1-v1/pod2"]
    # (b) one claim, one GPU, for both pods.
    assert devices["gpu-test2-v1/pod1"] == devices["gpu-test2-v1/pod2"]
    assert devices["gpu-test2-v1/pod1"][0] == "shared-gpu"
    assert visible["gpu-test2-v1/pod1"] == visible["gpu-test2-v1/pod2"]
    assert devices["gpu-test2-v1/pod1"][1] not in {dev1, dev2}
    rows = {m[0]: m[1:] for m in _ROW.findall(out)}
    assert rows[f"gpu-test1-v1/{claim1}"][2:] == ("exclusive", "Default", "pod1"), out
    assert rows[f"gpu-test1-v1/{claim2}"][2:] == ("exclusive", "Default", "pod2"), out
    _node, _device, sharing, time_slice, reserved = rows["gpu-test2-v1/shared-gpu"]
    assert sharing.startswith("time-sliced") and time_slice == "Long" and reserved == "pod1,pod2"
    assert out.count("0 allocated, 0 prepared, 0 CDI specs, 0 MIG devices  ok") == 3, out
    assert "claim gpu-test2-v1/shared-gpu  deallocated and gone (deleted with its manifest)" in out
    stopped = re.search(r"^== stopped (.*) in [\d.]+s$", out, re.M)
    assert stopped is not None, out
    assert set(stopped.group(1).split(", ")) == set(binaries.NAMES)
    assert out.rstrip().endswith(
        "== demo ok (real control plane v1.37): 4 pods ran; every device was cleaned up"
    ), out


def test_pods_asking_nvidia_com_gpu_run_where_the_whatif_places_them(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One answer for pods written for NVIDIA's device plugin (`nvidia.com/gpu: 1` and `2`):
    the demo installs the chart's MutatingAdmissionPolicy, so the real API server turns them
    into the claims the what-if plans (they used to stay Pending: kube-scheduler found no node
    with `nvidia.com/gpu`), and each runs, on real kubelets, on the devices the what-if places
    it on."""
    paths = oneanswer.inputs(tmp_path)["pods asking nvidia.com/gpu 1 and 2"]
    planned = oneanswer.run_whatif(paths, capsys)
    assert set(planned) == {"gpu-extended/one-gpu", "gpu-extended/two-gpus"}
    _bin_dir, out = _demo(*(arg for path in paths for arg in ("-f", str(path))))
    assert oneanswer.demo_placement(out) == planned, out


#: gpu-test4 as a Deployment (with drasat's classes), a Job and a StatefulSet (read its comment).
WORKLOADS = pathlib.Path(__file__).with_name("demo-workloads.yaml")


def test_the_demo_runs_a_deployment_a_job_and_a_statefulset_on_real_kubelets() -> None:
    """With real kubelets (DIR holds the kubelet and fakecri; the tests run as root): each node
    registers itself, drasat's plugin through its kubelet, and the pods' containers are made on
    the fake runtime with their claims' CDI devices."""
    bin_dir, out = _demo("-f", str(WORKLOADS))
    assert f"  kubelets: real (kubelet and fakecri from {bin_dir}, one per node)" in out, out
    for node in ("a100-node", "l4-node", "t4-node"):
        assert f"  starting kubelet {node} on its fake container runtime" in out, out
    for workload in ("Deployment workloads/gpu-test4", "Job workloads/train",
                     "StatefulSet workloads/web"):  # fmt: skip
        assert f"{workload}: 2 of 2 pod(s) created" in out, out
    running = dict(_RUNNING.findall(out))
    assert len(running) == 6, out
    by_owner = {}
    for pod, node in running.items():
        by_owner.setdefault(re.sub(r"-[^-]+(-[^-]+)?$", "", pod.split("/")[1]), []).append(node)
    assert {owner: len(nodes) for owner, nodes in by_owner.items()} == {
        "gpu-test4": 2, "train": 2, "web": 2,
    }, out  # fmt: skip
    # gpu-test4's pods on the A100 node (four MIG devices of one parent each); the kubelet gave
    # each container the one MIG device of the request it names
    assert by_owner["gpu-test4"] == ["a100-node", "a100-node"], out
    visible = re.findall(r"^  log \[ctr\d\]: DRASAT_GPU_UUIDS=(\S+) ", out, re.M)
    assert len(visible) == 8 and len(set(visible)) == 8, out
    assert all(v.startswith("MIG-") and "," not in v for v in visible), out
    shared = re.findall(r"^pod workloads/web-\d  Pending -> Running on \S+\n  claim (\S+): (\S+)$",
                        out, re.M)  # fmt: skip
    assert len(shared) == 2 and shared[0] == shared[1] and shared[0][0] == "shared-gpu", out
    assert out.count("0 allocated, 0 prepared, 0 CDI specs, 0 MIG devices  ok") == 3, out
    assert out.rstrip().endswith(
        "== demo ok (real control plane v1.37, real kubelets): 6 pods ran; "
        "every device was cleaned up"
    ), out
