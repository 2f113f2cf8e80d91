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

Who may set what (the tenant isolation rule, docs/NODEPLUGIN.md "Isolation"): `lifecycle` is
device initialisation (power limit, locked clocks, compute mode, time-slice, persistence), which
NVML applies to the whole physical GPU, so it is the cluster's to decide: a DeviceClass's config
(`source: FromClass`) or the AllocationPolicy, never a claim's own config (`refused_fields`
names such an entry, and `for_request` leaves a claim's lifecycle out). `sharing` and `share`
are how the claim's own pods share its own devices; the node plugin still refuses the parts of
them that would change a GPU the claim does not hold alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationError

from drasat.api.base import Spec
from drasat.api.inputerrors import describe_validation_error
from drasat.api.nas import LifecycleStep
from drasat.api.sharing import GpuShare, GpuSharing

#: drasat's own opaque configuration.
DRASAT_CONFIG_API_VERSION = "gpu.drasat.io/v1alpha1"
#: NVIDIA's current driver's opaque configuration (accepted unchanged).
NVIDIA_CONFIG_API_VERSION = "resource.nvidia.com/v1beta1"
#: Fields only the cluster (a DeviceClass config, the policy) may set: GPU-wide device settings.
CLUSTER_ONLY_FIELDS = ("lifecycle",)
#: The `source` of a DeviceClass's configuration in an allocation (the API's value).
FROM_CLASS = "FromClass"


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


def merge(configs: list[DeviceConfig], *, from_class: list[bool] | None = None) -> GpuConfig:
    """The configurations that apply to one device, in the API's order (the class's, then the
    claim's): each set field of a later one replaces the earlier one's. With `from_class` (one
    flag per configuration), a field of CLUSTER_ONLY_FIELDS is taken from the class's only."""
    merged = GpuConfig()
    for index, config in enumerate(configs):
        cluster = from_class is None or from_class[index]
        if config.sharing is not None:
            merged.sharing = config.sharing
        if isinstance(config, GpuConfig):
            if config.share is not None:
                merged.share = config.share
            if config.lifecycle is not None and cluster:
                merged.lifecycle = config.lifecycle
    return merged


@dataclass(frozen=True)
class Applied:
    """One opaque configuration of a driver from an allocation, and the requests it is for."""

    where: str  # its place in the claim's status, for errors
    requests: tuple[str, ...]  # empty: all requests
    config: DeviceConfig
    from_class: bool = False  # the DeviceClass's (the cluster's), not the claim's own

    def refused_fields(self) -> list[str]:
        """The fields of CLUSTER_ONLY_FIELDS a claim's own configuration sets (none for a
        class's): each is an error for the claim, naming this entry."""
        if self.from_class or not isinstance(self.config, GpuConfig):
            return []
        return [f for f in CLUSTER_ONLY_FIELDS if getattr(self.config, f)]

    def applies(self, request: str) -> bool:
        """A firstAvailable result names `<request>/<subrequest>`; a config may name either."""
        main = request.split("/", 1)[0]
        return not self.requests or request in self.requests or main in self.requests


def applied(
    items: Sequence[Mapping[str, Any]],
    driver: str,
    *,
    path: str = "status.allocation.devices.config",
) -> list[Applied]:
    """The opaque configurations of `status.allocation.devices.config` (or of a claim's
    `spec.devices.config`, at `path`: all the claim's own) for `driver`, the class's before the
    claim's (the API's order: later ones win); ValueError naming the entry."""
    found = []
    for index, item in enumerate(items):
        opaque = item.get("opaque") or {}
        if opaque.get("driver") != driver:
            continue  # another driver's
        source = item.get("source")
        where = f"{path}[{index}]" + (f" (source {source})" if source else "")
        try:
            config = parse(opaque.get("parameters"))
        except ValueError as error:
            raise ValueError(f"{where}: opaque.{error}") from None
        requests = tuple(str(r) for r in item.get("requests") or ())
        from_class = item.get("source") == FROM_CLASS
        entry = Applied(where, requests, config, from_class)
        found.append((not from_class, index, entry))
    return [entry for _, _, entry in sorted(found, key=lambda f: (f[0], f[1]))]


def refusals(configs: Sequence[Applied]) -> list[str]:
    """Why the claim's own configurations may not be applied, one line per field set where only
    the cluster may set it (empty when none is). This is a purely computational function."""
    return [
        f"{c.where}: opaque.parameters.{field}: device initialisation (power limit, clocks, "
        "compute mode, time-slice, persistence) is the cluster's to set, in a DeviceClass's "
        "config or the AllocationPolicy, not in a claim's own config: every such setting changes "
        "the whole GPU"
        for c in configs
        for field in c.refused_fields()
    ]


def for_request(configs: Sequence[Applied], request: str) -> GpuConfig:
    """What applies to the devices of one result's `request`, merged; a claim's own `lifecycle`
    is never part of it (see `refusals`)."""
    chosen = [c for c in configs if c.applies(request)]
    return merge([c.config for c in chosen], from_class=[c.from_class for c in chosen])
