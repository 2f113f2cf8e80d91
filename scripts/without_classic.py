"""The classic wing is deletable: a copy of the repository without it installs and passes its
v1 tests (issue 25; a step of scripts/check.py, `make without-classic` alone).

Classic DRA (resource.k8s.io/v1alpha2) lives in one package, drasat/classic, that only the CLI
imports (import-linter's contracts in pyproject.toml), with its tests in tests/classic. This
copies the tracked and new files without them into a temporary folder, installs the copy
(`pip install --no-deps -e`) into a fresh virtual environment that borrows this one's
dependencies, checks that drasat.classic is gone, and runs a fast v1 subset of the copy's tests
there. Arguments are passed on to pytest.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: The classic wing and its tests: what a v1-only copy leaves out.
CLASSIC = ("drasat/classic/", "tests/classic/", "tests/e2e/test_e2e_classic.py")

#: The v1 tests the copy runs: the v1 translation, the v1 controller on the simulated API server,
#: the CLI, the layout (every mapped folder installs), the wings' own rules and the v1 what-if
#: (its embedded default, `drasat whatif` with no arguments, included).
V1_TESTS = (
    "tests/v1",
    "tests/controller",
    "tests/test_cli_env.py",
    "tests/test_cli_lazy.py",
    "tests/test_layout.py",
    "tests/test_wings.py",
    "tests/whatif/test_whatif_classic_wing.py",
    "tests/whatif/test_whatif_default.py",
    "tests/whatif/test_whatif_v1_output.py",
)


def files() -> list[str]:
    """The repository's files as a fresh clone plus work in progress has them."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout.split("\0")
    return [f for f in listed if f and not f.startswith(CLASSIC) and (REPO / f).is_file()]


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="drasat-v1-only-") as tmp:
        copy, venv = Path(tmp) / "drasat", Path(tmp) / "venv"
        for name in files():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = venv / "bin" / "python"
        # This environment's dependencies (a path line in a .pth, so its own editable install
        # of this checkout stays out: only the copy's is found).
        site = Path(
            subprocess.run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                check=True,
                stdout=subprocess.PIPE,
                text=True,
            ).stdout.strip()
        )
        (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
        install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
        install += ["--no-deps", "--no-build-isolation", "-e", str(copy)]
        if subprocess.call(install) != 0:
            print("the copy without drasat/classic does not install")
            return 1
        gone = (
            "import importlib.util as u, sys; sys.exit(u.find_spec('drasat.classic') is not None)"
        )
        if subprocess.call([str(python), "-c", gone], cwd=copy) != 0:
            print("drasat.classic is still importable from the copy")
            return 1
        tests = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *V1_TESTS, *argv]
        return subprocess.call(tests, cwd=copy)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
