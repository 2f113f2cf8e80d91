"""Sort the documents of `-f` manifests by kind and validate each against its model.

The result is an Inventory: objects indexed the way references find them (a claim names its class
and parameters, a pod names its claims and templates). Kinds of our own groups that we do not know
are errors (a typo there would silently drop a claim); kinds of other groups are listed as ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pydantic import BaseModel

from drasat import loading
from drasat.api import cluster, groups
from drasat.api.base import Object
from drasat.api.claims import DeviceClassParameters, GpuClaimParameters, MigDeviceClaimParameters
from drasat.api.inputerrors import InputError
from drasat.whatif import kinds

ModelT = TypeVar("ModelT", bound=BaseModel)
T = TypeVar("T")

DEFAULT_NAMESPACE = "default"
#: Classic DRA objects as Kubernetes 1.27–1.30 serve them. Later versions (1.31's v1alpha3 with
#: spec.controller, v1beta1, v1) describe claims by device requests: listed as ignored.
CLASSIC_DRA_VERSIONS = ("resource.k8s.io/v1alpha2",)


def current_server_fields(documents: Sequence[loading.Document]) -> bool:
    """Whether a Pod's and a workload's fields are checked as the current API server's: not
    where the input holds a classic DRA object, whose servers (1.27-1.30) know other pod fields
    (a pod claim's `source`)."""
    return not any(d.data.get("apiVersion") in CLASSIC_DRA_VERSIONS for d in documents)


#: Why a CronJob is not placed: its Jobs, and their pods, start on its schedule.
CRONJOB = "its Jobs start on its schedule (spec.schedule): checked, not placed"
RESOURCE_GROUP = "resource.k8s.io"
REPLICATED_KINDS = {"apps": ("Deployment", "StatefulSet", "ReplicaSet")}
#: Cluster-scoped kinds that may appear in manifests; every other object defaults to "default".
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "ResourceClass",
        "DeviceClassParameters",
        "DeviceClass",
        "ResourceSlice",
        "PriorityClass",
        "Namespace",
        "Node",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "StorageClass",
        "PersistentVolume",
    }
)

_OTHER_INPUTS = {
    groups.NAS_GROUP: "NodeAllocationState objects describe the cluster: pass them with --cluster",
    groups.NVIDIA_NAS_GROUP: "NodeAllocationState objects describe the cluster: pass them with "
    "--cluster",
    cluster.CLUSTER_GROUP: "a Cluster describes the cluster: pass it with --cluster",
    groups.POLICY_GROUP: "an AllocationPolicy is passed with --policy",
}


@dataclass(frozen=True)
class Entry(Generic[T]):
    """A validated object and where it came from."""

    document: loading.Document
    obj: T
    namespace: str  # "" for cluster-scoped objects

    @property
    def name(self) -> str:
        return self.obj.metadata.name if isinstance(self.obj, Object) else ""

    def where(self) -> str:
        return located(self.document, self.namespace)


@dataclass(frozen=True)
class Ignored:
    """Something of the input that the what-if does not place, and why."""

    where: str
    what: str
    reason: str


@dataclass
class Inventory:
    classes: dict[str, Entry[kinds.ResourceClass]] = field(default_factory=dict)
    claims: dict[tuple[str, str], Entry[kinds.ResourceClaim]] = field(default_factory=dict)
    templates: dict[tuple[str, str], Entry[kinds.ResourceClaimTemplate]] = field(
        default_factory=dict
    )
    #: (group, kind, namespace, name); DeviceClassParameters are cluster-scoped (namespace "").
    parameters: dict[tuple[str, str, str, str], Entry[Object]] = field(default_factory=dict)
    priority_classes: dict[str, Entry[kinds.PriorityClass]] = field(default_factory=dict)
    #: Pods and workloads in input order: (kind, entry).
    workloads: list[Entry[Object]] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)


def located(document: loading.Document, namespace: str | None) -> str:
    """`file: document N: Kind namespace/name` (cluster-scoped objects: `Kind name`; None: the
    namespace its metadata names), or what the document holds when it lacks a kind or a name."""
    return f"{document.where}: {document.describe(namespace)}"


def build(documents: Sequence[loading.Document]) -> Inventory:
    """Validate and index every document. Raises InputError on the first bad one."""
    inventory = Inventory()
    seen: dict[tuple[str, str, str, str], str] = {}
    for document in documents:
        _check_envelope(document)
        key = _identity(document)
        if key in seen:
            raise InputError(
                f"defined twice (first at {seen[key]})", where=located(document, key[2])
            )
        ignored_before = len(inventory.ignored)
        _add(inventory, document)
        if len(inventory.ignored) == ignored_before:  # ignored kinds may repeat (Namespaces)
            seen[key] = document.where
    return inventory


def _check_envelope(document: loading.Document) -> None:
    data = document.data
    for name in ("apiVersion", "kind"):
        if not isinstance(data.get(name), str) or not data[name]:
            raise InputError(f"{name}: missing", where=located(document, None))
    metadata = data.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        raise InputError("metadata.name: missing", where=located(document, None))


def _identity(document: loading.Document) -> tuple[str, str, str, str]:
    data = document.data
    return (
        groups.group_of(data["apiVersion"]),
        data["kind"],
        _namespace_of(document, namespaced=data["kind"] not in CLUSTER_SCOPED_KINDS),
        data["metadata"]["name"],
    )


def _namespace_of(document: loading.Document, *, namespaced: bool) -> str:
    if not namespaced:
        return ""
    namespace = document.data["metadata"].get("namespace")
    return namespace if isinstance(namespace, str) and namespace else DEFAULT_NAMESPACE


def _validate(model: type[ModelT], document: loading.Document, namespace: str) -> ModelT:
    try:
        return loading.validate(model, document)
    except InputError as error:
        raise InputError(error.detail, where=located(document, namespace)) from None


def _add(inventory: Inventory, document: loading.Document) -> None:
    api_version: str = document.data["apiVersion"]
    kind: str = document.data["kind"]
    group = groups.group_of(api_version)
    if group in groups.PARAMS_GROUPS:
        _add_parameters(inventory, document, group, kind)
    elif group in _OTHER_INPUTS:
        raise InputError(
            f"kind: {kind} ({api_version}) does not belong in -f manifests: {_OTHER_INPUTS[group]}",
            where=located(document, ""),
        )
    elif group == RESOURCE_GROUP:
        _add_resource(inventory, document, kind)
    elif (api_version, kind) == ("v1", "Pod"):
        _add_workload(inventory, document, kinds.Pod)
    elif kind in REPLICATED_KINDS.get(group, ()):
        _add_workload(inventory, document, kinds.ReplicatedWorkload)
    elif (group, kind) == ("batch", "Job"):
        _add_workload(inventory, document, kinds.Job)
    elif (group, kind) == ("apps", "DaemonSet"):
        _add_workload(inventory, document, kinds.DaemonSet)
    elif (group, kind) == ("batch", "CronJob"):
        # Checked as the server checks it (`whatif.run`), its pod template too; no pod of it
        # exists when it is applied.
        namespace = _namespace_of(document, namespaced=True)
        inventory.ignored.append(Ignored(document.where, _what(document, namespace), CRONJOB))
    elif (group, kind) == ("scheduling.k8s.io", "PriorityClass"):
        entry = Entry(document, _validate(kinds.PriorityClass, document, ""), "")
        inventory.priority_classes[entry.name] = entry
    else:
        namespace = _namespace_of(document, namespaced=kind not in CLUSTER_SCOPED_KINDS)
        inventory.ignored.append(
            Ignored(document.where, _what(document, namespace), "not a kind the what-if places")
        )


def _what(document: loading.Document, namespace: str) -> str:
    return located(document, namespace).removeprefix(f"{document.where}: ")


def _add_parameters(
    inventory: Inventory, document: loading.Document, group: str, kind: str
) -> None:
    api_version = document.data["apiVersion"]
    models: dict[str, type[Object]] = {
        groups.GPU_CLAIM_PARAMETERS: GpuClaimParameters,
        groups.MIG_DEVICE_CLAIM_PARAMETERS: MigDeviceClaimParameters,
        groups.DEVICE_CLASS_PARAMETERS: DeviceClassParameters,
    }
    namespace = _namespace_of(document, namespaced=kind not in CLUSTER_SCOPED_KINDS)
    if kind not in models:
        raise InputError(
            f"kind: unknown kind {kind!r} in group {group} (expected one of "
            f"{', '.join(groups.PARAMS_KINDS)})",
            where=located(document, namespace),
        )
    if api_version != f"{group}/{groups.VERSION}":
        raise InputError(
            f"apiVersion: unknown version {api_version!r} (expected {group}/{groups.VERSION})",
            where=located(document, namespace),
        )
    entry: Entry[Object] = Entry(document, _validate(models[kind], document, namespace), namespace)
    inventory.parameters[(group, kind, namespace, entry.name)] = entry


def _add_resource(inventory: Inventory, document: loading.Document, kind: str) -> None:
    api_version = document.data["apiVersion"]
    namespace = _namespace_of(document, namespaced=kind not in CLUSTER_SCOPED_KINDS)
    known = ("ResourceClass", "ResourceClaim", "ResourceClaimTemplate")
    if api_version not in CLASSIC_DRA_VERSIONS or kind not in known:
        reason = (
            f"{api_version} is not classic DRA (resource.k8s.io/v1alpha2): claims by device "
            "requests are not modelled"
            if kind in known
            else "not a kind the what-if places"
        )
        inventory.ignored.append(Ignored(document.where, _what(document, namespace), reason))
        return
    if kind == "ResourceClass":
        rc = Entry(document, _validate(kinds.ResourceClass, document, ""), "")
        inventory.classes[rc.name] = rc
    elif kind == "ResourceClaim":
        claim = Entry(document, _validate(kinds.ResourceClaim, document, namespace), namespace)
        inventory.claims[(namespace, claim.name)] = claim
    else:
        template = Entry(
            document, _validate(kinds.ResourceClaimTemplate, document, namespace), namespace
        )
        inventory.templates[(namespace, template.name)] = template


def _add_workload(inventory: Inventory, document: loading.Document, model: type[Object]) -> None:
    """A Pod or a workload: its model reads the fields placement needs. Its unknown fields are
    not looked for here: every `-f` document was decoded strictly once, before (`whatif.run`,
    as the API server decodes it); a document read back from a cluster is what a server took."""
    namespace = _namespace_of(document, namespaced=True)
    inventory.workloads.append(Entry(document, _validate(model, document, namespace), namespace))
