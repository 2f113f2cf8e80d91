"""`drasat demo --kube-bin DIR`: the v1 demo on the real control plane (issue 16, item 4).

The command is run as a user runs it, in its own process: it starts etcd, kube-apiserver,
kube-scheduler and kube-controller-manager v1.37.2 from DIR in a temporary folder, runs drasat's
v1 controller, node plugins (simulated GPUs) and simulated kubelets against them, applies the two
reference cases, and stops everything. The test reads its output: each pod of case (a) on a GPU
of its own, both pods of case (b) on one GPU through one claim, time-sliced Long; every node clean;
the four components stopped; exit 0.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from drasat.controlplane import binaries, cluster

pytestmark = pytest.mark.timeout(300)

_RUNNING = re.compile(r"^pod (\S+)  Pending -> Running on (\S+)$", re.MULTILINE)
_CLAIM = re.compile(r"^pod (\S+)  Pending -> Running on \S+\n  claim (\S+): (\S+)$", re.MULTILINE)
_VISIBLE = re.compile(
    r"^pod (\S+)  .*\n  claim .*\n  log \[\S+\]: NVIDIA_VISIBLE_DEVICES=(\S+)", re.M
)
#: CLAIM NODE DEVICES GPU NAS-SHARING TIME-SLICE RESERVED-FOR
_ROW = re.compile(r"^  (\S+/\S+) +(\S+) +(\S+) +GPU \d+ \(\S+\) +(.+?) +(\w+) +(\S+)$", re.M)


def test_the_demo_runs_both_reference_cases_on_the_real_control_plane() -> None:
    try:
        bin_dir = binaries.locate()  # $DRASAT_KUBE_BIN, else the scripts/kube-build cache
    except binaries.MissingBinaries as exc:
        pytest.fail(f"the real control plane is not built: {exc}", pytrace=False)
    done = subprocess.run(
        [sys.executable, "-m", "drasat", "demo", "--kube-bin", str(bin_dir)],
        capture_output=True,
        text=True,
        timeout=240,
        preexec_fn=cluster.sigterm_on_parent_death,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert f"== starting the real control plane from {bin_dir}" in out
    assert re.search(r"^== cluster \(.*, real control plane v1\.37 \(", out, re.M), out
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
