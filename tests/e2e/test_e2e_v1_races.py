"""Two allocators on drasat's devices, on the real 1.37 control plane.

drasat allocates every claim of its classes, also one whose request tolerates drasat's allocator
taint (one allocator per device): its pod, gated by admission, never reaches kube-scheduler's
allocator before drasat has allocated it. Claims tolerating every taint beside ordinary ones
leave no GPU held twice, gated (never) or not (repaired within a minute). A second allocator (an
admin, a stale replica, kube-scheduler for an ungated pod) writing a claim's status onto a GPU a
running pod holds — which the API server accepts — is repaired by drasat: the claim not reserved
gives its allocation back, with a `DeviceClash` Event on both claims. Every test ends with
`allockit.consistent`.
"""

from __future__ import annotations

import contextlib
import pathlib
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import allockit
import kubernetes
import pytest
from kubecluster import wait_for
from kubeletkit import gpu_node
from slicekit import applied, unique

from drasat.api.groups import DRIVER_NAME
from drasat.testbed.controlplane import realcluster
from drasat.v1 import results

pytestmark = pytest.mark.timeout(400)

RESOURCE = ("resource.k8s.io", "v1")
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def allocator(
    kube_api: kubernetes.client.ApiClient, kube_cluster: realcluster.Cluster
) -> Iterator[allockit.Allocator]:
    with allockit.allocator(kube_api, kube_cluster) as found:
        yield found


def _node(api: Any, kube: realcluster.Cluster, prefix: str, fleet: str) -> Any:
    return gpu_node(api, kube, unique(prefix), fleet, nas_namespace=allockit.NAMESPACE)


def _manifest(tmp: pathlib.Path, name: str, text: str) -> pathlib.Path:
    path = tmp / f"{name}.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _claim(namespace: str, name: str, *, tolerates: bool) -> str:
    tolerations = ", tolerations: [{operator: Exists}]" if tolerates else ""
    return f"""
        ---
        apiVersion: resource.k8s.io/v1
        kind: ResourceClaim
        metadata: {{namespace: {namespace}, name: {name}}}
        spec:
          devices:
            requests:
            - {{name: gpu, exactly: {{deviceClassName: gpu.drasat.io{tolerations}}}}}"""


def _pod(namespace: str, name: str, claim: str) -> str:
    return f"""
        ---
        apiVersion: v1
        kind: Pod
        metadata: {{namespace: {namespace}, name: {name}}}
        spec:
          containers: [{{name: c, image: x, resources: {{claims: [{{name: gpu}}]}}}}]
          resourceClaims: [{{name: gpu, resourceClaimName: {claim}}}]"""


def _namespace(namespace: str) -> str:
    return f"""
        apiVersion: v1
        kind: Namespace
        metadata: {{name: {namespace}}}"""


def _get(api: Any, namespace: str, name: str) -> Obj:
    custom = kubernetes.client.CustomObjectsApi(api)
    found: Obj = custom.get_namespaced_custom_object(*RESOURCE, namespace, "resourceclaims", name)
    return found


def _devices(api: Any, namespace: str, name: str) -> list[str]:
    allocation = (_get(api, namespace, name).get("status") or {}).get("allocation") or {}
    found = (allocation.get("devices") or {}).get("results") or []
    return [r["device"] for r in found if r.get("driver") == DRIVER_NAME]


def _clash_events(api: Any, namespace: str) -> set[str]:
    core = kubernetes.client.CoreV1Api(api)
    return {
        e.involved_object.name
        for e in core.list_namespaced_event(namespace).items
        if e.reason == "DeviceClash"
    }


def test_a_claim_that_tolerates_the_allocator_taint_is_drasats(
    kube_api: Any,
    kube_cluster: realcluster.Cluster,
    allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:
    """drasat allocates the tolerating claim of a gated pod (kube-scheduler's allocator never
    sees it), and gives its ordinary claim the other GPU."""
    ns = "v1-tolerates"
    theirs = _manifest(
        tmp_path, "theirs",
        _namespace(ns) + _claim(ns, "theirs", tolerates=True) + _gated_pod(ns, "q", "theirs"),
    )  # fmt: skip
    mine = _manifest(
        tmp_path, "mine", _claim(ns, "mine", tolerates=False) + _gated_pod(ns, "p", "mine")
    )
    with _node(kube_api, kube_cluster, "v1tol", "2xT4") as node, applied(kube_api, theirs):
        node.wait_running(ns, "q")
        assert f"{ns}/theirs" in allocator.allocated()
        (held,) = _devices(kube_api, ns, "theirs")
        with applied(kube_api, mine):
            node.wait_running(ns, "p")
            assert f"{ns}/mine" in allocator.allocated()
            assert _devices(kube_api, ns, "mine") == [{"gpu-0": "gpu-1"}.get(held, "gpu-0")]
            allockit.consistent(kube_api, allocator)
            assert not _clash_events(kube_api, ns)
            node.delete_pods(kube_api, ns, "p", "q")
    allockit.consistent(kube_api, allocator)


def test_a_clash_written_by_a_second_allocator_is_repaired_before_its_pod_starts(
    kube_api: Any,
    kube_cluster: realcluster.Cluster,
    allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:
    """drasat's claim holds the only GPU for a running pod; a second allocator writes another
    claim's status onto that GPU (the API server accepts it). drasat finds the clash, the claim
    not reserved gives its allocation back (Events on both), the running pod keeps its GPU; the
    other claim's pod gets the GPU once the first pod and claim are gone."""
    ns = "v1-clash"
    first = _manifest(
        tmp_path, "first",
        _namespace(ns) + _claim(ns, "mine", tolerates=False) + _pod(ns, "p", "mine")
        + _claim(ns, "theirs", tolerates=True),
    )  # fmt: skip
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    with contextlib.ExitStack() as stack:
        node = stack.enter_context(_node(kube_api, kube_cluster, "v1clash", "1xT4"))
        stack.enter_context(applied(kube_api, first))
        node.wait_running(ns, "p")
        assert _devices(kube_api, ns, "mine") == ["gpu-0"]
        claim = _get(kube_api, ns, "theirs")
        claim["status"] = {
            "allocation": {
                "devices": {"results": [
                    {"request": "gpu", "driver": DRIVER_NAME, "pool": node.name,
                     "device": "gpu-0"}]},
                "nodeSelector": results.node_selector(node.name),
            }
        }  # fmt: skip
        custom.replace_namespaced_custom_object_status(
            *RESOURCE, ns, "resourceclaims", "theirs", claim
        )
        wait_for(
            lambda: not _devices(kube_api, ns, "theirs"),
            timeout=60,
            what=f"the clashing claim to give its GPU back\n{allocator.text()[-3000:]}",
        )
        wait_for(lambda: _clash_events(kube_api, ns) == {"mine", "theirs"}, timeout=30)
        assert _devices(kube_api, ns, "mine") == ["gpu-0"]
        allockit.consistent(kube_api, allocator)
        # Its pod now waits for the GPU, and gets it once the first pod and its claim are gone
        # (drasat releases the claim: its finalizer and ledger entry).
        later = _manifest(tmp_path, "later", _pod(ns, "q", "theirs"))
        stack.enter_context(applied(kube_api, later))
        node.delete_pods(kube_api, ns, "p")
        custom.delete_namespaced_custom_object(*RESOURCE, ns, "resourceclaims", "mine")
        node.wait_running(ns, "q")
        assert _devices(kube_api, ns, "theirs") == ["gpu-0"]
        allockit.consistent(kube_api, allocator)
    allockit.consistent(kube_api, allocator)


def _gated_pod(namespace: str, name: str, claim: str) -> str:
    """A pod as admission lets it in: with drasat's scheduling gate (the chart's policy gates
    every pod that names claims)."""
    return (
        _pod(namespace, name, claim)
        + "\n          schedulingGates: [{name: gpu.drasat.io/allocation}]"
    )


def _held_twice(api: Any, found: allockit.Allocator) -> list[str]:
    """Each of drasat's devices held whole by more than one claim, with the claims."""
    return [p for p in allockit.problems(api, found) if " is held by " in p]


def _tolerating_beside_ordinary(namespace: str, gated: bool) -> tuple[str, list[str]]:
    """Four claims whose requests tolerate every taint (as debug and "tolerate all" workloads
    write) beside four ordinary ones, with a pod each; the manifest and the pods' names."""
    pod = _gated_pod if gated else _pod
    text = _namespace(namespace)
    for i in range(4):
        text += _claim(namespace, f"plain-{i}", tolerates=False)
        text += pod(namespace, f"p-{i}", f"plain-{i}")
        text += _claim(namespace, f"tol-{i}", tolerates=True)
        text += pod(namespace, f"t-{i}", f"tol-{i}")
    return text, [f"p-{i}" for i in range(4)] + [f"t-{i}" for i in range(4)]


def _four_alone_for_20s(
    api: Any, node: Any, allocator: allockit.Allocator, ns: str, pods: list[str], timeout: float
) -> list[str]:
    """Wait (at most `timeout`) until four pods run and no GPU is held by two claims, then check
    that it stays so for 20 s (the issue's observation); the running pods."""
    seen: list[str] = []

    def four_running_alone() -> bool:
        seen[:] = _held_twice(api, allocator)
        running = [p for p in pods if node.kubelet.running(ns, p)]
        return len(running) == 4 and not seen

    try:
        wait_for(four_running_alone, timeout=timeout, what="four pods running, each alone")
    except Exception:
        raise AssertionError(f"held twice: {seen}\n{allocator.text()[-3000:]}") from None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert not _held_twice(api, allocator), allocator.text()[-3000:]
        time.sleep(1)
    running = [p for p in pods if node.kubelet.running(ns, p)]
    assert len(running) == 4, running
    return running


def test_claims_tolerating_every_taint_beside_drasats_leave_no_device_held_twice(
    kube_api: Any,
    kube_cluster: realcluster.Cluster,
    allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:
    """The pods as admission lets them in (drasat's gate on every pod that names claims): drasat
    allocates every claim of its classes, tolerating or not, so kube-scheduler's allocator never
    runs for them. No GPU is ever held by two claims (checked all along), four pods run, four
    wait, and every allocation is drasat's. On main, kube-scheduler allocated the tolerating
    claims beside drasat's: all four T4s were held twice."""
    ns = "v1-tolall-g"
    text, pods = _tolerating_beside_ordinary(ns, gated=True)
    manifest = _manifest(tmp_path, "all", text)
    with _node(kube_api, kube_cluster, "v1tolall", "4xT4") as node, applied(kube_api, manifest):
        seen: set[str] = set()

        def four_running() -> bool:
            seen.update(_held_twice(kube_api, allocator))
            return sum(1 for p in pods if node.kubelet.running(ns, p)) == 4

        wait_for(four_running, timeout=60, what="four pods running")
        assert not seen, f"{sorted(seen)}\n{allocator.text()[-3000:]}"
        running = _four_alone_for_20s(kube_api, node, allocator, ns, pods, timeout=1)
        written = allocator.allocated()
        allocated = [c for c in allockit.claims(kube_api) if c["metadata"]["namespace"] == ns
                     and (c.get("status") or {}).get("allocation")]  # fmt: skip
        assert len(allocated) == 4
        assert all(f"{ns}/{c['metadata']['name']}" in written for c in allocated)
        node.delete_pods(kube_api, ns, *running)
    allockit.consistent(kube_api, allocator)


def test_claims_tolerating_every_taint_whose_pods_reach_kube_scheduler_are_repaired(
    kube_api: Any,
    kube_cluster: realcluster.Cluster,
    allocator: allockit.Allocator,
    tmp_path: pathlib.Path,
) -> None:
    """The same pods without drasat's gate (admission off, a namespace outside its selector, or
    one an administrator exempted from the toleration policy): kube-scheduler's allocator may
    take a tolerating claim while drasat allocates another claim onto the same GPU. Whatever
    overlaps is repaired: the claim not reserved yet gives its devices back, or, both in use,
    the pods of the claim drasat did not write are evicted. Within a minute four pods run
    alone, and stay so. On main two of the four T4s stayed held twice."""
    ns = "v1-tolall-u"
    text, pods = _tolerating_beside_ordinary(ns, gated=False)
    manifest = _manifest(tmp_path, "all", text)
    with _node(kube_api, kube_cluster, "v1tolall", "4xT4") as node, applied(kube_api, manifest):
        running = _four_alone_for_20s(kube_api, node, allocator, ns, pods, timeout=60)
        # What the race left to repair this time (it differs from run to run).
        core = kubernetes.client.CoreV1Api(kube_api)
        events = core.list_namespaced_event(ns).items
        evicted = sorted({e.involved_object.name for e in events
                          if e.reason == "DeviceClashEvicted"})  # fmt: skip
        print(f"repaired: clashes on claims {sorted(_clash_events(kube_api, ns))}, "
              f"pods evicted {evicted}")  # fmt: skip
        node.delete_pods(kube_api, ns, *running)
    allockit.consistent(kube_api, allocator)
