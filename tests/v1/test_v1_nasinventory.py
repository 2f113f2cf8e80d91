"""drasat.v1.nasinventory: a NAS's allocatableDevices as the solver's node model and back, with
nothing lost either way, and the NodeState's one record of a node's devices."""

from __future__ import annotations

import dataclasses

import pytest
from checker import gpu_claim, make_gpus, make_node, mig_entries, pod

from drasat.api.nas import AllocatableDevice, Health, NodeAllocationStateSpec
from drasat.solver import Mode, Problem, SolveParams, solve
from drasat.solver.ledger import Ledger
from drasat.v1 import nasinventory


def _spec(product: str, *, mig: bool) -> NodeAllocationStateSpec:
    gpus = make_gpus("n", product, 3, mig=mig, numa=[0, 0, 1], nvlink=True)
    gpus[2] = gpus[2].model_copy(update={"health": Health.Unhealthy, "pciBusID": "0000:3b:00.0"})
    devices = [AllocatableDevice(gpu=g) for g in gpus]
    if mig:
        entries = mig_entries(product)
        entries[0] = entries[0].model_copy(
            update={"giProfileId": 19, "memoryBytes": 5 * 2**30, "computeSlices": 1}
        )
        devices += [AllocatableDevice(mig=m) for m in entries]
    return NodeAllocationStateSpec(allocatableDevices=devices)


@pytest.mark.parametrize(("product", "mig"), [("T4", False), ("A100-40GB", True)])
def test_a_nas_inventory_reads_into_the_solvers_devices_and_back_unchanged(
    product: str, mig: bool
) -> None:
    spec = _spec(product, mig=mig)
    devices = nasinventory.devices_of(spec)
    assert [g.uuid for g in devices.gpus] == [g.uuid for g in spec.gpus()]
    assert [g.healthy for g in devices.gpus] == [True, True, False]
    assert devices.gpus[0].nvlinkPeers == tuple(spec.gpus()[0].nvlinkPeers or ())
    assert len(devices.mig_profiles) == len(spec.mig_profiles())
    assert nasinventory.allocatable_of(devices) == spec.allocatableDevices
    assert nasinventory.devices_of(nasinventory.nas_spec(devices)) == devices


def test_a_node_state_holds_its_devices_and_its_ledger_in_the_solvers_terms() -> None:
    spec = _spec("T4", mig=False)
    state = nasinventory.node_state("n", spec, ready=False, unready_reason="why")
    assert len(state.devices.gpus) == 3 and state.ledger == Ledger()
    assert (state.ready, state.unready_reason) == (False, "why")


def test_the_solver_reads_the_devices_not_the_nas() -> None:
    # The same node with its one healthy T4 taken out of its devices: nothing is placed.
    node = make_node("n1", "T4")
    emptied = dataclasses.replace(node, devices=dataclasses.replace(node.devices, gpus=()))
    params = SolveParams(mode=Mode.online)
    problem = Problem(nodes=(node,), pods=(pod("p", gpu_claim("c")),))
    assert [p.node for p in solve(problem, params).placements] == ["n1"]
    problem = Problem(nodes=(emptied,), pods=(pod("p", gpu_claim("c")),))
    assert solve(problem, params).placements == ()
