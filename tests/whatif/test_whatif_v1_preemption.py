"""The what-if shows preemptions (issue 27 item 3): which running pods the controller would evict
for which refused pod, with priorities read from `priorityClassName` and the manifests'
PriorityClass objects."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

from drasat import solver
from drasat.solver.problem import Mode
from drasat.whatif import run, v1manifests, v1output

CLUSTER = """
apiVersion: whatif.drasat.io/v1alpha1
kind: Cluster
metadata: {name: one}
spec:
  nodes:
  - {name: n1, gpus: [{product: T4, count: 4}]}
"""

CLASSES = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
"""


def _running(name: str, devices: list[str], priority: str, *, standalone: bool = False) -> str:
    """A pod bound to n1 whose claim holds these devices already: a claim of its own (its
    template's, owned by it), or a standalone one (which outlives it)."""
    owner = (
        ""
        if standalone
        else (
            f", ownerReferences: [{{apiVersion: v1, kind: Pod, name: {name}, uid: u-{name}, "
            "controller: true}]"
        )
    )
    results = ", ".join(
        f"{{request: gpu, driver: gpu.drasat.io, pool: n1, device: {d}}}" for d in devices
    )
    return textwrap.dedent(f"""
        ---
        apiVersion: resource.k8s.io/v1
        kind: ResourceClaim
        metadata: {{namespace: ml, name: {name}{owner}}}
        spec:
          devices:
            requests: [{{name: gpu, exactly: {{deviceClassName: gpu.drasat.io,
                         count: {len(devices)}}}}}]
        status:
          allocation:
            devices:
              results: [{results}]
            nodeSelector:
              nodeSelectorTerms: [{{matchFields: [{{key: metadata.name, operator: In,
                                   values: [n1]}}]}}]
        ---
        apiVersion: v1
        kind: Pod
        metadata: {{namespace: ml, name: {name}}}
        spec:
          nodeName: n1
          priorityClassName: {priority}
          containers: [{{name: c, resources: {{claims: [{{name: g}}]}}}}]
          resourceClaims: [{{name: g, resourceClaimName: {name}}}]
        """)


def _pending(name: str, priority: str, never: bool = False, count: int = 1) -> str:
    policy = "\n          preemptionPolicy: Never" if never else ""
    return textwrap.dedent(f"""
        ---
        apiVersion: resource.k8s.io/v1
        kind: ResourceClaim
        metadata: {{namespace: ml, name: {name}}}
        spec:
          devices:
            requests: [{{name: gpu, exactly: {{deviceClassName: gpu.drasat.io,
                         count: {count}}}}}]
        ---
        apiVersion: v1
        kind: Pod
        metadata: {{namespace: ml, name: {name}}}
        spec:
          priorityClassName: {priority}{policy}
          containers: [{{name: c, resources: {{claims: [{{name: g}}]}}}}]
          resourceClaims: [{{name: g, resourceClaimName: {name}}}]
        """)


def _whatif(tmp_path: Path, workload: str) -> str:
    """The table of a run whose running pods and their allocated claims are read from the
    cluster (as `--from-cluster` reads them: a claim of the -f files has its status dropped),
    the rest applied with -f."""
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "work.yaml").write_text(CLASSES + workload)
    inputs = run.read_inputs(
        cluster=str(tmp_path / "cluster.yaml"), manifest_files=[str(tmp_path / "work.yaml")],
        policy=None,
    )  # fmt: skip
    manifests = [
        dataclasses.replace(d, source=v1manifests.LIVE_SOURCE) if _running_now(d.data) else d
        for d in inputs.manifests
    ]
    result = run.run_v1(
        dataclasses.replace(inputs, manifests=manifests), mode=Mode.batch, solve=solver.solve
    )
    return v1output.render(result, "table")


def _running_now(data: dict[str, object]) -> bool:
    """A pod bound to a node, or a claim with an allocation: what exists in the cluster."""
    spec, status = data.get("spec"), data.get("status")
    return (isinstance(spec, dict) and "nodeName" in spec) or isinstance(status, dict)


RUNNING = (
    _running("big", ["gpu-0", "gpu-1"], "low")
    + _running("small", ["gpu-2"], "low")
    + _running("keep", ["gpu-3"], "high")
)


def test_the_smallest_lower_priority_pod_would_be_preempted(tmp_path: Path) -> None:
    text = _whatif(tmp_path, RUNNING + _pending("urgent", "high"))
    assert (
        "preemption: ml/urgent (priority 1000) would evict ml/small (priority 10) on n1 "
        "(proven optimal, " in text
    ), text


def test_no_preemption_for_never_or_equal_priority(tmp_path: Path) -> None:
    text = _whatif(tmp_path, RUNNING + _pending("polite", "high", never=True))
    assert "preemption:" not in text
    text = _whatif(tmp_path, RUNNING + _pending("peer", "low"))
    assert "preemption:" not in text


def test_two_preemptors_never_count_on_one_victim(tmp_path: Path) -> None:
    text = _whatif(tmp_path, RUNNING + _pending("u1", "high") + _pending("u2", "high"))
    said = [line for line in text.splitlines() if line.startswith("preemption:")]
    assert said == [
        "preemption: ml/u1 (priority 1000) would evict ml/small (priority 10) on n1 "
        "(proven optimal, 1 set checked)",
        "preemption: ml/u2 (priority 1000) would evict ml/big (priority 10) on n1 "
        "(proven optimal, 1 set checked)",
    ], text


def test_two_preemptors_never_count_one_free_gpu(tmp_path: Path) -> None:
    # 4 T4s: one free, v1's, v2's (low), keep's (high). Two 2-GPU preemptors: only one of them
    # can run, so one eviction, as the controller makes it.
    workload = (_running("v1", ["gpu-0"], "low") + _running("v2", ["gpu-1"], "low")
                + _running("keep", ["gpu-3"], "high"))  # fmt: skip
    text = _whatif(tmp_path, workload + _pending("u1", "high", count=2)
                   + _pending("u2", "high", count=2))  # fmt: skip
    said = [line for line in text.splitlines() if line.startswith("preemption:")]
    assert len(said) == 1 and "ml/u1" in said[0], text


def test_a_pod_whose_claim_outlives_it_frees_nothing(tmp_path: Path) -> None:
    # big's claim is standalone: nobody gives it back when big leaves, so only small can go.
    workload = (_running("big", ["gpu-0", "gpu-1"], "low", standalone=True)
                + _running("small", ["gpu-2"], "low", standalone=True)
                + _running("keep", ["gpu-3"], "high"))  # fmt: skip
    text = _whatif(tmp_path, workload + _pending("urgent", "high"))
    assert "preemption:" not in text
