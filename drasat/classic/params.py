"""Claim parameters: a ResourceClaim + its ResourceClass -> a solver ClaimRequest, or why not.

A purely computational module: parameter objects come from a `Lookup` the caller provides (an
informer cache or the API). Every error names the object and the field path, for the Event.

The classic wing's edge to the solver (`gpu_demand`, `mig_demand`): GpuClaimParameters and
MigDeviceClaimParameters become the solver's own GpuDemand and MigDemand. NVIDIA's rule for
MIG-mode GPUs is stated here: a GPU claim takes one whole only when its selector asks for
`migEnabled: true` somewhere (a GPU claim on a MIG GPU, MIG claims carved from it by
gpuClaimName).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from drasat.api import groups
from drasat.api.claims import (
    DeviceClassParametersSpec,
    GpuClaimParametersSpec,
    MigDeviceClaimParametersSpec,
)
from drasat.api.inputerrors import describe_validation_error, one_line
from drasat.api.quantity import to_bytes
from drasat.solver.claimspec import GpuDemand, MigDemand, Requirement, Topology, selects_mig_mode
from drasat.solver.problem import ClaimRequest

Obj = dict[str, Any]
SpecT = TypeVar("SpecT", bound=BaseModel)

#: (apiGroup, kind, namespace or None, name) -> the object, or None when it does not exist.
Lookup = Callable[[str, str, str | None, str], Obj | None]

IMMEDIATE = "Immediate"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


class ParameterError(Exception):
    """The claim cannot be allocated as written. `reason` is the Event reason (CamelCase)."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        self.message = one_line(message)  # an Event message: one line, however odd the input
        super().__init__(self.message)


@dataclass(frozen=True)
class ClassInfo:
    name: str
    shareable: bool


def is_ours(resource_class: Obj | None) -> bool:
    """Is this ResourceClass served by our driver?"""
    return resource_class is not None and resource_class.get("driverName") == groups.DRIVER_NAME


def ref(obj: Obj) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name', '?')}" if namespace else str(metadata.get("name"))


def resolve_class(resource_class: Obj, lookup: Lookup) -> ClassInfo:
    """The class's DeviceClassParameters (`sharable`, default true)."""
    name = str((resource_class.get("metadata") or {}).get("name", ""))
    parameters_ref = resource_class.get("parametersRef")
    if parameters_ref is None:
        return ClassInfo(name, shareable=True)
    where = f"ResourceClass {name}: parametersRef"
    obj = _referenced(parameters_ref, where, lookup, namespace=None)
    kind = str(parameters_ref.get("kind"))
    if kind != groups.DEVICE_CLASS_PARAMETERS:
        raise ParameterError(
            "BadClassParameters", f"{where}.kind: expected DeviceClassParameters, got {kind!r}"
        )
    spec = _validate(DeviceClassParametersSpec, obj, f"DeviceClassParameters {ref(obj)}")
    return ClassInfo(name, shareable=spec.sharable)


def resolve_claim(claim: Obj, class_info: ClassInfo, lookup: Lookup) -> ClaimRequest:
    """The claim's parameters (no parametersRef: one GPU) as a ClaimRequest."""
    metadata = claim.get("metadata") or {}
    namespace = str(metadata.get("namespace", ""))

    def request(
        gpu: GpuClaimParametersSpec | None = None, mig: MigDeviceClaimParametersSpec | None = None
    ) -> ClaimRequest:
        return ClaimRequest(
            uid=str(metadata.get("uid", "")),
            namespace=namespace,
            name=str(metadata.get("name", "")),
            gpu=gpu_demand(gpu) if gpu is not None else None,
            mig=mig_demand(mig) if mig is not None else None,
            shareable=class_info.shareable,
        )

    spec = claim.get("spec") or {}
    parameters_ref = spec.get("parametersRef")
    if parameters_ref is None:
        return request(gpu=GpuClaimParametersSpec())
    where = f"ResourceClaim {ref(claim)}: spec.parametersRef"
    obj = _referenced(parameters_ref, where, lookup, namespace=namespace)
    kind = str(parameters_ref.get("kind"))
    label = f"{kind} {ref(obj)}"
    if kind == groups.GPU_CLAIM_PARAMETERS:
        return request(gpu=_validate(GpuClaimParametersSpec, obj, label))
    if kind == groups.MIG_DEVICE_CLAIM_PARAMETERS:
        return request(mig=_validate(MigDeviceClaimParametersSpec, obj, label))
    raise ParameterError(
        "BadParameters",
        f"{where}.kind: expected GpuClaimParameters or MigDeviceClaimParameters, got {kind!r}",
    )


def _referenced(parameters_ref: Any, where: str, lookup: Lookup, *, namespace: str | None) -> Obj:
    if not isinstance(parameters_ref, dict):
        raise ParameterError("BadParameters", f"{where}: must be an object")
    group = str(parameters_ref.get("apiGroup") or "")
    kind = str(parameters_ref.get("kind") or "")
    name = str(parameters_ref.get("name") or "")
    if group not in groups.PARAMS_GROUPS:
        accepted = " or ".join(groups.PARAMS_GROUPS)
        raise ParameterError("BadParameters", f"{where}.apiGroup: {group!r} is not {accepted}")
    if kind not in groups.PARAMS_KINDS:
        raise ParameterError("BadParameters", f"{where}.kind: unknown kind {kind!r}")
    if not name:
        raise ParameterError("BadParameters", f"{where}.name: missing")
    obj = lookup(group, kind, namespace, name)
    if obj is None:
        place = f" in namespace {namespace}" if namespace else ""
        raise ParameterError(
            "ParametersNotFound", f"{where}: {kind} {name!r} ({group}) not found{place}"
        )
    return obj


def _validate(model: type[SpecT], obj: Obj, label: str) -> SpecT:
    try:
        return model.model_validate(obj.get("spec") or {})
    except ValidationError as error:
        message = describe_validation_error(error, prefix=("spec",))
        raise ParameterError("BadParameters", f"{label}: {message}") from None


def allocation_mode(claim: Obj) -> str:
    return str((claim.get("spec") or {}).get("allocationMode") or WAIT_FOR_FIRST_CONSUMER)


def gpu_demand(spec: GpuClaimParametersSpec) -> GpuDemand:
    """A GpuClaimParameters spec in the solver's terms."""
    topology = None
    if spec.topology is not None:
        link, numa = spec.topology.sameNVLinkDomain, spec.topology.sameNUMANode
        topology = Topology(
            same_nvlink_domain=Requirement(link.value) if link is not None else None,
            same_numa_node=Requirement(numa.value) if numa is not None else None,
        )
    return GpuDemand(
        count=spec.count,
        selector=spec.selector,
        sharing=spec.sharing,
        optional=spec.optional,
        share=spec.share,
        topology=topology,
        mig_mode_gpus_allowed=selects_mig_mode(spec.selector),
    )


def mig_demand(spec: MigDeviceClaimParametersSpec) -> MigDemand:
    """A MigDeviceClaimParameters spec in the solver's terms."""
    return MigDemand(
        profile=spec.profile,
        memory_bytes=to_bytes(spec.memory) if spec.memory is not None else 0,
        compute_slices=spec.computeSlices or 0,
        sharing=spec.sharing,
        gpu_claim_name=spec.gpuClaimName,
    )
