"""Bad input: one line naming file, document, kind namespace/name and field path; exit 2."""

from __future__ import annotations

from typing import Any

import pytest

POD_USING_C = """
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
spec: {containers: [], resourceClaims: [{name: g, resourceClaimName: c}]}
"""


def _params(kind: str, spec: str, version: str = "gpu.drasat.io/v1alpha1") -> str:
    return (
        f"apiVersion: {version}\nkind: {kind}\nmetadata: {{name: x, namespace: ns}}\nspec: {spec}\n"
    )


def _claim(spec: str) -> str:
    return (
        "apiVersion: resource.k8s.io/v1alpha2\nkind: ResourceClaim\n"
        f"metadata: {{name: c, namespace: ns}}\nspec: {spec}\n---\n{POD_USING_C}"
    )


CASES = [
    pytest.param(
        "a: 1\n---\nb: [x\n",
        "document 2: malformed YAML (line 4, column 1): did not find expected ',' or ']'",
        id="malformed-yaml",
    ),
    pytest.param(
        _params("GpuClaimParameter", "{}"),
        "document 1: GpuClaimParameter ns/x: kind: unknown kind 'GpuClaimParameter' in group "
        "gpu.drasat.io (expected one of GpuClaimParameters, MigDeviceClaimParameters, "
        "DeviceClassParameters)",
        id="unknown-kind-in-our-group",
    ),
    pytest.param(
        _params("GpuClaimParameters", "{}", version="gpu.resource.nvidia.com/v1beta1"),
        "document 1: GpuClaimParameters ns/x: apiVersion: unknown version "
        "'gpu.resource.nvidia.com/v1beta1' (expected gpu.resource.nvidia.com/v1alpha1)",
        id="unknown-version-in-nvidia-group",
    ),
    pytest.param(
        _params("GpuClaimParameters", "{cont: 2}"),
        "document 1: GpuClaimParameters ns/x: spec.cont: unknown field",
        id="unknown-field",
    ),
    pytest.param(
        _params(
            "GpuClaimParameters",
            "{sharing: {strategy: TimeSlicing, timeSlicingConfig: {timeSlice: Forever}}}",
        ),
        "document 1: GpuClaimParameters ns/x: spec.sharing.timeSlicingConfig.timeSlice: Input "
        "should be 'Default', 'Short', 'Medium' or 'Long'",
        id="mistyped-nested-field",
    ),
    pytest.param(
        _params("GpuClaimParameters", "{count: two}"),
        "document 1: GpuClaimParameters ns/x: spec.count: Input should be a valid integer, "
        "unable to parse string as an integer",
        id="mistyped-count",
    ),
    pytest.param(
        _params("GpuClaimParameters", "{count: 0}"),
        "document 1: GpuClaimParameters ns/x: spec.count: Input should be greater than or "
        "equal to 1",
        id="count-below-one",
    ),
    pytest.param(
        _params("MigDeviceClaimParameters", "{profile: 9g.99gb}"),
        "document 1: MigDeviceClaimParameters ns/x: spec.profile: no GPU in the cluster offers "
        "MIG profile '9g.99gb' (offered: 1g.10gb, 1g.5gb, 1g.5gb+me, 2g.10gb, 3g.20gb, 4g.20gb, "
        "7g.40gb)",
        id="impossible-mig-profile",
    ),
    pytest.param(
        _claim(
            "{resourceClassName: gpu.drasat.io, parametersRef: {apiGroup: gpu.drasat.io, "
            "kind: GpuClaimParameters, name: nope}}"
        ),
        "document 1: ResourceClaim ns/c: spec.parametersRef: GpuClaimParameters ns/nope "
        "(gpu.drasat.io) is not in the manifests",
        id="missing-parameters",
    ),
    pytest.param(
        _claim(
            "{resourceClassName: gpu.drasat.io, parametersRef: {apiGroup: example.com, "
            "kind: Foo, name: f}}"
        ),
        "document 1: ResourceClaim ns/c: spec.parametersRef: Foo of example.com is not claim "
        "parameters of ours (expected GpuClaimParameters or MigDeviceClaimParameters of "
        "gpu.drasat.io or gpu.resource.nvidia.com)",
        id="foreign-parameters",
    ),
    pytest.param(
        _claim("{resourceClassName: nosuch}"),
        "document 1: ResourceClaim ns/c: spec.resourceClassName: ResourceClass 'nosuch' is not "
        "in the manifests",
        id="missing-class",
    ),
    pytest.param(
        _claim("{resourceClassNam: gpu.drasat.io}"),
        "document 1: ResourceClaim ns/c: spec.resourceClassNam: unknown field; "
        "spec.resourceClassName: Field required",
        id="mistyped-claim-field",
    ),
    pytest.param(
        POD_USING_C,
        "document 1: Pod ns/p: spec.resourceClaims[0].resourceClaimName: ResourceClaim ns/c is "
        "not in the manifests",
        id="missing-claim",
    ),
    pytest.param(
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s, namespace: ns}\n"
        "spec: {replicas: 1, template: {spec: {containers: [], resourceClaims: "
        "[{name: g, resourceClaimTemplateName: t}]}}}\n",
        "document 1: StatefulSet ns/s: spec.template.spec.resourceClaims[0]."
        "resourceClaimTemplateName: ResourceClaimTemplate ns/t is not in the manifests",
        id="missing-template",
    ),
    pytest.param(
        # The pre-1.31 form: a field the current API server's PodResourceClaim lacks.
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s, namespace: ns}\n"
        "spec: {replicas: 1, template: {spec: {containers: [], resourceClaims: "
        "[{name: g, source: {resourceClaimTemplateName: t}}]}}}\n",
        "document 1: StatefulSet ns/s: spec.template.spec.resourceClaims[0].source: strict "
        'decoding error: unknown field "spec.template.spec.resourceClaims[0].source"',
        id="source-without-classic-dra",
    ),
    pytest.param(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ns}\n"
        "spec: {replicas: -1, template: {spec: {containers: []}}}\n",
        "document 1: Deployment ns/d: spec.replicas: Input should be greater than or equal to 0",
        id="negative-replicas",
    ),
    pytest.param(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\n"
        "spec: {containers: [], resourceClaims: [{name: g}]}\n",
        "document 1: Pod ns/p: spec.resourceClaims[0]: Invalid value: must specify one of: "
        "`resourceClaimName`, `resourceClaimTemplateName`",
        id="pod-claim-without-source",
    ),
    pytest.param(
        "apiVersion: policy.drasat.io/v1alpha1\nkind: AllocationPolicy\nmetadata: {name: p}\n",
        "document 1: AllocationPolicy p: kind: AllocationPolicy (policy.drasat.io/v1alpha1) does "
        "not belong in -f manifests: an AllocationPolicy is passed with --policy",
        id="policy-in-manifests",
    ),
    pytest.param(
        "kind: Pod\nmetadata: {name: p}\n",
        "document 1: Pod p: apiVersion: missing",
        id="no-api-version",
    ),
    pytest.param(
        POD_USING_C + "---\n" + POD_USING_C,
        "document 2: Pod ns/p: defined twice (first at {file}: document 1)",
        id="duplicate-object",
    ),
]


@pytest.mark.parametrize(("manifest", "message"), CASES)
def test_bad_manifest(
    run_cli: Any, write_yaml: Any, cluster_file: str, manifest: str, message: str
) -> None:
    path = write_yaml("m.yaml", manifest)
    result = run_cli("--cluster", cluster_file, "-f", path)
    assert result.code == 2
    assert result.out == ""
    assert result.err == f"error: {path}: {message.format(file=path)}\n"


def test_mig_pairing_with_no_such_gpu_claim(
    run_cli: Any, write_yaml: Any, cluster_file: str
) -> None:
    path = write_yaml(
        "m.yaml",
        _params("MigDeviceClaimParameters", "{profile: 1g.5gb, gpuClaimName: gpu}")
        + "---\n"
        + _claim(
            "{resourceClassName: gpu.drasat.io, parametersRef: {apiGroup: gpu.drasat.io, "
            "kind: MigDeviceClaimParameters, name: x}}"
        ),
    )
    result = run_cli("--cluster", cluster_file, "-f", path)
    assert result.code == 2
    assert result.err == (
        f"error: {path}: document 1: MigDeviceClaimParameters ns/x: spec.gpuClaimName: pod ns/p "
        "has no GPU claim named 'gpu' (its GPU claims: none)\n"
    )


def test_bad_cluster_file(run_cli: Any, write_yaml: Any) -> None:
    path = write_yaml(
        "c.yaml",
        "apiVersion: whatif.drasat.io/v1alpha1\nkind: Cluster\nmetadata: {name: c}\n"
        "spec: {nodes: [{name: n, gpus: [{product: T4, count: 0}]}]}\n",
    )
    result = run_cli("--cluster", path)
    assert result.code == 2
    assert result.err == (
        f"error: {path}: document 1: Cluster c: spec.nodes[0].gpus[0].count: Input should be "
        "greater than or equal to 1\n"
    )


@pytest.mark.parametrize("flag", ["-f", "--cluster", "--policy"])
def test_missing_file(run_cli: Any, tmp_path: Any, flag: str) -> None:
    missing = str(tmp_path / "missing.yaml")
    result = run_cli(flag, missing)
    assert (result.code, result.err) == (2, f"error: {missing}: no such file\n")
