"""Smoke tests of the control-plane allocation bench (bench/kube_alloc.py): its arithmetic
without a cluster, and the whole harness on the real control plane with 2 nodes and 2 pods,
allocator A (kube-scheduler), so the harness cannot rot."""

from __future__ import annotations

import json
import pathlib

import kubernetes
import pytest

from bench import kube_alloc
from drasat.testbed.controlplane import realcluster


def test_fleet_plan_spreads_mig_nodes_and_labels_the_churn_ones() -> None:
    planned = kube_alloc.plan_fleet("r", 100, 0.25, 8)
    mig = [n for n in planned if n.labels[kube_alloc.LABEL] == "mig"]
    assert len(planned) == 100 and len(mig) == 25
    assert [n.name for n in planned] == [f"r-{i:04d}" for i in range(100)]
    churn = [n for n in planned if n.labels.get(f"{kube_alloc.LABEL}/churn")]
    assert churn == mig[:8]
    # A100 and H100 in turn, so the churn nodes are half of each, as bench/mig_churn's cluster.
    assert sum("A100-40GB" in n.fleet for n in churn) == 4
    assert all(",mig=all," in n.fleet for n in mig)
    assert all("mig" not in n.fleet for n in planned if n not in mig)
    # Fewer MIG nodes than churn nodes asked: the churn nodes win.
    assert (
        sum(n.labels[kube_alloc.LABEL] == "mig" for n in kube_alloc.plan_fleet("r", 4, 0, 3)) == 3
    )


def test_fill_shapes_weights_and_sizes() -> None:
    shapes = kube_alloc.fill_shapes()
    by = {s.name: s for s in shapes}
    assert sum(s.weight for s in shapes) == pytest.approx(100)
    mig = [s for s in shapes if s.name.startswith("mig-")]
    assert sum(s.weight for s in mig) == pytest.approx(30)
    assert by["mig-a100-40gb-7g40gb"].gpus == 1.0
    assert by["mig-h100-80gb-1g10gb"].gpus == 1 / 8
    assert by["whole-4"].request["count"] == 4
    names = [s.name for s in shapes]
    assert len(set(names)) == len(names)


DEVICES = {
    ("n", "gpu-0"): {"attributes": {"type": {"string": "gpu"}}},
    ("n", "gpu-1"): {
        "attributes": {"type": {"string": "gpu"}},
        "allowMultipleAllocations": True,
        "capacity": {"memory": {"value": "80Gi"}, "compute": {"value": "100"}},
    },
    ("n", "gpu-2-mig-3g"): {
        "attributes": {"type": {"string": "mig"}, "placementSize": {"int": 4}},
    },
}


def _claim(*results: dict[str, object]) -> dict[str, object]:
    return {"status": {"allocation": {"devices": {"results": list(results)}}}}


def test_allocated_gpus_and_double_allocations() -> None:
    fleet = kube_alloc.Fleet([], DEVICES, 3, 0.0, 0)
    whole = {"pool": "n", "device": "gpu-0"}
    share = {"pool": "n", "device": "gpu-1", "consumedCapacity": {"compute": "30"}}
    mig = {"pool": "n", "device": "gpu-2-mig-3g"}
    claims = [_claim(whole), _claim(share), _claim(share), _claim(mig), {"status": {}}]
    assert kube_alloc.allocated_gpus(claims, fleet) == pytest.approx(1 + 0.6 + 0.5)
    # A whole-GPU claim on a shareable GPU consumes the published defaults (all the memory,
    # compute 0): it holds the whole GPU; a memory-only share holds its memory's fraction.
    whole_there = {**share, "consumedCapacity": {"compute": "0", "memory": "80Gi"}}
    half_memory = {**share, "consumedCapacity": {"compute": "0", "memory": "40Gi"}}
    assert kube_alloc.allocated_gpus([_claim(whole_there), _claim(half_memory)], fleet) == (
        pytest.approx(1.5)
    )
    assert kube_alloc.check_no_double_allocation(claims, fleet) == []
    asks_share = {"devices": {"requests": [{"exactly": {"capacity": {"requests": {}}}}]}}
    whole_share = {**_claim(whole), "spec": asks_share}
    assert (
        kube_alloc.shares_given_whole_gpus([whole_share, {**_claim(share), "spec": asks_share}])
        == 1
    )
    assert kube_alloc.shares_given_whole_gpus([_claim(whole)]) == 0
    twice = kube_alloc.check_no_double_allocation([_claim(whole), _claim(whole)], fleet)
    assert twice == ["device n/gpu-0 held by 2 claims"]
    over = [_claim({**share, "consumedCapacity": {"compute": "60"}})] * 2
    assert kube_alloc.check_no_double_allocation(over, fleet) == [
        "shares of n/gpu-1 take 120% compute"
    ]


def test_percentile_is_nearest_rank() -> None:
    assert kube_alloc._percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.0
    assert kube_alloc._percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert kube_alloc._percentile([], 50) != kube_alloc._percentile([], 50)  # NaN


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_harness_on_the_real_control_plane(
    kube_cluster: realcluster.Cluster, tmp_path: pathlib.Path
) -> None:
    # Three nodes: the two churn nodes (MIG mode) and one without MIG, where a fill pod asking
    # a whole GPU goes (drasat gives a GPU in MIG mode whole only to a request asking MIG mode).
    argv = ["--kubeconfig", str(kube_cluster.kubeconfig), "--nodes", "3", "--pods", "2"]
    argv += ["--allocators", "kube,drasat", "--settle", "5", "--churn-nodes", "2"]
    argv += ["--churn-claims", "4", "--churn-lifetime", "10", "--churn-load", "0.2"]
    argv += ["--patience", "30", "--out", str(tmp_path), "--run", "kbsmoke"]
    assert kube_alloc.main(argv) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["gpus"] == 24 and data["mig_nodes"] == 2
    kube, drasat = data["allocators"]
    assert (kube["allocator"], drasat["allocator"]) == ("kube", "drasat")
    assert drasat["status"] == "ran" and drasat["fill"]["bound"] == 2
    # drasat's pods went the gated path (as admission creates them): the controller lifted
    # every gate it allocated for, and said so in its metrics.
    assert (kube["gated"], drasat["gated"]) == (False, True)
    lifted = drasat["controller_metrics"]["drasat_controller_scheduling_gates_lifted_total"]
    assert lifted >= 2
    assert drasat["fill"]["double_allocations"] == []
    fill = kube["fill"]
    assert (fill["pods"], fill["bound"], fill["create_errors"]) == (2, 2, [])
    # Every pod bound: what is allocated is exactly what was asked.
    assert fill["served_gpus"] == pytest.approx(fill["demand_gpus"])
    assert fill["allocated_gpus"] >= fill["served_gpus"]
    assert fill["double_allocations"] == []
    assert 0 < fill["latency_p50_s"] <= fill["latency_p99_s"] < 60
    churn = kube["churn"]
    assert churn["claims"] == 4 and churn["accepted"] + churn["refused"] == 4
    assert churn["accepted"] >= 1
    # Each accepted claim's MIG device was read back: a profile the request allows.
    served = {k: v["served"] for k, v in churn["by_kind"].items()}
    assert sum(sum(v.values()) for v in served.values()) == churn["accepted"]
    for kind, profiles in served.items():
        if not kind.startswith("needs-"):
            assert {p.replace(".", "") for p in profiles} <= {kind.split("-", 2)[2]}, profiles
    assert "| kube | 3 × 8 = 24 | 2 | 2 |" in (tmp_path / "summary.md").read_text()
    # Four claims on 16 MIG GPUs: each fit when it arrived, judged after the run from what
    # each accepted claim held; the refit of the written results gives the same answer.
    for allocator in (kube, drasat):
        fit = allocator["churn"]["fit_at_arrival"]
        assert (fit["claims"], fit["accepted"]) == (4, allocator["churn"]["accepted"])
        held = allocator["churn"]["claims_held"]
        assert all(held[n]["results"] for n in held if held[n]["bound"] is not None)
    assert kube_alloc.main(["--refit", str(tmp_path / "results.json")]) == 0
    again = json.loads((tmp_path / "results.json").read_text())
    assert again["allocators"][0]["churn"]["fit_at_arrival"]["claims"] == 4
    # The run leaves nothing behind: nodes, slices, namespaces.
    api = kubernetes.config.new_client_from_config(config_file=str(kube_cluster.kubeconfig))
    with api:
        core = kubernetes.client.CoreV1Api(api)
        assert not [n for n in core.list_node().items if n.metadata.name.startswith("kbsmoke")]
        custom = kubernetes.client.CustomObjectsApi(api)
        left = custom.list_cluster_custom_object(*kube_alloc.RESOURCE, "resourceslices")
        assert not [s for s in left["items"] if s["spec"].get("nodeName", "").startswith("kbsmoke")]
        assert not [n for n in core.list_namespace().items if n.metadata.name.startswith("kbsmoke")]
