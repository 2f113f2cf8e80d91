"""What the what-if found, as plain data every renderer (table, YAML/JSON, HTML) draws from.

A purely computational module: the cluster, the compiled manifests and the solver's solution in;
the NodeAllocationStates with the new allocations merged, one row per pod claim, a summary and a
per-GPU picture out. The picture and the summary are the what-if's one output's (`v1output`),
shared with the v1 what-if; the rows and the merge are the classic run's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drasat.api.nas import AllocatedDevices, GpuInfo, NodeAllocationState
from drasat.classic.whatif.manifests import Claim, CompiledPod, Workload
from drasat.solver.problem import Solution
from drasat.v1 import nasinventory
from drasat.whatif.clusternodes import ClusterNodes
from drasat.whatif.manifestindex import Ignored
from drasat.whatif.v1output import (
    GpuView,
    Legend,
    NodeView,
    Segment,
    Summary,
    colour,
    device_use,
    mig_slices,
    node_view,
    palette,
)

__all__ = ["GpuView", "NodeView", "Segment", "Summary", "colour", "mig_slices", "palette"]


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
    legend = Legend(
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
        nodes=tuple(node_view(n, legend) for n in nas),
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
        new.setdefault(placement.node, {}).update(nasinventory.entries_of(placement.allocations))
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


def _summary(
    cluster: ClusterNodes,
    nas: tuple[NodeAllocationState, ...],
    workload: Workload,
    solution: Solution,
    unplaced: dict[str, str],
    mode: str,
) -> Summary:
    use = device_use(nas)
    return Summary(
        nodes=len(nas),
        nodes_not_ready=sum(1 for s in cluster.states if not s.ready),
        gpus_total=use.gpus_total,
        gpus_used=use.gpus_used,
        mig_slices_total=use.mig_slices_total,
        mig_slices_used=use.mig_slices_used,
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
