"""No answer of the API server aborts a cycle: a 429, a 5xx or a timeout on any verb is confined
to the object it was about (that object waits for the next cycle; every other object is settled,
placed and let go as without the fault). One test per place a cycle talks to the API server,
on the in-memory API server with injected failures (`ctl_kubefake.FakeApi.fail`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ctl_cluster import NS
from ctl_kubefake import FakeApi, server_error, timed_out, too_many_requests
from test_v1controller import _node

from drasat.api.devicemodel import classes
from drasat.api.groups import SCHEDULING_GATE
from drasat.controller import v1inputs
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.v1 import extended

Obj = dict[str, Any]
ERRORS: dict[str, Callable[[str], errors.KubeError]] = {
    "429": too_many_requests,
    "500": server_error,
    "timeout": timed_out,
}


@pytest.fixture
def api() -> FakeApi:
    found = FakeApi()
    for body in classes.device_classes():
        found.create(r.DEVICE_CLASSES_V1, body)
    return found


@pytest.fixture
def controller(api: FakeApi) -> Iterator[V1Controller]:
    ctl = V1Controller(api, V1Config(namespace=NS, batch_window_s=0, device_taint=False))
    ctl.start(sync_timeout_s=10, cycles=False)
    yield ctl
    ctl.stop()


def _claim(api: FakeApi, name: str) -> Obj:
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.drasat.io"}}]}},
    }  # fmt: skip
    return api.create(r.RESOURCE_CLAIMS_V1, body, namespace="default")


def _pod(api: FakeApi, name: str, claim: str) -> Obj:
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        },
    }
    return api.create(r.PODS, body, namespace="default")


def _get(api: FakeApi, name: str) -> Obj | None:
    try:
        return api.get(r.RESOURCE_CLAIMS_V1, name, namespace="default")
    except errors.NotFound:
        return None


#: (verb, plural) of every call made inside a cycle (not by the test itself).
CALLED: set[tuple[str, str]] = set()


def _cycle(ctl: V1Controller) -> None:
    """One cycle, which must return whatever the API answers; its calls go to `CALLED`."""
    calls = ctl.api.calls  # type: ignore[attr-defined]
    start = len(calls)
    ctl.cycle()
    CALLED.update(calls[start:])


def _cycles_until(ctl: V1Controller, check: Callable[[], Any], timeout: float = 10) -> Any:
    """Cycles until `check()` holds."""
    deadline = time.monotonic() + timeout
    while True:
        _cycle(ctl)
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.03)


def _reserve(api: FakeApi, claim: str, pod: Obj) -> None:
    """What kube-scheduler's PreBind writes: the pod in the claim's `reservedFor`."""
    body = api.get(r.RESOURCE_CLAIMS_V1, claim, namespace="default")
    meta = pod["metadata"]
    ref = {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
    body["status"] = {**body["status"], "reservedFor": [ref]}
    api.replace_status(r.RESOURCE_CLAIMS_V1, body)


# -- the settle ----------------------------------------------------------------------------------


@pytest.mark.parametrize("error", sorted(ERRORS))
def test_a_failed_lookup_of_a_departed_pod_delays_only_its_claim(
    api: FakeApi, controller: V1Controller, error: str
) -> None:
    """Two claims being deleted, their pods gone: one was deleted before the controller
    started (its cache never had it, so it is looked up), and that lookup fails. That claim
    waits for the next cycle; the other is released in this one."""
    _node(api, "n1", 2)  # type: ignore[arg-type]
    pods = {}
    for i in (1, 2):
        _claim(api, f"c{i}")
        pods[i] = _pod(api, f"p{i}", f"c{i}")
    assert _cycles_until(controller, lambda: all(
        v1inputs.is_allocated(_get(api, f"c{i}") or {}) for i in (1, 2)))  # fmt: skip
    # c1's pod went before this controller started: a pod its cache never had.
    ghost = {"metadata": {"name": "ghost", "uid": "u-ghost"}}
    for i, pod in ((1, ghost), (2, pods[2])):
        _reserve(api, f"c{i}", pod)
        api.delete(r.RESOURCE_CLAIMS_V1, f"c{i}", namespace="default")
    api.fail("get", "pods", ERRORS[error]("get pods ghost"), name="ghost")
    for i in (1, 2):
        api.delete(r.PODS, f"p{i}", namespace="default")
    assert _cycles_until(controller, lambda: _get(api, "c2") is None)
    assert _get(api, "c1") is not None, "released without knowing whether its pod is gone"
    api.failures.clear()
    assert _cycles_until(controller, lambda: _get(api, "c1") is None)


@pytest.mark.parametrize("error", sorted(ERRORS))
def test_a_ledger_that_cannot_be_written_delays_only_its_nodes_claims(
    api: FakeApi, controller: V1Controller, error: str
) -> None:
    """Two claims being deleted, one on each node, their pods gone: n1's NAS write fails. n2's
    claim is released (its ledger entry out, our finalizer dropped) in the same cycle; n1's
    keeps its entry and finalizer until the write goes."""
    for node in ("n1", "n2"):
        _node(api, node, 1)  # type: ignore[arg-type]
    for i in (1, 2):
        _claim(api, f"c{i}")
        _pod(api, f"p{i}", f"c{i}")
    assert _cycles_until(controller, lambda: all(
        v1inputs.is_allocated(_get(api, f"c{i}") or {}) for i in (1, 2)))  # fmt: skip
    on = {i: v1inputs.allocated_node(_get(api, f"c{i}") or {}) for i in (1, 2)}
    api.fail("replace", "nodeallocationstates", ERRORS[error]("replace nas"), name=on[1])
    for i in (1, 2):
        api.delete(r.PODS, f"p{i}", namespace="default")
        api.delete(r.RESOURCE_CLAIMS_V1, f"c{i}", namespace="default")
    assert _cycles_until(controller, lambda: _get(api, "c2") is None)
    assert _get(api, "c1") is not None, "released with its ledger entry left behind"
    api.failures.clear()
    assert _cycles_until(controller, lambda: _get(api, "c1") is None)


# -- the gate lifts and the template keeper ------------------------------------------------------


@pytest.mark.parametrize("error", sorted(ERRORS))
def test_a_gate_that_cannot_be_lifted_delays_only_its_pod(
    api: FakeApi, controller: V1Controller, error: str
) -> None:
    _node(api, "n1", 2)  # type: ignore[arg-type]
    for name in ("a", "b"):
        _claim(api, name)
        _gated(api, f"p{name}", name)
    api.fail("patch", "pods", ERRORS[error]("patch pods pa"), name="pa")

    def gates(pod: str) -> list[Obj]:
        found = api.get(r.PODS, pod, namespace="default")
        return list((found.get("spec") or {}).get("schedulingGates") or [])

    assert _cycles_until(controller, lambda: not gates("pb"))
    assert gates("pa") and v1inputs.is_allocated(_get(api, "a") or {})
    api.failures.clear()
    assert _cycles_until(controller, lambda: not gates("pa"))


def test_a_template_the_server_could_not_create_now_is_tried_at_the_next_cycle(
    api: FakeApi,
) -> None:
    from drasat.controller.extended import TemplateKeeper

    keeper = TemplateKeeper(api, recheck_s=60)
    name = extended.template_name(1)
    pods = [{"metadata": {"name": f"p{i}", "namespace": ns}, "spec": {"resourceClaims": [
        {"name": "gpu", "resourceClaimTemplateName": name}]}}
        for i, ns in enumerate(("busy", "closing"))]  # fmt: skip
    api.fail("create", "resourceclaimtemplates", too_many_requests(), times=1)
    api.fail("create", "resourceclaimtemplates", errors.from_status(403, "Forbidden", "closing"),
             name=name)  # fmt: skip
    assert keeper.ensure(pods) == []  # busy: 429; closing: refused
    api.failures[1].name = "nobody"  # the namespace would accept it now
    # The 429 is tried again at once; the refusal waits for its period.
    assert keeper.ensure(pods) == [f"busy/{name}"]


# -- every verb ----------------------------------------------------------------------------------

#: Every (verb, plural) a cycle of this scenario calls; `test_the_sweep_covers_every_call` keeps
#: it whole, so a new call is swept too.
CALLS = [
    ("create", "events"),
    ("create", "resourceclaimtemplates"),
    ("get", "nodeallocationstates"),
    ("get", "pods"),
    ("get", "resourceclaims"),
    ("patch", "pods"),
    ("patch", "resourceclaims"),
    ("replace", "nodeallocationstates"),
    ("replace_status", "resourceclaims"),
]


def _gated(api: FakeApi, name: str, claim: str) -> Obj:
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "schedulingGates": [{"name": SCHEDULING_GATE}],
        },
    }
    return api.create(r.PODS, body, namespace="default")


def _objects(api: FakeApi) -> None:
    _node(api, "n1", 2)  # type: ignore[arg-type]
    for name in ("a", "b"):
        _claim(api, name)
        _gated(api, f"p{name}", name)
    body = {
        "metadata": {"name": "big", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.drasat.io", "count": 3}}
                ]
            }
        },
    }
    api.create(r.RESOURCE_CLAIMS_V1, body, namespace="default")
    _pod(api, "pbig", "big")
    template = extended.template_name(1)
    api.create(r.PODS, {"metadata": {"name": "pt", "namespace": "default"}, "spec": {
        "containers": [{"name": "c", "image": "x"}],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}]}},
        namespace="default")  # fmt: skip


def _scenario(api: FakeApi, ctl: V1Controller, cycles: int = 3) -> None:
    """Claims placed and their gates lifted, a claim released after its pod left (looked up:
    the cache no longer has it), a pod whose claim is too big refused (its Events), a template
    of the extended-resource conversion made: each step with a few cycles, every cycle returns."""
    with api.unfailing():
        _objects(api)
    for _ in range(cycles):
        _cycle(ctl)
        time.sleep(0.03)
    with api.unfailing():
        pod = api.get(r.PODS, "pa", namespace="default")
        if v1inputs.is_allocated(api.get(r.RESOURCE_CLAIMS_V1, "a", namespace="default")):
            _reserve(api, "a", pod)
        api.delete(r.RESOURCE_CLAIMS_V1, "a", namespace="default")
        api.delete(r.PODS, "pa", namespace="default")
    for _ in range(cycles):
        _cycle(ctl)
        time.sleep(0.03)


def _settled_after(api: FakeApi, ctl: V1Controller) -> None:
    """With the faults gone, the scenario ends as without them."""

    def done() -> bool:
        b = _get(api, "b") or {}
        gates = (api.get(r.PODS, "pb", namespace="default").get("spec") or {}).get(
            "schedulingGates"
        )
        try:
            api.get(r.RESOURCE_CLAIM_TEMPLATES_V1, extended.template_name(1), namespace="default")
        except errors.NotFound:
            return False
        return _get(api, "a") is None and v1inputs.is_allocated(b) and not gates

    assert _cycles_until(ctl, done)


def test_the_sweep_covers_every_call(api: FakeApi, controller: V1Controller) -> None:
    CALLED.clear()
    _scenario(api, controller)
    _settled_after(api, controller)
    assert not CALLED - set(CALLS), sorted(CALLED - set(CALLS))


@pytest.mark.parametrize(("verb", "plural"), CALLS)
def test_no_failing_call_aborts_a_cycle(
    api: FakeApi, controller: V1Controller, verb: str, plural: str
) -> None:
    """Every call of one verb on one kind fails (a 429, a 5xx and a timeout in turn): every
    cycle still returns, and once the API server answers again all is settled."""
    kinds = sorted(ERRORS)
    failure = api.fail(verb, plural, ERRORS[kinds[len(verb + plural) % 3]](f"{verb} {plural}"))
    _scenario(api, controller)
    assert failure.hits or verb == "get", f"{verb} {plural} was never called"
    api.failures.clear()
    _settled_after(api, controller)
