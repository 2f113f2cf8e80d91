"""The defects the lifecycle model found, each as a small explicit sequence on the model's
cluster (`lc_world.World`: the real controller, the simulated API server, scheduler,
controller-manager and kubelets). An open one is expected to fail until its fix lands: the
engineer fixing one flips its `xfail` (strict, so a fix that makes it pass is noticed) and
removes the matching line of `KNOWN_DEFECTS` in test_lifecycle_model.py. Those without a mark
are fixed and stay as regression tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lc_objects as objects
import lc_truth as truth
import pytest
from lc_api import Fault, ModelApi
from lc_world import NAMESPACE, World

from drasat.api.groups import GANG_LABEL, GANG_SIZE_LABEL
from drasat.kube import resources as r

Obj = dict[str, Any]
#: Rounds each actor gets after a change (the model's bound on an obligation).
BOUND = 8


def _claim(world: World, name: str, kind: str) -> None:
    world.admin.create(r.RESOURCE_CLAIMS_V1, objects.claim(name, kind), namespace=NAMESPACE)


def _pod(world: World, name: str, **kw: Any) -> None:
    world.admin.create(r.PODS, objects.pod(name, **kw), namespace=NAMESPACE)


def _get(world: World, resource: r.Resource, name: str) -> Obj:
    return world.admin.get(resource, name, namespace=NAMESPACE)


def _problems(world: World) -> list[truth.Problem]:
    claims = world.admin.list(r.RESOURCE_CLAIMS_V1, namespace=NAMESPACE).items
    held, _ = truth.holdings(claims, world.gpus, world.foreign)
    return truth.problems(held, world.gpus)


def _run(world: World, rounds: int = BOUND) -> None:
    for _ in range(rounds):
        world.round()


def test_a_standalone_claim_is_given_back_when_its_last_pod_goes(
    cluster: Callable[..., World],
) -> None:
    world = cluster(n1="t4x1")
    _claim(world, "shared", "gpu")
    _pod(world, "a", claim="shared")
    _run(world, 3)
    assert truth.results_of(_get(world, r.RESOURCE_CLAIMS_V1, "shared"))
    world.admin.delete(r.PODS, "a", namespace=NAMESPACE)
    _run(world)
    assert not truth.results_of(_get(world, r.RESOURCE_CLAIMS_V1, "shared")), (
        "the claim still holds its GPU with no pod using it"
    )


def test_a_mig_mode_gpu_is_never_given_whole(cluster: Callable[..., World]) -> None:
    world = cluster(n1="a100mig")
    _claim(world, "one-gpu", "gpu")
    _pod(world, "a", claim="one-gpu")
    _run(world, 3)
    assert not _problems(world)


def test_two_allocators_deciding_at_once_leave_no_gpu_held_twice(
    cluster: Callable[..., World],
) -> None:
    """drasat's cycle and kube-scheduler's allocator (for a claim tolerating every taint)
    decide in the same round over one free T4: both take it, both pods run."""
    world = cluster(n1="t4x1")
    _claim(world, "drasats", "gpu")
    _claim(world, "schedulers", "tolerates-all")
    _pod(world, "a", claim="drasats")
    _pod(world, "b", claim="schedulers")
    _run(world, 2)
    _run(world)
    assert not _problems(world)


def test_shares_written_beyond_a_gpus_memory_are_repaired(cluster: Callable[..., World]) -> None:
    """An admin writes a 10 GiB share onto the T4 where drasat gave a 10 GiB share: 20 of
    15 GiB, both pods running."""
    world = cluster(n1="t4x1")
    _claim(world, "first", "share-10g")
    _pod(world, "a", claim="first")
    _run(world, 3)
    _claim(world, "second", "share-10g")
    world.write_allocation(
        _get(world, r.RESOURCE_CLAIMS_V1, "second"), "n1", "gpu-0", share=(10 * 2**30, 40)
    )
    _pod(world, "b", claim="second")
    _run(world)
    assert not _problems(world)


def test_a_429_looking_up_a_departed_pod_does_not_abort_the_cycle(
    cluster: Callable[..., World],
) -> None:
    """A claim being deleted is reserved for a pod the cache no longer has: the controller
    looks the pod up, and that lookup answers 429."""
    world = cluster(n1="t4x1")
    _claim(world, "leaving", "gpu")
    _pod(world, "a", claim="leaving")
    _run(world, 3)
    world.admin.delete(r.RESOURCE_CLAIMS_V1, "leaving", namespace=NAMESPACE)
    _run(world, 1)
    world.faults.arm(Fault("get", "pods", 429, times=1000, rounds=1))
    world.admin.delete(r.PODS, "a", namespace=NAMESPACE)
    _run(world, 1)
    assert not world.aborts


def test_a_gang_whose_write_fails_in_part_gives_the_written_pods_gpus_back(
    cluster: Callable[..., World],
) -> None:
    """Every status write of one gang member's claim is refused (a 500 each time); the members
    written beside it must not keep their GPUs while the gang cannot be whole."""
    world = cluster(n1="t4x2", n2="t4x2")
    world.admin.create(
        r.RESOURCE_CLAIM_TEMPLATES_V1, objects.template("member", "gpu"), namespace=NAMESPACE
    )
    labels = {GANG_LABEL: "g", GANG_SIZE_LABEL: "3"}
    for name in ("m1", "m2", "m3"):
        _pod(world, name, template="member", labels=labels)
    _run(world, 1)  # the resourceclaim controller makes the members' claims
    first = truth.claim_names(_get(world, r.PODS, "m1"))[0]
    assert first is not None
    world.faults.arm(Fault("replace_status", "resourceclaims", 500, name=first, times=10**6,
                           rounds=10**6))  # fmt: skip
    _run(world)
    claims = world.admin.list(r.RESOURCE_CLAIMS_V1, namespace=NAMESPACE).items
    allocated = [truth.claim_ref(c) for c in claims if truth.results_of(c)]
    assert not allocated or len(allocated) == 3, f"only {allocated} of the gang allocated"


def test_a_preemptor_evicting_every_pod_of_a_standalone_claim_gets_its_gpus(
    cluster: Callable[..., World],
) -> None:
    """Two T4s: one held by a standalone claim of drasat's shared by two pods, one by a
    template's claim. A pod of priority 1000 asking for both evicts all three: drasat gives the
    standalone claim back once its pods left, so the preemptor gets both T4s."""
    world = cluster(n1="t4x2")
    _claim(world, "shared", "gpu")
    _pod(world, "a", claim="shared")
    _pod(world, "b", claim="shared")
    world.admin.create(
        r.RESOURCE_CLAIM_TEMPLATES_V1, objects.template("one", "gpu"), namespace=NAMESPACE
    )
    _pod(world, "c", template="one")
    _run(world, 3)
    _claim(world, "both", "gpu2")
    _pod(world, "urgent", claim="both", priority=1000)
    _run(world)
    assert sorted(pod for _, pod in world.evictions) == ["ml/a", "ml/b", "ml/c"]
    assert (_get(world, r.PODS, "urgent").get("status") or {}).get("phase") == "Running"
    assert len(truth.results_of(_get(world, r.RESOURCE_CLAIMS_V1, "both"))) == 2
    assert not truth.results_of(_get(world, r.RESOURCE_CLAIMS_V1, "shared"))


def test_a_preemptor_that_cannot_fit_once_its_victims_left_evicts_no_one(
    cluster: Callable[..., World],
) -> None:
    """As above, but an admin allocated the standalone claim (not drasat's: nobody gives it
    back). Evicting its pods would free nothing, so the preemptor, which needs both T4s, evicts
    no one (no T4 freed for a preemptor that never fits, idle while other pods wait)."""
    world = cluster(n1="t4x2")
    _claim(world, "shared", "gpu")
    assert world.write_allocation(_get(world, r.RESOURCE_CLAIMS_V1, "shared"), "n1", "gpu-0")
    _pod(world, "a", claim="shared")
    _pod(world, "b", claim="shared")
    world.admin.create(
        r.RESOURCE_CLAIM_TEMPLATES_V1, objects.template("one", "gpu"), namespace=NAMESPACE
    )
    _pod(world, "c", template="one")
    _run(world, 3)
    assert (_get(world, r.PODS, "c").get("status") or {}).get("phase") == "Running"
    _claim(world, "both", "gpu2")
    _pod(world, "urgent", claim="both", priority=1000)
    _run(world)
    assert world.evictions == []
    assert (_get(world, r.PODS, "c").get("status") or {}).get("phase") == "Running"


def test_a_deallocation_racing_the_scheduler_keeps_the_claim_it_reserved(
    cluster: Callable[..., World], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A standalone claim's last pod finished: the cycle deallocates it. Between its read and
    its write, a pod without drasat's gate (nothing holds it) names the claim and kube-scheduler
    reserves the allocated claim for it and binds it. The deallocation's write meets the
    reservation (409), reads the claim again and keeps it: the new pod runs on its devices."""
    world = cluster(n1="t4x1")
    _claim(world, "shared", "gpu")
    _pod(world, "a", claim="shared")
    _run(world, 3)
    uid = _get(world, r.RESOURCE_CLAIMS_V1, "shared")["metadata"]["uid"]
    raced: list[str] = []
    write = ModelApi.replace_status

    def racing(api: ModelApi, resource: r.Resource, body: Obj) -> Obj:
        deallocating = not (body.get("status") or {}).get("allocation")
        if deallocating and body["metadata"].get("uid") == uid and not raced:
            raced.append("b")
            late = objects.pod("b", claim="shared")
            del late["spec"]["schedulingGates"]
            world.admin.create(r.PODS, late, namespace=NAMESPACE)
            world.scheduler.run_once()
        return write(api, resource, body)

    monkeypatch.setattr(ModelApi, "replace_status", racing)
    world.set_phase(_get(world, r.PODS, "a"), "Succeeded")
    _run(world)
    assert raced, "the claim was never deallocated"
    assert _get(world, r.PODS, "b")["spec"].get("nodeName") == "n1"
    claim = _get(world, r.RESOURCE_CLAIMS_V1, "shared")
    assert truth.results_of(claim), "the claim was deallocated under the pod it is reserved for"
    assert (_get(world, r.PODS, "b").get("status") or {}).get("phase") == "Running"
    assert not _problems(world)


def test_a_gang_member_written_before_the_lease_was_lost_is_given_back(
    cluster: Callable[..., World], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader writes one member's claim of a gang of two and loses the lease before the
    other's (a crash between writes alike); every status write of the other member's claim is
    refused. The written member keeps drasat's gate, so kube-scheduler neither reserves its
    claim nor binds it, and the next leader gives its GPU back while the gang cannot be whole
    (found by seed 3 of the long run, where the simulated scheduler bound the gated pod)."""
    world = cluster(n1="t4x2")
    world.admin.create(
        r.RESOURCE_CLAIM_TEMPLATES_V1, objects.template("member", "gpu"), namespace=NAMESPACE
    )
    labels = {GANG_LABEL: "g", GANG_SIZE_LABEL: "2"}
    for name in ("m1", "m2"):
        _pod(world, name, template="member", labels=labels)
    _run(world, 1)  # the resourceclaim controller makes the members' claims
    first, second = (truth.claim_names(_get(world, r.PODS, m))[0] for m in ("m1", "m2"))
    assert first is not None and second is not None
    world.faults.arm(Fault("replace_status", "resourceclaims", 500, name=second, times=10**6,
                           rounds=10**6))  # fmt: skip
    write = ModelApi.replace_status

    def lease_lost_after_first(api: ModelApi, resource: r.Resource, body: Obj) -> Obj:
        written = write(api, resource, body)
        if body["metadata"]["name"] == first and (body.get("status") or {}).get("allocation"):
            world.replicas[world.leader].lease_left = 0
            world.next_leader = 1 - world.leader
        return written

    monkeypatch.setattr(ModelApi, "replace_status", lease_lost_after_first)
    _run(world, 1)
    monkeypatch.setattr(ModelApi, "replace_status", write)
    assert truth.results_of(_get(world, r.RESOURCE_CLAIMS_V1, first)), "m1 was never written"
    _run(world)
    assert not _get(world, r.PODS, "m1")["spec"].get("nodeName"), "a gated pod was bound"
    assert not truth.results_of(_get(world, r.RESOURCE_CLAIMS_V1, first)), (
        "m1 keeps its GPU while m2 cannot be allocated"
    )


def test_a_gang_member_whose_stale_ledger_entry_stayed_is_not_taken_as_allocated(
    cluster: Callable[..., World],
) -> None:
    """Every status write of one gang member's claim is refused (a 500 each time): its ledger
    entry, written before its status, is left for the next ledger settle to remove, and that
    settle's NAS write is refused once (a 429). The next solve must not count the entry as the
    claim's allocation, which placed the member with nothing to write and let the gang go with
    one member unallocated (found by seed 3 of the long run)."""
    world = cluster(n1="t4x2")
    world.admin.create(
        r.RESOURCE_CLAIM_TEMPLATES_V1, objects.template("member", "share-4g"), namespace=NAMESPACE
    )
    labels = {GANG_LABEL: "g", GANG_SIZE_LABEL: "3"}
    for name in ("m1", "m2", "m3"):
        _pod(world, name, template="member", labels=labels)
    _run(world, 1)  # the resourceclaim controller makes the members' claims
    third = truth.claim_names(_get(world, r.PODS, "m3"))[0]
    assert third is not None
    world.faults.arm(Fault("replace_status", "resourceclaims", 500, name=third, times=10**6,
                           rounds=10**6))  # fmt: skip
    _run(world, 1)
    world.faults.arm(Fault("replace", "nodeallocationstates", 429))
    _run(world)
    claims = world.admin.list(r.RESOURCE_CLAIMS_V1, namespace=NAMESPACE).items
    allocated = [truth.claim_ref(c) for c in claims if truth.results_of(c)]
    assert not allocated, f"only {allocated} of the gang allocated"
    for name in ("m1", "m2", "m3"):
        assert not _get(world, r.PODS, name)["spec"].get("nodeName"), f"{name} was bound"


def test_a_clash_whose_repair_met_a_conflict_is_repaired_once_the_write_goes_through(
    cluster: Callable[..., World],
) -> None:
    """Seed 5 of the long run: an admin writes an allocation onto the T4 a running pod's claim
    holds, for a claim whose status writes are refused (409) for a while. The repair gives that
    claim's allocation back, meets the conflict, and was never tried again once the writes went
    through: the conflict brought no change of the claim, so no settle looked at it again, and
    two claims held one GPU for good."""
    world = cluster(n1="t4x1")
    _claim(world, "held", "gpu")
    _pod(world, "a", claim="held")
    _run(world, 3)
    assert _get(world, r.PODS, "a")["status"]["phase"] == "Running"
    _claim(world, "admins", "gpu")
    world.faults.arm(Fault("replace_status", "resourceclaims", 409, name="admins", times=10**6,
                           rounds=4))  # fmt: skip
    assert world.write_allocation(_get(world, r.RESOURCE_CLAIMS_V1, "admins"), "n1", "gpu-0")
    _run(world, 4)
    assert _problems(world)  # the repair met the conflict every time
    _run(world)
    assert not _problems(world)
