"""drasat.testbed.controlplane without the binaries: gate parsing, versions, the folder guard, and
`down` signalling exactly the recorded processes."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from drasat.testbed.controlplane import binaries, cluster

HELP = """\
      --feature-gates colonSeparatedMultimapStringString   Comma-separated list ...
                                                           kube:APIResponseCompression=true|false (BETA - default=true)
                                                           kube:DRAConsumableCapacity=true|false (BETA - default=true)
                                                           DynamicResourceAllocation=true|false (ALPHA - default=false)
      --goaway-chance float
"""  # noqa: E501 - the help text's own line length


def test_gates_are_read_from_the_help_text_with_or_without_the_component_prefix(
    tmp_path: Path,
) -> None:
    fake = tmp_path / "kube-apiserver"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{HELP}EOF\n")
    fake.chmod(0o755)
    assert binaries.listed_gates(fake) == {
        "APIResponseCompression",
        "DRAConsumableCapacity",
        "DynamicResourceAllocation",
    }


def test_a_dependency_the_server_names_is_parsed() -> None:
    log = (
        'E1203 run.go:72] "command failed" err="DRAWorkloadResourceClaims is enabled, but depends '
        'on features that are disabled: [GenericWorkload Other]"'
    )
    assert cluster._disabled_dependencies(log) == {"GenericWorkload", "Other"}


@pytest.mark.parametrize(
    ("minor", "versions"),
    [(30, ("v1alpha2",)), (31, ("v1alpha3",)), (37, ("v1beta1", "v1beta2", "v1alpha3"))],
)
def test_resource_versions_by_minor(minor: int, versions: tuple[str, ...]) -> None:
    assert cluster.resource_versions(minor) == versions


def test_missing_binaries_name_the_build_command(tmp_path: Path) -> None:
    with pytest.raises(binaries.MissingBinaries, match="scripts/kube-build classic"):
        binaries.locate(tmp_path, classic=True)


def test_a_folder_that_is_not_a_cluster_is_never_emptied(tmp_path: Path) -> None:
    for name in binaries.NAMES:
        (tmp_path / "bin").mkdir(exist_ok=True)
        (tmp_path / "bin" / name).write_text("#!/bin/sh\necho Kubernetes v1.37.2\n")
        (tmp_path / "bin" / name).chmod(0o755)
    precious = tmp_path / "mine"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(cluster.ClusterError, match="not empty and holds no cluster"):
        cluster.Cluster.start(directory=precious, bin_dir=tmp_path / "bin")
    assert (precious / "notes.txt").read_text() == "keep me"


def _record(folder: Path, processes: list[cluster.Process]) -> None:
    state = {
        "bin_dir": str(folder),
        "url": "",
        "ports": {},
        "tokens": {},
        "feature_gates": [],
        "processes": [p.__dict__ for p in processes],
    }
    (folder / cluster.STATE_FILE).write_text(json.dumps(state))


def test_down_stops_exactly_the_recorded_processes(tmp_path: Path) -> None:
    recorded = subprocess.Popen(["sleep", "60"])
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        started = cluster._start_time(recorded.pid) or ""
        # The bystander's pid with another start time: a recycled pid, which must not be signalled.
        impostor = cluster.Process("kube-scheduler", bystander.pid, "1", "")
        _record(tmp_path, [cluster.Process("etcd", recorded.pid, started, ""), impostor])
        loaded = cluster.Cluster.load(tmp_path)
        assert loaded.running()
        assert loaded.stop(grace=5) == ["etcd"]
        assert recorded.wait(5) is not None
        time.sleep(0.1)
        assert bystander.poll() is None
    finally:
        for child in (recorded, bystander):
            child.kill()
            child.wait()
