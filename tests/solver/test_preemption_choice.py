"""The solver's victim choice (`drasat.solver.preemption`): exact small answers and properties.

The fit oracle here is a toy capacity (each candidate frees its devices; the preemptor needs `k`
on one node), with shared claims modelled by the tests that need them: the real oracle is the
allocator (tests/v1/test_v1_preemption.py)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drasat.api.policy import PreemptionTerm as Term
from drasat.solver.preemption import Candidate, Devices, Gpu, Hold, Need, choose


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


# With the devices: who holds what of each GPU, and what the preemptor needs.
_holding = st.lists(
    st.tuples(
        st.sampled_from(["n1", "n2"]),
        st.integers(0, 1),  # GPU index on its node
        st.sampled_from(["whole", "share", "mig"]),
        st.integers(0, 6),  # share compute (x10 %) or MIG start
        st.integers(0, 9),  # priority
        st.sampled_from([None, "u1", "u2"]),  # unit (a gang)
    ),
    min_size=1,
    max_size=7,
)


def _world(holding: list[tuple[str, int, str, int, int, str | None]]):
    """Candidates and each node's holds, MIG holds one slice each, kept consistent (a GPU held
    whole holds nothing else; shares and MIG never on one GPU)."""
    cands, holds, kinds = [], {"n1": [], "n2": []}, {}
    for i, (node, gpu, kind, amount, priority, unit) in enumerate(holding):
        uuid = f"{node}-g{gpu}"
        if kinds.setdefault(uuid, kind) != kind or (
            kind == "whole" and any(h.gpu == uuid for h in holds[node])
        ):
            continue
        key = f"d/p{i}"
        cands.append(Candidate(key, node, priority, unit=unit))
        if kind == "whole":
            holds[node].append(Hold(uuid, frozenset({key}), whole=True))
        elif kind == "share":
            holds[node].append(Hold(uuid, frozenset({key}), compute=10 * (amount + 1)))
        elif not any(h.gpu == uuid and amount in h.slices for h in holds[node]):
            holds[node].append(Hold(uuid, frozenset({key}), slices=frozenset({amount})))
        else:
            cands.pop()
    return cands, holds


@settings(max_examples=80, deadline=None)
@given(
    holding=_holding,
    want=st.sampled_from(["gpu", "gpu2", "share30", "share70", "mig2", "mig4"]),
    max_victims=st.integers(1, 4),
    budget=st.integers(0, 2),
)
def test_with_devices_and_units_the_choice_is_the_brute_force_optimum(
    holding: list[tuple[str, int, str, int, int, str | None]],
    want: str,
    max_victims: int,
    budget: int,
) -> None:
    """The device facts only speed the search up: the answer is the cheapest unit-closed set
    (a gang whole or not at all) that fits, within max_victims and a budget on unit u1."""
    cands, holds = _world(holding)
    cands = [dataclasses.replace(c, budgets=("b",) if c.unit == "u1" else ()) for c in cands]
    gpus = {n: tuple(Gpu(f"{n}-g{i}", 16000) for i in range(2)) for n in ("n1", "n2")}
    if want.startswith("gpu"):
        count = int(want[3:] or 1)
        need = Need(Need.GPU, count, gpus=frozenset(g.uuid for n in gpus.values() for g in n))
    elif want.startswith("share"):
        need = Need(Need.SHARE, gpus=frozenset(g.uuid for n in gpus.values() for g in n),
                    compute=int(want[5:]))  # fmt: skip
    else:
        size = int(want[3:])
        places = [(g.uuid, s, size) for n in gpus.values() for g in n for s in range(0, 8, size)]
        need = Need(Need.MIG, placements=frozenset(places))

    def fits(node: str, victims: frozenset[str]) -> bool:
        left = [h for h in holds[node] if not (h.holders and h.holders <= victims)]
        if need.kind == Need.GPU and need.count > 1:
            return sum(1 for g in gpus[node] if not any(h.gpu == g.uuid for h in left)) >= 2
        for gpu in gpus[node]:
            mine = [h for h in left if h.gpu == gpu.uuid]
            if need.kind == Need.GPU and need.count == 1 and not mine:
                return True
            if (
                need.kind == Need.SHARE
                and not any(h.whole or h.slices for h in mine)
                and sum(h.compute for h in mine) + need.compute <= 100
            ):
                return True
            if need.kind == Need.MIG:
                for g, start, size in need.placements:
                    taken = {s for h in mine for s in h.slices}
                    if (
                        g == gpu.uuid
                        and not any(h.whole or h.compute for h in mine)
                        and not (taken & set(range(start, start + size)))
                    ):
                        return True
        return False

    devices = {n: Devices(gpus[n], tuple(holds[n]), ((need,),)) for n in gpus}
    choice = choose(100, cands, fits, max_victims=max_victims, budgets={"b": budget},
                    devices=devices)  # fmt: skip
    plain = choose(100, cands, fits, max_victims=max_victims, budgets={"b": budget})
    low = min((c.priority for c in cands), default=0)
    by_key = {c.key: c for c in cands}

    def cost(victims: Iterable[str]) -> tuple[int, int, int]:
        chosen = [by_key[v] for v in victims]
        return (len(chosen), sum(c.priority - low for c in chosen), sum(c.devices for c in chosen))

    units = {c.unit or c.key for c in cands}
    best = None
    for size in range(1, len(units) + 1):
        for combo in itertools.combinations(sorted(units), size):
            victims = frozenset(c.key for c in cands if (c.unit or c.key) in combo)
            if len(victims) > max_victims or sum(by_key[v].unit == "u1" for v in victims) > budget:
                continue
            for node in ("n1", "n2"):
                here = any(by_key[v].node == node for v in victims)
                if here and fits(node, victims) and (best is None or cost(victims) < best):
                    best = cost(victims)
    for found in (choice, plain):
        assert found.proven
        if best is None:
            assert found.node is None
            continue
        assert found.node is not None and fits(found.node, frozenset(found.victims))
        assert cost(found.victims) == best
        assert all(
            {c.key for c in cands if c.unit == by_key[v].unit} <= set(found.victims)
            for v in found.victims
            if by_key[v].unit
        )
