"""The lifecycle model's checks fail when they should: a controller that never places,
allocations over what a GPU has, and a claim deallocated under its running pod are caught (a
model whose checks cannot fail proves nothing)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import lc_objects as objects
import pytest
from lc_machine import LifecycleMachine
from lc_world import NAMESPACE

from drasat.kube import resources as r

logging.getLogger("drasat").setLevel(logging.CRITICAL)


@pytest.fixture
def machine() -> Iterator[LifecycleMachine]:
    found = LifecycleMachine()
    yield found
    found.teardown()


def _kinds(machine: LifecycleMachine) -> set[str]:
    return {v.kind for v in machine.failures}


def test_a_controller_that_never_places_is_caught(machine: LifecycleMachine) -> None:
    machine.world.leader = 1
    machine.world.replicas[1].stop()  # the leader runs no cycle at all
    machine.pod_of_new_claim("gpu", 0)
    assert {"pod-not-placed", "refusal-without-reason"} <= _kinds(machine)


def _allocate_as_drasat(machine: LifecycleMachine, name: str, kind: str, device: str,
                        share: tuple[int, int] | None = None) -> None:  # fmt: skip
    """An allocation the model counts as drasat's (not recorded as another allocator's)."""
    admin = machine.world.admin
    admin.create(r.RESOURCE_CLAIMS_V1, objects.claim(name, kind), namespace=NAMESPACE)
    claim = admin.get(r.RESOURCE_CLAIMS_V1, name, namespace=NAMESPACE)
    assert machine.world.write_allocation(claim, "n1", device, share=share)
    machine.world.foreign.pop(claim["metadata"]["uid"])


def test_a_gpu_held_twice_is_caught_at_once(machine: LifecycleMachine) -> None:
    _allocate_as_drasat(machine, "a", "gpu", "gpu-0")
    _allocate_as_drasat(machine, "b", "gpu", "gpu-0")
    machine.world.leader = 1
    machine.world.replicas[1].stop()
    machine.create_claim("cpu")
    assert "device-held-twice" in _kinds(machine)


def test_shares_beyond_a_gpus_memory_are_caught_at_once(machine: LifecycleMachine) -> None:
    _allocate_as_drasat(machine, "a", "share-10g", "gpu-0", share=(10 * 2**30, 40))
    _allocate_as_drasat(machine, "b", "share-10g", "gpu-0", share=(10 * 2**30, 40))
    machine.world.leader = 1
    machine.world.replicas[1].stop()
    machine.create_claim("cpu")
    assert "shares-over-capacity" in _kinds(machine)


def test_a_claim_deallocated_under_its_running_pod_is_caught_at_once(
    machine: LifecycleMachine,
) -> None:
    machine.pod_of_new_claim("gpu", 0)
    admin = machine.world.admin
    (claim,) = [c for c in admin.list(r.RESOURCE_CLAIMS_V1, namespace=NAMESPACE).items
                if (c.get("status") or {}).get("allocation")]  # fmt: skip
    admin.replace_status(r.RESOURCE_CLAIMS_V1, {**claim, "status": {}})
    machine.world.leader = 1
    machine.world.replicas[1].stop()  # nobody allocates it again
    machine.create_claim("cpu")
    assert "claim-deallocated-under-its-pod" in _kinds(machine)
