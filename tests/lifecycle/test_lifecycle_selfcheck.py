"""The lifecycle model's checks fail when they should: a controller that never places,
allocations over what a GPU has, a claim deallocated under its running pod, an eviction for a pod
of no higher priority, an eviction whose preemptor is never placed and an eviction a budget does
not allow are caught (a model whose
checks cannot fail proves nothing)."""

from __future__ import annotations

from collections.abc import Iterator

import lc_objects as objects
import pytest
from lc_machine import LifecycleMachine
from lc_world import NAMESPACE

from drasat.api.groups import NOMINATION_ANNOTATION
from drasat.controller.preemption import Preempter
from drasat.kube import resources as r
from drasat.v1.nominations import Nomination


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


def _evict_as_a_broken_controller(machine: LifecycleMachine, victim_priority: int,
                                  preemptor_priority: int) -> None:  # fmt: skip
    """A running pod, then a pending one for which the leader — stopped, so nothing places it
    afterwards — evicts the first and writes a nomination naming it, as the controller does."""
    machine.pod_of_new_claim("gpu", victim_priority)
    admin = machine.world.admin
    (victim,) = [p for p in admin.list(r.PODS, namespace=NAMESPACE).items
                 if p["spec"].get("nodeName")]  # fmt: skip
    machine.world.leader = 1
    machine.world.replicas[1].stop()
    machine.pod_of_new_claim("gpu", preemptor_priority)
    (preemptor,) = [p for p in admin.list(r.PODS, namespace=NAMESPACE).items
                    if not p["spec"].get("nodeName")]  # fmt: skip
    meta = preemptor["metadata"]
    nomination = Nomination(f"{NAMESPACE}/{meta['name']}", meta["uid"], victim["spec"]["nodeName"],
                            preemptor_priority, (f"{NAMESPACE}/{victim['metadata']['name']}",),
                            (), {}, "2026-01-01T00:00:00.000000Z")  # fmt: skip
    admin.patch(r.PODS, meta["name"],
                {"metadata": {"annotations": {NOMINATION_ANNOTATION: nomination.annotation()}}},
                namespace=NAMESPACE)  # fmt: skip
    admin.delete(r.PODS, victim["metadata"]["name"], namespace=NAMESPACE)
    machine.world.note_eviction(f"{NAMESPACE}/{victim['metadata']['name']}")
    machine.create_claim("cpu")


def test_an_eviction_for_a_pod_of_the_same_priority_is_caught_at_once(
    machine: LifecycleMachine,
) -> None:
    _evict_as_a_broken_controller(machine, 100, 100)
    assert "eviction-of-equal-or-higher-priority" in _kinds(machine)


def test_an_eviction_whose_preemptor_is_never_placed_is_caught(machine: LifecycleMachine) -> None:
    _evict_as_a_broken_controller(machine, 0, 1000)
    kinds = _kinds(machine)
    assert "preemptor-not-placed-after-eviction" in kinds
    assert "eviction-of-equal-or-higher-priority" not in kinds


def _full_of_low_priority_pods(machine: LifecycleMachine) -> None:
    """Every whole GPU of the model's nodes (five T4s) held by a pod of priority 0."""
    for _ in range(5):
        machine.pod_of_new_claim("gpu", 0)
    bound = [p for p in machine.world.admin.list(r.PODS, namespace=NAMESPACE).items
             if p["spec"].get("nodeName")]  # fmt: skip
    assert len(bound) == 5


def test_an_eviction_a_budget_does_not_allow_is_caught(
    machine: LifecycleMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _full_of_low_priority_pods(machine)
    machine.create_budget(5)  # no disruption allowed
    # A controller that chooses its victims without reading the budgets.
    monkeypatch.setattr(Preempter, "_budgets", lambda self, snapshot: {})
    machine.pod_of_new_claim("gpu", 1000)
    assert "eviction-refused-by-a-budget" in _kinds(machine)


def test_one_allowance_is_spent_once_by_two_preemptors_in_one_cycle(
    machine: LifecycleMachine,
) -> None:
    _full_of_low_priority_pods(machine)
    machine.create_budget(4)  # one disruption allowed
    for _ in range(2):
        machine._create_pod(claim=machine._create_claim("gpu"), priority=1000)
    machine._settle("two preemptors")
    assert len(machine.world.evictions) == 1
    assert not machine.world.budget_refusals
    assert not _kinds(machine) & {"eviction-refused-by-a-budget",
                                  "preemptor-not-placed-after-eviction"}  # fmt: skip
