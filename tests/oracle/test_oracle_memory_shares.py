"""Shares that name only memory (NVIDIA's `consumable-shares` memory pattern on drasat's class)
pack by memory, and kube-scheduler's allocator (v0.37.2, through drasat-oracle) agrees claim by
claim: each of drasat's allocations is one upstream accepts given the ones before it, upstream
allocates exactly as many such claims on the GPU, and an exclusive claim fits beside none."""

from __future__ import annotations

import dataclasses
from typing import Any

import claimgen
import fleet
from oraclekit import Oracle

from drasat import v1

Obj = dict[str, Any]
CLASSES = list(fleet.CLASSES.values())
T4 = fleet.GpuCase(product="T4", mig=False, numa=None, pci=False, unhealthy=False)


def _claim(name: str, capacity: Obj | None = None) -> Obj:
    exactly: Obj = {"deviceClassName": claimgen.GPU, "allocationMode": "ExactCount", "count": 1}
    if capacity is not None:
        exactly["capacity"] = {"requests": capacity}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def _drasat(built: fleet.Built, claims: list[Obj]) -> dict[str, Obj]:
    pods = [v1.PodInput(f"default/p-{c['metadata']['name']}", "default", (c,)) for c in claims]
    out = v1.allocate([built.node], pods, fleet.CLASSES)
    return {
        c["metadata"]["name"]: out.allocations[c["metadata"]["uid"]].allocation
        for c in claims
        if c["metadata"]["uid"] in out.allocations
    }


def test_memory_only_shares_pack_by_memory_as_upstream_allocates_them(oracle: Oracle) -> None:
    built = fleet.build(fleet.NodeCase("n1", (T4,), True))
    claims = [_claim(f"c{i}", {"memory": "4Gi"}) for i in range(4)]
    mine = _drasat(built, claims)
    # A T4 shares 15Gi: three of 4Gi, on its one GPU, each consuming no compute.
    assert sorted(mine) == ["c0", "c1", "c2"]
    for allocation in mine.values():
        (result,) = allocation["devices"]["results"]
        assert result["device"] == "gpu-0"
        assert result["consumedCapacity"] == {"memory": str(4 * 2**30), "compute": "0"}
    held: list[Obj] = []
    for name in sorted(mine):
        claim = next(c for c in claims if c["metadata"]["name"] == name)
        verdict = oracle.validate("n1", built.slices, CLASSES, claim, mine[name], held)
        assert verdict["valid"], verdict["reason"]
        held.append(mine[name])
    # Upstream allocates no fourth beside them, and no exclusive claim.
    for claim in (claims[3], _claim("whole")):
        assert not oracle.allocate("n1", built.slices, CLASSES, claim, held).get("allocated")


def test_an_exclusive_claim_keeps_memory_only_shares_off_its_gpu(oracle: Oracle) -> None:
    built = fleet.build(fleet.NodeCase("n1", (T4,), True))
    whole = _claim("whole")
    (allocation,) = _drasat(built, [whole]).values()
    (result,) = allocation["devices"]["results"]
    # The defaults of the request policies: all of the memory, none of the compute.
    assert result["consumedCapacity"] == {"memory": str(15 * 2**30), "compute": "0"}
    assert oracle.validate("n1", built.slices, CLASSES, whole, allocation)["valid"]
    share = _claim("share", {"memory": "1Mi"})
    assert not oracle.allocate("n1", built.slices, CLASSES, share, [allocation]).get("allocated")


def test_a_compute_only_share_still_takes_all_the_memory(oracle: Oracle) -> None:
    built = fleet.build(fleet.NodeCase("n1", (dataclasses.replace(T4),), True))
    claims = [_claim(f"c{i}", {"compute": "10"}) for i in range(2)]
    mine = _drasat(built, claims)
    assert sorted(mine) == ["c0"]
    assert oracle.validate("n1", built.slices, CLASSES, claims[0], mine["c0"])["valid"]
    assert not oracle.allocate("n1", built.slices, CLASSES, claims[1], [mine["c0"]]).get(
        "allocated"
    )
