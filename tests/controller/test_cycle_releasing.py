"""What the ledger's settle decides, as pure functions of the snapshot and this process's memory
of its writes (`drasat.controller.cycle.releasing`): which ledger entries are stale, which claims
are leaving, whether a pod still holds a leaving claim, and which entries a release removes.
The writes themselves are tested through the cycle (test_v1controller.py, _trust.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from checker import make_node
from test_v1inputs import OURS, claim, exactly, on_node, parsed_nas, result, snapshot

from drasat.api.groups import FINALIZER, SCHEDULING_GATE
from drasat.api.nas import AllocatedDevices, AllocatedGpu, AllocatedGpus, ClaimInfo
from drasat.controller import nasnodes
from drasat.controller.cycle import releasing
from drasat.controller.cycle.ownwrites import WrittenClaim

Obj = dict[str, Any]


def _entry(uid: str, gpu: str = "GPU-0") -> AllocatedDevices:
    return AllocatedDevices(
        claimInfo=ClaimInfo(namespace="default", name=uid, uid=uid),
        gpu=AllocatedGpus(devices=[AllocatedGpu(uuid=gpu)]),
    )


def _allocated(
    name: str, node: str = "a", driver: str = "gpu.drasat.io", version: str = "5"
) -> Obj:
    found = claim(name, exactly(), allocation=on_node(node, result("gpu-0", node, driver=driver)))
    found["metadata"]["resourceVersion"] = version
    return found


def _written(node: str = "a", version: str = "7") -> WrittenClaim:
    return WrittenClaim(node=node, version=version)


# -- holds: a ledger entry is kept while its claim holds it --------------------------------------


@pytest.mark.parametrize(
    ("found", "written", "held"),
    [
        # Guards: an entry of a claim that is gone is released.
        (None, None, False),
        (None, _written(), False),
        # Guards: a claim allocated on the entry's node with drasat's driver keeps it.
        (_allocated("c"), None, True),
        # Guards: a claim allocated elsewhere (given back, allocated again) frees this node's.
        (_allocated("c", node="b"), None, False),
        # Guards: a claim whose status names another driver only is not drasat's to hold.
        (_allocated("c", driver="other.example.com"), None, False),
        # Guards: a claim the scheduler gave back (no allocation) frees it.
        (claim("c", exactly(), resourceVersion="5"), None, False),
        # Guards: our own status write the cache has not seen yet holds, allocated or not.
        ({**claim("c", exactly()), "metadata": {**claim("c")["metadata"], "resourceVersion": "5"}},
         _written(version="7"), True),
        # Guards: once the cache has seen a newer version, the status decides again.
        ({**claim("c", exactly()), "metadata": {**claim("c")["metadata"], "resourceVersion": "8"}},
         _written(version="7"), False),
        # Guards: our write on another node does not hold this node's entry.
        ({**claim("c", exactly()), "metadata": {**claim("c")["metadata"], "resourceVersion": "5"}},
         _written(node="b", version="7"), False),
    ],
)  # fmt: skip
def test_an_entry_is_held_while_its_claim_is_allocated_there_or_our_write_is_unseen(
    found: Obj | None, written: WrittenClaim | None, held: bool
) -> None:
    assert releasing.holds(found, written, "a") is held


def test_stale_entries_are_those_no_claim_holds_in_the_ledgers_order() -> None:
    ledger = {
        "gone/gpu": _entry("gone"),
        "kept/gpu": _entry("kept"),
        "moved/gpu": _entry("moved"),
        "mine/gpu": _entry("mine"),
    }
    by_uid = {
        "kept": _allocated("kept"),
        "moved": _allocated("moved", node="b"),
        "mine": {"metadata": {"name": "mine", "namespace": "default", "resourceVersion": "1"}},
    }
    found = releasing.stale_entries(ledger, "a", by_uid, {"mine": _written(version="2")})
    assert list(found.items()) == [("gone/gpu", "gone"), ("moved/gpu", "moved")]


def test_a_stale_entry_of_a_claim_to_allocate_is_solved_as_a_hold_not_as_its_allocation() -> None:
    """The solver takes a claim with a ledger entry on a node as allocated there: a stale one
    (its status write failed after the ledger write) of a claim the cycle allocates is kept as a
    hold of its devices. Our write the cache has not seen stays the claim's entry; a stale entry
    of a claim not allocated now is the settle's, left as it is."""
    pending = claim("pending", exactly(), uid="pending")
    mine = claim("mine", exactly(), uid="mine")
    mine["metadata"]["resourceVersion"] = "1"
    ledger = {
        "pending/gpu": _entry("pending"),
        "mine/gpu": _entry("mine", "GPU-1"),
        "gone/gpu": _entry("gone"),
    }
    base = snapshot([], [pending, mine])
    nas = {"a": parsed_nas(make_node("a", "T4", 2, allocated=ledger))}
    found = releasing.stale_entries_as_holds(
        dataclasses.replace(base, nas=nas), [pending, mine], {"mine": _written(version="2")}
    )
    claims = found.nas["a"].entries
    assert list(claims) == [nasnodes.HELD_PREFIX + "pending/gpu", "mine/gpu", "gone/gpu"]
    assert claims[nasnodes.HELD_PREFIX + "pending/gpu"] == ledger["pending/gpu"]
    # The solver's ledger holds the same, the stale entry as a hold.
    assert list(found.nas["a"].node.ledger.allocated) == list(claims)
    # A claim not allocated this cycle keeps its stale entry for the settle to remove.
    alone = releasing.stale_entries_as_holds(dataclasses.replace(base, nas=nas), [pending], {})
    assert list(alone.nas["a"].entries) == list(claims)
    assert list(alone.nas["a"].node.ledger.allocated) == list(claims)


# -- which claims leave, and whether a pod still holds one ----------------------------------------


def _deleted(found: Obj, *finalizers: str) -> Obj:
    meta = {**found["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}
    return {**found, "metadata": {**meta, "finalizers": list(finalizers)}}


def test_a_claim_leaves_when_it_is_being_deleted_with_our_finalizer() -> None:
    ours = _deleted(_allocated("ours"), FINALIZER)
    no_finalizer = _deleted(_allocated("bare"))
    not_deleted = {**_allocated("live"), "metadata": {**_allocated("live")["metadata"],
                                                       "finalizers": [FINALIZER]}}  # fmt: skip
    # A claim whose DeviceClass is gone is still ours by its finalizer.
    orphan = _deleted(claim("orphan", exactly("deleted-class")), FINALIZER)
    other = _deleted(claim("other", exactly("other-gpu")), "example.com/keep")
    found = releasing.claims_leaving([ours, no_finalizer, not_deleted, orphan, other], OURS)
    assert [c["metadata"]["name"] for c in found] == ["ours", "orphan"]


def _reserved(*refs: Obj) -> Obj:
    return {**claim("c"), "status": {"reservedFor": list(refs)}}


def _pod(uid: str, phase: str = "Running", name: str = "p") -> Obj:
    return {"metadata": {"name": name, "namespace": "default", "uid": uid},
            "status": {"phase": phase}}  # fmt: skip


def _nobody(namespace: str, name: str) -> Obj | None:
    return None


POD_REF = {"resource": "pods", "name": "p", "uid": "u1"}


@pytest.mark.parametrize(
    ("found", "pods", "look_up", "held"),
    [
        # Guards: no reservation holds nothing.
        (_reserved(), {}, _nobody, False),
        # Guards: a running pod of the cache holds it.
        (_reserved(POD_REF), {"u1": _pod("u1")}, _nobody, True),
        # Guards: a finished pod holds nothing (the resourceclaim controller would clear it).
        (_reserved(POD_REF), {"u1": _pod("u1", "Succeeded")}, _nobody, False),
        # Guards: a pod the cache does not know is looked up; gone, it holds nothing.
        (_reserved(POD_REF), {}, _nobody, False),
        # Guards: looked up and running, it holds it (it may be newer than the cache).
        (_reserved(POD_REF), {}, lambda ns, name: _pod("u1"), True),
        # Guards: a pod of that name with another uid is another pod.
        (_reserved(POD_REF), {}, lambda ns, name: _pod("u2"), False),
        # Guards: another kind of consumer: only its owner knows, so it holds.
        (_reserved({"resource": "jobs", "apiGroup": "batch", "name": "j", "uid": "j1"}), {},
         _nobody, True),
    ],
)  # fmt: skip
def test_a_leaving_claim_is_held_only_by_a_live_pod_or_a_consumer_of_another_kind(
    found: Obj, pods: dict[str, Obj], look_up: Any, held: bool
) -> None:
    assert releasing.still_reserved(found, pods, look_up) is held


def test_a_lookup_asks_for_the_reserved_pods_name_in_the_claims_namespace() -> None:
    asked: list[tuple[str, str]] = []

    def look_up(namespace: str, name: str) -> Obj | None:
        asked.append((namespace, name))
        return None

    releasing.still_reserved(_reserved(POD_REF), {}, look_up)
    assert asked == [("default", "p")]


def test_a_release_removes_the_claims_entries_on_the_nodes_with_a_nas_only() -> None:
    base = snapshot([], [])
    ledger = {"x/gpu": _entry("x"), "x/mig": _entry("x"), "y/gpu": _entry("y")}
    nas = {
        "a": parsed_nas(make_node("a", "T4", 2, allocated=ledger)),
        "b": parsed_nas(make_node("b", "T4", 2, allocated={"z/gpu": _entry("z")})),
        # A node whose ledger is the claims' statuses: nothing to remove there.
        "n": dataclasses.replace(
            parsed_nas(make_node("n", "T4", 1, allocated={"x/gpu": _entry("x")})),
            from_statuses=True,
        ),
    }
    found = releasing.ledger_keys(dataclasses.replace(base, nas=nas), {"x", "z"})
    assert found == {"a": {"x/gpu", "x/mig"}, "b": {"z/gpu"}}


def test_a_pod_the_informer_saw_deleted_is_not_looked_up() -> None:
    asked: list[str] = []

    def look_up(namespace: str, name: str) -> Obj | None:
        asked.append(name)
        return _pod("u1")  # what a stale answer would say

    assert not releasing.still_reserved(_reserved(POD_REF), {}, look_up, gone={"u1"})
    assert asked == []


# -- which claims drasat deallocates, and when a claim is used -----------------------------------


def _ours(found: Obj) -> Obj:
    return {**found, "metadata": {**found["metadata"], "finalizers": [FINALIZER]}}


@pytest.mark.parametrize(
    ("found", "deallocates"),
    [
        # Guards: drasat's allocation says so by our finalizer.
        (_ours(_allocated("c")), True),
        # Guards: being deleted, it is released, not deallocated.
        (_deleted(_allocated("c"), FINALIZER), False),
        # Guards: not allocated: nothing to give back.
        (_ours(claim("c", exactly())), False),
        # Guards: drasat's driver without our finalizer: another writer's allocation.
        (_allocated("c"), False),
        # Guards: another driver's claim of a class drasat allocates (NVIDIA's: no finalizer).
        (_allocated("c", driver="gpu.nvidia.com"), True),
    ],
)  # fmt: skip
def test_drasat_deallocates_what_it_allocated(found: Obj, deallocates: bool) -> None:
    assert releasing.deallocates(found, OURS) is deallocates


def _node_obj(name: str, **spec: Any) -> Obj:
    return {"metadata": {"name": name, "labels": {"zone": "z1"}}, "spec": spec}


def _user(phase: str = "Pending", node: str | None = None, **spec: Any) -> Obj:
    found = _pod("u9", phase, name="user")
    if node:
        spec["nodeName"] = node
    return {**found, "spec": spec}


NODES = {"a": _node_obj("a")}


@pytest.mark.parametrize(
    ("users", "nodes", "used"),
    [
        # Guards: no pod names it: unused.
        ([], NODES, False),
        # Guards: a pending pod that can go where it is allocated keeps it (the scheduler has
        # not reserved it yet).
        ([_user()], NODES, True),
        # Guards: a bound pod keeps it (the resourceclaim controller reserves it soon).
        ([_user("Running", node="a")], {}, True),
        # Guards: a pending pod that may not go there (the node cordoned, deleted, unselected)
        # does not keep it: it is allocated again where the pod can go.
        ([_user()], {"a": _node_obj("a", unschedulable=True)}, False),
        ([_user()], {}, False),
        ([_user(nodeSelector={"zone": "z2"})], NODES, False),
        # Guards: a pod that tolerates the cordon may still go there.
        ([_user(tolerations=[{"key": "node.kubernetes.io/unschedulable",
                              "operator": "Exists"}])], {"a": _node_obj("a", unschedulable=True)},
         True),
    ],
)  # fmt: skip
def test_a_claim_is_used_by_a_live_reservation_a_bound_pod_or_a_pod_that_can_go_there(
    users: list[Obj], nodes: dict[str, Obj], used: bool
) -> None:
    found = _ours(_allocated("c"))
    assert releasing.unused(found, users, nodes, {}, _nobody) is not used
    # A live reservation keeps it whoever names it.
    running = _pod("u1")
    reserved = {**found, "status": {**found["status"], "reservedFor": [POD_REF]}}
    assert not releasing.unused(reserved, users, nodes, {"u1": running}, _nobody)


def test_a_pending_pod_that_cannot_be_placed_with_the_claim_or_run_now_does_not_keep_it() -> None:
    """A pod drasat's allocation refused (it may only go where the claim is) or another owner's
    gate holds (Kueue's) keeps no claim nobody reserves; another pending pod that can go there
    still does, and so does a bound pod, refused or not."""
    found = _ours(_allocated("c"))
    refused = _user()
    key = f"{refused['metadata']['namespace']}/{refused['metadata']['name']}"
    gated = _user(schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    ours = _user(schedulingGates=[{"name": SCHEDULING_GATE}])
    assert releasing.unused(found, [refused], NODES, {}, _nobody, refused={key})
    assert not releasing.unused(found, [refused], NODES, {}, _nobody)
    assert releasing.unused(found, [gated], NODES, {}, _nobody)
    assert not releasing.unused(found, [ours], NODES, {}, _nobody)
    other = {**_user(), "metadata": {**refused["metadata"], "name": "other", "uid": "u8"}}
    assert not releasing.unused(found, [refused, other], NODES, {}, _nobody, refused={key})
    bound = _user("Running", node="a")
    assert not releasing.unused(found, [bound], NODES, {}, _nobody, refused={key})
    reserved = {**found, "status": {**found["status"], "reservedFor": [POD_REF]}}
    assert not releasing.unused(reserved, [refused], NODES, {"u1": _pod("u1")}, _nobody,
                                refused={key})  # fmt: skip


def test_the_users_of_a_claim_are_the_pods_not_done_that_name_it() -> None:
    def named(name: str, phase: str, **status: Any) -> Obj:
        return {
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"resourceClaims": [{"name": "g", "resourceClaimName": "c"},
                                        {"name": "t", "resourceClaimTemplateName": "tpl"}]},
            "status": {"phase": phase, **status},
        }  # fmt: skip

    made = {"resourceClaimStatuses": [{"name": "t", "resourceClaimName": "made"}],
            "extendedResourceClaimStatus": {"resourceClaimName": "ext"}}  # fmt: skip
    found = releasing.claim_users([named("a", "Running", **made), named("b", "Succeeded")])
    assert {k: [p["metadata"]["name"] for p in v] for k, v in found.items()} == {
        "default/c": ["a"], "default/made": ["a"], "default/ext": ["a"]}  # fmt: skip


@pytest.mark.parametrize(
    ("found", "named", "held", "unneeded"),
    [
        # Guards: given back, named by no pod, no ledger entry: the finalizer goes.
        (_ours(claim("c", exactly())), False, False, True),
        # Guards: a pod names it: allocated again soon, the finalizer stays.
        (_ours(claim("c", exactly())), True, False, False),
        # Guards: a ledger entry still holds it: the finalizer keeps the claim until it goes.
        (_ours(claim("c", exactly())), False, True, False),
        # Guards: allocated, or being deleted (released instead), or not ours: left alone.
        (_ours(_allocated("c")), False, False, False),
        (_deleted(claim("c", exactly()), FINALIZER), False, False, False),
        (claim("c", exactly()), False, False, False),
    ],
)  # fmt: skip
def test_our_finalizer_goes_once_nothing_needs_it(
    found: Obj, named: bool, held: bool, unneeded: bool
) -> None:
    users = {releasing.v1inputs.claim_ref(found): [_pod("u1")]} if named else {}
    uid = str(found["metadata"].get("uid"))
    assert releasing.finalizer_unneeded(found, users, {uid} if held else set()) is unneeded
