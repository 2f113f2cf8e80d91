"""The fragmentation term's target workload from what the cluster runs (`Problem.workload`).

A controller decision holds one pod, so the solver's own estimate (the problem's pods) would be
that pod alone. Instead the controller counts the GPU claim shapes every NodeAllocationState
holds, adds the shapes of the pods being decided, and passes the popular ones with their weights
(`drasat.solver.workload.estimate`). Counts are kept per NAS object and redone only for objects
that changed (each parsed NAS is a new object), so a decision costs one pass over the nodes'
identities, not over their claims. A policy that lists its own workload makes this moot.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping

from drasat.api.devicemodel import shares
from drasat.api.nas import AllocatedDevices
from drasat.api.policy import AllocationPolicySpec, WorkloadShape
from drasat.controller.nasnodes import ParsedNas
from drasat.solver import workload
from drasat.solver.problem import PodRequest


def allocated_shapes(entries: Mapping[str, AllocatedDevices]) -> Counter[workload.ShapeKey]:
    """The GPU claim shapes a node's allocatedClaims hold, counted as the solver counts a pod's
    (`workload.pending_shapes`: MIG devices and shares without a compute percentage left out).
    Selectors are not recorded in the NAS, so none is kept."""
    found: Counter[workload.ShapeKey] = Counter()
    for entry in entries.values():
        if entry.gpu is None or not entry.gpu.devices:
            continue
        if entry.share is not None:
            if entry.share.compute:
                found[(entry.claimInfo.namespace, 1, entry.share.compute)] += 1
            continue
        found[(entry.claimInfo.namespace, len(entry.gpu.devices), shares.FULL_COMPUTE)] += 1
    return found


class ClusterWorkload:
    """Shape counts of every NAS, updated from the snapshot each decision reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_node: dict[str, tuple[ParsedNas, Counter[workload.ShapeKey]]] = {}
        self._total: Counter[workload.ShapeKey] = Counter()

    def shapes(
        self,
        policy: AllocationPolicySpec,
        snapshot: Mapping[str, ParsedNas],
        pods: Iterable[PodRequest],
    ) -> tuple[WorkloadShape, ...] | None:
        """The target workload for a solve of `pods`; None when the policy lists one (the
        solver uses it) or nothing is known (the solver estimates from the pods)."""
        if workload.policy_shapes(policy):
            return None
        with self._lock:
            self._sync(snapshot)
            counts = self._total + workload.pending_shapes(pods)
        return workload.estimate(counts) or None

    def _sync(self, snapshot: Mapping[str, ParsedNas]) -> None:
        for name in [n for n in self._by_node if n not in snapshot]:
            self._total.subtract(self._by_node.pop(name)[1])
        for name, entry in snapshot.items():
            seen = self._by_node.get(name)
            if seen is not None and seen[0] is entry:
                continue
            if seen is not None:
                self._total.subtract(seen[1])
            counts = allocated_shapes(entry.entries)
            self._total.update(counts)
            self._by_node[name] = (entry, counts)
