"""The controller's side of preemption (`controller.preemption.Preempter`) over a recording fake
API: the victim is evicted through the Eviction API with Events naming each other (`Preempting`
only once an eviction happened), the preemptor's planned allocation is held for it and written
on the pod (annotation and `status.nominatedNodeName`, which a new leader reads back), a failed
eviction names its cause and makes it pick again without that victim, a PodDisruptionBudget read
from the API keeps its pod, a nominee waits while its victims' claims are given back, a claim
that outlives its pods is never counted as freed (a standalone claim drasat gives back is). The
real API server and kubelets run it in tests/e2e/test_e2e_v1_preemption.py."""

from __future__ import annotations

import dataclasses
from typing import Any

from checker import make_node

from drasat import v1
from drasat.api import groups
from drasat.api.devicemodel import classes
from drasat.api.groups import NOMINATION_ANNOTATION
from drasat.api.policy import AllocationPolicySpec, Preemption
from drasat.controller import preemption as ctl
from drasat.controller import v1inputs
from drasat.kube import errors
from drasat.kube.client import ObjectList
from drasat.kube.events import EventRecorder
from drasat.solver import Gang
from drasat.v1 import nasinventory, publisheddevices
from drasat.v1 import preemption as plan
from drasat.v1.nominations import Nomination

Obj = dict[str, Any]
CLASSES = {c["metadata"]["name"]: c for c in classes.device_classes()}
POLICY = AllocationPolicySpec()


class FakeApi:
    """Records evictions and Events; refuses evictions of the named pods with a 429."""

    def __init__(
        self,
        refuse: set[str] | None = None,
        budgets: list[Obj] | None = None,
        error: errors.KubeError | None = None,
    ) -> None:
        self.refuse = refuse or set()
        self.budgets = budgets or []
        self.error = error
        #: pod name -> how many more of its real evictions are refused (429 naming a budget)
        #: after a dry run passed: the server's view fresher than the plan's.
        self.refuse_real: dict[str, int] = {}
        self.evicted: list[str] = []
        self.dry_runs: list[str] = []
        self.events: list[tuple[str, str, str]] = []
        self.patches: list[tuple[str, str, Obj]] = []

    def create(self, resource: Any, body: Obj, *, namespace: str | None = None) -> Obj:
        if resource.kind == "Eviction":
            name = body["metadata"]["name"]
            if name in self.refuse:
                if self.error is not None:
                    raise self.error
                raise errors.Unavailable(
                    "429 TooManyRequests: Cannot evict pod as it would violate the pod's "
                    "disruption budget.",
                    status=429,
                )
            if (body.get("deleteOptions") or {}).get("dryRun"):
                self.dry_runs.append(f"{namespace}/{name}")
                return body  # checked, not done
            if self.refuse_real.get(name, 0) > 0:
                self.refuse_real[name] -= 1
                raise errors.Unavailable(
                    "429 TooManyRequests: Cannot evict pod as it would violate the pod's "
                    "disruption budget.",
                    status=429,
                )
            self.evicted.append(f"{namespace}/{name}")
        elif resource.kind == "Event":
            involved = body.get("involvedObject") or body.get("regarding") or {}
            self.events.append((involved.get("name"), body["reason"], body.get("message", "")))
        return body

    def list(self, resource: Any, **_: Any) -> ObjectList:
        return ObjectList(self.budgets, "1")

    def patch(self, resource: Any, name: str, patch: Obj, *, namespace: str | None = None,
              subresource: str = "") -> Obj:  # fmt: skip
        self.patches.append((f"{namespace}/{name}", subresource, patch))
        return patch

    def written(self, pod: Obj) -> Obj:
        """The pod with the patches of its annotations and status applied (what the informer
        shows next)."""
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        annotations = dict(pod["metadata"].get("annotations") or {})
        status = dict(pod.get("status") or {})
        for who, subresource, patch in self.patches:
            if who == key and subresource == "status":
                for k, v in patch["status"].items():
                    if v is None:
                        status.pop(k, None)
                    else:
                        status[k] = v
            elif who == key and not subresource:
                for k, v in patch["metadata"]["annotations"].items():
                    if v is None:
                        annotations.pop(k, None)
                    else:
                        annotations[k] = v
        return {**pod, "metadata": {**pod["metadata"], "annotations": annotations},
                "status": status}  # fmt: skip


def _claim(name: str, *, standalone: bool = False) -> Obj:
    """A claim made from its pod's template (owned by the pod, deleted with it), or standalone."""
    owner = {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": f"pod-{name}",
             "controller": True}  # fmt: skip
    request = {"name": "g", "exactly": {"deviceClassName": "gpu.drasat.io"}}
    meta = {"name": name, "namespace": "ml", "uid": f"uid-{name}",
            "ownerReferences": [] if standalone else [owner]}  # fmt: skip
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": [request]}},
    }


def _pod(name: str, priority: int, claim: str, node: str | None = None, **labels: str) -> Obj:
    spec: Obj = {
        "priority": priority,
        "resourceClaims": [{"name": "g", "resourceClaimName": claim}],
    }
    if node:
        spec["nodeName"] = node
    meta = {"name": name, "namespace": "ml", "uid": f"pod-{name}", "labels": labels}
    return {"kind": "Pod", "metadata": meta, "spec": spec}


def _cluster(
    *running: tuple[str, int, dict[str, str]], free: int = 0, standalone: tuple[str, ...] = ()
) -> tuple[v1.Node, list[Obj], dict[str, Obj]]:
    """A node with one T4 per running pod, each pod holding one of them, and `free` more."""
    state = make_node("n1", "T4", len(running) + free)
    node = v1.Node(state, tuple(publisheddevices.drasat_devices("n1", state.devices)))
    pods, claims = [], {}
    for name, priority, labels in running:
        claim = _claim(name, standalone=name in standalone)
        found = v1.allocate([node], [v1.PodInput(f"ml/{name}", "ml", (claim,))], CLASSES)
        (allocation,) = found.allocations.values()
        state = nasinventory.with_entries(node.state, allocation.ledger)
        node = dataclasses.replace(node, state=state)
        claims[f"ml/{name}"] = {**claim, "status": {"allocation": allocation.allocation}}
        pods.append(_pod(name, priority, name, "n1", **labels))
    return node, pods, claims


def _urgent(
    claims: dict[str, Obj], name: str = "urgent", priority: int = 100, count: int = 1
) -> v1inputs.Pending:
    claim = _claim(name)
    claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = count
    claims[f"ml/{name}"] = claim
    pod = _pod(name, priority, name)
    item = v1.PodInput(f"ml/{name}", "ml", (claim,), priority=priority, candidate_nodes=("n1",))
    return v1inputs.Pending(pod, item, (claim,), {})


def _snapshot(pods: list[Obj], claims: dict[str, Obj]) -> v1inputs.Snapshot:
    return v1inputs.Snapshot(pods=pods, claims=claims, classes=CLASSES, nodes={}, nas={})


def _preempter(api: FakeApi) -> ctl.Preempter:
    return ctl.Preempter(api, EventRecorder(api, component="test"))  # type: ignore[arg-type]


def _events(api: FakeApi, pod: str, reason: str) -> list[str]:
    return [m for n, r, m in api.events if n == pod and r == reason]


def test_the_victim_is_evicted_named_and_the_planned_allocation_held() -> None:
    node, pods, claims = _cluster(("big", 5, {}), ("small", 1, {}))
    item = _urgent(claims)
    api = FakeApi()
    preempter = _preempter(api)
    snapshot = _snapshot([*pods, item.pod], claims)
    assert preempter.consider(snapshot, [node], [item], POLICY) == 1
    assert api.evicted == ["ml/small"]
    (said,) = _events(api, "urgent", "Preempting")
    assert said.startswith("evicted ml/small (priority 1) to free the devices this pod "
                           "(priority 100) needs on node n1")  # fmt: skip
    (victim,) = _events(api, "small", "Preempted")
    assert "for pod ml/urgent (priority 100)" in victim
    # Written where a new leader finds it: the annotation and status.nominatedNodeName.
    assert ("ml/urgent", "status", {"status": {"nominatedNodeName": "n1"}}) in api.patches
    written = api.written(item.pod)
    found = Nomination.of_pod(written)
    assert found is not None and (found.node, found.victims) == ("n1", ("ml/small",))
    assert found.freed == ("uid-small",)
    # Once the victim's claim is given back, its GPU stays held for every pod of priority 100 or
    # lower but the preemptor; a new Preempter (a restart) reads the hold from the pod.
    gone = plan.without(node, {"uid-small"})
    later = _snapshot([*[p for p in pods if p["metadata"]["name"] != "small"], written], claims)
    for who in (preempter, _preempter(FakeApi())):
        holds = who.holds(later)
        other = v1.PodInput("ml/other", "ml", (_claim("other"),), priority=100)
        seen = plan.with_holds([gone], plan.applicable(holds, 100, {"ml/other"}))
        assert not v1.allocate(seen, [other], CLASSES).placed
        seen = plan.with_holds([gone], plan.applicable(holds, 100, {"ml/urgent"}))
        assert v1.allocate(seen, [item.input], CLASSES).placed == {"ml/urgent": "n1"}
    # Once it is no longer pending (placed and bound), the nomination is gone.
    bound = {**written, "spec": {**written["spec"], "nodeName": "n1"}}
    assert preempter.holds(_snapshot([bound], claims)) == []


def test_the_plan_counts_the_free_gpu_and_holds_it_too() -> None:
    # n1 has a free GPU and v's: a 2-GPU preemptor evicts v and both GPUs are held for it.
    node, pods, claims = _cluster(("v", 1, {}), free=1)
    item = _urgent(claims, count=2)
    api = FakeApi()
    preempter = _preempter(api)
    assert preempter.consider(_snapshot([*pods, item.pod], claims), [node], [item], POLICY) == 1
    found = Nomination.of_pod(api.written(item.pod))
    assert found is not None
    gpus = {d.uuid for e in found.held["n1"].values() for d in (e.gpu.devices if e.gpu else [])}
    assert len(gpus) == 2


def test_a_failed_eviction_names_its_cause_and_picks_again_without_that_victim() -> None:
    node, pods, claims = _cluster(("a", 1, {}), ("b", 2, {}))
    item = _urgent(claims)
    api = FakeApi(refuse={"a"})
    preempter = _preempter(api)
    snapshot = _snapshot([*pods, item.pod], claims)
    assert preempter.consider(snapshot, [node], [item], POLICY) == 0
    assert not preempter.nominations and not api.patches
    (refused,) = _events(api, "urgent", "PreemptionRefused")
    assert "PodDisruptionBudget does not allow it now" in refused
    assert _events(api, "urgent", "Preempting") == []  # nothing was evicted
    # The next cycle: `a` is left out, `b` goes.
    assert preempter.consider(snapshot, [node], [item], POLICY) == 1
    assert api.evicted == ["ml/b"]


def test_preemption_refused_says_rbac_or_a_server_error() -> None:
    causes = {
        errors.KubeError("403 Forbidden", status=403): "may not evict pods",
        errors.Unavailable("500 InternalError", status=500): "the API server failed",
        errors.Unavailable("429 TooManyRequests: slow down", status=429): "throttling",
    }
    for error, says in causes.items():
        node, pods, claims = _cluster(("a", 1, {}))
        item = _urgent(claims)
        api = FakeApi(refuse={"a"}, error=error)
        _preempter(api).consider(_snapshot([*pods, item.pod], claims), [node], [item], POLICY)
        (refused,) = _events(api, "urgent", "PreemptionRefused")
        assert says in refused and "PodDisruptionBudget" not in refused, refused


def test_a_budget_read_from_the_api_keeps_its_pod() -> None:
    node, pods, claims = _cluster(("a", 1, {"app": "a"}), ("b", 2, {}))
    item = _urgent(claims)
    budget = {
        "metadata": {"name": "keep-a", "namespace": "ml"},
        "spec": {"selector": {"matchLabels": {"app": "a"}}},
        "status": {"disruptionsAllowed": 0},
    }
    api = FakeApi(budgets=[budget])
    assert _preempter(api).consider(_snapshot([*pods, item.pod], claims), [node], [item], POLICY)
    assert api.evicted == ["ml/b"]


def test_a_budget_is_spent_once_in_a_cycle() -> None:
    node, pods, claims = _cluster(("a", 1, {"app": "x"}), ("b", 1, {"app": "x"}))
    budget = {
        "metadata": {"name": "one", "namespace": "ml"},
        "spec": {"selector": {"matchLabels": {"app": "x"}}},
        "status": {"disruptionsAllowed": 1},
    }
    p1, p2 = _urgent(claims, "p1"), _urgent(claims, "p2")
    api = FakeApi(budgets=[budget])
    snapshot = _snapshot([*pods, p1.pod, p2.pod], claims)
    assert _preempter(api).consider(snapshot, [node], [p1, p2], POLICY) == 1
    assert len(api.evicted) == 1


def test_two_preemptors_in_one_cycle_never_count_one_free_gpu() -> None:
    # 3 GPUs: one free, v1's and v2's. Two 2-GPU preemptors: one evicts, the other not.
    node, pods, claims = _cluster(("v1", 1, {}), ("v2", 1, {}), free=1)
    p1, p2 = _urgent(claims, "p1", count=2), _urgent(claims, "p2", count=2)
    api = FakeApi()
    snapshot = _snapshot([*pods, p1.pod, p2.pod], claims)
    assert _preempter(api).consider(snapshot, [node], [p1, p2], POLICY) == 1
    assert len(api.evicted) == 1


def test_a_victim_whose_claim_outlives_it_is_never_evicted_for_nothing() -> None:
    # v's claim is standalone: evicting v would free nothing (nobody gives the claim back).
    node, pods, claims = _cluster(("v", 1, {}), standalone=("v",))
    item = _urgent(claims)
    api = FakeApi()
    assert _preempter(api).consider(_snapshot([*pods, item.pod], claims), [node], [item],
                                    POLICY) == 0  # fmt: skip
    assert api.evicted == []


def test_a_standalone_claim_drasat_gives_back_is_freed_with_its_last_pod() -> None:
    # v's claim is standalone but drasat allocated it (our finalizer): drasat deallocates it
    # once v leaves, so evicting v frees its GPU.
    node, pods, claims = _cluster(("v", 1, {}), standalone=("v",))
    claims["ml/v"]["metadata"]["finalizers"] = [groups.FINALIZER]
    item = _urgent(claims)
    api = FakeApi()
    assert _preempter(api).consider(_snapshot([*pods, item.pod], claims), [node], [item],
                                    POLICY) == 1  # fmt: skip
    assert api.evicted == ["ml/v"]


def test_a_nominee_waits_while_its_victims_claims_are_given_back() -> None:
    node, pods, claims = _cluster(("v", 1, {}))
    item = _urgent(claims)
    now = [0.0]
    api = FakeApi()
    preempter = ctl.Preempter(api, EventRecorder(api, component="test"), clock=lambda: now[0])  # type: ignore[arg-type]
    assert preempter.consider(_snapshot([*pods, item.pod], claims), [node], [item], POLICY) == 1
    # v is leaving but its claim is still allocated: refused again, no new eviction.
    leaving = {**pods[0], "metadata": {**pods[0]["metadata"], "deletionTimestamp": "now"}}
    written = api.written(item.pod)
    now[0] = ctl.RETRY_S + 1
    assert preempter.consider(_snapshot([leaving, written], claims), [node], [item], POLICY) == 0
    assert api.evicted == ["ml/v"] and preempter.nominations
    # Its claim is gone, and a higher-priority pod took the GPU meanwhile: the nomination ends
    # and it plans again (nothing to evict here now).
    del claims["ml/v"]
    taken = plan.without(node, set())
    preempter.consider(_snapshot([written], claims), [taken], [item], POLICY)
    assert not preempter.nominations
    assert any(p[2] == {"metadata": {"annotations": {NOMINATION_ANNOTATION: None}}}
               for p in api.patches)  # fmt: skip


def test_a_higher_priority_preemption_displaces_a_lower_nomination() -> None:
    # low (50) evicted v and holds its GPU; high (100) needs 2 GPUs: it takes that GPU (a hold
    # is against lower and equal priorities only) and evicts w; low's nomination ends.
    node, pods, claims = _cluster(("v", 1, {}), ("w", 1, {}))
    low = _urgent(claims, "low", priority=50)
    api = FakeApi()
    preempter = _preempter(api)
    assert preempter.consider(_snapshot([*pods, low.pod], claims), [node], [low], POLICY) == 1
    assert api.evicted == ["ml/v"]
    del claims["ml/v"]
    high = _urgent(claims, "high", priority=100, count=2)
    snapshot = _snapshot([pods[1], api.written(low.pod), high.pod], claims)
    gone = plan.without(node, {"uid-v"})
    assert preempter.consider(snapshot, [gone], [high], POLICY) == 1
    assert api.evicted == ["ml/v", "ml/w"]
    assert set(preempter.nominations) == {"ml/high"}


def test_never_and_disabled_do_not_preempt() -> None:
    node, pods, claims = _cluster(("a", 1, {}))
    item = _urgent(claims)
    api = FakeApi()
    off = AllocationPolicySpec(preemption=Preemption(enabled=False))
    assert _preempter(api).consider(_snapshot([*pods, item.pod], claims), [node], [item], off) == 0
    never = dataclasses.replace(item, pod={**item.pod, "spec": {
        **item.pod["spec"], "preemptionPolicy": "Never"}})  # fmt: skip
    assert _preempter(api).consider(_snapshot(pods, claims), [node], [never], POLICY) == 0
    assert api.evicted == []


def test_a_nominee_kube_scheduler_could_not_bind_is_not_preempted_for_again() -> None:
    node, pods, claims = _cluster(("v", 1, {}), ("w", 1, {}))
    item = _urgent(claims)
    api = FakeApi()
    preempter = _preempter(api)
    assert preempter.consider(_snapshot([*pods, item.pod], claims), [node], [item], POLICY) == 1
    written = api.written(item.pod)
    snapshot = _snapshot([p for p in pods if p["metadata"]["name"] == "w"] + [written], claims)
    snapshot.unsuitable = {"ml/urgent": {"n1": "node(s) didn't have free ports"}}
    del claims["ml/v"]
    assert preempter.consider(snapshot, [plan.without(node, {"uid-v"})], [item], POLICY) == 0
    assert api.evicted == ["ml/v"]
    (said,) = _events(api, "urgent", "PreemptionRefused")
    assert "could not bind it on node n1" in said and "free ports" in said


def test_running_pods_and_shared_claims() -> None:
    _, pods, claims = _cluster(("a", 1, {}))
    # A pending pod uses a's claim too: the claim has two users.
    pods.append(_pod("reader", 0, "a"))
    leaving = _pod("gone", 0, "gone", "n1")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    claims["ml/gone"] = {**_claim("gone"), "status": claims["ml/a"]["status"]}
    running, users, freed = ctl.running_pods(_snapshot([*pods, leaving], claims))
    assert [r.key for r in running] == ["ml/a"]
    assert users["uid-a"] == frozenset({"ml/a", "ml/reader"})
    assert freed == {"n1": {"uid-gone"}}


def test_label_selectors_as_policy_v1_reads_them() -> None:
    labels = {"app": "x", "tier": "gpu"}
    assert not ctl.selects(None, labels)
    assert ctl.selects({}, labels)
    assert ctl.selects({"matchLabels": {"app": "x"}}, labels)
    assert not ctl.selects({"matchLabels": {"app": "y"}}, labels)
    expressions = [
        ({"key": "tier", "operator": "In", "values": ["gpu", "cpu"]}, True),
        ({"key": "tier", "operator": "NotIn", "values": ["gpu"]}, False),
        ({"key": "zone", "operator": "Exists"}, False),
        ({"key": "zone", "operator": "DoesNotExist"}, True),
    ]
    for expression, expected in expressions:
        assert ctl.selects({"matchExpressions": [expression]}, labels) is expected


def test_a_pod_that_could_not_preempt_waits_before_it_is_planned_again() -> None:
    node, pods, claims = _cluster(("a", 1, {}))
    item = _urgent(claims)
    now = [0.0]
    api = FakeApi(refuse=set(), budgets=[])
    preempter = ctl.Preempter(api, EventRecorder(api, component="test"), clock=lambda: now[0])  # type: ignore[arg-type]
    bigger = dataclasses.replace(item, input=dataclasses.replace(
        item.input, claims=(_two_gpus(),)))  # fmt: skip
    snapshot = _snapshot([*pods, bigger.pod], claims)
    assert preempter.consider(snapshot, [node], [bigger], POLICY) == 0  # 2 GPUs: never
    assert "ml/urgent" in preempter.said
    now[0] = ctl.RETRY_S / 2
    calls = api.evicted[:]
    assert preempter.consider(snapshot, [node], [item], POLICY) == 0  # not planned yet
    now[0] = ctl.RETRY_S + 1
    assert preempter.consider(snapshot, [node], [item], POLICY) == 1
    assert calls == [] and api.evicted == ["ml/a"]


def _two_gpus() -> Obj:
    claim = _claim("urgent")
    claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    return claim


def test_a_gang_preempts_as_one_or_not_at_all() -> None:
    # Two victims, one GPU each; a gang of two 1-GPU pods: one plan evicts both and nominates
    # both pods; with one of its pods not refused (placed, or waiting), nothing is evicted.
    node, pods, claims = _cluster(("a", 1, {}), ("b", 1, {}))
    w0, w1 = _urgent(claims, "w0"), _urgent(claims, "w1")
    gang = Gang("ml/train", ("ml/w0", "ml/w1"))
    api = FakeApi()
    preempter = _preempter(api)
    snapshot = _snapshot([*pods, w0.pod, w1.pod], claims)
    assert preempter.consider(snapshot, [node], [w0], POLICY, {"ml/train": gang}) == 0
    assert api.evicted == []
    assert preempter.consider(snapshot, [node], [w0, w1], POLICY, {"ml/train": gang}) == 1
    assert sorted(api.evicted) == ["ml/a", "ml/b"]
    assert set(preempter.nominations) == {"ml/w0", "ml/w1"}
    assert {n.gang for n in preempter.nominations.values()} == {"ml/train"}


def test_a_nomination_is_believed_only_as_far_as_the_cluster_vouches_for_it() -> None:
    """The annotation is the pod's, which its tenant can write: it holds only where the status
    the controller wrote names its node, at the pod's own priority, only the pod's own claims
    on that node, and its gang key only where the pod is in that gang."""
    from drasat.api.nas import AllocatedDevices, AllocatedGpu, AllocatedGpus, ClaimInfo

    _, pods, claims = _cluster(("small", 1, {}))
    item = _urgent(claims)
    own = str(claims["ml/urgent"]["metadata"]["uid"])

    def entry(uid: str, name: str) -> AllocatedDevices:
        gpu = AllocatedGpus(devices=[AllocatedGpu(uuid="GPU-0")])
        return AllocatedDevices(claimInfo=ClaimInfo(namespace="ml", name=name, uid=uid), gpu=gpu)

    held = {"n1": {"mine": entry(own, "urgent"), "theirs": entry("uid-small", "small")},
            "n2": {"far": entry(own, "urgent")}}  # fmt: skip
    forged = Nomination("ml/urgent", "pod-urgent", "n1", 2**31 - 1, (), (), held,
                        "2030-01-01T00:00:00.000000Z", gang="ml/not-its-gang")  # fmt: skip
    meta = {**item.pod["metadata"], "annotations": {NOMINATION_ANNOTATION: forged.annotation()}}
    annotated = {**item.pod, "metadata": meta}
    # The annotation alone (no status.nominatedNodeName, or another node's): nothing held.
    for status in ({}, {"nominatedNodeName": "n2"}):
        pod = {**annotated, "status": status}
        assert _preempter(FakeApi()).holds(_snapshot([*pods, pod], claims)) == []
    pod = {**annotated, "status": {"nominatedNodeName": "n1"}}
    (hold,) = _preempter(FakeApi()).holds(_snapshot([*pods, pod], claims))
    # Its own priority, not the annotation's; its own key, not a gang it is not in.
    assert (hold.preemptor, hold.pods, hold.priority) == ("ml/urgent", {"ml/urgent"}, 100)
    assert {n: set(e) for n, e in hold.held.items()} == {"n1": {"mine"}}


def test_a_plan_never_needs_more_disruptions_than_a_budget_allows() -> None:
    # a and b under one budget allowing 1: a dry run does not spend it, so both would pass the
    # dry runs and the second real eviction would be refused. The plan counts the budget across
    # its victims: a 2-GPU preemptor has no plan, nothing is evicted or dry-run.
    node, pods, claims = _cluster(("a", 1, {"app": "x"}), ("b", 1, {"app": "x"}))
    budget = {
        "metadata": {"name": "one", "namespace": "ml"},
        "spec": {"selector": {"matchLabels": {"app": "x"}}},
        "status": {"disruptionsAllowed": 1},
    }
    item = _urgent(claims, count=2)
    api = FakeApi(budgets=[budget])
    assert _preempter(api).consider(_snapshot([*pods, item.pod], claims), [node], [item],
                                    POLICY) == 0  # fmt: skip
    assert api.evicted == [] and api.dry_runs == []
    (said,) = _events(api, "urgent", "NoPreemption")
    assert "PodDisruptionBudgets allow" in said


def test_an_eviction_refused_midway_holds_what_the_evicted_victims_free() -> None:
    # Both dry runs pass; the real eviction of b is refused (a budget spent since the plan was
    # read). a stays evicted: its GPU is held for the preemptor, which waits for a's claim
    # only, then plans again for the rest without b.
    node, pods, claims = _cluster(("a", 1, {}), ("b", 1, {}), ("c", 2, {}))
    item = _urgent(claims, count=2)
    now = [0.0]
    api = FakeApi()
    api.refuse_real = {"b": 1}
    preempter = ctl.Preempter(api, EventRecorder(api, component="test"), clock=lambda: now[0])  # type: ignore[arg-type]
    assert preempter.consider(_snapshot([*pods, item.pod], claims), [node], [item], POLICY) == 1
    assert api.evicted == ["ml/a"]
    (refused,) = _events(api, "urgent", "PreemptionRefused")
    assert "the eviction of ml/b was refused" in refused and "ml/a evicted already" in refused
    found = Nomination.of_pod(api.written(item.pod))
    assert found is not None
    assert (found.victims, found.freed) == (("ml/a",), ("uid-a",))
    # a's GPU is held against other pods of its priority once a's claim is given back.
    del claims["ml/a"]
    gone = plan.without(node, {"uid-a"})
    written = api.written(item.pod)
    later = _snapshot([pods[1], pods[2], written], claims)
    other = v1.PodInput("ml/other", "ml", (_claim("other"),), priority=100)
    holds = preempter.holds(later)
    seen = plan.with_holds([gone], plan.applicable(holds, 100, {"ml/other"}))
    assert not v1.allocate(seen, [other], CLASSES).placed
    # Given back, still refused: it plans again, b left out for a while: c goes.
    now[0] = 1.0
    assert preempter.consider(later, [gone], [item], POLICY) == 1
    assert api.evicted == ["ml/a", "ml/c"]


def _gang_labels(name: str, size: int) -> dict[str, str]:
    return {groups.GANG_LABEL: name, groups.GANG_SIZE_LABEL: str(size)}


def test_a_victim_gang_evicted_in_part_is_finished_next_cycle() -> None:
    # g0 and g1 are one gang (minimum 2): they go whole. The real eviction of g1 is refused
    # after g0's went: g1 alone holds its GPU for nothing; the next cycle evicts it, saying why.
    node, pods, claims = _cluster(("g0", 1, _gang_labels("job", 2)),
                                  ("g1", 1, _gang_labels("job", 2)))  # fmt: skip
    item = _urgent(claims)
    api = FakeApi()
    api.refuse_real = {"g1": 1}
    preempter = _preempter(api)
    snapshot = _snapshot([*pods, item.pod], claims)
    assert preempter.consider(snapshot, [node], [item], POLICY) == 1
    assert api.evicted == ["ml/g0"]
    assert set(preempter.unfinished) == {"ml/job"}
    # The cycle's hook, pods pending or not.
    preempter.finish_units(_snapshot([pods[1]], claims))
    assert api.evicted == ["ml/g0", "ml/g1"]
    (said,) = _events(api, "g1", "Preempted")
    assert "gang ml/job was evicted in part for ml/urgent" in said
    preempter.finish_units(_snapshot([api.written(item.pod)], claims))
    assert not preempter.unfinished


def test_a_gang_left_at_its_minimum_is_not_finished() -> None:
    # A gang of three with minimum 1: its pods go one by one; one evicted leaves two, enough.
    labels = _gang_labels("job", 1)
    node, pods, claims = _cluster(("g0", 1, labels), ("g1", 1, labels), ("g2", 1, labels))
    item = _urgent(claims, count=2)
    api = FakeApi()
    api.refuse_real = {"g1": 1}
    preempter = _preempter(api)
    assert preempter.consider(_snapshot([*pods, item.pod], claims), [node], [item], POLICY) == 1
    assert api.evicted == ["ml/g0"] and not preempter.unfinished


def _grouped(pod: Obj, group: str) -> Obj:
    return {**pod, "spec": {**pod["spec"], "schedulingGroup": {"podGroupName": group}}}


def _pod_group(name: str, *, mode: str | None, priority: int | None = None,
               never: bool = False) -> Obj:  # fmt: skip
    spec: Obj = {"schedulingPolicy": {"gang": {"minCount": 2}}}
    if mode is not None:
        spec["disruptionMode"] = {mode: {}}
    if priority is not None:
        spec["priority"] = priority
    if never:
        spec["preemptionPolicy"] = "Never"
    return {"metadata": {"name": name, "namespace": "ml"}, "spec": spec}


def test_a_pod_group_is_disrupted_as_its_disruption_mode_says() -> None:
    # g0 and g1 of PodGroup pg (a gang, minCount 2), one GPU each; a 1-GPU preemptor.
    # disruptionMode single (the API server's default): each pod is a victim on its own, as
    # kube-scheduler's preemption takes them; all: the group goes whole or not at all.
    for mode, evicted in (("single", ["ml/g0"]), (None, ["ml/g0"]),
                          ("all", ["ml/g0", "ml/g1"])):  # fmt: skip
        node, pods, claims = _cluster(("g0", 1, {}), ("g1", 1, {}))
        pods = [_grouped(p, "pg") for p in pods]
        item = _urgent(claims)
        api = FakeApi()
        snapshot = _snapshot([*pods, item.pod], claims)
        snapshot.pod_groups = {"ml/pg": _pod_group("pg", mode=mode)}
        assert _preempter(api).consider(snapshot, [node], [item], POLICY) == 1, mode
        assert sorted(api.evicted) == evicted, mode


def test_a_pod_group_s_priority_is_its_pods_priority_in_preemption() -> None:
    # v's own priority is 500, its PodGroup's 1: a preemptor of 100 may evict it (as
    # kube-scheduler ranks a grouped victim). A grouped preemptor preempts at its group's
    # priority: 100 in a group of 1 evicts nothing of priority 5.
    node, pods, claims = _cluster(("v", 500, {}))
    pods = [_grouped(pods[0], "low")]
    groups_ = {"ml/low": _pod_group("low", mode="single", priority=1)}
    item = _urgent(claims)
    api = FakeApi()
    snapshot = _snapshot([*pods, item.pod], claims)
    snapshot.pod_groups = groups_
    assert _preempter(api).consider(snapshot, [node], [item], POLICY) == 1
    assert api.evicted == ["ml/v"]
    node, pods, claims = _cluster(("v", 5, {}))
    item = _urgent(claims)
    item = dataclasses.replace(item, pod=_grouped(item.pod, "tiny"))
    api = FakeApi()
    snapshot = _snapshot([*pods, item.pod], claims)
    snapshot.pod_groups = {"ml/tiny": _pod_group("tiny", mode=None, priority=1)}
    assert _preempter(api).consider(snapshot, [node], [item], POLICY) == 0
    assert api.evicted == []


def test_a_pod_group_s_preemption_policy_never_keeps_its_pods_from_preempting() -> None:
    node, pods, claims = _cluster(("v", 1, {}))
    item = _urgent(claims)
    item = dataclasses.replace(item, pod=_grouped(item.pod, "calm"))
    api = FakeApi()
    snapshot = _snapshot([*pods, item.pod], claims)
    snapshot.pod_groups = {"ml/calm": _pod_group("calm", mode=None, priority=100, never=True)}
    assert _preempter(api).consider(snapshot, [node], [item], POLICY) == 0
    assert api.evicted == []
