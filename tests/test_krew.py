"""The krew plugin of `kubectl drasat` (issue 26 item 6): scripts/krew.py builds the archive and
fills deploy/krew/drasat.yaml; the manifest has what krew checks (name, version, a platform with
uri, sha256 of the archive, bin, the files it takes out of the archive); the archive is the same
bytes for the same input; the launcher installs the wheel once and runs the plugin's entry point
with kubectl's arguments."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
from fnmatch import fnmatch
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import krew  # noqa: E402


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    path = tmp_path / "wheel" / f"drasat-{krew.version()}-py3-none-any.whl"
    path.parent.mkdir()
    path.write_bytes(b"not a real wheel")
    return path


def test_the_manifest_names_the_archive_and_what_krew_takes_from_it(
    wheel: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert krew.main(["--wheel", str(wheel), "--out", str(out), "--uri", "https://h/a.tgz"]) == 0
    plugin = yaml.safe_load((out / "drasat.yaml").read_text())
    assert plugin["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert plugin["kind"] == "Plugin" and plugin["metadata"]["name"] == "drasat"
    spec = plugin["spec"]
    assert spec["version"] == f"v{krew.version()}" and len(spec["shortDescription"]) < 80
    (platform,) = spec["platforms"]
    archive = (out / krew.ARCHIVE).read_bytes()
    assert platform["uri"] == "https://h/a.tgz"
    assert platform["sha256"] == hashlib.sha256(archive).hexdigest()
    with tarfile.open(out / krew.ARCHIVE) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert platform["bin"] == "kubectl-drasat" and members["kubectl-drasat"].mode == 0o755
    for entry in platform["files"]:
        assert any(fnmatch(name, entry["from"]) for name in members), entry


def test_the_archive_is_the_same_bytes_for_the_same_input(wheel: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    assert krew.archive(wheel, first).read_bytes() == krew.archive(wheel, second).read_bytes()


def test_the_launcher_installs_once_and_runs_the_plugin(wheel: Path, tmp_path: Path) -> None:
    """With a stand-in python3 whose `-m venv` makes a venv whose kubectl-drasat echoes its
    arguments (and pip records the install)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text(
        "#!/bin/sh\n"
        '[ "$1 $2" = "-m venv" ] || exit 9\n'
        'mkdir -p "$3/bin"\n'
        'printf \'#!/bin/sh\\necho "installed $*" >> "%s/log"\\n\' "$3" > "$3/bin/python"\n'
        'printf \'#!/bin/sh\\necho "plugin $*"\\n\' > "$3/bin/kubectl-drasat"\n'
        'chmod +x "$3/bin/python" "$3/bin/kubectl-drasat"\n'
    )
    (fake / "python3").chmod(0o755)
    launcher = wheel.parent / "kubectl-drasat"
    launcher.write_bytes((krew.KREW / "kubectl-drasat").read_bytes())
    launcher.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path / "c")}

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [launcher, "explain", "p", "-n", "ns"], env=env, capture_output=True, text=True
        )

    first, second = run(), run()
    assert first.stdout == second.stdout == "plugin explain p -n ns\n"
    assert "first run, installing drasat" in first.stderr and second.stderr == ""
    venv = tmp_path / "c" / "drasat" / f"krew-{krew.version()}"
    assert (venv / "log").read_text().count("installed") == 1
