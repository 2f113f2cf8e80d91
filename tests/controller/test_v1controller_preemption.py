"""The controller's side of preemption (`controller.preemption.Preempter`) over a recording fake
API: the victim is evicted through the Eviction API with Events naming each other, its devices
are held for the preemptor, a budget's 429 makes it pick again without that victim, and a
PodDisruptionBudget read from the API keeps its pod. The real API server and kubelets run it in
tests/e2e/test_e2e_v1_preemption.py."""

from __future__ import annotations

import dataclasses
from typing import Any

from checker import make_node

from drasat import v1
from drasat.api.devicemodel import classes
from drasat.api.policy import AllocationPolicySpec, Preemption
from drasat.controller import preemption as ctl
from drasat.controller import v1inputs
from drasat.kube import errors
from drasat.kube.client import ObjectList
from drasat.kube.events import EventRecorder
from drasat.v1 import preemption as plan
from drasat.v1 import publisheddevices

Obj = dict[str, Any]
CLASSES = {c["metadata"]["name"]: c for c in classes.device_classes()}
POLICY = AllocationPolicySpec()


class FakeApi:
    """Records evictions and Events; refuses evictions of the named pods with a 429."""

    def __init__(self, refuse: set[str] | None = None, budgets: list[Obj] | None = None) -> None:
        self.refuse = refuse or set()
        self.budgets = budgets or []
        self.evicted: list[str] = []
        self.events: list[tuple[str, str, str]] = []

    def create(self, resource: Any, body: Obj, *, namespace: str | None = None) -> Obj:
        if resource.kind == "Eviction":
            name = body["metadata"]["name"]
            if name in self.refuse:
                raise errors.Unavailable("429 TooManyRequests", status=429)
            self.evicted.append(f"{namespace}/{name}")
        elif resource.kind == "Event":
            involved = body.get("involvedObject") or body.get("regarding") or {}
            self.events.append((involved.get("name"), body["reason"], body.get("message", "")))
        return body

    def list(self, resource: Any, **_: Any) -> ObjectList:
        return ObjectList(self.budgets, "1")


def _claim(name: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "g", "exactly": {
            "deviceClassName": "gpu.drasat.io"}}]}},
    }  # fmt: skip


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
    *running: tuple[str, int, dict[str, str]],
) -> tuple[v1.Node, list[Obj], dict[str, Obj]]:
    """A node with one T4 per running pod, each pod holding one of them."""
    state = make_node("n1", "T4", len(running))
    node = v1.Node(state, tuple(publisheddevices.drasat_devices("n1", state.nas)))
    pods, claims = [], {}
    for name, priority, labels in running:
        claim = _claim(name)
        found = v1.allocate([node], [v1.PodInput(f"ml/{name}", "ml", (claim,))], CLASSES)
        (allocation,) = found.allocations.values()
        entries = {**node.state.nas.allocatedClaims, **allocation.ledger}
        nas = node.state.nas.model_copy(update={"allocatedClaims": entries})
        node = dataclasses.replace(node, state=dataclasses.replace(node.state, nas=nas))
        claims[f"ml/{name}"] = {**claim, "status": {"allocation": allocation.allocation}}
        pods.append(_pod(name, priority, name, "n1", **labels))
    return node, pods, claims


def _urgent(claims: dict[str, Obj]) -> v1inputs.Pending:
    claim = _claim("urgent")
    claims["ml/urgent"] = claim
    pod = _pod("urgent", 100, "urgent")
    item = v1.PodInput("ml/urgent", "ml", (claim,), priority=100, candidate_nodes=("n1",))
    return v1inputs.Pending(pod, item, (claim,), {})


def _snapshot(pods: list[Obj], claims: dict[str, Obj]) -> v1inputs.Snapshot:
    return v1inputs.Snapshot(pods=pods, claims=claims, classes=CLASSES, nodes={}, nas={})


def _preempter(api: FakeApi) -> ctl.Preempter:
    return ctl.Preempter(api, EventRecorder(api, component="test"))  # type: ignore[arg-type]


def test_the_victim_is_evicted_named_and_its_devices_held() -> None:
    node, pods, claims = _cluster(("big", 5, {}), ("small", 1, {}))
    item = _urgent(claims)
    api = FakeApi()
    preempter = _preempter(api)
    assert preempter.consider(_snapshot([*pods, item.pod], claims), [node], [item], POLICY) == 1
    assert api.evicted == ["ml/small"]
    (said,) = [m for n, r, m in api.events if n == "urgent" and r == "Preempting"]
    assert said.startswith("evicting ml/small (priority 1) on node n1")
    (victim,) = [m for n, r, m in api.events if n == "small" and r == "Preempted"]
    assert "for pod ml/urgent (priority 100)" in victim
    # Once the victim's claim is given back its GPU stays held for everyone but the preemptor.
    gone = plan.without(node, {"uid-small"})
    other = v1.PodInput("ml/other", "ml", (_claim("other"),))
    (held,) = preempter.hold([gone], placing=["ml/other"])
    assert not v1.allocate([held], [other], CLASSES).placed
    (free,) = preempter.hold([gone], placing=["ml/urgent"])
    assert v1.allocate([free], [item.input], CLASSES).placed == {"ml/urgent": "n1"}
    # The preemptor goes first while it is pending; once placed, its nomination ends.
    first, rest = preempter.split([item], [])
    assert first == [item] and rest == []
    assert preempter.split([], []) == ([], []) and not preempter.nominations


def test_a_refused_eviction_picks_again_without_that_victim() -> None:
    node, pods, claims = _cluster(("a", 1, {}), ("b", 2, {}))
    item = _urgent(claims)
    api = FakeApi(refuse={"a"})
    preempter = _preempter(api)
    snapshot = _snapshot([*pods, item.pod], claims)
    assert preempter.consider(snapshot, [node], [item], POLICY) == 0
    assert not preempter.nominations
    assert any(r == "PreemptionRefused" and n == "urgent" for n, r, _ in api.events)
    # The next cycle: `a` is left out, `b` goes.
    assert preempter.consider(snapshot, [node], [item], POLICY) == 1
    assert api.evicted == ["ml/b"]


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
    assert "ml/urgent" in preempter._said
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
