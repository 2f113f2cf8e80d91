"""Semantic checks of built-in kinds that no JSON schema expresses: immutable fields and the
classic DRA limits the real API server enforces (resource.k8s.io/v1alpha2, Kubernetes 1.30).

Purely computational: each check returns the (field path, message) causes it found.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from drasat.testbed.sim import resources, validation

Cause = tuple[str, str]
Obj = dict[str, Any]

#: Limits from k8s.io/api/resource/v1alpha2.
RESERVED_FOR_MAX = 32
NODE_LIST_MAX = 128
RESOURCE_HANDLES_MAX = 32
RESOURCE_HANDLE_DATA_MAX = 16 * 1024
ALLOCATION_MODES = ("Immediate", "WaitForFirstConsumer")

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _subdomain(field: str, value: Any) -> list[Cause]:
    if not value:
        return [(field, "Required value")]
    if not isinstance(value, str) or len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        return [(field, f"Invalid value: {json.dumps(value)}: {validation.SUBDOMAIN_RULE}")]
    return []


def _parameters_ref(field: str, ref: Any) -> list[Cause]:
    if ref is None:
        return []
    return [
        (f"{field}.{key}", "Required value") for key in ("kind", "name") if not (ref or {}).get(key)
    ]


def _claim_spec(field: str, spec: Obj) -> list[Cause]:
    causes = _subdomain(f"{field}.resourceClassName", spec.get("resourceClassName"))
    causes += _parameters_ref(f"{field}.parametersRef", spec.get("parametersRef"))
    mode = spec.get("allocationMode")
    if mode is not None and mode not in ALLOCATION_MODES:
        causes.append(
            (
                f"{field}.allocationMode",
                f"Unsupported value: {json.dumps(mode)}: supported "
                f"values: {', '.join(json.dumps(m) for m in ALLOCATION_MODES)}",
            )
        )
    return causes


#: Pod spec fields an update may change (everything else is immutable).
_POD_MUTABLE = (
    "activeDeadlineSeconds",
    "tolerations",
    "schedulingGates",
    "terminationGracePeriodSeconds",
)


def _pod_spec_core(spec: Obj) -> Obj:
    core = {key: value for key, value in spec.items() if key not in _POD_MUTABLE}
    for key in ("containers", "initContainers"):
        if key in core:
            core[key] = [{k: v for k, v in c.items() if k != "image"} for c in core[key]]
    return core


def pod(new: Obj, old: Obj | None) -> list[Cause]:
    spec = new.get("spec") or {}
    causes: list[Cause] = [
        (f"spec.{key}[{index}].image", "Required value")
        for key in ("containers", "initContainers")
        for index, container in enumerate(spec.get(key) or [])
        if isinstance(container, dict) and not container.get("image")
    ]
    if old is None or _pod_spec_core(spec) == _pod_spec_core(old.get("spec", {})):
        return causes
    return [
        *causes,
        (
            "spec",
            "Forbidden: pod updates may not change fields other than `spec.containers"
            "[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions), "
            "`spec.terminationGracePeriodSeconds` or `spec.schedulingGates` (use the binding "
            "subresource to set spec.nodeName)",
        ),
    ]


def resource_claim(new: Obj, old: Obj | None) -> list[Cause]:
    causes = _claim_spec("spec", new.get("spec") or {})
    if old is not None and new.get("spec") != old.get("spec"):
        causes.append(("spec", "field is immutable"))
    status = new.get("status") or {}
    allocation = status.get("allocation")
    reserved = status.get("reservedFor") or []
    if reserved and not allocation:
        causes.append(
            ("status.reservedFor", "Forbidden: may not be specified when `allocated` is not set")
        )
    if len(reserved) > RESERVED_FOR_MAX:
        causes.append(
            (
                "status.reservedFor",
                f"Too long: may not be longer than {RESERVED_FOR_MAX}",
            )
        )
    uids = [ref.get("uid") for ref in reserved]
    for index, uid in enumerate(uids):
        if uid in uids[:index]:
            causes.append(
                (f"status.reservedFor[{index}].uid", f"Duplicate value: {json.dumps(uid)}")
            )
    if allocation and not allocation.get("shareable") and len(reserved) > 1:
        causes.append(("status.reservedFor", "Forbidden: may not be reserved more than once"))
    if allocation and not status.get("driverName"):
        causes.append(
            ("status.driverName", "Required value: must be specified when `allocation` is set")
        )
    handles = (allocation or {}).get("resourceHandles") or []
    if len(handles) > RESOURCE_HANDLES_MAX:
        causes.append(
            (
                "status.allocation.resourceHandles",
                f"Too long: may not be longer than {RESOURCE_HANDLES_MAX}",
            )
        )
    for index, handle in enumerate(handles):
        if len(handle.get("data") or "") > RESOURCE_HANDLE_DATA_MAX:
            causes.append(
                (
                    f"status.allocation.resourceHandles[{index}].data",
                    f"Too long: must have at most {RESOURCE_HANDLE_DATA_MAX} bytes",
                )
            )
    if status.get("deallocationRequested") and not allocation:
        causes.append(
            ("status", "Forbidden: `allocation` must be set when `deallocationRequested` is set")
        )
    old_allocation = ((old or {}).get("status") or {}).get("allocation")
    if old_allocation and allocation and allocation != old_allocation:
        causes.append(("status.allocation", "field is immutable while set"))
    if old_allocation and not allocation and ((old or {}).get("status") or {}).get("reservedFor"):
        causes.append(
            ("status.allocation", "Forbidden: may not be cleared while `reservedFor` is set")
        )
    return causes


def resource_claim_v1(new: Obj, old: Obj | None) -> list[Cause]:
    """resource.k8s.io/v1 claim invariants as 1.37 checks them (its words, per tests/contract)."""
    causes: list[Cause] = []
    if old is not None and new.get("spec") != old.get("spec"):
        causes.append(("spec", "field is immutable"))
    status = new.get("status") or {}
    allocation = status.get("allocation")
    reserved = status.get("reservedFor") or []
    if reserved and not allocation:
        causes.append(
            ("status.reservedFor", "Forbidden: may not be specified when `allocated` is not set")
        )
    old_status = (old or {}).get("status") or {}
    if reserved and allocation and new["metadata"].get("deletionTimestamp"):
        before = {json.dumps(r, sort_keys=True) for r in old_status.get("reservedFor") or []}
        if any(json.dumps(r, sort_keys=True) not in before for r in reserved):
            causes.append(
                (
                    "status.reservedFor",
                    "Forbidden: new entries may not be added while `deallocationRequested` or "
                    "`deletionTimestamp` are set",
                )
            )
    old_allocation = old_status.get("allocation")
    if old_allocation and allocation and allocation != old_allocation:
        # kube-scheduler 1.37 (DRADeviceBindingConditions) adds allocationTimestamp to an
        # allocation without one when it reserves the claim, and meets exactly this refusal.
        causes.append(
            ("status.allocation", "Invalid value: null: field cannot be modified once set")
        )
    return causes


def resource_class(new: Obj, old: Obj | None) -> list[Cause]:
    causes = _subdomain("driverName", new.get("driverName"))
    return causes + _parameters_ref("parametersRef", new.get("parametersRef"))


def resource_claim_template(new: Obj, old: Obj | None) -> list[Cause]:
    return _claim_spec("spec.spec", (new.get("spec") or {}).get("spec") or {})


def event(new: Obj, old: Obj | None) -> list[Cause]:
    """A core Event about a namespaced object lives in that object's namespace."""
    involved = new.get("involvedObject") or {}
    namespace = (new.get("metadata") or {}).get("namespace")
    if involved.get("namespace") and involved["namespace"] != namespace:
        return [
            (
                "involvedObject.namespace",
                f"Invalid value: {json.dumps(involved['namespace'])}: does not match "
                "event.namespace",
            )
        ]
    return []


def lease(new: Obj, old: Obj | None) -> list[Cause]:
    duration = (new.get("spec") or {}).get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        return [("spec.leaseDurationSeconds", f"{duration}: must be greater than 0")]
    return []


def pod_scheduling_context(new: Obj, old: Obj | None) -> list[Cause]:
    causes: list[Cause] = []
    potential = (new.get("spec") or {}).get("potentialNodes") or []
    if len(potential) > NODE_LIST_MAX:
        causes.append(
            (
                "spec.potentialNodes",
                f"Too long: may not be longer than {NODE_LIST_MAX}",
            )
        )
    for index, claim in enumerate((new.get("status") or {}).get("resourceClaims") or []):
        unsuitable = claim.get("unsuitableNodes") or []
        if len(unsuitable) > NODE_LIST_MAX:
            causes.append(
                (
                    f"status.resourceClaims[{index}].unsuitableNodes",
                    f"Too long: may not be longer than {NODE_LIST_MAX}",
                )
            )
    return causes


def classic_resource_slice(new: Obj, _old: Obj | None) -> list[Cause]:
    # namedResources is the only structured model of v1alpha2 (1.30).
    if new.get("namedResources") is None:
        return [("<nil>", "Required value: exactly one structured model field must be set")]
    return []


#: A device taint's effects (PreferNoSchedule, valid on nodes, is not one), as 1.37 lists them.
DEVICE_TAINT_EFFECTS = ("NoExecute", "NoSchedule", "None")


def device_taint_rule(new: Obj, _old: Obj | None) -> list[Cause]:
    effect = ((new.get("spec") or {}).get("taint") or {}).get("effect")
    if effect is None or effect in DEVICE_TAINT_EFFECTS:
        return []  # a missing effect is the schema's `required` cause
    supported = ", ".join(json.dumps(e) for e in DEVICE_TAINT_EFFECTS)
    return [
        (
            "spec.taint.effect",
            f"Unsupported value: {json.dumps(effect)}: supported values: {supported}",
        )
    ]


_RULES: dict[tuple[str, str], Callable[[Obj, Obj | None], list[Cause]]] = {
    ("v1", "Pod"): pod,
    ("resource.k8s.io/v1alpha2", "ResourceClaim"): resource_claim,
    ("resource.k8s.io/v1alpha2", "PodSchedulingContext"): pod_scheduling_context,
    ("resource.k8s.io/v1alpha2", "ResourceClass"): resource_class,
    ("resource.k8s.io/v1alpha2", "ResourceClaimTemplate"): resource_claim_template,
    ("resource.k8s.io/v1alpha2", "ResourceSlice"): classic_resource_slice,
    ("coordination.k8s.io/v1", "Lease"): lease,
    ("v1", "Event"): event,
    ("resource.k8s.io/v1", "DeviceTaintRule"): device_taint_rule,
    ("resource.k8s.io/v1", "ResourceClaim"): resource_claim_v1,
}


def check(rt: resources.ResourceType, new: Obj, old: Obj | None) -> list[Cause]:
    """The semantic causes against writing `new` over `old` (None on create)."""
    rule = _RULES.get((rt.api_version, rt.kind))
    return rule(new, old) if rule is not None else []
