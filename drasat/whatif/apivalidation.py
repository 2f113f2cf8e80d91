"""What the API server refuses in the manifests the what-if reads, checked the way Kubernetes
1.37 checks it (`pkg/apis/core/validation`, `pkg/apis/resource/validation`), so that the what-if
refuses (exit 2, one line naming file, object and field) what `kubectl apply` would refuse, and
nothing it would accept. `tests/whatif/test_whatif_apiserver_oracle.py` holds the two equal on
the real API server.

Checked here: that an object of a group Kubernetes serves names a version and kind it serves
(`resource.k8s.io/v2` is "no matches for kind"); and the pod fields placement depends on, in a
Pod or a workload's pod template: the pod's claim entries (a DNS label name, unique, one of a
claim or a template, each a valid object name), the containers' `resources.claims` (each naming
an entry of the pod, once), and the counts of extended resources (a whole number, at least 0,
requests equal to limits, limits set). Claims, templates and classes are checked by their
models (`v1kinds`), their CEL selectors by `drasat.v1.celcheck`. This is a purely computational
module.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from drasat.api.inputerrors import show
from drasat.api.quantity import go_value

Obj = dict[str, Any]

#: The group versions a Kubernetes 1.37 API server serves (by default, or where an operator's
#: `--runtime-config` enables them: `resource.k8s.io` betas and alphas), each with the kinds the
#: what-if may meet in manifests. Groups not listed (CRDs, other vendors) are not checked.
SERVED: Mapping[str, Mapping[str, frozenset[str]]] = {
    "": {
        "v1": frozenset({
            "Binding", "ConfigMap", "Endpoints", "Event", "LimitRange", "Namespace", "Node",
            "PersistentVolume", "PersistentVolumeClaim", "Pod", "PodTemplate",
            "ReplicationController", "ResourceQuota", "Secret", "Service", "ServiceAccount",
            "List",
        }),
    },
    "apps": {
        "v1": frozenset({"ControllerRevision", "DaemonSet", "Deployment", "ReplicaSet",
                         "StatefulSet"}),
    },
    "batch": {"v1": frozenset({"CronJob", "Job"})},
    "scheduling.k8s.io": {
        "v1": frozenset({"PriorityClass"}),
        "v1alpha1": frozenset({"Workload"}),
        "v1beta1": frozenset({"Workload", "PodGroup"}),
    },
    "resource.k8s.io": {
        "v1": frozenset({"DeviceClass", "ResourceClaim", "ResourceClaimTemplate",
                         "ResourceSlice", "DeviceTaintRule"}),
        "v1beta2": frozenset({"DeviceClass", "ResourceClaim", "ResourceClaimTemplate",
                              "ResourceSlice", "DeviceTaintRule"}),
        "v1beta1": frozenset({"DeviceClass", "ResourceClaim", "ResourceClaimTemplate",
                              "ResourceSlice"}),
        "v1alpha3": frozenset({"DeviceTaintRule", "ResourcePoolStatusRequest"}),
    },
}  # fmt: skip
#: Classic DRA (Kubernetes 1.27–1.31), which the what-if reads for legacy clusters though a
#: 1.37 API server no longer serves it.
CLASSIC = {"resource.k8s.io/v1alpha2": frozenset({"ResourceClass", "ResourceClaim",
                                                  "ResourceClaimTemplate",
                                                  "PodSchedulingContext"})}  # fmt: skip

#: Kinds the what-if reads whose names are DNS subdomains.
NAMED_LIKE_SUBDOMAINS = frozenset({
    "Pod", "Deployment", "ReplicaSet", "StatefulSet", "Job", "DaemonSet", "CronJob",
    "PriorityClass", "ResourceClaim", "ResourceClaimTemplate", "DeviceClass",
})  # fmt: skip
#: Kinds whose names are shorter than a subdomain's 253: a CronJob's name, with the 11
#: characters of its Jobs' suffix, must stay a DNS label (`ValidateCronJobCreate`).
_NAME_LIMITS = {"CronJob": 52}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def unserved(api_version: str, kind: str) -> str | None:
    """Why the API server has no such object (the field and what is wrong), or None. Pure."""
    group, _, version = api_version.rpartition("/")
    versions = SERVED.get(group)
    if versions is None or api_version in CLASSIC:
        return None
    kinds = versions.get(version)
    label = group or "the core group"
    if kinds is None:
        served = ", ".join(f"{group}/{v}" if group else v for v in versions)
        return (
            f"apiVersion: {show(api_version)}: no matches for kind {show(kind)} in version "
            f"{show(api_version)}: {label} is served as {served}"
        )
    if kind not in kinds:
        return (
            f"kind: {show(kind)}: no matches for kind {show(kind)} in version {show(api_version)}"
        )
    return None


def dns_label(value: str) -> str | None:
    """Kubernetes' message when `value` is not a DNS-1123 label, else None."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _DNS_LABEL.match(value):
        return (
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
            "'-', and must start and end with an alphanumeric character"
        )
    return None


def dns_subdomain(value: str) -> str | None:
    """Kubernetes' message when `value` is not a DNS-1123 subdomain, else None."""
    if len(value) > 253:
        return "must be no more than 253 characters"
    if not _DNS_SUBDOMAIN.match(value):
        return (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character"
        )
    return None


_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def driver_name(value: str) -> str | None:
    """Kubernetes' message when `value` is not a driver name (a CSI driver's rules), or None."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    return dns_subdomain(value.lower())


def fully_qualified_name(value: str) -> str | None:
    """Kubernetes' message when `value` is not `domain/name` (an attribute's full name)."""
    domain, slash, name = value.partition("/")
    if not slash:
        return "a fully qualified name must be a domain and a name separated by a slash"
    if not domain:
        return "the domain must not be empty"
    if not name:
        return "the name must not be empty"
    found = driver_name(domain)
    if found:
        return found
    if len(name) > 32:
        return "must be no more than 32 characters"
    if not _C_IDENTIFIER.match(name):
        return (
            "a valid C identifier must start with alphabetic character or '_', followed by a "
            "string of alphanumeric characters or '_'"
        )
    return None


def object_name_problem(data: Mapping[str, Any]) -> str | None:
    """`metadata.name: ...` or `metadata.namespace: ...` when the API server refuses the
    object's name (a DNS subdomain) or namespace (a DNS label), else None. Pure."""
    metadata = data.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    name, namespace = metadata.get("name"), metadata.get("namespace")
    if isinstance(name, str) and name:
        why = dns_subdomain(name)
        most = _NAME_LIMITS.get(str(data.get("kind")))
        if why is None and most is not None and len(name) > most:
            why = f"must be no more than {most} characters"
        if why:
            return f'metadata.name: Invalid value: "{name}": {why}'
    if isinstance(namespace, str) and namespace:
        why = dns_label(namespace)
        if why:
            return f'metadata.namespace: Invalid value: "{namespace}": {why}'
    return None


def pod_spec_problem(spec: Any, path: str) -> str | None:
    """The first problem the API server finds in a pod spec's claims and extended resources, as
    `field.path: message`, or None. `path`: where the spec is (`spec`, `spec.template.spec`).
    Pure."""
    if not isinstance(spec, Mapping):
        return None
    names, problem = _pod_claims(spec.get("resourceClaims"), f"{path}.resourceClaims")
    if problem:
        return problem
    for field in ("initContainers", "containers"):
        containers = spec.get(field)
        for i, container in enumerate(containers if isinstance(containers, list) else []):
            if not isinstance(container, Mapping):
                continue
            where = f"{path}.{field}[{i}].resources"
            resources = container.get("resources")
            if not isinstance(resources, Mapping):
                continue
            problem = _container_claims(resources.get("claims"), names, f"{where}.claims")
            problem = problem or _resources(resources, where)
            if problem:
                return problem
    return None


def _pod_claims(entries: Any, path: str) -> tuple[set[str], str | None]:
    names: set[str] = set()
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, Mapping):
            continue
        where = f"{path}[{i}]"
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            return names, f"{where}.name: Required value"
        if name in names:
            return names, f'{where}.name: Duplicate value: "{name}"'
        why = dns_label(name)
        if why:
            return names, f'{where}.name: Invalid value: "{name}": {why}'
        names.add(name)
        given = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if k in entry]
        if len(given) == 2:
            return names, (
                f"{where}: Invalid value: at most one of `resourceClaimName` or "
                "`resourceClaimTemplateName` may be specified"
            )
        if not given and not isinstance(entry.get("source"), Mapping):
            return names, (
                f"{where}: Invalid value: must specify one of: `resourceClaimName`, "
                "`resourceClaimTemplateName`"
            )
        for key in given:
            value = entry.get(key)
            why = dns_subdomain(value) if isinstance(value, str) else "must be a string"
            if why:
                return names, f"{where}.{key}: Invalid value: {show(value)}: {why}"
    return names, None


def _container_claims(entries: Any, names: set[str], path: str) -> str | None:
    seen: set[str] = set()
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, Mapping):
            continue
        where = f"{path}[{i}]"
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            return f"{where}: Required value"
        request = entry.get("request")
        key = f"{name}/{request}" if isinstance(request, str) and request else name
        if isinstance(request, str) and request:
            why = dns_label(request)
            if why:
                return f'{where}.request: Invalid value: "{request}": {why}'
        if name in seen or key in seen or (key == name and any(
            s.startswith(f"{name}/") for s in seen
        )):  # fmt: skip
            return f'{where}: Duplicate value: "{key}"'
        seen.add(key)
        if name not in names:
            listed = ", ".join(sorted(names))
            return (
                f'{where}: Not found: "{name}": must be one of the names in '
                f"pod.spec.resourceClaims{': ' + listed if listed else ' which is empty'}"
            )
    return None


def _resources(resources: Mapping[str, Any], path: str) -> str | None:
    """The first problem of a container's `resources` as the server's
    `validateResourceRequirements` finds them: each name (a resource for containers or an
    extended one), each amount (at least 0; an extended resource's a whole number), each request
    against its limit (no more than it; equal to it, and the limit set, for what cannot be
    overcommitted: extended resources and hugepages). Amounts by value (`1000m`, `1.0`, `1e0`
    are 1), of quantities that decoded (`knownfields.decode` refused the others)."""
    found, asked = resources.get("limits"), resources.get("requests")
    limits: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    requests: Mapping[str, Any] = asked if isinstance(asked, Mapping) else {}
    for part, given in (("limits", limits), ("requests", requests)):
        for name, value in given.items():
            where = f"{path}.{part}[{name}]"
            text = str(value).strip()
            why = container_resource_name(str(name))
            if why:
                return f'{where}: Invalid value: "{name}": {why}'
            amount = _amount(value)
            if amount is None:
                continue  # not a quantity: decoding refused it
            if amount < 0:
                return f'{where}: Invalid value: "{text}": must be greater than or equal to 0'
            if is_extended(str(name)) and amount != amount.to_integral_value():
                return f'{where}: Invalid value: "{text}": must be an integer'
            if part == "limits":
                continue
            overcommit = not is_extended(str(name)) and not str(name).startswith("hugepages-")
            limit = _amount(limits[name]) if name in limits else None
            if name not in limits and not overcommit:
                return (
                    f"{path}.limits[{name}]: Required value: Limit must be set for non "
                    "overcommitable resources"
                )
            if limit is not None and not overcommit and limit != amount:
                return (
                    f'{where}: Invalid value: "{text}": must be equal to {name} limit of '
                    f"{str(limits[name]).strip()}"
                )
            if limit is not None and amount > limit:
                return (
                    f'{where}: Invalid value: "{text}": must be less than or equal to {name} '
                    f"limit of {str(limits[name]).strip()}"
                )
    return None


#: The resources a container may name without a domain (`IsStandardContainerResourceName`),
#: besides `hugepages-<size>`; the others Kubernetes knows (`IsStandardResourceName`: quota's).
_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_STANDARD_RESOURCES = frozenset({
    "pods", "services", "replicationcontrollers", "resourcequotas", "secrets", "configmaps",
    "persistentvolumeclaims", "storage", "requests.cpu", "requests.memory",
    "requests.ephemeral-storage", "requests.storage", "limits.cpu", "limits.memory",
    "limits.ephemeral-storage", "services.nodeports", "services.loadbalancers",
})  # fmt: skip
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def qualified_name(value: str) -> str | None:
    """Why `value` is not a qualified name (`[prefix/]name`, Kubernetes' `IsQualifiedName`),
    else None. Pure."""
    parts = value.split("/")
    if len(parts) > 2:
        return (
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character with an optional DNS subdomain "
            "prefix and '/' (e.g. 'example.com/MyName')"
        )
    if len(parts) == 2:
        if not parts[0]:
            return "prefix part must be non-empty"
        why = dns_subdomain(parts[0])
        if why:
            return f"prefix part {why}"
    name = parts[-1]
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _QUALIFIED_NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character"
        )
    return None


def container_resource_name(name: str) -> str | None:
    """Why a container may not name the resource `name` (`validateContainerResourceName`),
    else None. Pure."""
    why = qualified_name(name)
    if why:
        return why
    if "/" not in name:
        hugepages = name.startswith("hugepages-")
        if name not in _CONTAINER_RESOURCES | _STANDARD_RESOURCES and not hugepages:
            return "must be a standard resource type or fully qualified"
        if name not in _CONTAINER_RESOURCES and not hugepages:
            return "must be a standard resource for containers"
        return None
    if not _native(name) and (
        name.startswith("requests.") or qualified_name(f"requests.{name}") is not None
    ):
        return "doesn't follow extended resource name standard"
    return None


def _native(name: str) -> bool:
    """Kubernetes' own resource (`IsNativeResource`): no domain, or one of kubernetes.io."""
    return "/" not in name or "kubernetes.io/" in name


def _amount(value: Any) -> Decimal | None:
    """A quantity's exact value, as the server parses it; None when it is not one."""
    try:
        return go_value(value)
    except ValueError:
        return None


def stored_count(value: Any) -> Any:
    """An extended resource's whole count as the API server stores it (`1000m`, `1.0`, `+1`:
    `1`; the value unchanged when it is not a whole number). Pure."""
    amount = _amount(value)
    if amount is None or amount < 0 or amount != amount.to_integral_value():
        return value
    return int(amount) if isinstance(value, int) else str(int(amount))


def is_extended(name: str) -> bool:
    """An extended resource (`IsExtendedResourceName`): `domain/name` outside kubernetes.io,
    not a quota name (`requests.`), qualified once quota's `requests.` goes before it."""
    if _native(name) or name.startswith("requests."):
        return False
    return qualified_name(f"requests.{name}") is None


def pod_specs(data: Mapping[str, Any]) -> Sequence[tuple[Any, str]]:
    """(pod spec, its field path) of a Pod or a workload with a pod template (a CronJob's is
    its Job template's). Pure."""
    spec = data.get("spec")
    if not isinstance(spec, Mapping):
        return []
    if data.get("kind") == "Pod":
        return [(spec, "spec")]
    path = "spec"
    if data.get("kind") == "CronJob":
        job = spec.get("jobTemplate")
        spec = job.get("spec") if isinstance(job, Mapping) else None
        path = "spec.jobTemplate.spec"
        if not isinstance(spec, Mapping):
            return []
    template = spec.get("template")
    if isinstance(template, Mapping):
        return [(template.get("spec"), f"{path}.template.spec")]
    return []


#: The restart policies a workload's pod template may have (absent: `Always`, the pod's
#: default): the controllers of long-running pods restart them, a Job's pods end.
_RESTART_POLICIES = {
    ("apps", "Deployment"): ("Always",), ("apps", "ReplicaSet"): ("Always",),
    ("apps", "StatefulSet"): ("Always",), ("apps", "DaemonSet"): ("Always",),
    ("batch", "Job"): ("OnFailure", "Never"), ("batch", "CronJob"): ("OnFailure", "Never"),
}  # fmt: skip


def restart_policy_problem(data: Mapping[str, Any]) -> str | None:
    """`<template>.restartPolicy: ...` when the workload's controller cannot run its pod
    template's restart policy, as the server words it (a Job's or a CronJob's must be
    `OnFailure` or `Never`, so one left to the default `Always` is refused), else None. Pure."""
    group = str(data.get("apiVersion", "")).rpartition("/")[0]
    allowed = _RESTART_POLICIES.get((group, str(data.get("kind"))))
    if allowed is None:
        return None
    for spec, path in pod_specs(data):
        given = spec.get("restartPolicy") if isinstance(spec, Mapping) else None
        policy = given if isinstance(given, str) and given else "Always"
        if policy in allowed:
            continue
        if len(allowed) > 1:
            return f'{path}.restartPolicy: Required value: valid values: "OnFailure", "Never"'
        return f'{path}.restartPolicy: Unsupported value: "{policy}": supported values: "Always"'
    return None


#: Integer fields of workloads and pod specs: a value of another type is a decoding error.
_WORKLOAD_INTEGERS = ("replicas", "parallelism", "completions")


def decodes(data: Mapping[str, Any]) -> bool:
    """Whether the workload's or pod's integer fields decode (a string `replicas: "2"` does not):
    the API server decodes before it validates, so such a document's decoding error is named
    (by the workload model) before any problem of its pod spec. Pure."""
    spec = data.get("spec")
    if not isinstance(spec, Mapping):
        return True
    values = [spec.get(f) for f in _WORKLOAD_INTEGERS] if data.get("kind") != "Pod" else []
    values += [s.get("priority") for s, _ in pod_specs(data) if isinstance(s, Mapping)]
    return all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in values)
