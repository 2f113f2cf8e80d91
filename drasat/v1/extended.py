"""Pods that ask for GPUs the way most workloads do, `resources.limits: nvidia.com/gpu: N`, served
by drasat's solver: at admission each such container's extended resource becomes a claim of
drasat's class, from a ResourceClaimTemplate of N GPUs in the pod's namespace.

Why a conversion (docs/OBJECTS.md, "Pods that ask for nvidia.com/gpu"): Kubernetes' own mapping
(a DeviceClass with `extendedResourceName`, GA in 1.37) has kube-scheduler allocate a claim it
makes for the pod, with its first-fit allocator, which drasat's allocator taint keeps off drasat's
devices; a claim made beforehand for the pod is deleted by kube-scheduler as stale (1.37's
dynamicresources plugin: `filterExtendedResources` refuses every node for a found claim with
requests, `PostFilter` deletes it; tests/e2e/test_e2e_v1_extended.py shows it). Converted, the
pod is an ordinary claim pod: drasat's controller allocates it (scheduling gate, explanations,
what-if alike) and the kubelet prepares it as any claim.

The rule, for each container (init containers too; sidecars and init containers each get their
own GPUs) whose limits (or requests) name the resource with a count N:

- the resource leaves its `limits` and `requests`;
- the container gets the pod claim `drasat-gpu-<i>` (`drasat-gpu-init-<i>` for the i-th init
  container) in `resources.claims`;
- the pod gets `resourceClaims: [{name: drasat-gpu-<i>, resourceClaimTemplateName:
  drasat-nvidia-com-gpu-<N>}]`, a template of one request `gpu` for N devices of the class.

`convert` is that rule for the what-if; `admission_policy` is the same rule as the
MutatingAdmissionPolicy the chart installs (CEL, in the API server); the end-to-end test holds the
two equal on the real API server. drasat's controller creates the templates a pod names in its
namespace (`missing_templates`). This is a purely computational module.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from drasat.api.devicemodel import classes

Obj = dict[str, Any]

#: The extended resource drasat serves, and the class its claims use.
RESOURCE = "nvidia.com/gpu"
DEVICE_CLASS = classes.GPU_CLASS
#: Pod claim names: `drasat-gpu-<i>`, `drasat-gpu-init-<i>`.
CLAIM_PREFIX = "drasat-gpu-"
#: Labels the controller puts on the templates it creates (and looks for).
MANAGED_BY = {"app.kubernetes.io/managed-by": "drasat"}
#: Annotation on the claims made from such a template: the resource they stand for.
RESOURCE_ANNOTATION = "gpu.drasat.io/extended-resource"
POLICY_NAME = "drasat-extended-resources"
_TEMPLATE = re.compile(r"^drasat-(?P<resource>[a-z0-9-]+)-(?P<count>[1-9][0-9]*)$")


class ConversionError(ValueError):
    """A container's count is not a positive whole number (the API server refuses it too)."""


def template_name(count: int, resource: str = RESOURCE) -> str:
    """`drasat-nvidia-com-gpu-<count>`: the template of `count` GPUs."""
    return f"drasat-{_dns(resource)}-{count}"


def _dns(resource: str) -> str:
    return resource.replace(".", "-").replace("/", "-")


def template(namespace: str, count: int, resource: str = RESOURCE) -> Obj:
    """The ResourceClaimTemplate of `count` devices of drasat's class."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": template_name(count, resource),
            "namespace": namespace,
            "labels": dict(MANAGED_BY),
        },
        "spec": {
            "metadata": {"annotations": {RESOURCE_ANNOTATION: resource}},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": DEVICE_CLASS, "count": count},
                        }
                    ]
                }
            },
        },
    }


def _count(value: Any, where: str) -> int:
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise ConversionError(f"{where}: {value!r} is not a positive whole number of GPUs")
    return int(text)


def _asks(container: Mapping[str, Any], resource: str) -> Any:
    resources = container.get("resources")
    resources = resources if isinstance(resources, Mapping) else {}
    for field in ("limits", "requests"):
        found = resources.get(field)
        found = found.get(resource) if isinstance(found, Mapping) else None
        if found is not None:
            return None if str(found).strip() == "0" else found  # 0 asks for none
    return None


def asks(spec: Any, resource: str = RESOURCE) -> bool:
    """Whether a pod spec (a mapping, as written) has a container asking for the resource."""
    if not isinstance(spec, Mapping):
        return False
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    return any(isinstance(c, Mapping) and _asks(c, resource) is not None for c in containers)


@dataclass(frozen=True)
class Converted:
    """A pod spec after the conversion, and the templates (by count) it names."""

    spec: Obj
    counts: tuple[int, ...]

    @property
    def changed(self) -> bool:
        return bool(self.counts)


def convert(spec: Mapping[str, Any], resource: str = RESOURCE, where: str = "spec") -> Converted:
    """The pod spec as drasat's admission policy leaves it (a copy; `spec` is not changed).
    Raises ConversionError naming the field of a count that is not a positive whole number."""
    out = copy.deepcopy(dict(spec))
    counts = []
    added = []
    for field, prefix in (("initContainers", "init-"), ("containers", "")):
        for i, container in enumerate(out.get(field) or []):
            asked = _asks(container, resource)
            if asked is None:
                continue
            count = _count(asked, f"{where}.{field}[{i}].resources.limits.{resource}")
            resources = container.setdefault("resources", {})
            for part in ("limits", "requests"):
                if resource in (resources.get(part) or {}):
                    del resources[part][resource]
            name = f"{CLAIM_PREFIX}{prefix}{i}"
            resources.setdefault("claims", []).append({"name": name})
            added.append({"name": name, "resourceClaimTemplateName": template_name(count)})
            counts.append(count)
    if added:
        out.setdefault("resourceClaims", []).extend(added)
    return Converted(out, tuple(counts))


def template_count(name: str, resource: str = RESOURCE) -> int | None:
    """The count of one of drasat's templates by its name; None for any other name."""
    match = _TEMPLATE.match(name)
    if match is None or match["resource"] != _dns(resource):
        return None
    return int(match["count"])


def missing_templates(pods: Iterable[Obj], existing: Iterable[tuple[str, str]]) -> list[Obj]:
    """The templates of drasat's (namespace, name) that pods not yet running name and that do not
    exist, each once: what the controller creates."""
    have = set(existing)
    out: dict[tuple[str, str], Obj] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace", ""))
        if (pod.get("spec") or {}).get("nodeName") or meta.get("deletionTimestamp"):
            continue
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
            name = str(entry.get("resourceClaimTemplateName") or "")
            count = template_count(name)
            key = (namespace, name)
            if count is None or key in have or key in out:
                continue
            out[key] = template(namespace, count)
    return [out[k] for k in sorted(out)]


# The same rule in CEL, for the API server (MutatingAdmissionPolicy, admissionregistration/v1).


def _cel_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _present(part: str, resource: str) -> str:
    r = _cel_string(resource)
    return f"(has(c.resources.{part}) && {r} in c.resources.{part})"


def _count_cel(resource: str) -> str:
    """CEL: container `c`'s count as written (its limits', else its requests')."""
    r = _cel_string(resource)
    return (
        f"({_present('limits', resource)} ? string(c.resources.limits[{r}]) : "
        f"string(c.resources.requests[{r}]))"
    )


def _asks_one(resource: str) -> str:
    """CEL: container `c` asks for a positive whole number of the resource (0 asks for none; a
    count that is not whole is left for the API server to refuse, as it refuses any)."""
    return (
        f"has(c.resources) && ({_present('limits', resource)} || "
        f"{_present('requests', resource)}) && {_count_cel(resource)}.matches('^[1-9][0-9]*$')"
    )


def _container_patches(field: str, prefix: str, resource: str) -> str:
    """CEL: the JSON patches of every container of `field` that asks for the resource."""
    escaped = _cel_string(resource.replace("~", "~0").replace("/", "~1"))
    claim = f"{_cel_string(CLAIM_PREFIX + prefix)} + string(i)"
    base = f'"/spec/{field}/" + string(i) + "/resources"'
    in_limits, in_requests = _present("limits", resource), _present("requests", resource)
    return (
        f"object.spec.{field}.transformList(i, c, {_asks_one(resource)}, "
        f'({in_limits} ? [JSONPatch{{op: "remove", path: {base} + "/limits/" + {escaped}}}] '
        ": []) + "
        f'({in_requests} ? [JSONPatch{{op: "remove", path: {base} + "/requests/" + {escaped}}}] '
        ": []) + "
        f'(has(c.resources.claims) ? [JSONPatch{{op: "add", path: {base} + "/claims/-", '
        f"value: {{'name': {claim}}}}}] : "
        f'[JSONPatch{{op: "add", path: {base} + "/claims", value: [{{"name": {claim}}}]}}])'
        ").flatten()"
    )


def _claim_entries(field: str, prefix: str, resource: str) -> str:
    """CEL: the pod claims of every container of `field` that asks for the resource."""
    return (
        f"object.spec.{field}.transformList(i, c, {_asks_one(resource)}, "
        f"{{'name': {_cel_string(CLAIM_PREFIX + prefix)} + string(i), "
        f"'resourceClaimTemplateName': {_cel_string('drasat-' + _dns(resource) + '-')} + "
        f"{_count_cel(resource)}}})"
    )


def _asks_cel(field: str, resource: str) -> str:
    return f"(has(object.spec.{field}) && object.spec.{field}.exists(c, {_asks_one(resource)}))"


def admission_policy(resource: str = RESOURCE) -> list[Obj]:
    """The MutatingAdmissionPolicy that applies `convert` to every pod created, and its binding."""
    init_entries = _claim_entries("initContainers", "init-", resource)
    init = f"(has(object.spec.initContainers) ? {init_entries} : [])"
    entries = f"{init} + {_claim_entries('containers', '', resource)}"
    init_patches = (
        f"(has(object.spec.initContainers) ? "
        f"{_container_patches('initContainers', 'init-', resource)} : [])"
    )
    patches = (
        f"{init_patches} + {_container_patches('containers', '', resource)} + "
        f"(has(object.spec.resourceClaims) ? variables.claims.map(e, "
        f'JSONPatch{{op: "add", path: "/spec/resourceClaims/-", value: e}}) : '
        f'[JSONPatch{{op: "add", path: "/spec/resourceClaims", value: variables.claims}}])'
    )
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "asks-for-the-extended-resource",
                    "expression": f"{_asks_cel('initContainers', resource)} || "
                    f"{_asks_cel('containers', resource)}",
                }
            ],
            "variables": [{"name": "claims", "expression": entries}],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patches}}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME},
        "spec": {"policyName": POLICY_NAME},
    }
    return [policy, binding]
