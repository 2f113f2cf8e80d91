"""What the deploy tests share: where the chart is, and the output of one `helm template`."""

from __future__ import annotations

import pathlib
import subprocess
from collections.abc import Callable
from typing import Any

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "drasat"

#: Kubernetes version the chart is rendered for unless a test says otherwise (classic DRA,
#: resource.k8s.io/v1alpha2).
KUBE_VERSION = "1.30.0"

Manifest = dict[str, Any]


class Rendered:
    """Output of one `helm template`: exit code, stderr and the manifests."""

    def __init__(self, completed: subprocess.CompletedProcess[str]) -> None:
        self.returncode = completed.returncode
        self.stderr = completed.stderr
        self.manifests: list[Manifest] = (
            [d for d in yaml.safe_load_all(completed.stdout) if d]
            if completed.returncode == 0
            else []
        )

    def kinds(self) -> list[str]:
        return [m["kind"] for m in self.manifests]

    def one(self, kind: str, name_suffix: str = "") -> Manifest:
        found = [
            m
            for m in self.manifests
            if m["kind"] == kind and m["metadata"]["name"].endswith(name_suffix)
        ]
        assert len(found) == 1, f"{len(found)} {kind} objects named *{name_suffix}"
        return found[0]


Render = Callable[..., Rendered]
