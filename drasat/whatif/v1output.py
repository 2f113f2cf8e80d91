"""Output of a v1 what-if run (first version): `table`/`wide` rows per pod claim with the
devices as their driver named them, and `yaml`/`json` as a `v1` List of the ResourceClaims with
`status.allocation` as `drasat.v1.allocate` writes it (the scheduler's form).

A claim that already held an allocation is shown as `(already allocated)`; a pod that was not
placed shows why (the reason of the pod, on its first claim's row only). Unplaced claims carry
the annotation `whatif.drasat.io/reason`. `html` is the wide table on a self-contained page.
"""

from __future__ import annotations

import html
import json
from typing import Any

import yaml

from drasat.whatif import table, v1manifests
from drasat.whatif.v1run import V1Result

Obj = dict[str, Any]

REASON_ANNOTATION = "whatif.drasat.io/reason"


def _devices(allocation: Obj) -> str:
    parts = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        text = f"{result.get('request')}: {result.get('device')}"
        consumed = result.get("consumedCapacity")
        if consumed:
            text += " (" + ", ".join(f"{k} {v}" for k, v in sorted(consumed.items())) + ")"
        parts.append(text)
    return "; ".join(parts) or "none"


def rows(result: V1Result, *, wide: bool) -> list[list[str]]:
    outcome = result.outcome
    out: list[list[str]] = []
    for pod in result.workload.pods:
        reasons = outcome.refused.get(pod.key)
        for index, (pod_claim, claim) in enumerate(pod.claims):
            uid = str(claim.obj["metadata"]["uid"])
            node = outcome.placed.get(pod.key, "-")
            if v1manifests.allocated(claim.obj):
                devices = "(already allocated) " + _devices(claim.obj["status"]["allocation"])
            elif uid in outcome.allocations:
                devices = _devices(outcome.allocations[uid].allocation)
                node = outcome.allocations[uid].node
            elif reasons:
                devices = "not placed: " + ("; ".join(reasons) if index == 0 else "(as above)")
            else:
                devices = "-"
            cells = [pod.key, pod_claim, node, devices]
            if wide:
                cells.insert(2, claim.name)
            out.append(cells)
    return out


def render_table(result: V1Result, *, wide: bool = False) -> str:
    header = ["POD", "CLAIM", "NODE", "DEVICES"]
    if wide:
        header.insert(2, "RESOURCECLAIM")
    found = rows(result, wide=wide)
    lines = table.columns([header, *found])
    placed = sum(1 for p in result.workload.pods if p.key in result.outcome.placed)
    lines.append("")
    lines.append(f"pods: {placed} placed, {len(result.outcome.refused)} not placed")
    for solution in result.outcome.solutions:
        lines.append(f"solver: {solution.status.value}")
    if result.solver_error:
        lines.append(result.solver_error)
    lines.extend(table.ignored_lines(result.workload.ignored, wide=wide))
    lines.extend(table.ignored_lines(result.cluster.ignored, wide=wide))
    return "\n".join(lines) + "\n"


def claims(result: V1Result) -> list[Obj]:
    """Every claim a pod uses, as it would be after the run."""
    out = []
    reasons = {
        claim.key: "; ".join(result.outcome.refused[pod.key])
        for pod in result.workload.pods
        if pod.key in result.outcome.refused
        for _, claim in pod.claims
    }
    for claim in result.workload.claims.values():
        obj = json.loads(json.dumps(claim.obj))
        uid = str(obj["metadata"]["uid"])
        if uid in result.outcome.allocations:
            obj.setdefault("status", {})["allocation"] = result.outcome.allocations[uid].allocation
        elif claim.key in reasons and not v1manifests.allocated(obj):
            annotations = obj["metadata"].setdefault("annotations", {})
            annotations[REASON_ANNOTATION] = reasons[claim.key]
        out.append(obj)
    return out


def render_html(result: V1Result) -> str:
    """A self-contained page holding the wide table (MIG and share drawings are the classic
    output's for now)."""
    body = html.escape(render_table(result, wide=True))
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>drasat what-if (v1)'
        f"</title></head>\n<body><pre>{body}</pre></body></html>\n"
    )


def render(result: V1Result, output: str) -> str:
    if output in ("table", "wide"):
        return render_table(result, wide=output == "wide")
    if output == "html":
        return render_html(result)
    listing = {"apiVersion": "v1", "kind": "List", "items": claims(result)}
    if output == "json":
        return json.dumps(listing, indent=2) + "\n"
    return yaml.safe_dump(listing, sort_keys=False, width=100)
