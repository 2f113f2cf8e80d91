"""drasat.testbed.controlplane without the binaries: gate parsing, versions, the folder guard, and
`down` signalling exactly the recorded processes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drasat.testbed.controlplane import binaries, realcluster

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
    assert realcluster._disabled_dependencies(log) == {"GenericWorkload", "Other"}


@pytest.mark.parametrize(
    ("minor", "versions"),
    [(30, ("v1alpha2",)), (31, ("v1alpha3",)), (37, ("v1beta1", "v1beta2", "v1alpha3"))],
)
def test_resource_versions_by_minor(minor: int, versions: tuple[str, ...]) -> None:
    assert realcluster.resource_versions(minor) == versions


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
    with pytest.raises(realcluster.ClusterError, match="not empty and holds no cluster"):
        realcluster.Cluster.start(directory=precious, bin_dir=tmp_path / "bin")
    assert (precious / "notes.txt").read_text() == "keep me"


def _record(folder: Path, processes: list[realcluster.Process]) -> None:
    state = {
        "bin_dir": str(folder),
        "url": "",
        "ports": {},
        "tokens": {},
        "feature_gates": [],
        "processes": [p.__dict__ for p in processes],
    }
    (folder / realcluster.STATE_FILE).write_text(json.dumps(state))


def test_down_stops_exactly_the_recorded_processes(tmp_path: Path) -> None:
    recorded = subprocess.Popen(["sleep", "60"])
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        started = realcluster.start_time(recorded.pid) or ""
        # The bystander's pid with another start time: a recycled pid, which must not be signalled.
        impostor = realcluster.Process("kube-scheduler", bystander.pid, "1", "")
        _record(tmp_path, [realcluster.Process("etcd", recorded.pid, started, ""), impostor])
        loaded = realcluster.Cluster.load(tmp_path)
        assert loaded.running()
        assert loaded.stop(grace=5) == ["etcd"]
        assert recorded.wait(5) is not None
        time.sleep(0.1)
        assert bystander.poll() is None
    finally:
        for child in (recorded, bystander):
            child.kill()
            child.wait()


def test_listening_ports_are_drawn_below_the_range_outgoing_connections_use() -> None:
    # The kernel's own pick (port 0) lies in the ephemeral range, where a busy machine's outgoing
    # connection can take it before the component binds (CI: etcd "address already in use").
    low = realcluster._ephemeral_low()
    ports = {realcluster.free_port() for _ in range(20)}
    assert all(realcluster._LISTEN_PORTS[0] <= port < low for port in ports)
    assert len(ports) > 1  # drawn at random, not one fixed port every caller shares


def test_a_port_in_use_is_never_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", realcluster.free_port()))
        held.listen()
        taken = held.getsockname()[1]
        draws = iter([taken - realcluster._LISTEN_PORTS[0]] * 3 + [0] * 64)
        monkeypatch.setattr(realcluster.secrets, "randbelow", lambda _n: next(draws))
        assert realcluster.free_port() != taken


def test_a_start_whose_port_was_taken_is_tried_again_on_other_ports(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    taken = realcluster.ClusterError("etcd exited ...\nbind: address already in use")
    outcomes: list[object] = [taken, taken, "started"]

    def start_once(**_options: object) -> object:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(realcluster.Cluster, "_start_once", staticmethod(start_once))
    said: list[str] = []
    assert realcluster.Cluster.start(directory=tmp_path, progress=said.append) == "started"
    assert said == ["a port was taken meanwhile: starting again on other ports"] * 2


def test_a_start_gives_up_after_its_attempts_and_other_errors_are_not_retried(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[int] = []

    def start_once(**_options: object) -> object:
        calls.append(1)
        raise realcluster.ClusterError(message)

    monkeypatch.setattr(realcluster.Cluster, "_start_once", staticmethod(start_once))
    message = "etcd exited\nbind: address already in use"
    with pytest.raises(realcluster.ClusterError, match="address already in use"):
        realcluster.Cluster.start(directory=tmp_path)
    assert len(calls) == realcluster._START_ATTEMPTS
    calls.clear()
    message = "timed out waiting for kube-apiserver"
    with pytest.raises(realcluster.ClusterError, match="timed out"):
        realcluster.Cluster.start(directory=tmp_path)
    assert len(calls) == 1


# ---------------------------------------------------------------- the versions users run

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("minor", sorted(binaries.USER_VERSIONS))
def test_each_version_is_the_one_its_go_module_pins_and_kube_build_names(minor: str) -> None:
    """binaries.USER_VERSIONS, e2e/kube-<minor>/go.mod and scripts/kube-build agree."""
    patch = binaries.USER_VERSIONS[minor]
    go_mod = (REPO / "e2e" / f"kube-{minor}" / "go.mod").read_text()
    assert f"\tk8s.io/kubernetes {patch}" in go_mod
    assert f"k8s.io/api => k8s.io/api v0.{patch.removeprefix('v1.')}" in go_mod
    script = (REPO / "scripts" / "kube-build").read_text()
    assert f"{minor}|" in script or f"|{minor})" in script
    assert binaries.version_dir(minor).name == f"kube-{patch}"


def test_a_version_folder_can_be_named_by_its_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRASAT_KUBE_BIN_1_34", str(tmp_path))
    assert binaries.version_dir("1.34") == tmp_path
    assert binaries.version_dir("1.37") == binaries.default_dir()
    with pytest.raises(binaries.MissingBinaries, match=re.escape("scripts/kube-build 1.34")):
        binaries.locate(version="1.34")
    with pytest.raises(
        binaries.MissingBinaries, match=re.escape("not one of 1.34, 1.35, 1.36, 1.37")
    ):
        binaries.version_dir("1.33")


def test_default_gates_start_the_release_as_it_comes(tmp_path: Path) -> None:
    """`up --version`: no --feature-gates, no --runtime-config (a user's cluster); without it,
    every DRA gate and every resource.k8s.io version beside v1 turned on."""
    cluster = realcluster.Cluster(directory=tmp_path, bin_dir=tmp_path, minor=34)
    cluster.ports = {"etcd": 1, "apiserver": 2}
    cluster.default_gates = True
    assert not [
        a
        for a in cluster._apiserver_args()
        if a.startswith(("--feature-gates", "--runtime-config"))
    ]
    cluster.default_gates = False
    cluster.feature_gates = ["DRAConsumableCapacity"]
    args = cluster._apiserver_args()
    assert "--feature-gates=DRAConsumableCapacity=true" in args
    assert (
        "--runtime-config=resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true,"
        "resource.k8s.io/v1alpha3=true" in args
    )


def test_kube_cluster_refuses_a_version_it_does_not_build() -> None:
    done = subprocess.run(
        ["python3", "-m", "drasat.testbed.controlplane", "up", "--version", "1.33"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
        env={"DRASAT_KUBE_BIN_SKIP_BUILD": "1", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 2
    assert "invalid choice: '1.33'" in done.stderr


def test_a_child_seen_exited_between_the_two_looks_is_reaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # alive() polls the child (still running), then reads its start time: a child that exits in
    # between reads as gone (a zombie has none). It must be reaped then, or its zombie stays
    # (in a containerd node's PID namespace it kept the node's first process from ever exiting).
    cluster = realcluster.Cluster(directory=tmp_path, bin_dir=tmp_path)
    (tmp_path / "logs").mkdir()
    process = cluster.spawn("sleeper", sys.executable, ["-c", "import time; time.sleep(0.5)"])
    child = realcluster._CHILDREN[process.pid]
    monkeypatch.setattr(realcluster, "start_time", lambda _pid: None)  # as right after its exit
    assert not process.alive()
    assert child.returncode == 0  # reaped, not left a zombie
