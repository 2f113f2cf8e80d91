"""Prometheus metrics of one controller (its own registry, so several can live in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "drasat_controller"


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.allocations = Counter(
            f"{PREFIX}_allocations", "Claims allocated (NAS and claim status written).", registry=r
        )
        self.deallocations = Counter(
            f"{PREFIX}_deallocations",
            "Claims deallocated: by drasat (no pod uses them any more), or their NAS entries "
            "removed after another writer deallocated them.",
            registry=r,
        )
        self.failures = Counter(
            f"{PREFIX}_failures",
            "Claims not allocated, by reason (BadParameters, Unsuitable, Conflict, ...).",
            ["reason"],
            registry=r,
        )
        self.solver_seconds = Histogram(
            f"{PREFIX}_solver_seconds",
            "Wall time of one solver call.",
            ["kind"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.solves = Counter(
            f"{PREFIX}_solves",
            "Solver calls by kind and by what the solution proves (status: PER_POD_OPTIMAL = "
            "the pod's node is the best of its candidates, nothing more; FEASIBLE = not proven; "
            "OPTIMAL only where CP-SAT proved the whole set).",
            ["kind", "status"],
            registry=r,
        )
        self.pending_claims = Gauge(
            f"{PREFIX}_pending_claims", "Claims of ours not allocated yet.", registry=r
        )
        self.nas_conflicts = Counter(
            f"{PREFIX}_nas_conflicts", "409 answers to NodeAllocationState writes.", registry=r
        )
        self.repairs = Counter(
            f"{PREFIX}_repairs",
            "Restart repairs: completed claim status, NAS re-written, lost, orphans removed.",
            ["kind"],
            registry=r,
        )
        self.faults = Counter(
            f"{PREFIX}_isolated_faults",
            "Faults confined to the pod, claim or node that caused them while the cycle went on, "
            "by kind (AllocatorError, LedgerConflict, DeviceClash, WriteFailed, SettleFailed).",
            ["kind"],
            registry=r,
        )
        self.gates_lifted = Counter(
            f"{PREFIX}_scheduling_gates_lifted",
            "Pods let go to kube-scheduler: drasat's scheduling gate removed.",
            registry=r,
        )
        self.admission_reviews = Counter(
            f"{PREFIX}_admission_reviews",
            "Pods the admission webhook answered, by outcome (gated, not-gated, skipped, refused).",
            ["outcome"],
            registry=r,
        )
        self.leader = Gauge(f"{PREFIX}_leader", "1 while this replica leads.", registry=r)
        self.policy_reloads = Counter(
            f"{PREFIX}_policy_reloads",
            "Policy loads, by result (ok, rejected).",
            ["result"],
            registry=r,
        )
