"""What a new user meets first in `drasat whatif` (issue 26 item 7): a policy name that is
neither a file nor shipped, an empty input, output meant for `kubectl apply`, NVIDIA's
manifests on the embedded example cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from drasat import policyfiles

if TYPE_CHECKING:  # annotations only: several test folders have a conftest module
    from conftest import RunCli, WriteYaml

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "deploy/examples/v1-nvidia-quickstart"


def test_a_policy_name_that_is_no_file_lists_the_shipped_names(run_cli: RunCli) -> None:
    result = run_cli("--policy", "binpak")
    assert result.code == 2 and result.out == ""
    names = ", ".join(policyfiles.shipped_names())
    assert result.err == (
        f"error: --policy: no shipped policy 'binpak' (known: {names}); or the path of an "
        "AllocationPolicy file\n"
    )
    # A path stays a path: its error is the file's.
    assert run_cli("--policy", "my/policy.yaml").err == "error: my/policy.yaml: no such file\n"


def test_an_empty_input_says_no_objects(run_cli: RunCli, write_yaml: WriteYaml) -> None:
    empty = write_yaml("empty.yaml", "# nothing yet\n---\n")
    result = run_cli("-f", empty)
    assert result.code == 2 and result.out == ""
    assert result.err == f"error: {empty}: no objects (the manifests are empty)\n"


def test_claims_only_leaves_out_the_node_allocation_states(run_cli: RunCli) -> None:
    classic = yaml.safe_load(run_cli("-o", "yaml").out)["items"]
    assert {i["kind"] for i in classic} == {"NodeAllocationState", "ResourceClaim"}
    only = yaml.safe_load(run_cli("-o", "yaml", "--claims-only").out)["items"]
    assert only == [i for i in classic if i["kind"] == "ResourceClaim"]
    v1 = run_cli(
        "--cluster",
        str(QUICKSTART / "cluster/nvidia-slices.yaml"),
        "-f",
        str(QUICKSTART / "gpu-test1.yaml"),
        "-o",
        "json",
        "--claims-only",
    )
    assert {i["kind"] for i in yaml.safe_load(v1.out)["items"]} == {"ResourceClaim"}
    shown = subprocess.run(
        [sys.executable, "-m", "drasat", "whatif", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--claims-only" in shown and "kubectl apply" in " ".join(shown.split())


def test_nvidias_classes_on_the_embedded_cluster_say_what_it_publishes(run_cli: RunCli) -> None:
    result = run_cli("-f", str(QUICKSTART / "gpu-test1.yaml"))
    assert result.code == 0
    reasons = [line for line in result.out.splitlines() if " not placed: " in line]
    assert len(reasons) == 2 and all(
        line.endswith(
            "no published device matches request gpu (class gpu.nvidia.com): no device of the "
            "cluster is of class gpu.nvidia.com; the embedded example cluster (no --cluster) "
            "publishes devices of gpu.drasat.io only"
        )
        for line in reasons
    )
