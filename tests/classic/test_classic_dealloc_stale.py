"""A claim deallocated once is counted once, even when its key comes back before the claim
informer has seen the deletion (seen on the real Kubernetes 1.30 control plane:
tests/e2e/test_e2e_classic.py logged `deallocated` twice for one claim)."""

from __future__ import annotations

import pytest
from ctl_cluster import nas_claims
from ctl_deciders import Rig

from drasat.kube import errors
from drasat.kube import resources as r


def test_a_stale_deleted_claim_is_not_deallocated_twice(caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig()
    rig.claim("c", finalizer=True)
    rig.pod("p", {"gpu": "c"}, selected="node-a")
    ctl = rig.controller()
    ctl.reconcile_context("ns/p")
    uid = rig.api.get(r.RESOURCE_CLAIMS, "c", namespace="ns")["metadata"]["uid"]
    assert set(nas_claims(rig.api)) == {uid}
    rig.api.delete(r.RESOURCE_CLAIMS, "c", namespace="ns")  # not reserved: deallocate it
    rig.sync(ctl, ctl.claims)
    with caplog.at_level("INFO", logger="drasat.classic.controller"):
        ctl.reconcile_claim("ns/c")  # the NAS entry and the finalizer go, and so the claim
        with pytest.raises(errors.NotFound):
            rig.api.get(r.RESOURCE_CLAIMS, "c", namespace="ns")
        ctl.reconcile_claim("ns/c")  # the key again, the cache still holding the deleted claim
    assert nas_claims(rig.api) == {}
    assert ctl.metrics.deallocations._value.get() == 1
    assert [m for m in caplog.messages if m.startswith("deallocated")] == ["deallocated ns/c"]


def test_the_classic_ledger_removal_is_the_shared_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    # One ledger-removal rule (issue 25): drasat.kube.nasclient.without_claims, which the v1
    # controller applies too (tests/controller/test_v1controller.py).
    from drasat.kube import nasclient

    removed: list[set[str]] = []
    rule = nasclient.without_claims
    monkeypatch.setattr(
        nasclient, "without_claims", lambda obj, uids: removed.append(set(uids)) or rule(obj, uids)
    )
    rig = Rig()
    rig.claim("c", finalizer=True)
    rig.pod("p", {"gpu": "c"}, selected="node-a")
    ctl = rig.controller()
    ctl.reconcile_context("ns/p")
    uid = rig.api.get(r.RESOURCE_CLAIMS, "c", namespace="ns")["metadata"]["uid"]
    rig.api.delete(r.RESOURCE_CLAIMS, "c", namespace="ns")
    rig.sync(ctl, ctl.claims)
    ctl.reconcile_claim("ns/c")
    assert nas_claims(rig.api) == {}
    assert removed == [{uid}]
