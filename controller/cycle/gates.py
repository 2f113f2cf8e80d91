"""drasat's scheduling gate (`SCHEDULING_GATE`, put on pods by admission) lifted from a pod once
drasat has nothing left to allocate for it; other owners' gates are never touched.
"""

from __future__ import annotations

import logging

from drasat.api.groups import SCHEDULING_GATE
from drasat.controller import v1inputs
from drasat.controller.cycle.writes import Writes
from drasat.controller.metrics import Metrics
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import Api, Obj

log = logging.getLogger(__name__)


class Gates:
    """Lifts drasat's gate; says once when pods arrive without it."""

    def __init__(self, api: Api, *, writes: Writes, metrics: Metrics) -> None:
        self.api = api
        self._writes = writes
        self._metrics = metrics
        #: Said once: a pod of drasat's arrived without the scheduling gate (no admission).
        self._said_ungated = False

    def lift(self, pod: Obj, why: str) -> bool:
        """Remove drasat's scheduling gate from the pod (the others' stay, in their order): one
        update with the pod's resourceVersion as precondition, retried on a fresh read when the
        pod changed meanwhile. True when this call removed it."""
        meta = pod["metadata"]
        for _ in range(3):
            if not v1inputs.has_our_gate(pod) or not v1inputs.is_pending(pod):
                return False
            kept = [g for g in (pod.get("spec") or {}).get("schedulingGates") or []
                    if g.get("name") != SCHEDULING_GATE]  # fmt: skip
            patch = {
                "metadata": {"resourceVersion": pod["metadata"].get("resourceVersion")},
                "spec": {"schedulingGates": kept or None},
            }
            self._writes.guard()
            try:
                self.api.patch(r.PODS, meta["name"], patch, namespace=meta["namespace"])
            except errors.NotFound:
                return False
            except errors.Conflict:
                try:
                    pod = self.api.get(r.PODS, meta["name"], namespace=meta["namespace"])
                except errors.NotFound:
                    return False
                if pod["metadata"].get("uid") != meta.get("uid"):
                    return False
                continue
            self._metrics.gates_lifted.inc()
            log.info("%s: scheduling gate %s lifted (%s)", v1inputs.pod_key(pod),
                     SCHEDULING_GATE, why)  # fmt: skip
            return True
        raise errors.Conflict(f"pod {v1inputs.pod_key(pod)} kept changing", status=409)

    def lift_confined(self, pod: Obj, why: str) -> None:
        """`lift`, a failure that pod's alone (`Writes.confined`)."""
        self._writes.confined(f"pod {v1inputs.pod_key(pod)}", [pod], self.lift, pod, why)

    def say_ungated(self, pending: list[v1inputs.Pending]) -> None:
        """Log once that pods of drasat's arrive without its scheduling gate (no admission):
        kube-scheduler then tries them before drasat allocates and again after its backoff."""
        if self._said_ungated:
            return
        ungated = next((p for p in pending if not v1inputs.has_our_gate(p.pod)), None)
        if ungated is None:
            return
        self._said_ungated = True
        log.warning(
            "pod %s arrived without drasat's scheduling gate %s: without admission (the chart's "
            "MutatingAdmissionPolicy or webhook) kube-scheduler tries such pods before drasat "
            "allocates and binds them only after its retry backoff (the slower path; said once)",
            ungated.input.key, SCHEDULING_GATE,
        )  # fmt: skip
