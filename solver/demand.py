"""What pods ask for, normalized: claim shapes, pod priorities, and which GPUs a claim may use.

A purely computational module. Decisions written down here:

- A whole-GPU claim uses non-MIG GPUs, unless it says MIG-mode GPUs may go whole
  (`GpuDemand.mig_mode_gpus_allowed`; NVIDIA's pattern: a GPU claim on a MIG GPU, with MIG
  claims carved from it by gpuClaimName).
- A MIG claim's `gpuClaimName` names a GPU claim of the same pod: the ResourceClaim name itself,
  or `<pod>-<gpuClaimName>` (claims made from a pod's templates are named that way).
- MIG by needs: every profile whose memory and compute slices cover the needs is a candidate;
  waste = memory slices + compute slices above the smallest candidate of that product.
- A share claim (`share`) sits on a non-MIG GPU; its compute is 0 when it states only memory.
- A device claim (`DeviceDemand`) takes other drivers' devices, never a GPU: no policy rule,
  budget or cost speaks of them; only the amounts they draw on bound them.
- Pod priority = pod.priority + the highest namespacePriorities entry whose glob matches.
- Policy eligibility: allowedProducts (union of the product globs of every rule whose namespace
  glob matches; no matching rule: every product) and reservations without `count` (matching GPUs
  are for the listed namespaces only) remove GPUs; reservations with `count` and namespace limits
  are budgets, handled by the model.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from drasat.api.policy import AllocationPolicySpec, Reservation
from drasat.api.selectors import GpuSelector
from drasat.api.sharing import GpuSharing, default_sharing
from drasat.solver.inventory import GpuSlot, MigOption, share_memory_mib
from drasat.solver.problem import ClaimRequest, PodRequest

#: What taking one device draws on its node's amounts: ((amount name, how much), ...).
Draws = tuple[tuple[str, int], ...]


class Kind(StrEnum):
    whole = "whole"
    share = "share"
    mig = "mig"
    #: Other drivers' devices, known by name alone (`DeviceDemand`).
    device = "device"


@dataclass(frozen=True)
class Claim:
    """A claim the solver must place (or already placed: `pinned_node`)."""

    request: ClaimRequest
    kind: Kind
    count: int
    optional: bool
    selector: GpuSelector | None
    allows_mig_gpu: bool
    share_compute: int
    share_memory_mib: int
    #: MIG: the profile asked for, or None with needs.
    profile: str | None
    need_memory_bytes: int
    need_compute_slices: int
    #: uid of the GPU claim (same pod) whose GPU must host this MIG device.
    paired_with: str | None
    sharing: GpuSharing

    @property
    def uid(self) -> str:
        return self.request.uid

    @property
    def namespace(self) -> str:
        return self.request.namespace

    @property
    def names_gpus(self) -> bool:
        """Whether which GPUs this claim may take depends on their identity (index, uuid or an
        eligible set), not only on what they are: memo keys must then tell GPUs apart."""
        request = self.request
        return (
            names_gpu(self.selector)
            or request.eligible is not None
            or request.placements is not None
            or request.device is not None
            or bool(request.constraints)
        )

    @property
    def ref(self) -> str:
        return f"{self.request.namespace}/{self.request.name}"

    def describe_mig(self) -> str:
        if self.profile is not None:
            return self.profile
        if self.lists_devices:
            return "a MIG device of the request's"
        needs = []
        if self.need_memory_bytes:
            needs.append(f"memory>={self.need_memory_bytes // 2**20}Mi")
        if self.need_compute_slices:
            needs.append(f"computeSlices>={self.need_compute_slices}")
        return "MIG " + " ".join(needs)

    @property
    def lists_devices(self) -> bool:
        """A MIG claim of no profile whose caller lists the devices it may take (any profile
        among them): the list decides, not needs."""
        return self.profile is None and self.request.placements is not None

    def placement_allowed(self, gpu: GpuSlot, option: MigOption) -> bool:
        """Whether the caller's eligible placements (if any) admit this one on this GPU."""
        placements = self.request.placements
        return placements is None or (gpu.info.uuid, option.profile, option.start) in placements

    def mig_fits(self, option: MigOption) -> bool:
        """Whether the profile at this placement is one this claim may take."""
        if self.profile is not None:
            return option.profile == self.profile
        if self.lists_devices:
            return True  # `placement_allowed` reads the list
        if option.media_extensions:
            return False  # needs never call for media engines; keep +me for who names it
        if self.need_memory_bytes and option.memory_bytes < self.need_memory_bytes:
            return False
        return option.compute_slices >= self.need_compute_slices


def names_gpu(selector: GpuSelector | None) -> bool:
    """Whether the selector names a GPU by `index` or `uuid` anywhere in its tree: then which
    GPU it matches depends on the GPU's identity, not only on what it is (memo keys)."""
    if selector is None:
        return False
    if selector.index is not None or selector.uuid is not None:
        return True
    children = (selector.andExpression or []) + (selector.orExpression or [])
    return any(names_gpu(child) for child in children)


def _paired_claim(pod: PodRequest, name: str | None) -> str | None:
    if name is None:
        return None
    pod_name = pod.key.rpartition("/")[2]
    for wanted in (name, f"{pod_name}-{name}"):
        for claim in pod.claims:
            if claim.gpu is not None and claim.name == wanted:
                return claim.uid
    return None


def normalize(request: ClaimRequest, pod: PodRequest) -> Claim:
    if request.gpu is not None:
        spec = request.gpu
        share = spec.share
        return Claim(
            request=request,
            kind=Kind.share if share is not None else Kind.whole,
            count=spec.count,
            optional=spec.optional,
            selector=spec.selector,
            allows_mig_gpu=spec.mig_mode_gpus_allowed and share is None,
            share_compute=(share.compute or 0) if share is not None else 0,
            share_memory_mib=share_memory_mib(share),
            profile=None,
            need_memory_bytes=0,
            need_compute_slices=0,
            paired_with=None,
            sharing=spec.sharing or default_sharing(),
        )
    if request.device is not None:
        return Claim(
            request=request,
            kind=Kind.device,
            count=request.device.count,
            optional=False,
            selector=None,
            allows_mig_gpu=False,
            share_compute=0,
            share_memory_mib=0,
            profile=None,
            need_memory_bytes=0,
            need_compute_slices=0,
            paired_with=None,
            sharing=default_sharing(),
        )
    mig = request.mig
    assert mig is not None  # ClaimRequest guarantees exactly one
    return Claim(
        request=request,
        kind=Kind.mig,
        count=1,
        optional=False,
        selector=None,
        allows_mig_gpu=True,
        share_compute=0,
        share_memory_mib=0,
        profile=mig.profile,
        need_memory_bytes=mig.memory_bytes,
        need_compute_slices=mig.compute_slices,
        paired_with=_paired_claim(pod, mig.gpu_claim_name),
        sharing=mig.sharing or default_sharing(),
    )


def pod_priority(pod: PodRequest, policy: AllocationPolicySpec) -> int:
    matching = [
        priority
        for glob, priority in policy.namespacePriorities.items()
        if fnmatch.fnmatchcase(pod.namespace, glob)
    ]
    return pod.priority + (max(matching) if matching else 0)


def device_choices(claim: Claim, amounts: Mapping[str, int]) -> list[tuple[str, Draws]]:
    """A device claim's choices a node with these free amounts can give now: every amount
    they draw is on the node, with enough left."""
    spec = claim.request.device
    if spec is None:
        return []
    return [
        (key, draws)
        for key, draws in spec.choices
        if all(amounts.get(name, -1) >= much for name, much in draws)
    ]


def device_fits(claim: Claim, gpu: GpuSlot) -> bool:
    """Whether the claim's kind, selector, eligible set and MIG mode admit this GPU (ignoring
    what is taken)."""
    if claim.kind is Kind.device:
        return False  # another driver's devices, never a GPU
    eligible = claim.request.eligible
    if eligible is not None and gpu.info.uuid not in eligible:
        return False
    if claim.kind is Kind.mig:
        return gpu.mig_enabled and any(
            claim.mig_fits(o) and claim.placement_allowed(gpu, o) for o in gpu.mig_options
        )
    if gpu.mig_enabled and not claim.allows_mig_gpu:
        return False
    return claim.selector is None or claim.selector.matches(gpu.info)


def allowed_products(namespace: str, policy: AllocationPolicySpec) -> list[str] | None:
    """Product globs the namespace may use; None: no rule names it."""
    globs: list[str] | None = None
    for rule in policy.rules.allowedProducts:
        if fnmatch.fnmatchcase(namespace, rule.namespace):
            globs = (globs or []) + list(rule.products)
    return globs


def product_allowed(product_name: str, globs: list[str] | None) -> bool:
    if globs is None:
        return True
    lowered = product_name.lower()
    return any(fnmatch.fnmatchcase(lowered, g.lower()) for g in globs)


def reservation_covers(reservation: Reservation, gpu: GpuSlot) -> bool:
    """Whether the reservation's nodes and selector take in this GPU."""
    if not any(fnmatch.fnmatchcase(gpu.node, glob) for glob in reservation.nodes):
        return False
    return reservation.selector is None or reservation.selector.matches(gpu.info)


def reserved_for(reservation: Reservation, namespace: str) -> bool:
    return any(fnmatch.fnmatchcase(namespace, glob) for glob in reservation.namespaces)
