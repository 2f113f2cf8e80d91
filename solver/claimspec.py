"""What a claim asks the solver for, in the solver's own terms: GPUs (whole or a share), one
MIG device, or other drivers' devices it knows by name alone.

Each wing converts its own input at its edge: the classic wing its GpuClaimParameters and
MigDeviceClaimParameters (`drasat.classic.params`), the v1 path each option of a request
(`drasat.v1.variants`). The solver reads no claim parameters object of either. Selectors,
sharing and shares keep the API's types (`GpuSelector`, `GpuSharing`, `GpuShare`), which the
policy and the NAS use too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from drasat.api.selectors import GpuSelector
from drasat.api.sharing import GpuShare, GpuSharing


class Requirement(StrEnum):
    Preferred = "Preferred"
    Required = "Required"


@dataclass(frozen=True)
class Topology:
    """Where the GPUs of one claim (count > 1) sit relative to each other; None: no wish."""

    #: Every GPU linked by NVLink with every other.
    same_nvlink_domain: Requirement | None = None
    #: Every GPU on one NUMA node.
    same_numa_node: Requirement | None = None


@dataclass(frozen=True)
class GpuDemand:
    """`count` whole GPUs, or (`share` set) part of one GPU beside other share claims."""

    count: int = 1
    #: Which GPUs qualify; None: any (that `mig_mode_gpus_allowed` admits).
    selector: GpuSelector | None = None
    #: How the claim's users share its GPUs; None: NVIDIA's default (time-slicing).
    sharing: GpuSharing | None = None
    #: Allocate GPUs if possible, else none (the pod runs without).
    optional: bool = False
    #: A partial GPU (compute and/or memory); never on a GPU in MIG mode.
    share: GpuShare | None = None
    topology: Topology | None = None
    #: Whether a GPU in MIG mode may be given whole to this claim (its MIG devices then go to
    #: the claim's pod, paired by `MigDemand.gpu_claim_name`). False: only GPUs without MIG.
    #: Whole GPUs only: a share never sits on a GPU in MIG mode. Each wing decides by one rule,
    #: the claim asks for MIG mode: a classic claim by `migEnabled: true` in its selector
    #: (`selects_mig_mode`), a v1 request when its CEL selectors admit a MIG-mode GPU and not
    #: the same GPU out of MIG mode (`drasat.v1.variants.Devices.asks_mig_mode`).
    mig_mode_gpus_allowed: bool = False

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a GPU claim takes at least one GPU, not {self.count}")
        if self.share is not None and self.count != 1:
            raise ValueError("a share claim takes part of one GPU: count must be 1")

    def key(self, *, leave_out: tuple[str, ...] = ()) -> str:
        """The fields as text (equal text: equal fields), for memo keys and for ranking the
        fragmentation term's classes of equal weight (`workload`); `leave_out`: fields a key
        holds elsewhere. `mig_mode_gpus_allowed` is spelled only where it differs from what
        the selector says (`selects_mig_mode`), so a classic claim or a policy shape keeps the
        text (and the rank) it had when the solver read the CRD model; and then first, as
        "wholeMigModeGpus", which ranks where the selector that v1 once added to say it did
        (after a claim without it)."""
        fields: dict[str, Any] = {}
        if self.mig_mode_gpus_allowed != selects_mig_mode(self.selector):
            fields["wholeMigModeGpus"] = self.mig_mode_gpus_allowed
        fields["count"] = self.count
        if self.selector is not None:
            fields["selector"] = self.selector.model_dump(mode="json", exclude_none=True)
        if self.sharing is not None:
            fields["sharing"] = self.sharing.model_dump(mode="json", exclude_none=True)
        fields["optional"] = self.optional
        if self.share is not None:
            fields["share"] = self.share.model_dump(mode="json", exclude_none=True)
        if self.topology is not None:
            topology = {
                "sameNVLinkDomain": self.topology.same_nvlink_domain,
                "sameNUMANode": self.topology.same_numa_node,
            }
            fields["topology"] = {k: v.value for k, v in topology.items() if v is not None}
        for name in leave_out:
            fields.pop(name, None)
        return _text(fields)


@dataclass(frozen=True)
class MigDemand:
    """One MIG device: a profile by name, or the smallest waste among those covering the needs
    (`memory_bytes`, `compute_slices`)."""

    profile: str | None = None
    #: Needs instead of a profile: at least this much memory / this many compute slices.
    memory_bytes: int = 0
    compute_slices: int = 0
    sharing: GpuSharing | None = None
    #: The ResourceClaim name of a GPU claim of the same pod whose GPU must host this device
    #: (the name itself, or `<pod>-<name>`: `demand._paired_claim`).
    gpu_claim_name: str | None = None

    def __post_init__(self) -> None:
        if self.profile is not None and (self.memory_bytes or self.compute_slices):
            raise ValueError("a MIG claim names a profile or states needs, not both")

    def key(self) -> str:
        """The fields as text (equal text: equal fields), for memo keys."""
        fields: dict[str, Any] = {
            "profile": self.profile,
            "memoryBytes": self.memory_bytes,
            "computeSlices": self.compute_slices,
            "gpuClaimName": self.gpu_claim_name,
        }
        if self.sharing is not None:
            fields["sharing"] = self.sharing.model_dump(mode="json", exclude_none=True)
        return _text(fields)


@dataclass(frozen=True)
class DeviceDemand:
    """`count` distinct devices the solver knows by name alone: another driver's (a NIC, an
    FPGA), which drasat allocates beside its GPUs for one claim. Each of `choices` is a device
    by key and what taking it draws on its node's amounts (`NodeState.amounts`: the device
    itself, a capacity of a device several claims share, a shared counter); a device whose
    amounts are not on a node is not there."""

    count: int
    #: (device key, ((amount name, how much), ...)), in the caller's order.
    choices: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a device claim takes at least one device, not {self.count}")

    def key(self) -> str:
        """The count as text (the choices are compared by their interned number: thousands of
        them for a request that any node's devices meet)."""
        return _text({"devices": self.count})


def selects_mig_mode(selector: GpuSelector | None) -> bool:
    """Whether the selector asks for `migEnabled: true` anywhere in its tree."""
    if selector is None:
        return False
    if selector.migEnabled is True:
        return True
    children = (selector.andExpression or []) + (selector.orExpression or [])
    return any(selects_mig_mode(child) for child in children)


def _text(fields: dict[str, Any]) -> str:
    # Compact and unescaped, as pydantic's model_dump_json writes it.
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)
