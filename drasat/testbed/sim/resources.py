"""The REST resources the simulated API server serves: built-in kinds and registered CRDs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

#: Schema versions of kubernetes-validate used for built-in kinds. Classic DRA
#: (resource.k8s.io/v1alpha2) was last served by Kubernetes 1.30.
CLASSIC_SCHEMA_VERSION = "1.30"
CURRENT_SCHEMA_VERSION = "1.34"
#: Kinds the 1.34 bundle lacks or has in an older shape (resource.k8s.io/v1 DeviceTaintRule).
LATEST_SCHEMA_VERSION = "1.37"

_DEFAULT_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


@dataclasses.dataclass(frozen=True)
class ResourceType:
    """One served group/version/plural and what the server knows about it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    has_status: bool
    #: kubernetes-validate versions to try for built-ins (accepted if any validates);
    #: empty for custom resources, which are validated against their CRD's schema.
    schema_versions: tuple[str, ...] = ()
    field_selectors: frozenset[str] = _DEFAULT_FIELDS
    singular: str = ""
    short_names: tuple[str, ...] = ()
    #: Versions of one CRD share storage, as with conversion strategy None.
    custom: bool = False
    #: Whether the kind has metadata.generation (not every built-in kind does).
    generation: bool = True
    #: Whether a delete that removes the object answers with it (the kind's registry sets
    #: ReturnDeletedObject) rather than a Status; an object only marked is always answered.
    delete_returns_object: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def store_key(self) -> tuple[str, str]:
        """Objects live under (group, plural) for CRDs and (group/version, plural) for built-ins."""
        return (self.group if self.custom else self.api_version, self.plural)

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


def _builtin(
    group: str,
    version: str,
    plural: str,
    kind: str,
    *,
    namespaced: bool = True,
    status: bool = False,
    schemas: tuple[str, ...] = (CLASSIC_SCHEMA_VERSION, CURRENT_SCHEMA_VERSION),
    fields: frozenset[str] = frozenset(),
    generation: bool = True,
    returns_object: bool = False,
) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        plural=plural,
        kind=kind,
        namespaced=namespaced,
        has_status=status,
        schema_versions=schemas,
        field_selectors=_DEFAULT_FIELDS | fields,
        singular=kind.lower(),
        generation=generation,
        delete_returns_object=returns_object,
    )


_CLASSIC = (CLASSIC_SCHEMA_VERSION,)
#: resource.k8s.io/v1 as kube-apiserver v1.37 serves it: its 1.34 shape or its 1.37 one.
_V1_DRA = (CURRENT_SCHEMA_VERSION, LATEST_SCHEMA_VERSION)
_POD_FIELDS = frozenset({"spec.nodeName", "spec.schedulerName", "status.phase"})
_EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.name",
        "involvedObject.namespace",
        "involvedObject.uid",
        "reason",
        "type",
    }
)

#: Core kinds are validated against 1.30 or 1.34: the client (v37) speaks the newer shapes
#: (e.g. pod.spec.resourceClaims[].resourceClaimName) while classic DRA clusters spoke 1.30's.
#: As kube-apiserver v1.37 (classic DRA: v1.30.14) has them, checked by tests/contract: which
#: kinds have a metadata.generation and which answer a delete with the deleted object.
BUILTINS: tuple[ResourceType, ...] = (
    _builtin("", "v1", "pods", "Pod", status=True, fields=_POD_FIELDS, returns_object=True),
    _builtin("", "v1", "nodes", "Node", namespaced=False, status=True, generation=False),
    _builtin(
        "",
        "v1",
        "namespaces",
        "Namespace",
        namespaced=False,
        status=True,
        fields=frozenset({"status.phase"}),
        generation=False,
        returns_object=True,
    ),
    _builtin("", "v1", "events", "Event", fields=_EVENT_FIELDS, generation=False),
    _builtin("", "v1", "configmaps", "ConfigMap", generation=False),
    _builtin("", "v1", "secrets", "Secret", fields=frozenset({"type"}), generation=False),
    _builtin("", "v1", "serviceaccounts", "ServiceAccount", generation=False, returns_object=True),
    _builtin("events.k8s.io", "v1", "events", "Event", generation=False),
    _builtin("coordination.k8s.io", "v1", "leases", "Lease", generation=False),
    _builtin("apps", "v1", "deployments", "Deployment", status=True),
    _builtin("apps", "v1", "daemonsets", "DaemonSet", status=True),
    _builtin("apps", "v1", "replicasets", "ReplicaSet", status=True),
    _builtin("batch", "v1", "jobs", "Job", status=True),
    _builtin(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        namespaced=False,
        status=True,
        returns_object=True,
    ),
    _builtin(
        "resource.k8s.io",
        "v1alpha2",
        "resourceclasses",
        "ResourceClass",
        namespaced=False,
        schemas=_CLASSIC,
        generation=False,
        returns_object=True,
    ),
    _builtin(
        "resource.k8s.io",
        "v1alpha2",
        "resourceclaims",
        "ResourceClaim",
        status=True,
        schemas=_CLASSIC,
        generation=False,
        returns_object=True,
    ),
    _builtin(
        "resource.k8s.io",
        "v1alpha2",
        "resourceclaimtemplates",
        "ResourceClaimTemplate",
        schemas=_CLASSIC,
        generation=False,
        returns_object=True,
    ),
    _builtin(
        "resource.k8s.io",
        "v1alpha2",
        "podschedulingcontexts",
        "PodSchedulingContext",
        status=True,
        schemas=_CLASSIC,
        generation=False,
        returns_object=True,
    ),
    _builtin(
        "resource.k8s.io",
        "v1alpha2",
        "resourceslices",
        "ResourceSlice",
        namespaced=False,
        schemas=_CLASSIC,
        generation=False,
        returns_object=True,
    ),
    _builtin(
        "resource.k8s.io",
        "v1",
        "deviceclasses",
        "DeviceClass",
        namespaced=False,
        schemas=_V1_DRA,
        returns_object=True,
    ),
    _builtin(
        "resource.k8s.io",
        "v1",
        "resourceclaims",
        "ResourceClaim",
        status=True,
        schemas=_V1_DRA,
        generation=False,
        returns_object=True,
    ),
    _builtin(
        "resource.k8s.io",
        "v1",
        "resourceclaimtemplates",
        "ResourceClaimTemplate",
        schemas=_V1_DRA,
        generation=False,
        returns_object=True,
    ),
    _builtin(
        "resource.k8s.io",
        "v1",
        "resourceslices",
        "ResourceSlice",
        namespaced=False,
        schemas=_V1_DRA,
        fields=frozenset({"spec.nodeName", "spec.driver"}),
        returns_object=True,
    ),
    _builtin(
        "resource.k8s.io",
        "v1",
        "devicetaintrules",
        "DeviceTaintRule",
        namespaced=False,
        status=True,
        schemas=(LATEST_SCHEMA_VERSION,),
    ),
)


def from_crd(crd: Mapping[str, Any]) -> list[ResourceType]:
    """The resource types one CustomResourceDefinition serves (one per served version)."""
    spec = crd["spec"]
    names = spec["names"]
    types = []
    for version in spec.get("versions", []):
        if not version.get("served", True):
            continue
        types.append(
            ResourceType(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                kind=names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                has_status="status" in (version.get("subresources") or {}),
                singular=names.get("singular", names["kind"].lower()),
                short_names=tuple(names.get("shortNames", ())),
                custom=True,
            )
        )
    return types


def crd_schema(crd: Mapping[str, Any], version: str) -> dict[str, Any] | None:
    """The openAPIV3Schema of one version of a CRD, or None if it has none."""
    for entry in crd["spec"].get("versions", []):
        if entry["name"] == version:
            schema = (entry.get("schema") or {}).get("openAPIV3Schema")
            return dict(schema) if schema else None
    return None
