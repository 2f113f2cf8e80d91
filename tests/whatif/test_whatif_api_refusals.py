"""Input the API server refuses is refused by the what-if (exit 2, one line naming file,
document, object and field), and input it accepts is never refused: a gate a CI pipeline can
trust. Each case here is one a user met (a CEL typo, a container naming a claim its pod does not
declare, a version Kubernetes does not serve, a GPU count past a claim's limit);
tests/whatif/test_whatif_apiserver_oracle.py compares generated ones with the real API server."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import RunCli, WriteYaml

TEMPLATE = """
apiVersion: {version}
kind: ResourceClaimTemplate
metadata: {{name: t4, namespace: ml}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel: {{expression: "{expression}"}}
"""
POD = """
apiVersion: v1
kind: Pod
metadata: {{name: p, namespace: ml}}
spec:
  containers:
  - name: c
    image: x
    resources: {{claims: [{{name: {uses}}}]}}
  resourceClaims:
  - {{name: gpu, resourceClaimTemplateName: t4}}
"""
PRODUCT = "device.attributes['gpu.nvidia.com'].productName"


def _manifests(
    *, version: str = "resource.k8s.io/v1", expression: str = f"{PRODUCT}.contains('T4')",
    uses: str = "gpu",
) -> str:  # fmt: skip
    return TEMPLATE.format(version=version, expression=expression) + "---" + POD.format(uses=uses)


REFUSED = [
    pytest.param(
        _manifests(expression=f"{PRODUCT}.contain('T4')"),
        "document 1: ResourceClaimTemplate ml/t4: "
        "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression: CEL expression "
        f"\"{PRODUCT}.contain('T4')\" does not compile: ERROR: <input>:1:56: undeclared "
        "reference to 'contain' (in container '')",
        id="cel-function-typo",
    ),
    pytest.param(
        _manifests(expression="device.capacity['gpu.nvidia.com'].memory >= 40"),
        "found no matching overload for '_>=_' applied to '(kubernetes.Quantity, int)'",
        id="cel-quantity-compared-with-a-number",
    ),
    pytest.param(
        _manifests(expression="device.driver"),
        "must evaluate to bool or the unknown type, not string",
        id="cel-not-a-bool",
    ),
    pytest.param(
        _manifests(uses="gpux"),
        'document 2: Pod ml/p: spec.containers[0].resources.claims[0]: Not found: "gpux": '
        "must be one of the names in pod.spec.resourceClaims: gpu",
        id="container-names-an-undeclared-claim",
    ),
    pytest.param(
        _manifests(version="resource.k8s.io/v2"),
        "document 1: ResourceClaimTemplate ml/t4: apiVersion: resource.k8s.io/v2: no matches "
        "for kind ResourceClaimTemplate in version resource.k8s.io/v2",
        id="version-not-served",
    ),
    pytest.param(
        _manifests(version="resource.k8s.io/v1").replace(
            "kind: ResourceClaimTemplate", "kind: ResourceClaimTemplates"
        ),
        "kind: ResourceClaimTemplates: no matches for kind ResourceClaimTemplates in version "
        "resource.k8s.io/v1",
        id="kind-not-served",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: p, namespace: ml}
        spec:
          containers:
          - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 1.5}}}
        """,
        "document 1: Pod ml/p: spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid "
        'value: "1.5": must be an integer',
        id="extended-resource-not-whole",
    ),
    pytest.param(
        """
        apiVersion: resource.k8s.io/v1
        kind: ResourceClaimTemplate
        metadata: {name: T4_bad, namespace: ml}
        spec:
          spec:
            devices:
              requests:
              - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: "two"}}
        """,
        # The server decodes before it validates: the count's type is named, not the name.
        "document 1: ResourceClaimTemplate ml/T4_bad: spec.spec.devices.requests[0].exactly."
        "count: cannot unmarshal string into Go struct field "
        "ExactDeviceRequest.spec.spec.devices.requests.exactly.count of type int64",
        id="decoding-error-before-a-bad-name",
    ),
    pytest.param(
        """
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: app, namespace: ml}
        spec:
          replicas: "2"
          selector: {matchLabels: {app: gen}}
          template:
            metadata: {labels: {app: gen}}
            spec:
              containers: [{name: app, image: x, resources: {claims: [{name: gpu}]}}]
              resourceClaims: [{name: gpu}]
        """,
        # The replicas' type is named before the pod claim that names no claim.
        "document 1: Deployment ml/app: spec.replicas: cannot unmarshal string into Go struct "
        "field DeploymentSpec.spec.replicas of type int32",
        id="decoding-error-before-a-pod-spec-problem",
    ),
]


@pytest.mark.parametrize(("manifests", "expected"), REFUSED)
def test_what_the_api_server_refuses_is_refused_in_one_line(
    run_cli: RunCli, write_yaml: WriteYaml, manifests: str, expected: str
) -> None:
    path = write_yaml("app.yaml", manifests)
    result = run_cli("-f", path)
    assert result.code == 2, result
    assert result.out == ""
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), result.err
    assert expected in lines[0], lines[0]


def test_a_gpu_count_past_a_claims_limit_is_a_pod_not_placed_with_the_allocators_words(
    run_cli: RunCli, write_yaml: WriteYaml
) -> None:
    """The API server stores a pod of `nvidia.com/gpu: 33` (and the template of 33 GPUs made for
    it); kube-scheduler's allocator then refuses the claim: not bad input, a pod not placed —
    never a traceback."""
    path = write_yaml(
        "app.yaml",
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: big, namespace: ml}
        spec:
          containers:
          - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 33}}}
        """,
    )
    result = run_cli("-f", path)
    assert result.code == 0, result
    assert (
        "ml/big not placed: ResourceClaim ml/big-drasat-gpu-0-kvs6w: spec.devices.requests[0]: "
        "request gpu: adding 33 devices exceeds the claim limit of 32, with 0 already "
        "accounted for"
    ) in result.out
    gate = run_cli("-f", path, "--fail-on-unplaced")
    assert gate.code == 1 and "Traceback" not in gate.err


ACCEPTED = [
    pytest.param(_manifests(expression=PRODUCT + " == 'Tesla T4'"), id="attribute-compared"),
    pytest.param(_manifests(expression=PRODUCT), id="attribute-alone-is-dyn"),
    pytest.param(
        _manifests(
            expression="device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('16Gi')) >= 0"
        ),
        id="quantity-compared",
    ),
]


@pytest.mark.parametrize("manifests", ACCEPTED)
def test_what_the_api_server_accepts_is_not_refused(
    run_cli: RunCli, write_yaml: WriteYaml, manifests: str
) -> None:
    result = run_cli("-f", write_yaml("app.yaml", manifests))
    assert result.code == 0, result


def test_more_pods_than_one_run_places_is_refused_before_any_work_saying_how_to_split(
    run_cli: RunCli, write_yaml: WriteYaml, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100,000 replicas grew past 7 GB and gave no answer; now one line, before expanding a pod."""
    big = _manifests()  # its template, for the replicas
    deployment = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: big, namespace: ml}
spec:
  replicas: 100000
  selector: {matchLabels: {app: big}}
  template:
    metadata: {labels: {app: big}}
    spec:
      containers: [{name: c, image: x, resources: {claims: [{name: gpu}]}}]
      resourceClaims: [{name: gpu, resourceClaimTemplateName: t4}]
"""
    path = write_yaml("app.yaml", big.split("---")[0] + "---" + deployment)
    result = run_cli("-f", path)
    assert result.code == 2 and result.out == ""
    (line,) = result.err.splitlines()
    assert line.startswith(
        f"error: {path}: document 2: Deployment ml/big: spec.replicas: the manifests stand for "
        "100,000 pods so far, more than one what-if run places (10,000; DRASAT_WHATIF_MAX_PODS "
        "sets another): split the input"
    ), line
    monkeypatch.setenv("DRASAT_WHATIF_MAX_PODS", "100000")
    monkeypatch.setenv("DRASAT_MAX_PODS", "99999")  # the cluster's own limit still holds after
    assert "more than 99,999 pods" in run_cli("-f", path).err


def test_past_the_time_limit_no_batch_model_is_built() -> None:
    """The time limit holds for the whole run: a batch solve that starts past it answers with
    its first pass instead of building the model (which outgrew the limit at 2,000 replicas)."""
    import time

    from drasat.solver import solve
    from drasat.solver.problem import Mode
    from drasat.whatif import run

    inputs = run.read_inputs(cluster=None, manifest_files=[], policy=None)
    result = run.run_v1(inputs, mode=Mode.batch, solve=solve, deadline=time.monotonic() - 1)
    # No time for the batch model: the first pass's placements, not proven, no bound.
    (solution,) = result.outcome.solutions
    assert solution.status.name == "FEASIBLE" and solution.best_bound is None, solution
