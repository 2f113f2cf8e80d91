"""The simulators' own small HTTP client."""

from __future__ import annotations

import json
import pathlib

import pytest

from drasat.api.inputerrors import InputError
from drasat.testbed.sim import apiserver, errors, kubeclient


def test_paths() -> None:
    assert kubeclient.path("", "v1", "pods", namespace="a", name="p", subresource="status") == (
        "/api/v1/namespaces/a/pods/p/status"
    )
    assert kubeclient.path("resource.k8s.io", "v1alpha2", "resourceclasses") == (
        "/apis/resource.k8s.io/v1alpha2/resourceclasses"
    )


def test_requests_reuse_one_connection_per_thread(server: apiserver.ApiServer) -> None:
    client = kubeclient.KubeClient(server.url)
    before = server.connections_opened
    for _ in range(20):
        client.get(kubeclient.path("", "v1", "namespaces", name="default"))
    assert server.connections_opened - before == 1


def test_errors_carry_the_status(server: apiserver.ApiServer) -> None:
    client = kubeclient.KubeClient(server.url)
    with pytest.raises(errors.ApiError) as caught:
        client.get(kubeclient.path("", "v1", "pods", namespace="default", name="missing"))
    assert caught.value.code == 404 and caught.value.reason == "NotFound"
    # The connection survives an error answer; an outage drops it and the next request reconnects.
    server.faults.down(mode="reset")
    with pytest.raises(OSError):
        client.list(kubeclient.path("", "v1", "pods"))
    server.faults.up()
    assert client.list(kubeclient.path("", "v1", "pods"))["items"] == []


def test_urls_must_be_http_or_https() -> None:
    with pytest.raises(ValueError):
        kubeclient.KubeClient("ftp://example.invalid")
    kubeclient.KubeClient("https://example.invalid")  # connects on the first request


def test_kubeconfig_settings(tmp_path: pathlib.Path) -> None:
    (tmp_path / "token").write_text("s3cret\n")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443/prefix"}}],
        "users": [{"name": "u", "user": {"tokenFile": "token"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    settings = kubeclient.kubeconfig_settings(path)
    assert (settings["url"], settings["token"]) == ("https://127.0.0.1:6443/prefix", "s3cret")
    with pytest.raises(InputError, match="no context named 'y'"):
        kubeclient.kubeconfig_settings(path, context="y")
    config["clusters"][0]["cluster"]["certificate-authority-data"] = "bm90IGEgY2VydA=="
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match="context 'x'"):  # "not a cert" is no CA
        kubeclient.kubeconfig_settings(path)
    config["users"][0]["user"] = {"client-certificate-data": "..."}
    del config["clusters"][0]["cluster"]["certificate-authority-data"]
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match="only bearer tokens are supported"):
        kubeclient.kubeconfig_settings(path)
