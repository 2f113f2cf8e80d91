"""AllocationPolicy (`policy.drasat.io/v1alpha1`): what the solver optimizes and must respect.

- objective terms with weights, applied after "place as many pods as possible" (by priority);
- hard rules: device reservations, per-namespace limits, allowed products per namespace;
- solver budget; lifecycle init/cleanup actions from a fixed vocabulary (never a command);
- optionally, the fragmentation term's target workload: the claim shapes the free capacity should
  keep serving, with weights (`ObjectiveTerm.workload`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, WithJsonSchema, model_validator

from drasat.api import groups, limits
from drasat.api.base import Object, Spec
from drasat.api.cluster import CpuQuantity, cpu_millis
from drasat.api.quantity import Quantity, to_bytes
from drasat.api.selectors import GpuSelector
from drasat.api.sharing import GpuShare

_CPU_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
    "description": "A Kubernetes CPU quantity, e.g. 4 or 500m.",
}
Cpu = Annotated[CpuQuantity, WithJsonSchema(_CPU_SCHEMA)]


class Term(StrEnum):
    binpack = "binpack"  # fill nodes and GPUs that are already in use
    spread = "spread"  # prefer empty nodes and GPUs
    fragmentation = "fragmentation"  # keep whole GPUs and large MIG placements free
    preferNode = "preferNode"  # prefer the listed nodes (globs)
    preferProduct = "preferProduct"  # prefer the listed products (globs)
    minimizeMigWaste = "minimizeMigWaste"  # MIG by needs: least memory/slices above the need


class WorkloadShape(Spec):
    """One class of the expected workload: pods with one GPU claim of this shape.

    The fragmentation term keeps free capacity these claims can use (FGD's measure, see
    `drasat.solver.workload`); `weight` is how common the class is relative to the others.
    """

    count: int = Field(1, ge=1, le=64, description="GPUs per claim (1 for a share).")
    share: GpuShare | None = Field(
        None, description="A partial GPU (its compute percentage is the per-GPU need)."
    )
    selector: GpuSelector | None = Field(None, description="Which GPUs the claims accept.")
    namespace: str = Field(
        "", description="Namespace whose policy rules apply (allowedProducts, reservations)."
    )
    cpu: Cpu | None = Field(None, description="CPU request of such pods, e.g. 4 or 500m.")
    memory: Quantity | None = Field(None, description="Memory request of such pods, e.g. 16Gi.")
    weight: int = Field(1, ge=1, le=1_000_000, description="Relative frequency of the class.")

    @model_validator(mode="after")
    def _share_is_one_gpu(self) -> WorkloadShape:
        if self.share is not None and self.count != 1:
            raise ValueError("a share shape takes part of one GPU: count must be 1")
        if self.share is not None and self.share.compute is None:
            raise ValueError("a share shape needs share.compute (the per-GPU need)")
        return self

    @property
    def cpu_milli(self) -> int:
        return 0 if self.cpu is None else cpu_millis(self.cpu)

    @property
    def memory_mib(self) -> int:
        return 0 if self.memory is None else -(-to_bytes(self.memory) // 2**20)


class ObjectiveTerm(Spec):
    term: Term
    weight: int = Field(1, ge=0, le=1000, description="Relative weight among the terms.")
    nodes: list[str] | None = Field(
        None, max_length=limits.MAX_POLICY_ENTRIES, description="preferNode: node name globs."
    )
    products: list[str] | None = Field(
        None, max_length=limits.MAX_POLICY_ENTRIES, description="preferProduct: product name globs."
    )
    workload: list[WorkloadShape] | None = Field(
        None,
        max_length=64,
        description="fragmentation: the claim shapes to keep capacity for, with weights; "
        "unset: estimated from the cluster's allocations and pending claims.",
    )

    @model_validator(mode="after")
    def _targets(self) -> ObjectiveTerm:
        if self.term is Term.preferNode and not self.nodes:
            raise ValueError("preferNode needs nodes (a list of node name globs)")
        if self.term is Term.preferProduct and not self.products:
            raise ValueError("preferProduct needs products (a list of product name globs)")
        if self.term not in (Term.preferNode,) and self.nodes is not None:
            raise ValueError(f"nodes is only meaningful for preferNode, not {self.term.value}")
        if self.term not in (Term.preferProduct,) and self.products is not None:
            raise ValueError(
                f"products is only meaningful for preferProduct, not {self.term.value}"
            )
        if self.term is not Term.fragmentation and self.workload is not None:
            raise ValueError(
                f"workload is only meaningful for fragmentation, not {self.term.value}"
            )
        if self.workload is not None and not self.workload:
            raise ValueError("workload needs at least one shape (or leave it unset)")
        return self


class Reservation(Spec):
    """Matching GPUs serve only the listed namespaces (all of them, or `count` of them)."""

    name: str = Field(description="Named in explanations, e.g. reserve-team-a.")
    namespaces: list[str] = Field(
        min_length=1,
        max_length=limits.MAX_POLICY_ENTRIES,
        description="Namespace globs allowed to use them.",
    )
    nodes: list[str] = Field(
        default_factory=lambda: ["*"],
        max_length=limits.MAX_POLICY_ENTRIES,
        description="Node name globs.",
    )
    selector: GpuSelector | None = Field(None, description="Which GPUs; none = every GPU.")
    count: int | None = Field(
        None, ge=1, description="Keep this many matching GPUs for them; none = all matching."
    )


class NamespaceLimit(Spec):
    namespace: str = Field(description="Namespace glob.")
    maxGpus: int | None = Field(None, ge=0, description="Whole and shared GPUs held at once.")
    maxMigSlices: int | None = Field(None, ge=0, description="MIG memory slices held at once.")

    @model_validator(mode="after")
    def _some_limit(self) -> NamespaceLimit:
        if self.maxGpus is None and self.maxMigSlices is None:
            raise ValueError("a namespace limit needs maxGpus and/or maxMigSlices")
        return self


class AllowedProducts(Spec):
    namespace: str = Field(description="Namespace glob.")
    products: list[str] = Field(
        min_length=1,
        max_length=limits.MAX_POLICY_ENTRIES,
        description="Product name globs it may use.",
    )


class Rules(Spec):
    reservations: list[Reservation] = Field(
        default_factory=list, max_length=limits.MAX_POLICY_ENTRIES
    )
    namespaceLimits: list[NamespaceLimit] = Field(
        default_factory=list, max_length=limits.MAX_POLICY_ENTRIES
    )
    allowedProducts: list[AllowedProducts] = Field(
        default_factory=list, max_length=limits.MAX_POLICY_ENTRIES
    )


class SolverBudget(Spec):
    timeLimitSeconds: float = Field(10.0, gt=0, le=3600, description="Batch solve time limit.")
    onlineTimeLimitSeconds: float = Field(
        1.0, gt=0, le=60, description="Time limit of one online (per-pod) decision."
    )
    workers: int = Field(1, ge=1, le=64, description="CP-SAT search workers.")
    randomSeed: int = Field(0, ge=0, description="Fixed so results are reproducible.")


class LifecycleActionName(StrEnum):
    setComputeMode = "setComputeMode"  # value: Default | ExclusiveProcess | Prohibited
    setTimeSlice = "setTimeSlice"  # value: Default | Short | Medium | Long
    setPowerLimitWatts = "setPowerLimitWatts"  # value: watts
    lockGpuClocksMHz = "lockGpuClocksMHz"  # value: MHz
    setPersistenceMode = "setPersistenceMode"  # value: Enabled | Disabled


class LifecycleAction(Spec):
    action: LifecycleActionName
    value: str | int
    selector: GpuSelector | None = Field(None, description="Only on GPUs that match.")


class Lifecycle(Spec):
    init: list[LifecycleAction] = Field(
        default_factory=list,
        max_length=limits.MAX_POLICY_TERMS,
        description="Applied when a claim is prepared.",
    )
    cleanup: list[LifecycleAction] = Field(
        default_factory=list,
        max_length=limits.MAX_POLICY_TERMS,
        description="Extra steps after a claim is unprepared (init "
        "actions are undone automatically).",
    )


class Gangs(Spec):
    """Pods of one gang (labels `gpu.drasat.io/gang` and `gpu.drasat.io/gang-size`) are placed
    all-or-nothing in one solve; this is where its pods may go together."""

    topologyKey: str | None = Field(
        None,
        max_length=limits.MAX_STRING,
        description="Node label whose value a gang's pods share (e.g. a rack or NVLink domain; "
        "kubernetes.io/hostname: one node); none: any nodes.",
    )
    required: bool = Field(
        True,
        description="true: a gang is placed within one value of topologyKey or not at all "
        "(nodes without the label take none of it); false: preferred, the fewest values.",
    )


class PreemptionTerm(StrEnum):
    """What a set of victims costs (`Preemption.minimize`, in that order)."""

    victims = "victims"  # how many pods are evicted
    priority = "priority"  # the sum of their priorities
    devices = "devices"  # the devices their claims hold (a share or a MIG device counts 1)


class Preemption(Spec):
    """A pending pod whose claims fit nowhere may evict running pods of lower priority that
    hold the devices it needs (docs/CONTROLLER.md, *Preemption*)."""

    enabled: bool = Field(
        True,
        description="Evict lower-priority pods for a pod that fits nowhere (pods with "
        "preemptionPolicy: Never never preempt).",
    )
    maxVictims: int = Field(4, ge=1, le=64, description="The most pods evicted for one preemptor.")
    minimize: list[PreemptionTerm] = Field(
        default_factory=lambda: [
            PreemptionTerm.victims,
            PreemptionTerm.priority,
            PreemptionTerm.devices,
        ],
        min_length=1,
        max_length=3,
        description="What the victims cost, most important first (lexicographic).",
    )

    @model_validator(mode="after")
    def _distinct_terms(self) -> Preemption:
        if len(set(self.minimize)) != len(self.minimize):
            raise ValueError("minimize lists a term twice")
        return self


class AllocationPolicySpec(Spec):
    objective: list[ObjectiveTerm] = Field(
        default_factory=lambda: [
            ObjectiveTerm(term=Term.fragmentation, weight=4),
            ObjectiveTerm(term=Term.binpack, weight=2),
            ObjectiveTerm(term=Term.minimizeMigWaste, weight=1),
        ],
        max_length=limits.MAX_POLICY_TERMS,
    )
    rules: Rules = Field(default_factory=Rules)
    namespacePriorities: dict[str, int] = Field(
        default_factory=dict,
        max_length=limits.MAX_POLICY_ENTRIES,
        description="Namespace glob -> priority of its pods (default 0).",
    )
    solver: SolverBudget = Field(default_factory=SolverBudget)
    lifecycle: Lifecycle = Field(default_factory=Lifecycle)
    gangs: Gangs = Field(default_factory=Gangs)
    preemption: Preemption = Field(default_factory=Preemption)


class AllocationPolicy(Object):
    kind: Literal["AllocationPolicy"] = "AllocationPolicy"
    apiVersion: str = groups.POLICY_API_VERSION
    spec: AllocationPolicySpec = Field(default_factory=AllocationPolicySpec)
