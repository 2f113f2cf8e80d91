"""drasat on the Kubernetes versions users run: real 1.34, 1.35, 1.36 and 1.37 control planes
with their default feature gates, drasat installed by `helm install` of its chart (versionkit.py
says how its two programs run here), one real kubelet on the fake runtime and drasat's node
plugin on a simulated fleet. On each version:

- the chart and both programs follow what that server serves and keeps (the admission path, the
  DeviceTaintRule, shares, MIG counters), each program saying so in one start-up line;
- the reference cases (two pods each with an exclusive GPU; two pods time-slicing one GPU), a
  MIG claim of four placements on one GPU, shares (two pods on one GPU where the server keeps
  consumable capacity; elsewhere each claim gets a whole GPU) and pods asking `nvidia.com/gpu`,
  applied together from deploy/examples/ as a user would, each pod gated at creation and its
  claims allocated by drasat (its ledger holds them), Running on the real kubelet; then a drain
  of the node that releases every device.

`make test` runs 1.34 and 1.37 (DRASAT_E2E_VERSIONS unset); `make e2e-versions` all four.
docs/INSTALL.md ("What works on each version") is the table of what this finds."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import versionkit
from kubecluster import wait_for
from versionkit import Installed, results

from drasat.api.devicemodel import names
from drasat.testbed.controlplane import binaries

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "deploy" / "examples"
VERSIONS = [v for v in os.environ.get("DRASAT_E2E_VERSIONS", "1.34,1.37").split(",") if v]

#: What each release serves and keeps with its default gates (the upstream sources of
#: pkg/features/kube_features.go and the API versions each registers), as docs/INSTALL.md says:
#: who gates pods, the DeviceTaintRule, shares (DRAConsumableCapacity), MIG counters
#: (DRAPartitionableDevices).
SERVED = {
    34: {"admission": "webhook", "taint": False, "shares": False, "counters": False},
    35: {"admission": "webhook", "taint": False, "shares": False, "counters": False},
    36: {"admission": "policy", "taint": False, "shares": True, "counters": True},
    37: {"admission": "policy", "taint": True, "shares": True, "counters": True},
}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module", params=VERSIONS)
def setup(request: pytest.FixtureRequest) -> Iterator[Installed]:
    version = request.param
    try:
        binaries.locate(version=version)
    except binaries.MissingBinaries as error:
        pytest.fail(f"Kubernetes {version} is not built: {error}", pytrace=False)
    with versionkit.installed(version) as installed:
        yield installed


def test_the_chart_and_drasat_follow_what_this_version_serves(setup: Installed) -> None:
    served = SERVED[setup.minor]
    assert setup.admission() == served["admission"], setup.notes
    # the security policies are there on every version (ValidatingAdmissionPolicy, GA 1.30):
    # slices, claim statuses, pod gates, and claims that would tolerate drasat's allocator taint
    policies = [m for m in setup.manifests if m["kind"] == "ValidatingAdmissionPolicy"]
    assert len(policies) == 4, setup.notes
    controller = versionkit.start_line(setup.controller_log, "controller")
    assert controller, setup.logs()
    plugin = versionkit.start_line(setup.plugin_log, f"node plugin on {versionkit.NODE}")
    assert plugin, setup.logs()
    off = plugin.split("; on:")[0]
    assert ("shares (DRAConsumableCapacity is off" in off) is not served["shares"], plugin
    assert ("MIG counters (DRAPartitionableDevices is off" in off) is not served["counters"], plugin
    # the DeviceTaintRule: left out by the chart (helm saw the server's discovery), or by the
    # controller at start-up (its line says so)
    taint_off = "the DeviceTaintRule (discovery lists no DeviceTaintRule"
    kept = "--no-device-taint" not in setup.container("Deployment")["args"]
    kept = kept and taint_off not in controller.split("; on:")[0]
    assert kept is served["taint"], controller
    slices = setup.kubectl("get", "resourceslices", "-o", "json")
    assert slices.returncode == 0, slices.stderr
    text = slices.stdout
    assert ('"sharedCounters"' in text) is served["counters"]
    assert ('"allowMultipleAllocations": true' in text) is served["shares"]


#: The examples applied, and the pods of each that must run.
WORKLOADS = {
    "v1-reference-cases/exclusive-gpus.yaml": ("gpu-test1-v1", ("pod1", "pod2")),
    "v1-reference-cases/shared-time-sliced-gpu.yaml": ("gpu-test2-v1", ("pod1", "pod2")),
    "v1-mig-by-profile/gpu-test4.yaml": ("gpu-test4-v1", ("pod",)),
    "v1-shared-gpu/shares.yaml": ("gpu-shares-v1", ("infer-1", "infer-2")),
    "v1-extended-resource/gpu-pods.yaml": ("gpu-extended", ("one-gpu", "two-gpus")),
}


@pytest.fixture(scope="module")
def running(setup: Installed) -> Iterator[Installed]:
    """Every workload applied at once (kubectl apply of the examples), each of its pods Running;
    their namespaces deleted after."""
    for path in WORKLOADS:
        setup.apply(EXAMPLES / path)
    try:
        for namespace, pods in WORKLOADS.values():
            setup.wait_running(namespace, *pods, timeout=240)
        yield setup
    finally:
        for namespace, _ in WORKLOADS.values():
            setup.delete_namespace(namespace, wait=False)


def test_two_pods_each_get_an_exclusive_gpu(running: Installed) -> None:
    devices = set()
    for pod in ("pod1", "pod2"):
        (claim,) = running.allocated_by_drasat("gpu-test1-v1", pod)
        (result,) = results(claim)
        assert isinstance(names.parse(result["device"]), names.GpuName), result
        devices.add(result["device"])  # (a shareable GPU taken whole still has a shareID)
    assert len(devices) == 2


def test_two_pods_time_slice_one_gpu(running: Installed) -> None:
    claims = [running.allocated_by_drasat("gpu-test2-v1", p)[0] for p in ("pod1", "pod2")]
    assert claims[0]["metadata"]["uid"] == claims[1]["metadata"]["uid"]  # one claim, shared
    (result,) = results(claims[0])
    assert isinstance(names.parse(result["device"]), names.GpuName), result
    config = claims[0]["status"]["allocation"]["devices"]["config"]
    assert config[0]["opaque"]["parameters"]["sharing"]["strategy"] == "TimeSlicing"


def test_a_mig_claim_gets_four_placements_of_one_gpu_that_do_not_overlap(
    running: Installed,
) -> None:
    """Where the server drops MIG counters (1.34, 1.35), drasat's own ledger is what keeps the
    placements apart."""
    (claim,) = running.allocated_by_drasat("gpu-test4-v1", "pod")
    placed = [names.parse(r["device"]) for r in results(claim)]
    assert len(placed) == 4 and all(isinstance(p, names.MigName) for p in placed), placed
    assert len({p.minor for p in placed if isinstance(p, names.MigName)}) == 1
    published = _published_devices(running)
    taken: set[int] = set()
    for item in results(claim):
        attributes = published[item["device"]]["attributes"]
        start = attributes["placementStart"]["int"]
        slices = set(range(start, start + attributes["placementSize"]["int"]))
        assert not taken & slices, f"{item['device']} overlaps: {sorted(taken & slices)}"
        taken |= slices


def _published_devices(setup: Installed) -> dict[str, Any]:
    done = setup.kubectl("get", "resourceslices", "-o", "json")
    return {
        device["name"]: device
        for item in json.loads(done.stdout)["items"]
        for device in item["spec"].get("devices") or []
    }


def test_shares_of_one_gpu_where_the_server_keeps_them(running: Installed) -> None:
    found = [
        results(running.allocated_by_drasat("gpu-shares-v1", p)[0])[0]
        for p in ("infer-1", "infer-2")
    ]
    if SERVED[running.minor]["shares"]:
        assert found[0]["device"] == found[1]["device"], found
        assert all(r.get("shareID") and r.get("consumedCapacity") for r in found), found
    else:
        # the server dropped capacity.requests: each claim asks a whole GPU, and gets one
        assert found[0]["device"] != found[1]["device"], found
        assert not any(r.get("shareID") for r in found), found


def test_pods_asking_nvidia_com_gpu_get_drasats_gpus(running: Installed) -> None:
    counts = {}
    for pod in ("one-gpu", "two-gpus"):
        claims = running.allocated_by_drasat("gpu-extended", pod)
        counts[pod] = sum(len(results(c)) for c in claims)
        limits = running.pod("gpu-extended", pod).spec.containers[0].resources.limits or {}
        assert "nvidia.com/gpu" not in limits  # converted into claims at admission
    assert counts == {"one-gpu": 1, "two-gpus": 2}


def test_a_drain_releases_every_device_and_the_node_takes_pods_again(running: Installed) -> None:
    assert running.nas()["spec"].get("allocatedClaims")
    assert versionkit.cdi_specs(running)
    try:
        drained = running.kubectl(
            "drain", versionkit.NODE, "--ignore-daemonsets", "--force",
            f"--pod-selector=!{versionkit.KEEP}", "--timeout=240s", timeout=300,
        )  # fmt: skip
        assert drained.returncode == 0, drained.stderr + running.logs()
        # no pod left: every device unprepared on the node; the claims made for the pods went
        # with them and drasat released them; the ResourceClaim made on its own (the
        # time-sliced one) is deallocated too once no pod uses it (drasat gives back an unused
        # claim it allocated, as the resourceclaim controller does), so it can go elsewhere
        wait_for(lambda: not versionkit.cdi_specs(running), timeout=120, what="devices unprepared")

        def held() -> set[str]:
            ledger = running.nas()["spec"].get("allocatedClaims") or {}
            return {e["claimInfo"]["name"] for e in ledger.values()}

        wait_for(
            lambda: held() == set(),
            timeout=120,
            what=f"drasat to release the drained pods' claims\n{running.logs()}",
        )
    finally:
        assert running.kubectl("uncordon", versionkit.NODE).returncode == 0
