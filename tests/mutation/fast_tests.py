"""The test command of the mutation run (`make mutation`): the fast tests of the mutated
modules, with `drasat` imported from the tree this file is in.

The run happens in a copy of the working tree, but the virtual environment's editable install
maps `drasat.*` to the checkout's folders; a finder placed first on `sys.meta_path` maps each
package-dir entry of pyproject.toml to this tree instead, so the tests see the mutant. Exit
status 0: every test passed (the mutant survived).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

TREE = Path(__file__).resolve().parents[2]

#: Fast (a few seconds together) and aimed at drasat/v1/{cel,requests,variants,results}.py and
#: controller/v1inputs.py. The what-if's v1 tests (tests/whatif/test_whatif_v1_*.py) exercise
#: them too but take a minute and more together: too slow for hundreds of mutants.
FAST_TESTS = ("tests/v1", "tests/controller/test_v1inputs.py")

#: The tests aimed at each mutated module, run first when it is the one changed: with -x, a
#: mutant they kill costs one file's tests, not all of them.
AIMED = {
    "drasat/v1/cel.py": (
        "tests/v1/test_v1_cel_semantics.py",
        "tests/v1/test_v1_cel_library.py",
        "tests/v1/test_v1_cel.py",
    ),
    "drasat/v1/requests.py": ("tests/v1/test_v1_requests.py",),
    "drasat/v1/variants.py": ("tests/v1/test_v1_variants.py",),
    "drasat/v1/results.py": ("tests/v1/test_v1_results.py",),
    "controller/v1inputs.py": ("tests/controller/test_v1inputs.py",),
}


class _TreeFinder(importlib.abc.MetaPathFinder):
    """Finds the package-dir packages (`drasat`, `drasat.api` = api/, ...) in this tree."""

    def __init__(self, folders: dict[str, Path]) -> None:
        self.folders = folders

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        folder = self.folders.get(fullname)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


def use_this_tree() -> None:
    with (TREE / "pyproject.toml").open("rb") as f:
        table: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    sys.meta_path.insert(0, _TreeFinder({name: TREE / folder for name, folder in table.items()}))
    # The tests import their helpers (checker, v1kit) from tests/ as the root conftest would.
    sys.path.insert(0, str(TREE / "tests"))
    sys.dont_write_bytecode = True  # a mutant and the original may share a size and a second


#: Tests that fail on the unmutated tree (written by `--baseline`, in the mutation workspace's
#: copy only): they cannot tell a mutant apart, so the run leaves them out and reports them.
FAILING = TREE / "tests" / "mutation" / "failing-before.txt"
#: The unmutated modules' digests (written by `--baseline`), to tell which one a mutant changed.
DIGESTS = TREE / "tests" / "mutation" / "digests.txt"


class _Failures:
    """A pytest plugin that collects the ids of failed tests."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.ids.append(report.nodeid)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.ids.append(report.nodeid)


def main(argv: Sequence[str]) -> int:
    os.chdir(TREE)
    use_this_tree()
    # No conftest: the root one starts nothing these tests need but costs a second per mutant
    # (the kubernetes client, the simulated API server).
    args = ["-q", "-p", "no:cacheprovider", "--noconftest", "-o", "addopts="]
    if argv[:1] == ["--baseline"]:
        failures = _Failures()
        status = int(pytest.main([*args, *(argv[1:] or _fast_tests())], plugins=[failures]))
        FAILING.write_text("".join(f"{i}\n" for i in failures.ids))
        DIGESTS.write_text("".join(f"{m} {_digest(m)}\n" for m in AIMED))
        return status
    failing = FAILING.read_text().split() if FAILING.is_file() else []
    deselect = [f"--deselect={i}" for i in failing]
    # -x: the first failure kills the mutant.
    return int(pytest.main(["-x", *args, *deselect, *(argv or _fast_tests())]))


def _digest(module: str) -> str:
    return hashlib.sha256((TREE / module).read_bytes()).hexdigest()


def _fast_tests() -> list[str]:
    """The fast test files this tree has (an older commit may lack some), those aimed at the
    mutated module first."""
    files: list[str] = []
    for entry in FAST_TESTS:
        path = TREE / entry
        found = sorted(path.glob("test_*.py")) if path.is_dir() else [path] if path.exists() else []
        files += [str(f.relative_to(TREE)) for f in found]
    known = (
        dict(line.split() for line in DIGESTS.read_text().splitlines()) if DIGESTS.is_file() else {}
    )
    changed = [m for m, digest in known.items() if _digest(m) != digest]
    first = [t for m in changed for t in AIMED[m] if t in files]
    return first + [f for f in files if f not in first]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
