"""One NAS entry per claim: a claim is allocated on one node, whatever the informers show.

A shared WaitForFirstConsumer claim used by two pods whose scheduling contexts select different
nodes, with the claim informer lagging behind the server; the same claim after a crash between
the NAS write and the status write; a claim another replica allocated while both our informers
lag; resync of a claim listed in a NAS its status does not name; and random interleavings of two
deciders' API calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial

import pytest
from ctl_cluster import NS
from ctl_deciders import DiesAt, Interleaver, Killed, Rig
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drasat.api.nas import AllocatedDevices
from drasat.classic.controller import Controller, Retry
from drasat.controller import allocation
from drasat.kube import nasclient
from drasat.kube import resources as r


def _try(ctl: Controller, pod: str) -> None:
    """One reconcile of the pod's scheduling context; a Retry is what the work queue would see."""
    with contextlib.suppress(Retry):
        ctl.reconcile_context(f"ns/{pod}")


def _shared(rig: Rig, *, finalizer: bool = True) -> str:
    """Claim `shared` used by pods p1 (selected node-a) and p2 (selected node-b)."""
    rig.claim("shared", finalizer=finalizer)
    rig.pod("p1", {"gpu": "shared"}, "node-a")
    rig.pod("p2", {"gpu": "shared"}, "node-b")
    return rig.uid("shared")


def test_lagging_claim_informer_does_not_put_a_shared_claim_into_a_second_nas() -> None:
    rig = Rig()
    uid = _shared(rig)
    ctl = rig.controller()
    ctl.reconcile_context("ns/p1")
    assert rig.status_node("shared") == "node-a"
    # The claim informer has not delivered the status yet: p2 sees the claim unallocated.
    assert not allocation.is_allocated(ctl.claims.get("ns/shared") or {})
    _try(ctl, "p2")
    assert rig.nas_owners() == {uid: {"node-a"}}
    assert rig.status_node("shared") == "node-a"
    assert all(len(users) == 1 for users in rig.gpu_users().values())


def test_a_status_naming_another_node_undoes_our_nas_write() -> None:
    """Another replica allocated the claim on node-a; neither our claim nor our NAS informer has
    seen it, so the decision for p2 on node-b looks sound until the status write."""
    rig = Rig()
    uid = _shared(rig)
    ours = rig.controller()
    rig.controller().reconcile_context("ns/p1")  # the other replica
    assert rig.status_node("shared") == "node-a"
    _try(ours, "p2")
    assert rig.nas_owners() == {uid: {"node-a"}}
    assert rig.status_node("shared") == "node-a"


def test_a_crash_between_the_nas_and_the_status_write_is_finished_not_allocated_again() -> None:
    rig = Rig()
    rig.claim("c")
    rig.pod("p", {"gpu": "c"}, "node-a")
    uid = rig.uid("c")
    dying = DiesAt(rig.api, "replace_status", "resourceclaims")
    with pytest.raises(Killed):
        rig.controller(dying).reconcile_context("ns/p")
    assert rig.nas_owners() == {uid: {"node-a"}} and rig.status_node("c") is None
    rig.select("p", "node-b")  # the scheduler heard nothing back and picked again
    ctl = rig.controller()  # restarted: the finalizer is already on the claim
    _try(ctl, "p")
    assert rig.nas_owners() == {uid: {"node-a"}}
    assert rig.status_node("c") == "node-a"  # completed from the NAS
    rig.sync(ctl, ctl.claims, ctl.contexts)
    ctl.resync()
    assert rig.nas_owners() == {uid: {"node-a"}}


def _entry(rig: Rig, name: str, gpu_index: int, node: str) -> AllocatedDevices:
    obj = rig.api.get(r.NAS, node, namespace=NS)
    uuid = obj["spec"]["allocatableDevices"][gpu_index]["gpu"]["uuid"]
    claim = rig.api.get(r.RESOURCE_CLAIMS, name, namespace="ns")
    return AllocatedDevices.model_validate(
        {"claimInfo": allocation.claim_info(claim), "gpu": {"devices": [{"uuid": uuid}]}}
    )


def _put(rig: Rig, name: str, node: str, devices: AllocatedDevices) -> None:
    uid = rig.uid(name)
    nasclient.update(
        rig.api,
        namespace=NS,
        node=node,
        mutate=lambda o: allocation.nas_with(o, {uid: devices}),
    )


@pytest.mark.parametrize("also_on_status_node", [True, False])
def test_resync_removes_every_nas_entry_its_claims_status_does_not_name(
    also_on_status_node: bool,
) -> None:
    rig = Rig()
    rig.claim("c", finalizer=True)
    on_a, on_b = _entry(rig, "c", 0, "node-a"), _entry(rig, "c", 0, "node-b")
    if also_on_status_node:
        _put(rig, "c", "node-a", on_a)
    _put(rig, "c", "node-b", on_b)
    claim = rig.api.get(r.RESOURCE_CLAIMS, "c", namespace="ns")
    rig.api.replace_status(
        r.RESOURCE_CLAIMS, allocation.with_allocation(claim, "node-a", on_a, shareable=True)
    )
    ctl = rig.controller()
    ctl.resync()
    # The stray entry on node-b is gone; the status's node lists the claim (re-written there
    # when it was missing, its GPU being free).
    assert rig.nas_owners() == {rig.uid("c"): {"node-a"}}
    assert ctl.metrics.repairs.labels("stray")._value.get() == 1


def _decider(ctl: Controller, rig: Rig, gate: Callable[[], None], pod: str) -> None:
    """What the work queue does for one pod: reconcile, and again after a Retry (with the
    scheduling context and pods read again, as their informers would). Each attempt starts at a
    gate, so that the interleaving orders the decisions too, not only the API calls."""
    for _ in range(4):
        gate()
        try:
            ctl.reconcile_context(f"ns/{pod}")
            return
        except Retry:
            rig.sync(ctl, ctl.contexts, ctl.pods)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    choices=st.lists(st.integers(0, 5), max_size=40),
    finalizer=st.booleans(),
    private=st.tuples(st.booleans(), st.booleans()),
    gpus=st.integers(1, 2),
)
def test_two_deciders_in_any_interleaving_keep_one_nas_entry_per_claim(
    choices: list[int], finalizer: bool, private: tuple[bool, bool], gpus: int
) -> None:
    """p1 (node-a) and p2 (node-b) share a claim, and each may have a claim of its own; their
    decisions run in one controller, their API calls interleaved at random, while the claim
    informer receives its events at random moments (or not at all). At every moment no claim is
    in two NAS objects; in the end each claim's status names the node whose NAS lists it."""
    rig = Rig(gpus=gpus)
    rig.claim("shared", finalizer=finalizer)
    for pod, own in zip(("p1", "p2"), private, strict=True):
        claims = {"gpu": "shared"}
        if own:
            rig.claim(f"{pod}-own")
            claims["own"] = f"{pod}-own"
        rig.pod(pod, claims, "node-a" if pod == "p1" else "node-b")
    interleaver = Interleaver(choices)
    ctl = rig.controller(interleaver.gated(rig.api))

    def one_entry_per_claim() -> None:
        assert all(len(nodes) == 1 for nodes in rig.nas_owners().values()), rig.nas_owners()

    interleaver.run(
        {pod: partial(_decider, ctl, rig, interleaver.gate, pod) for pod in ("p1", "p2")},
        moves=[lambda: rig.deliver_claim_event(ctl)],
        check=one_entry_per_claim,
    )
    assert not interleaver.errors, interleaver.errors
    # The informers catch up and resync runs, then the claims' own reconciles.
    rig.sync(ctl, *ctl._informers)
    ctl.resync()
    for claim in rig.api.list(r.RESOURCE_CLAIMS, namespace="ns").items:
        ctl.reconcile_claim(f"ns/{claim['metadata']['name']}")
    owners = rig.nas_owners()
    for claim in rig.api.list(r.RESOURCE_CLAIMS, namespace="ns").items:
        uid, name = claim["metadata"]["uid"], claim["metadata"]["name"]
        node = allocation.allocated_node(claim)
        assert owners.get(uid, set()) == ({node} if node else set()), (name, node, owners)
    assert all(len(users) == 1 for users in rig.gpu_users().values())
