"""The lifecycle model: a hypothesis state machine over the simulated cluster (`lc_world`) that
checks, after every step, what `lc_truth` says the cluster holds and owes.

Rules (each followed by rounds of every actor until one changes nothing, `World.settle`):
ResourceClaimTemplates, standalone claims and claims shared by several pods, of every kind the
model knows (`KINDS`: exclusive GPUs, two GPUs, time-sliced, shares by `capacity.requests`, MIG
profiles, a GPU else the CPU fallback, the CPU fallback, a claim tolerating drasat's allocator
taint), created and deleted; pods of them with priorities, gangs; pods finish or are deleted;
a claim deleted with its pods;
nodes cordoned, uncordoned, drained, deleted and back; PodDisruptionBudgets created and deleted;
an admin's allocation written onto a free or a held GPU; API errors on a verb of a kind for the
next cycle; the leader restarted; the lease moving to the other replica, also in the middle of a
cycle.

Invariants (`Violation.kind`), checked after every round of every step:

- held beyond what a GPU has, by claim status (`device-held-twice`, `shares-over-capacity`,
  `mig-overlap`, `mig-gpu-given-whole`, `mig-on-plain-gpu`, `unknown-device`) and by the NAS
  ledger (the same kinds, `ledger-` in front): at once when only drasat's allocations are
  involved; one involving an allocation of another allocator must be gone within `bound` rounds
  (`foreign-<kind>-kept`, `ledger-foreign-<kind>-kept`);
- every allocation drasat made has a live consumer, or is released within `bound` rounds
  (`unused-claim-kept`) (the liveness bounds count rounds whose cycle met no injected API
  error, `AGES_UNDER_FAULTS` aside);
- every pending pod (a gang: all its pods) that fits alone in what is free is bound within
  `bound` rounds (`pod-not-placed`; `pod-not-placed-after-preemption` within a nomination's
  lifetime after the controller evicted a pod);
- no gang stays with some pods allocated and others not beyond `bound` rounds
  (`gang-partly-allocated`);
- every pod with a claim of drasat's left unallocated has an Event of drasat's within `bound`
  rounds (`refusal-without-reason`);
- the ledger and the claims' statuses agree within `bound` rounds (`ledger-disagrees`);
- no cycle raises (`cycle-aborted`);
- a claim of drasat's seen allocated while a pod naming it was bound stays allocated while that
  pod lives on its node (`claim-deallocated-under-its-pod`, at once), and while it is
  Terminating there, which takes `lc_world.GRACE_ROUNDS` rounds for a pod deleted, drained or
  evicted (`claim-deallocated-under-a-terminating-pod`, at once): its devices are in use
  until it is gone, so no claim may take them (the held-twice kinds above) and a preemptor
  waits for its victims to go.

- every pod the controller evicted had a lower priority than the preemptor whose nomination names
  it (`eviction-of-equal-or-higher-priority`, at once);
- every eviction is followed within `bound` rounds by its preemptor placed, unless the preemptor
  is gone or its nomination ended with a reason said on it (`PreemptionRefused`,
  `NoPreemption`) or because a higher-priority pod preempted on its node since
  (`preemptor-not-placed-after-eviction`).

- no eviction the controller asks for is refused by a PodDisruptionBudget
  (`eviction-refused-by-a-budget`, at once): the model's budgets (every pod of the namespace, a
  `minAvailable`) say their allowance currently, and its Eviction API refuses what they do not
  allow, as the API server does, so a budget is never exceeded and a refusal means the
  controller overspent one.

- no two preemptors count one device: the devices two nominations hold never overlap
  (`nominations-overlap`, at once between nominations of one priority;
  `nominations-overlap-kept` within `bound` rounds where a higher priority displaced a lower
  one), and no claim allocated while a nomination holds takes its devices for pods of no higher
  priority than the nominee's (`nominated-device-given-away`, at once).

`known` lists kinds that are open defects: their violations are counted in `Stats` (and said at
the end of the test), not raised; every other kind fails the step.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
from typing import Any, ClassVar

import lc_objects as objects
import lc_truth as truth
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from lc_api import FAULT_CODES, Fault
from lc_objects import GANG_KINDS, KINDS, POD_KINDS, PRIORITIES, SHARED_KINDS
from lc_world import NAMESPACE, World, pod_claim_names, tolerates_all

from drasat.api.groups import GANG_LABEL, GANG_SIZE_LABEL
from drasat.controller.preemption import REASON_NONE, REASON_REFUSED
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.v1.nominations import Nomination

Obj = dict[str, Any]

NODES = {"n1": "t4x2", "n2": "a100mig+t4", "n3": "t4x2"}
#: Live pods the model keeps at most (the cluster is full well before).
MAX_PODS = 14
#: Rounds (seconds of the controller's clock) a preemption holds devices for its preemptor.
NOMINATION_ROUNDS = 300
#: Obligations that age also in rounds whose cycle met an injected API error: one object's
#: refused write must not leave a gang's other pods holding devices.
AGES_UNDER_FAULTS = frozenset({"gang-partly-allocated"})
#: The calls a cycle makes (verb, kind): where an injected error meets the controller.
CONTROLLER_CALLS = (
    ("get", "pods"),  # a gate's pod read again, a departed pod looked up
    ("patch", "pods"),  # the scheduling gate lifted
    ("create", "pods"),  # an eviction
    ("get", "resourceclaims"),  # a claim read again after a conflict
    ("patch", "resourceclaims"),  # the finalizer added or dropped
    ("replace_status", "resourceclaims"),  # an allocation written or given back
    ("get", "nodeallocationstates"),  # the ledger read again after a conflict
    ("replace", "nodeallocationstates"),  # the ledger written
    ("create", "events"),  # a refusal's reason
    ("patch", "events"),  # a decision updated
)


@dataclasses.dataclass(frozen=True)
class Violation:
    kind: str
    key: str
    text: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.text}"


@dataclasses.dataclass
class Stats:
    """What the runs of one test did, over all its examples."""

    examples: int = 0
    steps: int = 0
    rounds: int = 0
    rules: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    faults: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    known: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    #: Rounds in which a nomination held devices, and allocations made in such rounds (what
    #: the nomination invariants were checked on).
    holding_rounds: int = 0
    allocations_beside_holds: int = 0
    #: Observations of a Terminating pod on its node (its devices still in use): what the
    #: graceful-termination checks were made on.
    terminating_rounds: int = 0

    def note_known(self, violation: Violation) -> None:
        found = self.known.setdefault(violation.kind, [])
        if len(found) < 3:
            found.append(violation.text)

    def summary(self) -> str:
        lines = [f"{self.examples} examples, {self.steps} steps, {self.rounds} rounds"]
        lines.append("rules: " + ", ".join(f"{k} {v}" for k, v in sorted(self.rules.items())))
        lines.append(
            f"rounds with a nomination holding devices: {self.holding_rounds}, "
            f"allocations checked against holds: {self.allocations_beside_holds}, "
            f"terminating pods observed on their nodes: {self.terminating_rounds}"
        )
        if self.faults:
            lines.append("API faults met: " + ", ".join(
                f"{k} {v}" for k, v in sorted(self.faults.items())))  # fmt: skip
        for kind, texts in sorted(self.known.items()):
            lines.append(f"known defect seen: {kind}: e.g. {texts[0]}")
        return "\n".join(lines)


class LifecycleMachine(RuleBasedStateMachine):
    #: Violation kinds that are open defects (counted, not raised).
    known: ClassVar[frozenset[str]] = frozenset()
    #: Rounds an obligation may stay unmet.
    bound: ClassVar[int] = 8
    #: The most rounds after a rule (obligations open: until met or overdue).
    max_rounds: ClassVar[int] = 12
    stats: ClassVar[Stats] = Stats()

    def __init__(self) -> None:
        super().__init__()
        self.world = World(nodes=dict(NODES))
        self.names = itertools.count(1)
        self.templates: dict[str, str] = {}  # live template -> kind
        self.template_kinds: dict[str, str] = {}  # every template ever -> kind
        self.claims: dict[str, str] = {}  # live standalone claim -> kind
        self.claim_kinds: dict[str, str] = {}
        self.gangs: dict[str, int] = {}  # gang -> size
        self.deleted_nodes: set[str] = set()
        self.ages: dict[tuple[str, str], int] = {}
        self.reported: set[tuple[str, str]] = set()
        #: (pod uid, claim uid): the claim seen allocated while the pod was bound and live.
        self.used: set[tuple[str, str]] = set()
        #: namespace/name -> the pod's priority, as last seen (an evicted pod is gone).
        self.priorities: dict[str, int] = {}
        #: Evicted pod (namespace/name) -> the nomination seen naming it as a victim.
        self.evicted_for: dict[str, Nomination] = {}
        #: Evicted pods whose priority was checked against their preemptor's.
        self.evictions_checked: set[str] = set()
        self.budget_refusals_seen = 0
        #: Claims of drasat's seen allocated at the last observation (uids).
        self.allocated_before: set[str] = set()
        #: The nominations that held devices at the last observation (pod key -> nomination).
        self.holding_before: dict[str, Nomination] = {}
        self.failures: list[Violation] = []
        self.aborts_seen = 0
        self.faults_seen = 0
        type(self).stats.examples += 1

    def teardown(self) -> None:
        self.world.close()

    # --- stepping -------------------------------------------------------------------------------

    def _settle(self, rule_name: str) -> None:
        stats = type(self).stats
        stats.steps += 1
        stats.rules[rule_name] += 1
        for _ in range(self.max_rounds):
            changed = self.world.round()
            stats.rounds += 1
            open_now = self._observe()
            if not changed and not open_now:
                break
        for verb, plural, code in self.world.faults.injected[self.faults_seen :]:
            stats.faults[f"{verb} {plural} {code}"] += 1
        self.faults_seen = len(self.world.faults.injected)

    def _violate(self, violation: Violation) -> None:
        marker = (violation.kind, violation.key)
        if marker in self.reported:
            return
        self.reported.add(marker)
        if violation.kind in self.known:
            type(self).stats.note_known(violation)
        else:
            self.failures.append(violation)

    @invariant()
    def nothing_violated(self) -> None:
        if self.failures:
            found, self.failures = self.failures, []
            raise AssertionError("\n".join(str(v) for v in found))

    # --- observing --------------------------------------------------------------------------------

    def _observe(self) -> bool:
        """Check everything after a round; whether an obligation is open."""
        read = self.world.read
        claims = read(r.RESOURCE_CLAIMS_V1, NAMESPACE)
        pods = read(r.PODS, NAMESPACE)
        nodes = {n["metadata"]["name"]: n for n in read(r.NODES)}
        nases = read(r.NAS, self.world.config.namespace)
        gpus = {n: g for n, g in self.world.gpus.items() if n in nodes}
        foreign = {
            str(c["metadata"]["uid"]) for c in claims if truth.is_foreign(c, self.world.foreign)
        }
        for at, text in self.world.aborts[self.aborts_seen :]:
            self._violate(Violation("cycle-aborted", f"round {at}", f"cycle raised: {text}"))
        self.aborts_seen = len(self.world.aborts)
        owed: dict[tuple[str, str], str] = {}
        held, unknown = truth.holdings(claims, gpus, self.world.foreign)
        for text in unknown:
            self._violate(Violation("unknown-device", text, f"a result names {text}"))
        for problem in truth.problems(held, gpus):
            self._held_problem(problem, "", owed)
        ledger, unknown = truth.ledger_holdings(nases, gpus)
        for text in unknown:
            self._violate(Violation("ledger-unknown-device", text, f"the ledger names {text}"))
        for problem in truth.problems(ledger, gpus):
            if any(u.uid in foreign or truth.foreign_entry(u, problem.gpu, self.world.foreign)
                   for u in problem.claims):  # fmt: skip
                problem = dataclasses.replace(
                    problem, claims=tuple(dataclasses.replace(u, foreign=True)
                                          for u in problem.claims))  # fmt: skip
            self._held_problem(problem, "ledger-", owed)
        by_name = {c["metadata"]["name"]: c for c in claims}
        self._unused(claims, pods, foreign, owed)
        self._kept_while_used(claims, pods, nodes)
        self._ledger_agrees(claims, nases, nodes, owed)
        usable = sorted(
            n for n, node in nodes.items()
            if n in gpus and not (node.get("spec") or {}).get("unschedulable")
        )  # fmt: skip
        self._progress(pods, by_name, held, gpus, usable, owed)
        self._preemptions(pods, owed)
        self._nominations_held(pods, claims, by_name, gpus, foreign, owed)
        self._budgets_kept()
        if self._preempting():
            # Devices freed by an eviction are held for its preemptor: a pod waiting beside
            # such a hold is counted apart (the hold's own rules come with preemption's checks).
            for key in [k for k in owed if k[0] == "pod-not-placed"]:
                owed[("pod-not-placed-after-preemption", key[1])] = owed.pop(key)
        self._reasons(pods, by_name, owed)
        for key in list(self.ages):
            if key not in owed:
                del self.ages[key]
        for key, text in owed.items():
            # An obligation needs writes: a round whose cycle met an injected error does not
            # count (the bound is in rounds without one), except where the error is the point.
            counts = not self.world.faulted or key[0] in AGES_UNDER_FAULTS
            self.ages[key] = self.ages.get(key, 0) + int(counts)
            if self.ages[key] > self.bound:
                self._violate(Violation(key[0], key[1], f"{text} (for {self.ages[key]} rounds)"))
        return any(key not in self.reported for key in owed)

    def _preempting(self) -> bool:
        """Whether the controller evicted a pod within a nomination's lifetime."""
        since = self.world.rounds - NOMINATION_ROUNDS
        return any(at > since for at, _ in self.world.evictions)

    def _held_problem(
        self, problem: truth.Problem, prefix: str, owed: dict[tuple[str, str], str]
    ) -> None:
        key = f"{problem.gpu} {sorted({u.claim for u in problem.claims})}"
        if problem.foreign:
            owed[(f"{prefix}foreign-{problem.kind}-kept", key)] = (
                f"{problem.text}; another allocator's allocation is one of them and the overlap "
                "is not repaired"
            )
        else:
            self._violate(Violation(prefix + problem.kind, key, problem.text))

    def _unused(
        self, claims: list[Obj], pods: list[Obj], foreign: set[str],
        owed: dict[tuple[str, str], str],
    ) -> None:  # fmt: skip
        for claim in claims:
            if not truth.results_of(claim) or str(claim["metadata"]["uid"]) in foreign:
                continue
            if truth.live_consumers(claim, pods):
                continue
            where = truth.allocated_node(claim)
            deleting = " (being deleted)" if claim["metadata"].get("deletionTimestamp") else ""
            owed[("unused-claim-kept", str(claim["metadata"]["uid"]))] = (
                f"claim {truth.claim_ref(claim)}{deleting} keeps its allocation on {where} with "
                "no pod that uses it"
            )

    def _kept_while_used(self, claims: list[Obj], pods: list[Obj], nodes: dict[str, Obj]) -> None:
        """A claim of drasat's seen allocated while a pod naming it was bound stays allocated as
        long as that pod is on its node (not done, the node there), Terminating too: a pod
        deleted or evicted runs on through its grace period, its devices in use; a deallocation
        under a pod that uses it, or is about to, gives its devices to another."""
        by_name = {c["metadata"]["name"]: c for c in claims}
        for pod in pods:
            meta, spec = pod["metadata"], pod.get("spec") or {}
            node = spec.get("nodeName")
            if not node or node not in nodes or truth.pod_done(pod):
                continue
            kind = "claim-deallocated-under-its-pod"
            if meta.get("deletionTimestamp"):
                kind = "claim-deallocated-under-a-terminating-pod"
                type(self).stats.terminating_rounds += 1
            for name in truth.claim_names(pod):
                claim = by_name.get(name or "")
                if claim is None or str(claim["metadata"]["uid"]) in self.world.foreign:
                    continue
                key = (str(meta["uid"]), str(claim["metadata"]["uid"]))
                if truth.results_of(claim):
                    self.used.add(key)
                elif key in self.used:
                    self._violate(Violation(
                        kind, f"{key[0]} {key[1]}",
                        f"claim {truth.claim_ref(claim)} was deallocated while pod "
                        f"{meta['name']}, bound to {node}, uses it",
                    ))  # fmt: skip

    def _ledger_agrees(
        self, claims: list[Obj], nases: list[Obj], nodes: dict[str, Obj],
        owed: dict[tuple[str, str], str],
    ) -> None:  # fmt: skip
        entries: dict[str, set[str]] = {}
        for nas in nases:
            node = nas["metadata"]["name"]
            for entry in ((nas.get("spec") or {}).get("allocatedClaims") or {}).values():
                entries.setdefault(node, set()).add(str((entry.get("claimInfo") or {}).get("uid")))
        allocated: dict[str, str] = {}
        for claim in claims:
            node = truth.allocated_node(claim)
            if node is None or node not in nodes:
                continue
            uid = str(claim["metadata"]["uid"])
            allocated[uid] = node
            if uid not in entries.get(node, set()):
                owed[("ledger-disagrees", f"{node} {uid}")] = (
                    f"claim {truth.claim_ref(claim)} is allocated on {node} and not in its ledger"
                )
        for node, uids in entries.items():
            for uid in uids - {u for u, n in allocated.items() if n == node}:
                owed[("ledger-disagrees", f"{node} {uid}")] = (
                    f"the ledger of {node} holds claim {uid}, which is not allocated there"
                )

    def _kind_of(self, pod: Obj, entry_index: int, claim: Obj) -> str | None:
        entry = ((pod.get("spec") or {}).get("resourceClaims") or [])[entry_index]
        if entry.get("resourceClaimName"):
            return self.claim_kinds.get(entry["resourceClaimName"])
        return self.template_kinds.get(entry.get("resourceClaimTemplateName", ""))

    def _asks(
        self, pod: Obj, by_name: dict[str, Obj], by_uid: dict[str, Obj]
    ) -> tuple[list[tuple[Obj, truth.Ask]], set[str], list[Obj]] | None:
        """A pending pod's claims to place (claim, ask), the uids of those (their current
        allocation not counted), and its claims pinned by another pod; None: not assessed."""
        names = pod_claim_names(pod)
        if None in names:
            return None
        found = [by_name.get(str(n)) for n in names]
        if any(c is None or c["metadata"].get("deletionTimestamp") for c in found):
            return None
        todo: list[tuple[Obj, truth.Ask]] = []
        pinned: list[Obj] = []
        for index, claim in enumerate(found):
            assert claim is not None
            kind = self._kind_of(pod, index, claim)
            if (
                kind is None
                or tolerates_all(claim)
                or claim["metadata"]["uid"] in self.world.foreign
            ):
                return None  # another allocator's claim
            ask = KINDS[kind][1]
            if ask is None:
                return None
            if truth.results_of(claim) and truth.reserved_by_other(claim, pod, by_uid):
                pinned.append(claim)
            else:
                todo.append((claim, ask))
        return todo, {str(c["metadata"]["uid"]) for c, _ in todo}, pinned

    def _progress(
        self, pods: list[Obj], by_name: dict[str, Obj],
        held: dict[tuple[str, int], list[truth.Use]], gpus: dict[str, Any], usable: list[str],
        owed: dict[tuple[str, str], str],
    ) -> None:  # fmt: skip
        by_uid = {str(p["metadata"]["uid"]): p for p in pods}
        pending = [p for p in pods if _pending(p)]
        members: dict[str, list[Obj]] = {}
        for pod in pods:
            gang = (pod["metadata"].get("labels") or {}).get(GANG_LABEL)
            if gang and not truth.pod_done(pod) and not pod["metadata"].get("deletionTimestamp"):
                members.setdefault(gang, []).append(pod)
        for pod in pending:
            if (pod["metadata"].get("labels") or {}).get(GANG_LABEL):
                continue
            found = self._asks(pod, by_name, by_uid)
            if found is None:
                continue
            todo, ignore, pinned = found
            there = {truth.allocated_node(c) for c in pinned}
            if len(there) > 1:
                continue
            candidates = [n for n in usable if not there or n in there]
            for node in candidates:
                free = truth.free_on(node, gpus, held, ignore)
                if all(free.take(ask) for _, ask in todo):
                    owed[("pod-not-placed", pod["metadata"]["uid"])] = (
                        f"pod {pod['metadata']['name']} fits alone on {node} in what is free "
                        f"and is not bound"
                    )
                    break
        for gang, found in sorted(members.items()):
            self._gang_progress(gang, found, by_name, by_uid, held, gpus, usable, owed)

    def _gang_progress(
        self, gang: str, pods: list[Obj], by_name: dict[str, Obj], by_uid: dict[str, Obj],
        held: dict[tuple[str, int], list[truth.Use]], gpus: dict[str, Any], usable: list[str],
        owed: dict[tuple[str, str], str],
    ) -> None:  # fmt: skip
        if len(pods) < self.gangs.get(gang, 0):
            return
        allocated = [p for p in pods if _all_allocated(p, by_name)]
        if allocated and len(allocated) < len(pods):
            owed[("gang-partly-allocated", gang)] = (
                f"gang {gang}: {sorted(p['metadata']['name'] for p in allocated)} allocated, "
                f"{sorted(p['metadata']['name'] for p in pods if p not in allocated)} not"
            )
        if not all(_pending(p) for p in pods):
            return
        asks: list[truth.Ask] = []
        ignore: set[str] = set()
        for pod in pods:
            found = self._asks(pod, by_name, by_uid)
            if found is None or found[2]:
                return
            asks += [a for _, a in found[0]]
            ignore |= found[1]
        free = {n: truth.free_on(n, gpus, held, ignore) for n in usable}
        if all(any(free[n].take(ask) for n in usable) for ask in asks):
            owed[("pod-not-placed", f"gang {gang}")] = (
                f"gang {gang} ({len(pods)} pods) fits in what is free and is not bound"
            )

    def _preemptions(self, pods: list[Obj], owed: dict[tuple[str, str], str]) -> None:
        """Each eviction the controller made, against the nomination naming its victim: the
        victim's priority below the preemptor's (at once), and the preemptor placed within
        `bound` rounds unless it is gone, or its nomination ended with a reason said on it
        (`PreemptionRefused`, `NoPreemption`) or because a higher-priority pod preempted on its
        node later."""
        live = {f"{NAMESPACE}/{p['metadata']['name']}": p for p in pods}
        for key, pod in live.items():
            self.priorities[key] = int((pod.get("spec") or {}).get("priority") or 0)
        nominations = {k: n for k, p in live.items() if (n := Nomination.of_pod(p)) is not None}
        evictions = self.world.evictions
        for nomination in nominations.values():
            for victim in nomination.victims:
                if any(v == victim for _, v in evictions):
                    self.evicted_for.setdefault(victim, nomination)
        for _, victim in evictions:
            found = self.evicted_for.get(victim)
            if found is None or victim in self.evictions_checked:
                continue  # none: its nomination was not written (a refused write)
            self.evictions_checked.add(victim)
            mine = self.priorities.get(victim)
            if mine is not None and mine >= found.priority:
                self._violate(Violation(
                    "eviction-of-equal-or-higher-priority", victim,
                    f"{victim} (priority {mine}) evicted for {found.pod} (priority "
                    f"{found.priority})"))  # fmt: skip
        for at, victim in evictions:
            found = self.evicted_for.get(victim)
            pod = live.get(found.pod) if found is not None else None
            if found is None or pod is None or str(pod["metadata"]["uid"]) != found.uid:
                continue  # gone (deleted, or another pod of its name)
            if not _pending(pod):
                continue
            held = nominations.get(found.pod)
            ended = held is None or victim not in held.victims
            if ended and (self._preemption_said(pod) or self._displaced(found, at)):
                continue
            owed[("preemptor-not-placed-after-eviction", found.uid)] = (
                f"{victim} was evicted for {found.pod}, which is not placed"
                + ("" if held else ", has no nomination and no Event saying why")
            )

    def _nominations_held(
        self, pods: list[Obj], claims: list[Obj], by_name: dict[str, Obj],
        gpus: dict[str, Any], foreign: set[str], owed: dict[tuple[str, str], str],
    ) -> None:  # fmt: skip
        """No two preemptors count one device: the devices two nominations hold (`held`, read by
        the model's own reading of ledger entries; a gang's pods hold as one) never overlap —
        at once between nominations of one priority, within `bound` rounds where a higher
        priority's nomination displaced a lower one (the controller clears the lower) — and no
        claim newly allocated while a nomination holds is given its devices when no pod of the
        claim has a priority above the nomination's and none is the nominee or of its gang."""
        holding: dict[str, Nomination] = {}
        for pod in pods:
            if not _pending(pod) or _all_allocated(pod, by_name):
                continue  # placed (or gone): its devices are no longer held for it
            found = Nomination.of_pod(pod)
            if found is not None and found.uid == str(pod["metadata"]["uid"]):
                holding[found.pod] = found
        owners: dict[str, set[str]] = {}
        uses: dict[str, dict[tuple[str, int], list[truth.Use]]] = {}
        priority: dict[str, int] = {}
        for found in holding.values():
            owner = found.gang or found.pod
            owners.setdefault(owner, set()).add(found.pod)
            priority[owner] = min(priority.get(owner, found.priority), found.priority)
            for at, held in _held_uses(found, owner, gpus).items():
                uses.setdefault(owner, {}).setdefault(at, []).extend(held)
        combined: dict[tuple[str, int], list[truth.Use]] = {}
        for found_uses in uses.values():
            for at, held in found_uses.items():
                combined.setdefault(at, []).extend(held)
        for problem in truth.problems(combined, gpus):
            both = sorted({u.uid for u in problem.claims})
            if len(both) < 2:
                continue
            key = f"{problem.gpu} {both}"
            text = (
                f"the nominations of {' and '.join(both)} both hold {problem.gpu} ({problem.text})"
            )
            if len({priority[o] for o in both}) == 1:
                self._violate(Violation("nominations-overlap", key, text))
            else:
                owed[("nominations-overlap-kept", key)] = text
        allocated = {
            str(c["metadata"]["uid"]): c for c in claims
            if truth.results_of(c) and str(c["metadata"]["uid"]) not in foreign
        }  # fmt: skip
        if self.holding_before and holding:
            type(self).stats.holding_rounds += 1
        for uid, claim in sorted(allocated.items()):
            if uid in self.allocated_before:
                continue
            if self.holding_before and holding:
                type(self).stats.allocations_beside_holds += 1
            consumers = truth.live_consumers(claim, pods)
            if not consumers:
                continue
            keys = {f"{NAMESPACE}/{p['metadata']['name']}" for p in consumers}
            top = max(int((p.get("spec") or {}).get("priority") or 0) for p in consumers)
            gangs = {f"{NAMESPACE}/{g}" for p in consumers
                     if (g := (p["metadata"].get("labels") or {}).get(GANG_LABEL))}  # fmt: skip
            mine, _ = truth.holdings([claim], gpus, {})
            for owner in sorted(owners):
                held_before = any(p in self.holding_before for p in owners[owner])
                if not held_before or top > priority[owner]:
                    continue  # held since the last round only, or a higher priority takes it
                if keys & owners[owner] or owner in gangs or owner in keys:
                    continue  # the nominee itself (or its gang)
                together = {at: list(held) for at, held in uses.get(owner, {}).items()}
                for at, held in mine.items():
                    together.setdefault(at, []).extend(held)
                for problem in truth.problems(together, gpus):
                    found_uids = {u.uid for u in problem.claims}
                    if uid in found_uids and owner in found_uids:
                        self._violate(Violation(
                            "nominated-device-given-away", f"{owner} {uid}",
                            f"claim {truth.claim_ref(claim)} of {sorted(keys)} (priority {top}) "
                            f"was allocated {problem.gpu}, which the nomination of {owner} "
                            f"(priority {priority[owner]}) holds ({problem.text})"))  # fmt: skip
        self.allocated_before = set(allocated)
        self.holding_before = holding

    def _budgets_kept(self) -> None:
        """No eviction the controller asks for is refused by a budget: the model's budgets say
        their allowance currently, so a refusal means the controller spent one allowance twice or
        chose a victim its budget did not allow."""
        for at, pod, budget in self.world.budget_refusals[self.budget_refusals_seen :]:
            self._violate(Violation(
                "eviction-refused-by-a-budget", f"{pod} {budget} {at}",
                f"the controller asked to evict {pod}, which budget {budget} did not allow "
                f"(round {at})"))  # fmt: skip
        self.budget_refusals_seen = len(self.world.budget_refusals)

    def _displaced(self, found: Nomination, at: int) -> bool:
        """Whether a pod of higher priority preempted on the nomination's node since `at` (which
        ends it: it plans again)."""
        others = [(t, self.evicted_for.get(v)) for t, v in self.world.evictions if t >= at]
        return any(o is not None and o.node == found.node and o.priority > found.priority
                   for _, o in others)  # fmt: skip

    def _preemption_said(self, pod: Obj) -> bool:
        uid = str(pod["metadata"]["uid"])
        return any(
            str((e.get("involvedObject") or {}).get("uid")) == uid
            and e.get("reason") in (REASON_REFUSED, REASON_NONE)
            for e in self.world.read(r.EVENTS, NAMESPACE)
        )

    def _reasons(
        self, pods: list[Obj], by_name: dict[str, Obj], owed: dict[tuple[str, str], str]
    ) -> None:
        waiting = []
        for pod in pods:
            if not _pending(pod):
                continue
            names = pod_claim_names(pod)
            if None in names:
                continue
            found = [by_name.get(str(n)) for n in names]
            if any(c is None for c in found):
                continue
            if any(not truth.results_of(c) and not tolerates_all(c) for c in found if c):
                waiting.append(pod)
        if not waiting:
            return
        events = self.world.read(r.EVENTS, NAMESPACE)
        said = {str((e.get("involvedObject") or {}).get("uid")) for e in events}
        for pod in waiting:
            if str(pod["metadata"]["uid"]) not in said:
                owed[("refusal-without-reason", str(pod["metadata"]["uid"]))] = (
                    f"pod {pod['metadata']['name']} waits for drasat and has no Event saying why"
                )

    # --- helpers for rules --------------------------------------------------------------------

    def _name(self, prefix: str) -> str:
        # Zero-padded: the name order is the creation order, so the controller's order of pods
        # (creationTimestamp, in whole seconds of the machine's clock, then name) is the same
        # whichever second a pod is created in.
        return f"{prefix}{next(self.names):04d}"

    def _claim_objects(self) -> list[Obj]:
        return self.world.read(r.RESOURCE_CLAIMS_V1, NAMESPACE)

    def _live_pods(self) -> list[Obj]:
        return [
            p for p in self.world.read(r.PODS, NAMESPACE)
            if not truth.pod_done(p)
        ]  # fmt: skip

    def _create_claim(self, kind: str) -> str:
        name = self._name("c")
        self.world.admin.create(
            r.RESOURCE_CLAIMS_V1, objects.claim(name, kind), namespace=NAMESPACE
        )
        self.claims[name] = kind
        self.claim_kinds[name] = kind
        return name

    def _create_template(self, kind: str) -> str:
        name = self._name("t")
        self.world.admin.create(
            r.RESOURCE_CLAIM_TEMPLATES_V1, objects.template(name, kind), namespace=NAMESPACE
        )
        self.templates[name] = kind
        self.template_kinds[name] = kind
        return name

    def _create_pod(
        self, *, claim: str | None = None, template: str | None = None, priority: int = 0,
        labels: dict[str, str] | None = None,
    ) -> str:  # fmt: skip
        name = self._name("p")
        body = objects.pod(name, claim=claim, template=template, priority=priority, labels=labels)
        self.world.admin.create(r.PODS, body, namespace=NAMESPACE)
        return name

    # --- rules: workloads ---------------------------------------------------------------------

    @precondition(lambda self: len(self.templates) < 6)
    @rule(kind=st.sampled_from(sorted(KINDS)))
    def create_template(self, kind: str) -> None:
        self._create_template(kind)
        self._settle("create_template")

    @precondition(lambda self: self.templates)
    @rule(data=st.data())
    def delete_template(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.templates)), label="template")
        self.world.admin.delete(r.RESOURCE_CLAIM_TEMPLATES_V1, name, namespace=NAMESPACE)
        del self.templates[name]
        self._settle("delete_template")

    @precondition(lambda self: len(self.claims) < 8)
    @rule(kind=st.sampled_from(sorted(KINDS)))
    def create_claim(self, kind: str) -> None:
        self._create_claim(kind)
        self._settle("create_claim")

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def delete_claim(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.claims)), label="claim")
        with contextlib.suppress(errors.NotFound):
            self.world.admin.delete(r.RESOURCE_CLAIMS_V1, name, namespace=NAMESPACE)
        del self.claims[name]
        self._settle("delete_claim")

    @precondition(lambda self: len(self._live_pods()) < MAX_PODS)
    @rule(kind=st.sampled_from(POD_KINDS), priority=st.sampled_from(PRIORITIES))
    def pod_of_new_template(self, kind: str, priority: int) -> None:
        self._create_pod(template=self._create_template(kind), priority=priority)
        self._settle("pod_of_new_template")

    @precondition(lambda self: len(self._live_pods()) < MAX_PODS)
    @rule(kind=st.sampled_from(POD_KINDS), priority=st.sampled_from(PRIORITIES))
    def pod_of_new_claim(self, kind: str, priority: int) -> None:
        self._create_pod(claim=self._create_claim(kind), priority=priority)
        self._settle("pod_of_new_claim")

    @precondition(lambda self: len(self._live_pods()) < MAX_PODS)
    @rule(standalone=st.booleans())
    def pod_for_the_second_allocator(self, standalone: bool) -> None:
        """A pod whose claim tolerates drasat's allocator taint (kube-scheduler allocates it)."""
        if standalone:
            self._create_pod(claim=self._create_claim("tolerates-all"))
        else:
            self._create_pod(template=self._create_template("tolerates-all"))
        self._settle("pod_for_the_second_allocator")

    @precondition(
        lambda self: (self.templates or self.claims) and len(self._live_pods()) < MAX_PODS
    )
    @rule(data=st.data(), priority=st.sampled_from(PRIORITIES))
    def pod_of_existing(self, data: st.DataObject, priority: int) -> None:
        """Another pod of a template (a claim of its own) or of a standalone claim (shared)."""
        sources = [("template", t) for t in sorted(self.templates)]
        sources += [("claim", c) for c in sorted(self.claims)]
        how, name = data.draw(st.sampled_from(sources), label="source")
        if how == "template":
            self._create_pod(template=name, priority=priority)
        else:
            self._create_pod(claim=name, priority=priority)
        self._settle("pod_of_existing")

    @precondition(lambda self: len(self._live_pods()) < MAX_PODS - 2)
    @rule(kind=st.sampled_from(SHARED_KINDS), pods=st.integers(2, 3))
    def create_shared_claim(self, kind: str, pods: int) -> None:
        claim = self._create_claim(kind)
        for _ in range(pods):
            self._create_pod(claim=claim)
        self._settle("create_shared_claim")

    @precondition(lambda self: len(self._live_pods()) < MAX_PODS - 2)
    @rule(kind=st.sampled_from(GANG_KINDS), size=st.integers(2, 3))
    def create_gang(self, kind: str, size: int) -> None:
        template = self._create_template(kind)
        gang = self._name("g")
        self.gangs[gang] = size
        labels = {GANG_LABEL: gang, GANG_SIZE_LABEL: str(size)}
        for _ in range(size):
            self._create_pod(template=template, labels=labels)
        self._settle("create_gang")

    @precondition(lambda self: self.world.rounds > 0)
    @rule(data=st.data(), phase=st.sampled_from(["Succeeded", "Failed"]))
    def finish_pod(self, data: st.DataObject, phase: str) -> None:
        running = sorted(p["metadata"]["name"] for p in self._live_pods()
                         if (p.get("status") or {}).get("phase") == "Running")  # fmt: skip
        if not running:
            self._settle("finish_pod (none running)")
            return
        name = data.draw(st.sampled_from(running), label="pod")
        pod = self.world.admin.get(r.PODS, name, namespace=NAMESPACE)
        self.world.set_phase(pod, phase)
        self._settle("finish_pod")

    @rule(least=st.integers(1, 6))
    def create_budget(self, least: int) -> None:
        """A PodDisruptionBudget over every pod of the namespace: at least `least` bound."""
        self.world.budgets[self._name("b")] = least
        self._settle("create_budget")

    @precondition(lambda self: self.world.budgets)
    @rule(data=st.data())
    def delete_budget(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.world.budgets)), label="budget")
        del self.world.budgets[name]
        self._settle("delete_budget")

    @precondition(lambda self: self.world.rounds > 0)
    @rule(data=st.data())
    def delete_pod(self, data: st.DataObject) -> None:
        listed = self.world.read(r.PODS, NAMESPACE)
        names = sorted(p["metadata"]["name"] for p in listed)
        if not names:
            self._settle("delete_pod (none)")
            return
        name = data.draw(st.sampled_from(names), label="pod")
        with contextlib.suppress(errors.NotFound):
            self.world.admin.delete(r.PODS, name, namespace=NAMESPACE)
        self._settle("delete_pod")

    @precondition(lambda self: self.claims)
    @rule(data=st.data())
    def delete_workload(self, data: st.DataObject) -> None:
        """`kubectl delete -f` of a standalone claim and its pods: the claim first, then each
        pod naming it, in one step."""
        name = data.draw(st.sampled_from(sorted(self.claims)), label="claim")
        with contextlib.suppress(errors.NotFound):
            self.world.admin.delete(r.RESOURCE_CLAIMS_V1, name, namespace=NAMESPACE)
        del self.claims[name]
        for pod in self.world.read(r.PODS, NAMESPACE):
            if name in truth.claim_names(pod):
                with contextlib.suppress(errors.NotFound):
                    self.world.admin.delete(r.PODS, pod["metadata"]["name"], namespace=NAMESPACE)
        self._settle("delete_workload")

    # --- rules: nodes -------------------------------------------------------------------------

    def _node_names(self) -> list[str]:
        return sorted(n for n in NODES if n not in self.deleted_nodes)

    @rule(data=st.data(), cordon=st.booleans())
    def cordon(self, data: st.DataObject, cordon: bool) -> None:
        node = data.draw(st.sampled_from(self._node_names()), label="node")
        self.world.admin.patch(r.NODES, node, {"spec": {"unschedulable": cordon or None}})
        self._settle("cordon" if cordon else "uncordon")

    @rule(data=st.data())
    def drain(self, data: st.DataObject) -> None:
        """kubectl drain: cordon, then evict every pod bound there."""
        node = data.draw(st.sampled_from(self._node_names()), label="node")
        self.world.admin.patch(r.NODES, node, {"spec": {"unschedulable": True}})
        self._delete_pods_on(node)
        self._settle("drain")

    def _delete_pods_on(self, node: str) -> None:
        for pod in self.world.read(r.PODS, NAMESPACE):
            if (pod.get("spec") or {}).get("nodeName") == node:
                with contextlib.suppress(errors.NotFound):
                    self.world.admin.delete(r.PODS, pod["metadata"]["name"], namespace=NAMESPACE)

    @precondition(lambda self: len(self.deleted_nodes) < len(NODES) - 1)
    @rule(data=st.data())
    def delete_node(self, data: st.DataObject) -> None:
        """The Node goes (its NAS and slices with it); the pod GC deletes its pods."""
        node = data.draw(st.sampled_from(self._node_names()), label="node")
        self.world.admin.delete(r.NODES, node)
        self._delete_pods_on(node)
        self.deleted_nodes.add(node)
        self._settle("delete_node")

    @precondition(lambda self: self.deleted_nodes)
    @rule(data=st.data())
    def node_comes_back(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(sorted(self.deleted_nodes)), label="node")
        self.world.add_node(node, NODES[node])
        self.deleted_nodes.discard(node)
        self._settle("node_comes_back")

    # --- rules: other writers, faults, replicas -------------------------------------------------

    @precondition(lambda self: self.claims)
    @rule(data=st.data(), onto_held=st.booleans())
    def admin_allocates(self, data: st.DataObject, onto_held: bool) -> None:
        """An admin writes a claim's status.allocation: a GPU not in MIG mode (whole, or a share
        for a share claim), one that some claim holds (`onto_held`) or one nobody holds."""
        claims = {c["metadata"]["name"]: c for c in self._claim_objects()}
        names = sorted(n for n in self.claims if n in claims and not truth.results_of(claims[n])
                       and _on_a_whole_gpu(self.claims[n]))  # fmt: skip
        held = self.world.allocated_devices()
        spots = [
            (node, f"gpu-{g.minor}")
            for node in self._node_names()
            for g in self.world.gpus[node]
            if not g.mig and (f"gpu-{g.minor}" in held.get(node, set())) == onto_held
        ]
        if not names or not spots:
            self._settle("admin_allocates (nothing to do)")
            return
        name = data.draw(st.sampled_from(names), label="claim")
        node, device = data.draw(st.sampled_from(spots), label="device")
        ask = KINDS[self.claims[name]][1]
        share = ask.share if ask is not None else None
        self.world.write_allocation(claims[name], node, device, share=share)
        self._settle("admin_allocates")

    @rule(
        call=st.sampled_from(CONTROLLER_CALLS),
        code=st.sampled_from(FAULT_CODES),
        times=st.sampled_from([1, 3, 1000]),
        rounds=st.sampled_from([1, 4, 12]),
        after_write=st.booleans(),
    )
    def api_fault(
        self, call: tuple[str, str], code: Any, times: int, rounds: int, after_write: bool
    ) -> None:
        """The next `times` calls of one verb on one kind by the leader's cycles fail, for the
        next `rounds` rounds (so also during the rules that come next)."""
        verb, plural = call
        after_write = after_write and code == "timeout" and verb not in ("get", "list")
        self.world.faults.arm(
            Fault(verb, plural, code, times=times, rounds=rounds, after_write=after_write)
        )
        self._settle("api_fault")

    @rule(
        data=st.data(),
        verb=st.sampled_from(["replace_status", "patch"]),
        code=st.sampled_from([500, 409, 429]),
    )
    def object_refused(self, data: st.DataObject, verb: str, code: Any) -> None:
        """Every write of one verb on one claim fails for the next 30 rounds (a webhook or a
        validation refusing that object, a server failing on it)."""
        listed = self._claim_objects()
        names = sorted(c["metadata"]["name"] for c in listed if not truth.results_of(c))
        if names:
            name = data.draw(st.sampled_from(names), label="claim")
            refused = Fault(verb, "resourceclaims", code, name=name, times=10**6, rounds=30)
            self.world.faults.arm(refused)
        self._settle("object_refused")

    @rule()
    def restart_leader(self) -> None:
        """The leading replica's process starts again (a fresh controller, same identity)."""
        leader = self.world.replicas[max(self.world.leader, 0)]
        leader.stop()
        leader.start()
        self.world.catch_up()
        self._settle("restart_leader")

    @rule(after=st.sampled_from([None, 1, 2, 3, 5, 8]))
    def change_leader(self, after: int | None) -> None:
        """The lease moves to the other replica: now (`after` None), or after the leader's next
        `after` write checks in its next cycle (it loses the lease in the middle of it)."""
        current = max(self.world.leader, 0)
        other = 1 - current
        if after is None:
            self.world.leader = other
        else:
            self.world.replicas[current].lease_left = after
            self.world.next_leader = other
        self._settle("change_leader")


def _pending(pod: Obj) -> bool:
    return (
        not (pod.get("spec") or {}).get("nodeName")
        and not pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
    )


def _all_allocated(pod: Obj, by_name: dict[str, Obj]) -> bool:
    names = pod_claim_names(pod)
    return None not in names and all(truth.results_of(by_name.get(str(n)) or {}) for n in names)


def _held_uses(
    nomination: Nomination, owner: str, gpus: dict[str, Any]
) -> dict[tuple[str, int], list[truth.Use]]:
    """The devices a nomination holds, by GPU, each use named after its owner (a pod, or a
    gang): its held entries read as the model reads a node's ledger."""
    nases = [
        {"metadata": {"name": node},
         "spec": {"allocatedClaims": {k: e.model_dump(mode="json", exclude_none=True)
                                      for k, e in entries.items()}}}
        for node, entries in nomination.held.items()
    ]  # fmt: skip
    found, _ = truth.ledger_holdings(nases, gpus)
    return {
        at: [dataclasses.replace(u, claim=owner, uid=owner) for u in held]
        for at, held in found.items()
    }


def _on_a_whole_gpu(kind: str) -> bool:
    """Whether claims of the kind take a GPU not in MIG mode (whole or a share of it)."""
    ask = KINDS[kind][1]
    return ask is not None and (ask.whole == 1 or ask.share is not None)
