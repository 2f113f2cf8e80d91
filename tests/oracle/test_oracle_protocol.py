"""drasat-oracle itself: each operation answers as upstream's code does on a small exact case, a
device already allocated is not allocated again, and a bad request is refused without ending the
process (tests/oracle's differential tests rely on all of it)."""

from __future__ import annotations

import fleet
import pytest
from oraclekit import Oracle, OracleError

CLASSES = list(fleet.CLASSES.values())


def _claim(**exactly: object) -> dict[str, object]:
    spec = {"deviceClassName": "gpu.drasat.io", "allocationMode": "ExactCount", "count": 1}
    return {
        "metadata": {"name": "c", "namespace": "default", "uid": "uid-c"},
        "spec": {"devices": {"requests": [{"name": "a", "exactly": {**spec, **exactly}}]}},
    }


def _one_t4(shares: bool = False) -> fleet.Built:
    gpu = fleet.GpuCase(product="T4", mig=False, numa=None, pci=False, unhealthy=False)
    return fleet.build(fleet.NodeCase("n1", (gpu,), shares))


def test_allocate_gives_the_gpu_then_not_twice(oracle: Oracle) -> None:
    node = _one_t4()
    first = oracle.allocate("n1", node.slices, CLASSES, _claim())
    assert first["allocated"]
    (result,) = first["allocation"]["devices"]["results"]
    assert (result["request"], result["pool"], result["device"]) == ("a", "n1", "gpu-0")
    again = oracle.allocate("n1", node.slices, CLASSES, _claim(), [first["allocation"]])
    assert again == {"allocated": False}


def test_allocate_reports_a_selector_error_as_fatal(oracle: Oracle) -> None:
    claim = _claim(selectors=[{"cel": {"expression": 'device.attributes["gpu.drasat.io"].x'}}])
    answer = oracle.allocate("n1", _one_t4().slices, CLASSES, claim)
    assert not answer["allocated"] and not answer["failedOnNode"]
    assert "CEL runtime error: no such key: x" in answer["error"]


def test_validate_accepts_upstreams_own_answer_and_refuses_a_changed_one(oracle: Oracle) -> None:
    node = _one_t4(shares=True)
    claim = _claim(capacity={"requests": {"memory": "4Gi"}})
    allocation = oracle.allocate("n1", node.slices, CLASSES, claim)["allocation"]
    assert oracle.validate("n1", node.slices, CLASSES, claim, allocation) == {"valid": True}
    (result,) = allocation["devices"]["results"]
    result["consumedCapacity"]["memory"] = "1Gi"
    verdict = oracle.validate("n1", node.slices, CLASSES, claim, allocation)
    assert not verdict["valid"] and "consumedCapacity" in verdict["reason"]
    del result["shareID"]
    verdict = oracle.validate("n1", node.slices, CLASSES, claim, allocation)
    assert not verdict["valid"] and "shareID" in verdict["reason"]


def test_validate_compares_the_node_selector(oracle: Oracle) -> None:
    node = _one_t4()
    allocation = oracle.allocate("n1", node.slices, CLASSES, _claim())["allocation"]
    term = allocation["nodeSelector"]["nodeSelectorTerms"][0]
    assert term == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    term["matchFields"][0]["values"] = ["n2"]
    verdict = oracle.validate("n1", node.slices, CLASSES, _claim(), allocation)
    assert not verdict["valid"] and verdict["reason"].startswith("nodeSelector")


def test_allocate_places_a_pods_claims_together_or_not_at_all(oracle: Oracle) -> None:
    two = [_claim(), {**_claim(), "metadata": {"name": "d", "namespace": "default", "uid": "d"}}]
    one_gpu = oracle.allocate_pod("n1", _one_t4().slices, CLASSES, two)
    assert one_gpu == {"allocated": False}  # one T4 for two claims
    gpus = (fleet.GpuCase(product="T4", mig=False, numa=None, pci=False, unhealthy=False),) * 2
    answer = oracle.allocate_pod("n1", fleet.build(fleet.NodeCase("n1", gpus, False)).slices,
                                 CLASSES, two)  # fmt: skip
    assert answer["allocated"] and "allocation" not in answer
    devices = [a["devices"]["results"][0]["device"] for a in answer["allocations"]]
    assert sorted(devices) == ["gpu-0", "gpu-1"]
    with pytest.raises(OracleError, match="a claim or claims"):
        oracle.ask({"op": "allocate", "node": "n1", "slices": [], "classes": [], "claims": []})


def test_cel_answers_per_device(oracle: Oracle) -> None:
    devices = [(fleet.DRIVER, d) for d in _one_t4().published()]
    answer = oracle.cel('device.attributes["gpu.drasat.io"].type == "gpu"', devices)
    assert answer["compiles"] and [r["match"] for r in answer["results"]] == [True, False]
    assert not oracle.cel("1 ==", devices)["compiles"]


def test_a_bad_request_is_refused_and_the_process_goes_on(oracle: Oracle) -> None:
    with pytest.raises(OracleError, match="unknown op"):
        oracle.ask({"op": "nonsense"})
    assert oracle.cel("true", [(fleet.DRIVER, {"name": "x"})])["results"] == [{"match": True}]
