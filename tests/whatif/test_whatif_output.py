"""End to end through the CLI: the classic example (the classic wing's, on the embedded compact
cluster), every output format, exit codes. The v1 default: test_whatif_default.py."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from typing import Any

import kubernetes_validate
import pytest
import yaml

from drasat.api.nas import NodeAllocationState
from drasat.cli import whatif as whatif_cli
from drasat.solver.problem import Problem, SolveParams

EXISTING_NAS = """
apiVersion: nas.gpu.resource.nvidia.com/v1alpha1
kind: NodeAllocationState
metadata: {name: node-a, namespace: nvidia-dra-driver}
spec:
  allocatableDevices:
  - gpu: {index: 0, uuid: GPU-aaaa0000-0000-0000-0000-000000000000, memoryBytes: 16106127360,
          productName: Tesla T4}
  - gpu: {index: 1, uuid: GPU-bbbb0000-0000-0000-0000-000000000000, memoryBytes: 16106127360,
          productName: Tesla T4}
  allocatedClaims:
    old-uid:
      claimInfo: {namespace: ns, name: old, uid: old-uid}
      gpu: {devices: [{uuid: GPU-aaaa0000-0000-0000-0000-000000000000}]}
  preparedClaims:
    old-uid:
      gpu: {devices: [{uuid: GPU-aaaa0000-0000-0000-0000-000000000000}]}
status: Ready
"""

POD = """
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ns}}
spec:
  containers: [{{name: c, image: busybox}}]
  resourceClaims: [{{name: gpu, resourceClaimName: {claim}}}]
"""

CLAIM = """
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaim
metadata: {{name: {name}, namespace: ns}}
spec: {{resourceClassName: gpu.drasat.io{params}}}
"""

#: The classic wing's example workload, given alone: placed on the compact example cluster.
CLASSIC_EXAMPLE = "drasat/classic/whatif/default-manifests-classic.yaml"

FOUR_GPUS = """
apiVersion: gpu.drasat.io/v1alpha1
kind: GpuClaimParameters
metadata: {name: four, namespace: ns}
spec: {count: 4}
"""


def _items(text: str) -> list[dict[str, Any]]:
    listing = yaml.safe_load(text)
    assert listing["apiVersion"] == "v1" and listing["kind"] == "List"
    items: list[dict[str, Any]] = listing["items"]
    return items


def _claims(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        f"{i['metadata']['namespace']}/{i['metadata']['name']}": i
        for i in items
        if i["kind"] == "ResourceClaim"
    }


def _devices(claim: dict[str, Any]) -> dict[str, Any]:
    handles = claim["status"]["allocation"]["resourceHandles"]
    assert [h["driverName"] for h in handles] == ["gpu.drasat.io"]
    data: dict[str, Any] = json.loads(handles[0]["data"])
    return data


def test_classic_example_places_the_reference_cases(run_cli: Any) -> None:
    result = run_cli("-f", CLASSIC_EXAMPLE, "-o", "json")
    assert result.code == 0, result.err
    claims = _claims(json.loads(result.out)["items"])
    # case 1: each pod has its own claim, on a different GPU
    one, two = _devices(claims["gpu-test1/pod1-gpu"]), _devices(claims["gpu-test1/pod2-gpu"])
    assert len(one["gpu"]["devices"]) == len(two["gpu"]["devices"]) == 1
    assert one["gpu"]["devices"] != two["gpu"]["devices"]
    # case 2: one claim, one GPU, reserved for both pods, time-sliced with the Long slice
    shared = claims["gpu-test2/shared-gpu"]
    assert [r["name"] for r in shared["status"]["reservedFor"]] == ["pod1", "pod2"]
    devices = _devices(shared)
    assert len(devices["gpu"]["devices"]) == 1
    assert devices["gpu"]["sharing"]["timeSlicingConfig"]["timeSlice"] == "Long"
    assert devices["gpu"]["devices"][0] not in one["gpu"]["devices"] + two["gpu"]["devices"]
    # the MIG claim got a 3g.20gb device; the optional claim is allocated (maybe CPU-only)
    assert _devices(claims["gpu-test3/mig-pod-mig"])["mig"]["devices"][0]["profile"] == "3g.20gb"
    assert "status" in claims["gpu-test4/opt-pod-gpu"]


def test_classic_example_table(run_cli: Any) -> None:
    result = run_cli("-f", CLASSIC_EXAMPLE)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == ["POD", "CLAIM", "NODE", "DEVICES"]
    rows = {tuple(line.split()[:2]): line for line in lines[1:7]}
    assert set(rows) == {
        ("gpu-test1/pod1", "gpu"),
        ("gpu-test1/pod2", "gpu"),
        ("gpu-test2/pod1", "shared-gpu"),
        ("gpu-test2/pod2", "shared-gpu"),
        ("gpu-test3/mig-pod", "mig"),
        ("gpu-test4/opt-pod", "gpu"),
    }
    assert (
        rows[("gpu-test2/pod1", "shared-gpu")].split()[2:]
        == rows[("gpu-test2/pod2", "shared-gpu")].split()[2:]
    )
    assert "3g.20gb@" in rows[("gpu-test3/mig-pod", "mig")]
    assert "pods: 6 placed, 0 unplaced" in result.out
    assert "MIG slices: 4 used, 12 free of 16" in result.out
    assert (
        "ignored: Namespace gpu-test1, gpu-test2, gpu-test3, gpu-test4 "
        f"({CLASSIC_EXAMPLE}): not a kind the what-if places\n"
    ) in result.out


def test_wide_shows_uuids_and_sharing(run_cli: Any) -> None:
    result = run_cli("-f", CLASSIC_EXAMPLE, "-o", "wide")
    assert result.code == 0
    assert result.out.splitlines()[0].split() == [
        "POD", "CLAIM", "RESOURCECLAIM", "CLASS", "NODE", "DEVICES", "SHARING"
    ]  # fmt: skip
    assert "time-sliced (Long), 2 pods" in result.out
    assert f"ignored: Namespace gpu-test1 ({CLASSIC_EXAMPLE}: document 2)" in result.out
    assert "pod1-gpu" in result.out


def _nas_and_claims_case(write_yaml: Any) -> tuple[str, str]:
    cluster = write_yaml("nas.yaml", EXISTING_NAS)
    manifests = write_yaml(
        "m.yaml",
        "\n---\n".join(
            [
                CLAIM.format(name="old", params=""),
                CLAIM.format(name="new", params=""),
                POD.format(name="holder", claim="old"),
                POD.format(name="newcomer", claim="new"),
            ]
        ),
    )
    return cluster, manifests


@pytest.mark.parametrize("output", ["yaml", "json"])
def test_objects_round_trip_and_keep_input_allocations(
    run_cli: Any, write_yaml: Any, output: str
) -> None:
    cluster, manifests = _nas_and_claims_case(write_yaml)
    result = run_cli("--cluster", cluster, "-f", manifests, "-o", output)
    assert result.code == 0, result.err
    items = _items(result.out)
    nas = NodeAllocationState.model_validate(items[0])
    assert nas.apiVersion == "nas.gpu.resource.nvidia.com/v1alpha1"  # the input's group is kept
    assert nas.dump() == items[0]
    claims = nas.spec.allocatedClaims
    assert claims["old-uid"].gpu is not None  # the input allocation is kept as it was
    assert set(nas.spec.preparedClaims) == {"old-uid"}
    new = _claims(items)["ns/new"]
    assert new["metadata"]["uid"] in claims
    assert claims[new["metadata"]["uid"]].gpu.devices[0].uuid == (  # type: ignore[union-attr]
        "GPU-bbbb0000-0000-0000-0000-000000000000"
    )
    # the manifest's claim "old" found its allocation by namespace/name and stays where it is
    old = _claims(items)["ns/old"]
    assert old["metadata"]["uid"] == "old-uid"
    node = old["status"]["allocation"]["availableOnNodes"]["nodeSelectorTerms"][0]
    assert node["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]
    for claim in _claims(items).values():
        kubernetes_validate.validate(claim, "1.30", strict=True)


def test_existing_allocation_is_marked_in_the_table(run_cli: Any, write_yaml: Any) -> None:
    cluster, manifests = _nas_and_claims_case(write_yaml)
    result = run_cli("--cluster", cluster, "-f", manifests)
    holder = next(line for line in result.out.splitlines() if line.startswith("ns/holder"))
    assert "GPU 0 (GPU-aaaa0000) (already allocated)" in holder
    assert "claims: 1 allocated, 1 already in the cluster" in result.out


def test_unplaced_pods_have_a_reason_and_fail_on_unplaced_exits_1(
    run_cli: Any, write_yaml: Any, cluster_file: str
) -> None:
    manifests = write_yaml(
        "m.yaml",
        "\n---\n".join(
            [
                FOUR_GPUS,
                CLAIM.format(
                    name="big",
                    params=", parametersRef: {apiGroup: gpu.drasat.io, kind: GpuClaimParameters,"
                    " name: four}",
                ),
                POD.format(name="big", claim="big"),
            ]
        ),
    )
    result = run_cli("--cluster", cluster_file, "-f", manifests)
    assert result.code == 0
    row = next(line for line in result.out.splitlines() if line.startswith("ns/big"))
    assert "not placed: " in row and len(row.split("not placed: ")[1]) > 5
    assert "pods: 0 placed, 1 unplaced" in result.out
    failed = run_cli("--cluster", cluster_file, "-f", manifests, "--fail-on-unplaced")
    assert failed.code == 1
    assert failed.err == "1 pod(s) not placed\n"
    listing = run_cli("--cluster", cluster_file, "-f", manifests, "-o", "yaml")
    big = _claims(_items(listing.out))["ns/big"]
    assert "status" not in big
    assert big["metadata"]["annotations"]["whatif.drasat.io/reason"] in row


def test_not_ready_node_is_unsuitable(run_cli: Any, write_yaml: Any) -> None:
    cluster = write_yaml("nas.yaml", EXISTING_NAS.replace("status: Ready", "status: NotReady"))
    manifests = write_yaml(
        "m.yaml", CLAIM.format(name="c", params="") + "---\n" + POD.format(name="p", claim="c")
    )
    result = run_cli("--cluster", cluster, "-f", manifests, "--fail-on-unplaced")
    assert result.code == 1
    assert "not placed" in result.out


def test_online_mode_and_stdin(
    run_cli: Any, cluster_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    text = CLAIM.format(name="c", params="") + "---\n" + POD.format(name="p", claim="c")
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    result = run_cli("--cluster", cluster_file, "-f", "-", "--mode", "online")
    assert result.code == 0, result.err
    assert "(online: " in result.out and "pods: 1 placed" in result.out


class _Checker(HTMLParser):
    VOID = frozenset({"meta", "br", "img", "input", "link", "hr"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.text: list[str] = []
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.external.append(value)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_html_is_self_contained_well_formed_and_shows_every_claim(
    run_cli: Any, tmp_path: Any
) -> None:
    out = tmp_path / "report.html"
    result = run_cli("-o", "html", "--out", str(out))
    assert result.code == 0 and result.out == ""
    page = out.read_text()
    checker = _Checker()
    checker.feed(page)
    checker.close()
    assert checker.stack == []
    assert checker.external == []
    text = " ".join(checker.text)
    for claim in (
        "gpu-test1/pod1-gpu",
        "gpu-test1/pod2-gpu",
        "gpu-test2/shared-gpu",
        "gpu-test3/mig-pod-mig",
        "gpu-test4/opt-pod-gpu",
    ):
        assert claim in text
    assert page.count('class="gpu"') == 5  # every GPU of the default cluster is drawn
    assert "3g.20gb gpu-test3/mig-pod-mig" in text  # the MIG device sits in its bar


def test_a_failing_solver_is_reported_not_raised(
    run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(problem: Problem, params: SolveParams) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(whatif_cli, "_solver", lambda: broken)
    result = run_cli("-f", CLASSIC_EXAMPLE)
    assert result.code == 1
    assert result.err == "error: solver failed: RuntimeError: boom\n"
    assert "pods: 0 placed, 6 unplaced" in result.out
    assert "not placed: solver failed: RuntimeError: boom" in result.out
    # The v1 default: each pod the solver held is refused with the error, and the run fails
    # (drasat's fault, not the pods': exit 1 as documented, not 0).
    result = run_cli()
    assert "pods: 0 placed, 6 unplaced" in result.out
    assert "not placed: internal error solving: RuntimeError: boom" in result.out
    assert result.code == 1
    assert result.err == (
        "error: solver failed for 6 pod(s), first: internal error solving: RuntimeError: boom\n"
    )


PAIRED = """
apiVersion: gpu.resource.nvidia.com/v1alpha1
kind: GpuClaimParameters
metadata: {name: mig-gpu, namespace: ns}
spec: {selector: {migEnabled: true}}
---
apiVersion: gpu.resource.nvidia.com/v1alpha1
kind: MigDeviceClaimParameters
metadata: {name: m, namespace: ns}
spec: {profile: 1g.5gb, gpuClaimName: gpu}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaimTemplate
metadata: {name: whole, namespace: ns}
spec: {spec: {resourceClassName: gpu.nvidia.com, parametersRef: {apiGroup: gpu.resource.nvidia.com,
       kind: GpuClaimParameters, name: mig-gpu}}}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaimTemplate
metadata: {name: slice, namespace: ns}
spec: {spec: {resourceClassName: mig.nvidia.com, parametersRef: {apiGroup: gpu.resource.nvidia.com,
       kind: MigDeviceClaimParameters, name: m}}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: paired, namespace: ns}
spec:
  replicas: 1
  template:
    spec:
      containers: [{name: c, image: x}]
      resourceClaims:
      - {name: gpu, resourceClaimTemplateName: whole}
      - {name: mig, resourceClaimTemplateName: slice}
"""


def test_nvidia_manifests_pair_a_mig_device_with_its_pods_gpu(
    run_cli: Any, write_yaml: Any, cluster_file: str, tmp_path: Any
) -> None:
    manifests = write_yaml("paired.yaml", PAIRED)
    result = run_cli("--cluster", cluster_file, "-f", manifests)
    assert result.code == 0, result.err
    rows = [line.split() for line in result.out.splitlines()[1:3]]
    assert rows[0][:4] == ["ns/paired-0", "gpu", "a100", "GPU"]
    assert rows[1][:3] == ["ns/paired-0", "mig", "a100"]
    assert rows[1][3].startswith("1g.5gb@") and rows[1][-1] == "0"  # on the claimed GPU 0
    page = tmp_path / "paired.html"
    html_run = run_cli("--cluster", cluster_file, "-f", manifests, "-o", "html", "--out", str(page))
    assert html_run.code == 0
    assert "held whole by" in page.read_text()


def test_cluster_from_stdin(run_cli: Any, monkeypatch: pytest.MonkeyPatch, write_yaml: Any) -> None:
    import io

    manifests = write_yaml(
        "m.yaml", CLAIM.format(name="c", params="") + "---\n" + POD.format(name="p", claim="c")
    )
    monkeypatch.setattr("sys.stdin", io.StringIO(EXISTING_NAS))
    result = run_cli("--cluster", "-", "-f", manifests)
    assert result.code == 0, result.err
    assert "ns/p  gpu    node-a  GPU 1 (GPU-bbbb0000)" in result.out


LABELLED_CLUSTER = """
apiVersion: whatif.drasat.io/v1alpha1
kind: Cluster
metadata: {name: zones}
spec:
  nodes:
  - {name: t4a, labels: {zone: a}, gpus: [{product: T4, count: 2}]}
  - {name: t4b, labels: {zone: b}, gpus: [{product: T4, count: 2}]}
"""


@pytest.mark.parametrize(
    ("constraint", "node"),
    [
        ("nodeSelector: {zone: b}", "t4b"),
        ("nodeSelector: {kubernetes.io/hostname: t4b}", "t4b"),
        ("nodeName: t4a", "t4a"),
        ("nodeSelector: {zone: c}", None),
    ],
)
def test_node_name_and_selector_limit_the_nodes(
    run_cli: Any, write_yaml: Any, constraint: str, node: str | None
) -> None:
    cluster = write_yaml("zones.yaml", LABELLED_CLUSTER)
    pod = POD.format(name="p", claim="c").replace("spec:\n", f"spec:\n  {constraint}\n", 1)
    manifests = write_yaml("m.yaml", CLAIM.format(name="c", params="") + "---\n" + pod)
    result = run_cli("--cluster", cluster, "-f", manifests)
    assert result.code == 0, result.err
    row = next(line for line in result.out.splitlines() if line.startswith("ns/p "))
    if node is None:
        assert row.endswith("not placed: no node matches the pod's zone=c")
    else:
        assert row.split()[2] == node


def test_a_directory_of_manifests_is_read_like_kubectl_apply(
    run_cli: Any, tmp_path: Any, cluster_file: str
) -> None:
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "1-claim.yaml").write_text(CLAIM.format(name="c", params=""))
    (folder / "2-pod.yml").write_text(POD.format(name="p", claim="c"))
    (folder / "notes.txt").write_text("not yaml: [")
    result = run_cli("--cluster", cluster_file, "-f", str(folder))
    assert result.code == 0, result.err
    assert "pods: 1 placed" in result.out
    empty = tmp_path / "empty"
    empty.mkdir()
    failed = run_cli("--cluster", cluster_file, "-f", str(empty))
    assert (failed.code, failed.err) == (
        2,
        f"error: {empty}: directory holds no .yaml, .yml or .json file\n",
    )


def test_only_one_input_reads_stdin(run_cli: Any) -> None:
    result = run_cli("--cluster", "-", "-f", "-")
    assert (result.code, result.err) == (
        2,
        "error: -: --cluster and -f cannot both read standard input\n",
    )


@pytest.mark.parametrize("preferred", ["t4a", "t4b"])
def test_policy_file_or_shipped_name_reaches_the_solver(
    run_cli: Any, write_yaml: Any, preferred: str
) -> None:
    cluster = write_yaml("zones.yaml", LABELLED_CLUSTER)
    manifests = write_yaml(
        "m.yaml", CLAIM.format(name="c", params="") + "---\n" + POD.format(name="p", claim="c")
    )
    policy = write_yaml(
        "p.yaml",
        "apiVersion: policy.drasat.io/v1alpha1\nkind: AllocationPolicy\nmetadata: {name: mine}\n"
        f"spec: {{objective: [{{term: preferNode, nodes: [{preferred}], weight: 5}}]}}\n",
    )
    result = run_cli("--cluster", cluster, "-f", manifests, "--policy", policy)
    assert result.code == 0, result.err
    assert result.out.splitlines()[1].split()[2] == preferred
    assert run_cli("--cluster", cluster, "-f", manifests, "--policy", "spread").code == 0
    bad = write_yaml(
        "bad.yaml",
        "apiVersion: policy.drasat.io/v1alpha1\nkind: AllocationPolicy\nmetadata: {name: bad}\n"
        "spec: {objective: [{term: binpak}]}\n",
    )
    failed = run_cli("--cluster", cluster, "-f", manifests, "--policy", bad)
    assert failed.code == 2
    assert failed.err.startswith(f"error: {bad}: document 1: AllocationPolicy bad: ")
    assert "spec.objective[0].term" in failed.err


def test_online_wide_says_why_each_node_is_unsuitable(run_cli: Any, write_yaml: Any) -> None:
    cluster = write_yaml(
        "c.yaml",
        LABELLED_CLUSTER.replace("{name: t4b,", "{name: t4b, ready: false,"),
    )
    manifests = write_yaml(
        "m.yaml",
        "\n---\n".join(
            [
                FOUR_GPUS,
                CLAIM.format(
                    name="big",
                    params=", parametersRef: {apiGroup: gpu.drasat.io, kind: GpuClaimParameters,"
                    " name: four}",
                ),
                POD.format(name="big", claim="big"),
            ]
        ),
    )
    result = run_cli("--cluster", cluster, "-f", manifests, "--mode", "online", "-o", "wide")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    start = lines.index("unsuitable nodes:")
    reasons = {line.split(": ", 1)[0].strip(): line for line in lines[start + 1 : start + 3]}
    assert set(reasons) == {"ns/big on t4a", "ns/big on t4b"}
    assert "NotReady" in reasons["ns/big on t4b"]
    # the plain table of the same run has no such section
    plain = run_cli("--cluster", cluster, "-f", manifests, "--mode", "online")
    assert "unsuitable nodes:" not in plain.out
