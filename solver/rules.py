"""The policy as the model uses it: term weights, eligibility rules, and cluster-wide budgets.

A purely computational module. Budgets count what existing allocations already hold:

- namespace limit: `maxGpus` counts every GPU a claim holds (whole or share), `maxMigSlices` the
  memory slices of its MIG devices; a glob limit applies to each matching namespace on its own.
- reservation with `count`: claims of other namespaces may touch a covered GPU only while at least
  `count` covered GPUs stay untouched by other namespaces (free, or used by the listed ones).
- reservation without `count`: covered GPUs serve the listed namespaces only (an eligibility rule).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from drasat.api.policy import AllocationPolicySpec, NamespaceLimit, Reservation, Term
from drasat.solver import demand
from drasat.solver.cache import SolverCache, fresh
from drasat.solver.demand import Claim
from drasat.solver.inventory import GpuSlot, NamespaceUse, NodeView
from drasat.solver.workload import Workload


@dataclass(frozen=True)
class Weights:
    binpack: int = 0
    spread: int = 0
    fragmentation: int = 0
    prefer_node: int = 0
    prefer_product: int = 0
    mig_waste: int = 1
    topology: int = 8


@dataclass(frozen=True)
class LimitBudget:
    """What one namespace may still take under one namespace limit."""

    label: str  # "namespace limit team-b maxGpus=4"
    namespace: str
    gpus_left: int | None
    mig_slices_left: int | None


@dataclass(frozen=True)
class ReservationBudget:
    reservation: Reservation
    #: How many more covered GPUs other namespaces may touch.
    left: int

    @property
    def label(self) -> str:
        return f"policy rule {self.reservation.name}"


#: SolverCache.node_classes (policy fingerprint -> node name -> Rules.node_class, and its
#: interned number): policies and nodes change rarely; a solve looks each of its nodes up once
#: per pod. Nodes per policy, and policies, kept before the tables start afresh:
_NODE_CLASS_MEMO_SIZE = 65536
_NODE_CLASS_POLICIES = 64


class Rules:
    """Policy facts for one solve: built once from the policy and every node's view."""

    def __init__(
        self,
        policy: AllocationPolicySpec,
        views: tuple[NodeView, ...],
        cache: SolverCache | None = None,
    ) -> None:
        #: The caller's memo tables (see cache.py); the views must be numbered by it too for
        #: memo hits (views of another cache only miss).
        self.cache = fresh(cache)
        self.policy = policy
        self.weights = _weights(policy)
        self.prefer_nodes = [g for t in policy.objective if t.nodes for g in t.nodes]
        self.prefer_products = [g for t in policy.objective if t.products for g in t.products]
        self.hard_reservations = [r for r in policy.rules.reservations if r.count is None]
        self.counted_reservations = [r for r in policy.rules.reservations if r.count is not None]
        # Only limits read the cluster-wide use; skip the walk over every node without them.
        limited = bool(policy.rules.namespaceLimits)
        self.namespace_use = _total_use(views) if limited else {}
        self.reservation_left = {
            r.name: _reservation_left(r, views, self.cache) for r in self.counted_reservations
        }
        #: Identifies the policy in memo keys.
        self.fingerprint = policy.model_dump_json()
        self._classes, self._class_ids = self.cache.class_tables(self.fingerprint)
        #: Some reservation selects GPUs by index or uuid: whether a claim may use a GPU then
        #: depends on which GPU it is, not only on its state (memo keys must hold identities).
        self.names_gpus = any(demand.names_gpu(r.selector) for r in policy.rules.reservations)
        #: The fragmentation term's target workload (`workload.py`); empty: the term charges
        #: only opening untouched GPUs and blocking MIG placements. Set by `placement.solve`.
        self.workload = Workload.empty()

    def node_class_id(self, node: str) -> int:
        """node_class as a small number (memo keys)."""
        found = self._class_ids.get(node)
        if found is None:
            found = self.cache.intern(self.node_class(node))
            self._class_ids[node] = found
        return found

    def node_class(self, node: str) -> tuple[bool, ...]:
        """What the policy says about a node by its name (preferred, in each reservation)."""
        found = self._classes.get(node)
        if found is None:
            covered = [
                any(fnmatch.fnmatchcase(node, g) for g in r.nodes)
                for r in self.policy.rules.reservations
            ]
            found = (self.prefers_node(node), *covered)
            full = len(self.cache.node_classes) > _NODE_CLASS_POLICIES
            if len(self._classes) > _NODE_CLASS_MEMO_SIZE or full:
                # Start afresh (tables other solves hold stay valid: detached, not cleared).
                self._classes, self._class_ids = self.cache.class_tables(
                    self.fingerprint, fresh=True
                )
            self._classes[node] = found
        return found

    # -- eligibility ----------------------------------------------------------------------------

    def blocking_rule(self, claim: Claim, gpu: GpuSlot) -> str | None:
        """The policy rule that forbids this claim this GPU, as named in explanations."""
        globs = demand.allowed_products(claim.namespace, self.policy)
        if not demand.product_allowed(gpu.info.productName, globs):
            return f"policy allowedProducts: namespace {claim.namespace} may use only " + (
                ", ".join(globs or [])
            )
        for reservation in self.hard_reservations:
            if demand.reservation_covers(reservation, gpu) and not demand.reserved_for(
                reservation, claim.namespace
            ):
                return f"policy rule {reservation.name}"
        return None

    # -- budgets --------------------------------------------------------------------------------

    def limits_for(self, namespace: str) -> list[LimitBudget]:
        """What the namespace may still take under every limit that matches it."""
        return [
            self._budget(limit, namespace)
            for limit in self.policy.rules.namespaceLimits
            if fnmatch.fnmatchcase(namespace, limit.namespace)
        ]

    def _budget(self, limit: NamespaceLimit, namespace: str) -> LimitBudget:
        used = self.namespace_use.get(namespace, NamespaceUse())
        parts = []
        if limit.maxGpus is not None:
            parts.append(f"maxGpus={limit.maxGpus}")
        if limit.maxMigSlices is not None:
            parts.append(f"maxMigSlices={limit.maxMigSlices}")
        return LimitBudget(
            label=f"namespace limit {namespace} {' '.join(parts)}",
            namespace=namespace,
            gpus_left=None if limit.maxGpus is None else max(0, limit.maxGpus - used.gpus),
            mig_slices_left=None
            if limit.maxMigSlices is None
            else max(0, limit.maxMigSlices - used.mig_slices),
        )

    def reservation_budgets(self, namespace: str) -> list[ReservationBudget]:
        """Counted reservations that restrict this namespace, with what is left of each."""
        return [
            ReservationBudget(r, max(0, self.reservation_left[r.name]))
            for r in self.counted_reservations
            if not demand.reserved_for(r, namespace)
        ]

    def spend(self, namespace: str, gpus: int, mig_slices: int, opened: list[GpuSlot]) -> None:
        """Count a new placement against the budgets (online mode, decision by decision).

        `opened`: the GPUs it touched that were untouched before.
        """
        before = self.namespace_use.get(namespace, NamespaceUse())
        self.namespace_use[namespace] = NamespaceUse(
            before.gpus + gpus, before.mig_slices + mig_slices
        )
        for reservation in self.counted_reservations:
            if demand.reserved_for(reservation, namespace):
                continue
            covered = sum(1 for g in opened if demand.reservation_covers(reservation, g))
            self.reservation_left[reservation.name] -= covered

    def prefers_node(self, node: str) -> bool:
        return any(fnmatch.fnmatchcase(node, g) for g in self.prefer_nodes)

    def prefers_product(self, gpu: GpuSlot) -> bool:
        name = gpu.info.productName.lower()
        return any(fnmatch.fnmatchcase(name, g.lower()) for g in self.prefer_products)


def _weights(policy: AllocationPolicySpec) -> Weights:
    weight: dict[Term, int] = {}
    for term in policy.objective:
        weight[term.term] = weight.get(term.term, 0) + term.weight
    return Weights(
        binpack=weight.get(Term.binpack, 0),
        spread=weight.get(Term.spread, 0),
        fragmentation=weight.get(Term.fragmentation, 0),
        prefer_node=weight.get(Term.preferNode, 0),
        prefer_product=weight.get(Term.preferProduct, 0),
        # Least MIG waste is preferred even when the policy does not name the term.
        mig_waste=weight.get(Term.minimizeMigWaste, 1),
    )


def _total_use(views: tuple[NodeView, ...]) -> dict[str, NamespaceUse]:
    total: dict[str, NamespaceUse] = {}
    for view in views:
        for namespace, use in view.namespace_use.items():
            before = total.get(namespace, NamespaceUse())
            total[namespace] = NamespaceUse(
                before.gpus + use.gpus, before.mig_slices + use.mig_slices
            )
    return total


def _reservation_left(
    reservation: Reservation, views: tuple[NodeView, ...], cache: SolverCache
) -> int:
    # Existing allocations do not say which GPU an outsider touched beyond the GPU itself, so a
    # covered GPU that is not untouched counts as touched: conservative for the reserved teams.
    rule = reservation.model_dump_json()
    untouched = 0
    for view in views:
        key = (rule, view.name, view.exact_key)
        # SolverCache.untouched_covered: online sees the same hundreds of nodes every decision.
        count = cache.untouched_covered.get(key)
        if count is None:
            count = sum(
                1 for g in view.gpus if g.untouched and demand.reservation_covers(reservation, g)
            )
            cache.put(cache.untouched_covered, key, count)
        untouched += count
    return untouched - (reservation.count or 0)
