"""Preemption in the v1 controller: a refused pod evicts the lower-priority pods the planner
chooses, and the allocation it was planned is held for it until it is placed.

After a cycle's placements, `Preempter.consider` hands the refused pods that may preempt
(preemption enabled by the policy, a priority above some running pod's, not `preemptionPolicy:
Never`; a gang whose pods are all refused, as one) to the one planner,
`drasat.v1.preemption.plan_all`, over the nodes as the cycle's placements left them and the
devices already held. The victims of each plan are evicted through the Eviction API (the API
server refuses an eviction a budget does not allow: 429), each with an Event naming the
preemptor (`Preempted`), and then the preemptor gets `Preempting`, naming the victims evicted.

**A nomination** then holds the preemptor's whole planned allocation (the victims' devices and
the free ones its fit check used) against pods of its priority and lower (`holds`, which the
allocation and every later plan apply), as kube-scheduler holds a nominated pod's request. It is
written where a restarted controller or a new leader finds it: the annotation
`gpu.drasat.io/nomination` on the preemptor's pod (node, priority, victims, the claims they free
and the held ledger entries) and the pod's `status.nominatedNodeName`. A nomination ends when
its pod is placed or deleted, when a higher-priority preemption on its node displaces it (as
upstream clears the lower-priority nominations of a node it preempts on), or when the claims its
victims free are all given back and it is still refused (a higher-priority pod took the devices,
or the node changed): then it plans again. While those claims are still allocated it does not
preempt again (KEP-5690's settling rule). An eviction that fails ends the nomination before it
is written, and keeps that victim out of the preemptor's plans for `REFUSED_TTL_S`; the
`PreemptionRefused` Event names the cause (a budget, the API server's throttling, RBAC, a server
error).

A preemptor that kube-scheduler could not bind on its nominated node after drasat placed it
there (its claim given back: inter-pod affinity, host ports, anything drasat's filters do not
check) is not preempted for again for `UNBINDABLE_BACKOFF_S`: evicting more pods for it could
go in vain the same way.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from drasat.api import nodefit
from drasat.api.groups import NOMINATION_ANNOTATION
from drasat.api.policy import AllocationPolicySpec
from drasat.controller import v1inputs
from drasat.controller.cycle import releasing
from drasat.kube import errors, eviction
from drasat.kube import resources as r
from drasat.kube.client import Api, Obj
from drasat.kube.events import EventRecorder
from drasat.solver import Gang
from drasat.v1 import Node, nominations, otherdevices, preemption
from drasat.v1.gangs import never_preempts, priority_of, unit_of
from drasat.v1.nominations import Nomination, holds_of
from drasat.v1.preemption import Hold, Plan, Running, Wanting

log = logging.getLogger(__name__)

REASON_PREEMPTING = "Preempting"
REASON_PREEMPTED = "Preempted"
REASON_REFUSED = "PreemptionRefused"
#: Why a refused pod has no preemption (said once per reason, for `drasat explain`).
REASON_NONE = "NoPreemption"
#: How long a victim whose eviction was refused stays out of that preemptor's plans.
REFUSED_TTL_S = 60.0
#: How long a pod that could not preempt waits before it is planned again (a plan over a large
#: cluster takes a fraction of a second: not every cycle for every refused pod).
RETRY_S = 30.0
#: How long drasat does not preempt for a pod kube-scheduler could not bind where drasat
#: placed it after a preemption.
UNBINDABLE_BACKOFF_S = 300.0


@dataclass
class Preempter:
    api: Api
    recorder: EventRecorder
    clock: Callable[[], float] = time.monotonic
    may_write: Callable[[], bool] = lambda: True
    #: pod key -> its nomination, as this process wrote it (the pod informer may lag).
    nominations: dict[str, Nomination] = field(default_factory=dict)
    #: pod uid -> nominations this process ended (the informer may still show them).
    _ended: set[tuple[str, str]] = field(default_factory=set)
    #: preemptor -> victim -> until when it is not evicted for it again (an eviction failed).
    _refused: dict[str, dict[str, float]] = field(default_factory=dict)
    _budgets_said: bool = False
    #: preemptor -> why it could not preempt, as last said, and when.
    said: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: preemptor -> until when it does not preempt (kube-scheduler could not bind it).
    _backoff: dict[str, float] = field(default_factory=dict)
    #: gang -> the victim gang evicted in part (an eviction refused midway), left to finish.
    unfinished: dict[str, Unfinished] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # The cycle's hooks.
    def holds(self, snapshot: v1inputs.Snapshot) -> list[Hold]:
        """The devices held for every nominated preemptor still pending: from the pods'
        annotations (a restarted controller or a new leader reads them there) and this
        process's own writes. Nominations of pods no longer pending end here."""
        return holds_of(self.current(snapshot).values())

    def current(self, snapshot: v1inputs.Snapshot) -> dict[str, Nomination]:
        """pod key -> the live nomination of each pending pod."""
        pending = {v1inputs.pod_key(p): p for p in snapshot.pods if v1inputs.is_pending(p)}
        out: dict[str, Nomination] = {}
        for key, pod in pending.items():
            found = nominations.believed(
                pod,
                own_claims(pod, snapshot),
                snapshot.pod_groups,
                priority=priority_of(pod, snapshot.pod_groups),
            )
            if found is None or (found.uid, found.since) in self._ended:
                continue
            out[key] = found
        for key, found in list(self.nominations.items()):
            still = pending.get(key)
            if still is None or str(still["metadata"].get("uid", "")) != found.uid:
                del self.nominations[key]  # placed (bound, or its claims allocated) or gone
                continue
            out[key] = found
        for key, found in list(out.items()):
            out[key] = checked(found, pending[key], snapshot)
        live = set(pending)
        self._refused = {k: v for k, v in self._refused.items() if k in live}
        self.said = {k: v for k, v in self.said.items() if k in live}
        self._backoff = {k: v for k, v in self._backoff.items() if k in live}
        return out

    def end_untried(self, snapshot: v1inputs.Snapshot, tried: Collection[str]) -> None:
        """End the nominations of the pending pods this cycle does not try (`tried`: the
        pods it does): a nominee held back (its gang incomplete, its PodGroup gone, another
        owner's gate) would otherwise hold its devices for as long as it stays so."""
        pods = {v1inputs.pod_key(p): p for p in snapshot.pods}
        for key, found in self.current(snapshot).items():
            if key not in tried:
                self._end(found, pods[key], "it is not tried now (held back before placement)")

    def consider(
        self,
        snapshot: v1inputs.Snapshot,
        nodes: Sequence[Node],
        refused: Sequence[v1inputs.Pending],
        policy: AllocationPolicySpec,
        gangs: Mapping[str, Gang] | None = None,
    ) -> int:
        """Preempt for the refused pods that may; how many preemptors got victims. `nodes`:
        the cluster as this cycle's placements left it; `gangs`: the cycle's gangs (a gang's
        pods preempt together, only when all are refused). A failure here is logged and never
        stops the cycle (the pods stay refused, tried again next)."""
        try:
            return self._consider(snapshot, nodes, refused, policy, gangs or {})
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
        gangs: Mapping[str, Gang],
    ) -> int:
        if not policy.preemption.enabled:
            return 0
        current = self.current(snapshot)
        self._end_unbindable(snapshot, current)
        running, users, leaving = running_pods(snapshot)
        lowest = min((r.priority for r in running), default=None)
        wanting = self._wanting(snapshot, refused, gangs, current, lowest)
        if not wanting:
            return 0
        read = self._budgets(snapshot)
        labels = {v1inputs.pod_key(p): (p.get("metadata") or {}) for p in snapshot.pods}
        running = [_with_budgets(r, labels[r.key], read) for r in running]
        allowance = {name: allowed for name, (_, _, allowed) in read.items()}
        drawn = claim_draws(snapshot)
        base = [preemption.without(n, leaving.get(n.state.name, set()), (), drawn) for n in nodes]
        now = self.clock()
        planned = preemption.plan_all(
            [w for w, _ in wanting],
            base,
            [r for r in running if not self._skipped(r.key, wanting, now)],
            users,
            snapshot.claim_classes,
            policy=policy,
            budgets=allowance,
            holds=holds_of(current.values()),
            lasting=lasting_claims(snapshot),
            drawn=drawn,
        )
        items = {w.key: pods for w, pods in wanting}
        done = 0
        for found in planned.plans:
            pods = items[found.preemptor]
            if found.node is None:
                self._say(found, pods, now)
                continue
            done += self._preempt(found, pods, snapshot, running, current, leaving, users)
        return done

    # Inside.
    def _wanting(
        self,
        snapshot: v1inputs.Snapshot,
        refused: Sequence[v1inputs.Pending],
        gangs: Mapping[str, Gang],
        current: dict[str, Nomination],
        lowest: int | None,
    ) -> list[tuple[Wanting, list[v1inputs.Pending]]]:
        """The refused pods that may preempt now, a gang's all together (or none of them);
        the nominations that end here leave `current`."""
        now = self.clock()
        allocated = {
            str(c["metadata"].get("uid", "")): c
            for c in snapshot.claims.values()
            if v1inputs.is_allocated(c)
        }
        of_gang = {p: name for name, gang in gangs.items() for p in gang.pods}
        by_gang: dict[str, list[v1inputs.Pending]] = {}
        out: list[tuple[Wanting, list[v1inputs.Pending]]] = []
        for item in refused:
            key = item.input.key
            if never_preempts(item.pod, snapshot.pod_groups):
                continue
            # A PodGroup's pod preempts at its group's priority, as kube-scheduler's does.
            priority = priority_of(item.pod, snapshot.pod_groups)
            if priority != item.input.priority:
                item = dataclasses.replace(
                    item, input=dataclasses.replace(item.input, priority=priority)
                )
            if self._backoff.get(key, 0.0) > now:
                continue
            found = current.get(key)
            if found is not None:
                if any(uid in allocated for uid in found.freed):
                    continue  # its victims' claims are still being given back: it waits
                # Given back and still refused: the devices went elsewhere; it plans again.
                self._end(found, item.pod, "its victims' devices were given back and it still "
                          "did not fit")  # fmt: skip
                del current[key]
            if lowest is None or item.input.priority <= lowest:
                continue
            last = self.said.get(key)
            if last is not None and now - last[1] < RETRY_S:
                continue  # it could not preempt a moment ago: not planned every cycle
            name = of_gang.get(key)
            if name is None:
                out.append((Wanting.of(item.input), [item]))
            else:
                by_gang.setdefault(name, []).append(item)
        for name, items in by_gang.items():
            gang = gangs[name]
            if {i.input.key for i in items} != set(gang.pods):
                continue  # some of its pods were placed or wait: never for a part of a gang
            ordered = sorted(items, key=lambda i: i.input.key)
            out.append((Wanting(tuple(i.input for i in ordered), gang), ordered))
        return out

    def _skipped(self, victim: str, wanting: Sequence[tuple[Wanting, object]], now: float) -> bool:
        """A victim whose eviction failed lately for one of these preemptors."""
        for want, _ in wanting:
            for pod in want.pods:
                if self._refused.get(pod.key, {}).get(victim, 0.0) > now:
                    return True
        return False

    def _say(self, found: Plan, items: Sequence[v1inputs.Pending], now: float) -> None:
        last = self.said.get(found.preemptor)
        if last is None or last[0] != found.reason:  # once per reason
            log.info("no preemption for %s: %s", found.preemptor, found.reason)
            for item in items:
                self.recorder.normal(item.pod, REASON_NONE, found.reason)
        self.said[found.preemptor] = (found.reason, now)

    def _end_unbindable(self, snapshot: v1inputs.Snapshot, current: dict[str, Nomination]) -> None:
        """A nominee whose claim kube-scheduler gave back on its nominated node: no more
        preemption for it for a while (more victims could go in vain the same way)."""
        pods = {v1inputs.pod_key(p): p for p in snapshot.pods}
        for key, found in list(current.items()):
            why = (snapshot.unsuitable.get(key) or {}).get(found.node)
            if why is None:
                continue
            self._backoff[key] = self.clock() + UNBINDABLE_BACKOFF_S
            text = (f"kube-scheduler could not bind it on node {found.node}, where drasat had "
                    f"freed devices for it ({why}); drasat does not preempt for it again for "
                    f"{UNBINDABLE_BACKOFF_S:.0f}s")  # fmt: skip
            self.said[key] = (text, self.clock())
            self.recorder.warning(pods[key], REASON_REFUSED, text)
            self._end(found, pods[key], "kube-scheduler could not bind it there")
            del current[key]

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
        found: Plan,
        items: Sequence[v1inputs.Pending],
        snapshot: v1inputs.Snapshot,
        running: Sequence[Running],
        current: Mapping[str, Nomination],
        leaving: Mapping[str, set[str]],
        users: Mapping[str, frozenset[str]],
    ) -> int:
        """Evict the plan's victims, then write its nomination; 1 when it evicted."""
        if not self.may_write():
            return 0
        pods = {v1inputs.pod_key(p): p for p in snapshot.pods}
        priorities = {r.key: r.priority for r in running}
        lead = items[0]
        evicted: list[str] = []
        # Every eviction is tried as a dry run first, and none is done unless all would be: a
        # budget or a refusal on the second victim never leaves a gang evicted in part, nor a
        # victim evicted for a plan that cannot go on.
        checks = ((v, True) for v in found.victims)
        for victim, dry_run in (*checks, *((v, False) for v in found.victims)):
            failure = self._evict(pods[victim], found, lead, dry_run=dry_run)
            if failure is None:
                if not dry_run:
                    evicted.append(victim)
                continue
            for item in items:
                self._refused.setdefault(item.input.key, {})[victim] = self.clock() + REFUSED_TTL_S
            if not evicted:
                # Nothing done (a dry run refused, or the first eviction): no nomination; it
                # picks again next cycle without this victim.
                for item in items:
                    self.recorder.warning(item.pod, REASON_REFUSED,
                                          f"the eviction of {victim} was refused: {failure}; "
                                          "drasat picks other victims")  # fmt: skip
                return 0
            # Refused midway, after every dry run passed (the server's view is fresher than
            # the plan's: a budget spent since, a throttled or failed request): the victims
            # evicted stay evicted, so what they free is held for the preemptor as planned
            # (it waits for their claims only, then plans again for the rest, this victim
            # left out), and a gang left below its minimum is finished (`finish_units`).
            by_key = {r.key: r for r in running}
            gone = set(evicted)
            freed = tuple(u for u in found.freed if users.get(u, frozenset()) <= gone)
            partial = dataclasses.replace(found, victims=tuple(evicted), freed=freed)
            self._note_units(partial, found, by_key)
            for item in items:
                self.recorder.warning(item.pod, REASON_REFUSED,
                                      f"the eviction of {victim} was refused: {failure}; "
                                      f"{', '.join(evicted)} evicted already: what they free "
                                      "is held for this pod, which plans again for the rest "
                                      "once they are given back")  # fmt: skip
            self._nominate_all(partial, items, current, pods, leaving, priorities, evicted)
            return 1
        self._nominate_all(found, items, current, pods, leaving, priorities, evicted)
        return 1 if found.victims else 0

    def _note_units(self, partial: Plan, found: Plan, running: Mapping[str, Running]) -> None:
        """The victim gangs an eviction refused midway left evicted in part and unable to run:
        one that goes whole or not at all, or that has fewer pods left than its minimum."""
        evicted = set(partial.victims)
        members: dict[str, list[Running]] = {}
        for pod in running.values():
            if pod.unit is not None:
                members.setdefault(pod.unit, []).append(pod)
        touched = {u for v in evicted if v in running and (u := running[v].unit) is not None}
        for unit in sorted(touched):
            mine = members[unit]
            left = tuple(sorted(r.key for r in mine if r.key not in evicted))
            if left and (mine[0].minimum == 0 or len(left) < mine[0].minimum):
                gone = sorted(r.key for r in mine if r.key in evicted)
                self.unfinished[unit] = Unfinished(unit, left, tuple(gone), found.preemptor,
                                                   found.priority)  # fmt: skip

    def finish_units(self, snapshot: v1inputs.Snapshot) -> None:
        """Evict the rest of each victim gang left evicted in part: its pods left hold devices
        for nothing (it cannot run below its minimum). The cycle's hook, every cycle (pods
        pending or not) until none is left; an eviction a budget refuses waits for it
        (preemption never overrides a budget). A failure is logged, never stops the cycle."""
        if not self.unfinished or not self.may_write():
            return
        try:
            self._finish_units(snapshot)
        except Exception:
            log.exception("preemption: finishing gangs evicted in part failed")

    def _finish_units(self, snapshot: v1inputs.Snapshot) -> None:
        pods = {v1inputs.pod_key(p): p for p in snapshot.pods}
        live = {r.key for r in running_pods(snapshot)[0]}
        for unit, left in list(self.unfinished.items()):
            still = tuple(k for k in left.members if k in live)
            if not still:
                del self.unfinished[unit]
                continue
            self.unfinished[unit] = dataclasses.replace(left, members=still)
            for key in still:
                why = (f"gang {unit} was evicted in part for {left.preemptor} (priority "
                       f"{left.priority}): {', '.join(left.evicted)} went, and an eviction "
                       "was refused midway; a gang left below its minimum holds its devices "
                       "for nothing")  # fmt: skip
                failure = self._evict_to_finish(pods[key], why)
                if failure is not None:
                    log.info("preemption: cannot finish gang %s yet: %s: %s", unit, key, failure)

    def _evict_to_finish(self, pod: Obj, why: str) -> str | None:
        try:
            if eviction.evict(self.api, pod):
                self.recorder.warning(pod, REASON_PREEMPTED, f"evicted by drasat: {why}")
                return None
            failure = "a PodDisruptionBudget does not allow it now (429)"
        except errors.KubeError as error:
            failure = str(error)
        self.recorder.warning(pod, REASON_REFUSED, f"drasat cannot evict it yet ({failure}): "
                              f"{why}; tried again each cycle")  # fmt: skip
        return failure

    def _nominate_all(
        self,
        found: Plan,
        items: Sequence[v1inputs.Pending],
        current: Mapping[str, Nomination],
        pods: Mapping[str, Obj],
        leaving: Mapping[str, set[str]],
        priorities: Mapping[str, int],
        evicted: Sequence[str],
    ) -> None:
        """Write the plan's nomination on each of its pods, with `Preempting` where it
        evicted."""
        # Nominations of lower priority on these nodes may no longer fit: they plan again.
        nodes = set(found.pods.values())
        for other in current.values():
            if other.priority < found.priority and other.node in nodes and other.pod in pods:
                self._end(other, pods[other.pod], f"a pod of priority {found.priority} "
                          f"preempted on node {other.node}")  # fmt: skip
        freed = found.freed
        if not found.victims:
            # It waits for pods already leaving: the claims they free are what it waits for.
            freed = tuple(sorted({u for n in nodes for u in leaving.get(n, set())}))
        stamp = _stamp()
        for item in items:
            node = found.pods.get(item.input.key, found.node or "")
            mine = {n: e for n, e in found.held.items() if n == node}
            took = {n: d for n, d in found.drawn.items() if n == node}
            nomination = Nomination(item.input.key, str(item.pod["metadata"].get("uid", "")),
                                    node, item.input.priority, found.victims, freed, mine, stamp,
                                    found.preemptor if len(items) > 1 else None,
                                    took)  # fmt: skip
            self._nominate(item.pod, nomination)
            if found.victims:
                named = ", ".join(f"{v} (priority {priorities.get(v, 0)})" for v in evicted)
                proof = "proven optimal" if found.proven else "optimality not proven"
                proof += f", {preemption.checked(found.checks)}"
                whom = f" for gang {found.preemptor}" if len(items) > 1 else ""
                self.recorder.normal(item.pod, REASON_PREEMPTING,
                                     f"evicted {named}{whom} to free the devices this pod "
                                     f"(priority {item.input.priority}) needs on node {node}; "
                                     f"they are held for it until it is placed; the victims "
                                     f"are the solver's choice ({proof})")  # fmt: skip

    def _evict(
        self, pod: Obj, found: Plan, lead: v1inputs.Pending, *, dry_run: bool = False
    ) -> str | None:
        """Evict one victim (`dry_run`: only ask whether it would be); None when evicted (or
        gone, or it would be), else why not, in words."""
        key = v1inputs.pod_key(pod)
        try:
            if eviction.evict(self.api, pod, dry_run=dry_run):
                if dry_run:
                    return None
                log.info("preemption: evicted %s for %s", key, found.preemptor)
                self.recorder.warning(pod, REASON_PREEMPTED,
                                      f"evicted by drasat for {_whom(found, lead)} (priority "
                                      f"{found.priority}), which needs its devices on node "
                                      f"{found.node}")  # fmt: skip
                return None
            return "a PodDisruptionBudget does not allow it now (429)"
        except errors.Unavailable as error:
            if error.status == 429:
                return f"the API server is throttling drasat's requests ({error})"
            return f"the API server failed ({error})"
        except errors.KubeError as error:
            if error.status == 403:
                return (f"drasat's controller may not evict pods ({error}): it needs create on "
                        "pods/eviction (the chart grants it)")  # fmt: skip
            return f"the API server refused it ({error})"

    def _nominate(self, pod: Obj, nomination: Nomination) -> None:
        """Write the nomination on the pod (annotation, then `status.nominatedNodeName`); kept
        in memory first, so that the cycles before the informer shows it hold it too."""
        self.nominations[nomination.pod] = nomination
        meta = pod["metadata"]
        patch = {"metadata": {"annotations": {NOMINATION_ANNOTATION: nomination.annotation()}}}
        try:
            self.api.patch(r.PODS, meta["name"], patch, namespace=meta["namespace"])
            self.api.patch(r.PODS, meta["name"], {"status": {"nominatedNodeName":
                           nomination.node}}, namespace=meta["namespace"],
                           subresource="status")  # fmt: skip
        except errors.KubeError as error:
            # Held in memory still; a restart before the write reaches the pod loses the hold.
            log.warning("preemption: cannot write the nomination of %s: %s", nomination.pod, error)

    def _end(self, found: Nomination, pod: Obj, why: str) -> None:
        """End a nomination: the hold goes, the annotation and `nominatedNodeName` too."""
        log.info("preemption: the nomination of %s on %s ends: %s", found.pod, found.node, why)
        self.nominations.pop(found.pod, None)
        self._ended.add((found.uid, found.since))
        if not self.may_write():
            return
        meta = pod["metadata"]
        try:
            self.api.patch(r.PODS, meta["name"],
                           {"metadata": {"annotations": {NOMINATION_ANNOTATION: None}}},
                           namespace=meta["namespace"])  # fmt: skip
            self.api.patch(r.PODS, meta["name"], {"status": {"nominatedNodeName": None}},
                           namespace=meta["namespace"], subresource="status")  # fmt: skip
        except errors.NotFound:
            pass
        except errors.KubeError as error:
            log.warning("preemption: cannot clear the nomination of %s: %s", found.pod, error)


@dataclass(frozen=True)
class Unfinished:
    """A victim gang evicted in part (an eviction refused midway), whose other pods drasat
    evicts next."""

    gang: str
    #: Its pods still to evict (namespace/name).
    members: tuple[str, ...]
    #: Its pods evicted already.
    evicted: tuple[str, ...]
    preemptor: str
    priority: int


def checked(found: Nomination, pod: Obj, snapshot: v1inputs.Snapshot) -> Nomination:
    """The nomination as far as the cluster vouches for it (`nominations.checked`)."""
    return nominations.checked(
        found,
        pod,
        own_claims(pod, snapshot),
        snapshot.pod_groups,
        priority=priority_of(pod, snapshot.pod_groups),
    )


def own_claims(pod: Obj, snapshot: v1inputs.Snapshot) -> frozenset[str]:
    """The uids of the claims the pod names (that exist)."""
    namespace = str(pod["metadata"].get("namespace", ""))
    return frozenset(
        str(claim["metadata"].get("uid", ""))
        for name in v1inputs.pod_claim_names(pod)
        if name and (claim := snapshot.claims.get(f"{namespace}/{name}")) is not None
    )


def _whom(found: Plan, lead: v1inputs.Pending) -> str:
    if found.preemptor != lead.input.key:
        return f"gang {found.preemptor}"
    return f"pod {found.preemptor}"


def _stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def claim_draws(snapshot: v1inputs.Snapshot) -> dict[str, preemption.Draws]:
    """Claim uid -> what its results draw of other drivers' devices (a NIC) on its node, by the
    claims' statuses (their ledger): an evicted claim gives it back."""
    out: dict[str, preemption.Draws] = {}
    for claim in snapshot.claims.values():
        if not v1inputs.is_allocated(claim):
            continue
        for used in otherdevices.held([claim], snapshot.others).values():
            if used:
                out[str(claim["metadata"].get("uid", ""))] = tuple(sorted(used.items()))
    return out


def lasting_claims(snapshot: v1inputs.Snapshot) -> frozenset[str]:
    """The allocated claims that stay allocated when their pods leave: those that the
    resourceclaim controller does not deallocate (`outlives_its_pods`) and drasat's settle does
    not either (`releasing.deallocates`: drasat's own allocations, given back once no pod uses
    them, so evicting every pod of a standalone claim of drasat's frees its devices)."""
    return frozenset(
        str(c["metadata"].get("uid", ""))
        for c in snapshot.claims.values()
        if v1inputs.is_allocated(c)
        and preemption.outlives_its_pods(c)
        and not releasing.deallocates(c, snapshot.classes)
    )


def running_pods(
    snapshot: v1inputs.Snapshot,
) -> tuple[list[Running], dict[str, frozenset[str]], dict[str, set[str]]]:
    """The pods on nodes that hold drasat's allocated claims there (a gang's with its key); claim
    uid -> every pod using it (pending, running or leaving: a claim is freed only with all of
    them); node -> the claims held only by pods already leaving (being deleted), which the next
    plan frees."""
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
        priority = priority_of(pod, snapshot.pod_groups)
        mine = tuple(u for u in uids if where.get(u) == node_name)
        unit, minimum = unit_of(pod, snapshot.pod_groups)
        running.append(Running(key, str(node_name), priority, mine, cpu, memory, unit=unit,
                               minimum=minimum))  # fmt: skip
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
