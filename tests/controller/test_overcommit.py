"""The rule the v1 controller's safety nets share (`controller.overcommit`): ledger entries on one
node that hold more of a GPU than it has. Exact answers on small sets, and the rule held to the
solver: a share the solver places beside others never over-commits its GPU, and one it refuses
for room does."""

from __future__ import annotations

from typing import Any

from checker import gpu_claim, make_node, pod
from hypothesis import given, settings
from hypothesis import strategies as st

from drasat.api.nas import AllocatedDevices, GpuInfo
from drasat.controller import overcommit
from drasat.solver import Problem, SolveParams, solve
from drasat.v1 import otherdevices

T4 = GpuInfo(index=0, uuid="GPU-t4", memoryBytes=16106127360, productName="Tesla T4")
A100 = GpuInfo(
    index=1, uuid="GPU-a100", memoryBytes=42949672960, productName="A100", migEnabled=True
)
GPUS = {T4.uuid: T4, A100.uuid: A100}


def _entry(uid: str, uuid: str = T4.uuid, **fields: Any) -> AllocatedDevices:
    return AllocatedDevices.model_validate(
        {
            "claimInfo": {"namespace": "default", "name": uid, "uid": uid},
            "gpu": {"devices": [{"uuid": uuid}]},
            **fields,
        }
    )


def _mig(uid: str, start: int, size: int) -> AllocatedDevices:
    device = {"profile": "x", "parentUUID": A100.uuid, "placement": {"start": start, "size": size}}
    return AllocatedDevices.model_validate(
        {
            "claimInfo": {"namespace": "default", "name": uid, "uid": uid},
            "mig": {"devices": [device]},
        }
    )


def _found(*entries: AllocatedDevices) -> list[tuple[str, tuple[str, ...]]]:
    return [(o.gpu, o.claims) for o in overcommit.overcommits(entries, GPUS)]


def test_shares_are_checked_as_sums() -> None:
    assert _found(_entry("a", share={"memory": "7Gi"}), _entry("b", share={"memory": "8Gi"})) == []
    over = [_entry("a", share={"memory": "12Gi"}), _entry("b", share={"memory": "12Gi"})]
    assert _found(*over) == [(T4.uuid, ("a", "b"))]
    (found,) = overcommit.overcommits(over, GPUS)
    assert found.why == "shares summing to memory 24576 MiB of 15360 MiB"
    compute = [_entry(u, share={"compute": 40}) for u in ("a", "b", "c")]
    assert _found(*compute) == [(T4.uuid, ("a", "b", "c"))]
    assert _found(*compute[:2]) == []
    # A claim's own shares count in the sum: one claim alone can over-commit.
    alone = [_entry("a", share={"compute": 60}), _entry("a", share={"compute": 60})]
    assert _found(*alone) == [(T4.uuid, ("a",))]


def test_a_gpu_of_unknown_memory_is_checked_by_compute_alone() -> None:
    big = [_entry(u, "GPU-gone", share={"memory": "100Gi"}) for u in ("a", "b")]
    assert _found(*big) == []
    busy = [_entry(u, "GPU-gone", share={"compute": 60}) for u in ("a", "b")]
    assert _found(*busy) == [("GPU-gone", ("a", "b"))]


def test_exclusive_beside_anything_and_mig_overlaps_are_pairs() -> None:
    whole = _entry("w")
    assert _found(whole, _entry("s", share={"compute": 10})) == [(T4.uuid, ("s", "w"))]
    assert _found(whole, _entry("v")) == [(T4.uuid, ("v", "w"))]
    assert _found(whole, whole) == []  # one claim's entries never clash
    assert _found(_mig("a", 0, 4), _mig("b", 4, 4)) == []
    assert _found(_mig("a", 0, 4), _mig("b", 2, 2)) == [(A100.uuid, ("a", "b"))]
    assert _found(_mig("a", 0, 1), _entry("s", A100.uuid, share={"compute": 10})) == [
        (A100.uuid, ("a", "s"))
    ]
    assert _found(_mig("a", 0, 1), _entry("g", A100.uuid)) == [(A100.uuid, ("a", "g"))]


def test_with_added_names_only_what_the_new_entries_take_part_in() -> None:
    held = {
        "x/gpu": _entry("x", share={"memory": "12Gi"}),
        # Already over-committed between themselves on the A100: not the new entry's doing.
        "m1": _mig("m1", 0, 4),
        "m2": _mig("m2", 0, 4),
    }
    assert (
        overcommit.with_added(held, {"y/gpu": _entry("y", share={"memory": "3Gi"})}, GPUS) is None
    )
    found = overcommit.with_added(held, {"y/gpu": _entry("y", share={"memory": "4Gi"})}, GPUS)
    assert found is not None and found.claims == ("x", "y")
    # A key already held is held (a write retried), not added twice.
    assert overcommit.with_added(held, {"x/gpu": held["x/gpu"]}, GPUS) is None


_share = st.fixed_dictionaries(
    {},
    optional={
        "compute": st.integers(1, 100),
        "memory": st.integers(1, 16 * 1024).map(lambda mib: f"{mib}Mi"),
    },
).filter(bool)


@settings(max_examples=60, deadline=None)
@given(held=st.lists(_share, max_size=4), new=_share)
def test_the_solver_places_a_share_exactly_where_the_rule_says_it_fits(
    held: list[dict[str, Any]], new: dict[str, Any]
) -> None:
    node = make_node("n1", "T4")
    (gpu,) = node.devices.gpus
    entries = {f"h{i}": _entry(f"h{i}", gpu.uuid, share=s) for i, s in enumerate(held)}
    gpus = {gpu.uuid: gpu}
    if overcommit.overcommits(entries.values(), gpus):
        return  # the solver is never handed an over-committed GPU to add to
    node = make_node("n1", "T4", allocated=entries)
    problem = Problem(nodes=(node,), pods=(pod("p", gpu_claim("c", share=new)),))
    placed = bool(solve(problem, SolveParams()).placements)
    fits = overcommit.with_added(entries, {"c": _entry("c", gpu.uuid, share=new)}, gpus) is None
    assert placed == fits


# Other drivers' devices (a NIC): held by the claims' results, against what their slices publish.

NIC = "nic.example.com"


def _nic_slice(*devices: dict[str, Any], counters: list[dict[str, Any]] | None = None) -> Any:
    spec: dict[str, Any] = {
        "driver": NIC,
        "nodeName": "n1",
        "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
        "devices": list(devices),
    }
    if counters:
        spec["sharedCounters"] = counters
    found = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
             "metadata": {"name": "n1-nic"}, "spec": spec}  # fmt: skip
    return otherdevices.read([found], {"gpu.drasat.io"})["n1"]


def _holding(uid: str, *devices: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    results = [{"request": "nic", "driver": NIC, "pool": "n1", "device": d, **fields}
               for d in devices]  # fmt: skip
    return uid, {"status": {"allocation": {"devices": {"results": results}}}}


def test_a_nic_named_by_two_claims_overcommits_it() -> None:
    found = _nic_slice({"name": "eth0"}, {"name": "eth1"})
    clash = overcommit.other_overcommits(
        [_holding("a", "eth0"), _holding("b", "eth0"), _holding("c", "eth1")], found
    )
    assert clash == [
        overcommit.Overcommit(
            f"{NIC}/n1/eth0", ("a", "b"), "named by 2 claims", f"device {NIC}/n1/eth0"
        )
    ]
    assert overcommit.other_overcommits([_holding("a", "eth0"), _holding("c", "eth1")], found) == []
    # One claim naming a NIC twice is one tenant's (upstream refuses it before it is written).
    assert overcommit.other_overcommits([_holding("a", "eth0", "eth0")], found) == []


def test_a_shared_nic_overcommits_only_beyond_its_capacity() -> None:
    shared = {"name": "eth0", "allowMultipleAllocations": True,
              "capacity": {"bandwidth": {"value": "100"}}}  # fmt: skip
    found = _nic_slice(shared)
    fits = [_holding(u, "eth0", consumedCapacity={"bandwidth": "50"}) for u in "ab"]
    assert overcommit.other_overcommits(fits, found) == []
    over = [*fits, _holding("c", "eth0", consumedCapacity={"bandwidth": "1"})]
    (clash,) = overcommit.other_overcommits(over, found)
    assert clash.claims == ("a", "b", "c") and clash.why == "101 held of 100"


def test_nics_beyond_a_shared_counter_overcommit_it() -> None:
    vf = {"consumesCounters": [{"counterSet": "port", "counters": {"vfs": {"value": "1"}}}]}
    counters = [{"name": "port", "counters": {"vfs": {"value": "1"}}}]
    found = _nic_slice({"name": "vf0", **vf}, {"name": "vf1", **vf}, counters=counters)
    (clash,) = overcommit.other_overcommits([_holding("a", "vf0"), _holding("b", "vf1")], found)
    assert clash.claims == ("a", "b") and clash.what == f"counter {NIC}/n1/port/vfs"
