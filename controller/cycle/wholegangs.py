"""Gangs go whole through a cycle: the pods of an incomplete gang are held back (an Event says
why), a gang's pods are written only when all of them are placed, and drasat's gate is lifted
from all of them together once all are written. Which pods form a gang, and the batch that counts
a gang whole, are `controller.gangs`'s (purely computational).
"""

from __future__ import annotations

from collections.abc import Mapping

from drasat import v1
from drasat.api.policy import AllocationPolicySpec
from drasat.controller import decisions, gangs, v1inputs
from drasat.controller.cycle.gates import Gates
from drasat.kube.client import Obj
from drasat.kube.events import EventRecorder
from drasat.v1 import gangs as v1gangs


class WholeGangs:
    """This cycle's gangs (`plan`), kept whole from the solve to the gates."""

    def __init__(self, *, recorder: EventRecorder, gates: Gates) -> None:
        self._recorder = recorder
        self._gates = gates
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
        plan = gangs.plan(snapshot.pods, [p.input.key for p in everyone], waiting, ungate, policy)
        self.plan = plan
        for pods in plan.gates_held.values():
            for pod in pods:
                ungate.pop(v1inputs.pod_key(pod), None)
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
