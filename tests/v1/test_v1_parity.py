"""drasat.v1 against upstream's allocator (k8s.io/dynamic-resource-allocation/structured):
the cases of issue 22 where drasat placed what upstream never would, or raised, each an exact
answer on a small node."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from checker import make_gpus, make_node
from v1kit import CLASSES, FALLBACK, GPU, MIG, attr, claim, exactly, node, pod

from drasat import v1
from drasat.api.devicemodel import names
from drasat.solver import Problem, Solution, SolveParams
from drasat.solver import solve as default_solve
from drasat.v1 import publisheddevices, results
from drasat.v1.allocate import ERRS


def _results(outcome: v1.Outcome, name: str) -> list[dict[str, Any]]:
    found = next(a for a in outcome.allocations.values() if a.name == name)
    return list(found.allocation["devices"]["results"])


def _devices(outcome: v1.Outcome, name: str) -> list[str]:
    return [r["device"] for r in _results(outcome, name)]


def _mig(profile: str, *more: str, **fields: Any) -> dict[str, Any]:
    return exactly(MIG, " && ".join([attr("profile") + f' == "{profile}"', *more]), **fields)


def _match(attribute: str, *requests: str) -> dict[str, Any]:
    constraint: dict[str, Any] = {"matchAttribute": f"gpu.drasat.io/{attribute}"}
    if requests:
        constraint["requests"] = list(requests)
    return constraint


# -- defect 2: numaNode on GPUs without a NUMA node -------------------------------------------


def test_numa_match_on_gpus_without_numa_is_refused_not_raised() -> None:
    # Cloud VMs report no NUMA node; upstream: a device without the attribute fails matchAttribute.
    two = claim("two", {"g": exactly(count=2)}, constraints=[_match("numaNode")])
    other = claim("other", {"g": exactly()})
    out = v1.allocate([node("a", "T4", 3)], [pod("p", two), pod("q", other)], CLASSES)
    assert out.placed == {"default/q": "a"}
    assert "default/p" in out.refused


# -- defect 5: a MIG device's own attributes choose the placement --------------------------------


@pytest.mark.parametrize("start", [0, 3, 6])
def test_a_selector_on_placement_start_gets_that_placement(start: int) -> None:
    wanted = _mig("1g.5gb", attr("placementStart") + f" == {start}")
    out = v1.allocate(
        [node("m", "A100-40GB", 1, mig=True)], [pod("p", claim("c", {"m": wanted}))], CLASSES
    )
    (device,) = _devices(out, "c")
    parsed = names.parse(device)
    assert isinstance(parsed, names.MigName) and parsed.start == start, device


def test_a_taken_placement_named_by_the_selector_is_not_swapped_for_another() -> None:
    at_six = _mig("1g.5gb", attr("placementStart") + " == 6")
    out = v1.allocate(
        [node("m", "A100-40GB", 1, mig=True)],
        [pod("p", claim("c", {"m": at_six})), pod("q", claim("d", {"m": at_six}))],
        CLASSES,
    )
    assert len(out.placed) == 1 and len(out.refused) == 1


# -- defect 6: matchAttribute on uuid / parent attributes, evaluated on the devices --------------


def test_two_whole_gpus_never_match_on_uuid() -> None:
    two = claim("two", {"a": exactly(), "b": exactly()}, constraints=[_match("uuid")])
    out = v1.allocate([node("a", "T4", 2)], [pod("p", two)], CLASSES)
    assert out.placed == {} and "default/p" in out.refused


def test_count_two_whole_gpus_never_match_on_uuid() -> None:
    two = claim("two", {"g": exactly(count=2)}, constraints=[_match("uuid")])
    out = v1.allocate([node("a", "T4", 2)], [pod("p", two)], CLASSES)
    assert out.placed == {}


def test_two_shares_matching_on_uuid_sit_on_one_gpu() -> None:
    share = exactly(GPU, capacity={"requests": {"memory": "4Gi", "compute": "25"}})
    both = claim("both", {"a": share, "b": share}, constraints=[_match("uuid")])
    # One share on gpu-1 already, so the cheapest places differ unless the constraint holds.
    first = claim("first", {"s": exactly(GPU, attr("minor") + " == 1", capacity=share["capacity"])})
    out = v1.allocate([node("a", "T4", 2)], [pod("q", first), pod("p", both)], CLASSES)
    assert set(out.placed) == {"default/p", "default/q"}
    (one,) = set(_devices(out, "both"))
    assert len(_devices(out, "both")) == 2 and one.startswith("gpu-")


def test_a_whole_gpu_has_no_parent_uuid_so_the_constraint_fails() -> None:
    mixed = claim(
        "mixed",
        {"g": exactly(), "m": _mig("1g.5gb")},
        constraints=[_match("parentUUID")],
    )
    out = v1.allocate([node("m", "A100-40GB", 2, mig=True)], [pod("p", mixed)], CLASSES)
    assert out.placed == {}


def test_a_single_device_without_the_attribute_fails_the_constraint() -> None:
    one = claim("one", {"g": exactly()}, constraints=[_match("parentUUID")])
    out = v1.allocate([node("a", "T4", 1)], [pod("p", one)], CLASSES)
    assert out.placed == {}


def test_parent_index_keeps_two_mig_devices_on_one_parent() -> None:
    pair = claim(
        "pair", {"a": _mig("3g.20gb"), "b": _mig("3g.20gb")}, constraints=[_match("parentIndex")]
    )
    # gpu-0 has one 3g.20gb free, gpu-1 both: only gpu-1 holds the pair.
    taken = claim("taken", {"m": _mig("3g.20gb", attr("parentIndex") + " == 0")})
    out = v1.allocate(
        [node("m", "A100-40GB", 2, mig=True)], [pod("q", taken), pod("p", pair)], CLASSES
    )
    assert set(out.placed) == {"default/p", "default/q"}
    assert {d.split("-mig-")[0] for d in _devices(out, "pair")} == {"gpu-1"}


# -- defect 7: numaNode within one MIG request --------------------------------------------------


def test_numa_match_within_one_mig_request_is_honoured() -> None:
    # Each A100 holds two 3g.20gb; three need two GPUs, which sit on NUMA nodes 0 and 1.
    three = claim("three", {"m": _mig("3g.20gb", count=3)}, constraints=[_match("numaNode")])
    out = v1.allocate(
        [node("m", "A100-40GB", 2, mig=True, numa=[0, 1])], [pod("p", three)], CLASSES
    )
    assert out.placed == {}
    two = claim("two", {"m": _mig("3g.20gb", count=2)}, constraints=[_match("numaNode")])
    out = v1.allocate([node("m", "A100-40GB", 2, mig=True, numa=[0, 1])], [pod("p", two)], CLASSES)
    assert len({d.split("-mig-")[0] for d in _devices(out, "two")}) == 1


def test_numa_match_across_mig_requests_on_three_gpus() -> None:
    pair = claim(
        "pair", {"a": _mig("7g.40gb"), "b": _mig("7g.40gb")}, constraints=[_match("numaNode")]
    )
    out = v1.allocate(
        [node("m", "A100-40GB", 3, mig=True, numa=[0, 1, 1])], [pod("p", pair)], CLASSES
    )
    assert sorted(d.split("-mig-")[0] for d in _devices(out, "pair")) == ["gpu-1", "gpu-2"]


# -- defect 8: count and All with capacity requests ---------------------------------------------


def test_count_two_shares_are_two_results_on_two_gpus() -> None:
    share = exactly(GPU, count=2, capacity={"requests": {"memory": "4Gi", "compute": "25"}})
    out = v1.allocate([node("a", "T4", 2)], [pod("p", claim("c", {"s": share}))], CLASSES)
    found = _results(out, "c")
    assert sorted(r["device"] for r in found) == ["gpu-0", "gpu-1"]
    assert all(r["consumedCapacity"] == {"memory": str(4 * 2**30), "compute": "25"} for r in found)
    assert len({r["shareID"] for r in found}) == 2


def test_count_two_shares_need_two_devices() -> None:
    # Upstream never gives one request the same device twice.
    share = exactly(GPU, count=2, capacity={"requests": {"memory": "4Gi", "compute": "25"}})
    out = v1.allocate([node("a", "T4", 1)], [pod("p", claim("c", {"s": share}))], CLASSES)
    assert out.placed == {}


def test_allocation_mode_all_with_capacity_takes_a_share_of_every_gpu() -> None:
    share = exactly(GPU, allocationMode="All", capacity={"requests": {"memory": "1Gi"}})
    out = v1.allocate([node("a", "T4", 3)], [pod("p", claim("c", {"s": share}))], CLASSES)
    found = _results(out, "c")
    assert sorted(r["device"] for r in found) == ["gpu-0", "gpu-1", "gpu-2"]
    assert all(r["consumedCapacity"]["memory"] == str(2**30) for r in found)


def test_count_two_shares_read_back_from_status() -> None:
    share = exactly(GPU, count=2, capacity={"requests": {"memory": "4Gi", "compute": "25"}})
    nodes = [node("a", "T4", 2)]
    written = claim("c", {"s": share})
    out = v1.allocate(nodes, [pod("p", written)], CLASSES)
    placed = out.allocations["uid-c"]
    written["status"] = {"allocation": placed.allocation}
    read = results.ledger_from_status(written, nodes[0].state.devices)
    held = sorted(d.uuid for e in read.values() if e.gpu for d in e.gpu.devices)
    assert held == sorted(d.uuid for e in placed.ledger.values() if e.gpu for d in e.gpu.devices)
    assert len(held) == 2


# -- smaller: the refusal names the claim with no matching device -------------------------------


def test_the_refusal_names_the_claim_that_matches_nothing() -> None:
    fine = claim("fine", {"g": exactly()})
    wrong = claim("wrong", {"g": exactly(GPU, attr("productName") + ' == "H100"')})
    out = v1.allocate([node("a", "T4", 1)], [pod("p", fine, wrong)], CLASSES)
    (reason,) = out.refused["default/p"]
    assert reason.startswith("claim default/wrong: no published device matches request g"), reason


# -- smaller: NAS sharing from a class config aimed at a firstAvailable subrequest --------------


def test_a_class_config_aimed_at_a_subrequest_sets_the_nas_sharing() -> None:
    classes = dict(CLASSES)
    time_sliced = {
        "driver": "gpu.drasat.io",
        "parameters": {
            "apiVersion": "gpu.drasat.io/v1alpha1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}},
        },
    }
    classes[GPU] = {
        **CLASSES[GPU],
        "spec": {**CLASSES[GPU]["spec"], "config": [{"opaque": time_sliced}]},
    }
    optional = {
        "firstAvailable": [
            {"name": "gpu", "deviceClassName": GPU},
            {"name": "cpu", "deviceClassName": FALLBACK},
        ]
    }
    written = claim("c", {"opt": optional})
    nodes = [node("a", "T4", 1)]
    out = v1.allocate(nodes, [pod("p", written)], classes)
    config = out.allocations["uid-c"].allocation["devices"]["config"]
    assert config[0]["requests"] == ["opt/gpu"]
    (entry,) = out.allocations["uid-c"].ledger.values()
    assert entry.gpu is not None and entry.gpu.sharing is not None
    assert entry.gpu.sharing.timeSlicingConfig.timeSlice == "Long"
    written["status"] = {"allocation": out.allocations["uid-c"].allocation}
    (read,) = results.ledger_from_status(written, nodes[0].state.devices).values()
    assert read.gpu is not None and read.gpu.sharing == entry.gpu.sharing


# -- isolation: a solver exception stays with the pods that cause it ----------------------------


def test_a_solver_exception_refuses_only_the_pod_that_causes_it() -> None:
    def solve(problem: Problem, params: SolveParams) -> Solution:
        if any(p.key == "default/bad" for p in problem.pods):
            raise RuntimeError("model of pod bad is broken")
        return default_solve(problem, params)

    pods = [pod(name, claim(f"c-{name}", {"g": exactly()})) for name in ("a", "bad", "b")]
    out = v1.allocate([node("n", "T4", 3)], pods, CLASSES, solve=solve)
    assert out.placed == {"default/a": "n", "default/b": "n"}
    (reason,) = out.refused["default/bad"]
    assert "model of pod bad is broken" in reason and "RuntimeError" in reason


def test_a_claim_that_cannot_be_read_is_refused_alone() -> None:
    broken = claim("broken", {"g": exactly()})
    broken["spec"]["devices"]["requests"].append(42)  # not a request object
    fine = pod("fine", claim("fine", {"g": exactly()}))
    out = v1.allocate([node("a", "T4", 1)], [pod("p", broken), fine], CLASSES)
    assert out.placed == {"default/fine": "a"}
    assert out.failed["default/p"].startswith("internal error reading its claims: ")


# -- item 9: what the node plugin cannot prepare is refused at allocation ------------------------


def _time_sliced(requests: list[str]) -> dict[str, Any]:
    parameters = {
        "apiVersion": "gpu.drasat.io/v1alpha1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}},
    }
    return {"requests": requests, "opaque": {"driver": "gpu.drasat.io", "parameters": parameters}}


@pytest.mark.parametrize(
    ("requests", "config", "words"),
    [
        ({"g": exactly(), "m": _mig("1g.5gb")}, None, "whole GPUs of request g and MIG devices"),
        (
            {
                "s": exactly(GPU, capacity={"requests": {"memory": "4Gi", "compute": "20"}}),
                "t": exactly(GPU, capacity={"requests": {"memory": "4Gi", "compute": "30"}}),
            },
            None,
            "shares (compute 20%) of request s and shares (compute 30%) of request t",
        ),
        (
            {"g": exactly(), "s": exactly(GPU, capacity={"requests": {"memory": "4Gi"}})},
            None,
            "whole GPUs of request g and shares",
        ),
        (
            {"a": exactly(), "b": exactly()},
            [_time_sliced(["a"])],
            "requests a and b have different opaque configurations",
        ),
    ],
)
def test_claims_the_node_plugin_cannot_prepare_are_refused_naming_the_request(
    requests: dict[str, Any], config: list[dict[str, Any]] | None, words: str
) -> None:
    written = claim("c", requests, config=config)
    mig = any(spec["deviceClassName"] == MIG for spec in requests.values())
    nodes = [node("m", "A100-40GB", 2, mig=True) if mig else node("a", "T4", 2)]
    out = v1.allocate(nodes, [pod("p", written)], CLASSES)
    assert out.placed == {}
    (reason,) = out.refused["default/p"]
    assert reason.startswith("ResourceClaim default/c: spec.devices.requests[1]: "), reason
    assert words in reason, reason


def test_a_preparable_alternative_is_taken_instead_of_one_the_plugin_refuses() -> None:
    # Whole GPUs in MIG mode: the requests ask for MIG mode.
    mig_mode = [{"cel": {"expression": 'device.attributes["gpu.drasat.io"].migEnabled'}}]
    either = {
        "firstAvailable": [
            {"name": "mig", "deviceClassName": MIG},
            {"name": "gpu", "deviceClassName": GPU, "selectors": mig_mode},
        ]
    }
    written = claim("c", {"g": exactly(selectors=mig_mode), "x": either})
    out = v1.allocate([node("m", "A100-40GB", 3, mig=True)], [pod("p", written)], CLASSES)
    assert sorted(r["request"] for r in _results(out, "c")) == ["g", "x/gpu"]


# -- constraints as upstream reads them -----------------------------------------------------------


def test_distinct_attribute_puts_two_gpus_on_two_numa_nodes() -> None:
    two = claim(
        "two",
        {"g": exactly(count=2)},
        constraints=[{"distinctAttribute": "gpu.drasat.io/numaNode"}],
    )
    out = v1.allocate([node("a", "T4", 4, numa=[0, 0, 1, 1])], [pod("p", two)], CLASSES)
    minors = sorted(int(d.split("-")[1]) for d in _devices(out, "two"))
    assert minors[0] in (0, 1) and minors[1] in (2, 3)


def test_a_constraint_naming_a_subrequest_covers_only_that_subrequest() -> None:
    # parentUUID holds on MIG devices only: aimed at `x/mig`, it leaves `x/gpu` free to be
    # chosen with no parent (and the MIG subrequest has no device here).
    either = {
        "firstAvailable": [
            {"name": "mig", "deviceClassName": MIG},
            {"name": "gpu", "deviceClassName": GPU},
        ]
    }
    written = claim("c", {"x": either}, constraints=[_match("parentUUID", "x/mig")])
    out = v1.allocate([node("a", "T4", 1)], [pod("p", written)], CLASSES)
    assert _results(out, "c")[0]["request"] == "x/gpu"
    covering = claim("d", {"x": either}, constraints=[_match("parentUUID", "x")])
    out = v1.allocate([node("a", "T4", 1)], [pod("p", covering)], CLASSES)
    assert out.placed == {}


def test_a_claims_own_lifecycle_config_is_refused_naming_the_entry() -> None:
    parameters = {
        "apiVersion": "gpu.drasat.io/v1alpha1",
        "kind": "GpuConfig",
        "lifecycle": [{"action": "setPowerLimitWatts", "value": 200}],
    }
    config = [{"opaque": {"driver": "gpu.drasat.io", "parameters": parameters}}]
    out = v1.allocate(
        [node("a", "T4", 1)], [pod("p", claim("c", {"g": exactly()}, config=config))], CLASSES
    )
    (reason,) = out.refused["default/p"]
    prefix = "ResourceClaim default/c: spec.devices.config[0]: opaque.parameters.lifecycle: "
    assert reason.startswith(prefix), reason


def test_a_share_with_time_slicing_is_refused_naming_the_request() -> None:
    share = exactly(GPU, capacity={"requests": {"memory": "4Gi"}})
    written = claim("c", {"s": share}, config=[_time_sliced([])])
    out = v1.allocate([node("a", "T4", 1)], [pod("p", written)], CLASSES)
    (reason,) = out.refused["default/p"]
    assert reason.startswith("ResourceClaim default/c: spec.devices.requests[0]: shares of "), (
        reason
    )


def test_another_drivers_devices_are_not_held_to_drasats_plugin_shapes() -> None:
    # NVIDIA's plugin prepares a whole GPU beside a MIG device in one claim (the what-if).
    drasat = node("m", "A100-40GB", 2, mig=True)
    published = tuple(dataclasses.replace(d, driver="gpu.nvidia.com") for d in drasat.devices)
    devices = publisheddevices.identified(drasat.state.devices, published)
    nvidia = v1.Node(dataclasses.replace(drasat.state, devices=devices), published)

    def nvidia_class(kind: str) -> dict[str, Any]:
        expression = f'device.attributes["gpu.nvidia.com"].type == "{kind}"'
        return {
            "metadata": {"name": kind},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }

    classes = {"gpu": nvidia_class("gpu"), "mig": nvidia_class("mig")}
    # The whole GPU is in MIG mode: the request asks for MIG mode.
    whole = exactly("gpu", 'device.attributes["gpu.nvidia.com"].migEnabled')
    written = claim("c", {"g": whole, "m": exactly("mig")})
    out = v1.allocate([nvidia], [pod("p", written)], classes)
    assert out.placed == {"default/p": "m"}
    assert sorted(r["driver"] for r in _results(out, "c")) == ["gpu.nvidia.com"] * 2


# -- allocationMode All takes every matching device of the node, or none -------------------------


def test_all_with_a_device_lacking_the_constraints_attribute_is_not_a_subset() -> None:
    # Upstream's All takes every matching device; one without numaNode fails the constraint, so
    # the node cannot serve the request (drasat used to take the devices that have it).
    every = claim("every", {"g": exactly(allocationMode="All")}, constraints=[_match("numaNode")])
    out = v1.allocate([node("a", "T4", 2, numa=[0, None])], [pod("p", every)], CLASSES)  # type: ignore[list-item]
    assert out.placed == {}
    out = v1.allocate([node("a", "T4", 2, numa=[1, 1])], [pod("p", every)], CLASSES)
    assert sorted(_devices(out, "every")) == ["gpu-0", "gpu-1"]


def _t4_and_a100() -> v1.Node:
    a100 = make_gpus("a", "A100-40GB", 1, first_index=1)
    state = make_node("a", "T4", 1, extra_gpus=a100)
    return v1.Node(state, tuple(publisheddevices.drasat_devices("a", state.devices)))


def test_all_shares_over_gpus_of_two_sizes_are_refused_not_a_subset() -> None:
    # Compute-only shares take each GPU's memory: two sizes are two share sizes in one claim,
    # which the node plugin cannot prepare; upstream would take both, never one of them.
    spec = exactly(allocationMode="All", capacity={"requests": {"compute": "50"}})
    out = v1.allocate([_t4_and_a100()], [pod("p", claim("every", {"s": spec}))], CLASSES)
    assert out.placed == {}
    (reason,) = out.refused["default/p"]
    assert "allocationMode All" in reason, reason
    same = exactly(allocationMode="All", capacity={"requests": {"memory": "1Gi"}})
    out = v1.allocate([_t4_and_a100()], [pod("p", claim("same", {"s": same}))], CLASSES)
    assert sorted(_devices(out, "same")) == ["gpu-0", "gpu-1"]


# -- a claim's shares as the node plugin prepares them (one compute limit per claim) ------------


def test_shares_of_different_memory_in_one_claim_are_allocated() -> None:
    small = exactly(GPU, capacity={"requests": {"memory": "2Gi", "compute": "20"}})
    large = exactly(GPU, capacity={"requests": {"memory": "6Gi", "compute": "20"}})
    out = v1.allocate(
        [node("a", "T4", 1)], [pod("p", claim("c", {"s": small, "t": large}))], CLASSES
    )
    assert _devices(out, "c") == ["gpu-0", "gpu-0"]


@pytest.mark.parametrize(("gpus", "placed"), [(2, False), (3, True)])
def test_a_claims_limited_shares_spread_evenly_over_their_gpus(gpus: int, placed: bool) -> None:
    # The plugin gives a claim's shares on one GPU the sum of their limits and all its GPUs one
    # limit: two of them on one GPU and one on another would be 50% and 25%.
    two = exactly(GPU, count=2, capacity={"requests": {"memory": "1Gi", "compute": "25"}})
    one = exactly(GPU, capacity={"requests": {"memory": "1Gi", "compute": "25"}})
    out = v1.allocate(
        [node("a", "T4", gpus)], [pod("p", claim("c", {"two": two, "one": one}))], CLASSES
    )
    assert bool(out.placed) is placed
    if placed:
        assert sorted(_devices(out, "c")) == ["gpu-0", "gpu-1", "gpu-2"]


@pytest.mark.parametrize(
    ("gpus", "placed"),
    [
        (2, 1),
        (3, 2),
    ],
)
def test_a_claims_shares_spread_over_gpus_take_them_alone_in_their_namespace(
    gpus: int, placed: int
) -> None:
    # The node plugin's MPS daemon serves one set of GPUs: another share of the namespace may
    # not join one GPU of a claim spread over two.
    pair = exactly(GPU, count=2, capacity={"requests": {"memory": "1Gi"}})
    one = exactly(GPU, capacity={"requests": {"memory": "1Gi"}})
    out = v1.allocate(
        [node("a", "T4", gpus)],
        [pod("p", claim("pair", {"s": pair})), pod("q", claim("one", {"s": one}))],
        CLASSES,
    )
    assert len(out.placed) == placed
    if placed == 2:
        assert not set(_devices(out, "pair")) & set(_devices(out, "one"))


# -- smaller: a selector's runtime error fails the claim, as kube-scheduler's allocator does -----


def test_a_selector_that_fails_on_a_device_stops_the_search_there() -> None:
    # `numaNode == 0` is an error on a GPU that reports no NUMA node, not "no match": upstream's
    # search fails the claim when it reaches that GPU, so only the GPUs before it may be used.
    wanted = claim("c", {"g": exactly(GPU, attr("numaNode") + " == 0")})
    out = v1.allocate([node("a", "T4", 2, numa=[None, 0])], [pod("p", wanted)], CLASSES)  # type: ignore[list-item]
    assert out.placed == {}
    (reason,) = out.refused["default/p"]
    assert "failed on device gpu-0: no such key: numaNode" in reason, reason
    out = v1.allocate([node("a", "T4", 2, numa=[0, None])], [pod("p", wanted)], CLASSES)  # type: ignore[list-item]
    assert _devices(out, "c") == ["gpu-0"]
    guarded = exactly(GPU, "has(" + attr("numaNode") + ") && " + attr("numaNode") + " == 0")
    nodes = [node("a", "T4", 2, numa=[None, 0])]  # type: ignore[list-item]
    out = v1.allocate(nodes, [pod("p", claim("c", {"g": guarded}))], CLASSES)
    assert _devices(out, "c") == ["gpu-1"]


def test_a_failing_first_available_entry_is_not_passed_over_for_the_next() -> None:
    # Upstream fails the claim on the error in entry `numa`; it never tries `any` there.
    either = {
        "firstAvailable": [
            {"name": "numa", "deviceClassName": GPU, "selectors": _cel(attr("numaNode") + " == 0")},
            {"name": "any", "deviceClassName": GPU},
        ]
    }
    nodes = [node("a", "T4", 1)]
    out = v1.allocate(nodes, [pod("p", claim("c", {"g": either}))], CLASSES)
    assert out.placed == {}


def _cel(expression: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": expression}}]


# -- found by drasat-oracle (oracle-diffs.md) ------------------------------------------------------


def test_a_requests_tolerations_are_written_into_its_results() -> None:
    tolerating = exactly(GPU, tolerations=[{"operator": "Exists"}])
    out = v1.allocate([node("a", "T4", 1)], [pod("p", claim("c", {"g": tolerating}))], CLASSES)
    (result,) = _results(out, "c")
    assert result["tolerations"] == [{"operator": "Exists"}]


def test_a_qualified_capacity_name_names_no_published_capacity() -> None:
    # The device publishes `memory`; upstream matches `gpu.drasat.io/memory` to nothing.
    qualified = exactly(GPU, capacity={"requests": {"gpu.drasat.io/memory": "8Gi"}})
    out = v1.allocate([node("a", "T4", 1)], [pod("p", claim("c", {"s": qualified}))], CLASSES)
    assert out.placed == {}


def test_all_over_mig_devices_takes_every_placement_or_moves_on() -> None:
    every = _mig("7g.40gb", allocationMode="All")
    out = v1.allocate(
        [node("m", "A100-40GB", 2, mig=True)], [pod("p", claim("c", {"m": every}))], CLASSES
    )
    assert sorted(d.split("-mig-")[0] for d in _devices(out, "c")) == ["gpu-0", "gpu-1"]
    # Two profiles' placements overlap: not all of them can be taken; the next entry is.
    either = {
        "firstAvailable": [
            {"name": "all", "deviceClassName": MIG, "allocationMode": "All"},
            {"name": "one", "deviceClassName": GPU},
        ]
    }
    out = v1.allocate(
        [node("m", "A100-40GB", 1, mig=True), node("a", "T4", 1)],
        [pod("p", claim("d", {"x": either}))],
        CLASSES,
    )
    assert [r["request"] for r in _results(out, "d")] == ["x/one"]


def test_a_node_without_shares_publishes_exclusive_gpus() -> None:
    spec = node("a", "T4", 1)
    published = tuple(publisheddevices.drasat_devices("a", spec.state.devices, shares=False))
    devices = publisheddevices.identified(spec.state.devices, published)
    exclusive = v1.Node(dataclasses.replace(spec.state, devices=devices), published)
    out = v1.allocate([exclusive], [pod("p", claim("c", {"g": exactly()}))], CLASSES)
    (result,) = _results(out, "c")
    assert "shareID" not in result and "consumedCapacity" not in result
    share = exactly(GPU, capacity={"requests": {"memory": "4Gi"}})
    out = v1.allocate([exclusive], [pod("p", claim("d", {"s": share}))], CLASSES)
    (result,) = _results(out, "d")  # the whole GPU: it takes one allocation
    assert "shareID" not in result and "consumedCapacity" not in result


def test_an_allocation_that_cannot_be_written_refuses_only_its_pod() -> None:
    def solve(problem: Problem, params: SolveParams) -> Solution:
        solution = default_solve(problem, params)
        placements = []
        for placement in solution.placements:
            if placement.pod == "default/bad":
                # an answer that names no published device for its GPU: writing it fails
                broken = {
                    uid: dataclasses.replace(entry, devices=())
                    for uid, entry in placement.allocations.items()
                }
                placement = dataclasses.replace(placement, allocations=broken)
            placements.append(placement)
        return dataclasses.replace(solution, placements=tuple(placements))

    pods = [pod(name, claim(f"c-{name}", {"g": exactly()})) for name in ("a", "bad", "b")]
    out = v1.allocate([node("n", "T4", 3)], pods, CLASSES, solve=solve)
    assert out.placed == {"default/a": "n", "default/b": "n"}
    assert out.failed["default/bad"].startswith("internal error writing its allocation: ValueError")
    assert set(out.allocations) == {"uid-c-a", "uid-c-b"}


def test_an_all_entry_a_constraint_refuses_fails_the_claim_not_the_entry() -> None:
    # Upstream takes an All entry's devices as ones it must have: a constraint refusing one is
    # an error that ends the claim there, not a reason to try the next firstAvailable entry.
    either = {
        "firstAvailable": [
            {"name": "all", "deviceClassName": GPU, "allocationMode": "All"},
            {"name": "one", "deviceClassName": GPU},
        ]
    }
    wanted = claim("c", {"g": either}, constraints=[_match("numaNode")])
    nodes = [node("a", "T4", 3, numa=[0, None, None])]  # type: ignore[list-item]
    out = v1.allocate(nodes, [pod("p", wanted)], CLASSES)
    assert out.placed == {}
    (reason,) = out.refused["default/p"]
    assert f"request g/all (class gpu.drasat.io): {ERRS} on a," in reason, reason
    # Where the All entry's GPUs agree, it takes them all.
    out = v1.allocate([node("a", "T4", 2, numa=[0, 0])], [pod("p", wanted)], CLASSES)
    assert [r["request"] for r in _results(out, "c")] == ["g/all", "g/all"]
    # A node elsewhere that the error does not touch still takes the claim.
    nodes = [*nodes, node("b", "T4", 1, numa=[1])]
    out = v1.allocate(nodes, [pod("p", wanted)], CLASSES)
    assert out.placed == {"default/p": "b"}
