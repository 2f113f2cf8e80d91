"""The image's supply chain (docs/SECURITY.md, "Supply chain"): what deploy/Dockerfile installs,
pinned with hashes, the licences of what ships, and a CycloneDX bill of materials.

    scripts/supplychain.py lock      # make lock: deploy/requirements.lock and
                                     # deploy/build-requirements.lock (uv pip compile, hashes)
    scripts/supplychain.py licences  # make licences: install the lock into build/supplychain/
                                     # and write deploy/licences.tsv from the packages' metadata
    scripts/supplychain.py sbom      # make sbom: the same, and build/sbom.cdx.json (cyclonedx-py
                                     # over that environment)

`lock`, `licences` and `sbom` reach PyPI, nothing else (the packages' files, checked against
the lock's hashes). The tools are
maintained ones from the dev extra: uv (`uv pip compile --generate-hashes`) and cyclonedx-bom
(`cyclonedx-py`). tests/deploy/test_supply_chain.py checks the files against each other and
pyproject.toml, and that no licence is unknown or outside `ALLOWED`.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "deploy" / "requirements.lock"
BUILD_LOCK = REPO / "deploy" / "build-requirements.lock"
LICENCES = REPO / "deploy" / "licences.tsv"
SBOM = REPO / "build" / "sbom.cdx.json"
WORK = REPO / "build" / "supplychain"
BIN = Path(sys.executable).parent
#: The interpreter the image runs (deploy/Dockerfile's PYTHON_VERSION); the lock is universal
#: (markers for other versions and platforms), resolved from this version up.
PYTHON_VERSION = "3.11"

#: Licences (SPDX ids) what ships may carry: permissive ones, and MPL-2.0 (file-level copyleft,
#: met by shipping the packages' files unchanged with their source on PyPI). No GPL, LGPL, AGPL,
#: SSPL or anything unknown: a package whose licence is none of these fails the test.
ALLOWED = frozenset(
    {
        "Apache-2.0",
        "MIT",
        "BSD-2-Clause",
        "BSD-3-Clause",
        "0BSD",
        "ISC",
        "PSF-2.0",
        "Zlib",
        "CC0-1.0",
        "MPL-2.0",
    }
)

#: What packages write in their free-text License field or classifiers, as SPDX ids.
_SPDX_OF = {
    "apache 2.0": "Apache-2.0",
    "apache-2.0": "Apache-2.0",
    "apache software license": "Apache-2.0",
    "mit": "MIT",
    "mit license": "MIT",
    "bsd-3-clause": "BSD-3-Clause",
    "3-clause bsd license": "BSD-3-Clause",
    "isc": "ISC",
    "psf-2.0": "PSF-2.0",
    "python software foundation license": "PSF-2.0",
    "mpl-2.0": "MPL-2.0",
    "mozilla public license 2.0 (mpl 2.0)": "MPL-2.0",
}

#: Packages whose metadata names no licence, or only "BSD" (which BSD?): read by hand from the
#: LICENSE file in the package's sdist or repository at the locked version.
REVIEWED = {
    "cel-python": "Apache-2.0",  # no License metadata; LICENSE in cloud-custodian/cel-python
    "google-re2": "BSD-3-Clause",  # classifier "BSD License"; RE2's LICENSE is BSD-3-Clause
    "jinja2": "BSD-3-Clause",  # classifier "BSD License"; LICENSE.txt is BSD-3-Clause
    "nvidia-ml-py": "BSD-3-Clause",  # License "BSD"; the header of pynvml.py is BSD-3-Clause
}


@dataclass(frozen=True)
class Pin:
    name: str  # normalized (PEP 503)
    version: str
    marker: str
    hashes: tuple[str, ...]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> list[Pin]:
    """The pins of a `uv pip compile --generate-hashes` file: `name==version [; marker]` with
    its `--hash=sha256:...` continuation lines. ValueError naming the line for anything else."""
    pins: list[Pin] = []
    logical: list[str] = []
    pending = ""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.split("#", 1)[0].strip() if not line.lstrip().startswith("--hash") else line
        text = text.strip()
        if not text:
            continue
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        logical.append(f"{number}:{pending}{text}")
        pending = ""
    for entry in logical:
        number, _, text = entry.partition(":")
        words = text.split()
        hashes = tuple(w.removeprefix("--hash=") for w in words if w.startswith("--hash="))
        requirement = " ".join(w for w in words if not w.startswith("--hash="))
        spec, _, marker = requirement.partition(";")
        found = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s=]+)", spec.strip())
        if not found:
            raise ValueError(f"{path.name}:{number}: not `name==version`: {text[:80]}")
        pins.append(Pin(normalize(found[1]), found[2], marker.strip(), hashes))
    return pins


def read_licences(path: Path = LICENCES) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def licence_ids(expression: str) -> set[str]:
    """The SPDX ids of an expression (`Apache-2.0 AND BSD-2-Clause`, `(MIT OR Apache-2.0)`)."""
    return {w for w in re.split(r"[\s()]+", expression) if w and w not in ("AND", "OR", "WITH")}


def _licence(name: str, metadata: dict[str, object]) -> tuple[str, str]:
    """(SPDX expression, where it came from) of one installed distribution."""
    if name in REVIEWED:
        return REVIEWED[name], "reviewed"
    expression = metadata.get("license_expression")
    if isinstance(expression, str) and expression:
        return expression, "License-Expression"
    text = metadata.get("license")
    first = text.strip().splitlines()[0].strip().lower() if isinstance(text, str) and text else ""
    if first in _SPDX_OF:
        return _SPDX_OF[first], "License"
    classifiers = [
        str(c).rsplit(" :: ", 1)[-1].lower()
        for c in metadata.get("classifier", []) or []  # type: ignore[attr-defined]
        if str(c).startswith("License ::")
    ]
    spdx = {_SPDX_OF[c] for c in classifiers if c in _SPDX_OF}
    if len(spdx) == 1:
        return spdx.pop(), "classifier"
    return "UNKNOWN", "none"


def _run(*command: str) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, cwd=REPO)


def lock() -> None:
    uv = str(BIN / "uv")
    common = ["--universal", "--python-version", PYTHON_VERSION, "--generate-hashes"]
    _run(
        uv,
        "pip",
        "compile",
        "pyproject.toml",
        *common,
        "--custom-compile-command",
        "make lock",
        "-o",
        str(LOCK.relative_to(REPO)),
    )
    # The build stage builds the wheel with these, without build isolation (no unpinned
    # download of setuptools and wheel): [build-system].requires of pyproject.toml.
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    WORK.mkdir(parents=True, exist_ok=True)
    source = WORK / "build-requirements.in"
    source.write_text("".join(f"{r}\n" for r in requires))
    _run(
        uv,
        "pip",
        "compile",
        str(source.relative_to(REPO)),
        *common,
        "--no-annotate",
        "--custom-compile-command",
        "make lock",
        "-o",
        str(BUILD_LOCK.relative_to(REPO)),
    )


def install() -> str:
    """Install exactly the lock (hashes required, no dependency resolution) into a fresh
    environment under build/supplychain/; its interpreter."""
    uv = str(BIN / "uv")
    venv = WORK / "venv"
    _run(uv, "venv", "--quiet", "--clear", "--python", sys.executable, str(venv))
    python = str(venv / "bin" / "python")
    _run(
        uv,
        "pip",
        "install",
        "--quiet",
        "--python",
        python,
        "--require-hashes",
        "--no-deps",
        "-r",
        str(LOCK),
    )
    return python


def licences(python: str = "") -> None:
    """deploy/licences.tsv: each locked package's licence, from its own installed metadata."""
    python = python or install()
    read = (
        "import importlib.metadata as m, json; print(json.dumps([d.metadata.json "
        "for d in m.distributions()]))"
    )
    found = json.loads(
        subprocess.run([python, "-c", read], check=True, capture_output=True, text=True).stdout
    )
    installed = {normalize(str(m["name"])): m for m in found}
    rows = []
    for name, version in sorted({(p.name, p.version) for p in read_lock(LOCK)}):
        metadata = installed.get(name)
        if metadata is None or metadata["version"] != version:
            continue  # a pin for another Python version (its marker): not in this environment
        expression, source = _licence(name, metadata)
        rows.append({"package": name, "version": version, "licence": expression, "source": source})
    with LICENCES.open("w", newline="") as handle:
        writer = csv.DictWriter(
            handle,
            ["package", "version", "licence", "source"],
            delimiter="\t",
            lineterminator="\n",
        )
        writer.writeheader()
        writer.writerows(rows)
    unknown = [r["package"] for r in rows if not licence_ids(r["licence"]) <= ALLOWED]
    print(f"{LICENCES.relative_to(REPO)}: {len(rows)} packages; not allowed or unknown: {unknown}")


def sbom_command(source: list[str], output: Path) -> list[str]:
    """cyclonedx-py over `source` (`environment PYTHON` or `requirements LOCK`): CycloneDX 1.6
    JSON, drasat from pyproject.toml as the root component, reproducible (no timestamp)."""
    return [
        str(BIN / "cyclonedx-py"),
        *source,
        "--pyproject",
        str(REPO / "pyproject.toml"),
        "--output-format",
        "JSON",
        "--spec-version",
        "1.6",
        "--output-reproducible",
        "--output-file",
        str(output),
    ]


def sbom() -> None:
    """build/sbom.cdx.json: the lock installed as the image installs it, read back by
    cyclonedx-py (each package's version, purl, licence from its metadata, and the dependency
    graph); deploy/licences.tsv written from the same environment."""
    python = install()
    licences(python)
    SBOM.parent.mkdir(parents=True, exist_ok=True)
    _run(*sbom_command(["environment", python], SBOM))
    components = json.loads(SBOM.read_text())["components"]
    print(f"{SBOM.relative_to(REPO)}: {len(components)} components")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=["lock", "licences", "sbom"])
    step = parser.parse_args().step
    {"lock": lock, "licences": licences, "sbom": sbom}[step]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
