"""The `kubectl apply -f deploy/...` commands of README.md and docs/ (tests/docs_commands.py) are
accepted by the real v1.37 API server: `kubectl apply --dry-run=server`, exactly the files the docs
name, after creating for real the Namespaces those files hold (a dry run creates nothing, and the
server refuses objects in a namespace that does not exist). The README's install example once
applied a classic (v1alpha2) file that 1.34+ refuses (issue 26 item 1)."""

from __future__ import annotations

import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

import docs_commands as docs
import pytest
import yaml
from helm_binary import kubectl_path
from kubecluster import kubectl_env

from drasat.testbed.controlplane import realcluster

APPLIED = [c for c in docs.commands() if docs.what_to_do(c) == docs.DRY_RUN]


def _files(command: docs.Command) -> list[pathlib.Path]:
    words = command.text.split()
    return [docs.ROOT / words[i + 1] for i, word in enumerate(words) if word == "-f"]


def _namespaces(paths: list[pathlib.Path]) -> list[str]:
    found = []
    for path in paths:
        for file in sorted(path.glob("*.yaml")) if path.is_dir() else [path]:
            for document in yaml.safe_load_all(file.read_text()):
                if document and document.get("kind") == "Namespace":
                    found.append(document["metadata"]["name"])
    return found


def _kubectl(kube_cluster: realcluster.Cluster, cache: pathlib.Path, *args: str) -> Any:
    return subprocess.run(
        [str(kubectl_path()), *args],
        cwd=docs.ROOT,
        env={**kubectl_env(kube_cluster), "KUBECACHEDIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def cache(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    yield tmp_path / "kubectl-cache"


def test_some_commands_apply_files() -> None:
    assert any("v1-reference-cases" in c.text for c in APPLIED)


@pytest.mark.parametrize("command", APPLIED, ids=[c.id for c in APPLIED])
def test_the_server_accepts_what_the_docs_apply(
    command: docs.Command, kube_cluster: realcluster.Cluster, cache: pathlib.Path
) -> None:
    namespaces = _namespaces(_files(command))
    for name in namespaces:
        made = _kubectl(kube_cluster, cache, "create", "namespace", name)
        assert made.returncode == 0 or "AlreadyExists" in made.stderr, made.stderr
    try:
        words = command.text.split()
        done = _kubectl(kube_cluster, cache, *words[1:], "--dry-run=server")
        assert done.returncode == 0, f"{command.id}: {command.text}: {done.stderr}"
        assert "(server dry run)" in done.stdout
    finally:
        for name in namespaces:
            _kubectl(kube_cluster, cache, "delete", "namespace", name, "--wait=false")
