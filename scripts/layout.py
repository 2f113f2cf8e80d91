"""Where each drasat module's file is, from `[tool.setuptools] package-dir` in pyproject.toml.

Every module imports as `drasat.*`, but the parts live in top-level folders (`api/claims.py` is
`drasat.api.claims`). setuptools maps them for the wheel and for editable installs; mypy and
import-linter know nothing of package-dir, so scripts/typecheck.py and scripts/layers.py hand
them the files this module lists, each once, under its real path.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def package_dirs() -> dict[str, Path]:
    """Each mapped package's import name and its folder: `drasat.api` -> <repo>/api."""
    with (REPO / "pyproject.toml").open("rb") as f:
        table: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return {name: REPO / folder for name, folder in table.items()}


def module_files() -> dict[str, Path]:
    """Every module's import name and its file, sorted by name; a stub (.pyi) stands for the
    .py beside it, as it does for mypy. Only folders with an __init__.py are packages."""
    found: dict[str, Path] = {}
    for package, root in package_dirs().items():
        for path in sorted(root.rglob("*.py*")):
            if path.suffix not in (".py", ".pyi"):
                continue
            parts = path.relative_to(root).with_suffix("").parts
            folders = [root.joinpath(*parts[:i]) for i in range(len(parts))]
            if not all((folder / "__init__.py").is_file() for folder in folders):
                continue
            module = ".".join((package, *parts)).removesuffix(".__init__")
            if module in found and path.suffix == ".py":
                continue
            found[module] = path
    return dict(sorted(found.items()))


if __name__ == "__main__":
    for name, file in module_files().items():
        print(f"{name:50} {file.relative_to(REPO)}")
