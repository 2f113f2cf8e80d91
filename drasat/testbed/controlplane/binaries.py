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
#: The Kubernetes versions users run, beside KUBE_VERSION (`scripts/kube-build 1.34`, ...): each
#: minor's latest patch release the Go module proxy serves, the one e2e/kube-<minor>/go.mod pins
#: (tests/test_controlplane.py checks they agree).
USER_VERSIONS = {"1.34": "v1.34.4", "1.35": "v1.35.4", "1.36": "v1.36.3"}
#: Every version `scripts/kube-cluster up --version` starts, oldest first.
VERSIONS = (*USER_VERSIONS, KUBE_VERSION.removeprefix("v").rsplit(".", 1)[0])
#: The last Kubernetes minor with classic DRA (`resource.k8s.io/v1alpha2`), for classic e2e tests.
CLASSIC_VERSION = "v1.30.14"
ETCD_VERSION = "v3.7.3"
NAMES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")

#: A gate line of a component's `--feature-gates` help, e.g. `DRAAdminAccess=true|false (BETA ...)`.
_GATE_LINE = re.compile(r"^\s+(?:kube:)?([A-Za-z0-9]+)=true\|false\b", re.MULTILINE)


class MissingBinaries(RuntimeError):
    """The cache folder lacks a binary: the message says how to build them."""


def default_dir(*, classic: bool = False) -> Path:
    """`$DRASAT_KUBE_BIN` (`$DRASAT_KUBE_CLASSIC_BIN` for the classic control plane), else
    `~/.cache/drasat/kube-<version>` (honouring `$XDG_CACHE_HOME`)."""
    variable, version = (
        ("DRASAT_KUBE_CLASSIC_BIN", CLASSIC_VERSION)
        if classic
        else ("DRASAT_KUBE_BIN", KUBE_VERSION)
    )
    explicit = os.environ.get(variable)
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "drasat" / f"kube-{version}"


def version_variable(minor: str) -> str:
    """The variable naming a version's binaries: `DRASAT_KUBE_BIN_1_34` (1.37: DRASAT_KUBE_BIN)."""
    if minor not in USER_VERSIONS:
        return "DRASAT_KUBE_BIN"
    return "DRASAT_KUBE_BIN_" + minor.replace(".", "_")


def version_dir(minor: str) -> Path:
    """The binaries of Kubernetes `minor` (one of VERSIONS): its variable if set, else
    `~/.cache/drasat/kube-<patch release>`, where `scripts/kube-build <minor>` builds them."""
    if minor not in VERSIONS:
        raise MissingBinaries(f"Kubernetes {minor}: not one of {', '.join(VERSIONS)}")
    if minor not in USER_VERSIONS:
        return default_dir()
    explicit = os.environ.get(version_variable(minor))
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "drasat" / f"kube-{USER_VERSIONS[minor]}"


def locate(
    directory: Path | None = None, *, classic: bool = False, version: str | None = None
) -> Path:
    """The folder holding all four binaries, or MissingBinaries naming what is absent.
    `version`: a minor of VERSIONS (its folder, when `directory` is not given)."""
    if directory is None and version is not None:
        directory = version_dir(version)
    folder = directory or default_dir(classic=classic)
    missing = [name for name in NAMES if not os.access(folder / name, os.X_OK)]
    if missing:
        build = "scripts/kube-build classic" if classic else "scripts/kube-build"
        variable = "DRASAT_KUBE_CLASSIC_BIN" if classic else "DRASAT_KUBE_BIN"
        if version is not None and version in USER_VERSIONS:
            build, variable = f"scripts/kube-build {version}", version_variable(version)
        raise MissingBinaries(
            f"{folder}: no {', '.join(missing)}: build them with {build} "
            f"(a cold build takes several minutes; see README.md) or set {variable}"
        )
    return folder


def minor_version(binary: Path) -> int:
    """The minor version `binary --version` prints (`Kubernetes v1.37.2` -> 37)."""
    text = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, check=False, timeout=60
    ).stdout
    match = re.search(r"v1\.(\d+)\.", text)
    if match is None:
        raise MissingBinaries(f"{binary}: --version printed no Kubernetes version: {text!r}")
    return int(match.group(1))


def help_text(binary: Path) -> str:
    return subprocess.run(
        [str(binary), "-h"], capture_output=True, text=True, check=False, timeout=60
    ).stdout


def listed_gates(binary: Path) -> set[str]:
    """Every feature gate `binary -h` lists (an unknown gate would be fatal at start)."""
    return set(_GATE_LINE.findall(help_text(binary)))
