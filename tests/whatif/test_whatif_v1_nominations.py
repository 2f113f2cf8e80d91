"""A nomination in the what-if's input counts as the controller counts it
(`drasat.v1.nominations.believed`, docs/SECURITY.md): the annotation `gpu.drasat.io/nomination`
is the pod's tenant's to write, so it counts only where the pod's `status.nominatedNodeName`
(which only the controller writes) names the same node, at the pod's own priority. A pod of the
`-f` files is one to apply, whose status the API server drops: only a pod read from the cluster
(`--from-cluster`) has one.

One T4; pods a and b each ask one GPU, a listed first. A nominated preemptor goes before its
peers, so a nomination the controller believes gives b the GPU; one it does not changes
nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from drasat import loading
from drasat.cli import whatif as whatif_cli
from drasat.whatif import run, v1manifests

if TYPE_CHECKING:
    from conftest import RunCli, WriteYaml

CLUSTER = """
apiVersion: whatif.drasat.io/v1alpha1
kind: Cluster
metadata: {name: one}
spec:
  nodes:
  - {name: n1, gpus: [{product: T4, count: 1}]}
"""
#: The live cluster of `--from-cluster`: the embedded example's node with one GPU (an L4).
LIVE_NODE = "l4-node"

#: b's annotation: a hold on n1 at a priority far above every pod's.
NOMINATION = (
    '{"node":"n1","priority":1000000,"victims":[],"freed":[],"held":{},'
    '"since":"2026-12-06T00:00:00Z"}'
)


def _manifests(annotated: bool, status: str, node: str = "n1") -> str:
    nomination = NOMINATION.replace('"n1"', f'"{node}"')
    annotation = (
        f"\n  annotations:\n    gpu.drasat.io/nomination: '{nomination}'" if annotated else ""
    )
    return f"""
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{namespace: ml, name: gpu}}
spec:
  spec:
    devices:
      requests: [{{name: gpu, exactly: {{deviceClassName: gpu.drasat.io}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{namespace: ml, name: a}}
spec:
  containers: [{{name: c, image: x, resources: {{claims: [{{name: g}}]}}}}]
  resourceClaims: [{{name: g, resourceClaimTemplateName: gpu}}]
---
apiVersion: v1
kind: Pod
metadata:
  namespace: ml
  name: b{annotation}
spec:
  containers: [{{name: c, image: x, resources: {{claims: [{{name: g}}]}}}}]
  resourceClaims: [{{name: g, resourceClaimTemplateName: gpu}}]
{status}
"""


def _placed(run_cli: RunCli, write_yaml: WriteYaml, annotated: bool, status: str) -> list[str]:
    cluster = write_yaml("cluster.yaml", CLUSTER)
    app = write_yaml("app.yaml", _manifests(annotated, status))
    result = run_cli("--cluster", cluster, "-f", app, "-o", "table")
    assert result.code == 0, result.out + result.err
    return [line.split()[0] for line in result.out.splitlines() if line.endswith("gpu-0")]


@pytest.mark.parametrize(
    "status",
    ["", "status: {nominatedNodeName: n2}", "status: {phase: Pending}"],
    ids=["no status", "another node", "no nominated node"],
)
def test_a_forged_nomination_in_the_input_changes_nothing(
    run_cli: RunCli, write_yaml: WriteYaml, status: str
) -> None:
    without = _placed(run_cli, write_yaml, False, status)
    assert without == ["ml/a"]
    assert _placed(run_cli, write_yaml, True, status) == without


def _on_live_node(obj: dict[str, Any]) -> bool:
    """The live node's Node and its ResourceSlices."""
    return LIVE_NODE in (obj["metadata"]["name"], obj.get("spec", {}).get("nodeName"))


def _placed_live(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch, annotated: bool, status: str
) -> list[str]:
    """As `_placed`, the pods read from a cluster (`--from-cluster`) of one GPU."""
    example = run.embedded("default-slices.yaml")
    nodes = [d.data for d in example if _on_live_node(d.data)]
    pods = loading.parse_documents(_manifests(annotated, status, LIVE_NODE), "-")
    found = [*nodes, *(d.data for d in pods)]
    documents = [loading.Document(v1manifests.LIVE_SOURCE, n, obj)
                 for n, obj in enumerate(found, start=1)]  # fmt: skip

    def live(args: Any) -> list[loading.Document]:
        return documents

    monkeypatch.setattr(whatif_cli, "_live_documents", live)
    result = run_cli("--from-cluster", "-o", "table")
    assert result.code == 0, result.out + result.err
    return [line.split()[0] for line in result.out.splitlines() if line.endswith("gpu-0")]


def test_a_nomination_the_controller_wrote_counts(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The annotation with the pod's `status.nominatedNodeName` on its node, read from the
    cluster: as the controller's cycle, the nominee goes before its peers."""
    status = f"status: {{nominatedNodeName: {LIVE_NODE}}}"
    assert _placed_live(run_cli, monkeypatch, False, status) == ["ml/a"]
    assert _placed_live(run_cli, monkeypatch, True, status) == ["ml/b"]


def test_a_status_in_a_manifest_to_apply_is_dropped(run_cli: RunCli, write_yaml: WriteYaml) -> None:
    """The same pod in an -f file: the API server drops a created pod's status, so the
    nomination is the tenant's word alone and changes nothing."""
    assert _placed(run_cli, write_yaml, True, "status: {nominatedNodeName: n1}") == ["ml/a"]
