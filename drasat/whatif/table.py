"""`-o table` and `-o wide`: one row per pod claim, then the summary and what was ignored."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from drasat.api import access
from drasat.api.sharing import default_sharing
from drasat.whatif.inventory import Ignored

if TYPE_CHECKING:  # annotations only: the output module imports this one
    from drasat.whatif.report import Report, Row
    from drasat.whatif.v1output import Summary


def render(report: Report, *, wide: bool = False) -> str:
    header = ["POD", "CLAIM", "NODE", "DEVICES"]
    if wide:
        header = ["POD", "CLAIM", "RESOURCECLAIM", "CLASS", "NODE", "DEVICES", "SHARING"]
    users = {c.key: len(report.workload.users_of(c)) for c in report.workload.claims}
    for key, (_, entry) in report.allocations.items():
        # Allocated without devices (an optional claim, CPU-only): nothing to share.
        if not (entry.gpu and entry.gpu.devices) and not (entry.mig and entry.mig.devices):
            users[key] = 0
    lines = columns(
        [header, *(_cells(r, wide=wide, users=users.get(r.claim.key, 1)) for r in report.rows)]
    )
    if wide:
        lines.extend(unsuitable_lines(report))
    lines.append("")
    lines.extend(summary_lines(report.summary))
    if report.solver_error:
        lines.append(report.solver_error)
    lines.extend(ignored_lines(report.ignored, wide=wide))
    return "\n".join(lines) + "\n"


def ignored_lines(ignored: Sequence[Ignored], *, wide: bool) -> list[str]:
    """One line per ignored object; the table folds objects of one kind, file and reason
    (the Namespaces of a manifest) into one line."""
    if wide:
        return [f"ignored: {i.what} ({i.where}): {i.reason}" for i in ignored]
    groups: dict[tuple[str, str, str], list[str]] = {}
    for item in ignored:
        kind, _, name = item.what.partition(" ")
        source = item.where.rsplit(": document ", 1)[0]
        groups.setdefault((kind, source, item.reason), []).append(name)
    return [
        f"ignored: {kind} {', '.join(names)} ({source}): {reason}"
        for (kind, source, reason), names in groups.items()
    ]


def unsuitable_lines(report: Report) -> list[str]:
    """Online mode: for each pod not placed, why each candidate node is unsuitable."""
    lines: list[str] = []
    for pod in (p for p in report.workload.pods if p.key in report.unplaced):
        nodes = report.node_feasibility.get(pod.key, {})
        lines.extend(f"  {pod.key} on {n}: {why}" for n, why in nodes.items() if why)
    return ["", "unsuitable nodes:", *lines] if lines else []


def _cells(row: Row, *, wide: bool, users: int) -> list[str]:
    node = row.node or "-"
    devices = (row.devices_wide if wide else row.devices) if row.placed else "-"
    if row.existing:
        devices += " (already allocated)"
    if not row.placed:
        devices = f"not placed: {row.reason}"
    if not wide:
        return [row.pod, row.pod_claim, node, devices]
    return [
        row.pod,
        row.pod_claim,
        row.claim.request.name,
        row.claim.class_name,
        node,
        devices,
        _sharing(row, users),
    ]


def _sharing(row: Row, users: int) -> str:
    """What the claim gets (`drasat.api.access`): the sharing the solver writes into its
    allocation (the claim's, else NVIDIA's default) and the pods that use it; `-` for a claim
    allocated without devices (users 0)."""
    if users == 0:
        return "-"
    request = row.claim.request
    spec = request.gpu or request.mig
    sharing = (spec.sharing if spec is not None else None) or default_sharing()
    share = request.gpu.share if request.gpu is not None else None
    # A claim of a non-sharable class serves its first pod only.
    return access.label(sharing, share, users if request.shareable else 1)


def columns(rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]) for r in rows
    ]


def summary_lines(summary: Summary) -> list[str]:
    return [
        f"nodes: {summary.nodes} ({summary.nodes_not_ready} NotReady)   "
        f"GPUs: {summary.gpus_used} used, {summary.gpus_free} free of {summary.gpus_total}   "
        f"MIG slices: {summary.mig_slices_used} used, {summary.mig_slices_free} free of "
        f"{summary.mig_slices_total}",
        f"pods: {summary.pods_placed} placed, {summary.pods_unplaced} unplaced   "
        f"claims: {summary.allocations_new} allocated, {summary.allocations_existing} already in "
        "the cluster",
        f"solver: {summary.solver_text}, objective {summary.objective:g}, "
        f"{summary.bound_text}, {summary.wall_time_s * 1000:.0f} ms",
    ]
