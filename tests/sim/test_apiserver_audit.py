"""The audit log names each request in RBAC terms, with the client's user agent."""

from __future__ import annotations

import kubernetes
import pytest
from kubernetes.client import ApiException

from drasat.testbed.sim import apiserver, audit


def test_requests_are_audited_with_verbs(server: apiserver.ApiServer) -> None:
    configuration = kubernetes.client.Configuration(host=server.url)
    with kubernetes.client.ApiClient(configuration) as client:
        client.user_agent = "drasat-controller/test"
        core = kubernetes.client.CoreV1Api(client)
        custom = kubernetes.client.CustomObjectsApi(client)
        server.audit.clear()
        core.create_namespaced_config_map("default", {"metadata": {"name": "m"}})
        core.read_namespaced_config_map("m", "default")
        core.patch_namespaced_config_map("m", "default", {"data": {"a": "b"}})
        core.list_config_map_for_all_namespaces()
        with pytest.raises(ApiException):
            custom.get_namespaced_custom_object(
                "resource.k8s.io", "v1alpha2", "default", "resourceclaims", "missing"
            )
        list(
            kubernetes.watch.Watch().stream(
                core.list_namespaced_config_map, "default", resource_version="1", timeout_seconds=0
            )
        )
        core.delete_collection_namespaced_config_map("default")
    entries = server.audit.entries(user_agent="drasat-controller/test")
    assert [(e.verb, e.resource, e.namespace, e.name, e.code) for e in entries] == [
        ("create", "configmaps", "default", None, 201),
        ("get", "configmaps", "default", "m", 200),
        ("patch", "configmaps", "default", "m", 200),
        ("list", "configmaps", None, None, 200),
        ("get", "resourceclaims", "default", "missing", 404),
        ("watch", "configmaps", "default", None, 200),
        ("deletecollection", "configmaps", "default", None, 200),
    ]
    assert server.audit.entries(verb="get", group="resource.k8s.io")[0].version == "v1alpha2"


def test_status_subresource_is_its_own_resource_for_rbac(server: apiserver.ApiServer) -> None:
    configuration = kubernetes.client.Configuration(host=server.url)
    with kubernetes.client.ApiClient(configuration) as client:
        core = kubernetes.client.CoreV1Api(client)
        core.create_namespaced_pod(
            "default",
            {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "none"}]}},
        )
        core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Running"}})
    (entry,) = server.audit.entries(verb="patch")
    assert isinstance(entry, audit.Entry) and entry.subresource == "status"
