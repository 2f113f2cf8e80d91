"""The simulators' own small HTTP client."""

from __future__ import annotations

import pytest

from drasat.sim import apiserver, errors, kubeclient


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


def test_urls_must_be_http() -> None:
    with pytest.raises(ValueError):
        kubeclient.KubeClient("https://example.invalid")
