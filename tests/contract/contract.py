"""What the contract tests share: the `Backend` they run against and small helpers."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kubernetes
from kubernetes.client import ApiException

from drasat.testbed.sim import apiserver

#: The simulator's watch history in these tests: small, so that an expired resourceVersion is a
#: matter of a few writes.
SIM_HISTORY = 100

WIDGETS = ("test.drasat.io", "v1", "widgets")


@dataclass
class Backend:
    """One API server as the contract tests see it."""

    name: str
    api: kubernetes.client.ApiClient
    namespace: str
    #: Returns a resourceVersion the server no longer serves a widgets watch from (410 Expired).
    expired_widget_resource_version: Callable[[], str]
    #: The simulator itself, for the few tests that look behind the wire (None on "real").
    server: apiserver.ApiServer | None = None

    @property
    def sim(self) -> bool:
        return self.name == "sim"

    @property
    def core(self) -> kubernetes.client.CoreV1Api:
        return kubernetes.client.CoreV1Api(self.api)

    @property
    def custom(self) -> kubernetes.client.CustomObjectsApi:
        return kubernetes.client.CustomObjectsApi(self.api)


def status_of(exc: ApiException) -> dict[str, Any]:
    """The v1 Status body of a failed request."""
    body = json.loads(exc.body)
    assert isinstance(body, dict)
    return body


def causes(exc: ApiException) -> dict[str, dict[str, str]]:
    """A 422's causes by field path."""
    status = status_of(exc)
    assert (exc.status, status["reason"]) == (422, "Invalid"), status
    return {c["field"]: c for c in status["details"]["causes"]}


def raw(
    backend: Backend,
    method: str,
    path: str,
    body: Any = None,
    query: list[tuple[str, str]] | None = None,
    content_type: str = "application/json",
) -> tuple[int, Any]:
    """A request past the client's models (which refuse unknown fields before sending them):
    the HTTP status and the decoded answer."""
    request = backend.api.param_serialize(
        method=method,
        resource_path=path,
        query_params=query or [],
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    try:
        response = backend.api.call_api(*request)
    except ApiException as exc:
        return exc.status, json.loads(exc.body)
    data = response.read()
    return response.status, json.loads(data) if data else None


def widget(name: str = "", **spec: Any) -> dict[str, Any]:
    meta = {"name": name} if name else {"generateName": "w-"}
    return {
        "apiVersion": "test.drasat.io/v1",
        "kind": "Widget",
        "metadata": meta,
        "spec": {"size": 1, **spec},
    }
