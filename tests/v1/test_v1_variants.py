"""drasat.v1.variants: the ways a claim can be met, seen through what `v1.allocate` places on
small nodes (every request or none, firstAvailable in order, counts, `All`, shares that must fit
the published capacity, MIG profiles smallest first, constraints across requests)."""

from __future__ import annotations

import dataclasses
from typing import Any

from v1kit import CLASSES, FALLBACK, GPU, MIG, attr, claim, exactly, node, pod

from drasat import v1
from drasat.api import catalog
from drasat.solver.ledger import Ledger
from drasat.v1 import nasinventory, publisheddevices

Obj = dict[str, Any]


def _allocate(nodes: list[v1.Node], *claims: Obj) -> v1.Outcome:
    pods = [pod(f"p-{c['metadata']['name']}", c) for c in claims]
    return v1.allocate(nodes, pods, CLASSES)


def _results(outcome: v1.Outcome, name: str) -> list[Obj]:
    found = [a for a in outcome.allocations.values() if a.name == name]
    return list(found[0].allocation["devices"]["results"]) if found else []


def _devices(outcome: v1.Outcome, name: str) -> list[str]:
    return sorted(r["device"] for r in _results(outcome, name))


def _share(count: int = 1, **requests: str) -> Obj:
    return exactly(GPU, capacity={"requests": requests}, count=count)


H100 = exactly(GPU, attr("productName") + ' == "H100"')


def test_a_claim_with_a_request_nothing_matches_gets_nothing() -> None:
    """Every request of a claim or none: a request without an option is not dropped."""
    out = _allocate([node("a", "T4", 2)], claim("c", {"fits": exactly(), "never": H100}))
    assert out.placed == {} and out.allocations == {}
    (reason,) = out.refused["default/p-c"]
    assert "never" in reason


def test_first_available_takes_the_first_entry_that_can_be_met() -> None:
    optional = {"firstAvailable": [{"name": "gpu", "deviceClassName": GPU},
                                   {"name": "cpu", "deviceClassName": FALLBACK}]}  # fmt: skip
    out = _allocate([node("a", "T4", 1)], claim("c", {"o": optional}))
    assert [(r["request"], r["device"]) for r in _results(out, "c")] == [("o/gpu", "gpu-0")]
    cpu = {"name": "cpu", "deviceClassName": FALLBACK}
    skipped = {"firstAvailable": [{"name": "big", **H100}, cpu]}
    out = _allocate([node("a", "T4", 1)], claim("c", {"o": skipped}))
    assert [(r["request"], r["device"]) for r in _results(out, "c")] == [("o/cpu", "cpu-fallback")]


def test_count_takes_that_many_distinct_gpus_or_nothing() -> None:
    out = _allocate([node("a", "T4", 3)], claim("c", {"g": exactly(count=2)}))
    assert len(_devices(out, "c")) == 2 and len(set(_devices(out, "c"))) == 2
    out = _allocate([node("a", "T4", 2)], claim("c", {"g": exactly(count=3)}))
    assert out.placed == {}


def test_all_takes_every_matching_gpu_of_the_node_it_picks() -> None:
    out = _allocate([node("a", "T4", 2), node("b", "T4", 3)],
                    claim("c", {"g": exactly(allocationMode="All")}))  # fmt: skip
    node_name = out.placed["default/p-c"]
    assert len(_devices(out, "c")) == {"a": 2, "b": 3}[node_name]
    even = exactly(GPU, attr("index") + " % 2 == 0", allocationMode="All")
    out = _allocate([node("a", "T4", 4)], claim("c", {"g": even}))
    assert _devices(out, "c") == ["gpu-0", "gpu-2"]


def test_a_share_never_asks_for_more_than_the_device_publishes() -> None:
    out = _allocate([node("a", "T4", 1)], claim("c", {"s": _share(memory="16Gi")}))
    assert out.placed == {}
    out = _allocate([node("a", "T4", 1)], claim("c", {"s": _share(memory="15Gi")}))
    assert out.placed == {"default/p-c": "a"}


def test_shares_fill_a_gpu_up_to_its_compute_and_memory() -> None:
    nodes = [node("a", "T4", 1)]
    out = _allocate(nodes, *(claim(f"c{i}", {"s": _share(compute="40")}) for i in range(3)))
    # a compute-only share takes all the memory (the default): one per GPU
    assert len(out.placed) == 1
    quarter = {"s": _share(memory="3Gi", compute="25")}
    out = _allocate(nodes, *(claim(f"c{i}", quarter) for i in range(5)))
    assert len(out.placed) == 4
    # memory only: no compute by default, so they pack by memory (a T4: 15Gi shareable)
    halves = {"s": _share(memory="7Gi")}
    out = _allocate(nodes, *(claim(f"c{i}", halves) for i in range(3)))
    assert len(out.placed) == 2


def test_a_compute_share_leaving_memory_out_prefers_the_smaller_gpu() -> None:
    """No memory asked: the share takes all of a GPU's memory, smaller GPUs first."""
    out = _allocate(
        [node("big", "A100-40GB", 1), node("small", "T4", 1)],
        claim("c", {"s": _share(compute="50")}),
    )
    assert out.placed == {"default/p-c": "small"}
    (result,) = _results(out, "c")
    assert result["consumedCapacity"] == {"memory": str(15 * 2**30), "compute": "50"}


def test_count_with_a_capacity_request_gives_that_many_shares_on_distinct_gpus() -> None:
    out = _allocate([node("a", "T4", 2)], claim("c", {"s": _share(2, memory="1Gi")}))
    assert _devices(out, "c") == ["gpu-0", "gpu-1"]
    assert all(r["consumedCapacity"]["memory"] == str(2**30) for r in _results(out, "c"))
    out = _allocate([node("a", "T4", 1)], claim("c", {"s": _share(2, memory="1Gi")}))
    assert out.placed == {}


def _mig_node(name: str, product: str) -> v1.Node:
    """A MIG-enabled node whose profiles carry their memory, as the node plugin reads it."""
    plain = node(name, product, 1, mig=True)
    memory = {p.name: p.memory_bytes for p in catalog.find_product(product).mig_profiles}
    profiles = tuple(
        dataclasses.replace(m, memoryBytes=memory[m.profile])
        for m in plain.state.devices.mig_profiles
    )
    devices = dataclasses.replace(plain.state.devices, mig_profiles=profiles)
    return v1.Node(
        dataclasses.replace(plain.state, devices=devices),
        tuple(publisheddevices.drasat_devices(name, devices)),
    )


def test_a_mig_request_without_a_profile_gets_the_smallest_profile() -> None:
    out = _allocate([_mig_node("m", "A100-40GB")], claim("c", {"m": exactly(MIG)}))
    (device,) = _devices(out, "c")
    assert device.startswith("gpu-0-mig-1g5gb-")
    bigger = exactly(MIG, 'device.capacity["gpu.drasat.io"].memory.isGreaterThan(quantity("6Gi"))')
    out = _allocate([_mig_node("m", "A100-40GB")], claim("c", {"m": bigger}))
    (device,) = _devices(out, "c")
    assert device.startswith("gpu-0-mig-1g10gb-")


def test_mig_count_takes_that_many_devices() -> None:
    two = exactly(MIG, attr("profile") + ' == "3g.20gb"', count=2)
    out = _allocate([node("m", "A100-40GB", 1, mig=True)], claim("c", {"m": two}))
    assert len(_devices(out, "c")) == 2
    three = exactly(MIG, attr("profile") + ' == "3g.20gb"', count=3)
    assert _allocate([node("m", "A100-40GB", 1, mig=True)], claim("c", {"m": three})).placed == {}


def test_match_attribute_across_requests_puts_them_on_one_numa_node() -> None:
    both = claim(
        "c",
        {"a": exactly(), "b": exactly()},
        constraints=[{"matchAttribute": "gpu.drasat.io/numaNode", "requests": ["a", "b"]}],
    )
    # GPUs 0 and 1 are held; the free ones are 2 (NUMA 0) and 3 (NUMA 1): no pair on one node
    nodes = [node("a", "T4", 4, numa=[0, 1, 0, 1])]
    busy = claim("busy", {"g": exactly(GPU, attr("index") + " < 2", count=2)})
    out = _allocate(nodes, busy, both)
    assert set(out.placed) == {"default/p-busy"}
    out = _allocate(nodes, both)
    minors = sorted(int(d.split("-")[1]) for d in _devices(out, "c"))
    assert minors in ([0, 2], [1, 3])


def test_match_attribute_on_product_across_requests_on_a_mixed_node() -> None:
    nodes = [node("a", "T4", 1), node("b", "A100-40GB", 1)]
    both = claim(
        "c",
        {"a": exactly(), "b": exactly()},
        constraints=[{"matchAttribute": "gpu.drasat.io/productName"}],
    )
    # one GPU per node: two requests on one product cannot be met on one node
    assert _allocate(nodes, both).placed == {}
    out = _allocate([node("a", "T4", 2), node("b", "A100-40GB", 1)], both)
    assert out.placed == {"default/p-c": "a"}


def test_the_first_request_keeps_its_first_choice_when_only_one_can() -> None:
    """Two requests that prefer a GPU, one GPU: the first request gets it (as upstream's
    allocator, which takes the requests in order), the second its next choice."""
    optional = {"firstAvailable": [{"name": "gpu", "deviceClassName": GPU},
                                   {"name": "cpu", "deviceClassName": FALLBACK}]}  # fmt: skip
    out = _allocate([node("a", "T4", 1)], claim("c", {"a": optional, "b": optional}))
    assert sorted((r["request"], r["device"]) for r in _results(out, "c")) == [
        ("a/gpu", "gpu-0"),
        ("b/cpu", "cpu-fallback"),
    ]


def test_the_cpu_fallback_never_meets_a_constraint_tying_it_to_other_devices() -> None:
    """The fallback device has no numaNode: a request matched with another on numaNode cannot
    fall back to it (upstream fails the constraint); unconstrained, it may."""
    optional = {"firstAvailable": [{"name": "big", **H100},
                                   {"name": "cpu", "deviceClassName": FALLBACK}]}  # fmt: skip
    nodes = [node("a", "T4", 2, numa=[0, 0])]
    free = _allocate(nodes, claim("c", {"o": optional, "g": exactly()}))
    assert _devices(free, "c") in (["cpu-fallback", "gpu-0"], ["cpu-fallback", "gpu-1"])
    tied = claim(
        "c",
        {"o": optional, "g": exactly()},
        constraints=[{"matchAttribute": "gpu.drasat.io/numaNode", "requests": ["o", "g"]}],
    )
    assert _allocate(nodes, tied).placed == {}


def test_a_device_without_the_constraints_attribute_is_not_used() -> None:
    """numaNode on GPUs that report none: nothing matches (upstream: the constraint fails)."""
    numa = [{"matchAttribute": "gpu.drasat.io/numaNode"}]
    out = _allocate([node("a", "T4", 2)], claim("c", {"g": exactly(count=2)}, constraints=numa))
    assert out.placed == {}
    out = _allocate(
        [node("a", "T4", 2, numa=[1, 1])], claim("c", {"g": exactly(count=2)}, constraints=numa)
    )
    assert _devices(out, "c") == ["gpu-0", "gpu-1"]


def test_nvidias_memory_sharing_pattern_packs_shares_by_memory() -> None:
    """NVIDIA's `consumable-shares` memory pattern on drasat's class: claims asking only
    `memory: 4Gi` consume no compute (the published default), so they fill a GPU's memory: a
    T4's 15Gi holds three, on one GPU, and the fourth is told how much memory is left."""
    out = _allocate(
        [node("a", "T4", 1)], *(claim(f"c{i}", {"gpu": _share(memory="4Gi")}) for i in range(4))
    )
    assert sorted(out.placed) == ["default/p-c0", "default/p-c1", "default/p-c2"]
    assert {d for i in range(3) for d in _devices(out, f"c{i}")} == {"gpu-0"}
    (reason,) = out.refused["default/p-c3"]
    assert "at most 3072Mi memory free" in reason


def test_memory_only_shares_spread_no_wider_than_memory_needs() -> None:
    # Two T4s, five 4Gi shares: three fit on one GPU, so two GPUs hold them all.
    out = _allocate(
        [node("a", "T4", 2)], *(claim(f"c{i}", {"gpu": _share(memory="4Gi")}) for i in range(5))
    )
    assert len(out.placed) == 5
    used = [d for i in range(5) for d in _devices(out, f"c{i}")]
    assert sorted(used.count(g) for g in set(used)) == [2, 3]


def test_each_mig_profile_of_a_request_keeps_its_own_placements() -> None:
    # Five MIG devices of any profile on one A100-40GB: only 1g.5gb (7 placements) or its +me
    # variant holds five. The options of one request, a profile each, once shared one memo, so
    # every profile took the first-listed profile's placements (1g.10gb: 4) and the claim was
    # refused where upstream's allocator places it (found by tests/oracle).
    out = _allocate([node("a", "A100-40GB", mig=True)], claim("c", {"m": exactly(MIG, count=5)}))
    assert out.placed == {"default/p-c": "a"}
    profiles = {r["device"].split("-mig-")[1].split("-")[0] for r in _results(out, "c")}
    assert len(_results(out, "c")) == 5 and profiles <= {"1g5gb", "1g5gbme"}


def test_several_mig_devices_of_one_request_may_be_of_distinct_profiles() -> None:
    # A 4g.20gb held at start 0 leaves slices 4-7 free on the A100. The request admits a
    # 2g.10gb (free at 4 only) and a 1g.5gb at start 6: no profile gives two, the two
    # profiles together do. Upstream takes any devices the selectors match; drasat once held
    # one request's devices to one profile and refused it.
    big = claim("big", {"m": exactly(MIG, attr("profile") + ' == "4g.20gb"')})
    held = _allocate([node("a", "A100-40GB", mig=True)], big)
    (entry,) = held.allocations.values()
    busy = _with_ledger(node("a", "A100-40GB", mig=True), entry.ledger)
    either = (
        f'{attr("profile")} == "2g.10gb" || '
        f'({attr("profile")} == "1g.5gb" && {attr("placementStart")} == 6)'
    )
    out = _allocate([busy], claim("c", {"m": exactly(MIG, either, count=2)}))
    assert out.placed == {"default/p-c": "a"}
    assert _devices(out, "c") == ["gpu-0-mig-1g5gb-19-6", "gpu-0-mig-2g10gb-14-4"]


def test_a_request_of_several_mig_devices_that_do_not_fit_names_its_claim_once() -> None:
    # Two 4g.20gb on one A100: each alone fits, not both; the refusal names the claim once.
    two = exactly(MIG, attr("profile") + ' == "4g.20gb"', count=2)
    out = _allocate([node("a", "A100-40GB", mig=True)], claim("c", {"m": two}))
    (reason,) = out.refused["default/p-c"]
    assert "claim default/c's devices do not fit together" in reason
    assert "default/c, default/c" not in reason


def _with_ledger(found: v1.Node, ledger: Any) -> v1.Node:
    held = Ledger(allocated=nasinventory.allocations_of(ledger))
    state = dataclasses.replace(found.state, ledger=held)
    return dataclasses.replace(found, state=state)


def _device(node: str, name: str, **attributes: int) -> publisheddevices.Published:
    body = {"name": name, "attributes": {k: {"int": v} for k, v in attributes.items()}}
    return publisheddevices.Published("example.com", node, body, publisheddevices.OTHER)


def test_selectors_matched_per_layout_answer_as_device_by_device() -> None:
    """Nodes publishing the same kinds in the same order get one answer per layout: the same
    devices, in node order, and the same failing nodes (a device a selector fails on ends its
    node's devices) as evaluating every device; a node of another layout gets its own."""
    from drasat.v1 import cel, requests
    from drasat.v1.variants import Devices

    def layout(node: str, kinds: str) -> list[publisheddevices.Published]:
        values = {"a": {"x": 1}, "b": {"x": 2}, "c": {}}
        return [_device(node, f"d{i}", **values[k]) for i, k in enumerate(kinds)]

    by_node = {
        "n1": layout("n1", "abca"),
        "n2": layout("n2", "abca"),
        "n3": layout("n3", "ba"),
        "n4": layout("n4", "aab"),
        "n5": layout("n5", "acb"),
    }
    selector = cel.compile_selector('device.attributes["example.com"].x == 1')
    alternative = requests.Alternative("r", "c", (selector,), requests.EXACT_COUNT, 1)
    catalog = Devices(by_node)
    found = catalog.matching(alternative)
    expected, failing = Devices(by_node)._match_each(alternative)
    assert [(d.pool, d.name) for d in found] == [(d.pool, d.name) for d in expected] == [
        ("n1", "d0"), ("n2", "d0"), ("n3", "d1"), ("n4", "d0"), ("n4", "d1"), ("n5", "d0")
    ]  # fmt: skip
    assert all(a is b for a, b in zip(found, expected, strict=True))
    assert catalog.failing(alternative) == failing == {"n1", "n2", "n5"}
