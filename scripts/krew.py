#!/usr/bin/env python3
"""Build the krew archive of `kubectl drasat` and its manifest.

The archive (`kubectl-drasat.tar.gz`) holds deploy/krew/kubectl-drasat, a launcher that installs
the wheel beside it into a virtual environment on first use, and drasat's wheel (built here, or
given with --wheel). The manifest is deploy/krew/drasat.yaml with the version, the archive's
published address (--uri), its sha256 and the homepage filled in. Then, to try it:

    kubectl krew install --manifest OUT/drasat.yaml --archive OUT/kubectl-drasat.tar.gz
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import string
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KREW = ROOT / "deploy" / "krew"
ARCHIVE = "kubectl-drasat.tar.gz"


def version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def archive(wheel: Path, out: Path) -> Path:
    """The tar.gz of the launcher and `wheel`, with fixed times and owners (same input, same
    bytes, so the same sha256)."""
    target = out / ARCHIVE
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as packed,
        tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path, mode in ((KREW / "kubectl-drasat", 0o755), (wheel, 0o644)):
            data = path.read_bytes()
            info = tarfile.TarInfo(path.name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    target.write_bytes(buffer.getvalue())
    return target


def manifest(*, uri: str, sha256: str, homepage: str) -> str:
    """deploy/krew/drasat.yaml filled in (KeyError: a placeholder without a value)."""
    values = {"VERSION": version(), "URI": uri, "SHA256": sha256, "HOMEPAGE": homepage}
    return string.Template((KREW / "drasat.yaml").read_text()).substitute(values)


def build_wheel(out: Path) -> Path:
    with tempfile.TemporaryDirectory() as work:
        subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--outdir", work, str(ROOT)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (built,) = Path(work).glob("drasat-*.whl")
        target = out / built.name
        target.write_bytes(built.read_bytes())
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "krew", help="output folder")
    parser.add_argument("--wheel", type=Path, help="drasat's wheel (default: build one)")
    parser.add_argument(
        "--uri",
        default=f"https://example.org/drasat/v{version()}/{ARCHIVE}",
        help="where the archive will be published (krew downloads it from there)",
    )
    parser.add_argument("--homepage", default="https://example.org/drasat", help="project page")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    wheel = args.wheel or build_wheel(args.out)
    built = archive(wheel, args.out)
    digest = hashlib.sha256(built.read_bytes()).hexdigest()
    text = manifest(uri=args.uri, sha256=digest, homepage=args.homepage)
    (args.out / "drasat.yaml").write_text(text)
    print(f"{built}\n{args.out / 'drasat.yaml'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
