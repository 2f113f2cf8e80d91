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
from drasat.api.quantity import exact

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
    "Pod", "Deployment", "ReplicaSet", "StatefulSet", "Job", "PriorityClass", "ResourceClaim",
    "ResourceClaimTemplate", "DeviceClass",
})  # fmt: skip
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
#: Resource names Kubernetes counts itself; any other `domain/name` outside kubernetes.io is an
#: extended resource (a whole number, requests equal to limits).
_NATIVE_PREFIXES = ("hugepages-", "requests.", "limits.")
_NATIVE = frozenset({"cpu", "memory", "ephemeral-storage", "storage", "pods"})


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
            problem = problem or _extended(resources, where)
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


def _extended(resources: Mapping[str, Any], path: str) -> str | None:
    found, asked = resources.get("limits"), resources.get("requests")
    limits: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    requests: Mapping[str, Any] = asked if isinstance(asked, Mapping) else {}
    for part, given in (("limits", limits), ("requests", requests)):
        for name, value in given.items():
            if not is_extended(str(name)):
                continue
            where = f"{path}.{part}[{name}]"
            text = str(value).strip()
            # By value, as the server checks a quantity: `1000m`, `1.0` and `1e0` are 1.
            amount = _amount(value)
            if amount is not None and amount < 0:
                return f'{where}: Invalid value: "{text}": must be greater than or equal to 0'
            if amount is None or amount != amount.to_integral_value():
                return f'{where}: Invalid value: "{text}": must be an integer'
            if part == "requests" and name not in limits:
                return f"{where}: Invalid value: \"{text}\": Limit must be set for non " \
                    "overcommitable resources"  # fmt: skip
            if part == "requests" and _amount(limits[name]) != amount:
                return (
                    f'{where}: Invalid value: "{text}": must be equal to {name} limit of '
                    f"{str(limits[name]).strip()}"
                )
    return None


def _amount(value: Any) -> Decimal | None:
    """A quantity's exact value; None when it is not one."""
    try:
        return exact(value)
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
    if name in _NATIVE or name.startswith(_NATIVE_PREFIXES):
        return False
    domain, slash, _ = name.partition("/")
    return bool(slash) and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def pod_specs(data: Mapping[str, Any]) -> Sequence[tuple[Any, str]]:
    """(pod spec, its field path) of a Pod or a workload with a pod template. Pure."""
    spec = data.get("spec")
    if not isinstance(spec, Mapping):
        return []
    if data.get("kind") == "Pod":
        return [(spec, "spec")]
    template = spec.get("template")
    if isinstance(template, Mapping):
        return [(template.get("spec"), "spec.template.spec")]
    return []


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
