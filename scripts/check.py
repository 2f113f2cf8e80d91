"""Run every check CI runs, in order, and stop at the first failure.

Used by `make test` (and so by `.ci/run`): format, lint, types, layering (mypy and import-linter
through scripts/typecheck.py and scripts/layers.py, which give them each part's folder under its
`drasat.*` name), the real control plane's binaries (built by scripts/kube-build into their cache
when missing; a cold build takes minutes), the test nodes' container runtime and drasat's images
(scripts/runtime-build, scripts/image-build; likewise cached), a copy without the classic wing
(scripts/without_classic.py: it installs and its v1 tests pass; some of those use the binaries,
so they are built first), then the test suite, whose real-cluster tests use them. pytest's exit
code 5 ("no tests collected") is treated as a failure, not a pass; the 25 slowest tests are
listed at the end, to see where a CI run's time goes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent

STEPS: list[tuple[str, list[str]]] = [
    ("format", [str(BIN / "ruff"), "format", "--check", "."]),
    ("lint", [str(BIN / "ruff"), "check", "."]),
    ("types", [sys.executable, str(REPO / "scripts" / "typecheck.py")]),
    ("layers", [sys.executable, str(REPO / "scripts" / "layers.py")]),
    ("kube binaries", [str(REPO / "scripts" / "kube-build")]),
    ("runtime and images", [str(REPO / "scripts" / "runtime-build")]),
    ("without classic", [sys.executable, str(REPO / "scripts" / "without_classic.py")]),
    ("tests", [sys.executable, "-m", "pytest", "--durations=25", *sys.argv[1:]]),
]


def main() -> int:
    for name, command in STEPS:
        started = time.monotonic()
        shown = command[1:] if command[0] == sys.executable else command
        shown = shown[1:] if shown[0] == "-m" else shown
        print(f"==> {name}: {Path(shown[0]).name} {' '.join(shown[1:])}")
        sys.stdout.flush()
        builds = {"kube binaries": _build_kube, "runtime and images": _build_runtime_and_images}
        code = builds[name]() if name in builds else subprocess.call(command)
        elapsed = time.monotonic() - started
        if code != 0:
            reason = (
                "no tests were collected" if (name == "tests" and code == 5) else f"exit {code}"
            )
            print(f"==> {name} FAILED ({reason}) after {elapsed:.1f}s")
            return 1
        print(f"==> {name} ok ({elapsed:.1f}s)")
    return 0


def _build_kube() -> int:
    """scripts/kube-build for the current (v1.37) and the classic (v1.30) control plane and for
    the oldest version users run that drasat is installed on (1.34, tests/e2e/test_e2e_versions.py),
    and scripts/oracle-build for upstream's allocator; the last stdout line of each is its
    binaries' folder, which the tests get as DRASAT_KUBE_BIN, DRASAT_KUBE_CLASSIC_BIN,
    DRASAT_KUBE_BIN_1_34 and DRASAT_ORACLE_BIN (progress goes to stderr, shown as it comes)."""
    for flavour, variable in (
        ("current", "DRASAT_KUBE_BIN"),
        ("classic", "DRASAT_KUBE_CLASSIC_BIN"),
        ("1.34", "DRASAT_KUBE_BIN_1_34"),
    ):
        command = [str(REPO / "scripts" / "kube-build"), flavour]
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            return done.returncode
        os.environ[variable] = done.stdout.strip().splitlines()[-1]
    # The differential tests' oracle (tests/oracle): upstream's allocator, DRASAT_ORACLE_BIN.
    done = subprocess.run(
        [str(REPO / "scripts" / "oracle-build")], stdout=subprocess.PIPE, text=True
    )
    if done.returncode != 0:
        return done.returncode
    os.environ["DRASAT_ORACLE_BIN"] = done.stdout.strip().splitlines()[-1]
    return 0


def _build_runtime_and_images() -> int:
    """scripts/runtime-build (containerd, runc, the CNI plugins, the pause image) and
    scripts/image-build (localhost/drasat:dev and localhost/drasat-probe:dev), each at once when
    its cache is fresh; the tests get their folders as DRASAT_RUNTIME_BIN and DRASAT_IMAGES."""
    for script, variable in (
        ("runtime-build", "DRASAT_RUNTIME_BIN"),
        ("image-build", "DRASAT_IMAGES"),
    ):
        done = subprocess.run([str(REPO / "scripts" / script)], stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            return done.returncode
        os.environ[variable] = done.stdout.strip().splitlines()[-1]
    return 0


if __name__ == "__main__":
    sys.exit(main())
