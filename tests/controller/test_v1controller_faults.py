"""Issue 22, Deliver 1 (isolation): random faults injected per claim never reduce what the other
pods get compared to the fault-free run.

A cluster where every pod fits (one whole GPU per claim, at most as many pods as GPUs) runs the
v1 controller twice on the in-memory API: once without faults (every pod gets a GPU), once with
some claims faulty:

- `bad_cel`: a selector that does not compile (the claim cannot be allocated as written);
- `bad_shape`: a selector that is not an object (the translation itself fails);
- `write_fails`: the API server refuses the claim's status write;
- `solver_raises`: the solve hook raises whenever the claim's pod is in the problem;
- `overlap`: the claim was allocated by a second allocator on a device that another allocated
  claim also names, both reserved (nothing to repair; reported).

The property: every healthy pod still gets its GPU, no device goes to two claims except the
injected overlaps, and the faulty claims are reported (Warning Event, a metric by kind). The
number of examples is `DRASAT_FAULT_EXAMPLES` (default 12).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from ctl_cluster import NS
from ctl_kubefake import FakeApi
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_v1controller import _node

from drasat.api.devicemodel import classes
from drasat.controller import v1inputs
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.solver import Problem, Solution, SolveParams
from drasat.solver import solve as real_solve
from drasat.v1 import results

Obj = dict[str, Any]
FAULTS = ("bad_cel", "bad_shape", "write_fails", "solver_raises", "overlap")
EXAMPLES = int(os.environ.get("DRASAT_FAULT_EXAMPLES", "12"))


class FaultyApi(FakeApi):
    """The in-memory API server, refusing the status writes of some claims."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse_status: set[str] = set()

    def replace_status(self, resource: r.Resource, body: Obj) -> Obj:
        name = (body.get("metadata") or {}).get("name")
        allocating = bool((body.get("status") or {}).get("allocation"))
        if resource.plural == "resourceclaims" and name in self.refuse_status and allocating:
            raise errors.Invalid(f"ResourceClaim {name}: refused (injected)", status=422)
        return super().replace_status(resource, body)


def _claim_body(name: str, fault: str | None) -> Obj:
    exactly: Obj = {"deviceClassName": "gpu.drasat.io"}
    if fault == "bad_cel":
        exactly["selectors"] = [{"cel": {"expression": "device.attributes[ ==="}}]
    if fault == "bad_shape":
        exactly["selectors"] = ["not a selector"]
    request = {"name": "gpu", "exactly": exactly}
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [request]}}}  # fmt: skip


def _pod_body(name: str, claim: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        },
    }


def _allocated(api: FakeApi, name: str, node: str, device: str) -> None:
    claim = api.get(r.RESOURCE_CLAIMS_V1, name, namespace="default")
    claim["status"] = {
        "allocation": {
            "devices": {"results": [
                {"request": "gpu", "driver": "gpu.drasat.io", "pool": node, "device": device}]},
            "nodeSelector": results.node_selector(node),
        },
        "reservedFor": [{"resource": "pods", "name": name, "uid": f"u-{name}"}],
    }  # fmt: skip
    api.replace_status(r.RESOURCE_CLAIMS_V1, claim)


def _devices(claim: Obj) -> set[tuple[str, str]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return (
        {(x["pool"], x["device"]) for x in allocation["devices"]["results"]}
        if allocation
        else set()
    )


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[int], list[str | None]]:
    gpus = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    pods = draw(st.integers(1, sum(gpus)))
    faults = draw(st.lists(st.sampled_from((None, None, *FAULTS)), min_size=pods, max_size=pods))
    return gpus, faults


def _run(gpus: list[int], faults: list[str | None]) -> tuple[dict[str, Obj], V1Controller]:
    """Run cycles until every healthy claim is allocated (or 8 s pass); the claims by name."""
    api = FaultyApi()
    for body in classes.device_classes():
        api.create(r.DEVICE_CLASSES_V1, body)
    for i, count in enumerate(gpus):
        _node(api, f"n{i}", count)  # type: ignore[arg-type]
    bad_pods: set[str] = set()
    overlaps: list[str] = []
    for i, fault in enumerate(faults):
        api.create(r.RESOURCE_CLAIMS_V1, _claim_body(f"c{i}", fault), namespace="default")
        api.create(r.PODS, _pod_body(f"p{i}", f"c{i}"), namespace="default")
        if fault == "write_fails":
            api.refuse_status.add(f"c{i}")
        if fault == "solver_raises":
            bad_pods.add(f"default/p{i}")
        if fault == "overlap":
            overlaps.append(f"c{i}")
    # Each overlapping claim and its shadow name the last free GPUs (from the end), so the
    # healthy pods still fit: the faulty pod holds one GPU, as it would without the fault.
    free = [(f"n{i}", f"gpu-{g}") for i, count in enumerate(gpus) for g in range(count)]
    for name in overlaps:
        node, device = free.pop()
        api.create(r.RESOURCE_CLAIMS_V1, _claim_body(f"{name}-shadow", None), namespace="default")
        _allocated(api, name, node, device)
        _allocated(api, f"{name}-shadow", node, device)

    def solve(problem: Problem, params: SolveParams) -> Solution:
        if any(p.key in bad_pods for p in problem.pods):
            raise RuntimeError("injected solver failure")
        return real_solve(problem, params)

    ctl = V1Controller(
        api, V1Config(namespace=NS, batch_window_s=0, device_taint=False), solve=solve
    )
    ctl.start(sync_timeout_s=10, cycles=False)
    healthy = [f"c{i}" for i, f in enumerate(faults) if f is None]
    deadline = time.monotonic() + 8
    try:
        while True:
            ctl.cycle()
            claims = {c["metadata"]["name"]: c for c in api.list(r.RESOURCE_CLAIMS_V1).items}
            if all(v1inputs.is_allocated(claims[n]) for n in healthy):
                time.sleep(0.1)  # one more cycle with the informers caught up
                ctl.cycle()
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.03)
    finally:
        ctl.stop()
    claims = {c["metadata"]["name"]: c for c in api.list(r.RESOURCE_CLAIMS_V1).items}
    return claims, ctl


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level("ERROR")
    yield


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(clusters())
def test_faults_never_reduce_what_the_other_pods_get(
    cluster: tuple[list[int], list[str | None]],
) -> None:
    gpus, faults = cluster
    clean, _ = _run(gpus, [None] * len(faults))
    assert all(v1inputs.is_allocated(clean[f"c{i}"]) for i in range(len(faults)))
    found, ctl = _run(gpus, faults)
    for i, fault in enumerate(faults):
        claim = found[f"c{i}"]
        if fault is None:
            assert v1inputs.is_allocated(claim), f"healthy c{i} lost its GPU to {faults}"
        elif fault != "overlap":
            assert not v1inputs.is_allocated(claim), f"c{i} ({fault}) was allocated"
    holders: dict[tuple[str, str], set[str]] = {}
    for name, claim in found.items():
        for device in _devices(claim):
            holders.setdefault(device, set()).add(name.removesuffix("-shadow"))
    assert all(len(names) == 1 for names in holders.values()), holders
    kinds = {
        "write_fails": "WriteFailed",
        "solver_raises": "AllocatorError",
        "overlap": "DeviceClash",
    }
    for fault, kind in kinds.items():
        if fault in faults:
            assert ctl.metrics.faults.labels(kind)._value.get() >= 1, kind
