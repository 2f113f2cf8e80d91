"""`drasat demo` runs the whole system in this process and exits 0 only when every step worked.

Each test runs the real command in-process (`drasat.cli.main.main`) and reads its output as a
user would: pods Running with the GPUs their containers see, the allocations, the cleanup. The
classic flow (`--classic`) is tests/classic/test_classic_demo.py, the v1 flow on the real control
plane (`--kube-bin`) tests/e2e/test_e2e_demo.py.
"""

from __future__ import annotations

import pathlib
import re
import sys

import oneanswer
import pytest

from drasat import loading
from drasat.cli import demo
from drasat.cli.main import main
from drasat.testbed import democluster, demoshow
from drasat.testbed.sim import apply

pytestmark = pytest.mark.timeout(120)
REPO = pathlib.Path(__file__).resolve().parent.parent

#: `pod NS/NAME  Pending -> Running on NODE`, then `  log [CLAIM]: ENV...` lines.
_RUNNING = re.compile(r"^pod (\S+)  Pending -> Running on (\S+)$")
_LOG = re.compile(r"^  log \[(\S+)\]: (.*)$")


def _run_v1(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["demo", *argv])
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


#: An allocation row of the v1 flow: CLAIM NODE DEVICES GPU NAS-SHARING TIME-SLICE RESERVED-FOR.
_ROW = re.compile(r"^  (\S+/\S+) +(\S+) +(\S+) +(GPU \d+ \(\S+\)) +(.+?) +(\w+) +(\S+)$")


def test_the_default_demo_runs_both_reference_cases_on_v1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = _run_v1(capsys)
    assert code == 0, out
    pods = _pods(out)
    assert set(pods) == {
        "gpu-test1-v1/pod1", "gpu-test1-v1/pod2", "gpu-test2-v1/pod1", "gpu-test2-v1/pod2",
    }  # fmt: skip
    rows = {m.group(1): m.groups()[1:] for line in out.splitlines() if (m := _ROW.match(line))}
    # Case (a): two pods, a claim each from the template, each its own whole GPU, exclusive.
    first, second = _visible(pods, "gpu-test1-v1/pod1"), _visible(pods, "gpu-test1-v1/pod2")
    assert first.startswith("GPU-") and second.startswith("GPU-") and first != second
    own = {k: v for k, v in rows.items() if k.startswith("gpu-test1-v1/")}
    assert sorted(v[-1] for v in own.values()) == ["pod1", "pod2"], out
    assert all(v[3] == "exclusive" and v[4] == "Default" for v in own.values()), out
    assert len({(v[0], v[1]) for v in own.values()}) == 2  # two devices
    # Case (b): one claim named by both pods, one GPU, time-sliced Long on the hardware.
    assert set(pods["gpu-test2-v1/pod1"][1]) == set(pods["gpu-test2-v1/pod2"][1]) == {"shared-gpu"}
    assert _visible(pods, "gpu-test2-v1/pod1") == _visible(pods, "gpu-test2-v1/pod2")
    assert pods["gpu-test2-v1/pod1"][0] == pods["gpu-test2-v1/pod2"][0]
    node, device, _gpu, sharing, time_slice, reserved = rows["gpu-test2-v1/shared-gpu"]
    assert node == pods["gpu-test2-v1/pod1"][0] and reserved == "pod1,pod2"
    assert sharing.startswith("time-sliced") and time_slice == "Long", out
    assert f"  claim shared-gpu: {node}/{device}" in out
    # The shared GPU is neither of the exclusive ones.
    assert (node, device) not in {(v[0], v[1]) for v in own.values()}
    phases = [line for line in out.splitlines() if line.startswith("== ")]
    assert [p.split()[1] for p in phases] == [
        "cluster", "applying", "waiting", "allocations", "deleting", "deleting", "cleanup", "took",
        "demo",
    ]  # fmt: skip
    assert "claim gpu-test2-v1/shared-gpu  deallocated and gone (deleted with its manifest)" in out
    made = re.findall(
        r"^claim gpu-test1-v1/pod\d-gpu-\S+  deallocated and gone \(made for its "
        r"pod, deleted with it\)$",
        out,
        re.MULTILINE,
    )
    assert len(made) == 2, out
    cleanup = [line for line in out.splitlines() if line.startswith("node ") and "CDI" in line]
    assert len(cleanup) == 3 and all(line.endswith("MIG devices  ok") for line in cleanup)
    assert all(" 0 allocated, 0 prepared, 0 CDI specs, 0 MIG devices" in c for c in cleanup)
    assert out.rstrip().endswith(
        "== demo ok (simulated API server): 4 pods ran; every device was cleaned up"
    )


def test_v1_mig_devices_are_made_for_the_claim_and_destroyed_after(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = _run_v1(capsys, "--example", "v1-mig-by-profile")
    assert code == 0, out
    pods = _pods(out)
    assert list(pods) == ["gpu-test4-v1/pod"] and pods["gpu-test4-v1/pod"][0] == "a100-node"
    # Each container names one request: its log shows that request's MIG device alone.
    logs = pods["gpu-test4-v1/pod"][1]
    assert sorted(logs) == ["ctr0", "ctr1", "ctr2", "ctr3"]
    visible = [env["DRASAT_GPU_UUIDS"] for env in logs.values()]
    assert len(set(visible)) == 4 and all(v.startswith("MIG-") for v in visible)
    # Four MIG devices of one GPU, on disjoint memory slices, listed by the NAS ledger.
    placements = re.findall(r"MIG (\S+) on GPU (\d) \(slices (\d)-(\d)\)", out)
    assert sorted(p[0] for p in placements) == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"], out
    assert len({p[1] for p in placements}) == 1
    taken = [s for p in placements for s in range(int(p[2]), int(p[3]) + 1)]
    assert len(taken) == len(set(taken)) == 8
    assert "node a100-node: 0 allocated, 0 prepared, 0 CDI specs, 0 MIG devices  ok" in out


V1_WORKLOADS = """
apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: apps, name: gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.drasat.io, allocationMode: ExactCount, count: COUNT}
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
      resourceClaims: [{name: gpu, resourceClaimTemplateName: gpu}]
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


def test_v1_workloads_run_their_pods_or_fail_naming_the_manifest(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    manifest = tmp_path / "workloads.yaml"
    manifest.write_text(V1_WORKLOADS.replace("COUNT", "1"))
    code, out = _run_v1(capsys, "-f", str(manifest), "--timeout", "30")
    assert code == 0, out
    assert "Deployment apps/web: 2 of 2 pod(s) created" in out
    assert "Job apps/train: 1 of 1 pod(s) created" in out
    running = _pods(out)
    web = [p for p in running if p.startswith("apps/web-")]
    assert len(web) == 2 and len([p for p in running if p.startswith("apps/train-")]) == 1
    assert len({_visible(running, p) for p in web}) == 2  # a claim, and a GPU, per replica
    assert out.rstrip().endswith("3 pods ran; every device was cleaned up")
    # Eight GPUs per replica: no node has them; drasat's controller says so on each pod.
    manifest.write_text(V1_WORKLOADS.replace("COUNT", "8"))
    code, out = _run_v1(capsys, "-f", str(manifest), "--timeout", "20")
    assert code == 1, out
    assert re.search(r"pod apps/web-\S+  stays Pending: Warning NotAllocatable: ", out), out
    assert out.rstrip().endswith(
        f"== demo FAILED: {manifest}: document 3: Deployment apps/web asks for 2 pod(s), 0 ran "
        "(2 created)"
    ), out
    code, out = _run_v1(capsys, "-f", str(manifest), "--timeout", "20", "--allow-pending")
    assert code == 0, out
    assert "1 pods ran, 2 stayed Pending; every device was cleaned up" in out


def test_v1_flow_refuses_classic_objects_and_bad_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    manifest = tmp_path / "classic.yaml"
    manifest.write_text(IMPOSSIBLE)
    assert main(["demo", "-f", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert "document 2: GpuClaimParameters too-big/eight: GpuClaimParameters of " in err
    assert "run it with drasat demo --classic" in err
    assert main(["demo", "--kube-bin", str(tmp_path / "no-such-dir")]) == 2
    err = capsys.readouterr().err
    assert "--kube-bin" in err and "no etcd" in err, err
    assert main(["demo", "--classic", "--kube-bin", str(tmp_path)]) == 2
    assert "the real control plane runs the v1 flow only" in capsys.readouterr().err


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


def test_bad_input_is_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path) -> None:
    assert main(["demo", "--example", "no-such-example"]) == 2
    assert "no such example" in capsys.readouterr().err
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\n")
    assert main(["demo", "-f", str(wrong)]) == 2
    err = capsys.readouterr().err
    assert "document 1: Gadget g: " in err
    assert "API server does not serve Gadget of example.com/v1" in err


def test_every_shipped_example_is_offered() -> None:
    names = demo.example_names()
    assert "reference-cases" in names and "dynamic-mig" in names and "clusters" not in names


def test_a_workload_without_pods_is_a_shortfall() -> None:
    body = {
        "kind": "Deployment",
        "metadata": {"namespace": "ns", "name": "web", "uid": "u1"},
        "spec": {"replicas": 3},
    }
    document = loading.Document("app.yaml", 2, body)
    workload = demoshow.Workload(
        apply.Applied(document, body, True), demoshow.wanted_pods(body) or 0
    )
    assert demoshow.shortfalls([workload], {}, {}, allow_pending=True) == [
        "app.yaml: document 2: Deployment ns/web asks for 3 pod(s), 0 ran (0 created)"
    ]
    assert demoshow.wanted_pods({"kind": "Job", "spec": {"parallelism": 4, "completions": 2}}) == 2
    assert demoshow.wanted_pods({"kind": "Job", "spec": {}}) == 1
    assert demoshow.wanted_pods({"kind": "Deployment", "spec": {}}) == 1
    assert demoshow.wanted_pods({"kind": "StatefulSet", "spec": {"replicas": 3}}) == 3
    assert demoshow.wanted_pods({"kind": "Pod"}) is None


def test_a_statefulset_is_for_the_real_control_plane(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """The simulated API server has no StatefulSets (kube-controller-manager makes their pods on
    the real control plane: tests/e2e/test_e2e_demo.py): exit 2 before anything starts, saying
    where it runs."""
    manifest = tmp_path / "web.yaml"
    manifest.write_text(
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: web}\n"
        "spec: {serviceName: web, selector: {matchLabels: {a: b}}, template: {}}\n"
    )
    assert main(["demo", "-f", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert "document 1: StatefulSet web: the simulated API server does not serve StatefulSet" in err
    assert "--kube-bin DIR" in err


def test_classic_without_the_classic_wing_is_bad_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A v1-only install (scripts/without_classic.py) has no drasat.classic: `--classic` says so
    (exit 2), no traceback."""
    monkeypatch.setitem(sys.modules, "drasat.classic.demo", None)  # import fails as if absent
    assert main(["demo", "--classic"]) == 2
    assert "--classic: this drasat has no classic DRA (drasat.classic)" in capsys.readouterr().err


def test_real_kubelets_need_the_node_binaries_and_root(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--kube-bin DIR` runs real kubelets only when DIR holds kubelet and fakecri and the demo
    runs as root; otherwise simulated ones, and the line says why."""
    assert demo._real_kubelets(tmp_path) == (
        False,
        f"simulated ({tmp_path} has no kubelet and fakecri: scripts/kube-build builds them)",
    )
    for name in ("kubelet", "fakecri"):
        (tmp_path / name).touch()
    monkeypatch.setattr(demo.os, "geteuid", lambda: 1000)
    assert demo._real_kubelets(tmp_path) == (False, "simulated (the real kubelet runs as root)")
    monkeypatch.setattr(demo.os, "geteuid", lambda: 0)
    assert demo._real_kubelets(tmp_path) == (
        True,
        f"real (kubelet and fakecri from {tmp_path}, one per node)",
    )


def test_a_real_kubelets_reason_is_its_newest_warning_on_the_pod() -> None:
    """Why a pod did not start on a real kubelet, as `drasat demo --kube-bin` says it on timeout:
    the newest Warning that node's kubelet wrote on it (not another node's, not a Normal one)."""

    def event(node: str, kind: str, reason: str, when: str, pod: str = "p") -> dict[str, object]:
        return {
            "type": kind,
            "reason": reason,
            "message": f"{reason} at {when}",
            "lastTimestamp": when,
            "source": {"component": "kubelet", "host": node},
            "involvedObject": {"kind": "Pod", "namespace": "ns", "name": pod},
        }

    events = [
        event("n1", "Warning", "FailedPrepareDynamicResources", "2026-01-01T00:00:02Z"),
        event("n1", "Warning", "FailedMount", "2026-01-01T00:00:01Z"),
        event("n1", "Normal", "Pulled", "2026-01-01T00:00:03Z"),
        event("n2", "Warning", "Evicted", "2026-01-01T00:00:04Z"),
    ]
    assert democluster.kubelet_warnings(events, "n1") == {
        ("ns", "p"): "Warning FailedPrepareDynamicResources: "
        "FailedPrepareDynamicResources at 2026-01-01T00:00:02Z"
    }
    assert democluster.kubelet_warnings(events, "n3") == {}


@pytest.mark.parametrize(
    "case", ["reference cases", "an nvidia.com/gpu: 1 pod", "pods asking nvidia.com/gpu 1 and 2"]
)
def test_the_demo_runs_each_pod_where_the_whatif_places_it(
    case: str, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """One answer: the same manifests on the same cluster (the default one of both) are placed by
    the what-if and run by the simulated demo on the same devices; a pod asking `nvidia.com/gpu`
    becomes the same claim pod in both (it used to run there with no GPU at all).
    tests/e2e/test_e2e_demo.py holds the real control plane's demo to the same answer."""
    paths = oneanswer.inputs(tmp_path)[case]
    planned = oneanswer.run_whatif(paths, capsys)
    assert planned and all(planned.values()), planned  # every pod placed on some device
    code, out = _run_v1(capsys, *(arg for path in paths for arg in ("-f", str(path))))
    assert code == 0, out
    assert oneanswer.demo_placement(out) == planned, out


def test_a_cluster_of_nvidias_driver_is_for_the_whatif(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """The demo simulates drasat's node plugin on every node: a compact node published in
    NVIDIA's format is refused (exit 2, one line naming the field), not run as drasat's."""
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "apiVersion: whatif.drasat.io/v1alpha1\nkind: Cluster\nmetadata: {name: c}\nspec:\n"
        "  nodes: [{name: n, driver: gpu.nvidia.com, gpus: [{product: T4}]}]\n",
        encoding="utf-8",
    )
    assert main(["demo", "--cluster", str(path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "spec.nodes[0].driver: gpu.nvidia.com: the demo runs drasat's node plugin" in line
