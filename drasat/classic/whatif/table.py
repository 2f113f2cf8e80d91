"""`-o table` and `-o wide` of a classic run: one row per pod claim, then the summary and what
was ignored (the columns, summary and ignored lines are the product's `drasat.whatif.table`)."""

from __future__ import annotations

from drasat.api import access
from drasat.api.sharing import default_sharing
from drasat.classic.whatif.report import Report, Row
from drasat.whatif.table import columns, ignored_lines, summary_lines


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
