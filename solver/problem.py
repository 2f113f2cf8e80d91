"""The solver's input and output: a placement problem and its solution.

Plain frozen dataclasses over the API types and the solver's own claim specification
(`claimspec`), node model (`nodemodel`) and ledger (`ledger`). A problem holds nodes (their
devices and existing allocations, which are never moved), pods (each with one or more claims)
and the policy. The solver turns it into a Solution; it never does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from drasat.api.policy import AllocationPolicySpec, WorkloadShape
from drasat.solver.claimspec import DeviceDemand, GpuDemand, MigDemand
from drasat.solver.ledger import Allocation, Ledger
from drasat.solver.nodemodel import NodeDevices

if TYPE_CHECKING:
    from drasat.solver.cache import SolverCache


@dataclass(frozen=True)
class NodeState:
    """One node as the solver sees it."""

    name: str
    #: What the node has (`nodemodel`), built at the edge from what was read: its slices, a
    #: `Cluster`, a NAS's allocatableDevices (`drasat.v1.nasinventory`).
    devices: NodeDevices = field(default_factory=NodeDevices)
    #: What its devices already hold (`ledger`): allocations (existing, never moved); prepared
    #: claims without an allocation and orphan MIG devices count as busy (inventory). Built at
    #: the edge from the node's ledger record (`drasat.v1.nasinventory`).
    ledger: Ledger = field(default_factory=Ledger)
    #: False: the node is unsuitable for every claim (NAS missing or NotReady).
    ready: bool = True
    unready_reason: str = ""
    #: CPU/memory capacity and use, when modelled (trace replay); None: not a constraint.
    cpu_milli: int | None = None
    memory_mib: int | None = None
    used_cpu_milli: int = 0
    used_memory_mib: int = 0
    labels: tuple[tuple[str, str], ...] = ()
    #: What is left of each amount other drivers' devices draw on (`DeviceDemand`): a device
    #: taken whole (1), a capacity of a device several claims share, a shared counter; by
    #: name, unique in the cluster. Empty: the node has none of them.
    amounts: tuple[tuple[str, int], ...] = ()
    #: Device claims (`DeviceDemand`) allocated here already: no NAS entry holds them, and a
    #: pod of one of them goes here (as `allocatedClaims` pins a GPU claim's pods).
    device_claims: frozenset[str] = frozenset()


#: A device in the solver's terms: (GPU uuid, None, None) for a whole GPU or a share, (parent
#: uuid, profile, start) for a MIG placement, (key, None, None) for another driver's device
#: (`DeviceDemand`).
DeviceKey = tuple[str, str | None, int | None]


@dataclass(frozen=True)
class DeviceConstraint:
    """A constraint over the devices several claims of one pod take (a v1 claim's
    `matchAttribute` or `distinctAttribute`, or one request's devices being distinct): the
    claims with the same `key` form one group, and every device they take has a value here.

    match: every device the group takes has the same value; distinct: no two have the same;
    evenly: every value the group takes is taken by as many of its devices (the node plugin's
    one compute limit per GPU for a claim's shares). A device without a value is never taken
    by a claim of the group (upstream: a device without the attribute fails the constraint)."""

    key: str
    distinct: bool
    #: This claim's devices and their values (compared for equality only), sorted.
    values: tuple[tuple[DeviceKey, str], ...]
    #: The constraint in user terms, for explanations (`matchAttribute gpu.drasat.io/uuid`).
    label: str = ""
    #: Instead of match or distinct: evenly (see above).
    evenly: bool = False

    def value_of(self) -> dict[DeviceKey, str]:
        return dict(self.values)


@dataclass(frozen=True)
class ClaimRequest:
    """A ResourceClaim of ours with what it asks for: exactly one of gpu, mig or device, each
    wing's parameters converted at its edge (`claimspec`)."""

    uid: str
    namespace: str
    name: str
    gpu: GpuDemand | None = None
    mig: MigDemand | None = None
    #: From the class's DeviceClassParameters.sharable: may several pods use this claim.
    shareable: bool = True
    #: The GPUs (by UUID; for a MIG claim its parent GPUs) this claim may use at all, decided by
    #: the caller from what the solver cannot read (a v1 request's CEL selectors, evaluated on
    #: the published devices); None: every GPU its selector matches. Intersected with it.
    eligible: frozenset[str] | None = None
    #: Claims of one pod with the same key go on one GPU (a v1 claim's MIG devices constrained
    #: to one parent); None: no such constraint.
    same_gpu: str | None = None
    #: A MIG claim: the MIG devices it may take, each (parent GPU UUID, profile, start),
    #: decided by the caller (a v1 request's selectors on the MIG devices' own attributes);
    #: None: every placement of its profile. With no profile, any device listed here (a v1
    #: request of several MIG devices whose selectors admit several profiles).
    placements: frozenset[tuple[str, str, int]] | None = None
    #: Constraints with other claims of the pod on the devices taken (see DeviceConstraint).
    constraints: tuple[DeviceConstraint, ...] = ()
    #: Share claims with the same key are the shares of one ResourceClaim (a v1 claim's), which
    #: the node plugin prepares as one: spread over several GPUs, they take GPUs no other share
    #: claim of their namespace uses (one MPS daemon per set of GPUs). None: a claim of its own.
    share_group: str | None = None
    #: Other drivers' devices instead of a GPU or MIG device (a v1 claim's request of them).
    device: DeviceDemand | None = None

    def __post_init__(self) -> None:
        if sum(spec is not None for spec in (self.gpu, self.mig, self.device)) != 1:
            raise ValueError(
                f"claim {self.namespace}/{self.name}: exactly one of gpu, mig or device"
            )


@dataclass(frozen=True)
class PodRequest:
    """A pod with the claims it needs; all of a pod's claims land on one node.

    A claim may appear in several pods (a shared claim): it is allocated once and every pod using
    it goes to its node. A claim already in some node's allocatedClaims pins its pods there.
    """

    key: str  # "namespace/name"
    namespace: str
    claims: tuple[ClaimRequest, ...]
    priority: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    #: PodSchedulingContext potentialNodes (and selectedNode); None: every node is a candidate.
    candidate_nodes: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Gang:
    """Pods placed all-or-nothing (`solver.gangs`): every pod of `pods` or none. A gang with a
    pod not in the problem is placed not at all. `topology_key`: a node label whose value all
    its pods share (`required`), or whose values it spreads over as few as it can (not
    `required`); None: any nodes."""

    name: str
    pods: tuple[str, ...]
    topology_key: str | None = None
    required: bool = True


@dataclass(frozen=True)
class Problem:
    nodes: tuple[NodeState, ...]
    pods: tuple[PodRequest, ...]
    policy: AllocationPolicySpec = field(default_factory=AllocationPolicySpec)
    #: Gangs among `pods`, each placed whole or not at all (`solver.gangs`): in batch mode in
    #: the one model; online, at its first pod's turn, by itself (`placement._gang`).
    gangs: tuple[Gang, ...] = ()
    #: The fragmentation term's target workload (claim shapes with weights) when the caller
    #: knows more than this problem's pods: the controller passes the shapes the cluster holds
    #: and awaits (`workload.estimate`), a replay the trace's distribution. None: estimated
    #: from `pods`. A `workload` list in the policy's fragmentation term takes precedence.
    workload: tuple[WorkloadShape, ...] | None = None


class Mode(StrEnum):
    #: One pod at a time in the given order, each decision final before the next (the controller).
    online = "online"
    #: All pods in one model, time-limited (what-if, look-ahead).
    batch = "batch"


@dataclass(frozen=True)
class SolveParams:
    mode: Mode = Mode.batch
    #: Override the policy's budget (None: use policy.solver).
    time_limit_s: float | None = None
    workers: int | None = None
    #: `time.monotonic()` by which the solve must return: a caller's limit for a whole run of
    #: several steps (the what-if's reading, rounds and output within the policy's time limit).
    #: Batch mode gives CP-SAT only what is left of it, less the time the explanations of
    #: the pods the warm start left out will take and a tenth for the caller's work after it;
    #: None: the time limit alone.
    deadline: float | None = None
    #: Compute explanations for unplaced pods (costs extra solves).
    explain: bool = True
    #: Also report, for each candidate node, why it is unsuitable (UnsuitableNodes); in batch
    #: mode as each pod alone finds the nodes, before the solve's own placements.
    node_feasibility: bool = False
    #: The caller's memo tables (`drasat.solver.SolverCache`): a long-running caller (the
    #: controller) keeps one and passes it to every solve; None: a fresh one per solve. Never
    #: changes an answer, only how much is computed again.
    cache: SolverCache | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class PodPlacement:
    pod: str
    node: str
    #: New allocations for this pod's claims: claim uid -> what it takes (`ledger`; the edge
    #: writes it as the node's ledger record). A claim that was already allocated (or placed
    #: earlier for another pod) is not repeated.
    allocations: dict[str, Allocation]
    #: New device claims (`DeviceDemand`): claim uid -> the keys of the devices taken. Not
    #: ledger entries: other drivers' devices are in no ledger of ours.
    devices: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class PodRejection:
    pod: str
    #: Why, in user terms, naming the blocking constraint (selector, count, MIG overlap, rule).
    reasons: tuple[str, ...]


class Status(StrEnum):
    """What is known about a solution. Only OPTIMAL claims optimality for the whole problem."""

    #: CP-SAT proved the solution optimal for the whole problem (batch mode, over a model that
    #: held every node each pod fits on).
    OPTIMAL = "OPTIMAL"
    #: Online mode: each pod's node and devices are proven the best among its candidate nodes,
    #: given the pods decided before it. Nothing is proven for the set: a batch solve of the same
    #: pods may place more.
    PER_POD_OPTIMAL = "PER_POD_OPTIMAL"
    #: A valid solution, optimality not proven (a time limit, or a reduced model).
    FEASIBLE = "FEASIBLE"
    INFEASIBLE = "INFEASIBLE"
    UNKNOWN = "UNKNOWN"
    MODEL_INVALID = "MODEL_INVALID"

    @property
    def meaning(self) -> str:
        """What the status proves, in words (the what-if, logs and metrics docs quote it)."""
        return _MEANINGS[self]


_MEANINGS = {
    Status.OPTIMAL: "proven optimal for the whole set",
    Status.PER_POD_OPTIMAL: "each pod optimal among its candidate nodes, given the pods before "
    "it; not proven for the whole set",
    Status.FEASIBLE: "not proven optimal",
    Status.INFEASIBLE: "proven infeasible",
    Status.UNKNOWN: "no solution found",
    Status.MODEL_INVALID: "the model was invalid",
}


@dataclass(frozen=True)
class Solution:
    status: Status
    placements: tuple[PodPlacement, ...]
    unplaced: tuple[PodRejection, ...]
    objective: float = 0.0
    #: A proven bound on the objective for the whole problem; None: no bound is known (online
    #: mode, or a batch model that left out nodes).
    best_bound: float | None = None
    #: Relative gap between objective and bound (0 when proven optimal); None without a bound.
    gap: float | None = None
    wall_time_s: float = 0.0
    #: node_feasibility=True: pod -> node -> None (suitable) or the reason it is unsuitable.
    node_feasibility: dict[str, dict[str, str | None]] = field(default_factory=dict)
    #: Batch mode answered with its first pass (each pod in turn on the best node left), the
    #: first feasible answer: the caller's deadline left no time to build and search the model.
    first_pass: bool = False

    def placement_of(self, pod: str) -> PodPlacement | None:
        return next((p for p in self.placements if p.pod == pod), None)

    def optimality_text(self) -> str:
        """The status and what it proves, e.g. `PER_POD_OPTIMAL (each pod optimal ...)`."""
        return f"{self.status.value} ({self.status.meaning})"

    def bound_text(self) -> str:
        """`best bound B, gap G%`, or `no bound`."""
        return bound_text(self.best_bound, self.gap, self.status)


#: What a FEASIBLE solve whose bound it reached proved: its bound is of the first objective
#: level (pods placed, weighted by priority), not of the preferences among nodes.
PLACEMENTS_PROVEN = "the pods placed proven the most possible, the choice of nodes not proven"


def bound_text(best_bound: float | None, gap: float | None, status: Status | None = None) -> str:
    """`best bound B, gap G%`, or `no bound` (for copies of a Solution's fields).

    A gap of 0 is shown only for what is proven optimal: a FEASIBLE solution that reached its
    bound reached it on the placements alone (`PLACEMENTS_PROVEN`), and a gap too small to show
    in two decimals reads `gap < 0.01%`."""
    if best_bound is None:
        return "no bound"
    text = f"best bound {best_bound:g}"
    if gap is None:
        return text
    if gap <= 0 and status is not None and status is not Status.OPTIMAL:
        return f"{text}, {PLACEMENTS_PROVEN}"
    if 0 < gap < 0.00005:
        return f"{text}, gap < 0.01%"
    return f"{text}, gap {gap:.2%}"
