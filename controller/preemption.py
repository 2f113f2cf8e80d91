"""Preemption in the v1 controller: a refused pod evicts the lower-priority pods the solver
chooses, and the devices they free are held for it until it is placed.

After a cycle's refusals, `Preempter.consider` asks `drasat.v1.preemption.plan` (the solver's
choice, with the allocator as the fit check) for each refused pod that may preempt: preemption
enabled by the policy, a priority above some running pod's, and not `preemptionPolicy: Never`.
The running pods of lower priority holding drasat's claims are the candidates; each
PodDisruptionBudget allows at most its `status.disruptionsAllowed` of its pods. The victims are
evicted through the Eviction API (the API server refuses an eviction a budget does not allow:
429), with an Event on the preemptor naming the victims (`Preempting`) and one on each victim
naming the preemptor (`Preempted`).

A nomination then holds the freed claims' devices for the preemptor: every other pod is placed
over nodes whose ledger keeps those devices taken (`hold`), while the preemptor is placed first,
without them, in a solve of its own (`split`), as soon as the victims' claims are given back. A
nomination ends when the preemptor is no longer pending (placed, or deleted) or after
`NOMINATION_TTL_S`. An eviction refused by a budget ends the nomination at once and keeps that
victim out of the preemptor's next plan for `REFUSED_TTL_S`: it picks again, the victims already
evicted counting as leaving (their claims are freed in the next plan, at no cost).

Nominations live in this process: a restarted controller or a new leader finds the victims gone
and the devices free, and places the preemptor in its first cycle if no older pod takes them.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from drasat.api import nodefit
from drasat.api.nas import AllocatedDevices
from drasat.api.policy import AllocationPolicySpec
from drasat.controller import v1inputs
from drasat.kube import errors, eviction
from drasat.kube.client import Api, Obj
from drasat.kube.events import EventRecorder
from drasat.v1 import Node, preemption
from drasat.v1.preemption import Running

log = logging.getLogger(__name__)

REASON_PREEMPTING = "Preempting"
REASON_PREEMPTED = "Preempted"
REASON_REFUSED = "PreemptionRefused"
#: How long the devices stay held for a preemptor that has not been placed.
NOMINATION_TTL_S = 300.0
#: How long a victim whose eviction a budget refused stays out of that preemptor's plans.
REFUSED_TTL_S = 60.0
#: How long a pod that could not preempt waits before it is planned again (a plan over a large
#: cluster takes a fraction of a second: not every cycle for every refused pod).
RETRY_S = 30.0


@dataclass
class Nomination:
    """Devices held for a preemptor while its victims leave."""

    preemptor: str
    node: str
    victims: tuple[str, ...]
    #: The freed claims' ledger entries, kept taken for every other pod.
    held: Mapping[str, AllocatedDevices]
    since: float


@dataclass
class Preempter:
    api: Api
    recorder: EventRecorder
    clock: Callable[[], float] = time.monotonic
    may_write: Callable[[], bool] = lambda: True
    nominations: dict[str, Nomination] = field(default_factory=dict)
    #: preemptor -> victim -> until when it is not evicted for it again (a budget refused).
    _refused: dict[str, dict[str, float]] = field(default_factory=dict)
    _budgets_said: bool = False
    #: preemptor -> why it could not preempt, as last logged, and when.
    _said: dict[str, tuple[str, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # The cycle's hooks.
    def split(
        self, everyone: Sequence[v1inputs.Pending], batch: Sequence[v1inputs.Pending]
    ) -> tuple[list[v1inputs.Pending], list[v1inputs.Pending]]:
        """The nominated preemptors among every pending pod (placed first, over the devices
        held for them, whether the batch holds them or not) and the rest of the batch.
        Nominations whose preemptor is no longer pending, or that expired, end here."""
        keys = {p.input.key for p in everyone}
        now = self.clock()
        for key, found in list(self.nominations.items()):
            if now - found.since > NOMINATION_TTL_S:
                log.info("preemption for %s: its devices on %s are no longer held (%.0fs)",
                         key, found.node, NOMINATION_TTL_S)  # fmt: skip
                del self.nominations[key]
            elif key not in keys:
                del self.nominations[key]  # placed (its claims are allocated) or gone
        self._said = {k: v for k, v in self._said.items() if k in keys}
        self._refused = {k: v for k, v in self._refused.items() if k in keys}
        first = [p for p in everyone if p.input.key in self.nominations]
        rest = [p for p in batch if p.input.key not in self.nominations]
        return first, rest

    def hold(self, nodes: Sequence[Node], placing: Iterable[str]) -> list[Node]:
        """The nodes with the devices held for every nominated preemptor not in `placing`."""
        placing = set(placing)
        held: dict[str, dict[str, AllocatedDevices]] = {}
        for found in self.nominations.values():
            if found.preemptor not in placing:
                held.setdefault(found.node, {}).update(found.held)
        return [preemption.hold(n, held[n.state.name]) if n.state.name in held else n
                for n in nodes]  # fmt: skip

    def consider(
        self,
        snapshot: v1inputs.Snapshot,
        nodes: Sequence[Node],
        refused: Sequence[v1inputs.Pending],
        policy: AllocationPolicySpec,
    ) -> int:
        """Preempt for the refused pods that may; how many preemptors got victims. A failure
        here is logged and never stops the cycle (the pods stay refused, tried again next)."""
        try:
            return self._consider(snapshot, nodes, refused, policy)
        except errors.KubeError as error:
            log.warning("preemption: %s", error)
        except Exception:
            log.exception("preemption failed")
        return 0

    def _consider(
        self,
        snapshot: v1inputs.Snapshot,
        nodes: Sequence[Node],
        refused: Sequence[v1inputs.Pending],
        policy: AllocationPolicySpec,
    ) -> int:
        if not policy.preemption.enabled:
            return 0
        wanting = [p for p in refused if self._may_preempt(p)]
        if not wanting:
            return 0
        running, users, leaving = running_pods(snapshot)
        lowest = min((r.priority for r in running), default=None)
        wanting = [p for p in wanting if lowest is not None and p.input.priority > lowest]
        if not wanting:
            return 0
        read = self._budgets(snapshot)
        labels = {v1inputs.pod_key(p): (p.get("metadata") or {}) for p in snapshot.pods}
        running = [_with_budgets(r, labels[r.key], read) for r in running]
        allowance = {name: allowed for name, (_, _, allowed) in read.items()}
        # Claims of pods already leaving are freed in the plans, unless held for a preemptor.
        held = {e.claimInfo.uid for n in self.nominations.values() for e in n.held.values()}
        planned = 0
        for item in wanting:
            now = self.clock()
            last = self._said.get(item.input.key)
            if last is not None and now - last[1] < RETRY_S:
                continue  # it could not preempt a moment ago: not planned every cycle
            skip = {v for v, until in self._refused.get(item.input.key, {}).items() if until > now}
            base = [preemption.without(n, leaving.get(n.state.name, set()) - held) for n in nodes]
            found = preemption.plan(
                item.input,
                base,
                [r for r in running if r.key not in skip and not self._victim_elsewhere(r.key)],
                users,
                snapshot.classes,
                policy=policy,
                budgets=allowance,
            )
            if found.node is None:
                if last is None or last[0] != found.reason:  # once per reason
                    log.info("no preemption for %s: %s", item.input.key, found.reason)
                self._said[item.input.key] = (found.reason, now)
                continue
            if not found.victims:  # pods already leaving free enough: it waits for them
                log.debug("%s waits for devices being freed on %s", item.input.key, found.node)
                continue
            node = next(n for n in base if n.state.name == found.node)
            planned += self._preempt(item, found, preemption.entries_of(node, found.freed),
                                     snapshot, running, allowance)  # fmt: skip
        return planned

    # Inside.
    def _may_preempt(self, item: v1inputs.Pending) -> bool:
        spec = item.pod.get("spec") or {}
        if spec.get("preemptionPolicy") == "Never":
            return False
        return item.input.key not in self.nominations

    def _victim_elsewhere(self, key: str) -> bool:
        """Already evicted for another preemptor: never counted twice."""
        return any(key in n.victims for n in self.nominations.values())

    def _budgets(self, snapshot: v1inputs.Snapshot) -> dict[str, tuple[str, Obj | None, int]]:
        """PodDisruptionBudget ns/name -> (namespace, selector, disruptions allowed now).
        Unreadable (no RBAC, no such API): none, and the Eviction API still enforces them."""
        try:
            found = eviction.budgets(self.api)
        except errors.KubeError as error:
            if not self._budgets_said:
                log.warning("cannot read PodDisruptionBudgets (%s): victims are chosen without "
                            "them; the Eviction API still refuses what a budget does not allow",
                            error)  # fmt: skip
                self._budgets_said = True
            return {}
        out = {}
        for pdb in found:
            meta = pdb.get("metadata") or {}
            namespace = str(meta.get("namespace", ""))
            selector = (pdb.get("spec") or {}).get("selector")
            allowed = int((pdb.get("status") or {}).get("disruptionsAllowed") or 0)
            out[f"{namespace}/{meta.get('name', '')}"] = (namespace, selector, allowed)
        return out

    def _preempt(
        self,
        item: v1inputs.Pending,
        found: preemption.Plan,
        held: Mapping[str, AllocatedDevices],
        snapshot: v1inputs.Snapshot,
        running: Sequence[Running],
        allowance: Mapping[str, int],
    ) -> int:
        if not self.may_write():
            return 0
        pods = {v1inputs.pod_key(p): p for p in snapshot.pods}
        priorities = {r.key: r.priority for r in running}
        key, node = item.input.key, found.node
        assert node is not None
        proof = "proven optimal" if found.proven else "optimality not proven"
        proof += f", {preemption.checked(found.checks)}"
        named = ", ".join(f"{v} (priority {priorities.get(v, 0)})" for v in found.victims)
        self.recorder.normal(item.pod, REASON_PREEMPTING,
                             f"evicting {named} on node {node} to free the devices this pod "
                             f"(priority {item.input.priority}) needs; the victims are the "
                             f"solver's choice ({proof})")  # fmt: skip
        self.nominations[key] = Nomination(key, node, found.victims, held, self.clock())
        for victim in found.victims:
            pod = pods[victim]
            try:
                evicted = eviction.evict(self.api, pod)
            except errors.KubeError as error:
                log.warning("preemption for %s: evicting %s failed: %s", key, victim, error)
                evicted = False
            if evicted:
                log.info("preemption: evicted %s on %s for %s", victim, node, key)
                self.recorder.warning(pod, REASON_PREEMPTED,
                                      f"evicted by drasat for pod {key} (priority "
                                      f"{item.input.priority}), which needs its devices on "
                                      f"node {node}")  # fmt: skip
                continue
            # A budget (or the server) refused: pick again next cycle without this victim.
            self.nominations.pop(key, None)
            self._refused.setdefault(key, {})[victim] = self.clock() + REFUSED_TTL_S
            self.recorder.warning(item.pod, REASON_REFUSED,
                                  f"the eviction of {victim} was refused (a "
                                  "PodDisruptionBudget does not allow it now); drasat picks "
                                  "other victims")  # fmt: skip
            return 0
        return 1


def running_pods(
    snapshot: v1inputs.Snapshot,
) -> tuple[list[Running], dict[str, frozenset[str]], dict[str, set[str]]]:
    """The pods on nodes that hold drasat's allocated claims there; claim uid -> every pod
    using it (pending, running or leaving: a claim is freed only with all of them); node ->
    the claims held only by pods already leaving (being deleted), which the next plan frees."""
    by_name = snapshot.claims
    running: list[Running] = []
    users: dict[str, set[str]] = {}
    leaving_pods: dict[str, set[str]] = {}
    where: dict[str, str] = {}
    for pod in snapshot.pods:
        if ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
            continue
        key = v1inputs.pod_key(pod)
        namespace = str((pod.get("metadata") or {}).get("namespace", ""))
        uids = []
        for name in v1inputs.pod_claim_names(pod):
            claim = by_name.get(f"{namespace}/{name}") if name else None
            if claim is None:
                continue
            uid = str(claim["metadata"].get("uid", ""))
            users.setdefault(uid, set()).add(key)
            node = v1inputs.allocated_node(claim)
            if node and v1inputs.names_our_driver(claim):
                uids.append(uid)
                where[uid] = node
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or not uids:
            continue
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            leaving_pods[key] = set(uids)
            continue
        cpu, memory = nodefit.requests(pod)
        priority = int((pod.get("spec") or {}).get("priority") or 0)
        mine = tuple(u for u in uids if where.get(u) == node_name)
        running.append(Running(key, str(node_name), priority, mine, cpu, memory))
    leaving: dict[str, set[str]] = {}
    for held in leaving_pods.values():
        for uid in held:
            if users.get(uid, set()) <= set(leaving_pods):
                leaving.setdefault(where[uid], set()).add(uid)
    return running, {k: frozenset(v) for k, v in users.items()}, leaving


def _with_budgets(
    pod: Running, meta: Mapping[str, object], budgets: Mapping[str, tuple[str, Obj | None, int]]
) -> Running:
    """The pod with the names of the PodDisruptionBudgets that select it."""
    namespace = str(meta.get("namespace", ""))
    labels = meta.get("labels") or {}
    assert isinstance(labels, dict)
    names = tuple(
        name
        for name, (where, selector, _) in sorted(budgets.items())
        if where == namespace and selects(selector, labels)
    )
    return dataclasses.replace(pod, budgets=names)


def selects(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """A label selector (`matchLabels`, `matchExpressions`) on a pod's labels; a null selector
    selects nothing, an empty one everything (policy/v1 PodDisruptionBudget)."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, op = expression.get("key"), expression.get("operator")
        values = set(expression.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True
