"""Classic inputs given alone to `drasat whatif` get an embedded other of their kind (issue 25):
classic manifests the compact example cluster (its NodeAllocationStates), a cluster of
NodeAllocationStates the classic wing's example workload. The v1 default:
tests/whatif/test_whatif_default.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from drasat import loading
from drasat.api import cluster
from drasat.classic.whatif import run as classic_run
from drasat.cli import main
from drasat.cli import whatif as whatif_cli
from drasat.whatif import run

EXAMPLE = "drasat/classic/whatif/default-manifests-classic.yaml"


def _nas_file(tmp_path: Path) -> str:
    """The compact example cluster's nodes as NodeAllocationStates (kubectl get nas -o yaml)."""
    (document,) = run.embedded(run.COMPACT_CLUSTER)
    description = loading.validate(cluster.Cluster, document)
    items = [node.nas.dump() for node in cluster.expand(description.spec)]
    path = tmp_path / "nas.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def _whatif(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main.main(["whatif", *argv]) == 0
    return capsys.readouterr().out


def test_classic_manifests_alone_go_on_the_compact_cluster() -> None:
    inputs = run.read_inputs(cluster=None, manifest_files=[EXAMPLE], policy=None)
    assert [d.data["kind"] for d in inputs.cluster] == ["Cluster"]
    assert inputs.cluster_source == "<embedded>/default-cluster.yaml"
    assert not run.is_v1(inputs)


def test_classic_manifests_alone_run_classic(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _whatif(capsys, "-f", EXAMPLE).splitlines()[1:7]
    # The classic table: devices by GPU index and UUID, the optional claim CPU-only.
    assert [r.split()[:2] for r in rows[:2]] == [
        ["gpu-test1/pod1", "gpu"],
        ["gpu-test1/pod2", "gpu"],
    ]
    assert rows[0].split()[2:] != rows[1].split()[2:]
    assert rows[2].split()[2:] == rows[3].split()[2:] and "(GPU-" in rows[2]
    assert "3g.20gb@" in rows[4]


def test_a_nas_cluster_alone_gets_the_classic_example(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _nas_file(tmp_path)
    inputs = run.read_inputs(
        cluster=path,
        manifest_files=[],
        policy=None,
        classic_example=whatif_cli._classic_example,
    )
    assert inputs.manifests == classic_run.example_manifests()
    assert inputs.manifests_embedded and not run.is_v1(inputs)
    out = _whatif(capsys, "--cluster", path)
    assert "(<embedded>/default-manifests-classic.yaml)" in out
    assert "gpu-test2/pod1     shared-gpu  t4-node    GPU 1 (GPU-fcc3d96e)" in out
    # Without the CLI's hook (or the wing): the v1 example, placed on the same NAS.
    inputs = run.read_inputs(cluster=path, manifest_files=[], policy=None)
    assert run.is_v1(inputs)


def test_the_classic_example_is_classic() -> None:
    documents = classic_run.example_manifests()
    assert documents[0].source == "<embedded>/default-manifests-classic.yaml"
    claims = [d.data for d in documents if d.data["kind"].startswith("ResourceClaim")]
    assert {c["apiVersion"] for c in claims} == {"resource.k8s.io/v1alpha2"}
