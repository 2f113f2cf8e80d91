"""drasat.v1.results: the `status.allocation` drasat writes (what kube-scheduler writes: one
result per device, `consumedCapacity` and `shareID` on devices that allow several allocations,
configs in the API's order, a node selector naming the node) and the ledger read back from it
(`ledger_from_status`, the restart path), exact answers on small nodes."""

from __future__ import annotations

import uuid
from typing import Any

from v1kit import CLASSES, FALLBACK, GPU, MIG, attr, claim, exactly, node, pod

from drasat import v1
from drasat.v1 import results

Obj = dict[str, Any]

T4_MEMORY = str(15 * 2**30)  # the T4's memory as its device publishes it (15Gi)


def _allocate(nodes: list[v1.Node], *claims: Obj) -> v1.Outcome:
    pods = [pod(f"p-{c['metadata']['name']}", c) for c in claims]
    return v1.allocate(nodes, pods, CLASSES)


def _results(outcome: v1.Outcome, name: str) -> list[Obj]:
    found = next(a for a in outcome.allocations.values() if a.name == name)
    return list(found.allocation["devices"]["results"])


def _share(**requests: str) -> Obj:
    return exactly(GPU, capacity={"requests": requests})


def _profile(name: str, count: int = 1) -> Obj:
    return exactly(MIG, attr("profile") + f' == "{name}"', count=count)


# -- what is written -------------------------------------------------------------------------------


def test_a_whole_gpu_on_a_shareable_device_consumes_the_defaults() -> None:
    # As upstream's allocator writes it: each request policy's default (all of the memory,
    # which keeps every share off the GPU; no compute).
    out = _allocate([node("a", "T4", 1)], claim("c", {"g": exactly()}))
    (result,) = _results(out, "c")
    assert {k: v for k, v in result.items() if k != "shareID"} == {
        "request": "g",
        "driver": "gpu.drasat.io",
        "pool": "a",
        "device": "gpu-0",
        "consumedCapacity": {"memory": T4_MEMORY, "compute": "0"},
    }
    assert uuid.UUID(result["shareID"])


def test_a_compute_only_share_keeps_its_compute_and_takes_the_default_memory() -> None:
    # The published requestPolicy's default for memory is all of it.
    out = _allocate([node("a", "T4", 1)], claim("c", {"s": _share(compute="30")}))
    (result,) = _results(out, "c")
    assert result["consumedCapacity"] == {"memory": T4_MEMORY, "compute": "30"}


def test_a_memory_only_share_takes_the_default_compute_none() -> None:
    out = _allocate([node("a", "T4", 1)], claim("c", {"s": _share(memory="1000Mi")}))
    (result,) = _results(out, "c")
    assert result["consumedCapacity"] == {"memory": str(1000 * 2**20), "compute": "0"}


def test_share_memory_is_rounded_up_to_the_policys_step_and_compute_zero_is_kept() -> None:
    out = _allocate([node("a", "T4", 1)], claim("c", {"s": _share(memory="1000001", compute="0")}))
    (result,) = _results(out, "c")
    assert result["consumedCapacity"] == {"memory": str(2**20), "compute": "0"}


def test_share_ids_are_stable_and_differ_between_claims() -> None:
    def ids() -> list[str]:
        share = _share(memory="4Gi", compute="25")
        out = _allocate([node("a", "T4", 1)], claim("c1", {"s": share}), claim("c2", {"s": share}))
        return [_results(out, name)[0]["shareID"] for name in ("c1", "c2")]

    first = ids()
    assert first == ids()
    assert first[0] != first[1]


def test_the_cpu_fallback_has_a_share_id_and_mig_devices_neither_share_id_nor_capacity() -> None:
    optional = {"firstAvailable": [{"name": "cpu", "deviceClassName": FALLBACK}]}
    out = _allocate(
        [node("m", "A100-40GB", 1, mig=True)],
        claim("f", {"o": optional}),
        claim("m", {"m": _profile("1g.5gb")}),
    )
    (fallback,) = _results(out, "f")
    assert (fallback["request"], fallback["device"]) == ("o/cpu", "cpu-fallback")
    assert "consumedCapacity" not in fallback and uuid.UUID(fallback["shareID"])
    (mig,) = _results(out, "m")
    assert mig["device"].startswith("gpu-0-mig-1g5gb-")
    assert set(mig) == {"request", "driver", "pool", "device"}


def test_the_allocation_names_its_node_and_has_no_config_when_none_applies() -> None:
    out = _allocate([node("a", "T4", 1)], claim("c", {"g": exactly()}))
    allocation = out.allocations["uid-c"].allocation
    assert allocation["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}
        ]
    }
    assert "config" not in allocation["devices"]
    assert results.node_selector("b")["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["b"]


def test_class_configs_name_the_requests_that_used_the_class_then_the_claims_follow() -> None:
    opaque = {"driver": "x.io", "parameters": {"n": 1}}
    classes = {
        **CLASSES,
        GPU: {**CLASSES[GPU], "spec": {**CLASSES[GPU]["spec"], "config": [{"opaque": opaque}]}},
    }
    mine = {"requests": ["b"], "opaque": {"driver": "y.io", "parameters": {"m": 2}}}
    written = claim("c", {"a": exactly(), "b": exactly(), "f": exactly(FALLBACK)}, config=[mine])
    out = v1.allocate([node("a", "T4", 2)], [pod("p", written)], classes)
    assert out.allocations["uid-c"].allocation["devices"]["config"] == [
        {"source": "FromClass", "requests": ["a", "b"], "opaque": opaque},
        {"source": "FromClaim", **mine},
    ]


# -- read back -------------------------------------------------------------------------------------


def _read(outcome: v1.Outcome, name: str, nodes: list[v1.Node]) -> dict[str, Any]:
    placed = next(a for a in outcome.allocations.values() if a.name == name)
    written = claim(name, {})
    written["status"] = {"allocation": placed.allocation}
    nas = next(n.state.devices for n in nodes if n.state.name == placed.node)
    return results.ledger_from_status(written, nas)


def _held(entries: dict[str, Any]) -> dict[str, tuple[object, ...]]:
    """Per ledger key: the GPUs, MIG placements, share and whether it is optional."""
    out = {}
    for key, entry in entries.items():
        gpus = tuple(d.uuid for d in entry.gpu.devices) if entry.gpu else None
        migs = (
            tuple((m.parentUUID, m.profile, m.placement.start, m.placement.size)
                  for m in entry.mig.devices) if entry.mig else None
        )  # fmt: skip
        share = (entry.share.compute, entry.share.memory) if entry.share else None
        out[key] = (gpus, migs, share, bool(entry.optional), entry.claimInfo.name)
    return out


def test_every_shape_read_back_from_status_is_the_ledger_written() -> None:
    nodes = [node("m", "A100-40GB", 1, mig=True), node("a", "T4", 6)]
    optional = {"firstAvailable": [
        {"name": "big", "deviceClassName": GPU, "selectors": [
            {"cel": {"expression": attr("productName") + ' == "H100"'}}]},
        {"name": "cpu", "deviceClassName": FALLBACK}]}  # fmt: skip
    claims = [
        claim("migs", {"m": _profile("1g.5gb", count=2)}),
        claim("pair", {"g": exactly(count=2)}),
        claim("compute", {"s": _share(compute="30")}),
        claim("memory", {"s": _share(memory="2Gi")}),
        claim(
            "shares",
            {"s": exactly(GPU, capacity={"requests": {"memory": "1Gi", "compute": "10"}}, count=2)},
        ),
        claim("optional", {"o": optional}),
    ]
    out = _allocate(nodes, *claims)
    assert len(out.placed) == len(claims), out.refused
    for written in claims:
        name = written["metadata"]["name"]
        placed = next(a for a in out.allocations.values() if a.name == name)
        assert _held(_read(out, name, nodes)) == _held(dict(placed.ledger)), name


def test_status_read_back_exact_entries() -> None:
    nodes = [node("m", "A100-40GB", 1, mig=True), node("a", "T4", 2)]
    out = _allocate(
        nodes,
        claim("migs", {"m": _profile("3g.20gb", count=2)}),
        claim("compute", {"s": _share(compute="30")}),
        claim("whole", {"g": exactly()}),
    )
    parent = nodes[0].state.devices.gpus[0].uuid
    migs = _held(_read(out, "migs", nodes))
    assert set(migs) == {"uid-migs/m#0", "uid-migs/m#1"}
    assert sorted(m[1][0][2] for m in migs.values()) == [0, 4]  # the two 3g.20gb placements
    assert all(m[1][0][:2] == (parent, "3g.20gb") and m[1][0][3] == 4 for m in migs.values())
    ((key, (gpus, _, share, _, _)),) = _held(_read(out, "compute", nodes)).items()
    assert key == "uid-compute/s" and len(gpus or ()) == 1
    assert share == (30, 15 * 2**30)
    ((key, (gpus, _, share, _, _)),) = _held(_read(out, "whole", nodes)).items()
    assert key == "uid-whole/g" and share is None  # all its capacity: the GPU held whole


def test_results_of_other_drivers_devices_the_node_lacks_and_admin_access_are_skipped() -> None:
    nas = node("a", "T4", 1).state.devices
    status = {"allocation": {"devices": {"results": [
        {"request": "g", "driver": "gpu.example.com", "pool": "a", "device": "gpu-0"},
        {"request": "h", "driver": "gpu.drasat.io", "pool": "a", "device": "gpu-7"},
        {"request": "m", "driver": "gpu.drasat.io", "pool": "a", "device": "gpu-0-mig-1g5gb-19-0"},
        {"request": "k", "driver": "gpu.drasat.io", "pool": "a", "device": "gpu-0"},
        # admin access holds nothing (upstream's allocator and kube-scheduler skip it alike)
        {"request": "x", "driver": "gpu.drasat.io", "pool": "a", "device": "gpu-0",
         "adminAccess": True},
    ]}}}  # fmt: skip
    written = claim("c", {})
    written["status"] = status
    read = results.ledger_from_status(written, nas)
    assert list(read) == ["uid-c/k"]
    entry = read["uid-c/k"]
    assert entry.gpu is not None and [d.uuid for d in entry.gpu.devices] == [nas.gpus[0].uuid]
    assert entry.claimInfo.model_dump() == {"namespace": "default", "name": "c", "uid": "uid-c"}
    assert results.ledger_from_status(claim("c", {}), nas) == {}


# -- what the node plugin prepares -----------------------------------------------------------------


def test_shapes_the_node_plugin_prepares_together_are_allocated() -> None:
    """One NAS entry per claim: whole GPUs with the CPU fallback, shares of one size, MIG
    devices, each with one configuration, are all preparable."""
    optional = {"firstAvailable": [{"name": "cpu", "deviceClassName": FALLBACK}]}
    same = _share(memory="2Gi", compute="20")
    config = {"opaque": {"driver": "gpu.drasat.io", "parameters": {
        "apiVersion": "gpu.drasat.io/v1alpha1", "kind": "GpuConfig"}}}  # fmt: skip
    claims = [
        claim("whole", {"g": exactly(), "o": optional}),
        claim("shares", {"s": same, "t": same}),
        claim("configured", {"a": exactly(), "b": exactly()}, config=[config]),
    ]
    out = _allocate([node("a", "T4", 4)], *claims)
    assert len(out.placed) == 3, out.refused
    migs = claim("migs", {"a": _profile("1g.5gb"), "b": _profile("2g.10gb")})
    assert len(_allocate([node("m", "A100-40GB", 1, mig=True)], migs).placed) == 1


def test_a_class_config_names_the_subrequest_that_used_the_class() -> None:
    opaque = {"driver": "x.io", "parameters": {"n": 1}}
    classes = {
        **CLASSES,
        GPU: {**CLASSES[GPU], "spec": {**CLASSES[GPU]["spec"], "config": [{"opaque": opaque}]}},
    }
    optional = {"firstAvailable": [{"name": "gpu", "deviceClassName": GPU},
                                   {"name": "cpu", "deviceClassName": FALLBACK}]}  # fmt: skip
    out = v1.allocate([node("a", "T4", 1)], [pod("p", claim("c", {"o": optional}))], classes)
    assert out.allocations["uid-c"].allocation["devices"]["config"] == [
        {"source": "FromClass", "requests": ["o/gpu"], "opaque": opaque}
    ]
