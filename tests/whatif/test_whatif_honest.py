"""The what-if says what it knows: no OPTIMAL or 0% gap for online mode, and sharing labels that
name what a claim gets."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest
import yaml

#: Nodes of 2 and 1 T4.
TWO_AND_ONE = """
apiVersion: whatif.drasat.io/v1alpha1
kind: Cluster
metadata: {name: two-and-one}
spec:
  nodes:
  - {name: n2, gpus: [{product: T4, count: 2}]}
  - {name: n1, gpus: [{product: T4, count: 1}]}
"""

#: Pods of 1 then 2 GPUs, each with its own claim.
ONE_THEN_TWO = """
apiVersion: gpu.drasat.io/v1alpha1
kind: GpuClaimParameters
metadata: {name: two, namespace: ns}
spec: {count: 2}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaim
metadata: {name: one, namespace: ns}
spec: {resourceClassName: gpu.drasat.io}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaim
metadata: {name: two, namespace: ns}
spec:
  resourceClassName: gpu.drasat.io
  parametersRef: {apiGroup: gpu.drasat.io, kind: GpuClaimParameters, name: two}
---
apiVersion: v1
kind: Pod
metadata: {name: one, namespace: ns}
spec:
  containers: [{name: c, image: busybox}]
  resourceClaims: [{name: gpu, resourceClaimName: one}]
---
apiVersion: v1
kind: Pod
metadata: {name: two, namespace: ns}
spec:
  containers: [{name: c, image: busybox}]
  resourceClaims: [{name: gpu, resourceClaimName: two}]
"""


def _solver_line(out: str) -> str:
    (line,) = [x for x in out.splitlines() if x.startswith("solver:")]
    return line


def _spread_case(write_yaml: Any) -> list[str]:
    cluster = write_yaml("cluster.yaml", TWO_AND_ONE)
    manifests = write_yaml("m.yaml", ONE_THEN_TWO)
    return ["--cluster", cluster, "-f", manifests, "--policy", "spread"]


def test_online_summary_claims_no_whole_set_optimality(run_cli: Any, write_yaml: Any) -> None:
    args = _spread_case(write_yaml)
    online = run_cli(*args, "--mode", "online")
    assert online.code == 0, online.err
    assert "pods: 1 placed, 1 unplaced" in online.out
    line = _solver_line(online.out)
    assert line.startswith("solver: PER_POD_OPTIMAL (online: each pod optimal among its")
    assert "OPTIMAL (online)" not in line
    assert "gap" not in line and "no bound" in line
    # batch mode places both, and that one is proven
    batch = run_cli(*args)
    assert "pods: 2 placed, 0 unplaced" in batch.out
    assert _solver_line(batch.out).startswith(
        "solver: OPTIMAL (batch: proven optimal for the whole set)"
    )
    assert "gap 0.00%" in _solver_line(batch.out)


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_online_html_report_claims_no_gap(run_cli: Any, write_yaml: Any, tmp_path: Any) -> None:
    page = tmp_path / "r.html"
    result = run_cli(
        *_spread_case(write_yaml), "--mode", "online", "-o", "html", "--out", str(page)
    )
    assert result.code == 0, result.err
    parser = _Text()
    parser.feed(page.read_text())
    text = " ".join(" ".join(parser.text).split())
    assert "PER_POD_OPTIMAL online: each pod optimal among its candidate nodes" in text
    assert "no bound" in text
    assert re.search(r"gap \d", text) is None


@pytest.mark.parametrize("output", ["yaml", "json"])
def test_online_objects_carry_the_solver_status(run_cli: Any, write_yaml: Any, output: str) -> None:
    result = run_cli(*_spread_case(write_yaml), "--mode", "online", "-o", output)
    assert result.code == 0, result.err
    claims = [i for i in yaml.safe_load(result.out)["items"] if i["kind"] == "ResourceClaim"]
    assert len(claims) == 2
    for claim in claims:
        solver = claim["metadata"]["annotations"]["whatif.drasat.io/solver"]
        assert solver.startswith("PER_POD_OPTIMAL (online: each pod optimal")
        assert solver.endswith("; no bound")


SHARING_MANIFESTS = """
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaimTemplate
metadata: {name: plain, namespace: ns}
spec: {spec: {resourceClassName: gpu.drasat.io}}
---
apiVersion: gpu.drasat.io/v1alpha1
kind: GpuClaimParameters
metadata: {name: mps, namespace: ns}
spec: {sharing: {strategy: MPS}}
---
apiVersion: gpu.drasat.io/v1alpha1
kind: GpuClaimParameters
metadata: {name: half, namespace: ns}
spec: {share: {compute: 50, memory: 4Gi}, sharing: {strategy: MPS}}
---
apiVersion: gpu.drasat.io/v1alpha1
kind: GpuClaimParameters
metadata: {name: long, namespace: ns}
spec: {sharing: {strategy: TimeSlicing, timeSlicingConfig: {timeSlice: Long}}}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaim
metadata: {name: mps, namespace: ns}
spec:
  resourceClassName: gpu.drasat.io
  parametersRef: {apiGroup: gpu.drasat.io, kind: GpuClaimParameters, name: mps}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaim
metadata: {name: half, namespace: ns}
spec:
  resourceClassName: gpu.drasat.io
  parametersRef: {apiGroup: gpu.drasat.io, kind: GpuClaimParameters, name: half}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaim
metadata: {name: long, namespace: ns}
spec:
  resourceClassName: gpu.drasat.io
  parametersRef: {apiGroup: gpu.drasat.io, kind: GpuClaimParameters, name: long}
---
apiVersion: v1
kind: Pod
metadata: {name: own, namespace: ns}
spec:
  containers: [{name: c, image: busybox}]
  resourceClaims: [{name: gpu, source: {resourceClaimTemplateName: plain}}]
---
apiVersion: v1
kind: Pod
metadata: {name: mps, namespace: ns}
spec:
  containers: [{name: c, image: busybox}]
  resourceClaims: [{name: gpu, resourceClaimName: mps}]
---
apiVersion: v1
kind: Pod
metadata: {name: half, namespace: ns}
spec:
  containers: [{name: c, image: busybox}]
  resourceClaims: [{name: gpu, resourceClaimName: half}]
---
apiVersion: v1
kind: Pod
metadata: {name: long1, namespace: ns}
spec:
  containers: [{name: c, image: busybox}]
  resourceClaims: [{name: gpu, resourceClaimName: long}]
---
apiVersion: v1
kind: Pod
metadata: {name: long2, namespace: ns}
spec:
  containers: [{name: c, image: busybox}]
  resourceClaims: [{name: gpu, resourceClaimName: long}]
"""

FOUR_T4 = """
apiVersion: whatif.drasat.io/v1alpha1
kind: Cluster
metadata: {name: four}
spec:
  nodes:
  - {name: n, gpus: [{product: T4, count: 4}]}
"""


def test_wide_sharing_names_what_each_claim_gets(run_cli: Any, write_yaml: Any) -> None:
    cluster = write_yaml("c.yaml", FOUR_T4)
    manifests = write_yaml("m.yaml", SHARING_MANIFESTS)
    result = run_cli("--cluster", cluster, "-f", manifests, "-o", "wide")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    start = lines[0].index("SHARING")
    sharing = {line.split()[0]: line[start:].strip() for line in lines[1:6]}
    assert sharing == {
        "ns/own": "exclusive",
        "ns/mps": "MPS",
        "ns/half": "share 50%/4Gi (MPS)",
        "ns/long1": "time-sliced (Long), 2 pods",
        "ns/long2": "time-sliced (Long), 2 pods",
    }
    assert "shareable" not in result.out


def test_classic_example_wide_labels_the_reference_cases(run_cli: Any) -> None:
    result = run_cli("-f", "drasat/classic/whatif/default-manifests-classic.yaml", "-o", "wide")
    rows = [line for line in result.out.splitlines() if line.startswith("gpu-test1/")]
    assert len(rows) == 2 and all(row.endswith("  exclusive") for row in rows)
    shared = [line for line in result.out.splitlines() if line.startswith("gpu-test2/")]
    assert len(shared) == 2 and all(r.endswith("time-sliced (Long), 2 pods") for r in shared)
    (optional,) = [line for line in result.out.splitlines() if line.startswith("gpu-test4/")]
    if "none (optional, CPU-only)" in optional:  # no devices: nothing to share
        assert optional.split()[-1] == "-"
    else:
        assert optional.endswith("  exclusive")
