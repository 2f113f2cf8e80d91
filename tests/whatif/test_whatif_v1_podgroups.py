"""PodGroups (the Workload API, `scheduling.k8s.io/v1beta1`) in -f manifests: pods that name one
with `spec.schedulingGroup.podGroupName` form its gang, as the controller reads them (its
`minCount` placed together, the pods past it one by one once those are placed; the basic policy
no gang; a PodGroup missing holds its pods back); a malformed PodGroup is refused in one line,
exit 2."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

CLUSTER = """
apiVersion: whatif.drasat.io/v1alpha1
kind: Cluster
metadata: {name: one}
spec:
  nodes:
  - {name: n1, gpus: [{product: T4, count: 2}]}
"""


def _pods(group: str, names: list[str]) -> str:
    out = ""
    for name in names:
        out += textwrap.dedent(f"""
            ---
            apiVersion: v1
            kind: Pod
            metadata: {{name: {name}}}
            spec:
              schedulingGroup: {{podGroupName: {group}}}
              containers: [{{name: c, image: x, resources: {{claims: [{{name: gpu}}]}}}}]
              resourceClaims: [{{name: gpu, resourceClaimTemplateName: one}}]
            """)
    return out


TEMPLATE = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one}
spec:
  spec:
    devices:
      requests:
      - {name: gpu, exactly: {deviceClassName: gpu.drasat.io, count: 1}}
"""


def _group(name: str, policy: str) -> str:
    return textwrap.dedent(f"""
        ---
        apiVersion: scheduling.k8s.io/v1beta1
        kind: PodGroup
        metadata: {{name: {name}}}
        spec: {{schedulingPolicy: {policy}}}
        """)


def _run(run_cli: Any, write_yaml: Any, text: str) -> Any:
    cluster = write_yaml("cluster.yaml", CLUSTER)
    return run_cli("--cluster", cluster, "-f", write_yaml("m.yaml", TEMPLATE + text), "-o", "wide")


def test_a_podgroup_gang_places_its_min_count_together_and_the_rest_after(
    run_cli: Any, write_yaml: Any
) -> None:
    text = _group("train", "{gang: {minCount: 2}}") + _pods("train", ["t0", "t1", "t2"])
    result = _run(run_cli, write_yaml, text)
    assert result.code == 0, result.err
    assert "gang default/podgroup/train: all 2 pods allocated together (t0 on n1, t1 on n1)" in (
        result.out
    )
    assert "pods: 2 placed, 1 unplaced" in result.out


def test_a_podgroup_gang_whose_minimum_does_not_fit_places_none(
    run_cli: Any, write_yaml: Any
) -> None:
    # 3 pods of a gang of at least 3 on 2 GPUs, one GPU each: none goes.
    text = _group("big", "{gang: {minCount: 3}}") + _pods("big", ["b0", "b1", "b2"])
    result = _run(run_cli, write_yaml, text)
    assert result.code == 0, result.err
    assert "pods: 0 placed, 3 unplaced" in result.out


def test_a_basic_podgroup_makes_no_gang(run_cli: Any, write_yaml: Any) -> None:
    text = _group("serve", "{basic: {}}") + _pods("serve", ["s0", "s1", "s2"])
    result = _run(run_cli, write_yaml, text)
    assert result.code == 0, result.err
    assert "gang " not in result.out
    assert "pods: 2 placed, 1 unplaced" in result.out


def test_a_pod_naming_a_missing_podgroup_is_held_with_the_controllers_reason(
    run_cli: Any, write_yaml: Any
) -> None:
    result = _run(run_cli, write_yaml, _pods("later", ["l0"]))
    assert result.code == 0, result.err
    assert (
        "gang default/podgroup/later: PodGroup default/later does not exist yet: none of its "
        "pods is allocated before it does"
    ) in result.out
    assert "pods: 0 placed, 1 unplaced" in result.out


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("{gang: {minCount: 0}}", "spec.schedulingPolicy.gang.minCount: Input should be greater"),
        (
            '{gang: {minCount: "2"}}',
            "spec.schedulingPolicy.gang.minCount: cannot unmarshal string into Go struct field "
            "GangSchedulingPolicy.spec.schedulingPolicy.gang.minCount of type int32",
        ),
        (
            "{gang: {minCount: 2}, basic: {}}",
            "spec.schedulingPolicy: exactly one of gang and basic must be set",
        ),
        ("{}", "spec.schedulingPolicy: exactly one of gang and basic must be set"),
    ],
)
def test_a_malformed_podgroup_is_refused_in_one_line(
    run_cli: Any, write_yaml: Any, policy: str, message: str
) -> None:
    result = _run(run_cli, write_yaml, _group("train", policy) + _pods("train", ["t0"]))
    assert result.code == 2
    assert result.out == ""
    assert result.err.count("\n") == 1
    assert result.err.startswith("error: ") and "document 2: PodGroup default/train: " in (
        result.err
    ), result.err
    assert message in result.err, result.err
