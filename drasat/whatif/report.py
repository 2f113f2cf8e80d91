"""What the what-if found, as plain data every renderer (table, YAML/JSON, HTML) draws from.

A purely computational module: the cluster, the compiled manifests and the solver's solution in;
the NodeAllocationStates with the new allocations merged, one row per pod claim, a summary and a
per-GPU picture out.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from drasat.api import catalog
from drasat.api.nas import AllocatedDevices, GpuInfo, NodeAllocationState
from drasat.api.quantity import to_bytes
from drasat.solver.problem import Solution, Status, bound_text
from drasat.whatif.inventory import Ignored
from drasat.whatif.manifests import Claim, CompiledPod, Workload
from drasat.whatif.nodes import ClusterNodes

#: Memory slices of a MIG GPU whose product neither the catalog nor its NAS describes.
DEFAULT_MIG_SLICES = 8


@dataclass(frozen=True)
class Row:
    """One entry of a pod's spec.resourceClaims and what became of it."""

    pod: str  # namespace/name
    pod_claim: str  # the name in the pod's spec.resourceClaims
    claim: Claim
    node: str | None
    devices: str  # short, e.g. `GPU 1 (GPU-1e8f6d0a)`, `3g.20gb@4 on GPU 0`
    devices_wide: str  # with full UUIDs
    reason: str | None  # why the pod was not placed
    #: The claim was already allocated in the input NodeAllocationStates.
    existing: bool = False

    @property
    def placed(self) -> bool:
        return self.node is not None


@dataclass(frozen=True)
class Segment:
    """A part of a GPU's bar: `start`/`size` in slots of the bar (MIG slices or percent)."""

    start: int
    size: int
    claim: str  # namespace/name of the claim
    label: str  # the whole story (tooltip)
    text: str  # what fits in the segment: the most telling part first
    colour: str
    existing: bool


@dataclass(frozen=True)
class GpuView:
    index: int
    uuid: str
    product: str
    memory: str
    mig_enabled: bool
    #: Slots of the bar: memory slices of a MIG GPU, 100 (percent) otherwise.
    slots: int
    segments: tuple[Segment, ...]
    #: A MIG GPU held whole by a claim whose pod pairs MIG devices with it (gpuClaimName):
    #: (claim, colour); drawn as the bar's frame, not a segment.
    held_by: tuple[str, str] | None = None


@dataclass(frozen=True)
class NodeView:
    name: str
    ready: bool
    gpus: tuple[GpuView, ...]
    #: Optional claims allocated on this node with no device (their pods run CPU-only).
    cpu_only: tuple[str, ...] = ()


@dataclass(frozen=True)
class Summary:
    nodes: int
    nodes_not_ready: int
    gpus_total: int
    gpus_used: int
    mig_slices_total: int
    mig_slices_used: int
    pods_placed: int
    pods_unplaced: int
    #: Allocations the solution adds, and those the input NodeAllocationStates already held.
    allocations_new: int
    allocations_existing: int
    status: str
    objective: float
    #: None: no bound is known (online mode; a batch model that left out nodes).
    best_bound: float | None
    gap: float | None
    wall_time_s: float
    mode: str
    #: What the status proves (drasat.solver.Status.meaning).
    meaning: str = ""

    @property
    def solver_text(self) -> str:
        """`STATUS (mode: what it proves)`."""
        return f"{self.status} ({self.mode}: {self.meaning})" if self.meaning else self.status

    @property
    def bound_text(self) -> str:
        """`best bound B, gap G%`, or `no bound`."""
        status = Status(self.status) if self.status in {s.value for s in Status} else None
        return bound_text(self.best_bound, self.gap, status)

    @property
    def gpus_free(self) -> int:
        return self.gpus_total - self.gpus_used

    @property
    def mig_slices_free(self) -> int:
        return self.mig_slices_total - self.mig_slices_used


@dataclass(frozen=True)
class Report:
    nas: tuple[NodeAllocationState, ...]  # input allocations kept, new ones added
    rows: tuple[Row, ...]
    summary: Summary
    nodes: tuple[NodeView, ...]
    ignored: tuple[Ignored, ...]
    workload: Workload
    #: claim key -> (node, allocation) for every claim of the workload that holds devices.
    allocations: dict[str, tuple[str, AllocatedDevices]]
    #: pod key -> why it was not placed (absent: placed).
    unplaced: dict[str, str]
    #: claim key -> its colour in the HTML report.
    colours: dict[str, str]
    #: A solver failure, reported instead of a traceback; None when it solved.
    solver_error: str | None = None
    #: Online mode, when asked: pod -> node -> None (suitable) or why it is unsuitable.
    node_feasibility: dict[str, dict[str, str | None]] = field(default_factory=dict)


def build(
    cluster: ClusterNodes,
    workload: Workload,
    solution: Solution,
    *,
    mode: str,
    solver_error: str | None = None,
) -> Report:
    """Merge the solution into the cluster and describe it. Pure."""
    nas = merge(cluster.nas, solution)
    allocations = _claim_allocations(nas, workload)
    unplaced = _unplaced(workload, solution)
    existing = {uid for n in cluster.nas for uid in n.spec.allocatedClaims}
    gpus = {g.uuid: g for n in nas for g in n.spec.gpus()}
    rows = tuple(
        _row(pod, pod_claim.name, pod_claim.claim, allocations, unplaced, existing, gpus)
        for pod in workload.pods
        for pod_claim in pod.claims
    )
    legend = _Legend(
        names={c.request.uid: c.key for c in workload.claims},
        colours=dict(
            zip((c.key for c in workload.claims), palette(len(workload.claims)), strict=True)
        ),
        users={c.key: len(workload.users_of(c)) for c in workload.claims},
        existing=existing,
    )
    return Report(
        nas=nas,
        rows=rows,
        summary=_summary(cluster, nas, workload, solution, unplaced, mode),
        nodes=tuple(_node_view(n, legend) for n in nas),
        colours=legend.colours,
        ignored=(*cluster.ignored, *workload.ignored),
        workload=workload,
        allocations=allocations,
        unplaced=unplaced,
        solver_error=solver_error,
        node_feasibility=solution.node_feasibility,
    )


def merge(
    cluster: tuple[NodeAllocationState, ...], solution: Solution
) -> tuple[NodeAllocationState, ...]:
    """The NodeAllocationStates with the solution's new allocations added to allocatedClaims."""
    new: dict[str, dict[str, AllocatedDevices]] = {}
    for placement in solution.placements:
        new.setdefault(placement.node, {}).update(placement.allocations)
    merged = []
    for nas in cluster:
        added = new.get(nas.metadata.name, {})
        if not added:
            merged.append(nas)
            continue
        claims = {**nas.spec.allocatedClaims, **added}
        spec = nas.spec.model_copy(update={"allocatedClaims": claims})
        merged.append(nas.model_copy(update={"spec": spec}))
    return tuple(merged)


def _claim_allocations(
    nas: tuple[NodeAllocationState, ...], workload: Workload
) -> dict[str, tuple[str, AllocatedDevices]]:
    by_uid = {
        uid: (n.metadata.name, entry) for n in nas for uid, entry in n.spec.allocatedClaims.items()
    }
    return {c.key: by_uid[c.request.uid] for c in workload.claims if c.request.uid in by_uid}


def _unplaced(workload: Workload, solution: Solution) -> dict[str, str]:
    placed = {p.pod for p in solution.placements}
    reasons = {r.pod: "; ".join(r.reasons) or "not placed" for r in solution.unplaced}
    out: dict[str, str] = {}
    for pod in workload.pods:
        if pod.blocked is not None:
            out[pod.key] = pod.blocked
        elif pod.key not in placed:
            out[pod.key] = reasons.get(pod.key, f"not placed (solver status {solution.status})")
    return out


def _row(
    pod: CompiledPod,
    pod_claim: str,
    claim: Claim,
    allocations: dict[str, tuple[str, AllocatedDevices]],
    unplaced: dict[str, str],
    existing: set[str],
    gpus: dict[str, GpuInfo],
) -> Row:
    reason = unplaced.get(pod.key)
    found = allocations.get(claim.key)
    if reason is not None or found is None:
        return Row(pod.key, pod_claim, claim, None, "-", "-", reason or "not placed")
    node, entry = found
    return Row(
        pod.key,
        pod_claim,
        claim,
        node,
        describe_devices(entry, gpus, wide=False),
        describe_devices(entry, gpus, wide=True),
        None,
        existing=claim.request.uid in existing,
    )


def _gpu_name(uuid: str, gpus: dict[str, GpuInfo], *, wide: bool) -> str:
    gpu = gpus.get(uuid)
    if gpu is None:
        return uuid
    short = uuid if wide else uuid.split("-")[0] + "-" + uuid.split("-")[1][:8]
    return f"GPU {gpu.index} ({short})"


def describe_devices(entry: AllocatedDevices, gpus: dict[str, GpuInfo], *, wide: bool) -> str:
    """`GPU 0 (GPU-07416406)`, `share 50%/8Gi on GPU 1`, `3g.20gb@4 on GPU 0`, or none."""
    if entry.mig is not None:
        parts = []
        for device in entry.mig.devices:
            parent = gpus.get(device.parentUUID)
            on = f"GPU {parent.index}" if parent is not None else device.parentUUID
            if wide:
                on = _gpu_name(device.parentUUID, gpus, wide=True)
            parts.append(f"{device.profile}@{device.placement.start} on {on}")
        return ", ".join(parts) or "none"
    devices = entry.gpu.devices if entry.gpu is not None else []
    if not devices:
        return "none (optional, CPU-only)" if entry.optional else "none"
    if entry.share is not None:
        amounts = [f"{entry.share.compute}%" if entry.share.compute else ""]
        amounts.append(str(entry.share.memory) if entry.share.memory is not None else "")
        amount = "/".join(a for a in amounts if a)
        return f"share {amount} on {_gpu_name(devices[0].uuid, gpus, wide=wide)}"
    return ", ".join(_gpu_name(d.uuid, gpus, wide=wide) for d in devices)


def mig_slices(gpu: GpuInfo, nas: NodeAllocationState) -> int:
    """Memory slices of a MIG GPU: the catalog's, else what its NAS placements reach."""
    product = catalog.product_for_name(gpu.productName)
    if product is not None and product.memory_slices:
        return product.memory_slices
    ends = [
        p.end
        for m in nas.spec.mig_profiles()
        if m.parentProductName == gpu.productName
        for p in m.placements
    ]
    return max(ends, default=DEFAULT_MIG_SLICES)


def _summary(
    cluster: ClusterNodes,
    nas: tuple[NodeAllocationState, ...],
    workload: Workload,
    solution: Solution,
    unplaced: dict[str, str],
    mode: str,
) -> Summary:
    used: set[str] = set()
    slices_used = 0
    for n in nas:
        for entry in n.spec.allocatedClaims.values():
            if entry.gpu is not None:
                used.update(d.uuid for d in entry.gpu.devices)
            if entry.mig is not None:
                used.update(d.parentUUID for d in entry.mig.devices)
                slices_used += sum(d.placement.size for d in entry.mig.devices)
    gpus = [(g, n) for n in nas for g in n.spec.gpus()]
    return Summary(
        nodes=len(nas),
        nodes_not_ready=sum(1 for s in cluster.states if not s.ready),
        gpus_total=len(gpus),
        gpus_used=sum(1 for g, _ in gpus if g.uuid in used),
        mig_slices_total=sum(mig_slices(g, n) for g, n in gpus if g.migEnabled),
        mig_slices_used=slices_used,
        pods_placed=len(workload.pods) - len(unplaced),
        pods_unplaced=len(unplaced),
        allocations_new=sum(len(p.allocations) for p in solution.placements),
        allocations_existing=sum(len(n.spec.allocatedClaims) for n in cluster.nas),
        status=str(solution.status),
        objective=solution.objective,
        best_bound=solution.best_bound,
        gap=solution.gap,
        wall_time_s=solution.wall_time_s,
        mode=mode,
        meaning=solution.status.meaning,
    )


def colour(key: str) -> str:
    """A stable colour for a claim the workload does not hold (an existing allocation)."""
    hue = int(hashlib.sha256(key.encode()).hexdigest()[:6], 16) % 360
    return f"hsl({hue}, 45%, 72%)"


def palette(count: int) -> list[str]:
    """`count` colours far apart: hues a golden angle apart, lightness alternating."""
    return [f"hsl({(i * 137.508) % 360:.0f}, 62%, {58 + 8 * (i % 2)}%)" for i in range(count)]


@dataclass(frozen=True)
class _Legend:
    """How the bars name and colour claims."""

    names: dict[str, str]  # claim uid -> namespace/name
    colours: dict[str, str]  # namespace/name -> colour
    users: dict[str, int]  # namespace/name -> pods using it
    existing: set[str]  # uids allocated in the input

    def colour_of(self, key: str) -> str:
        return self.colours.get(key) or colour(key)


def _node_view(nas: NodeAllocationState, legend: _Legend) -> NodeView:
    gpus = []
    for gpu in nas.spec.gpus():
        slots = mig_slices(gpu, nas) if gpu.migEnabled else 100
        segments, held_by = _segments(gpu, nas, legend)
        memory = f"{gpu.memoryBytes / 2**30:.0f} GiB"
        gpus.append(
            GpuView(
                gpu.index,
                gpu.uuid,
                gpu.productName,
                memory,
                gpu.migEnabled,
                slots,
                tuple(segments),
                held_by,
            )
        )
    ready = nas.status is None or nas.status.value == "Ready"
    cpu_only = tuple(
        legend.names.get(uid, f"{entry.claimInfo.namespace}/{entry.claimInfo.name}")
        for uid, entry in nas.spec.allocatedClaims.items()
        if entry.gpu is not None and not entry.gpu.devices
    )
    return NodeView(nas.metadata.name, ready, tuple(gpus), cpu_only)


def _segments(
    gpu: GpuInfo, nas: NodeAllocationState, legend: _Legend
) -> tuple[list[Segment], tuple[str, str] | None]:
    segments: list[Segment] = []
    held_by: tuple[str, str] | None = None
    offset = 0  # share claims stack up from the left of a non-MIG bar
    for uid, entry in nas.spec.allocatedClaims.items():
        key = legend.names.get(uid, f"{entry.claimInfo.namespace}/{entry.claimInfo.name}")
        was = uid in legend.existing
        paint = legend.colour_of(key)
        if entry.mig is not None:
            for device in entry.mig.devices:
                if device.parentUUID == gpu.uuid:
                    label = f"{device.profile} {key}"
                    placement = device.placement
                    # a one- or two-slice device has room for its profile only
                    text = label if placement.size > 2 else device.profile
                    segments.append(
                        Segment(placement.start, placement.size, key, label, text, paint, was)
                    )
        elif entry.gpu is not None and any(d.uuid == gpu.uuid for d in entry.gpu.devices):
            if gpu.migEnabled:  # held whole next to its pod's paired MIG devices
                held_by = (key, paint)
                continue
            size = _share_percent(entry, gpu) if entry.share is not None else 100 - offset
            users = legend.users.get(key, 0)
            label = f"{key} ({users} pods)" if users > 1 else key
            if entry.share is not None:
                label = f"{size}% {key}"
            segments.append(Segment(offset, size, key, label, label, paint, was))
            offset = min(100, offset + size)
    return segments, held_by


def _share_percent(entry: AllocatedDevices, gpu: GpuInfo) -> int:
    share = entry.share
    assert share is not None
    if share.compute is not None:
        return share.compute
    memory = to_bytes(share.memory) if share.memory is not None else 0
    return max(1, round(100 * memory / gpu.memoryBytes)) if gpu.memoryBytes else 1
