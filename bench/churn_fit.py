"""Which churn claims fit when they arrived (bench.kube_alloc's churn phase, after the run).

A claim fits at its arrival when the devices held at its creation leave room for it on some
node: held are the claims bound at or before that moment whose pods were not yet deleted, each
with the devices its allocation actually holds (from the run's record). Departures count at the
pod's deletion, when the workload gives the devices back; what the allocator then takes to
notice that (deallocation, its ledger) is the allocator's to answer for, so a claim that waits
for it still counts as fitting.

The judge is drasat's own allocation (`drasat.v1.allocate` over the slices drasat's node plugin
publishes for the fleet, the held claims entered in each node's ledger as the controller reads
them back from a claim's status): pure and offline, with no API server. MIG layouts are those
drasat's partitionable devices allow: any free placement of any profile, so a GPU with no MIG
device held may be split anew. Claims refused for latency that were bound after their verdict
held devices for a moment that no record shows; they are left out of the held set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drasat.api.groups import DRIVER_NAME
from drasat.api.nas import AllocatedDevices
from drasat.solver import Mode, SolveParams
from drasat.v1 import Node, PodInput, allocate, nasinventory, results, slices

Obj = dict[str, Any]
NAMESPACE = "churn"


@dataclass(frozen=True)
class Held:
    """One claim of the run, as recorded: times in seconds from the churn's start."""

    name: str
    kind: str  # the ResourceClaimTemplate it was made from
    created: float
    bound: float | None
    deleted: float | None
    results: tuple[Obj, ...]  # its allocation's results (empty when none was recorded)

    @classmethod
    def of(cls, name: str, recorded: Obj) -> Held:
        return cls(
            name=name,
            kind=str(recorded["kind"]),
            created=float(recorded["created"]),
            bound=recorded.get("bound"),
            deleted=recorded.get("deleted"),
            results=tuple(recorded.get("results") or ()),
        )

    def holds_at(self, moment: float) -> bool:
        """Whether its devices were held at `moment`: bound by then, its pod not yet deleted."""
        if not self.results or self.bound is None or self.bound > moment:
            return False
        return self.deleted is None or self.deleted > moment


def _claim(name: str, spec: Obj | None = None, found: Sequence[Obj] = ()) -> Obj:
    claim: Obj = {"metadata": {"uid": name, "namespace": NAMESPACE, "name": name}}
    if spec is not None:
        claim["spec"] = spec
    if found:
        claim["status"] = {"allocation": {"devices": {"results": list(found)}}}
    return claim


class Judge:
    """drasat's allocation over a fleet's published slices: does a claim fit beside others?"""

    def __init__(
        self,
        published: Mapping[str, Sequence[Obj]],
        templates: Mapping[str, Obj],
        classes: Mapping[str, Obj],
    ) -> None:
        """`published`: node -> its ResourceSlices; `templates`: name -> ResourceClaimTemplate;
        `classes`: name -> DeviceClass."""
        self.read: dict[str, slices.NodeDevices] = {}
        for node, found in published.items():
            devices = slices.read_node(node, found)
            if devices.read is None:
                raise ValueError(f"node {node}: its slices cannot be read: {devices.problem}")
            self.read[node] = devices
        self.specs = {name: body["spec"]["spec"] for name, body in templates.items()}
        self.classes = classes
        self.params = SolveParams(mode=Mode.online, explain=False)

    def fits(self, kind: str, held: Sequence[Held]) -> bool:
        """Whether a claim from template `kind` is placed on some node beside `held`."""
        nodes = []
        for name, devices in self.read.items():
            assert devices.read is not None
            state = devices.read.state
            entries: dict[str, AllocatedDevices] = {}
            for claim in held:
                ours = [
                    r
                    for r in claim.results
                    if r.get("pool") == name and r.get("driver") == DRIVER_NAME
                ]
                if ours:
                    entries.update(
                        results.ledger_from_status(_claim(claim.name, found=ours), state.devices)
                    )
            if entries:
                allocated = state.ledger.with_allocated(nasinventory.allocations_of(entries))
                state = dataclasses.replace(state, ledger=allocated)
            nodes.append(Node(state, tuple(devices.read.devices.values())))
        claim = _claim("arriving", self.specs[kind])
        pod = PodInput(key=f"{NAMESPACE}/arriving", namespace=NAMESPACE, claims=(claim,))
        outcome = allocate(nodes, [pod], self.classes, params=self.params)
        if outcome.failed:
            raise RuntimeError(f"drasat's allocation failed on {kind}: {outcome.failed}")
        return bool(outcome.placed)


def fit_at_arrival(judge: Judge, claims: Mapping[str, Obj]) -> dict[str, bool]:
    """Per claim of a run (`claims_held` of bench.kube_alloc's churn), whether it fit when it
    arrived."""
    every = [Held.of(name, recorded) for name, recorded in claims.items()]
    out = {}
    for claim in every:
        held = [h for h in every if h.name != claim.name and h.holds_at(claim.created)]
        out[claim.name] = judge.fits(claim.kind, held)
    return out
