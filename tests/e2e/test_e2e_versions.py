"""drasat on the Kubernetes versions users run: real 1.34, 1.35, 1.36 and 1.37 control planes
with their default feature gates, drasat installed by `helm install` of its chart (versionkit.py
says how its two programs run here), one real kubelet on the fake runtime and drasat's node
plugin on a simulated fleet. On each version:

- the chart and both programs follow what that server serves and keeps (the admission path, the
  DeviceTaintRule, shares, MIG counters), each program saying so in one start-up line;
- the reference cases (two pods each with an exclusive GPU; two pods time-slicing one GPU), a
  MIG claim of four placements on one GPU, shares (two pods on one GPU where the server keeps
  consumable capacity; elsewhere each claim gets a whole GPU), pods asking `nvidia.com/gpu`, and
  a drain that releases every device: each pod gated at creation and its claims allocated by
  drasat (its ledger holds them), Running on the real kubelet.

`make test` runs 1.34 and 1.37 (DRASAT_E2E_VERSIONS unset); `make e2e-versions` all four.
docs/INSTALL.md ("What works on each version") is the table of what this finds."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

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
    # the security policies are there on every version (ValidatingAdmissionPolicy, GA 1.30)
    policies = [m for m in setup.manifests if m["kind"] == "ValidatingAdmissionPolicy"]
    assert len(policies) == 3, setup.notes
    controller = versionkit.start_line(setup.controller_log, "controller")
    assert controller, setup.logs()
    plugin = versionkit.start_line(setup.plugin_log, f"node plugin on {versionkit.NODE}")
    assert plugin, setup.logs()
    off = plugin.split("; on:")[0]
    assert ("shares (DRAConsumableCapacity is off" in off) is not served["shares"], plugin
    assert ("MIG counters (DRAPartitionableDevices is off" in off) is not served["counters"], plugin
    taint_off = "the DeviceTaintRule (discovery lists no DeviceTaintRule"
    assert (taint_off in controller.split("; on:")[0]) is not served["taint"], controller
    slices = setup.kubectl("get", "resourceslices", "-o", "json")
    assert slices.returncode == 0, slices.stderr
    text = slices.stdout
    assert ('"sharedCounters"' in text) is served["counters"]
    assert ('"allowMultipleAllocations": true' in text) is served["shares"]
    # the published slices are as stored: a later publish rewrites nothing
    generations = _slice_generations(setup)
    setup.kubectl("annotate", "node", versionkit.NODE, "drasat-e2e/touch=1", "--overwrite")
    assert _slice_generations(setup) == generations


def _slice_generations(setup: Installed) -> dict[str, str]:
    done = setup.kubectl(
        "get", "resourceslices", "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.metadata.resourceVersion} {end}",
    )  # fmt: skip
    return dict(item.split("=") for item in done.stdout.split())


def test_two_pods_each_get_an_exclusive_gpu(setup: Installed) -> None:
    namespace = "gpu-test1-v1"
    setup.apply(EXAMPLES / "v1-reference-cases" / "exclusive-gpus.yaml")
    try:
        setup.wait_running(namespace, "pod1", "pod2")
        devices = set()
        for pod in ("pod1", "pod2"):
            (claim,) = setup.allocated_by_drasat(namespace, pod)
            (result,) = results(claim)
            assert isinstance(names.parse(result["device"]), names.GpuName), result
            devices.add(result["device"])  # (a shareable GPU taken whole still has a shareID)
        assert len(devices) == 2
    finally:
        setup.delete_namespace(namespace)


def test_two_pods_time_slice_one_gpu(setup: Installed) -> None:
    namespace = "gpu-test2-v1"
    setup.apply(EXAMPLES / "v1-reference-cases" / "shared-time-sliced-gpu.yaml")
    try:
        setup.wait_running(namespace, "pod1", "pod2")
        claims = [setup.allocated_by_drasat(namespace, p)[0] for p in ("pod1", "pod2")]
        assert claims[0]["metadata"]["uid"] == claims[1]["metadata"]["uid"]  # one claim, shared
        (result,) = results(claims[0])
        assert isinstance(names.parse(result["device"]), names.GpuName), result
        config = claims[0]["status"]["allocation"]["devices"]["config"]
        assert config[0]["opaque"]["parameters"]["sharing"]["strategy"] == "TimeSlicing"
    finally:
        setup.delete_namespace(namespace)


def test_a_mig_claim_gets_four_placements_of_one_gpu_that_do_not_overlap(
    setup: Installed,
) -> None:
    """Where the server drops MIG counters (1.34, 1.35), drasat's own ledger is what keeps the
    placements apart."""
    namespace = "gpu-test4-v1"
    setup.apply(EXAMPLES / "v1-mig-by-profile" / "gpu-test4.yaml")
    try:
        setup.wait_running(namespace, "pod")
        (claim,) = setup.allocated_by_drasat(namespace, "pod")
        placed = [names.parse(r["device"]) for r in results(claim)]
        assert all(isinstance(p, names.MigName) for p in placed), placed
        assert len({p.minor for p in placed if isinstance(p, names.MigName)}) == 1
        taken: set[int] = set()
        for item in results(claim):
            slices = _memory_slices(setup, item["device"])
            assert not taken & slices, f"{item['device']} overlaps: {sorted(taken & slices)}"
            taken |= slices
    finally:
        setup.delete_namespace(namespace)


def _memory_slices(setup: Installed, device: str) -> set[int]:
    """The memory slices a MIG device occupies (its published placement start and size)."""
    done = setup.kubectl("get", "resourceslices", "-o", "json")
    for item in json.loads(done.stdout)["items"]:
        for published in item["spec"].get("devices") or []:
            if published["name"] == device:
                attributes = published["attributes"]
                start = attributes["placementStart"]["int"]
                return set(range(start, start + attributes["placementSize"]["int"]))
    raise AssertionError(f"{device} is not published")


def test_shares_of_one_gpu_where_the_server_keeps_them(setup: Installed) -> None:
    namespace = "gpu-shares-v1"
    setup.apply(EXAMPLES / "v1-shared-gpu" / "shares.yaml")
    try:
        setup.wait_running(namespace, "infer-1", "infer-2")
        found = [
            results(setup.allocated_by_drasat(namespace, p)[0])[0] for p in ("infer-1", "infer-2")
        ]
        if SERVED[setup.minor]["shares"]:
            assert found[0]["device"] == found[1]["device"], found
            assert all(r.get("shareID") and r.get("consumedCapacity") for r in found), found
        else:
            # the server dropped capacity.requests: each claim asks a whole GPU, and gets one
            assert found[0]["device"] != found[1]["device"], found
            assert not any(r.get("shareID") for r in found), found
    finally:
        setup.delete_namespace(namespace)


def test_pods_asking_nvidia_com_gpu_get_drasats_gpus(setup: Installed) -> None:
    namespace = "gpu-extended"
    setup.apply(EXAMPLES / "v1-extended-resource" / "gpu-pods.yaml")
    try:
        setup.wait_running(namespace, "one-gpu", "two-gpus")
        counts = {}
        for pod in ("one-gpu", "two-gpus"):
            claims = setup.allocated_by_drasat(namespace, pod)
            counts[pod] = sum(len(results(c)) for c in claims)
            limits = setup.pod(namespace, pod).spec.containers[0].resources.limits or {}
            assert "nvidia.com/gpu" not in limits  # converted into claims at admission
        assert counts == {"one-gpu": 1, "two-gpus": 2}
    finally:
        setup.delete_namespace(namespace)


def test_a_drain_releases_every_device_and_the_node_takes_pods_again(setup: Installed) -> None:
    namespace = "gpu-test1-v1"
    setup.apply(EXAMPLES / "v1-reference-cases" / "exclusive-gpus.yaml")
    try:
        setup.wait_running(namespace, "pod1", "pod2")
        for pod in ("pod1", "pod2"):
            setup.allocated_by_drasat(namespace, pod)
        assert len(versionkit.cdi_specs(setup)) == 2
        drained = setup.kubectl(
            "drain", versionkit.NODE, "--ignore-daemonsets", "--force",
            "--pod-selector=!drasat-e2e-keep", "--timeout=180s", timeout=240,
        )  # fmt: skip
        assert drained.returncode == 0, drained.stderr + setup.logs()
        # no pod left of the workload: every claim deallocated, every device unprepared
        wait_for(
            lambda: not setup.nas()["spec"].get("allocatedClaims"),
            timeout=120,
            what=f"drasat to release the drained pods' claims\n{setup.logs()}",
        )
        wait_for(lambda: not versionkit.cdi_specs(setup), timeout=60, what="the devices unprepared")
        assert setup.kubectl("uncordon", versionkit.NODE).returncode == 0
    finally:
        setup.kubectl("uncordon", versionkit.NODE)
        setup.delete_namespace(namespace)
