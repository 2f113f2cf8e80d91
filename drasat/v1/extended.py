"""Pods that ask for GPUs the way most workloads do, `resources.limits: nvidia.com/gpu: N`, served
by drasat's solver: at admission the extended resource becomes claims from ResourceClaimTemplates
of N devices in the pod's namespace, of the DeviceClass that serves the resource.

Why a conversion (docs/OBJECTS.md, "Pods that ask for nvidia.com/gpu"): Kubernetes' own mapping
(a DeviceClass with `extendedResourceName`, GA in 1.37) has kube-scheduler allocate a claim it
makes for the pod, with its first-fit allocator, which drasat's allocator taint keeps off the
devices drasat allocates (drasat's own, or NVIDIA's when drasat allocates for NVIDIA's driver); a
claim made beforehand for the pod is deleted by kube-scheduler as stale (1.37's dynamicresources
plugin: `filterExtendedResources` refuses every node for a found claim with requests,
`PostFilter` deletes it; tests/e2e/test_e2e_v1_extended.py shows it). Converted, the pod is an
ordinary claim pod: its class's allocator allocates it (drasat's controller, with scheduling
gate, explanations and what-if alike) and the kubelet prepares it as any claim.

Which class: the one kube-scheduler would use for the resource (`device_class_for`: the class
whose `extendedResourceName` names it, as NVIDIA's chart has `gpu.nvidia.com` name
`nvidia.com/gpu`), else drasat's `gpu.drasat.io`. The templates carry it, so the admission rule,
which cannot read classes, names templates only; the controller (and the what-if) make them.

The rule counts as Kubernetes counts a pod's request, max(largest init container, sum of the
long-lived containers), per resource, with the claims kube-scheduler's own claim would have
(1.37 `createRequestsAndMappings`). For each container whose limits (or requests) name the
resource with a count N, the resource leaves its `limits` and `requests`, and:

- a long-lived container (an app container i, or a sidecar: an init container i with
  `restartPolicy: Always`) gets the pod claim `drasat-gpu-<i>` (`drasat-gpu-init-<i>`) from the
  template `drasat-nvidia-com-gpu-<N>` (one request `gpu` for N devices of the class);
- an init container that is not a sidecar, which runs before the long-lived containers after
  it, uses their claims first, in order, until it has N; for what they lack, the pod's one claim
  `drasat-gpu-init` of the largest such lack, which every init container lacking some uses.

`convert` is that rule for the what-if and the webhook; `admission_policy` is the same rule as
the MutatingAdmissionPolicy the chart installs (CEL, in the API server); the end-to-end test holds
the two equal on the real API server. drasat's controller creates the templates a pod names in
its namespace (`missing_templates`). This is a purely computational module.
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
#: Pod claim names: `drasat-gpu-<i>` (app container i), `drasat-gpu-init-<i>` (sidecar i), and
#: the init containers' `drasat-gpu-init`.
CLAIM_PREFIX = "drasat-gpu-"
INIT_CLAIM = f"{CLAIM_PREFIX}init"
#: Labels the controller puts on the templates it creates (and looks for).
MANAGED_BY = {"app.kubernetes.io/managed-by": "drasat"}
#: Annotation on the claims made from such a template: the resource they stand for.
RESOURCE_ANNOTATION = "gpu.drasat.io/extended-resource"
POLICY_NAME = "drasat-extended-resources"
#: Every DeviceClass also serves `deviceclass.resource.kubernetes.io/<its name>`.
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
_TEMPLATE = re.compile(r"^drasat-(?P<resource>[a-z0-9-]+)-(?P<count>[1-9][0-9]*)$")


class ConversionError(ValueError):
    """A container's count is not a positive whole number (the API server refuses it too)."""


def template_name(count: int, resource: str = RESOURCE) -> str:
    """`drasat-nvidia-com-gpu-<count>`: the template of `count` GPUs."""
    return f"drasat-{_dns(resource)}-{count}"


def _dns(resource: str) -> str:
    return resource.replace(".", "-").replace("/", "-")


def template(
    namespace: str, count: int, device_class: str = DEVICE_CLASS, resource: str = RESOURCE
) -> Obj:
    """The ResourceClaimTemplate of `count` devices of the class that serves the resource."""
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
                            "exactly": {"deviceClassName": device_class, "count": count},
                        }
                    ]
                }
            },
        },
    }


def template_class(body: Mapping[str, Any]) -> str | None:
    """The class a template of drasat's asks its devices of."""
    try:
        (request,) = body["spec"]["spec"]["devices"]["requests"]
        return str(request["exactly"]["deviceClassName"])
    except (KeyError, TypeError, ValueError):
        return None


def device_class_for(
    resource: str, classes: Iterable[Mapping[str, Any]], default: str | None = DEVICE_CLASS
) -> str | None:
    """The DeviceClass that serves an extended resource, as kube-scheduler picks it
    (k8s.io/dynamic-resource-allocation's extendedresourcecache): the class whose
    `spec.extendedResourceName` names it — the newest by creationTimestamp where several do,
    the lower name where they were created in the same second —, else the class that the
    implicit name `deviceclass.resource.kubernetes.io/<class>` names; else `default` (drasat's
    class: what the conversion always served before classes said so)."""
    named = []
    by_name = {}
    for found in classes:
        meta = found.get("metadata") or {}
        name = str(meta.get("name", ""))
        by_name[name] = found
        if (found.get("spec") or {}).get("extendedResourceName") == resource:
            named.append((str(meta.get("creationTimestamp") or ""), name))
    if named:
        newest = max(created for created, _ in named)
        return min(name for created, name in named if created == newest)
    implicit = resource.removeprefix(IMPLICIT_PREFIX)
    if implicit != resource and implicit in by_name:
        return implicit
    return default


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


def _sidecar(container: Mapping[str, Any]) -> bool:
    """An init container that runs beside the app containers (`restartPolicy: Always`)."""
    return container.get("restartPolicy") == "Always"


def convert(spec: Mapping[str, Any], resource: str = RESOURCE, where: str = "spec") -> Converted:
    """The pod spec as drasat's admission policy leaves it (a copy; `spec` is not changed).
    Raises ConversionError naming the field of a count that is not a positive whole number.

    Counted as Kubernetes counts a pod's request, max(largest init container, sum of the
    long-lived ones), and as kube-scheduler builds its own claim for the resource (1.37
    `createRequestsAndMappings`): each long-lived container (an app container, or an init
    container with `restartPolicy: Always`, a sidecar) gets a claim of its own; an init container
    that is not a sidecar runs before the long-lived containers after it, so it uses their GPUs
    first (in order, until it has its count) and, for what they lack, the pod's one claim
    `drasat-gpu-init` of the largest such lack, which every init container lacking some uses."""
    out = copy.deepcopy(dict(spec))
    found = [
        (field, i, container)
        for field in ("initContainers", "containers")
        for i, container in enumerate(out.get(field) or [])
    ]
    counts = []
    for field, i, container in found:
        asked = _asks(container, resource)
        path = f"{where}.{field}[{i}].resources.limits.{resource}"
        counts.append(0 if asked is None else _count(asked, path))
    long_lived = [field == "containers" or _sidecar(c) for field, _, c in found]
    names = [f"{CLAIM_PREFIX}{'init-' if field == 'initContainers' else ''}{i}"
             for field, i, _ in found]  # fmt: skip
    uses: dict[int, list[str]] = {}
    added: list[tuple[str, int]] = []
    for k, count in enumerate(counts):
        if long_lived[k] and count:
            uses[k] = [names[k]]
            added.append((names[k], count))
    lacking = 0
    for k, count in enumerate(counts):
        if long_lived[k] or not count:
            continue
        uses[k], got = [], 0
        for j in range(k, len(found)):
            if got >= count:
                break
            if long_lived[j] and counts[j]:
                uses[k].append(names[j])
                got += counts[j]
        if got < count:
            lacking = max(lacking, count - got)
            uses[k].append(INIT_CLAIM)
    if lacking:
        added.append((INIT_CLAIM, lacking))
    for k, claims in uses.items():
        resources = found[k][2].setdefault("resources", {})
        for part in ("limits", "requests"):
            if resource in (resources.get(part) or {}):
                del resources[part][resource]
        resources.setdefault("claims", []).extend({"name": name} for name in claims)
    if added:
        out.setdefault("resourceClaims", []).extend(
            {"name": name, "resourceClaimTemplateName": template_name(count)}
            for name, count in added
        )
    return Converted(out, tuple(count for _, count in added))


def admitted(pod: Mapping[str, Any], resource: str = RESOURCE) -> Obj | None:
    """The pod (a copy) as drasat's admission policy leaves it at creation: `convert` applied to
    its spec; None where the policy leaves the pod as written: it asks for none of the resource,
    or for a count that is not a positive whole number (its match condition does not hold; the
    API server refuses such a count itself). The webhook, the simulated API server's admission
    and the what-if apply this one rule; `admission_policy` is the same rule in CEL."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping) or not asks(spec, resource):
        return None
    try:
        converted = convert(spec, resource)
    except ConversionError:
        return None
    return {**copy.deepcopy(dict(pod)), "spec": converted.spec}


def template_count(name: str, resource: str = RESOURCE) -> int | None:
    """The count of one of drasat's templates by its name; None for any other name."""
    match = _TEMPLATE.match(name)
    if match is None or match["resource"] != _dns(resource):
        return None
    return int(match["count"])


def missing_templates(
    pods: Iterable[Obj], existing: Iterable[tuple[str, str]], device_class: str = DEVICE_CLASS
) -> list[Obj]:
    """The templates of drasat's (namespace, name) that pods not yet running name and that do not
    exist, each once, of the class that serves the resource: what the controller creates."""
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
            out[key] = template(namespace, count, device_class)
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


def _sum(items: str) -> str:
    """CEL: the sum of a list of ints (0 for none)."""
    return f"([0] + {items}).sum()"


#: CEL over the variables below: the pod claims container `k` uses (the Python rule's `uses`):
#: a long-lived one its own; an init container the long-lived ones after it until it has its
#: count, then the init claim for what they lack.
_AFTER = _sum("variables.counts.transformList(m, x, m >= k && variables.long[m], x)")
_BEFORE_J = _sum("variables.counts.transformList(m, x, m >= k && m < j && variables.long[m], x)")
_USES = (
    "variables.counts[k] == 0 ? [] : variables.long[k] ? [variables.names[k]] : "
    "variables.names.transformList(j, n, j >= k && variables.long[j] && "
    f"variables.counts[j] > 0 && {_BEFORE_J} < variables.counts[k], n) + "
    f"({_AFTER} < variables.counts[k] ? [{_cel_string(INIT_CLAIM)}] : [])"
)


def _variables(resource: str) -> list[Obj]:
    """The policy's variables: the containers in kube-scheduler's order (init, then app), each
    one's count, whether it is long-lived, its own claim's name, the claims it uses, and the
    pod claims to add."""
    prefix = _cel_string(f"drasat-{_dns(resource)}-")
    expressions = {
        "all": "(has(object.spec.initContainers) ? object.spec.initContainers : []) + "
        "object.spec.containers",
        "inits": "has(object.spec.initContainers) ? size(object.spec.initContainers) : 0",
        "counts": f"variables.all.map(c, {_asks_one(resource)} ? int({_count_cel(resource)}) : 0)",
        "long": "variables.all.transformList(k, c, k >= variables.inits || "
        '(has(c.restartPolicy) && c.restartPolicy == "Always"))',
        "names": "variables.all.transformList(k, c, k < variables.inits ? "
        f"{_cel_string(CLAIM_PREFIX + 'init-')} + string(k) : "
        f"{_cel_string(CLAIM_PREFIX)} + string(k - variables.inits))",
        "uses": f"variables.all.transformList(k, c, {_USES})",
        "lacking": "([0] + variables.all.transformList(k, c, !variables.long[k] && "
        f"variables.counts[k] > 0, variables.counts[k] - {_AFTER})).max()",
        "claims": "variables.all.transformList(k, c, variables.long[k] && "
        "variables.counts[k] > 0, {'name': variables.names[k], "
        f"'resourceClaimTemplateName': {prefix} + string(variables.counts[k])}}) + "
        f"(variables.lacking > 0 ? [{{'name': {_cel_string(INIT_CLAIM)}, "
        f"'resourceClaimTemplateName': {prefix} + string(variables.lacking)}}] : [])",
    }
    return [{"name": name, "expression": text} for name, text in expressions.items()]


def _patches(resource: str) -> str:
    """CEL: the JSON patches: each container that uses claims loses the resource and names
    them; the pod gets the claims."""
    escaped = _cel_string(resource.replace("~", "~0").replace("/", "~1"))
    base = (
        '(k < variables.inits ? "/spec/initContainers/" + string(k) : '
        '"/spec/containers/" + string(k - variables.inits)) + "/resources"'
    )
    in_limits, in_requests = _present("limits", resource), _present("requests", resource)
    containers = (
        "variables.all.transformList(k, c, size(variables.uses[k]) > 0, "
        f'({in_limits} ? [JSONPatch{{op: "remove", path: {base} + "/limits/" + {escaped}}}] '
        ": []) + "
        f'({in_requests} ? [JSONPatch{{op: "remove", path: {base} + "/requests/" + {escaped}}}] '
        ": []) + "
        "(has(c.resources.claims) ? variables.uses[k].map(n, "
        f'JSONPatch{{op: "add", path: {base} + "/claims/-", value: {{\'name\': n}}}}) : '
        f'[JSONPatch{{op: "add", path: {base} + "/claims", '
        "value: variables.uses[k].map(n, {'name': n})}])"
        ").flatten()"
    )
    return (
        f"{containers} + "
        "(has(object.spec.resourceClaims) ? variables.claims.map(e, "
        'JSONPatch{op: "add", path: "/spec/resourceClaims/-", value: e}) : '
        '[JSONPatch{op: "add", path: "/spec/resourceClaims", value: variables.claims}])'
    )


def _asks_cel(field: str, resource: str) -> str:
    return f"(has(object.spec.{field}) && object.spec.{field}.exists(c, {_asks_one(resource)}))"


def admission_policy(resource: str = RESOURCE) -> list[Obj]:
    """The MutatingAdmissionPolicy that applies `convert` to every pod created, and its binding."""
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
            "variables": _variables(resource),
            "mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression": _patches(resource)}}
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME},
        "spec": {"policyName": POLICY_NAME},
    }
    return [policy, binding]
