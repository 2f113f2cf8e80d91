"""A cycle settles only the nodes and claims whose objects changed since the last settle
(`drasat.controller.cycle.changes`): an unchanged node's ledger is not settled again, a change on
one node is settled in the next cycle, and a full settle still comes every `full_settle_every`
settles and after a settle in which something failed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import ctl_slices
import pytest
from ctl_cluster import NS, add_node, t4
from test_v1inputs import claim, exactly, on_node, result, snapshot

from drasat.api.devicemodel import classes
from drasat.controller.cycle import changes, releasing
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, configuration_for
from drasat.testbed.sim import apiserver

Obj = dict[str, Any]


@pytest.fixture
def api() -> Iterator[KubeClient]:
    from drasat.api import crds

    with apiserver.ApiServer.running(crds=crds.all_crds()) as running:
        client = KubeClient(configuration_for(running.url), request_timeout=10)
        for body in classes.device_classes():
            client.create(r.DEVICE_CLASSES_V1, body)
        yield client
        client.close()


class Settled:
    """Which nodes' ledgers (`releasing.stale_entries`) and which claims (`Releaser._restore`)
    the settles since the last `clear` looked at."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.nodes: list[str] = []
        self.claims: list[str] = []
        stale_entries, restore = releasing.stale_entries, releasing.Releaser._restore

        def counted_stale(ledger: Any, node: str, *args: Any) -> dict[str, str]:
            self.nodes.append(node)
            return stale_entries(ledger, node, *args)

        def counted_restore(releaser: releasing.Releaser, found: Obj, *args: Any) -> bool:
            self.claims.append(str(found["metadata"]["name"]))
            return restore(releaser, found, *args)

        monkeypatch.setattr(releasing, "stale_entries", counted_stale)
        monkeypatch.setattr(releasing.Releaser, "_restore", counted_restore)

    def clear(self) -> None:
        self.nodes.clear()
        self.claims.clear()


def _node(api: KubeClient, name: str) -> None:
    api.create(
        r.NODES,
        {
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
        },
    )
    devices = [t4(0)]
    add_node(api, name, devices)
    ctl_slices.publish(api, name, devices)


def _claim_and_pod(api: KubeClient, name: str) -> None:
    requests = [{"name": "gpu", "exactly": {"deviceClassName": "gpu.drasat.io"}}]
    api.create(
        r.RESOURCE_CLAIMS_V1,
        {"metadata": {"name": name, "namespace": "default"},
         "spec": {"devices": {"requests": requests}}},
        namespace="default",
    )  # fmt: skip
    api.create(
        r.PODS,
        {"metadata": {"name": f"p-{name}", "namespace": "default"},
         "spec": {"containers": [{"name": "c", "image": "x"}],
                  "resourceClaims": [{"name": "gpu", "resourceClaimName": name}]}},
        namespace="default",
    )  # fmt: skip


def _ledger(api: KubeClient, node: str) -> dict[str, Obj]:
    return dict((api.get(r.NAS, node, namespace=NS).get("spec") or {}).get("allocatedClaims") or {})


def _quiet(ctl: V1Controller, settled: Settled, timeout: float = 10) -> None:
    """Cycles until one settles nothing (the informers have delivered every write)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        settled.clear()
        ctl.cycle()
        if not settled.nodes and not settled.claims:
            return
        time.sleep(0.1)
    raise AssertionError(f"still settling {settled.nodes} {settled.claims}")


@pytest.fixture
def two_nodes(
    api: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[V1Controller, Settled]]:
    """Nodes n1 and n2 with one T4 each, claim c1 allocated on one and c2 on the other, and a
    controller whose full settles are far apart."""
    for name in ("n1", "n2"):
        _node(api, name)
    for name in ("c1", "c2"):
        _claim_and_pod(api, name)
    settled = Settled(monkeypatch)
    ctl = V1Controller(api, V1Config(namespace=NS, batch_window_s=0, full_settle_every=1000))
    ctl.start(sync_timeout_s=10, cycles=False)
    try:
        deadline = time.monotonic() + 10
        while len(_ledger(api, "n1")) + len(_ledger(api, "n2")) < 2:
            assert time.monotonic() < deadline, "c1 and c2 not placed"
            ctl.cycle()
            time.sleep(0.05)
        _quiet(ctl, settled)
        yield ctl, settled
    finally:
        ctl.stop()


def test_an_unchanged_node_is_not_settled_again(two_nodes: tuple[V1Controller, Settled]) -> None:
    ctl, settled = two_nodes
    for _ in range(3):
        settled.clear()
        ctl.cycle()
        assert settled.nodes == [] and settled.claims == []
    assert ctl.changes.full_settles == 1  # the first settle only


def test_a_change_on_one_node_is_settled_in_the_next_cycle(
    api: KubeClient, two_nodes: tuple[V1Controller, Settled]
) -> None:
    ctl, settled = two_nodes
    node = next(n for n in ("n1", "n2") if _ledger(api, n))
    other = "n2" if node == "n1" else "n1"
    written = _ledger(api, node)
    nas = api.get(r.NAS, node, namespace=NS)
    nas["spec"]["allocatedClaims"] = {}  # the ledger lost (an admin, a restore from backup)
    api.replace(r.NAS, nas)
    deadline = time.monotonic() + 10
    while ctl.nas.get(f"{NS}/{node}")["spec"].get("allocatedClaims"):  # the informer sees it
        assert time.monotonic() < deadline
        time.sleep(0.05)
    settled.clear()
    ctl.cycle()
    assert _ledger(api, node).keys() == written.keys()  # written back in that very cycle
    assert node in settled.nodes and other not in settled.nodes
    assert len(settled.claims) == 1  # the claim on that node only


def test_a_failed_settle_step_makes_the_next_settle_full(
    two_nodes: tuple[V1Controller, Settled], monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl, settled = two_nodes
    before = ctl.changes.full_settles
    settle = ctl.releaser.settle

    def failing(*args: Any) -> bool:
        ctl.writes.failures += 1  # as `Writes.confined` counts a step that raised
        return settle(*args)

    monkeypatch.setattr(ctl.releaser, "settle", failing)
    ctl.cycle()
    monkeypatch.setattr(ctl.releaser, "settle", settle)
    settled.clear()
    ctl.cycle()
    assert ctl.changes.full_settles == before + 1
    assert sorted(settled.nodes) == ["n1", "n2"]
    settled.clear()
    ctl.cycle()
    assert settled.nodes == []


# -- the scope itself, over snapshots --------------------------------------------------------------


def _versioned(obj: Obj, version: str) -> Obj:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}


def _node_objs(version: str = "1") -> dict[str, Obj]:
    return {n: {"metadata": {"name": n, "resourceVersion": version}} for n in ("a", "b")}


def test_the_scope_names_a_changed_claim_and_its_node_only() -> None:
    on_a = _versioned(claim("x", exactly(), allocation=on_node("a", result("gpu-0", "a"))), "5")
    on_b = _versioned(claim("y", exactly(), allocation=on_node("b", result("gpu-0", "b"))), "5")
    seen = changes.Changes(full_every=100)
    assert seen.scope(snapshot([], [on_a, on_b], nodes=_node_objs()), {}) is None  # first: full
    seen.settled(failed=False)
    same = seen.scope(snapshot([], [on_a, on_b], nodes=_node_objs()), {})
    assert same == changes.Scope(frozenset(), frozenset())
    seen.settled(failed=False)
    moved = _versioned(on_b, "6")
    found = seen.scope(snapshot([], [on_a, moved], nodes=_node_objs()), {})
    assert found == changes.Scope(frozenset({"uid-y"}), frozenset({"b"}))


def test_a_pod_change_puts_the_claims_it_names_in_scope() -> None:
    held = _versioned(claim("x", exactly(), allocation=on_node("a", result("gpu-0", "a"))), "5")
    pod: Obj = {
        "metadata": {"name": "p", "namespace": "default", "uid": "pod-1", "resourceVersion": "1"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "x"}]},
    }
    seen = changes.Changes(full_every=100)
    seen.scope(snapshot([pod], [held], nodes=_node_objs()), {})
    seen.settled(failed=False)
    found = seen.scope(snapshot([], [held], nodes=_node_objs()), {})  # the pod is gone
    assert found is not None and found.claims == {"uid-x"} and found.nodes == {"a"}


def test_a_full_settle_comes_every_full_every_settles() -> None:
    seen = changes.Changes(full_every=3)
    fulls = []
    for _ in range(7):
        fulls.append(seen.scope(snapshot([], [], nodes=_node_objs()), {}) is None)
        seen.settled(failed=False)
    assert fulls == [True, False, False, True, False, False, True]


def test_an_object_without_a_resource_version_is_always_in_scope() -> None:
    bare = claim("x", exactly(), allocation=on_node("a", result("gpu-0", "a")))
    seen = changes.Changes(full_every=100)
    seen.scope(snapshot([], [bare], nodes=_node_objs()), {})
    seen.settled(failed=False)
    found = seen.scope(snapshot([], [dict(bare)], nodes=_node_objs()), {})
    assert found is not None and "uid-x" in found.claims
