"""drasat.v1.allocate at cluster scale (issue 26 item 4): what is worked out once per claim
spec and per node state instead of per claim and per node, and the caller's deadline. Exact
answers and call counts, no timings (those are in bench/whatif_scale.py)."""

from __future__ import annotations

import importlib
import time
from typing import Any

import pytest
from v1kit import CLASSES, GPU, MIG, attr, claim, exactly, node, pod

from drasat import v1
from drasat.solver import SolveParams, nodes
from drasat.v1 import variants

#: The module (`drasat.v1.allocate` is also the function's name in the package).
allocate_module = importlib.import_module("drasat.v1.allocate")


def _profile(name: str) -> dict[str, Any]:
    return exactly(MIG, attr("profile") + f' == "{name}"')


def _gpu_test4(name: str) -> dict[str, Any]:
    return claim(
        name,
        {
            "a": _profile("1g.5gb"),
            "b": _profile("1g.5gb"),
            "c": _profile("2g.10gb"),
            "d": _profile("3g.20gb"),
        },
        constraints=[{"matchAttribute": "gpu.drasat.io/parentUUID"}],
    )


def test_claims_of_one_spec_search_the_devices_once_and_keep_their_own_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    real = variants.claim_variants

    def counted(found: Any, catalog: Any) -> Any:
        calls.append(found.name)
        return real(found, catalog)

    monkeypatch.setattr(allocate_module, "claim_variants", counted)
    pods = [pod(f"p{i}", claim(f"c{i}", {"gpu": exactly(GPU)})) for i in range(5)]
    out = v1.allocate([node("a", "T4", 3), node("b", "T4", 2)], pods, CLASSES)
    assert calls == ["c0"]
    assert len(out.placed) == 5
    assert sorted(a.name for a in out.allocations.values()) == [f"c{i}" for i in range(5)]
    devices = [(a.node, r["device"]) for a in out.allocations.values()
               for r in a.allocation["devices"]["results"]]  # fmt: skip
    assert len(set(devices)) == 5  # five distinct GPUs


def test_pods_of_a_template_with_match_attribute_share_each_node_states_evaluation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """gpu-test4's shape on eight equal A100 nodes: its claims differ in name (and so in their
    constraint's key) and the nodes in their GPUs' uuids, yet one evaluation serves every node
    in one state; each pod still gets four devices of one parent."""
    computed: list[str] = []
    real = nodes._compute

    def counted(shape: Any, node_view: Any, rules: Any, budget: Any) -> Any:
        computed.append(node_view.name)
        return real(shape, node_view, rules, budget)

    monkeypatch.setattr(nodes, "_compute", counted)
    cluster = [node(f"m{i}", "A100-40GB", 1, mig=True) for i in range(8)]
    pods = [pod(f"p{i}", _gpu_test4(f"four{i}")) for i in range(3)]
    out = v1.allocate(cluster, pods, CLASSES)
    assert len(out.placed) == 3
    for i in range(3):
        found = next(a for a in out.allocations.values() if a.name == f"four{i}")
        names = [r["device"] for r in found.allocation["devices"]["results"]]
        assert len(names) == 4 and len({n.split("-mig-")[0] for n in names}) == 1
    # Per (pod, node) this would be 24 and more; per node state it is a handful.
    assert len(computed) < len(cluster)


def test_after_the_deadline_no_further_round_starts_and_the_pods_left_say_so() -> None:
    """Round 2 would try each pod's second choice; past the caller's deadline it is not run,
    and the pods it would have tried say so."""
    big, one = {"name": "big", **exactly(GPU, count=2)}, {"name": "one", **exactly(GPU)}
    either = {"firstAvailable": [big, one]}
    pods = [pod(f"p{i}", claim(f"c{i}", {"gpu": either})) for i in range(2)]
    late = SolveParams(deadline=time.monotonic() - 1)
    out = v1.allocate([node("a", "T4", 3)], pods, CLASSES, params=late)
    assert len(out.placed) == 1 and out.untried == 1
    (left,) = [reasons for key, reasons in out.refused.items()]
    assert left[-1] == (
        "its choices of devices after the first were not tried (the time limit ran out)"
    )
    # Without a deadline the second round places the other pod with one GPU.
    assert len(v1.allocate([node("a", "T4", 3)], pods, CLASSES).placed) == 2
