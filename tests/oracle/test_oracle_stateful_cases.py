"""The stateful oracle's exact cases (test_oracle_stateful.py's state machine, stepped by hand):
sequences whose outcome is known, that its checks catch what they must, and the disagreements it
found, each minimal (strict xfail where the fix is not the oracle's)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import claimgen
import clusterkit
import fleet
import pytest
from oraclekit import Oracle
from test_oracle_stateful import Sequences

from drasat.kube import resources as r

Obj = dict[str, Any]
T4 = fleet.GpuCase(product="T4", mig=False, numa=None, pci=False, unhealthy=False)


def _drasat(name: str, *gpus: fleet.GpuCase, shares: bool = False) -> clusterkit.NodeSpec:
    return clusterkit.NodeSpec(name, drasat=fleet.NodeCase(name, gpus, shares))


def _nvidia(name: str, kind: str) -> clusterkit.NodeSpec:
    return clusterkit.NodeSpec(name, nvidia=kind)


@contextmanager
def _machine(oracle: Oracle, *nodes: clusterkit.NodeSpec) -> Iterator[Sequences]:
    Sequences.oracle = oracle
    machine = Sequences()
    machine.build(list(nodes))
    try:
        yield machine
    finally:
        machine.teardown()


def _claim(device_class: str = claimgen.GPU, count: int = 1, **exactly: Any) -> Obj:
    spec = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    return {"spec": {"devices": {"requests": [{"name": "a", "exactly": {**spec, **exactly}}]}}}


def _selected(expression: str, device_class: str = claimgen.GPU, **exactly: Any) -> Obj:
    return _claim(device_class, selectors=[{"cel": {"expression": expression}}], **exactly)


def _share(memory: str) -> Obj:
    return _claim(capacity={"requests": {"memory": memory}})


def _devices(machine: Sequences, pod: str) -> list[str]:
    """The devices the pod's claims were allocated (node/device), in claim order."""
    assert machine.cluster is not None
    claims = {c["metadata"]["name"]: c for c in machine.cluster.claims().values()}
    out = []
    for name in machine.pods[pod]:
        found = clusterkit.allocation(claims[name]) or {"devices": {"results": []}}
        out += [f"{x['pool']}/{x['device']}" for x in found["devices"]["results"]]
    return out


# -- sequences whose outcome is known -------------------------------------------------------------


def test_the_gpu_a_pod_leaves_goes_to_the_pod_that_waited(oracle: Oracle) -> None:
    with _machine(oracle, _drasat("n0", T4), _drasat("n1", T4)) as machine:
        first, second = machine.pod_arrives([_claim()]), machine.pod_arrives([_claim()])
        assert sorted(_devices(machine, first) + _devices(machine, second)) == [
            "n0/gpu-0",
            "n1/gpu-0",
        ]
        third = machine.pod_arrives([_claim()])
        machine.check()
        assert _devices(machine, third) == []  # both GPUs are held: upstream agrees it waits
        freed = _devices(machine, first)
        machine._leave(first)
        # The same step's cycles release the first pod's claim and place the waiting pod there.
        assert _devices(machine, third) == freed
        machine.check()


def test_shares_count_beside_another_allocators_share(oracle: Oracle) -> None:
    with _machine(oracle, _drasat("n0", T4, shares=True)) as machine:
        # kube-scheduler's allocator (upstream itself) takes 4Gi of the T4's 15Gi first.
        assert machine.another_allocates([_share("4Gi")]) is not None
        eight = machine.pod_arrives([_share("8Gi")])
        assert _devices(machine, eight) == ["n0/gpu-0"]
        machine.check()  # 8Gi beside 4Gi: upstream accepts it
        four = machine.pod_arrives([_share("4Gi")])
        assert _devices(machine, four) == []  # 16Gi would be more than the T4 has
        machine.check()  # and upstream cannot place it either
        machine._leave(eight)
        assert _devices(machine, four) == ["n0/gpu-0"]
        machine.check()


def test_mig_counters_another_allocator_consumed_are_counted(oracle: Oracle) -> None:
    profile = 'device.attributes["gpu.nvidia.com"].profile == "{}"'
    with _machine(oracle, _nvidia("n0", "nv-a100")) as machine:
        # Upstream places a 4g MIG device on the dynamic-MIG A100 (its counters consumed).
        other = machine.another_allocates(
            [_selected(profile.format("4g.20gb"), claimgen.NVIDIA_MIG)]
        )
        assert other is not None
        whole = machine.pod_arrives([_selected(profile.format("7g.40gb"), claimgen.NVIDIA_MIG)])
        small = machine.pod_arrives([_selected(profile.format("3g.20gb"), claimgen.NVIDIA_MIG)])
        machine.check()
        assert _devices(machine, whole) == []  # the counters 4g took are not free
        assert len(_devices(machine, small)) == 1  # beside it, on what is free
        machine._leave(other)
        machine._leave(small)
        assert len(_devices(machine, whole)) == 1
        machine.check()


ASKS_MIG_MODE = 'device.attributes["gpu.drasat.io"].migEnabled'


def test_a_gpu_with_a_mig_device_in_use_is_not_given_whole(oracle: Oracle) -> None:
    a100 = dataclasses.replace(T4, product="A100-40GB", mig=True)
    with _machine(oracle, _drasat("n0", a100)) as machine:
        mig = machine.pod_arrives([_claim(claimgen.MIG)])
        assert len(_devices(machine, mig)) == 1
        whole = machine.pod_arrives([_selected(ASKS_MIG_MODE)])
        machine.check()  # the MIG device's counters: upstream cannot give the GPU whole either
        assert _devices(machine, whole) == []
        machine._leave(mig)
        assert _devices(machine, whole) == ["n0/gpu-0"]
        machine.check()


# -- the checks catch what they must --------------------------------------------------------------


def test_the_validity_check_sees_a_device_held_twice(oracle: Oracle) -> None:
    with _machine(oracle, _drasat("n0", T4)) as machine:
        pod = machine.pod_arrives([_claim()])
        machine.check()
        cluster = machine.cluster
        assert cluster is not None
        (placed,) = [c for c in cluster.claims().values() if clusterkit.allocation(c)]
        # A second claim written with the same GPU (a stale allocator), no cycle since.
        body = cluster.api.create(
            r.RESOURCE_CLAIMS_V1,
            {"metadata": {"name": "twice", "namespace": "default"}, "spec": _claim()["spec"]},
            namespace="default",
        )
        body["status"] = {"allocation": clusterkit.allocation(placed)}
        cluster.api.replace_status(r.RESOURCE_CLAIMS_V1, body)
        with pytest.raises(AssertionError, match="not one upstream accepts beside the 1 others"):
            machine.every_allocation_is_one_upstream_accepts()
        assert pod in machine.pods


def test_the_feasibility_check_sees_a_pod_left_waiting(oracle: Oracle) -> None:
    with _machine(oracle, _drasat("n0", T4)) as machine:
        # A controller that runs no cycle leaves the pod waiting; the oracle sees the GPU it
        # could have. (drasat allocates every claim of its classes, tolerating its allocator
        # taint or not, so such a claim no longer makes a pod wait.)
        cluster = machine.cluster
        assert cluster is not None
        cluster.controller.stop()
        cluster.run = lambda: None  # type: ignore[method-assign]
        machine.pod_arrives([_claim()])
        with pytest.raises(AssertionError, match="upstream places it on n0"):
            machine.no_pod_waits_that_upstream_places()


def test_the_release_check_sees_a_claim_kept(oracle: Oracle) -> None:
    with _machine(oracle, _drasat("n0", T4)) as machine:
        pod = machine.pod_arrives([_claim()])
        cluster = machine.cluster
        assert cluster is not None
        cluster.controller.stop()  # no cycle will release it: its finalizer stays
        cluster.run = lambda: None  # type: ignore[method-assign]
        with pytest.raises(AssertionError, match="were not released"):
            machine._leave(pod)


# -- what the stateful oracle found ---------------------------------------------------------------


def test_two_mig_devices_of_distinct_profiles_without_a_constraint(oracle: Oracle) -> None:
    # NVIDIA's static MIG A100 holds a 3g.20gb, a 2g.10gb and a 1g.5gb: a request of two MIG
    # devices takes two of them, of distinct profiles, as upstream does (found by the stateful
    # oracle when drasat held one request's MIG devices to one profile).
    with _machine(oracle, _nvidia("n0", "nv-a100-static")) as machine:
        machine.known_differences = False
        pod = machine.pod_arrives([_claim(claimgen.NVIDIA_MIG, count=2)])
        machine.check()
        assert len(_devices(machine, pod)) == 2


@pytest.mark.xfail(
    strict=True,
    reason="intended (docs/CONTROLLER.md): drasat gives a GPU in MIG mode whole only to a request "
    "that asks for MIG mode (a container cannot run CUDA on it otherwise); upstream allocates it "
    "whole to a plain claim while its counters are free",
)
@pytest.mark.parametrize("node", ["drasat", "nvidia"])
def test_known_a_whole_gpu_in_mig_mode_to_a_plain_claim(oracle: Oracle, node: str) -> None:
    a100 = dataclasses.replace(T4, product="A100-40GB", mig=True)
    spec = _drasat("n0", a100) if node == "drasat" else _nvidia("n0", "nv-a100")
    with _machine(oracle, spec) as machine:
        machine.known_differences = False
        machine.pod_arrives([_claim(claimgen.GPU if node == "drasat" else claimgen.NVIDIA_GPU)])
        machine.check()


def test_a_whole_gpu_in_mig_mode_to_a_request_that_asks_for_mig_mode(oracle: Oracle) -> None:
    # The other side of the difference above: asked for, the GPU goes whole, as upstream gives it,
    # and the stateful checks agree without the known differences applied.
    a100 = dataclasses.replace(T4, product="A100-40GB", mig=True)
    with _machine(oracle, _drasat("n0", a100)) as machine:
        machine.known_differences = False
        pod = machine.pod_arrives([_selected(ASKS_MIG_MODE)])
        machine.check()
        assert _devices(machine, pod) == ["n0/gpu-0"]


NIC = "nic.example.com"


def test_a_claim_with_a_gpu_and_another_drivers_device(oracle: Oracle) -> None:
    # drasat takes the claim for its GPU and places the NIC beside it, as upstream does (it
    # refused the claim, "DeviceClass not found", when it read only its own classes). Not in
    # the random sequences (no other driver's devices are generated): this case is the oracle's
    # check for it.
    with _machine(oracle, _drasat("n0", T4)) as machine:
        assert machine.cluster is not None
        nic_class = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": NIC},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NIC}"'}}]},
        }
        nic_slice = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"n0-{NIC}"},
            "spec": {
                "driver": NIC,
                "nodeName": "n0",
                "pool": {"name": "n0", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "eth0"}],
            },
        }
        machine.cluster.publish([nic_slice], [nic_class])
        machine.known_differences = False
        gpu_and_nic = _claim()
        gpu_and_nic["spec"]["devices"]["requests"].append(
            {"name": "nic", "exactly": {"deviceClassName": NIC, "allocationMode": "ExactCount",
                                        "count": 1}}
        )  # fmt: skip
        machine.pod_arrives([gpu_and_nic])
        machine.check()


@pytest.mark.xfail(
    strict=True,
    reason="drasat fails a claim on a node where a constraint refuses a device of its All "
    "firstAvailable entry, taking the node as free; upstream meets a device another claim holds "
    "first, which is no error, and tries the next entry",
)
def test_known_an_all_entry_behind_a_device_in_use(oracle: Oracle) -> None:
    gpus = [dataclasses.replace(T4, numa=n) for n in (0, None, 1)]
    with _machine(oracle, _drasat("n0", *gpus)) as machine:
        machine.known_differences = False
        numa0 = 'has(device.attributes["gpu.drasat.io"].numaNode) && ' + (
            'device.attributes["gpu.drasat.io"].numaNode == 0'
        )
        assert _devices(machine, machine.pod_arrives([_selected(numa0)])) == ["n0/gpu-0"]
        entries = [
            {"name": "s0", "deviceClassName": claimgen.GPU, "allocationMode": "All"},
            {"name": "s1", "deviceClassName": claimgen.GPU, "allocationMode": "ExactCount",
             "count": 1},
        ]  # fmt: skip
        constraint = {"matchAttribute": "gpu.drasat.io/numaNode"}
        either = {
            "requests": [{"name": "a", "firstAvailable": entries}],
            "constraints": [constraint],
        }
        machine.pod_arrives([{"spec": {"devices": either}}])
        machine.check()
