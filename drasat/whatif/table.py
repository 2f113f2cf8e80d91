"""The tables' common lines: columns, the summary, what was ignored (the v1 output's table and the
classic one, drasat.classic.whatif.table, are built of them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from drasat.whatif.manifestindex import Ignored

if TYPE_CHECKING:  # annotations only: the output module imports this one
    from drasat.whatif.v1output import Summary


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
