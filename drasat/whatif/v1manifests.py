"""`-f` manifests in `resource.k8s.io/v1` terms: pods with their ResourceClaims, and the
DeviceClasses those claims name.

Read: ResourceClaims, ResourceClaimTemplates and DeviceClasses of `v1` (`v1beta1` and `v1beta2`
converted to v1's shape, `v1kinds.to_v1`), the Workload API's PodGroups (`podgroups`), opaque
configurations (drasat's `GpuConfig`, NVIDIA's `resource.nvidia.com/v1beta1`
`GpuConfig`/`MigDeviceConfig`, checked by `api.deviceconfig`), and the pods and workloads the
classic what-if reads (`workloads`). drasat's shipped DeviceClasses and NVIDIA's `gpu.nvidia.com`
and `mig.nvidia.com` need not be in the manifests.

A pod's claim from a template becomes a ResourceClaim as the resourceclaim controller makes it:
`generateName` `<pod>-<podClaimName>-` (the base cut to 57 characters) plus 5 characters of
Kubernetes' suffix alphabet, derived from the pod so runs agree; the template's labels and
annotations, the annotation `resource.kubernetes.io/pod-claim-name`, the pod as controlling
owner; the pod's `status.resourceClaimStatuses` names it. A pod read back from a cluster that
already names its claim there keeps that claim; a pod of the `-f` files is one to apply, whose
status the API server drops (`_as_applied`).

What drasat does not support is refused with the file, object and field: VFIO passthrough
(`vfio.gpu.nvidia.com`), IMEX channels and ComputeDomains (`imex.nvidia.com`,
`compute-domain-*.nvidia.com`, NVIDIA's `ComputeDomain` kinds and their configurations). With
`skip_unsupported`, every document of a file holding such an object is left out instead (and
listed), and so are the pods that use a claim or template of such a file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from drasat import loading
from drasat.api import deviceconfig, groups
from drasat.api.groups import NOMINATION_ANNOTATION
from drasat.api.inputerrors import InputError, show
from drasat.v1 import extended
from drasat.whatif import (
    apivalidation,
    kinds,
    knownfields,
    manifestindex,
    podgroups,
    v1cluster,
    v1kinds,
    workloads,
)
from drasat.whatif.manifestindex import Ignored, located

Obj = dict[str, Any]
ModelT = TypeVar("ModelT", bound=BaseModel)

KINDS = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass")
#: The source name of documents read from a live cluster (`--from-cluster`).
LIVE_SOURCE = "cluster"
#: The annotation the resourceclaim controller puts on claims it makes from templates.
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
#: `generateName` is cut so the name with its 5 random characters stays a DNS label (63).
GENERATE_NAME_MAX = 57
NVIDIA_CONFIG_GROUP = "resource.nvidia.com"

#: Why a `-f` ResourceClaim's status is not read.
STATUS_DROPPED = (
    "status dropped: the API server drops the status of a claim it creates, so an allocation "
    "written in a file holds no devices (only a claim read with --from-cluster keeps its own)"
)
#: Why a DaemonSet stands for no pod.
NO_DAEMON_NODE = "no node of the cluster runs a pod of it (its node selector, affinity or taints)"
#: NVIDIA's classes for what drasat does not do, and why.
UNSUPPORTED_CLASSES = {
    "vfio.gpu.nvidia.com": "VFIO passthrough",
    "imex.nvidia.com": "IMEX channels",
    "compute-domain-daemon.nvidia.com": "ComputeDomains",
    "compute-domain-default-channel.nvidia.com": "ComputeDomains (IMEX channels)",
}
#: Drivers and device types (in a DeviceClass's CEL) drasat does not serve.
UNSUPPORTED_SELECTOR_TEXT = {
    "compute-domain.nvidia.com": "ComputeDomains (IMEX channels)",
    "== 'vfio'": "VFIO passthrough",
    '== "vfio"': "VFIO passthrough",
}
#: NVIDIA's opaque configuration kinds drasat does not support.
UNSUPPORTED_CONFIG_KINDS = {
    "VfioDeviceConfig": "VFIO passthrough",
    "ComputeDomainChannelConfig": "ComputeDomains (IMEX channels)",
    "ComputeDomainDaemonConfig": "ComputeDomains",
}
#: Top-level kinds of NVIDIA's group that drasat does not support.
UNSUPPORTED_KINDS = {
    "ComputeDomain": "ComputeDomains",
    "ComputeDomainClique": "ComputeDomains",
}
#: Drivers whose opaque configuration drasat reads (NVIDIA's claims run unchanged).
CONFIG_DRIVERS = (groups.DRIVER_NAME, v1cluster.NVIDIA_DRIVER)


class Unsupported(InputError):
    """Input that asks for something drasat does not do (not a mistake in the input)."""


@dataclass(frozen=True)
class V1Claim:
    """A ResourceClaim as it would exist: v1 shape, name, namespace, uid (and status when
    read back from a cluster)."""

    obj: Obj
    #: Where it was written (for a claim from a template: the template's document).
    where: str
    #: The ResourceClaimTemplate it was made from; None for a ResourceClaim.
    template: str | None = None

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class V1Pod:
    instance: workloads.PodInstance
    #: The pod as the API would hold it (metadata with uid, spec, status.resourceClaimStatuses).
    obj: Obj
    #: (pod claim name, claim) for every entry of spec.resourceClaims.
    claims: tuple[tuple[str, V1Claim], ...]
    priority: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0

    @property
    def key(self) -> str:
        return self.instance.key

    def pending(self) -> tuple[V1Claim, ...]:
        """Its claims without an allocation (a claim shared with another pod appears once per
        pod)."""
        return tuple(c for _, c in self.claims if not allocated(c.obj))


@dataclass(frozen=True)
class V1Workload:
    pods: tuple[V1Pod, ...]
    #: Every claim some pod uses, by `namespace/name`, in first-use order.
    claims: Mapping[str, V1Claim]
    #: The DeviceClasses by name: the built-in ones, replaced by those of the manifests.
    classes: Mapping[str, Obj]
    ignored: tuple[Ignored, ...] = ()
    #: Every pod of the input bound to a node (`spec.nodeName`), with or without claims: what
    #: already uses the node's CPU, memory and pod slots.
    bound: tuple[Obj, ...] = ()
    #: The PodGroups (`scheduling.k8s.io/v1beta1`) by namespace/name: the gangs pods name.
    pod_groups: Mapping[str, Obj] = field(default_factory=dict)
    #: What of the input is read otherwise than it is written (a `-f` claim's status, which
    #: the API server drops), and why: the table's `note:` lines.
    notes: tuple[Ignored, ...] = ()


def allocated(claim: Mapping[str, Any]) -> bool:
    """Whether a ResourceClaim's status holds an allocation."""
    status = claim.get("status")
    return isinstance(status, Mapping) and bool(status.get("allocation"))


def is_v1_document(data: Mapping[str, Any]) -> bool:
    """A claim, template or DeviceClass of a v1-family version (v1, v1beta2, v1beta1)."""
    return data.get("apiVersion") in v1kinds.VERSIONS and data.get("kind") in KINDS


def uses_v1(documents: Sequence[loading.Document]) -> bool:
    """v1 claims, or pods asking `nvidia.com/gpu` (drasat converts them into v1 claims)."""
    return any(is_v1_document(d.data) or extended.asks(_pod_spec(d.data)) for d in documents)


def _pod_spec(data: Mapping[str, Any]) -> Any:
    """The pod spec a Pod or a workload (its pod template) holds, as written; None if none."""
    spec = data.get("spec")
    if not isinstance(spec, Mapping) or data.get("kind") == "Pod":
        return spec
    template = spec.get("template")
    return template.get("spec") if isinstance(template, Mapping) else None


@dataclass
class _Index:
    claims: dict[tuple[str, str], manifestindex.Entry[v1kinds.ResourceClaim]] = field(
        default_factory=dict
    )
    templates: dict[tuple[str, str], manifestindex.Entry[v1kinds.ResourceClaimTemplate]] = field(
        default_factory=dict
    )
    classes: dict[str, manifestindex.Entry[v1kinds.DeviceClass]] = field(default_factory=dict)
    pod_groups: dict[str, podgroups.Entry] = field(default_factory=dict)
    #: (namespace, name) of claims and templates left out with their file -> why.
    skipped_claims: dict[tuple[str, str], str] = field(default_factory=dict)
    skipped_templates: dict[tuple[str, str], str] = field(default_factory=dict)
    ignored: list[Ignored] = field(default_factory=list)
    notes: list[Ignored] = field(default_factory=list)


def compile_v1(
    documents: Sequence[loading.Document],
    *,
    skip_unsupported: bool = False,
    nodes: Sequence[Mapping[str, Any]] = (),
) -> V1Workload:
    """Pods, their claims and the classes of the manifests. Raises InputError (Unsupported for
    what drasat does not do) naming file, document, object and field. `nodes`: the cluster's
    Node objects, where a DaemonSet's pods run (`workloads.expand`)."""
    documents, skipped = _without_unsupported(documents, skip_unsupported)
    index, rest = _index(documents)
    _index_skipped(index, skipped)
    classes = dict(v1cluster.device_classes())
    classes.update({name: _as_v1(e.document.data) for name, e in index.classes.items()})
    others = manifestindex.build(rest)
    compiler = _Compiler(index, classes, others.priority_classes)
    pods = compiler.pods([_as_applied(e) for e in others.workloads], nodes)
    ignored = [*index.ignored, *others.ignored, *compiler.ignored]
    for (namespace, name), entry in index.claims.items():
        if f"{namespace}/{name}" not in compiler.used:
            ignored.append(
                Ignored(
                    entry.document.where,
                    f"ResourceClaim {namespace}/{name}",
                    "used by no pod in the manifests",
                )
            )
    groups_by_key = {key: e.document.data for key, e in index.pod_groups.items()}
    return V1Workload(
        tuple(pods), dict(compiler.used), classes, tuple(ignored), tuple(compiler.bound),
        groups_by_key, tuple(index.notes),
    )  # fmt: skip


def _as_applied(entry: manifestindex.Entry[Any]) -> manifestindex.Entry[Any]:
    """A Pod of the `-f` manifests is a pod to apply: the API server drops the status of a pod
    it creates (only the kubelet and the controllers write it), so its phase, nomination and
    claims named there count only on a pod read from the cluster (`--from-cluster`)."""
    obj = entry.obj
    if not isinstance(obj, kinds.Pod) or obj.status is None:
        return entry
    if entry.document.source == LIVE_SOURCE:
        return entry
    return dataclasses.replace(entry, obj=obj.model_copy(update={"status": None}))


def _as_v1(data: Obj) -> Obj:
    return v1kinds.to_v1(data)


# Unsupported features.


def _without_unsupported(
    documents: Sequence[loading.Document], skip: bool
) -> tuple[list[loading.Document], list[tuple[loading.Document, str]]]:
    """The documents, less every file holding something drasat does not support, and those
    left out with why (with `skip`); without `skip` the first such object is an Unsupported
    error."""
    class_reasons = _unsupported_classes(documents)
    bad_files: dict[str, tuple[str, str]] = {}
    for document in documents:
        if document.source in bad_files:
            continue
        found = unsupported(document, class_reasons)
        if found is None:
            continue
        path, reason = found
        where = located(document, None)
        text = f"{path}: {reason} is not supported by drasat"
        if not skip:
            raise Unsupported(
                f"{text} (--skip-unsupported leaves out this file and places the rest)",
                where=where,
            )
        bad_files[document.source] = (where, text)
    kept = [d for d in documents if d.source not in bad_files]
    skipped = [
        (d, f"left out with its file ({bad_files[d.source][0]}: {bad_files[d.source][1]})")
        for d in documents
        if d.source in bad_files
    ]
    return kept, skipped


def _unsupported_classes(documents: Sequence[loading.Document]) -> dict[str, str]:
    """Class name -> what it stands for, of NVIDIA's unsupported classes and of DeviceClasses
    in the manifests whose selectors pick an unsupported driver or device type."""
    out = dict(UNSUPPORTED_CLASSES)
    for document in documents:
        data = document.data
        if data.get("kind") != "DeviceClass" or data.get("apiVersion") not in v1kinds.VERSIONS:
            continue
        text = str((data.get("spec") or {}).get("selectors", ""))
        for needle, reason in UNSUPPORTED_SELECTOR_TEXT.items():
            if needle in text:
                out[str((data.get("metadata") or {}).get("name", ""))] = reason
    return out


def unsupported(
    document: loading.Document, class_reasons: Mapping[str, str] = UNSUPPORTED_CLASSES
) -> tuple[str, str] | None:
    """(field path, what) of the first thing in the document drasat does not support. Pure."""
    data = document.data
    version, kind = str(data.get("apiVersion", "")), data.get("kind")
    if groups.group_of(version) == NVIDIA_CONFIG_GROUP and kind in UNSUPPORTED_KINDS:
        return "kind", f"{kind} ({UNSUPPORTED_KINDS[kind]})"
    if version not in v1kinds.VERSIONS or kind not in ("ResourceClaim", "ResourceClaimTemplate"):
        if kind == "DeviceClass" and version in v1kinds.VERSIONS:
            return _unsupported_config(_as_v1(data).get("spec"), "spec.config")
        return None
    spec = _as_v1(data).get("spec")
    prefix = "spec"
    if kind == "ResourceClaimTemplate":
        spec = spec.get("spec") if isinstance(spec, dict) else None
        prefix = "spec.spec"
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(devices, dict):
        return None
    for i, request in enumerate(_list(devices.get("requests"))):
        if not isinstance(request, dict):
            continue
        options = [("exactly", request.get("exactly"))]
        options += [
            (f"firstAvailable[{j}]", sub)
            for j, sub in enumerate(_list(request.get("firstAvailable")))
        ]
        for path, option in options:
            name = option.get("deviceClassName") if isinstance(option, dict) else None
            if isinstance(name, str) and name in class_reasons:
                where = f"{prefix}.devices.requests[{i}].{path}.deviceClassName"
                return where, f"{name} ({class_reasons[name]})"
    return _unsupported_config(devices, f"{prefix}.devices.config")


def _unsupported_config(holder: Any, path: str) -> tuple[str, str] | None:
    configs = holder.get("config") if isinstance(holder, dict) else None
    for i, entry in enumerate(_list(configs)):
        opaque = entry.get("opaque") if isinstance(entry, dict) else None
        parameters = opaque.get("parameters") if isinstance(opaque, dict) else None
        kind = parameters.get("kind") if isinstance(parameters, dict) else None
        if isinstance(kind, str) and kind in UNSUPPORTED_CONFIG_KINDS:
            return (
                f"{path}[{i}].opaque.parameters.kind",
                f"{kind} ({UNSUPPORTED_CONFIG_KINDS[kind]})",
            )
    return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# Indexing.


def _index(documents: Sequence[loading.Document]) -> tuple[_Index, list[loading.Document]]:
    """The v1 claims, templates and classes; the other documents for `manifestindex.build`."""
    index = _Index()
    rest: list[loading.Document] = []
    for document in documents:
        data = document.data
        version = str(data.get("apiVersion", ""))
        classic = groups.group_of(version) == v1kinds.GROUP and version not in v1kinds.VERSIONS
        if classic and data.get("kind") in (
            "ResourceClass",
            "ResourceClaim",
            "ResourceClaimTemplate",
        ):
            raise InputError(
                f"apiVersion: {show(version)} is classic DRA; these manifests also hold "
                "resource.k8s.io/v1 objects, and one run reads one of the two",
                where=located(document, None),
            )
        if v1cluster.is_v1_cluster_document(data):
            index.ignored.append(
                Ignored(
                    document.where,
                    document.describe(""),
                    "describes the cluster: pass it with --cluster",
                )
            )
            continue
        if podgroups.is_pod_group(data):
            entry = podgroups.checked(document)
            first = index.pod_groups.get(entry.key)
            if first is not None:
                raise InputError(f"defined twice (first at {first.document.where})",
                                 where=located(document, entry.namespace))  # fmt: skip
            index.pod_groups[entry.key] = entry
            continue
        if not is_v1_document(data):
            rest.append(document)
            continue
        _add(index, document)
    return index, rest


def _add(index: _Index, document: loading.Document) -> None:
    kind = document.data["kind"]
    metadata = document.data.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        raise InputError("metadata.name: missing", where=located(document, None))
    if kind == "DeviceClass":
        found = _validate(v1kinds.DeviceClass, document, "")
        _check_configs(found.spec.config or [], "spec.config", located(document, ""))
        _unique(index.classes, found.metadata.name, document, "")
        index.classes[found.metadata.name] = manifestindex.Entry(document, found, "")
        return
    namespace = metadata.get("namespace") or manifestindex.DEFAULT_NAMESPACE
    where = located(document, namespace)
    if kind == "ResourceClaim":
        claim = _validate(v1kinds.ResourceClaim, document, namespace)
        if claim.status and document.source != LIVE_SOURCE:
            # A claim to apply: the API server drops the status of what it creates (only the
            # scheduler and the controllers write it), so an allocation written in a file
            # holds no devices; said, since the file's author may think it does.
            claim = claim.model_copy(update={"status": None})
            index.notes.append(Ignored(document.where, f"ResourceClaim {namespace}/"
                                       f"{claim.metadata.name}", STATUS_DROPPED))  # fmt: skip
        _check_configs(claim.spec.devices.config or [], "spec.devices.config", where)
        _unique(index.claims, (namespace, claim.metadata.name), document, namespace)
        index.claims[(namespace, claim.metadata.name)] = manifestindex.Entry(
            document, claim, namespace
        )
    else:
        template = _validate(v1kinds.ResourceClaimTemplate, document, namespace)
        configs = template.spec.spec.devices.config or []
        _check_configs(configs, "spec.spec.devices.config", where)
        _unique(index.templates, (namespace, template.metadata.name), document, namespace)
        index.templates[(namespace, template.metadata.name)] = manifestindex.Entry(
            document, template, namespace
        )


def _index_skipped(index: _Index, skipped: Sequence[tuple[loading.Document, str]]) -> None:
    for document, reason in skipped:
        data = document.data
        index.ignored.append(Ignored(document.where, document.describe(None), reason))
        found = data.get("metadata")
        metadata: dict[str, Any] = found if isinstance(found, dict) else {}
        namespace = metadata.get("namespace") or manifestindex.DEFAULT_NAMESPACE
        key = (str(namespace), str(metadata.get("name", "")))
        if data.get("kind") == "ResourceClaim":
            index.skipped_claims[key] = document.source
        elif data.get("kind") == "ResourceClaimTemplate":
            index.skipped_templates[key] = document.source


def _unique(
    found: Mapping[Any, manifestindex.Entry[Any]], key: Any, document: loading.Document, ns: str
) -> None:
    if key in found:
        first = found[key].document.where
        raise InputError(f"defined twice (first at {first})", where=located(document, ns))


def _validate(model: type[ModelT], document: loading.Document, namespace: str) -> ModelT:
    converted = loading.Document(document.source, document.number, _as_v1(document.data))
    unknown = _unknown_metadata(document.data)
    try:
        found = loading.validate(model, converted)
    except InputError as error:
        # The API server decodes first: a value of the wrong type is its answer; an unknown
        # field comes before anything its validation would say.
        if not unknown or "cannot unmarshal" in error.detail:
            raise InputError(error.detail, where=located(document, namespace)) from None
    if unknown:
        raise InputError(f"{unknown[0]}: {knownfields.message(unknown)}",
                         where=located(document, namespace))  # fmt: skip
    problem = apivalidation.object_name_problem(document.data)
    if problem:
        raise InputError(problem, where=located(document, namespace))
    return found


def _unknown_metadata(data: Mapping[str, Any]) -> list[str]:
    """The unknown fields of the object's metadata and, in a claim template, of its claims'
    metadata: the server's strict decoding refuses them (`metadata.lables`) in every version.
    Of a v1 object, every unknown field (its status too, which the model reads leniently)."""
    if data.get("apiVersion") == v1kinds.V1:
        return knownfields.unknown_fields(data)
    unknown = knownfields.unknown_metadata(data)
    spec = data.get("spec")
    if data.get("kind") == "ResourceClaimTemplate" and isinstance(spec, Mapping):
        unknown += knownfields.unknown_metadata(spec, "spec.metadata")
    return unknown


def _check_configs(configs: Sequence[Any], path: str, where: str) -> None:
    """Opaque configurations for drasat's or NVIDIA's GPU driver must be ones drasat reads."""
    for i, entry in enumerate(configs):
        opaque = entry.opaque
        if opaque is None or opaque.driver not in CONFIG_DRIVERS:
            continue
        try:
            deviceconfig.parse(opaque.parameters)
        except ValueError as error:
            raise InputError(f"{path}[{i}].opaque.{error}", where=where) from None


# Pods and their claims.


@dataclass
class _Compiler:
    index: _Index
    classes: Mapping[str, Obj]
    priority_classes: Mapping[str, manifestindex.Entry[kinds.PriorityClass]]
    used: dict[str, V1Claim] = field(default_factory=dict)
    ignored: list[Ignored] = field(default_factory=list)
    checked: set[str] = field(default_factory=set)
    bound: list[Obj] = field(default_factory=list)

    @property
    def extended_class(self) -> str:
        """The class the templates of converted pods ask for: the one the input's DeviceClasses
        say serves `nvidia.com/gpu` (`extendedResourceName`, as kube-scheduler picks it), else
        drasat's."""
        found = [e.document.data for e in self.index.classes.values()]
        return extended.device_class_for(extended.RESOURCE, found) or extended.DEVICE_CLASS

    def pods(
        self, entries: list[manifestindex.Entry[Any]], nodes: Sequence[Mapping[str, Any]] = ()
    ) -> list[V1Pod]:
        for position, child in workloads.with_children(entries).items():
            parent = entries[position]
            self.ignored.append(
                Ignored(
                    parent.document.where,
                    parent.document.describe(parent.namespace),
                    f"its {child} is in the input and stands for its pods",
                )
            )
        statuses = {
            (e.namespace, e.obj.metadata.name): (e.obj.status or {})
            for e in entries
            if isinstance(e.obj, kinds.Pod)
        }
        out = []
        converted: dict[int, tuple[kinds.PodSpec, kinds.PodSpec]] = {}
        instances = workloads.expand(entries, nodes)
        owners = {i.owner for i in instances}
        for entry in entries:
            if isinstance(entry.obj, kinds.DaemonSet) and f"DaemonSet {entry.name}" not in owners:
                what = entry.document.describe(entry.namespace)
                self.ignored.append(Ignored(entry.document.where, what, NO_DAEMON_NODE))
        for instance in instances:
            instance = _converted(instance, converted)
            status = statuses.get((instance.namespace, instance.name), {})
            if instance.spec.nodeName:
                self.bound.append(
                    {"spec": _dump(instance.spec), "status": {"phase": instance.phase}}
                )
            pod = self._pod(instance, status if instance.owner == "" else {})
            if pod is not None:
                out.append(pod)
        return out

    def _pod(self, pod: workloads.PodInstance, status: Mapping[str, Any]) -> V1Pod | None:
        if pod.phase in workloads.FINISHED_PHASES:
            self.ignored.append(Ignored(pod.where, f"Pod {pod.key}", f"finished ({pod.phase})"))
            return None
        existing = {
            str(s.get("name")): s.get("resourceClaimName")
            for s in status.get("resourceClaimStatuses") or []
            if isinstance(s, dict)
        }
        claims: list[tuple[str, V1Claim]] = []
        for index, entry in enumerate(pod.spec.resourceClaims):
            path = f"{pod.spec_path}.resourceClaims[{index}]"
            claim = self._pod_claim(pod, entry, path, existing)
            if isinstance(claim, str):
                self.ignored.append(Ignored(pod.where, f"Pod {pod.key}", claim))
                return None
            claims.append((entry.name, claim))
        if not claims:
            self.ignored.append(Ignored(pod.where, f"Pod {pod.key}", "uses no ResourceClaim"))
            return None
        for _, claim in claims:
            missing = self._missing_class(claim)
            if missing is not None and claim.where.startswith(f"{LIVE_SOURCE}: "):
                # A live cluster's object the user did not write: the pod is listed, not fatal.
                self.ignored.append(Ignored(pod.where, f"Pod {pod.key}", missing))
                return None
            if missing is not None:
                raise InputError(missing, where=claim.where)
        for _, claim in claims:
            self.used.setdefault(claim.key, claim)
        cpu, memory = workloads.resource_requests(pod)
        return V1Pod(
            pod,
            _pod_object(pod, claims),
            tuple(claims),
            priority=workloads.priority_of(pod, self.priority_classes),
            cpu_milli=cpu,
            memory_mib=memory,
        )

    def _pod_claim(
        self,
        pod: workloads.PodInstance,
        entry: kinds.PodResourceClaim,
        path: str,
        existing: Mapping[str, Any],
    ) -> V1Claim | str:
        """The claim, or why the pod is left out (its claim's file was skipped)."""
        ref_path, name = entry.reference()
        key = (pod.namespace, name)
        generated = existing.get(entry.name)
        if entry.from_template and isinstance(generated, str) and generated:
            key, ref_path, name = (pod.namespace, generated), "status", generated
        elif entry.from_template:
            template = self.index.templates.get(key) or _drasats_template(*key, self.extended_class)
            if template is None:
                if key in self.index.skipped_templates:
                    return (
                        f"its ResourceClaimTemplate {pod.namespace}/{name} was left out with "
                        f"{self.index.skipped_templates[key]}"
                    )
                raise InputError(
                    f"{path}.{ref_path}: ResourceClaimTemplate {pod.namespace}/{name} is not in "
                    "the manifests",
                    where=pod.where,
                )
            return from_template(pod, entry.name, template)
        found = self.index.claims.get(key)
        if found is None:
            if key in self.index.skipped_claims:
                return (
                    f"its ResourceClaim {pod.namespace}/{name} was left out with "
                    f"{self.index.skipped_claims[key]}"
                )
            what = "named in status.resourceClaimStatuses" if ref_path == "status" else "in"
            raise InputError(
                f"{path}.{ref_path if ref_path != 'status' else 'name'}: ResourceClaim "
                f"{pod.namespace}/{name} {what} is not in the manifests",
                where=pod.where,
            )
        return _claim(found)

    def _missing_class(self, claim: V1Claim) -> str | None:
        """The first request that names no DeviceClass (built in or in the manifests)."""
        if claim.key in self.checked:
            return None
        prefix = "spec.spec" if claim.template else "spec"
        requests = claim.obj["spec"]["devices"].get("requests") or []
        for i, request in enumerate(requests):
            options = [("exactly", request.get("exactly"))] + [
                (f"firstAvailable[{j}]", sub)
                for j, sub in enumerate(request.get("firstAvailable") or [])
            ]
            for path, option in options:
                if option is None:
                    continue
                name = option["deviceClassName"]
                if name not in self.classes:
                    known = ", ".join(sorted(self.classes))
                    return (
                        f"{prefix}.devices.requests[{i}].{path}.deviceClassName: no DeviceClass "
                        f"{show(name)} (in the manifests or built in: {known})"
                    )
        self.checked.add(claim.key)
        return None


def _converted(
    pod: workloads.PodInstance, done: dict[int, tuple[kinds.PodSpec, kinds.PodSpec]]
) -> workloads.PodInstance:
    """The pod as drasat's admission policy leaves it: `nvidia.com/gpu` -> claims from the
    templates drasat's controller makes (`drasat.v1.extended`). The replicas of a workload share
    its template's spec: converted once per spec (`done`: by the spec's id, the spec kept so
    the id stays its own), not once per replica."""
    found = done.get(id(pod.spec))
    if found is None:
        spec, written = pod.spec, _dump(pod.spec)
        # Most pods ask for no `nvidia.com/gpu`: nothing to copy and convert.
        if extended.asks(written):
            try:
                converted = extended.convert(written, where=pod.spec_path)
            except extended.ConversionError as error:
                raise InputError(str(error), where=pod.where) from None
            if converted.changed:
                spec = kinds.PodSpec.model_validate(converted.spec)
        found = done[id(pod.spec)] = (pod.spec, spec)
    return pod if found[1] is pod.spec else dataclasses.replace(pod, spec=found[1])


def _drasats_template(
    namespace: str, name: str, device_class: str
) -> manifestindex.Entry[v1kinds.ResourceClaimTemplate] | None:
    """A template drasat's controller creates for converted pods, when not in the manifests."""
    count = extended.template_count(name)
    if count is None:
        return None
    body = extended.template(namespace, count, device_class)
    document = loading.Document("<made by drasat's controller>", 1, body)
    return manifestindex.Entry(
        document, v1kinds.ResourceClaimTemplate.model_validate(body), namespace
    )


def _claim(entry: manifestindex.Entry[v1kinds.ResourceClaim]) -> V1Claim:
    obj = _dump(entry.obj)
    metadata = obj.setdefault("metadata", {})
    metadata["namespace"] = entry.namespace
    metadata["uid"] = workloads.object_uid(
        "ResourceClaim", entry.namespace, entry.obj.metadata.name, entry.obj.metadata.uid
    )
    return V1Claim(obj, entry.where())


def _dump(model: BaseModel) -> Obj:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def generated_name(pod: str, pod_claim: str, seed: str) -> str:
    """The name the resourceclaim controller gives a claim from a template: `generateName`
    `<pod>-<podClaimName>` cut to 57 characters, `-`, then 5 random characters (here derived
    from `seed`). Pure."""
    base = f"{pod}-{pod_claim}"[:GENERATE_NAME_MAX]
    return f"{base}-{workloads.suffix(seed, 5)}"


def from_template(
    pod: workloads.PodInstance,
    pod_claim: str,
    template: manifestindex.Entry[v1kinds.ResourceClaimTemplate],
) -> V1Claim:
    """The ResourceClaim the resourceclaim controller would create for this pod. Pure."""
    name = generated_name(pod.name, pod_claim, f"{pod.uid}/{pod_claim}")
    spec = template.obj.spec
    meta = spec.metadata
    annotations = {**((meta.annotations if meta else None) or {}), POD_CLAIM_NAME: pod_claim}
    metadata: Obj = {
        "name": name,
        "namespace": pod.namespace,
        "uid": workloads.object_uid("ResourceClaim", pod.namespace, name),
        "annotations": annotations,
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod.name,
                "uid": pod.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if meta is not None and meta.labels:
        metadata["labels"] = dict(meta.labels)
    obj: Obj = {
        "apiVersion": v1kinds.V1,
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": _dump(spec.spec),
    }
    return V1Claim(obj, template.where(), template=template.obj.metadata.name)


def _pod_object(pod: workloads.PodInstance, claims: Sequence[tuple[str, V1Claim]]) -> Obj:
    """The pod as the API server would hold it once its claims exist."""
    statuses = [
        {"name": name, "resourceClaimName": claim.name}
        for name, claim in claims
        if claim.template is not None or _status_named(pod, name)
    ]
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
        "spec": pod.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
    }
    if pod.labels:
        obj["metadata"]["labels"] = dict(pod.labels)
    if pod.nomination:
        obj["metadata"]["annotations"] = {NOMINATION_ANNOTATION: pod.nomination}
    status: Obj = {"resourceClaimStatuses": statuses} if statuses else {}
    if pod.nominated_node:
        status["nominatedNodeName"] = pod.nominated_node
    if status:
        obj["status"] = status
    return obj


def _status_named(pod: workloads.PodInstance, pod_claim: str) -> bool:
    """A pod claim from a template whose claim a live pod's status named."""
    return any(c.name == pod_claim and c.from_template for c in pod.spec.resourceClaims)
