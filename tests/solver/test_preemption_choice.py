"""The solver's victim choice (`drasat.solver.preemption`): exact small answers and properties.

The fit oracle here is a toy capacity (each candidate frees its devices; the preemptor needs `k`
on one node), with shared claims modelled by the tests that need them: the real oracle is the
allocator (tests/v1/test_v1_preemption.py)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drasat.api.policy import PreemptionTerm as Term
from drasat.solver.preemption import Candidate, choose


def _capacity(free: dict[str, int], need: int, cands: list[Candidate]):
    sizes = {c.key: c.devices for c in cands}

    def fits(node: str, victims: frozenset[str]) -> bool:
        return free.get(node, 0) + sum(sizes[v] for v in victims) >= need

    return fits


def test_the_smallest_single_victim_not_the_first() -> None:
    # A 1-GPU preemptor; n1 holds a 4-GPU pod, n2 a 1-GPU pod, both priority 0: one victim
    # either way, and the 1-GPU pod is the one that costs least.
    cands = [Candidate("d/big", "n1", 0, devices=4), Candidate("d/small", "n2", 0, devices=1)]
    choice = choose(10, cands, _capacity({}, 1, cands), max_victims=4)
    assert (choice.node, choice.victims, choice.proven) == ("n2", ("d/small",), True)


def test_fewest_victims_before_lowest_priority() -> None:
    # Two 1-GPU pods of priority 0 or one 2-GPU pod of priority 5: one victim wins.
    cands = [
        Candidate("d/a", "n1", 0, devices=1),
        Candidate("d/b", "n1", 0, devices=1),
        Candidate("d/c", "n2", 5, devices=2),
    ]
    choice = choose(10, cands, _capacity({}, 2, cands), max_victims=4)
    assert (choice.node, choice.victims) == ("n2", ("d/c",))
    # With priority first, the two priority-0 pods win.
    order = [Term.priority, Term.victims, Term.devices]
    choice = choose(10, cands, _capacity({}, 2, cands), max_victims=4, order=order)
    assert (choice.node, choice.victims) == ("n1", ("d/a", "d/b"))


def test_lowest_priority_among_equal_counts() -> None:
    cands = [Candidate("d/hi", "n1", 7, devices=1), Candidate("d/lo", "n1", 3, devices=1)]
    choice = choose(10, cands, _capacity({}, 1, cands), max_victims=1)
    assert choice.victims == ("d/lo",)


def test_max_victims_bounds_the_set() -> None:
    cands = [Candidate(f"d/p{i}", "n1", 0, devices=1) for i in range(3)]
    choice = choose(10, cands, _capacity({}, 3, cands), max_victims=2)
    assert choice.node is None
    assert "at most 2" in choice.reason


def test_a_budget_keeps_its_pods() -> None:
    # d/a is the cheapest but its PodDisruptionBudget allows no disruption: d/b goes.
    cands = [
        Candidate("d/a", "n1", 0, devices=1, budgets=("pdb-a",)),
        Candidate("d/b", "n1", 1, devices=1),
    ]
    choice = choose(10, cands, _capacity({}, 1, cands), max_victims=4, budgets={"pdb-a": 0})
    assert choice.victims == ("d/b",)
    choice = choose(10, cands[:1], _capacity({}, 1, cands), max_victims=4, budgets={"pdb-a": 0})
    assert choice.node is None


def test_a_shared_claim_frees_only_with_all_its_pods() -> None:
    # d/a and d/b share one claim holding 2 GPUs; d/c holds 1 GPU alone. The preemptor needs
    # 2: d/a alone frees nothing (the claim stays), so the answer is {d/a, d/b}, found after the
    # cheaper sets the oracle refused.
    cands = [
        Candidate("d/a", "n1", 0, devices=2),
        Candidate("d/b", "n1", 0, devices=2),
        Candidate("d/c", "n1", 0, devices=1),
    ]

    def fits(node: str, victims: frozenset[str]) -> bool:
        freed = (2 if {"d/a", "d/b"} <= victims else 0) + (1 if "d/c" in victims else 0)
        return freed >= 2

    choice = choose(10, cands, fits, max_victims=4)
    assert choice.victims == ("d/a", "d/b")
    assert choice.proven


def test_no_candidate_is_said() -> None:
    choice = choose(10, [], lambda n, v: True, max_victims=4)
    assert choice.node is None and "no running pod" in choice.reason


def test_an_equal_priority_candidate_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="not below"):
        choose(5, [Candidate("d/x", "n1", 5)], lambda n, v: True, max_victims=1)


_pods = st.lists(
    st.tuples(st.sampled_from(["n1", "n2", "n3"]), st.integers(0, 9), st.integers(1, 4)),
    min_size=0,
    max_size=7,
)


@settings(max_examples=60, deadline=None)
@given(
    pods=_pods,
    free=st.dictionaries(st.sampled_from(["n1", "n2", "n3"]), st.integers(0, 2)),
    need=st.integers(1, 6),
    preemptor=st.integers(0, 12),
    max_victims=st.integers(1, 4),
)
def test_the_choice_is_the_brute_force_optimum(
    pods: list[tuple[str, int, int]],
    free: dict[str, int],
    need: int,
    preemptor: int,
    max_victims: int,
) -> None:
    """Never a victim of equal or higher priority (they are not candidates); the set fits, and
    no set of at most max_victims fits with a smaller (count, priority, devices)."""
    everyone = [Candidate(f"d/p{i}", n, p, d) for i, (n, p, d) in enumerate(pods)]
    cands = [c for c in everyone if c.priority < preemptor]
    fits = _capacity(free, need, cands)
    choice = choose(preemptor, cands, fits, max_victims=max_victims)
    by_key = {c.key: c for c in cands}

    def cost(victims: tuple[str, ...]) -> tuple[int, int, int]:
        low = min((c.priority for c in cands), default=0)
        chosen = [by_key[v] for v in victims]
        return (len(chosen), sum(c.priority - low for c in chosen), sum(c.devices for c in chosen))

    best = None
    for size in range(1, max_victims + 1):
        for combo in itertools.combinations(cands, size):
            nodes = {c.node for c in combo}
            if len(nodes) != 1:
                continue
            keys = tuple(sorted(c.key for c in combo))
            if fits(next(iter(nodes)), frozenset(keys)) and (best is None or cost(keys) < best):
                best = cost(keys)
    if best is None:
        assert choice.node is None
        return
    assert choice.node is not None
    assert all(by_key[v].priority < preemptor for v in choice.victims)
    assert all(by_key[v].node == choice.node for v in choice.victims)
    assert fits(choice.node, frozenset(choice.victims))
    assert cost(choice.victims) == best
    assert choice.proven
