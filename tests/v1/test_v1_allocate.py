"""drasat.v1: v1 claims placed by the solver, exact answers on small clusters."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from v1kit import CLASSES, FALLBACK, GPU, MIG, attr, claim, exactly, node, pod

from drasat import v1
from drasat.solver import Problem, Solution, SolveParams, solve
from drasat.v1 import results


def _results(outcome: v1.Outcome, name: str) -> list[dict[str, Any]]:
    found = next(a for a in outcome.allocations.values() if a.name == name)
    return list(found.allocation["devices"]["results"])


def _devices(outcome: v1.Outcome, name: str) -> list[str]:
    return [r["device"] for r in _results(outcome, name)]


def test_two_exclusive_claims_get_two_gpus_named_as_published() -> None:
    nodes = [node("a", "T4", 2)]
    out = v1.allocate(
        nodes,
        [pod("p1", claim("c1", {"gpu": exactly()})), pod("p2", claim("c2", {"gpu": exactly()}))],
        CLASSES,
    )
    assert out.placed == {"default/p1": "a", "default/p2": "a"}
    assert sorted(_devices(out, "c1") + _devices(out, "c2")) == ["gpu-0", "gpu-1"]
    (result,) = _results(out, "c1")
    assert (
        result["request"] == "gpu" and result["driver"] == "gpu.drasat.io" and result["pool"] == "a"
    )
    allocation = next(iter(out.allocations.values())).allocation
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["a"]
    assert set(out.allocations["uid-c1"].ledger) == {"uid-c1/gpu"}


def test_a_cel_selector_on_product_and_memory_picks_the_a100_node() -> None:
    nodes = [node("t4", "T4", 1), node("a100", "A100-40GB", 1)]
    big = exactly(
        GPU,
        attr("productName") + '.matches("A100")',
        'device.capacity["gpu.drasat.io"].memory.isGreaterThan(quantity("30Gi"))',
    )
    out = v1.allocate(nodes, [pod("p", claim("c", {"gpu": big}))], CLASSES)
    assert out.placed == {"default/p": "a100"}


def test_first_available_falls_back_to_the_cpu_device_when_gpus_run_out() -> None:
    optional = {
        "firstAvailable": [
            {"name": "gpu", "deviceClassName": GPU},
            {"name": "cpu", "deviceClassName": FALLBACK},
        ]
    }
    out = v1.allocate(
        [node("a", "T4", 1)],
        [pod("p1", claim("c1", {"opt": optional})), pod("p2", claim("c2", {"opt": optional}))],
        CLASSES,
    )
    requests = sorted(r["request"] for c in ("c1", "c2") for r in _results(out, c))
    assert requests == ["opt/cpu", "opt/gpu"]
    assert sorted(_devices(out, "c1") + _devices(out, "c2")) == ["cpu-fallback", "gpu-0"]


def test_two_shares_sit_on_one_gpu_with_their_consumed_capacity() -> None:
    share = exactly(GPU, capacity={"requests": {"memory": "4Gi", "compute": "25"}})
    out = v1.allocate(
        [node("a", "T4", 1)],
        [pod("p1", claim("c1", {"s": share})), pod("p2", claim("c2", {"s": share}))],
        CLASSES,
    )
    for name in ("c1", "c2"):
        (result,) = _results(out, name)
        assert result["device"] == "gpu-0"
        assert result["consumedCapacity"] == {"memory": str(4 * 2**30), "compute": "25"}
    assert _results(out, "c1")[0]["shareID"] != _results(out, "c2")[0]["shareID"]


def test_an_exclusive_claim_does_not_share_a_gpu_with_a_share() -> None:
    share = exactly(GPU, capacity={"requests": {"memory": "4Gi", "compute": "25"}})
    out = v1.allocate(
        [node("a", "T4", 1)],
        [pod("p1", claim("c1", {"s": share})), pod("p2", claim("c2", {"g": exactly()}))],
        CLASSES,
    )
    assert len(out.placed) == 1 and len(out.refused) == 1


def _profile(name: str) -> dict[str, Any]:
    return exactly(MIG, attr("profile") + f' == "{name}"')


def test_gpu_test4_puts_four_mig_devices_on_one_parent_beside_another_pod() -> None:
    four = claim(
        "four",
        {
            "a": _profile("1g.5gb"),
            "b": _profile("1g.5gb"),
            "c": _profile("2g.10gb"),
            "d": _profile("3g.20gb"),
        },
        constraints=[{"matchAttribute": "gpu.drasat.io/parentUUID"}],
    )
    out = v1.allocate(
        [node("m", "A100-40GB", 2, mig=True)],
        [pod("small", claim("s", {"m": _profile("3g.20gb")})), pod("big", four)],
        CLASSES,
    )
    assert set(out.placed) == {"default/small", "default/big"}
    parents = {d.split("-mig-")[0] for d in _devices(out, "four")}
    assert len(parents) == 1  # one parent GPU for the four devices
    assert len(_devices(out, "four")) == 4


def test_numa_match_attribute_keeps_two_gpus_on_one_numa_node() -> None:
    two = claim(
        "two", {"g": exactly(count=2)}, constraints=[{"matchAttribute": "gpu.drasat.io/numaNode"}]
    )
    out = v1.allocate([node("a", "T4", 4, numa=[0, 1, 0, 1])], [pod("p", two)], CLASSES)
    minors = sorted(int(d.split("-")[1]) for d in _devices(out, "two"))
    assert minors in ([0, 2], [1, 3])


def test_allocation_mode_all_takes_every_matching_gpu_of_the_node() -> None:
    out = v1.allocate(
        [node("a", "T4", 3)], [pod("p", claim("c", {"g": exactly(allocationMode="All")}))], CLASSES
    )
    assert sorted(_devices(out, "c")) == ["gpu-0", "gpu-1", "gpu-2"]


@pytest.mark.parametrize(
    ("request_spec", "expected"),
    [
        (
            exactly(GPU, "device.attributes["),
            "spec.devices.requests[0].exactly.selectors[0].cel.expression",
        ),
        (exactly(GPU, adminAccess=True), "spec.devices.requests[0].exactly.adminAccess"),
        (exactly("no-such-class"), "spec.devices.requests[0].exactly.deviceClassName"),
    ],
)
def test_claims_that_cannot_be_allocated_are_refused_naming_the_field(
    request_spec: dict[str, Any], expected: str
) -> None:
    out = v1.allocate([node("a", "T4", 1)], [pod("p", claim("c", {"gpu": request_spec}))], CLASSES)
    (reason,) = out.refused["default/p"]
    assert reason.startswith("ResourceClaim default/c: " + expected), reason


def test_a_selector_that_matches_nothing_is_explained() -> None:
    wanted = exactly(GPU, attr("productName") + ' == "H100"')
    out = v1.allocate([node("a", "T4", 1)], [pod("p", claim("c", {"gpu": wanted}))], CLASSES)
    (reason,) = out.refused["default/p"]
    assert "no published device matches request gpu" in reason


def test_class_and_claim_configs_are_copied_in_order() -> None:
    classes = dict(CLASSES)
    opaque = {
        "driver": "gpu.drasat.io",
        "parameters": {"apiVersion": "gpu.drasat.io/v1alpha1", "kind": "GpuConfig"},
    }
    classes[GPU] = {
        **CLASSES[GPU],
        "spec": {**CLASSES[GPU]["spec"], "config": [{"opaque": opaque}]},
    }
    out = v1.allocate(
        [node("a", "T4", 1)],
        [pod("p", claim("c", {"gpu": exactly()}, config=[{"opaque": opaque}]))],
        classes,
    )
    config = out.allocations["uid-c"].allocation["devices"]["config"]
    assert [c["source"] for c in config] == ["FromClass", "FromClaim"]
    assert config[0]["requests"] == ["gpu"]


def test_the_ledger_read_back_from_status_is_the_one_written() -> None:
    nodes = [node("m", "A100-40GB", 1, mig=True), node("a", "T4", 2)]
    share = exactly(GPU, capacity={"requests": {"memory": "4Gi", "compute": "25"}})
    pods = [
        pod("p1", claim("c1", {"m": _profile("2g.10gb")})),
        pod("p2", claim("c2", {"s": share})),
        pod("p3", claim("c3", {"g": exactly()})),
    ]
    out = v1.allocate(nodes, pods, CLASSES)
    by_node = {n.state.name: n.state.devices for n in nodes}
    for placed in out.allocations.values():
        written = claim(placed.name, {})
        written["status"] = {"allocation": placed.allocation}
        read = results.ledger_from_status(written, by_node[placed.node])
        assert {k: _what(v) for k, v in read.items()} == {
            k: _what(v) for k, v in placed.ledger.items()
        }


def _what(entry: Any) -> tuple[object, ...]:
    """What an entry holds (devices, placements, share), not how it shares them."""
    gpus = tuple(d.uuid for d in entry.gpu.devices) if entry.gpu else ()
    migs = (
        tuple((m.parentUUID, m.profile, m.placement.start) for m in entry.mig.devices)
        if entry.mig
        else ()
    )
    share = (entry.share.compute, entry.share.memory) if entry.share else None
    return gpus, migs, share, entry.claimInfo.uid


def test_nvidias_gpu_test6_selector_with_string_functions_picks_even_a100s() -> None:
    even_a100 = exactly(
        GPU,
        "device.attributes['gpu.drasat.io'].productName.lowerAscii().matches('^.*a100.*$') && "
        "device.attributes['gpu.drasat.io'].index % 2 == 0",
    )
    pods = [pod(f"p{i}", claim(f"c{i}", {"gpu": even_a100})) for i in range(3)]
    out = v1.allocate([node("a", "A100-40GB", 4)], pods, CLASSES)
    held = [
        r["device"] for a in out.allocations.values() for r in a.allocation["devices"]["results"]
    ]
    assert sorted(held) == ["gpu-0", "gpu-2"]
    assert len(out.refused) == 1


def test_capacities_written_as_quantities_are_read() -> None:
    # NVIDIA's slices write memory as `40Gi`; drasat's as bytes.
    spec = node("a", "T4", 1)
    devices = []
    for published in spec.devices:
        device = dict(published.device)
        if "capacity" in device:
            device["capacity"] = {
                k: {**v, "value": "15Gi"} if k == "memory" else v
                for k, v in device["capacity"].items()
            }
        devices.append(dataclasses.replace(published, device=device))
    quantity_node = v1.Node(spec.state, tuple(devices))
    share = exactly(GPU, capacity={"requests": {"compute": "50"}})
    out = v1.allocate([quantity_node], [pod("p", claim("c", {"s": share}))], CLASSES)
    assert out.placed == {"default/p": "a"}


def test_the_ledger_says_how_each_device_is_shared_as_the_configs_say() -> None:
    time_sliced = {
        "driver": "gpu.drasat.io",
        "parameters": {
            "apiVersion": "gpu.drasat.io/v1alpha1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}},
        },
    }
    written = claim("c", {"gpu": exactly()}, config=[{"opaque": time_sliced}])
    nodes = [node("a", "T4", 1)]
    out = v1.allocate(nodes, [pod("p", written)], CLASSES)
    (entry,) = out.allocations["uid-c"].ledger.values()
    assert entry.gpu is not None and entry.gpu.sharing is not None
    assert entry.gpu.sharing.timeSlicingConfig.timeSlice == "Long"
    written["status"] = {"allocation": out.allocations["uid-c"].allocation}
    (read,) = results.ledger_from_status(written, nodes[0].state.devices).values()
    assert read.gpu is not None and read.gpu.sharing == entry.gpu.sharing


MIG_MODE = 'device.attributes["gpu.drasat.io"].migEnabled'


def test_a_whole_gpu_request_takes_a_mig_enabled_gpu_only_when_it_asks_for_mig_mode() -> None:
    """A MIG-mode GPU is published whole too, but a container handed one with no GPU instance
    cannot run CUDA on it: a plain request is refused it, one selecting MIG mode gets it."""
    a100 = [node("m", "A100-40GB", 1, mig=True)]
    out = v1.allocate(a100, [pod("p", claim("c", {"g": exactly()}))], CLASSES)
    assert not out.placed
    assert "no GPU without MIG" in out.refused["default/p"][0]
    # A selector that admits the GPU whatever its mode does not ask for MIG mode.
    named = exactly(GPU, 'device.attributes["gpu.drasat.io"].productName.startsWith("NVIDIA")')
    out = v1.allocate(a100, [pod("p", claim("c", {"g": named}))], CLASSES)
    assert not out.placed
    out = v1.allocate(a100, [pod("p", claim("c", {"g": exactly(GPU, MIG_MODE)}))], CLASSES)
    assert _devices(out, "c") == ["gpu-0"]
    # ... and then none of its MIG devices is free
    out = v1.allocate(
        a100,
        [
            pod("p", claim("c", {"g": exactly(GPU, MIG_MODE)})),
            pod("q", claim("d", {"m": _profile("1g.5gb")})),
        ],
        CLASSES,
    )
    assert len(out.placed) == 1


def test_a_mig_enabled_gpu_goes_whole_by_the_claims_own_word_not_by_a_selector() -> None:
    """The v1 path tells the solver directly that a MIG-enabled GPU may go whole
    (`GpuDemand.mig_mode_gpus_allowed`, where the request's CEL selectors ask for MIG mode); it
    adds no selector of the classic kind, and says it only where such a GPU is eligible."""
    asked: list[Problem] = []

    def record(problem: Problem, params: SolveParams) -> Solution:
        asked.append(problem)
        return solve(problem, params)

    nodes = [node("m", "A100-40GB", 1, mig=True), node("a", "T4", 1)]
    either = exactly(GPU, f"{MIG_MODE} || true")
    pods = [
        pod("p", claim("c", {"g": exactly(GPU, MIG_MODE)})),
        pod("q", claim("d", {"g": either})),
    ]
    out = v1.allocate(nodes, pods, CLASSES, solve=record)
    assert out.placed == {"default/p": "m", "default/q": "a"}
    specs = [c.gpu for p in asked for r in p.pods for c in r.claims]
    assert specs and all(s is not None and s.selector is None for s in specs)
    assert sorted(s.mig_mode_gpus_allowed for s in specs if s is not None) == [False, True]
    out = v1.allocate([node("a", "T4", 1)], pods[:1], CLASSES, solve=record)
    assert not out.placed  # only the A100 is in MIG mode


def test_a_capacity_over_64_bits_covers_a_request_for_it() -> None:
    """A capacity drasat keeps as written (`10E`, over 64 bits, which the API server accepts)
    still answers a request asking some of it (upstream compares quantities of any size)."""
    found = node("a", "T4", 1)
    devices = []
    for d in found.devices:
        if d.name == "gpu-0":
            capacity = {**d.device["capacity"], "bandwidth": {"value": "10E"}}
            d = dataclasses.replace(d, device={**d.device, "capacity": capacity})
        devices.append(d)
    wide = exactly(GPU, capacity={"requests": {"bandwidth": "1G"}})
    out = v1.allocate(
        [v1.Node(found.state, tuple(devices))], [pod("p", claim("c", {"w": wide}))], CLASSES
    )
    assert _devices(out, "c") == ["gpu-0"]
