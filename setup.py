"""The package list, derived from `[tool.setuptools] package-dir` in pyproject.toml.

Every module imports as `drasat.*`, but the parts live in top-level folders (`api/` is
`drasat.api`); package-dir maps each import name to its folder. setuptools' find cannot rename,
so this lists every folder under each mapped one as a package (data folders too, such as
`nodeplugin/templates/` and each example), and all other settings stay in pyproject.toml.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_namespace_packages, setup

HERE = Path(__file__).resolve().parent


def packages() -> list[str]:
    with (HERE / "pyproject.toml").open("rb") as f:
        package_dir: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    found = []
    for name, folder in package_dir.items():
        found.append(name)
        subs = find_namespace_packages(str(HERE / folder), exclude=["*__pycache__*"])
        found += [f"{name}.{sub}" for sub in subs if f"{name}.{sub}" not in package_dir]
    return sorted(found)


if __name__ == "__main__":  # as setuptools runs it; tests/test_layout.py imports it
    setup(packages=packages())
