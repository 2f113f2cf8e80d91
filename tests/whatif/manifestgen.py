"""Random manifests a user could `kubectl apply`, valid and subtly invalid, for the differential
test of the what-if against the real API server (test_whatif_apiserver_oracle.py).

A case is a small application: a ResourceClaimTemplate or a ResourceClaim (of drasat's or
NVIDIA's classes, or of a DeviceClass of the case), and a Pod or a workload using it, all
complete (what they reference is in the case or is a class the what-if and the cluster both
have). Then none, one or two mistakes, each of the kind users make:

- CEL: a generated selector (tests/oracle/celgen.py), maybe with a typo or a type mistake;
- references: a container naming a claim the pod does not declare, a pod claim naming both or
  neither of a claim and a template, a duplicate pod claim name, a constraint or config naming
  no request;
- versions and kinds: `resource.k8s.io/v2`, `v1beta3`, a misspelt kind;
- limits: 33 requests, 9 firstAvailable entries, 33 selectors, a 64-character request name, a
  count of 33 (accepted: only the allocator refuses it);
- field types: a count as a string or a fraction, a bool as a string, an unknown field (in a
  claim, a pod's spec, a container, its resources or security context), a list written as a
  mapping, an unknown allocation mode;
- counts: 0, -1 devices; an extended resource of 1.5, -1 or requests unequal to limits;
- quantities: a container's CPU or memory (or a misspelt resource) as a quantity the server
  parses (`1u`, `1.`, `1e3`) or not (`1.5.3`, `1ki`, `true`), negative, or over its limit; a
  claim's capacity request of such a quantity;
- status: a ResourceClaim written with `status.allocation` (the server drops it), maybe with a
  status field it does not know.

The pod spec is a Pod's, or the pod template of a Deployment, a DaemonSet or a CronJob.

The pods carry some fields of the full PodSpec the what-if does not read (env, probes, ports,
volumes, a security context, ...): the what-if accepts them as the server does.

Whether each is refused is not assumed: the API server says."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from tests.oracle import celgen

Obj = dict[str, Any]

CLASSES = ("gpu.drasat.io", "mig.drasat.io", "gpu.nvidia.com", "mig.nvidia.com")
CLASS_SELECTORS = (
    "device.driver == 'gpu.drasat.io'",
    "device.attributes['gpu.drasat.io'].type == 'gpu'",
)


@dataclass(frozen=True)
class Case:
    """The objects of one manifest file, in order, and the mistakes made in them."""

    objects: list[Obj]
    mistakes: tuple[str, ...]


def _request(name: str, cls: str, selectors: list[str], count: int | None) -> Obj:
    exactly: Obj = {"deviceClassName": cls}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if count is not None:
        exactly["count"] = count
    return {"name": name, "exactly": exactly}


@st.composite
def cases(draw: st.DrawFn, namespace: str = "ns") -> Case:
    """One application, maybe with mistakes (see the module's docstring)."""
    own_class = draw(st.booleans())
    cls = "whatif-gen.example.com" if own_class else draw(st.sampled_from(CLASSES))
    selectors = draw(st.lists(celgen.expressions(), max_size=2))
    devices: Obj = {
        "requests": [_request("gpu", cls, selectors, draw(st.sampled_from([None, 1, 2])))]
    }
    if draw(st.booleans()):
        devices["requests"].append(
            {"name": "alt", "firstAvailable": [
                {"name": "big", "deviceClassName": cls, "count": 2},
                {"name": "small", "deviceClassName": cls},
            ]}
        )  # fmt: skip
    if draw(st.booleans()):
        devices["constraints"] = [{"matchAttribute": "gpu.drasat.io/productName"}]
    from_template = draw(st.booleans())
    claim_spec = {"devices": devices}
    objects: list[Obj] = []
    if own_class:
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": cls},
                "spec": {"selectors": [{"cel": {"expression": CLASS_SELECTORS[0]}}]},
            }
        )
    meta = {"name": "gpus", "namespace": namespace}
    if from_template:
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": meta,
                "spec": {"spec": claim_spec},
            }
        )
        entry = {"name": "gpu", "resourceClaimTemplateName": "gpus"}
    else:
        objects.append(
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
             "spec": claim_spec}
        )  # fmt: skip
        entry = {"name": "gpu", "resourceClaimName": "gpus"}
    pod_spec: Obj = {
        "containers": [{"name": "app", "image": "registry.example.com/app:1",
                        "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [entry],
    }  # fmt: skip
    workload = draw(st.sampled_from(WORKLOADS))
    labels = {"app": "gen"}
    metadata = {"name": "app", "namespace": namespace}
    if workload == "Deployment":
        objects.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": metadata,
                "spec": {
                    "replicas": draw(st.sampled_from([1, 2])) if from_template else 1,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": pod_spec},
                },
            }
        )
    elif workload == "DaemonSet":
        objects.append(
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": metadata,
             "spec": {"selector": {"matchLabels": labels},
                      "template": {"metadata": {"labels": labels}, "spec": pod_spec}}}
        )  # fmt: skip
    elif workload == "CronJob":
        pod_spec["restartPolicy"] = "Never"
        objects.append(
            {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": metadata,
             "spec": {"schedule": "*/5 * * * *",
                      "jobTemplate": {"spec": {"template": {"spec": pod_spec}}}}}
        )  # fmt: skip
    else:
        objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec})
    _known_pod_fields(objects, draw)
    made = []
    for _ in range(draw(st.integers(0, 2))):
        mistake = draw(st.sampled_from(sorted(MISTAKES)))
        if MISTAKES[mistake](objects, draw):
            made.append(mistake)
    return Case(objects, tuple(made))


# -- the mistakes: each changes the objects in place; False when it does not apply ----------------


#: The kinds that carry the pod spec: a Pod, or a workload's pod template.
WORKLOADS = ("Pod", "Deployment", "DaemonSet", "CronJob")


def _claim(objects: list[Obj]) -> Obj:
    found = next(o for o in objects if o["kind"] not in ("DeviceClass", *WORKLOADS))
    return found


def _devices(objects: list[Obj]) -> Obj:
    claim = _claim(objects)
    spec = claim["spec"]["spec"] if "spec" in claim["spec"] else claim["spec"]
    devices: Obj = spec["devices"]
    return devices


def _exactly(objects: list[Obj]) -> Obj:
    """The first request's exact part (its first subrequest when it has firstAvailable)."""
    first = _devices(objects)["requests"][0]
    exactly: Obj = first["exactly"] if "exactly" in first else first["firstAvailable"][0]
    return exactly


def _pod_spec(objects: list[Obj]) -> Obj:
    workload = objects[-1]
    spec: Obj = workload["spec"]
    if workload["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec if workload["kind"] == "Pod" else spec["template"]["spec"]


def _selector(objects: list[Obj], draw: st.DrawFn) -> bool:
    _exactly(objects)["selectors"] = [{"cel": {"expression": draw(celgen.with_mistakes())}}]
    return True


def _class_selector(objects: list[Obj], draw: st.DrawFn) -> bool:
    if objects[0]["kind"] != "DeviceClass":
        return False
    objects[0]["spec"]["selectors"] = [{"cel": {"expression": draw(celgen.with_mistakes())}}]
    return True


def _undeclared_container_claim(objects: list[Obj], draw: st.DrawFn) -> bool:
    claims = _pod_spec(objects)["containers"][0]["resources"]["claims"]
    claims[0]["name"] = draw(st.sampled_from(["gpux", "GPU", "other"]))
    return True


def _duplicate_container_claim(objects: list[Obj], draw: st.DrawFn) -> bool:
    claims = _pod_spec(objects)["containers"][0]["resources"]["claims"]
    claims.append(dict(claims[0]))
    return True


def _both_references(objects: list[Obj], draw: st.DrawFn) -> bool:
    entry = _pod_spec(objects)["resourceClaims"][0]
    entry["resourceClaimName"] = entry["resourceClaimTemplateName"] = "gpus"
    return True


def _no_reference(objects: list[Obj], draw: st.DrawFn) -> bool:
    entry = _pod_spec(objects)["resourceClaims"][0]
    entry.pop("resourceClaimName", None)
    entry.pop("resourceClaimTemplateName", None)
    return True


def _duplicate_pod_claim(objects: list[Obj], draw: st.DrawFn) -> bool:
    entries = _pod_spec(objects)["resourceClaims"]
    entries.append(dict(entries[0]))
    return True


def _bad_pod_claim_name(objects: list[Obj], draw: st.DrawFn) -> bool:
    spec = _pod_spec(objects)
    name = draw(st.sampled_from(["GPU", "gpu_0", "-gpu", "g" * 64]))
    spec["resourceClaims"][0]["name"] = name
    spec["containers"][0]["resources"]["claims"][0]["name"] = name
    return True


def _constraint_without_request(objects: list[Obj], draw: st.DrawFn) -> bool:
    _devices(objects)["constraints"] = [
        {"requests": ["nosuch"], "matchAttribute": "gpu.drasat.io/productName"}
    ]
    return True


def _unqualified_attribute(objects: list[Obj], draw: st.DrawFn) -> bool:
    _devices(objects)["constraints"] = [{"matchAttribute": "productName"}]
    return True


def _config_without_request(objects: list[Obj], draw: st.DrawFn) -> bool:
    _devices(objects)["config"] = [
        {"requests": ["nosuch"], "opaque": {"driver": "gpu.drasat.io", "parameters": {
            "apiVersion": "gpu.drasat.io/v1alpha1", "kind": "GpuConfig"}}}
    ]  # fmt: skip
    return True


def _version(objects: list[Obj], draw: st.DrawFn) -> bool:
    _claim(objects)["apiVersion"] = draw(
        st.sampled_from(
            ["resource.k8s.io/v2", "resource.k8s.io/v1beta3", "resource.k8s.io/v1alpha9"]
        )
    )
    return True


def _kind(objects: list[Obj], draw: st.DrawFn) -> bool:
    claim = _claim(objects)
    claim["kind"] = draw(st.sampled_from([claim["kind"] + "s", claim["kind"].lower()]))
    return True


def _many_requests(objects: list[Obj], draw: st.DrawFn) -> bool:
    devices = _devices(objects)
    first = devices["requests"][0]
    devices["requests"] = [{**copy.deepcopy(first), "name": f"r{i}"} for i in range(33)]
    devices.pop("constraints", None)
    return True


def _many_alternatives(objects: list[Obj], draw: st.DrawFn) -> bool:
    devices = _devices(objects)
    cls = _exactly(objects)["deviceClassName"]
    devices["requests"][0] = {
        "name": "gpu",
        "firstAvailable": [{"name": f"s{i}", "deviceClassName": cls} for i in range(9)],
    }
    return True


def _many_selectors(objects: list[Obj], draw: st.DrawFn) -> bool:
    _exactly(objects)["selectors"] = [{"cel": {"expression": "true"}}] * 33
    return True


def _long_request_name(objects: list[Obj], draw: st.DrawFn) -> bool:
    _devices(objects)["requests"][0]["name"] = draw(st.sampled_from(["r" * 64, "Gpu", "gpu.0"]))
    _devices(objects).pop("constraints", None)
    return True


def _count(objects: list[Obj], draw: st.DrawFn) -> bool:
    _exactly(objects)["count"] = draw(st.sampled_from([0, -1, 33, 100, "2", 2.5, True]))
    return True


def _all_with_count(objects: list[Obj], draw: st.DrawFn) -> bool:
    exactly = _exactly(objects)
    exactly["allocationMode"] = draw(st.sampled_from(["All", "Some", "all"]))
    exactly["count"] = 1
    return True


def _admin_access(objects: list[Obj], draw: st.DrawFn) -> bool:
    _exactly(objects)["adminAccess"] = draw(st.sampled_from(["yes", 1]))
    return True


def _unknown_field(objects: list[Obj], draw: st.DrawFn) -> bool:
    exactly = _exactly(objects)
    exactly[draw(st.sampled_from(["cout", "deviceClass", "selector"]))] = 1
    return True


def _unknown_pod_field(objects: list[Obj], draw: st.DrawFn) -> bool:
    """A field the Pod's structs lack, where the what-if's models read only some fields: the
    pod's spec, a container, its resources, the template's metadata."""
    spec = _pod_spec(objects)
    where = draw(st.sampled_from(["spec", "container", "resources", "security"]))
    name = draw(st.sampled_from(["foo", "imagePullPolic", "Containers", "nodeselector"]))
    if where == "spec":
        spec[name] = 1
    elif where == "container":
        spec["containers"][0][name] = "x"
    elif where == "resources":
        spec["containers"][0].setdefault("resources", {})[name] = {}
    else:
        spec["securityContext"] = {"runAsNonRoot": True, name: 1}
    return True


def _known_pod_fields(objects: list[Obj], draw: st.DrawFn) -> None:
    """Fields of the full PodSpec the what-if's models do not read: accepted by both."""
    spec = _pod_spec(objects)
    container = spec["containers"][0]
    chosen = draw(st.sets(st.sampled_from(sorted(_KNOWN_POD_FIELDS)), max_size=3))
    for name in sorted(chosen):
        target, field, value = _KNOWN_POD_FIELDS[name]
        (container if target == "container" else spec)[field] = value


_KNOWN_POD_FIELDS: dict[str, tuple[str, str, Any]] = {
    "env": ("container", "env", [{"name": "A", "value": "1"}]),
    "probe": ("container", "livenessProbe", {"exec": {"command": ["true"]}, "periodSeconds": 5}),
    "ports": ("container", "ports", [{"containerPort": 8080, "protocol": "TCP"}]),
    "security": ("spec", "securityContext", {"runAsNonRoot": True, "fsGroup": 2000}),
    "volumes": ("spec", "volumes", [{"name": "v", "emptyDir": {"sizeLimit": "1Gi"}}]),
    "restart": ("spec", "restartPolicy", "Always"),
    "grace": ("spec", "terminationGracePeriodSeconds", 5),
}


def _selectors_not_a_list(objects: list[Obj], draw: st.DrawFn) -> bool:
    _exactly(objects)["selectors"] = {"cel": {"expression": "true"}}
    return True


def _class_name(objects: list[Obj], draw: st.DrawFn) -> bool:
    if objects[0]["kind"] != "DeviceClass":
        return False
    bad = draw(st.sampled_from(["Whatif_Gen", "whatif-gen..example.com"]))
    objects[0]["metadata"]["name"] = bad
    for request in _devices(objects)["requests"]:
        for option in [request.get("exactly"), *list(request.get("firstAvailable") or [])]:
            if option:
                option["deviceClassName"] = bad
    return True


def _extended_resource(objects: list[Obj], draw: st.DrawFn) -> bool:
    container = _pod_spec(objects)["containers"][0]
    resources = container["resources"]
    value = draw(st.sampled_from(["1.5", "-1", "2", "33", "1", "500m"]))
    resources["limits"] = {"nvidia.com/gpu": value}
    if draw(st.booleans()):
        resources["requests"] = {"nvidia.com/gpu": draw(st.sampled_from([value, "3"]))}
    return True


def _replicas(objects: list[Obj], draw: st.DrawFn) -> bool:
    if objects[-1]["kind"] != "Deployment":
        return False
    objects[-1]["spec"]["replicas"] = draw(st.sampled_from(["2", -1, 1.5]))
    return True


def _object_name(objects: list[Obj], draw: st.DrawFn) -> bool:
    name = draw(st.sampled_from(["GPUs", "gpus_1", "-gpus", "g" * 254]))
    _claim(objects)["metadata"]["name"] = name
    entry = _pod_spec(objects)["resourceClaims"][0]
    for key in ("resourceClaimName", "resourceClaimTemplateName"):
        if key in entry:
            entry[key] = name
    return True


#: Quantities as users write them: kept by the server (`1u`, `1.`, `1e3`, `1.5` as a number),
#: or refused by its decoder (`1.5.3`, `1ki`, `1 Gi`, `1e3Gi`, `true`) or its validation (`-1`).
QUANTITIES = ("2Gi", "500m", "1u", "1.", "1e3", 1.5, 2, "1.5.3", "1ki", "1 Gi", "1e3Gi", True,
              "-1", "")  # fmt: skip


def _quantity(objects: list[Obj], draw: st.DrawFn) -> bool:
    """A container's CPU or memory request or limit, well formed or not, maybe over its
    limit or of a name that is no resource."""
    resources = _pod_spec(objects)["containers"][0]["resources"]
    name = draw(st.sampled_from(["cpu", "memory", "memory", "memroy", "example.com/foo"]))
    part = draw(st.sampled_from(["limits", "requests"]))
    resources.setdefault(part, {})[name] = draw(st.sampled_from(QUANTITIES))
    if draw(st.booleans()):
        other = "requests" if part == "limits" else "limits"
        resources.setdefault(other, {})[name] = draw(st.sampled_from(["1", "1Gi", "4", "100m"]))
    return True


def _capacity_request(objects: list[Obj], draw: st.DrawFn) -> bool:
    """A request for some of a device's capacity (consumable capacity), of any quantity."""
    name = draw(st.sampled_from(["memory", "gpu.drasat.io/memory", "Memory!"]))
    _exactly(objects)["capacity"] = {"requests": {name: draw(st.sampled_from(QUANTITIES))}}
    return True


def _status_allocation(objects: list[Obj], draw: st.DrawFn) -> bool:
    """A claim written with an allocation (which the server drops on create), or with a
    status field it does not know (which strict decoding refuses)."""
    claim = _claim(objects)
    if claim["kind"] != "ResourceClaim":
        return False
    result = {"request": "gpu", "driver": "gpu.drasat.io", "pool": "nowhere", "device": "gpu-0"}
    status: Obj = {"allocation": {"devices": {"results": [result]}}}
    if draw(st.booleans()):
        status[draw(st.sampled_from(["allocated", "reservedFor", "devices"]))] = [{"x": 1}]
    claim["status"] = status
    return True


MISTAKES = {
    "quantity": _quantity,
    "capacity-request": _capacity_request,
    "status-allocation": _status_allocation,
    "object-name": _object_name,
    "selector": _selector,
    "class-selector": _class_selector,
    "undeclared-container-claim": _undeclared_container_claim,
    "duplicate-container-claim": _duplicate_container_claim,
    "both-references": _both_references,
    "no-reference": _no_reference,
    "duplicate-pod-claim": _duplicate_pod_claim,
    "bad-pod-claim-name": _bad_pod_claim_name,
    "constraint-without-request": _constraint_without_request,
    "unqualified-attribute": _unqualified_attribute,
    "config-without-request": _config_without_request,
    "version": _version,
    "kind": _kind,
    "many-requests": _many_requests,
    "many-alternatives": _many_alternatives,
    "many-selectors": _many_selectors,
    "request-name": _long_request_name,
    "count": _count,
    "allocation-mode": _all_with_count,
    "admin-access": _admin_access,
    "unknown-field": _unknown_field,
    "unknown-pod-field": _unknown_pod_field,
    "selectors-not-a-list": _selectors_not_a_list,
    "class-name": _class_name,
    "extended-resource": _extended_resource,
    "replicas": _replicas,
}
