"""Discovery documents (`/version`, `/api`, `/apis`, resource lists) for the served types.

Purely computational: the answer follows from the resource types alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drasat.testbed.sim import errors, resources, routing

Obj = dict[str, Any]

GIT_VERSION = "v1.30.0-drasat-sim"
_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def version() -> Obj:
    """`/version`: every field the client's VersionInfo model requires."""
    return {
        "major": "1",
        "minor": "30",
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-04-17T00:00:00Z",
        "goVersion": "go1.22.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def answer(request: routing.Discovery, types: Sequence[resources.ResourceType]) -> Obj:
    """The document for one discovery request; 404 for unknown groups and versions."""
    if request.what == "version":
        return version()
    if request.what == "api":
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}
            ],
        }
    groups: dict[str, list[str]] = {}
    for rt in types:
        if rt.group and rt.version not in groups.setdefault(rt.group, []):
            groups[rt.group].append(rt.version)
    listed = [_group(name, versions) for name, versions in sorted(groups.items())]
    if request.what == "apis":
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": listed}
    if request.what == "group":
        for group in listed:
            if group["name"] == request.group:
                return {"kind": "APIGroup", "apiVersion": "v1", **group}
        raise errors.ApiError(404, "NotFound", f"group {request.group!r} not found")
    served = [rt for rt in types if (rt.group, rt.version) == (request.group, request.version)]
    if not served:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": served[0].api_version,
        "resources": [entry for rt in served for entry in _entries(rt)],
    }


def _group(name: str, versions: list[str]) -> Obj:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def _entries(rt: resources.ResourceType) -> list[Obj]:
    entry: Obj = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": _VERBS,
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    entries = [entry]
    if rt.has_status:
        entries.append(
            {
                "name": f"{rt.plural}/status",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            }
        )
    return entries
