"""The wheel: only `drasat/` at the top, data files inside, and it works in a fresh venv.

Builds from a copy of the source tree (so parallel runs and the checkout's build/ never meet),
installs into a new virtual environment with its dependencies (fast from pip's cache) and runs
both console scripts there, away from the checkout's editable install.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import time
import zipfile

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
# The tool caches by their exact names: a pattern like "*cache*" would also drop source modules
# (solver/cache.py).
_NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    "build",
    "dist",
    "*.egg-info",
    "tests",
    "bench",
    "out",
)
SHIPPED_POLICIES = {
    "binpack",
    "default",
    "fragmentation-aware",
    "reservations-and-limits",
    "spread",
}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(280)]


def _run(*command: str | pathlib.Path, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    work = tmp_path_factory.mktemp("packaging")
    source = work / "src"
    shutil.copytree(REPO, source, ignore=_NOT_SOURCE)
    out = work / "dist"
    _run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
        "--disable-pip-version-check", "-q", "-w", out, source, cwd=work,
    )  # fmt: skip
    (built,) = out.glob("drasat-*.whl")
    return built


def test_wheel_holds_only_the_drasat_package(wheel: pathlib.Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert tops - dist_info == {"drasat"}, "nothing generic may land at the top of site-packages"
    for part in (
        "api",
        "solver",
        "controller",
        "nodeplugin",
        "cli",
        "whatif",
        "kube",
        "classic",
        "testbed",
        "testbed/sim",
    ):
        assert f"drasat/{part}/__init__.py" in names, part
    assert "drasat/py.typed" in names
    # Data files the installed code reads at run time.
    for data in (
        "drasat/whatif/default-cluster.yaml",
        "drasat/whatif/default-slices.yaml",
        "drasat/whatif/default-manifests.yaml",
        "drasat/classic/whatif/default-manifests-classic.yaml",
        "drasat/whatif/report.html.j2",
        "drasat/nodeplugin/templates/mps-control-daemon.yaml.j2",
        "drasat/examples/reference-cases/exclusive-gpus.yaml",
        "drasat/examples/clusters/lab.yaml",
    ):
        assert data in names, data
    policies = {n.removeprefix("drasat/policies/") for n in names if "/policies/" in n}
    assert {f"{p}.yaml" for p in SHIPPED_POLICIES} | {"allocationpolicy.schema.json"} <= policies


def test_wheel_installs_and_runs_in_a_fresh_venv(
    wheel: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    venv = tmp_path / "venv"
    started = time.monotonic()
    # No pip inside the new venv: this interpreter's pip installs into it (`--python`), and
    # skipping byte-compilation of the dependencies halves the install time.
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    bin_dir = venv / "bin"
    _run(
        sys.executable, "-m", "pip", "--python", bin_dir / "python", "install",
        "--disable-pip-version-check", "--no-compile", "-q", wheel, cwd=tmp_path,
    )  # fmt: skip
    installed_in = time.monotonic() - started
    # Run from tmp_path, so the checkout is not on sys.path: this is the installed code.
    # As kubectl's plugin the usage names the command the user typed (issue 26 item 6).
    for script, usage in (("drasat", "usage: drasat"), ("kubectl-drasat", "usage: kubectl drasat")):
        shown = _run(bin_dir / script, "--help", cwd=tmp_path)
        assert shown.stdout.startswith(usage), shown.stdout
        assert "policy" in shown.stdout and "crds" in shown.stdout
    # kubectl's completion of `kubectl drasat ...` runs kubectl_complete-drasat (cobra's answer).
    completed = _run(bin_dir / "kubectl_complete-drasat", "expl", cwd=tmp_path).stdout
    assert completed.splitlines()[-1] == ":4" and completed.startswith("explain\t"), completed
    # Package data through importlib.resources, from site-packages rather than the source tree.
    listed = _run(bin_dir / "drasat", "policy", "list", cwd=tmp_path).stdout
    assert {line.split(":")[0] for line in listed.splitlines()} == SHIPPED_POLICIES
    crds = _run(bin_dir / "drasat", "crds", cwd=tmp_path).stdout
    assert crds.count("kind: CustomResourceDefinition") == 4
    # `make demo` on the installed wheel: embedded cluster and manifests, the solver, ortools.
    demo = _run(bin_dir / "drasat", "whatif", cwd=tmp_path).stdout
    assert "pods: " in demo and " placed" in demo, demo
    # Without the `demo` extra (the image the Helm chart runs) the demo says what to install.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    bare = subprocess.run(
        [str(bin_dir / "drasat"), "demo"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert bare.returncode == 2, bare.stderr
    assert "pip install '<the drasat wheel>[demo]'" in bare.stderr, bare.stderr
    assert bare.stderr.rstrip().endswith("or pip install kubernetes-validate"), bare.stderr
    # `drasat demo` from the wheel with its extra: the whole system on the reference cases.
    _run(
        sys.executable, "-m", "pip", "--python", bin_dir / "python", "install",
        "--disable-pip-version-check", "--no-compile", "-q", f"{wheel}[demo]", cwd=tmp_path,
    )  # fmt: skip
    whole = _run(bin_dir / "drasat", "demo", "--timeout", "60", cwd=tmp_path).stdout
    assert whole.rstrip().endswith("every device was cleaned up"), whole
    print(f"fresh venv with the wheel and its dependencies: {installed_in:.1f}s")
