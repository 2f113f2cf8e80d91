"""scripts/layout.py for the tests: every drasat module's import name and its real file.

The parts live in top-level folders mapped into `drasat` by package-dir (pyproject.toml), so a
test that looks at the source files goes through this, not through a walk of drasat/.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "layout.py"
_spec = importlib.util.spec_from_file_location("drasat_layout", _SCRIPT)
assert _spec and _spec.loader
layout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layout)

REPO: Path = layout.REPO
package_dirs = layout.package_dirs
module_files = layout.module_files
