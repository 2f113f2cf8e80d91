"""Opaque device configuration for `resource.k8s.io/v1` claims and DeviceClasses.

A claim (`spec.devices.config[]`) or its DeviceClass (`spec.config[]`) may carry
`opaque: {driver: gpu.drasat.io, parameters: {...}}`; the scheduler copies them into the
allocation (`status.allocation.devices.config[]`, the class's first, `source: FromClass` /
`FromClaim`, each for all requests or for the ones in `requests`). The node plugin reads the
parameters as one of:

- drasat's own kind, `apiVersion: gpu.drasat.io/v1alpha1, kind: GpuConfig`: `sharing`
  (GpuSharing: strategy TimeSlicing|MPS with timeSlicingConfig / mpsConfig), `share` (limits
  of a share: compute %, memory) and `lifecycle` (init steps from the policy's fixed vocabulary);
- NVIDIA's `apiVersion: resource.nvidia.com/v1beta1`, `kind: GpuConfig` or `MigDeviceConfig`,
  accepted unchanged: `sharing {strategy, timeSlicingConfig.interval, mpsConfig}`, which maps
  onto the same GpuSharing.

Unknown fields, kinds and versions are errors with the field's path. This is a pure module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationError

from drasat.api.base import Spec
from drasat.api.claims import GpuShare
from drasat.api.errors import describe_validation_error
from drasat.api.nas import LifecycleStep
from drasat.api.sharing import GpuSharing

#: drasat's own opaque configuration.
DRASAT_CONFIG_API_VERSION = "gpu.drasat.io/v1alpha1"
#: NVIDIA's current driver's opaque configuration (accepted unchanged).
NVIDIA_CONFIG_API_VERSION = "resource.nvidia.com/v1beta1"


class GpuConfig(Spec):
    """drasat's opaque configuration of the devices of a claim (or of a class)."""

    apiVersion: Literal["gpu.drasat.io/v1alpha1"] = "gpu.drasat.io/v1alpha1"
    kind: Literal["GpuConfig"] = "GpuConfig"
    sharing: GpuSharing | None = Field(None, description="How the claim's users share its GPUs.")
    share: GpuShare | None = Field(
        None, description="Limits of a share (compute %, memory), enforced by MPS."
    )
    lifecycle: list[LifecycleStep] | None = Field(
        None, max_length=16, description="Init steps from the policy's fixed vocabulary."
    )


class NvidiaGpuConfig(Spec):
    """NVIDIA's `resource.nvidia.com/v1beta1` GpuConfig (or MigDeviceConfig), as NVIDIA's users
    write it."""

    apiVersion: Literal["resource.nvidia.com/v1beta1"] = "resource.nvidia.com/v1beta1"
    kind: Literal["GpuConfig", "MigDeviceConfig"] = "GpuConfig"
    sharing: GpuSharing | None = None


DeviceConfig = GpuConfig | NvidiaGpuConfig

_KINDS: dict[tuple[str, str], type[GpuConfig] | type[NvidiaGpuConfig]] = {
    (DRASAT_CONFIG_API_VERSION, "GpuConfig"): GpuConfig,
    (NVIDIA_CONFIG_API_VERSION, "GpuConfig"): NvidiaGpuConfig,
    (NVIDIA_CONFIG_API_VERSION, "MigDeviceConfig"): NvidiaGpuConfig,
}


def parse(parameters: Any) -> DeviceConfig:
    """One opaque configuration's `parameters`; ValueError naming the field otherwise."""
    if not isinstance(parameters, Mapping):
        raise ValueError(f"parameters: must be an object, not {type(parameters).__name__}")
    key = (parameters.get("apiVersion"), parameters.get("kind"))
    model = _KINDS.get((str(key[0]), str(key[1])))
    if model is None:
        known = ", ".join(f"{v} {k}" for v, k in _KINDS)
        raise ValueError(
            f"parameters: apiVersion {key[0]!r} kind {key[1]!r} is not a configuration of "
            f"this driver (known: {known})"
        )
    try:
        return model.model_validate(parameters)
    except ValidationError as error:
        raise ValueError(describe_validation_error(error, prefix=("parameters",))) from None


def merge(configs: list[DeviceConfig]) -> GpuConfig:
    """The configurations that apply to one device, in the API's order (the class's, then the
    claim's): each set field of a later one replaces the earlier one's."""
    merged = GpuConfig()
    for config in configs:
        if config.sharing is not None:
            merged.sharing = config.sharing
        if isinstance(config, GpuConfig):
            if config.share is not None:
                merged.share = config.share
            if config.lifecycle is not None:
                merged.lifecycle = config.lifecycle
    return merged


@dataclass(frozen=True)
class Applied:
    """One opaque configuration of a driver from an allocation, and the requests it is for."""

    where: str  # its place in the claim's status, for errors
    requests: tuple[str, ...]  # empty: all requests
    config: DeviceConfig

    def applies(self, request: str) -> bool:
        """A firstAvailable result names `<request>/<subrequest>`; a config may name either."""
        main = request.split("/", 1)[0]
        return not self.requests or request in self.requests or main in self.requests


def applied(items: Sequence[Mapping[str, Any]], driver: str) -> list[Applied]:
    """The opaque configurations of `status.allocation.devices.config` for `driver`, the class's
    before the claim's (the API's order: later ones win); ValueError naming the entry."""
    found = []
    for index, item in enumerate(items):
        opaque = item.get("opaque") or {}
        if opaque.get("driver") != driver:
            continue  # another driver's
        where = f"status.allocation.devices.config[{index}] (source {item.get('source')})"
        try:
            config = parse(opaque.get("parameters"))
        except ValueError as error:
            raise ValueError(f"{where}: opaque.{error}") from None
        requests = tuple(str(r) for r in item.get("requests") or ())
        found.append((item.get("source") != "FromClass", index, Applied(where, requests, config)))
    return [entry for _, _, entry in sorted(found, key=lambda f: (f[0], f[1]))]


def for_request(configs: Sequence[Applied], request: str) -> GpuConfig:
    """What applies to the devices of one result's `request`, merged."""
    return merge([c.config for c in configs if c.applies(request)])
