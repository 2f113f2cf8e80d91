"""`drasat explain` takes kubectl's habits (issue 26 item 6): `-n NS` and `--namespace NS` are the
pod's namespace alike (drasat's own is `--drasat-namespace`), without either the kubeconfig
context's namespace, a pod that does not exist is exit 1 with one line, and the error label is
coloured on a terminal only. On the in-process API server."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import test_v1controller as base
import yaml
from ctl_cluster import NS
from test_v1controller import _node

from drasat.cli import colour
from drasat.cli import main as cli
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, default_namespace
from drasat.testbed.sim import apiserver

server, api = base.server, base.api


@pytest.fixture
def kubeconfig(server: apiserver.ApiServer, tmp_path: pathlib.Path) -> str:
    return str(server.write_kubeconfig(tmp_path / "kubeconfig"))


def _pod_in(api: KubeClient, namespace: str) -> None:
    """A pending pod p1 with its claim c1 in `namespace`, and a node of one GPU."""
    _node(api, "n1", 1)
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.drasat.io"}}
    claim = {"metadata": {"name": "c1"}, "spec": {"devices": {"requests": [request]}}}
    api.create(r.RESOURCE_CLAIMS_V1, claim, namespace=namespace)
    pod = {
        "metadata": {"name": "p1"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "c1"}],
        },
    }
    api.create(r.PODS, pod, namespace=namespace)


@pytest.mark.parametrize("flag", ["-n", "--namespace"])
def test_the_pods_namespace_is_dash_n_or_namespace_as_in_kubectl(
    api: KubeClient, kubeconfig: str, capsys: Any, flag: str
) -> None:
    _pod_in(api, "team-a")
    argv = ["explain", "p1", flag, "team-a", "--drasat-namespace", NS, "--kubeconfig", kubeconfig]
    assert cli.main([*argv, "--cycle-mode", "batch"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No drasat controller has written a decision for pod team-a/p1")


def test_a_pod_that_does_not_exist_is_exit_1_with_one_line(
    api: KubeClient, kubeconfig: str, capsys: Any
) -> None:
    assert cli.main(["explain", "nope", "-n", "team-b", "--kubeconfig", kubeconfig]) == 1
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "error: pod team-b/nope not found\n")


def test_the_error_label_is_red_when_colour_is_asked_for(
    api: KubeClient, kubeconfig: str, capsys: Any
) -> None:
    try:
        assert cli.main(["--color", "always", "explain", "nope", "--kubeconfig", kubeconfig]) == 1
    finally:
        colour.choose("auto")
    assert capsys.readouterr().err == "\033[31merror:\033[0m pod default/nope not found\n"


def test_without_dash_n_the_kubeconfig_contexts_namespace_as_in_kubectl(
    api: KubeClient, kubeconfig: str, capsys: Any
) -> None:
    _pod_in(api, "team-c")
    config = yaml.safe_load(pathlib.Path(kubeconfig).read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = "team-c"
    pathlib.Path(kubeconfig).write_text(yaml.safe_dump(config))
    argv = ["explain", "p1", "--drasat-namespace", NS, "--kubeconfig", kubeconfig]
    assert cli.main([*argv, "--cycle-mode", "batch"]) == 0
    assert "for pod team-c/p1" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("context", "namespace"),
    [({"cluster": "c", "namespace": "ml"}, "ml"), ({"cluster": "c"}, "default")],
)
def test_default_namespace_reads_the_current_context(
    tmp_path: pathlib.Path, context: dict[str, str], namespace: str
) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "x",
        "contexts": [{"name": "x", "context": context}],
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    assert default_namespace(str(path)) == namespace
    assert default_namespace(str(tmp_path / "missing")) == "default"


def test_on_a_terminal_the_verdict_line_is_bold(
    api: KubeClient, kubeconfig: str, capsys: Any
) -> None:
    _pod_in(api, "team-d")
    argv = ["explain", "p1", "-n", "team-d", "--drasat-namespace", NS, "--kubeconfig", kubeconfig]
    try:
        assert cli.main(["--color", "always", *argv, "--cycle-mode", "batch"]) == 0
    finally:
        colour.choose("auto")
    first, second, *_ = capsys.readouterr().out.split("\n")
    assert first.startswith("\033[1mNo drasat controller") and first.endswith("\033[0m")
    assert "\033" not in second
