"""Where the control plane's binaries are, and which of their feature gates drasat turns on.

`scripts/kube-build` builds them into the cache folder named here; this module only finds them and
reads their `-h` text (no network, no build).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

KUBE_VERSION = "v1.37.2"
ETCD_VERSION = "v3.7.3"
NAMES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")

#: A gate line of a component's `--feature-gates` help, e.g. `DRAAdminAccess=true|false (BETA ...)`.
_GATE_LINE = re.compile(r"^\s+(?:kube:)?([A-Za-z0-9]+)=true\|false\b", re.MULTILINE)


class MissingBinaries(RuntimeError):
    """The cache folder lacks a binary: the message says how to build them."""


def default_dir() -> Path:
    """`$DRASAT_KUBE_BIN`, else `~/.cache/drasat/kube-v1.37.2` (honouring `$XDG_CACHE_HOME`)."""
    explicit = os.environ.get("DRASAT_KUBE_BIN")
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "drasat" / f"kube-{KUBE_VERSION}"


def locate(directory: Path | None = None) -> Path:
    """The folder holding all four binaries, or MissingBinaries naming what is absent."""
    folder = directory or default_dir()
    missing = [name for name in NAMES if not os.access(folder / name, os.X_OK)]
    if missing:
        raise MissingBinaries(
            f"{folder}: no {', '.join(missing)}: build them with scripts/kube-build "
            "(a cold build takes tens of minutes; see README.md) or set DRASAT_KUBE_BIN"
        )
    return folder


def listed_gates(binary: Path) -> set[str]:
    """Every feature gate `binary -h` lists (an unknown gate would be fatal at start)."""
    text = subprocess.run(
        [str(binary), "-h"], capture_output=True, text=True, check=False, timeout=60
    ).stdout
    return set(_GATE_LINE.findall(text))
