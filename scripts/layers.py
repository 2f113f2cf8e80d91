"""import-linter's contracts (pyproject.toml) over every drasat module, under its real path.

Used by `make layers` and scripts/check.py. import-linter builds its graph with grimp, which
finds a package's modules by walking the one folder the package's import spec names: for
`drasat` that is drasat/, without the parts that package-dir maps in from top-level folders
(`api/` is `drasat.api`). This runs `lint-imports` (arguments are passed on) with grimp told to
walk each folder of package-dir, as scripts/layout.py reads them, under its import name.
"""

from __future__ import annotations

import grimp  # noqa: F401  (sets grimp's default finders, which the ones below replace)
import layout
from grimp.adaptors.modulefinder import ModuleFinder
from grimp.application.config import settings
from grimp.application.ports.filesystem import AbstractFileSystem
from grimp.application.ports.modulefinder import FoundPackage
from grimp.application.ports.packagefinder import AbstractPackageFinder
from importlinter.cli import lint_imports_command

FOLDERS = {str(folder): name for name, folder in layout.package_dirs().items()}


class MappedPackageFinder(AbstractPackageFinder):
    """The folders of a root package: its own and those mapped into it by package-dir."""

    def determine_package_directories(
        self, package_name: str, file_system: AbstractFileSystem
    ) -> set[str]:
        prefix = package_name + "."
        return {f for f, name in FOLDERS.items() if name == package_name or name.startswith(prefix)}


class MappedModuleFinder(ModuleFinder):
    """grimp's finder, naming each mapped folder's modules by its import name."""

    def find_package(
        self, package_name: str, package_directory: str, file_system: AbstractFileSystem
    ) -> FoundPackage:
        return super().find_package(FOLDERS[package_directory], package_directory, file_system)


def main() -> None:
    settings.configure(PACKAGE_FINDER=MappedPackageFinder(), MODULE_FINDER=MappedModuleFinder())
    lint_imports_command()


if __name__ == "__main__":
    main()
