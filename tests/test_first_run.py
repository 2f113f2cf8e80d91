"""A first run that explains itself: `make demo` on a fresh checkout installs only what the demo
needs and says so on its first line; the README says how to get drasat without a published
package; README and docs/INSTALL.md say that preemption is on and how to turn it off."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _make_n(*args: str) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # Run under `make test` too: a make started by make says "Entering directory" unless told
    # not to, and inherits the outer one's flags.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True, env=env,
    )  # fmt: skip
    return done.stdout.splitlines()


def test_a_first_make_demo_installs_the_demo_extra_only_and_says_so_first(
    tmp_path: Path,
) -> None:
    commands = _make_n("demo", f"VENV={tmp_path / 'venv'}")
    assert commands[0].startswith('echo "make demo: first run: installing drasat and its [demo]')
    installs = [c for c in commands if "pip install" in c]
    assert len(installs) == 1, commands
    assert "-e '.[demo]'" in installs[0] and "--quiet" not in installs[0]  # pip's progress shown
    assert not any("[dev]" in c for c in commands)
    assert commands[-1] == f"{tmp_path / 'venv'}/bin/drasat demo"


def test_make_demo_uses_the_full_venv_where_make_test_made_one(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").touch()  # newer than pyproject.toml and setup.py
    assert _make_n("demo", f"VENV={venv}") == [f"{venv}/bin/drasat demo"]


def test_the_readme_says_how_to_build_and_install_the_wheel() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "drasat is not published on PyPI" in readme
    assert "python3 -m pip wheel --no-deps -w dist ." in readme
    version = next(
        line.split('"')[1]
        for line in (ROOT / "pyproject.toml").read_text().splitlines()
        if line.startswith("version = ")
    )
    assert f"python3 -m pip install 'dist/drasat-{version}-py3-none-any.whl[demo]'" in readme
    assert "pip install 'drasat[demo]'" not in readme  # names no published package


@pytest.mark.parametrize("doc", ["README.md", "docs/INSTALL.md"])
def test_the_docs_say_preemption_is_on_and_how_to_turn_it_off(doc: str) -> None:
    text = " ".join((ROOT / doc).read_text().split())
    assert "Preemption is on by default" in text
    assert "--set policy.spec.preemption.enabled=false" in text


def test_troubleshooting_no_longer_says_drasat_never_preempts() -> None:
    text = " ".join((ROOT / "docs" / "TROUBLESHOOTING.md").read_text().split())
    v1_part = text.split("## Classic DRA (legacy)")[0]
    assert "drasat does not preempt" not in v1_part
