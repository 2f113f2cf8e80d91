"""The lifecycle model's checks fail when they should: a controller that never places,
allocations over what a GPU has, a claim deallocated under its running pod, an eviction for a pod
of no higher priority, an eviction whose preemptor is never placed, an eviction a budget does
not allow, two nominations holding one GPU and a held GPU given to a lower-priority pod are
caught (a model whose checks cannot fail proves nothing); and two tenants on one
GPU are parted within the bound even where a budget allows no disruption (the repair deletes)."""

from __future__ import annotations

from collections.abc import Iterator

import lc_objects as objects
import lc_truth as truth
import pytest
from lc_machine import LifecycleMachine
from lc_world import NAMESPACE

from drasat.api.groups import NOMINATION_ANNOTATION
from drasat.api.nas import AllocatedDevices, AllocatedGpu, AllocatedGpus, ClaimInfo
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


def test_two_tenants_on_one_gpu_are_parted_though_a_budget_allows_no_disruption(
    machine: LifecycleMachine,
) -> None:
    """Another allocator's claim written onto a GPU that drasat's running pod holds, in use by a
    pod of its own on that node: the repair deletes the pod of the claim that gives way within
    the bound although a budget allows no disruption (an eviction would be refused for ever,
    two tenants left on one GPU), and asks for no eviction."""
    _full_of_low_priority_pods(machine)
    admin = machine.world.admin
    (held,) = [c for c in admin.list(r.RESOURCE_CLAIMS_V1, namespace=NAMESPACE).items
               if c["metadata"]["name"] == sorted(machine.claims)[0]]  # fmt: skip
    (result,) = held["status"]["allocation"]["devices"]["results"]
    (tenant,) = [p for p in admin.list(r.PODS, namespace=NAMESPACE).items
                 if p["spec"]["resourceClaims"][0].get("resourceClaimName")
                 == held["metadata"]["name"]]  # fmt: skip
    name = machine._create_claim("gpu")
    body = objects.pod("intruder", claim=name)
    body["spec"].pop("schedulingGates")
    body["spec"]["nodeName"] = result["pool"]
    intruder = admin.create(r.PODS, body, namespace=NAMESPACE)
    claim = admin.get(r.RESOURCE_CLAIMS_V1, name, namespace=NAMESPACE)
    assert machine.world.write_allocation(claim, result["pool"], result["device"])
    claim = admin.get(r.RESOURCE_CLAIMS_V1, name, namespace=NAMESPACE)
    claim["status"]["reservedFor"] = [
        {"resource": "pods", "name": "intruder", "uid": intruder["metadata"]["uid"]}
    ]
    admin.replace_status(r.RESOURCE_CLAIMS_V1, claim)
    machine.world.set_phase(intruder, (tenant.get("status") or {}).get("phase") or "Pending")
    machine.create_budget(6)  # six pods bound, at least six: no disruption allowed
    pods = {p["metadata"]["name"] for p in admin.list(r.PODS, namespace=NAMESPACE).items}
    assert "intruder" not in pods and tenant["metadata"]["name"] in pods
    assert not machine.world.budget_refusals and not machine.world.evictions
    assert not _kinds(machine)


def _nominate_as_a_broken_controller(machine: LifecycleMachine, pod: dict, gpu: str,
                                     freed: tuple[str, ...] = ()) -> None:  # fmt: skip
    """Write a nomination on `pod` holding `gpu` (a GPU of n1, whole) for its claim, as the
    controller writes one (the annotation, then `status.nominatedNodeName`, without which the
    annotation is not believed); `freed`: the claims it waits for (while any is allocated, it
    keeps its hold)."""
    meta = pod["metadata"]
    (found,) = [g for g in machine.world.gpus["n1"] if f"gpu-{g.minor}" == gpu]
    claims = {c["metadata"]["name"]: c for c in machine._claim_objects()}
    (own,) = [claims[n] for n in truth.claim_names(pod) if n]
    entry = AllocatedDevices(
        claimInfo=ClaimInfo(namespace=NAMESPACE, name=own["metadata"]["name"],
                            uid=str(own["metadata"]["uid"])),
        gpu=AllocatedGpus(devices=[AllocatedGpu(uuid=found.uuid)]),
    )  # fmt: skip
    nomination = Nomination(f"{NAMESPACE}/{meta['name']}", meta["uid"], "n1",
                            int(pod["spec"].get("priority") or 0), (), freed,
                            {"n1": {f"nominated:{meta['name']}": entry}},
                            "2026-01-01T00:00:00.000000Z")  # fmt: skip
    machine.world.admin.patch(
        r.PODS, meta["name"],
        {"metadata": {"annotations": {NOMINATION_ANNOTATION: nomination.annotation()}}},
        namespace=NAMESPACE,
    )  # fmt: skip
    machine.world.admin.patch(r.PODS, meta["name"], {"status": {"nominatedNodeName": "n1"}},
                              namespace=NAMESPACE, subresource="status")  # fmt: skip


def _pending_pods(machine: LifecycleMachine) -> list[dict]:
    return [p for p in machine.world.admin.list(r.PODS, namespace=NAMESPACE).items
            if not p["spec"].get("nodeName")]  # fmt: skip


def test_two_nominations_holding_one_device_are_caught_at_once(
    machine: LifecycleMachine,
) -> None:
    """Two preemptors of one priority counting on the same GPU (what a controller that plans
    each preemptor alone writes)."""
    machine.world.leader = 1
    machine.world.replicas[1].stop()
    for _ in range(2):
        machine._create_pod(claim=machine._create_claim("gpu2"), priority=1000)
    for pod in _pending_pods(machine):
        _nominate_as_a_broken_controller(machine, pod, "gpu-0")
    machine.create_claim("cpu")
    assert "nominations-overlap" in _kinds(machine)


@pytest.mark.parametrize("broken", [True, False])
def test_a_held_device_given_to_a_lower_priority_pod_is_caught_at_once(
    machine: LifecycleMachine, monkeypatch: pytest.MonkeyPatch, broken: bool
) -> None:
    """A controller that places pods without the devices held for nominated preemptors: a pod of
    priority 0 gets the GPU a priority-1000 preemptor's nomination holds. The same steps with the
    real controller keep the GPU for it."""
    _full_of_low_priority_pods(machine)
    admin = machine.world.admin
    on_n1 = sorted(
        (p for p in admin.list(r.PODS, namespace=NAMESPACE).items if p["spec"]["nodeName"] == "n1"),
        key=lambda p: p["metadata"]["name"],
    )
    claims = {c["metadata"]["name"]: c for c in machine._claim_objects()}
    victim, other = on_n1
    (held,) = [claims[n] for n in truth.claim_names(victim) if n]
    (kept,) = [claims[n] for n in truth.claim_names(other) if n]
    gpu = held["status"]["allocation"]["devices"]["results"][0]["device"]
    # The preemptor asks for two GPUs on one node: it does not fit while the other T4 of n1 is
    # held (its nomination waits for that claim), so the GPU its victim frees stays free.
    machine._create_pod(claim=machine._create_claim("gpu2"), priority=1000)
    (preemptor,) = _pending_pods(machine)
    _nominate_as_a_broken_controller(machine, preemptor, gpu,
                                     freed=(kept["metadata"]["uid"],))  # fmt: skip
    admin.delete(r.PODS, victim["metadata"]["name"], namespace=NAMESPACE)
    machine.world.note_eviction(f"{NAMESPACE}/{victim['metadata']['name']}")
    if broken:
        monkeypatch.setattr(Preempter, "holds", lambda self, snapshot: [])
    machine._settle("the victim leaves")
    machine.pod_of_new_claim("gpu", 0)
    assert ("nominated-device-given-away" in _kinds(machine)) == broken
