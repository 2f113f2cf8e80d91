"""`-o yaml|json`: the objects the controller would write, as one `v1` `List`.

First every NodeAllocationState (input allocations kept, new ones added to spec.allocatedClaims),
then the ResourceClaims: allocated ones with a classic-DRA `status.allocation` (node selector on
the node's name, shareable, one resource handle whose data is the claim's devices as JSON),
unplaced ones with the annotation `whatif.drasat.io/reason`; every claim with the annotation
`whatif.drasat.io/solver` (status, what it proves, bound).
"""

from __future__ import annotations

from typing import Any

from drasat.api import groups, handles
from drasat.classic.whatif.manifests import Claim
from drasat.classic.whatif.report import Report

REASON_ANNOTATION = "whatif.drasat.io/reason"
#: On every claim: the solver's status, what it proves, and its bound (or `no bound`).
SOLVER_ANNOTATION = "whatif.drasat.io/solver"
CLAIM_API_VERSION = "resource.k8s.io/v1alpha2"


def as_list(report: Report, *, claims_only: bool = False) -> dict[str, Any]:
    """The NodeAllocationStates (unless `claims_only`), then the claims, as one `v1` List."""
    items = [] if claims_only else [nas.dump() for nas in report.nas]
    items.extend(_claim(report, claim) for claim in report.workload.claims)
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}


def _claim(report: Report, claim: Claim) -> dict[str, Any]:
    metadata = claim.metadata.model_dump(mode="json", exclude_none=True)
    summary = report.summary
    metadata["annotations"] = {
        **(metadata.get("annotations") or {}),
        SOLVER_ANNOTATION: f"{summary.solver_text}; {summary.bound_text}",
    }
    if claim.owner_pod is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": claim.owner_pod.rpartition("/")[2],
                "uid": claim.owner_pod_uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    out: dict[str, Any] = {
        "apiVersion": CLAIM_API_VERSION,
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": claim.spec.dump(),
    }
    found = report.allocations.get(claim.key)
    users = report.workload.users_of(claim)
    if found is None:
        reason = next((report.unplaced[p.key] for p in users if p.key in report.unplaced), None)
        annotations = dict(metadata.get("annotations") or {})
        annotations[REASON_ANNOTATION] = reason or "not placed"
        metadata["annotations"] = annotations
        return out
    node, entry = found
    placed = [p for p in users if p.key not in report.unplaced]
    out["status"] = {
        "driverName": groups.DRIVER_NAME,
        "allocation": {
            "availableOnNodes": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
            "shareable": claim.request.shareable,
            "resourceHandles": [
                {"driverName": groups.DRIVER_NAME, "data": handles.encode(node, entry)}
            ],
        },
    }
    if placed:
        out["status"]["reservedFor"] = [
            {"resource": "pods", "name": p.pod.name, "uid": p.pod.uid} for p in placed
        ]
    return out
