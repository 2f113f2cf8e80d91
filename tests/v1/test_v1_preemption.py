"""Preemption over real claims (`drasat.v1.preemption.plan`): the allocator answers whether the
preemptor fits once the victims are gone, so whole GPUs, shares and MIG all count as placed."""

from __future__ import annotations

import dataclasses

from v1kit import CLASSES, GPU, claim, exactly, node, pod

from drasat import v1
from drasat.api.policy import AllocationPolicySpec, Preemption
from drasat.v1 import nasinventory, preemption
from drasat.v1.preemption import Running

SHARE = exactly(GPU, capacity={"requests": {"memory": "4Gi", "compute": "50"}})


def _running(nodes: list[v1.Node], placed: dict[str, tuple[object, ...]], priority: int = 0):
    """Allocate the running pods (name -> claims) one after the other; the nodes they leave
    and their `Running` records."""
    out: list[Running] = []
    for name, claims in placed.items():
        p = pod(name, *claims, priority=priority)  # type: ignore[arg-type]
        found = v1.allocate(nodes, [p], CLASSES)
        assert p.key in found.placed, found.refused
        where = found.placed[p.key]
        entries = {}
        for allocation in found.allocations.values():
            entries.update(allocation.ledger)
        nodes = [_with(n, entries) if n.state.name == where else n for n in nodes]
        uids = tuple(str(c["metadata"]["uid"]) for c in claims)  # type: ignore[index]
        out.append(Running(p.key, where, priority, uids))
    return nodes, out


def _with(n: v1.Node, entries: dict) -> v1.Node:
    return dataclasses.replace(n, state=nasinventory.with_entries(n.state, entries))


def _users(running: list[Running]) -> dict[str, frozenset[str]]:
    users: dict[str, set[str]] = {}
    for r in running:
        for uid in r.claims:
            users.setdefault(uid, set()).add(r.key)
    return {k: frozenset(v) for k, v in users.items()}


def test_a_whole_gpu_preemptor_evicts_the_one_pod_that_frees_a_gpu() -> None:
    # n1: two 1-GPU pods (priorities 3 and 0); n2: one 2-GPU pod (priority 0). A 1-GPU
    # preemptor: one victim either way; of the two of priority 0 the 1-GPU pod holds fewer
    # devices.
    nodes, run = _running(
        [node("n1", "T4", 2), node("n2", "T4", 2)],
        {
            "a": (claim("a", {"g": exactly()}),),
            "b": (claim("b", {"g": exactly()}),),
            "big": (claim("big", {"g": exactly(count=2)}),),
        },
    )
    run = [dataclasses.replace(r, priority={"default/a": 3}.get(r.key, 0)) for r in run]
    p = pod("hi", claim("hi", {"g": exactly()}), priority=100)
    assert v1.allocate(nodes, [p], CLASSES).refused
    found = preemption.plan(p, nodes, run, _users(run), CLASSES)
    placed = {r.key: r.node for r in run}
    assert found.victims == ("default/b",) and found.node == placed["default/b"]
    assert found.freed == ("uid-b",) and found.proven


def test_shares_count_their_capacity() -> None:
    # One GPU with two 50% shares: a 1-GPU preemptor needs both gone.
    nodes, run = _running(
        [node("n1", "T4", 1)],
        {"s1": (claim("s1", {"s": SHARE}),), "s2": (claim("s2", {"s": SHARE}),)},
    )
    p = pod("hi", claim("hi", {"g": exactly()}), priority=10)
    found = preemption.plan(p, nodes, run, _users(run), CLASSES)
    assert (found.node, found.victims) == ("n1", ("default/s1", "default/s2"))
    # A 50% share preemptor needs one of them.
    p = pod("hs", claim("hs", {"s": SHARE}), priority=10)
    found = preemption.plan(p, nodes, run, _users(run), CLASSES)
    assert len(found.victims) == 1


def test_a_shared_claim_is_freed_only_with_every_pod_using_it() -> None:
    shared = claim("shared", {"g": exactly()})
    nodes, run = _running([node("n1", "T4", 1)], {"u1": (shared,)})
    run.append(Running("default/u2", "n1", 0, ("uid-shared",)))
    p = pod("hi", claim("hi", {"g": exactly()}), priority=10)
    found = preemption.plan(p, nodes, run, _users(run), CLASSES)
    assert found.victims == ("default/u1", "default/u2") and found.freed == ("uid-shared",)
    # One of its users of equal priority: no victim set frees it.
    run[1] = dataclasses.replace(run[1], priority=10)
    found = preemption.plan(p, nodes, run, _users(run), CLASSES)
    assert found.node is None


def test_never_equal_or_higher_priority_and_the_policy_bounds() -> None:
    nodes, run = _running([node("n1", "T4", 1)], {"x": (claim("x", {"g": exactly()}),)}, 10)
    p = pod("hi", claim("hi", {"g": exactly()}), priority=10)
    found = preemption.plan(p, nodes, run, _users(run), CLASSES)
    assert found.node is None and "no running pod of lower priority" in found.reason
    # Two shares must go but maxVictims is 1.
    nodes, run = _running(
        [node("n1", "T4", 1)],
        {"s1": (claim("s1", {"s": SHARE}),), "s2": (claim("s2", {"s": SHARE}),)},
    )
    policy = AllocationPolicySpec(preemption=Preemption(maxVictims=1))
    p = pod("hi", claim("hi", {"g": exactly()}), priority=10)
    found = preemption.plan(p, nodes, run, _users(run), CLASSES, policy=policy)
    assert found.node is None and "at most 1" in found.reason


def test_a_budget_is_respected() -> None:
    nodes, run = _running(
        [node("n1", "T4", 1), node("n2", "T4", 1)],
        {"a": (claim("a", {"g": exactly()}),), "b": (claim("b", {"g": exactly()}),)},
    )
    run = [dataclasses.replace(r, budgets=("keep-a",) if r.key == "default/a" else (),
                               priority=0 if r.key == "default/a" else 5) for r in run]  # fmt: skip
    p = pod("hi", claim("hi", {"g": exactly()}), priority=10)
    assert preemption.plan(p, nodes, run, _users(run), CLASSES).victims == ("default/a",)
    found = preemption.plan(p, nodes, run, _users(run), CLASSES, budgets={"keep-a": 0})
    assert found.victims == ("default/b",)


def test_held_devices_keep_other_pods_off() -> None:
    nodes, _ = _running([node("n1", "T4", 1)], {"x": (claim("x", {"g": exactly()}),)})
    held = preemption.entries_of(nodes[0], ["uid-x"])
    gone = preemption.without(nodes[0], {"uid-x"})
    other = pod("other", claim("o", {"g": exactly()}))
    assert v1.allocate([gone], [other], CLASSES).placed
    assert not v1.allocate([preemption.hold(gone, held)], [other], CLASSES).placed
    # While the victim's own entry is still there it is not held twice.
    assert preemption.hold(nodes[0], held) is nodes[0]


def test_no_victim_when_the_pod_fits_already() -> None:
    # Pods leaving freed the GPU (the caller took their claims off): nobody else is evicted.
    nodes, run = _running([node("n1", "T4", 2)], {"x": (claim("x", {"g": exactly()}),)})
    p = pod("hi", claim("hi", {"g": exactly()}), priority=10)
    found = preemption.plan(p, nodes, run, _users(run), CLASSES)
    assert (found.node, found.victims) == ("n1", ())
