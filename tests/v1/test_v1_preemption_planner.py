"""The one preemption planner (`drasat.v1.preemption.plan_all`), which the controller and the
what-if both run: each plan holds the preemptor's whole planned allocation (the victims' devices
and the free ones its fit check used) against the later plans, budgets are spent once, a gang is
one unit as victims and as a preemptor, and the search is complete for MIG and shares."""

from __future__ import annotations

import dataclasses
from typing import Any

from v1kit import CLASSES, GPU, MIG, attr, claim, exactly, node, pod

from drasat import v1
from drasat.api.groups import NOMINATION_ANNOTATION
from drasat.api.policy import AllocationPolicySpec, Preemption
from drasat.solver import Gang
from drasat.v1 import nasinventory, preemption
from drasat.v1.nominations import Nomination, holds_of
from drasat.v1.preemption import Hold, Running, Wanting

SHARE = exactly(GPU, capacity={"requests": {"memory": "4Gi", "compute": "50"}})


def _profile(name: str) -> dict[str, Any]:
    return exactly(MIG, attr("profile") + f' == "{name}"')


def _running(
    nodes: list[v1.Node], placed: dict[str, tuple[Any, ...]], priority: int = 0, **fields: Any
) -> tuple[list[v1.Node], list[Running]]:
    """Allocate the running pods (name -> claims) one after the other, each on the first node
    where it fits; the nodes they leave and their `Running` records."""
    out: list[Running] = []
    for name, claims in placed.items():
        p = pod(name, *claims, priority=priority)
        found = v1.allocate(nodes, [p], CLASSES)
        assert p.key in found.placed, found.refused
        where = found.placed[p.key]
        entries = {}
        for allocation in found.allocations.values():
            entries.update(allocation.ledger)
        nodes = [_with(n, entries) if n.state.name == where else n for n in nodes]
        uids = tuple(str(c["metadata"]["uid"]) for c in claims)
        out.append(Running(p.key, where, priority, uids, **fields))
    return nodes, out


def _with(n: v1.Node, entries: dict[str, Any]) -> v1.Node:
    return dataclasses.replace(n, state=nasinventory.with_entries(n.state, entries))


def _users(running: list[Running]) -> dict[str, frozenset[str]]:
    users: dict[str, set[str]] = {}
    for r in running:
        for uid in r.claims:
            users.setdefault(uid, set()).add(r.key)
    return {k: frozenset(v) for k, v in users.items()}


def _one_gpu(name: str, priority: int, count: int = 1) -> Wanting:
    return Wanting.of(pod(name, claim(name, {"g": exactly(count=count)}), priority=priority))


def test_two_preemptors_never_count_one_free_gpu() -> None:
    # n1: 3 T4s, one free, the others held by v1 and v2 (priority 0). Two preemptors of 2 GPUs
    # each: both could count on the free GPU, but only one can have it, so only one plan
    # evicts (one victim); the other has no plan and evicts nobody.
    nodes, run = _running(
        [node("n1", "T4", 3)],
        {"v1": (claim("v1", {"g": exactly()}),), "v2": (claim("v2", {"g": exactly()}),)},
    )
    found = preemption.plan_all(
        [_one_gpu("p1", 100, 2), _one_gpu("p2", 100, 2)], nodes, run, _users(run), CLASSES
    )
    (evicting,) = [p for p in found.plans if p.victims]
    assert evicting.preemptor == "default/p1" and len(evicting.victims) == 1
    assert len([e for e in evicting.held["n1"].values() if e.gpu]) >= 1
    (second,) = [p for p in found.plans if p.preemptor == "default/p2"]
    assert second.node is None and second.victims == ()


def test_a_plan_holds_the_free_devices_it_counted_on_too() -> None:
    # The plan of a 2-GPU preemptor uses v's GPU and the free one: both are held, so a lower
    # priority pod placed over the held nodes does not take the free GPU.
    nodes, run = _running([node("n1", "T4", 2)], {"v": (claim("v", {"g": exactly()}),)})
    (plan,) = preemption.plan_all([_one_gpu("p", 100, 2)], nodes, run, _users(run), CLASSES).plans
    assert plan.victims == ("default/v",)
    held = [Hold.of(plan)]
    gone = [preemption.without(n, set(plan.freed)) for n in nodes]
    low = pod("low", claim("low", {"g": exactly()}), priority=0)
    assert not v1.allocate(preemption.holding(gone, held, low.priority, low.key), [low],
                           CLASSES).placed  # fmt: skip
    # The preemptor itself places over the same nodes without its own hold.
    mine = pod("p", claim("p", {"g": exactly(count=2)}), priority=100)
    assert v1.allocate(preemption.holding(gone, held, 100, mine.key), [mine], CLASSES).placed


def test_a_hold_is_against_lower_and_equal_priorities_only() -> None:
    nodes, run = _running([node("n1", "T4", 1)], {"v": (claim("v", {"g": exactly()}),)})
    (plan,) = preemption.plan_all([_one_gpu("p", 100)], nodes, run, _users(run), CLASSES).plans
    gone = [preemption.without(n, set(plan.freed)) for n in nodes]
    held = [Hold.of(plan)]
    for priority, placed in ((100, False), (50, False), (101, True)):
        other = pod(f"o{priority}", claim(f"o{priority}", {"g": exactly()}), priority=priority)
        nodes_for = preemption.holding(gone, held, priority, other.key)
        assert bool(v1.allocate(nodes_for, [other], CLASSES).placed) is placed, priority


def test_a_budget_is_spent_once_across_plans() -> None:
    # Two pods of one budget that allows one disruption, each on its own node; two preemptors:
    # the first takes the budget's one disruption, the second finds none left.
    nodes, run = _running(
        [node("n1", "T4", 1), node("n2", "T4", 1)],
        {"a": (claim("a", {"g": exactly()}),), "b": (claim("b", {"g": exactly()}),)},
        budgets=("keep",),
    )
    found = preemption.plan_all(
        [_one_gpu("p1", 100), _one_gpu("p2", 100)],
        nodes,
        run,
        _users(run),
        CLASSES,
        budgets={"keep": 1},
    )
    assert [len(p.victims) for p in found.plans] == [1, 0]
    assert found.plans[1].node is None


def test_a_running_gang_is_evicted_whole_or_not_at_all() -> None:
    # Gang g: two 1-GPU pods on n1 and n2 (priority 0); a single pod s (priority 5) on n3. A
    # 1-GPU preemptor: evicting one member frees a GPU but breaks the gang; the plan evicts s
    # (one unit, one pod), never one member alone.
    nodes, gang = _running(
        [node("n1", "T4", 1), node("n2", "T4", 1), node("n3", "T4", 1)],
        {"g0": (claim("g0", {"g": exactly()}),), "g1": (claim("g1", {"g": exactly()}),)},
        unit="default/g",
    )
    nodes, single = _running(nodes, {"s": (claim("s", {"g": exactly()}),)}, priority=5)
    run = gang + single
    (plan,) = preemption.plan_all([_one_gpu("p", 100)], nodes, run, _users(run), CLASSES).plans
    assert plan.victims == ("default/s",)
    # Without s, the whole gang goes: both members, although one frees enough.
    (plan,) = preemption.plan_all([_one_gpu("p", 100)], nodes, gang, _users(gang), CLASSES).plans
    assert plan.victims == ("default/g0", "default/g1")


def test_a_gang_preempts_as_one_plan_or_none() -> None:
    # Two nodes of one T4, each held by a priority-0 pod; a gang of two 1-GPU pods: one plan
    # evicts both; with a third member that fits nowhere, no plan and no victim at all.
    nodes, run = _running(
        [node("n1", "T4", 1), node("n2", "T4", 1)],
        {"a": (claim("a", {"g": exactly()}),), "b": (claim("b", {"g": exactly()}),)},
    )
    members = [pod(f"w{i}", claim(f"w{i}", {"g": exactly()}), priority=100) for i in range(3)]
    two = Wanting(tuple(members[:2]), Gang("default/train", tuple(m.key for m in members[:2])))
    (plan,) = preemption.plan_all([two], nodes, run, _users(run), CLASSES).plans
    assert plan.victims == ("default/a", "default/b")
    assert set(plan.pods) == {"default/w0", "default/w1"}
    three = Wanting(tuple(members), Gang("default/train", tuple(m.key for m in members)))
    (plan,) = preemption.plan_all([three], nodes, run, _users(run), CLASSES).plans
    assert plan.node is None and plan.victims == ()


def _mig_fleet(nodes: int) -> tuple[list[v1.Node], list[Running]]:
    """`nodes` A100-40GB nodes in MIG mode, each GPU full of seven 1g.5gb pods (priority 0)."""
    fleet = [node(f"m{i}", "A100-40GB", 1, mig=True) for i in range(nodes)]
    pods = {f"s{i}-{k}": (claim(f"s{i}-{k}", {"m": _profile("1g.5gb")}),)
            for i in range(nodes) for k in range(7)}  # fmt: skip
    return _running(fleet, pods)


def test_a_mig_preemptor_finds_the_cheapest_victims_on_full_mig_nodes() -> None:
    # A 3g.20gb device takes slices 0-3 or 4-7: the 1g.5gb pods at 4, 5 and 6 free the second
    # (slice 7 is never a 1g.5gb's): three victims, proven, on any node.
    nodes, run = _mig_fleet(2)
    want = Wanting.of(pod("p", claim("p", {"m": _profile("3g.20gb")}), priority=100))
    (plan,) = preemption.plan_all([want], nodes, run, _users(run), CLASSES).plans
    assert plan.node is not None and len(plan.victims) == 3 and plan.proven, plan.reason
    # 2g.10gb on twelve nodes: two victims.
    nodes, run = _mig_fleet(12)
    want = Wanting.of(pod("q", claim("q", {"m": _profile("2g.10gb")}), priority=100))
    (plan,) = preemption.plan_all([want], nodes, run, _users(run), CLASSES).plans
    assert plan.node is not None and len(plan.victims) == 2 and plan.proven, plan.reason


def test_a_mig_preemptor_that_cannot_fit_is_proven_so() -> None:
    # A 7g.40gb on a GPU where one slice is held by a pod of higher priority: none, proven.
    nodes, low = _mig_fleet(1)
    run = [dataclasses.replace(r, priority=200) if r.key.endswith("-3") else r for r in low]
    want = Wanting.of(pod("p", claim("p", {"m": _profile("7g.40gb")}), priority=100))
    (plan,) = preemption.plan_all([want], nodes, run, _users(run), CLASSES).plans
    assert plan.node is None and plan.proven, plan.reason


def test_a_share_preemptor_evicts_the_fewest_shares_that_make_room() -> None:
    # One T4 with four 25% shares: a 50% share needs two of them gone, not all four.
    quarter = exactly(GPU, capacity={"requests": {"memory": "2Gi", "compute": "25"}})
    nodes, run = _running(
        [node("n1", "T4", 1)], {f"q{i}": (claim(f"q{i}", {"s": quarter}),) for i in range(4)}
    )
    want = Wanting.of(pod("p", claim("p", {"s": SHARE}), priority=100))
    (plan,) = preemption.plan_all([want], nodes, run, _users(run), CLASSES).plans
    assert len(plan.victims) == 2 and plan.proven


def test_a_claim_that_outlives_its_pods_frees_nothing() -> None:
    # v's claim is standalone and nobody gives it back when v leaves: evicting v is in vain, so
    # the plan evicts w (whose claim goes with it) although v has the lower priority.
    nodes, run = _running(
        [node("n1", "T4", 1), node("n2", "T4", 1)],
        {"v": (claim("v", {"g": exactly()}),), "w": (claim("w", {"g": exactly()}),)},
    )
    run = [dataclasses.replace(r, priority=5) if r.key == "default/w" else r for r in run]
    found = preemption.plan_all(
        [_one_gpu("p", 100)], nodes, run, _users(run), CLASSES, lasting=frozenset({"uid-v"})
    )
    assert found.plans[0].victims == ("default/w",)


def test_the_policy_can_turn_it_off() -> None:
    nodes, run = _running([node("n1", "T4", 1)], {"v": (claim("v", {"g": exactly()}),)})
    off = AllocationPolicySpec(preemption=Preemption(enabled=False))
    found = preemption.plan_all([_one_gpu("p", 100)], nodes, run, _users(run), CLASSES,
                                policy=off)  # fmt: skip
    assert found.plans == ()


# -- other drivers' devices (a NIC beside a GPU) -----------------------------------------------


def _nic_node() -> tuple[list[v1.Node], list[Running], dict[str, preemption.Draws]]:
    """n1: three T4s and one NIC. `a` (a GPU) and `b` (a GPU and the NIC) run at priority 0, a
    T4 is free; their nodes, `Running` records, and what each claim draws of the NIC."""
    from test_v1_other_drivers import ALL_CLASSES, NIC, nic, nic_slice, with_nics

    n1 = with_nics(node("n1", "T4", 3), nic_slice("n1", nic("eth0")))
    running, drawn = [], {}
    for name, requests in (("a", {"g": exactly()}), ("b", {"g": exactly(), "nic": exactly(NIC)})):
        c = claim(name, requests)
        found = v1.allocate([n1], [pod(name, c)], ALL_CLASSES)
        assert found.placed, found.refused
        n1 = dataclasses.replace(
            n1, state=v1.with_allocations(n1.state, found.allocations.values())
        )
        for allocation in found.allocations.values():
            if allocation.drawn:
                drawn[allocation.uid] = tuple(allocation.drawn)
        running.append(Running(f"default/{name}", "n1", 0, (str(c["metadata"]["uid"]),)))
    return [n1], running, drawn


def _gpu_and_nic(name: str, priority: int) -> v1.PodInput:
    from test_v1_other_drivers import NIC

    return pod(name, claim(name, {"g": exactly(), "nic": exactly(NIC)}), priority=priority)


def test_a_preemptor_that_needs_a_nic_evicts_the_pod_holding_it() -> None:
    """A T4 is free, the NIC is not: `b`, whose claim holds the NIC, is the victim (its claim
    gives the NIC back with its GPU), not `a`."""
    from test_v1_other_drivers import ALL_CLASSES

    nodes, run, drawn = _nic_node()
    want = Wanting.of(_gpu_and_nic("p", 100))
    (plan,) = preemption.plan_all([want], nodes, run, _users(run), ALL_CLASSES,
                                  drawn=drawn).plans  # fmt: skip
    assert plan.node == "n1" and plan.victims == ("default/b",), plan.reason


def test_a_nic_is_held_for_the_nominated_preemptor() -> None:
    """The NIC the plan counted on is held with its GPU, in the nomination written on the pod
    too: a lower-priority pod asking for a GPU and a NIC does not take it while `b` leaves,
    though a T4 and the NIC are free."""
    from test_v1_other_drivers import ALL_CLASSES

    nodes, run, drawn = _nic_node()
    (plan,) = preemption.plan_all([Wanting.of(_gpu_and_nic("p", 100))], nodes, run,
                                  _users(run), ALL_CLASSES, drawn=drawn).plans  # fmt: skip
    assert plan.drawn["n1"], plan
    gone = [preemption.without(n, set(plan.freed), (), drawn) for n in nodes]
    low = _gpu_and_nic("low", 0)
    assert v1.allocate(gone, [low], ALL_CLASSES).placed  # free once b is gone, without a hold
    written = Nomination("default/p", "uid-p", "n1", 100, plan.victims, plan.freed, plan.held,
                         "2026-01-01T00:00:00.000000Z", drawn=plan.drawn)  # fmt: skip
    meta = {"name": "p", "namespace": "default", "uid": "uid-p",
            "annotations": {NOMINATION_ANNOTATION: written.annotation()}}  # fmt: skip
    read = Nomination.of_pod({"metadata": meta})
    assert read == written
    for holds in ([Hold.of(plan)], holds_of([read])):
        seen = preemption.holding(gone, holds, low.priority, low.key)
        assert not v1.allocate(seen, [low], ALL_CLASSES).placed
        mine = _gpu_and_nic("p", 100)
        assert v1.allocate(preemption.holding(gone, holds, 100, mine.key), [mine],
                           ALL_CLASSES).placed  # fmt: skip
