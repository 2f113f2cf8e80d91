"""The parts live in top-level folders, mapped into `drasat` by package-dir, with no links.

pyproject.toml's `[tool.setuptools] package-dir` names each part's folder (`drasat.api` is
`api/`); setup.py lists the packages under them, and scripts/layout.py gives mypy and
import-linter the same files. These checks keep the tree, the mapping and the tools in step.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import types
from pathlib import Path

import pytest
import repo_layout as layout

REPO = layout.REPO


def _load(path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_repository_holds_no_symlinks() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    links = [line.split("\t", 1)[1] for line in listed.splitlines() if line.startswith("120000")]
    assert links == [], f"symlinks in the repository: {links}"


def test_every_mapped_folder_exists_and_shadows_nothing() -> None:
    dirs = layout.package_dirs()
    assert dirs["drasat"] == REPO / "drasat"
    for name, folder in dirs.items():
        assert (folder / "__init__.py").is_file(), f"{name}: {folder} has no __init__.py"
        # A folder of the same name inside its parent package would be imported instead.
        parent, _, child = name.rpartition(".")
        if parent in dirs:
            assert not (dirs[parent] / child).exists(), f"{dirs[parent] / child} shadows {name}"


def test_every_python_file_under_the_mapped_folders_has_a_module_name() -> None:
    named = set(layout.module_files().values())
    for folder in layout.package_dirs().values():
        for path in folder.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            assert path in named or path.with_suffix(".pyi") in named, (
                f"{path.relative_to(REPO)} is in no package (a folder without __init__.py?)"
            )


def test_packages_import_from_their_real_folders() -> None:
    # The editable install's import finder (or the wheel) maps each name to its folder.
    for name, path in layout.module_files().items():
        if path.name == "__init__.py":
            spec = importlib.util.find_spec(name)
            assert spec is not None and spec.origin == str(path), (name, spec)


def test_setup_lists_every_package_folder() -> None:
    found = set(_load(REPO / "setup.py").packages())
    packages = {name for name, path in layout.module_files().items() if path.name == "__init__.py"}
    assert packages <= found, packages - found
    # Data folders ship too: the node plugin's templates and each example.
    assert {"drasat.nodeplugin.templates", "drasat.examples.reference-cases"} <= found
