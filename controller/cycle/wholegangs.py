"""Gangs go whole through a cycle: the pods of an incomplete gang are held back (an Event says
why), a gang's pods are written only when all of them are placed, and drasat's gate is lifted
from all of them together once all are written. A gang some of whose writes failed gives back
what was written (`WholeGangs.roll_back`): never a gang held in part. Which pods form a gang, and
the batch that counts a gang whole, are `controller.gangs`'s (purely computational).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from drasat import v1
from drasat.api.policy import AllocationPolicySpec
from drasat.controller import decisions, gangs, v1inputs
from drasat.controller.cycle import releasing
from drasat.controller.cycle.deallocation import Deallocator
from drasat.controller.cycle.gates import Gates
from drasat.controller.cycle.writes import Writes
from drasat.kube import resources as r
from drasat.kube.client import Obj
from drasat.kube.events import EventRecorder
from drasat.v1 import gangs as v1gangs


class WholeGangs:
    """This cycle's gangs (`plan`), kept whole from the solve to the gates."""

    def __init__(
        self,
        *,
        recorder: EventRecorder,
        gates: Gates,
        writes: Writes,
        deallocator: Deallocator,
    ) -> None:
        self._recorder = recorder
        self._gates = gates
        self._writes = writes
        self._deallocator = deallocator
        #: This cycle's gangs (`controller.gangs`): placed all-or-nothing, gates lifted together.
        self.plan = gangs.Plan()

    def plan_cycle(
        self,
        snapshot: v1inputs.Snapshot,
        everyone: list[v1inputs.Pending],
        waiting: Mapping[str, str],
        ungate: dict[str, tuple[Obj, str]],
        policy: AllocationPolicySpec,
    ) -> list[v1inputs.Pending]:
        """This cycle's gangs (`controller.gangs`): the pods of gangs not complete are left out
        (a Normal Event says why), and no pod of an unfinished gang is let go by `ungate`."""
        plan = gangs.plan(snapshot.pods, [p.input.key for p in everyone], waiting, ungate, policy,
                          snapshot.pod_groups)  # fmt: skip
        self.plan = plan
        for pods in plan.gates_held.values():
            for pod in pods:
                ungate.pop(v1inputs.pod_key(pod), None)
        for pod, early in plan.ungate_early.values():
            self._gates.lift_confined(pod, early)
        kept = []
        for item in everyone:
            why = plan.held.get(item.input.key)
            if why is None:
                kept.append(item)
            elif item.input.key in plan.invalid:
                self._recorder.warning(item.pod, decisions.REASON, why)
            else:
                self._recorder.normal(item.pod, gangs.REASON_INCOMPLETE, why)
        return kept

    def only_whole(self, outcome: v1.Outcome) -> None:
        """A gang's pods are written only when all of them are placed (the solver places a gang
        whole; this keeps it so should a pod's allocation fail to be written down)."""
        whole = gangs.whole(outcome.placed, self.plan)
        for pod_key, gang in self.plan.of_pod.items():
            if gang in whole or pod_key not in outcome.placed:
                continue
            del outcome.placed[pod_key]
            outcome.refused[pod_key] = (f"gang {gang} is placed whole or not at all: not every "
                                        "pod of it could be allocated",)  # fmt: skip

    def lift(self, written: Mapping[str, str], by_key: Mapping[str, v1inputs.Pending]) -> None:
        """Lift the gate of every pod of each gang whose pods of this cycle are all written
        (with its pods allocated in an earlier cycle), and say where the gang went."""
        for name in sorted(gangs.whole(written, self.plan)):
            gang = self.plan.gangs[name]
            text = v1gangs.placed_text(gang, written)
            pods = [by_key[k].pod for k in gang.pods] + self.plan.gates_held.get(name, [])
            for pod in pods:
                self._gates.lift_confined(pod, f"every pod of gang {name} is allocated")
                self._recorder.normal(pod, gangs.REASON_PLACED, text)

    def roll_back(
        self,
        snapshot: v1inputs.Snapshot,
        written: Mapping[str, str],
        by_key: Mapping[str, v1inputs.Pending],
    ) -> None:
        """A gang this cycle tried (`by_key`: its pods in the batch) whose pods were not all
        written (`written`: a write refused, a ledger conflict, or the gang not placed while
        some of its pods were allocated before, a crash between writes) gives back what was:
        the claims of its pods written this cycle and of its pods allocated before
        (`gates_held`), each deallocated (`Deallocator`; those drasat allocated:
        `releasing.deallocates`). Their gates are all still held, so no pod has used them; a
        claim some pod was reserved for meanwhile is kept. The gang is placed again, whole, at a
        later cycle."""
        for name, gang in sorted(self.plan.gangs.items()):
            if not all(k in by_key for k in gang.pods) or all(k in written for k in gang.pods):
                continue
            if not any(k in written for k in gang.pods) and not self.plan.gates_held.get(name):
                continue  # nothing was allocated: nothing to give back
            pods = [by_key[k].pod for k in gang.pods if k in written]
            pods += self.plan.gates_held.get(name, [])
            claims = _allocated_claims(snapshot, pods)
            for claim in claims:
                self._writes.confined(
                    v1inputs.claim_ref(claim), [claim], self._give_back, claim, name,
                    snapshot.classes,
                )  # fmt: skip
            failed = ", ".join(k for k in gang.pods if k not in written)
            text = (f"gang {name}: {failed} could not be allocated or written; the "
                    "allocations of its other pods were given back: the gang is placed again "
                    "whole")  # fmt: skip
            for pod in [by_key[k].pod for k in gang.pods] + self.plan.gates_held.get(name, []):
                self._recorder.normal(pod, gangs.REASON_ROLLED_BACK, text)

    def _give_back(self, claim: Obj, gang: str, classes: Mapping[str, Obj]) -> bool:
        """Deallocate a claim of a gang that could not be written whole (read fresh: it was
        written this cycle), unless a pod was reserved for it meanwhile."""
        meta = claim["metadata"]
        fresh = self._deallocator.api.get(
            r.RESOURCE_CLAIMS_V1, meta["name"], namespace=meta["namespace"]
        )
        if fresh["metadata"].get("uid") != meta.get("uid"):
            return False

        def unused(found: Obj) -> bool:
            return releasing.deallocates(found, classes) and not v1inputs.reserved_pods(found)

        if not unused(fresh):
            return False
        why = f"gang {gang} could not be written whole"
        return self._deallocator.deallocate(fresh, unused, why)


def _allocated_claims(snapshot: v1inputs.Snapshot, pods: Iterable[Obj]) -> list[Obj]:
    """The claims of drasat's the pods name (each once), as the snapshot has them; a claim
    written this cycle counts whatever its snapshot status."""
    out: dict[str, Obj] = {}
    for pod in pods:
        namespace = str(pod["metadata"].get("namespace", ""))
        for name in v1inputs.pod_claim_names(pod):
            claim = snapshot.claims.get(f"{namespace}/{name}") if name else None
            if claim is not None and v1inputs.is_ours(claim, snapshot.classes):
                out.setdefault(v1inputs.claim_ref(claim), claim)
    return list(out.values())
