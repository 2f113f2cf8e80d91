"""bench/mig_preemption.py without a cluster: its flags, the fleet it publishes, what it counts as
a wasted eviction and the table it prints."""

from __future__ import annotations

import pytest

from bench import kube_alloc, mig_preemption


def test_defaults_are_a_small_full_fleet_and_profiles_in_turn() -> None:
    args = mig_preemption.parse_args([])
    assert (args.nodes, args.gpus_per_node, args.preemptors) == (2, 2, 6)
    assert args.allocators == ["kube", "drasat"]
    assert mig_preemption.arrivals(4, args.profiles) == [
        ("high-000", "1g.5gb"), ("high-001", "2g.10gb"), ("high-002", "3g.20gb"),
        ("high-003", "1g.5gb"),
    ]  # fmt: skip
    args = mig_preemption.parse_args(["--profiles", "7g.40gb", "--allocators", "drasat"])
    assert args.profiles == ["7g.40gb"] and args.allocators == ["drasat"]


@pytest.mark.parametrize(
    "flags",
    [["--profiles", "2g.20gb"], ["--profiles", ","], ["--allocators", "volcano"],
     ["--nodes", "0"]],
)  # fmt: skip
def test_bad_flags_are_refused_with_the_flag_named(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        mig_preemption.parse_args(flags)
    assert exc.value.code == 2
    assert flags[0].split("=")[0] in capsys.readouterr().err


def _devices(node: kube_alloc.FleetNode) -> dict[str, dict[str, object]]:
    return {
        d["name"]: d
        for s in kube_alloc.node_slices(node, "uid")
        for d in s["spec"].get("devices", [])
    }


def test_the_fleet_is_a100s_in_mig_mode_whose_placements_share_memory_slices() -> None:
    (node,) = mig_preemption.plan_fleet("t", 1, 1)
    devices = _devices(node)
    profiles = [str(d["attributes"]["profile"]["string"]) for d in devices.values()
                if kube_alloc._type(d) == "mig"]  # fmt: skip
    assert profiles.count("1g.5gb") == mig_preemption.SLOTS_PER_GPU
    assert sum(1 for d in devices.values() if kube_alloc._type(d) == "gpu") == 1
    by_start = {
        (str(d["attributes"]["profile"]["string"]), int(d["attributes"]["placementStart"]["int"])):
        mig_preemption._slices_of(d)
        for d in devices.values() if kube_alloc._type(d) == "mig"
    }  # fmt: skip
    # A 3g.20gb at slice 4 overlaps the 1g.5gb slots 4-6 and none of 0-3.
    three = by_start[("3g.20gb", 4)]
    assert [s for s in range(7) if by_start[("1g.5gb", s)] & three] == [4, 5, 6]


def test_an_eviction_is_wasted_when_no_placed_preemptor_holds_its_slices() -> None:
    a, b, c = {("g0", "memory-slice-0")}, {("g0", "memory-slice-1")}, {("g1", "memory-slice-0")}
    before = {"low-0": a, "low-1": b, "low-2": c}
    after = {"high-0": a | b, "high-1": c}
    evicted = ["low-0", "low-1", "low-2"]
    assert mig_preemption.wasted_evictions(before, after, evicted, ["high-0", "high-1"]) == []
    # high-1 was not placed (or is gone): low-2's eviction freed nothing used.
    assert mig_preemption.wasted_evictions(before, after, evicted, ["high-0"]) == ["low-2"]
    assert mig_preemption.wasted_evictions(before, {}, evicted, []) == evicted


def test_the_table_has_a_row_per_allocator_and_says_why_one_is_pending() -> None:
    nan = float("nan")
    row = {"slots": 28, "filled": 28, "preemptors": 6, "evicted": 0, "wasted_evictions": 0,
           "min_evictions_for_placed": 0, "wait_p50_s": nan, "wait_p99_s": nan}  # fmt: skip
    results = {"allocators": [
        {"allocator": "kube", **row, "placed": 0, "pending_reason": "FailedScheduling: no"},
        {"allocator": "drasat", **row, "placed": 6, "evicted": 12,
         "min_evictions_for_placed": 12, "wait_p50_s": 3.1, "wait_p99_s": 9.0,
         "pending_reason": ""},
    ]}  # fmt: skip
    table = mig_preemption.summary(results)
    lines = table.splitlines()
    assert lines[2] == "| kube | 28 of 28 | 0 of 6 | 0 | - | 0 | 0 | - |"
    assert lines[3] == "| drasat | 28 of 28 | 6 of 6 | 12 | 2.00 | 0 | 12 | 3.1 / 9.0 |"
    assert "kube, a pending preemptor: FailedScheduling: no" in table
