"""mypy over every drasat module, each under its real path and its import name.

Used by `make typecheck` and scripts/check.py. mypy names a file by its folders (`api/claims.py`
would be `api.claims`) and does not run the import finder of an editable install, so on its own
it cannot see that `api/` is `drasat.api`. This gives it the files scripts/layout.py lists (from
package-dir in pyproject.toml) with their `drasat.*` names, and the options of [tool.mypy] in
pyproject.toml. Arguments are passed on to mypy as options (e.g. `--no-incremental`).
"""

from __future__ import annotations

import sys

import layout
from mypy import build
from mypy.errors import CompileError
from mypy.fscache import FileSystemCache
from mypy.main import process_options
from mypy.modulefinder import BuildSource


def main(argv: list[str]) -> int:
    files = layout.module_files()
    config = layout.REPO / "pyproject.toml"
    # The paths only satisfy mypy's command line; the sources it derives from them (named by
    # their folders) are replaced below.
    fscache = FileSystemCache()
    _, options = process_options(
        ["--config-file", str(config), *argv, *map(str, files.values())], fscache=fscache
    )
    sources = [BuildSource(str(path), module) for module, path in files.items()]
    messages: list[str] = []

    def flush(_filename: str | None, new: list[str], _serious: bool) -> None:
        messages.extend(new)
        for line in new:
            print(line, flush=True)

    try:
        build.build(sources, options, flush_errors=flush, fscache=fscache)
    except CompileError as e:
        if not e.use_stdout:
            for line in e.messages:
                print(line, file=sys.stderr)
        return 2
    errors = [m for m in messages if ": error:" in m]
    if errors:
        files_with_errors = {m.split(":", 1)[0] for m in errors}
        print(
            f"Found {_count(len(errors), 'error')} in {_count(len(files_with_errors), 'file')}"
            f" (checked {len(sources)} source files)"
        )
        return 1
    print(f"Success: no issues found in {len(sources)} source files")
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
