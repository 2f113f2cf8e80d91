"""On the real 1.37 control plane: a standalone claim no pod uses any more, pinned to a full node
by a pending pod that names it beside a claim that cannot fit there, is given back, and the pod
is placed where both fit (tests/controller/test_cycle_deallocation_pinned.py has it on the
in-memory API server).

The resourceclaim controller clears the finished pod's reservation but leaves the allocation
(drasat's claims do not carry upstream's finalizer); kube-scheduler's PostFilter, which would
deallocate an unreserved claim of a pod that fits nowhere, never sees the pod: drasat's gate
holds it while its other claim is not allocated. drasat's settle gives such a claim back once
its allocation refused the pod."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Iterator
from typing import Any

import allockit
import kubernetes
import pytest
from kubecluster import wait_for
from slicekit import applied
from test_e2e_v1_deallocation import _claim, _get, _manifest, _namespace, _node, _node_of, _pod

from drasat.testbed.controlplane import realcluster

pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def allocator(
    kube_api: kubernetes.client.ApiClient, kube_cluster: realcluster.Cluster
) -> Iterator[allockit.Allocator]:
    with allockit.allocator(kube_api, kube_cluster) as found:
        yield found


def _two_claim_pod(namespace: str, name: str, one: str, two: str) -> str:
    return f"""
        ---
        apiVersion: v1
        kind: Pod
        metadata: {{namespace: {namespace}, name: {name}}}
        spec:
          containers: [{{name: c, image: x, resources: {{claims: [{{name: one}}, {{name: two}}]}}}}]
          resourceClaims:
          - {{name: one, resourceClaimName: {one}}}
          - {{name: two, resourceClaimName: {two}}}"""


def test_a_pod_is_not_stuck_behind_its_unused_claim_pinned_to_a_full_node(
    kube_api: Any,
    kube_cluster: realcluster.Cluster,
    allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:
    ns = "pinned-claim"
    first = _manifest(
        tmp_path,
        "first",
        _namespace(ns)
        + _claim(ns, "busy")
        + _pod(ns, "r", "busy")
        + _claim(ns, "shared")
        + _pod(ns, "a", "shared"),
    )
    with contextlib.ExitStack() as stack:
        one = stack.enter_context(_node(kube_api, kube_cluster, "pinned1", "2xT4"))
        stack.enter_context(applied(kube_api, first))
        one.wait_running(ns, "r")
        one.wait_running(ns, "a")
        assert _node_of(kube_api, ns, "shared") == one.name
        two = stack.enter_context(_node(kube_api, kube_cluster, "pinned2", "2xT4,seed=second"))
        later = _manifest(
            tmp_path, "later", _claim(ns, "extra") + _two_claim_pod(ns, "p2", "shared", "extra")
        )
        stack.enter_context(applied(kube_api, later))
        wait_for(lambda: f"ResourceClaim {ns}/extra: NotAllocatable" in allocator.text(),
                 timeout=60, what="drasat to find n1 full for p2")  # fmt: skip
        one.delete_pods(kube_api, ns, "a")
        # Both of p2's claims fit together on the second node, free all along.
        try:
            two.wait_running(ns, "p2", timeout=120)
        except AssertionError:
            shared = _get(kube_api, ns, "shared").get("status") or {}
            said = [line for line in allocator.text().splitlines() if f"{ns}/p2" in line]
            raise AssertionError(
                f"p2 never runs: `shared` stays on {_node_of(kube_api, ns, 'shared')} "
                f"(reservedFor {shared.get('reservedFor')}), `extra` on "
                f"{_node_of(kube_api, ns, 'extra')}; drasat last said: {said[-1:]}"
            ) from None
        allockit.consistent(kube_api, allocator)
