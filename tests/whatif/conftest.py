"""Fixtures of the what-if tests: run the CLI in-process and write YAML files."""

from __future__ import annotations

import pathlib
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from drasat.cli import main as cli_main


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


RunCli = Callable[..., Result]
WriteYaml = Callable[[str, str], str]

#: A small cluster: one node with two T4, one with an A100-40GB in MIG mode.
CLUSTER = """
apiVersion: whatif.drasat.io/v1alpha1
kind: Cluster
metadata: {name: test}
spec:
  nodes:
  - name: t4
    gpus: [{product: T4, count: 2}]
  - name: a100
    gpus: [{product: A100-40GB, count: 1, mig: true}]
"""


@pytest.fixture
def write_yaml(tmp_path: pathlib.Path) -> WriteYaml:
    def write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
        return str(path)

    return write


@pytest.fixture
def cluster_file(write_yaml: WriteYaml) -> str:
    return write_yaml("cluster.yaml", CLUSTER)


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> RunCli:
    def run(*argv: str) -> Result:
        code = cli_main.main(["whatif", *argv])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run
