"""The what-if shows gangs (issue 27 item 3): each gang placed whole and where, or not at all
with why; a gang of a Job's pods (the template's labels); a gang with fewer pods than its size
holds nothing."""

from __future__ import annotations

import contextlib
import io
import re
import textwrap
from pathlib import Path

from drasat.cli import main as cli_main

CLUSTER = """
apiVersion: whatif.drasat.io/v1alpha1
kind: Cluster
metadata: {name: racks}
spec:
  nodes:
  - {name: a1, gpus: [{product: T4, count: 4}], labels: {rack: a}}
  - {name: a2, gpus: [{product: T4, count: 2}], labels: {rack: a}}
  - {name: b1, gpus: [{product: T4, count: 4}], labels: {rack: b}}
  - {name: b2, gpus: [{product: T4, count: 2}], labels: {rack: b}}
"""

POLICY = """
apiVersion: policy.drasat.io/v1alpha1
kind: AllocationPolicy
metadata: {name: gangs}
spec:
  gangs: {topologyKey: rack, required: true}
"""

TEMPLATE = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: two}
spec:
  spec:
    devices:
      requests:
      - {name: gpu, exactly: {deviceClassName: gpu.drasat.io, count: 2}}
"""


def _job(name: str, pods: int, size: int) -> str:
    return textwrap.dedent(f"""
        ---
        apiVersion: batch/v1
        kind: Job
        metadata: {{name: {name}}}
        spec:
          parallelism: {pods}
          completions: {pods}
          template:
            metadata:
              labels: {{gpu.drasat.io/gang: {name}, gpu.drasat.io/gang-size: "{size}"}}
            spec:
              restartPolicy: Never
              containers: [{{name: c, image: x, resources: {{claims: [{{name: gpu}}]}}}}]
              resourceClaims: [{{name: gpu, resourceClaimTemplateName: two}}]
        """)


def _whatif(tmp_path: Path, workload: str) -> str:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "work.yaml").write_text(TEMPLATE + workload)
    argv = ["whatif", "--cluster", str(tmp_path / "cluster.yaml"), "--policy",
            str(tmp_path / "policy.yaml"), "-f", str(tmp_path / "work.yaml")]  # fmt: skip
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main.main(argv) == 0
    return out.getvalue()


def test_a_gang_placed_whole_says_where(tmp_path: Path) -> None:
    # 6 GPUs per rack: a gang of 3 x 2 GPUs fits in either, all on one rack.
    text = _whatif(tmp_path, _job("train", 3, 3))
    (line,) = [x for x in text.splitlines() if x.startswith("gang ")]
    assert line.startswith("gang default/train: all 3 pods allocated together (train-")
    assert line.endswith("; policy gangs.topologyKey rack")
    nodes = set(re.findall(r" on (\w+)", line))
    assert len(nodes) >= 2
    assert nodes <= {"a1", "a2"} or nodes <= {"b1", "b2"}, line


def test_a_gang_that_fits_no_rack_is_not_placed_with_why(tmp_path: Path) -> None:
    # 12 free GPUs, 6 per rack: a gang of 4 x 2 GPUs fits in the cluster, in no rack.
    text = _whatif(tmp_path, _job("train", 4, 4))
    assert (
        "gang default/train: not placed (4 pods): its 4 pods do not all fit together within one "
        "value of node label rack"
    ) in text
    assert "pods: 0 placed, 4 unplaced" in text


def test_a_gang_short_of_its_size_holds_nothing(tmp_path: Path) -> None:
    text = _whatif(tmp_path, _job("train", 2, 3))
    assert "not placed: gang default/train has 2 of its 3 pods: none of them is allocated" in text
    assert "pods: 0 placed, 2 unplaced" in text
