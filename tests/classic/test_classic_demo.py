"""`drasat demo --classic`: classic DRA (`resource.k8s.io/v1alpha2`) in one process, exit 0 only
when every step worked (`drasat.classic.demo`; the v1 demo's tests are tests/test_demo.py).

Each test runs the real command in-process (`drasat.cli.main.main`) and reads its output as a
user would: pods Running with the GPUs their containers see, the NodeAllocationState view, the
cleanup.
"""

from __future__ import annotations

import pathlib
import re

import pytest

from drasat.cli.main import main

pytestmark = pytest.mark.timeout(120)
REPO = pathlib.Path(__file__).resolve().parents[2]

#: `pod NS/NAME  Pending -> Running on NODE`, then `  log [CLAIM]: ENV...` lines.
_RUNNING = re.compile(r"^pod (\S+)  Pending -> Running on (\S+)$")

_LOG = re.compile(r"^  log \[(\S+)\]: (.*)$")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """The classic flow."""
    code = main(["demo", "--classic", *argv])
    return code, capsys.readouterr().out


def _pods(out: str) -> dict[str, tuple[str, dict[str, dict[str, str]]]]:
    """pod -> (node, claim -> env) from the Running and log lines."""
    pods: dict[str, tuple[str, dict[str, dict[str, str]]]] = {}
    current = ""
    for line in out.splitlines():
        if match := _RUNNING.match(line):
            current = match.group(1)
            pods[current] = (match.group(2), {})
        elif (match := _LOG.match(line)) and current:
            env = dict(item.split("=", 1) for item in match.group(2).split())
            pods[current][1][match.group(1)] = env
        elif line.startswith("  claim ") and current:
            continue  # v1: the claim's prepared devices, between Running and the log
        else:
            current = ""
    return pods


def _visible(pods: dict[str, tuple[str, dict[str, dict[str, str]]]], pod: str) -> str:
    (env,) = pods[pod][1].values()
    return env["DRASAT_GPU_UUIDS"]


IMPOSSIBLE = """
apiVersion: v1
kind: Namespace
metadata: {name: too-big}
---
apiVersion: gpu.drasat.io/v1alpha1
kind: GpuClaimParameters
metadata: {namespace: too-big, name: eight}
spec: {count: 8}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaimTemplate
metadata: {namespace: too-big, name: eight}
spec:
  spec:
    resourceClassName: gpu.drasat.io
    parametersRef: {apiGroup: gpu.drasat.io, kind: GpuClaimParameters, name: eight}
---
apiVersion: v1
kind: Pod
metadata: {namespace: too-big, name: greedy}
spec:
  containers: [{name: ctr, image: busybox, resources: {claims: [{name: gpus}]}}]
  resourceClaims: [{name: gpus, source: {resourceClaimTemplateName: eight}}]
"""


def test_the_classic_demo_runs_both_reference_cases(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys)
    assert code == 0, out
    pods = _pods(out)
    assert set(pods) == {"gpu-test1/pod1", "gpu-test1/pod2", "gpu-test2/pod1", "gpu-test2/pod2"}
    # Case 1: two pods, each with its own GPU.
    first, second = _visible(pods, "gpu-test1/pod1"), _visible(pods, "gpu-test1/pod2")
    assert first.startswith("GPU-") and second.startswith("GPU-") and first != second
    # Case 2: two pods on the same GPU, through one shared claim.
    assert set(pods["gpu-test2/pod1"][1]) == set(pods["gpu-test2/pod2"][1]) == {"shared-gpu"}
    assert _visible(pods, "gpu-test2/pod1") == _visible(pods, "gpu-test2/pod2")
    assert pods["gpu-test2/pod1"][0] == pods["gpu-test2/pod2"][0]
    assert re.search(r"gpu-test2/shared-gpu .* time-sliced \(Long\), 2 pods +pod1,pod2 +yes", out)
    assert re.search(r"gpu-test1/pod1-gpu .* exclusive +pod1 +yes", out), out
    # Everything deleted, every node clean, in the order a user reads it.
    phases = [line for line in out.splitlines() if line.startswith("== ")]
    assert [p.split()[1] for p in phases] == [
        "cluster", "applying", "waiting", "allocations", "deleting", "deleting", "cleanup", "demo",
    ]  # fmt: skip
    assert "claim gpu-test2/shared-gpu  deallocated and gone (deleted with its manifest)" in out
    assert "claim gpu-test1/pod1-gpu  deallocated and gone" in out
    cleanup = [line for line in out.splitlines() if line.startswith("node ") and "CDI" in line]
    assert len(cleanup) == 3 and all(line.endswith("MIG devices  ok") for line in cleanup)
    assert all(" 0 allocated, 0 prepared, 0 CDI specs, 0 MIG devices" in c for c in cleanup)
    assert out.rstrip().endswith("== demo ok: 4 pods ran; every device was cleaned up")


def test_dynamic_mig_creates_and_destroys_mig_devices(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "--example", "dynamic-mig")
    assert code == 0, out
    pods = _pods(out)
    assert len(pods) == 4 and {node for node, _ in pods.values()} == {"a100-node"}
    assert all(_visible(pods, pod).startswith("MIG-") for pod in pods)
    assert len({_visible(pods, pod) for pod in pods}) == 4
    assert "node a100-node: 4 allocated, 4 prepared" in out
    assert "node a100-node: 0 allocated, 0 prepared, 0 CDI specs, 0 MIG devices  ok" in out


@pytest.mark.parametrize(
    "example",
    ["mig-with-parent-gpu", "mps-limits", "nested-selectors", "optional-gpu", "partial-gpus"],
)
def test_every_pod_of_the_example_runs_and_is_cleaned_up(
    capsys: pytest.CaptureFixture[str], example: str
) -> None:
    code, out = _run(capsys, "--example", example)
    assert code == 0, out
    created = len(re.findall(r"^Pod \S+ created$", out, re.MULTILINE))
    assert created and len(_pods(out)) == created
    assert "stays Pending" not in out
    assert out.count("0 MIG devices  ok") == 4  # the lab cluster's nodes
    assert out.rstrip().endswith("every device was cleaned up")


def test_a_policy_example_shows_the_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, "--example", "reservations", "--allow-pending")
    assert code == 0, out
    assert "policy: team-reservations (<examples>/reservations/policy.yaml)" in out
    assert "pod team-a/train  Pending -> Running on h100-node" in out
    assert re.search(r"pod team-b/train  stays Pending: .*policy rule reserve-h100-team-a", out)
    assert "== demo ok: 2 pods ran, 2 stayed Pending; every device was cleaned up" in out


def test_a_pod_that_cannot_run_fails_the_demo_with_the_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    manifest = tmp_path / "impossible.yaml"
    manifest.write_text(IMPOSSIBLE)
    code, out = _run(capsys, "-f", str(manifest), "--timeout", "20")
    assert code == 1, out
    assert re.search(
        r"pod too-big/greedy  stays Pending: Warning UnsuitableNodes on claim greedy-gpus: "
        r"no node fits: .*needs 8 GPUs",
        out,
    ), out
    assert "claim too-big/greedy-gpus  deallocated and gone" in out
    assert out.rstrip().endswith("== demo FAILED: pod too-big/greedy did not run")


LIFECYCLE = """
apiVersion: policy.drasat.io/v1alpha1
kind: AllocationPolicy
metadata: {name: with-init}
spec:
  lifecycle:
    init:
    - {action: setComputeMode, value: ExclusiveProcess}
    - {action: setPowerLimitWatts, value: 60, selector: {productName: "*t4*"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: lc}
---
apiVersion: gpu.drasat.io/v1alpha1
kind: GpuClaimParameters
metadata: {namespace: lc, name: t4}
spec:
  selector: {productName: "tesla*"}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaim
metadata: {namespace: lc, name: t4}
spec:
  resourceClassName: gpu.drasat.io
  parametersRef: {apiGroup: gpu.drasat.io, kind: GpuClaimParameters, name: t4}
---
apiVersion: v1
kind: Pod
metadata: {namespace: lc, name: job}
spec:
  containers: [{name: c, image: ubuntu, resources: {claims: [{name: gpu}]}}]
  resourceClaims: [{name: gpu, source: {resourceClaimName: t4}}]
"""


def test_policy_lifecycle_actions_are_applied_and_undone(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    # The solver copies the policy's init actions into the allocation, the node plugin applies
    # them over the claim's time-slicing setup and restores the baseline (cleanup checks it).
    manifest = tmp_path / "lifecycle.yaml"
    manifest.write_text(LIFECYCLE)
    code, out = _run(capsys, "-f", str(manifest), "--timeout", "20")
    assert code == 0, out
    assert "pod lc/job  Pending -> Running on t4-node" in out
    assert "node t4-node: 0 allocated, 0 prepared, 0 CDI specs, 0 MIG devices  ok" in out


def test_a_mig_profile_the_gpus_do_not_offer_fails_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    text = (REPO / "deploy/examples/dynamic-mig/by-profile.yaml").read_text()
    assert "profile: 3g.20gb" in text
    manifest = tmp_path / "wrong-profile.yaml"
    manifest.write_text(text.replace("profile: 3g.20gb", "profile: 3g.40gb"))  # an A100-80GB one
    # Rejected before anything starts, with the very line the what-if prints for it.
    assert main(["demo", "--classic", "-f", str(manifest)]) == 2
    demo_error = capsys.readouterr().err.strip()
    assert main(["whatif", "-f", str(manifest)]) == 2
    whatif_error = capsys.readouterr().err.strip()
    assert demo_error == whatif_error
    assert "spec.profile: no GPU in the cluster offers MIG profile '3g.40gb'" in demo_error


WORKLOADS = """
apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: gpu.drasat.io/v1alpha1
kind: GpuClaimParameters
metadata: {namespace: apps, name: GPUS}
spec: {count: COUNT}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaimTemplate
metadata: {namespace: apps, name: gpu}
spec:
  spec:
    resourceClassName: gpu.drasat.io
    parametersRef: {apiGroup: gpu.drasat.io, kind: GpuClaimParameters, name: GPUS}
---
apiVersion: apps/v1
kind: Deployment
metadata: {namespace: apps, name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: ctr, image: busybox, resources: {claims: [{name: gpu}]}}]
      resourceClaims: [{name: gpu, source: {resourceClaimTemplateName: gpu}}]
---
apiVersion: batch/v1
kind: Job
metadata: {namespace: apps, name: train}
spec:
  completions: 1
  template:
    spec:
      restartPolicy: Never
      containers: [{name: ctr, image: busybox}]
"""


def test_a_deployment_and_a_job_run_their_pods(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    manifest = tmp_path / "workloads.yaml"
    manifest.write_text(WORKLOADS.replace("GPUS", "one").replace("COUNT", "1"))
    code, out = _run(capsys, "-f", str(manifest), "--timeout", "30")
    assert code == 0, out
    assert "Deployment apps/web: 2 of 2 pod(s) created" in out
    assert "Job apps/train: 1 of 1 pod(s) created" in out
    running = _pods(out)
    web = [p for p in running if p.startswith("apps/web-")]
    train = [p for p in running if p.startswith("apps/train-")]
    assert len(web) == 2 and len(train) == 1, out
    # Each replica got a GPU of its own from its own claim.
    assert len({_visible(running, p) for p in web}) == 2
    assert out.rstrip().endswith("== demo ok: 3 pods ran; every device was cleaned up")


def test_a_deployment_that_runs_fewer_pods_fails_naming_the_manifest(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    manifest = tmp_path / "greedy.yaml"
    manifest.write_text(WORKLOADS.replace("GPUS", "eight").replace("COUNT", "8"))
    code, out = _run(capsys, "-f", str(manifest), "--timeout", "20")
    assert code == 1, out
    # The Job's pod (no GPU) runs; neither replica of the Deployment gets 8 GPUs.
    assert out.rstrip().endswith(
        f"== demo FAILED: {manifest}: document 4: Deployment apps/web asks for 2 pod(s), 0 ran "
        "(2 created)"
    ), out
    # --allow-pending shows the refusal instead of failing; the counts are still checked.
    code, out = _run(capsys, "-f", str(manifest), "--timeout", "20", "--allow-pending")
    assert code == 0, out


def test_bad_input_is_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    assert main(["demo", "--classic", "--example", "no-such-example"]) == 2
    assert "no such example" in capsys.readouterr().err
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\n")
    assert main(["demo", "--classic", "-f", str(wrong)]) == 2
    err = capsys.readouterr().err
    assert "document 1: Gadget g: " in err
    assert "API server does not serve Gadget of example.com/v1" in err
