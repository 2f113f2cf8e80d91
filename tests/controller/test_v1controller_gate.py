"""The v1 controller and drasat's scheduling gate (`SCHEDULING_GATE`), on the in-process API
server: a gated pod is allocated, then its gate lifted (after the ledger, the finalizer and the
status); pods with nothing for drasat are let go at once; other owners' gates are never
touched, and a pod another owner holds is not allocated; a refused pod stays gated and says so;
a restart lets go of pods whose claims were allocated before it; without the gate drasat works
as before and says once that pods arrive ungated; without the DeviceTaintRule API it relies on
the gate."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import ctl_slices
import pytest
from ctl_cluster import NS, add_node, t4

from drasat.api.devicemodel import classes
from drasat.api.groups import FINALIZER, SCHEDULING_GATE
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, configuration_for
from drasat.testbed.sim import apiserver

Obj = dict[str, Any]
KUEUE = "kueue.x-k8s.io/admission"
OTHER_DRIVER = "other.example.com"


@pytest.fixture
def server() -> Iterator[apiserver.ApiServer]:
    from drasat.api import crds

    with apiserver.ApiServer.running(crds=crds.all_crds()) as running:
        yield running


@pytest.fixture
def api(server: apiserver.ApiServer) -> Iterator[KubeClient]:
    client = KubeClient(configuration_for(server.url), request_timeout=10)
    for body in classes.device_classes():
        client.create(r.DEVICE_CLASSES_V1, body)
    other = {
        "metadata": {"name": OTHER_DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{OTHER_DRIVER}"'}}]},
    }
    client.create(r.DEVICE_CLASSES_V1, other)
    _node(client, "n1", 1)
    yield client
    client.close()


class Recording:
    """The API, with every write recorded as (verb, plural, name) and optional faults."""

    def __init__(self, api: KubeClient) -> None:
        self.api = api
        self.writes: list[tuple[str, str, str]] = []
        self.reads: list[tuple[str, str]] = []
        #: plural -> called with the body (None for a patch) before that kind's next write.
        self.before: dict[str, Callable[[Obj | None], None]] = {}
        #: DeviceTaintRules answer this error (the kind not served: 404; RBAC: 403).
        self.taint_rules: errors.KubeError | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)

    def _note(self, verb: str, resource: r.Resource, name: str, body: Obj | None = None) -> None:
        if self.taint_rules is not None and resource.plural == r.DEVICE_TAINT_RULES_V1.plural:
            raise self.taint_rules
        hook = self.before.pop(resource.plural, None)
        if hook is not None:
            hook(body)
        self.writes.append((verb, resource.plural, name))

    def get(self, resource: r.Resource, name: str, **kw: Any) -> Obj:
        if self.taint_rules is not None and resource.plural == r.DEVICE_TAINT_RULES_V1.plural:
            raise self.taint_rules
        self.reads.append((resource.plural, name))
        return self.api.get(resource, name, **kw)

    def create(self, resource: r.Resource, body: Obj, **kw: Any) -> Obj:
        self._note("create", resource, str(body["metadata"].get("name")))
        return self.api.create(resource, body, **kw)

    def replace(self, resource: r.Resource, body: Obj) -> Obj:
        self._note("replace", resource, str(body["metadata"]["name"]), body)
        return self.api.replace(resource, body)

    def replace_status(self, resource: r.Resource, body: Obj) -> Obj:
        self._note("status", resource, str(body["metadata"]["name"]))
        return self.api.replace_status(resource, body)

    def patch(self, resource: r.Resource, name: str, patch: Any, **kw: Any) -> Obj:
        self._note("patch", resource, name)
        return self.api.patch(resource, name, patch, **kw)


@pytest.fixture
def recording(api: KubeClient) -> Recording:
    return Recording(api)


@pytest.fixture
def controller(recording: Recording) -> Iterator[Callable[[], V1Controller]]:
    made: list[V1Controller] = []

    def make() -> V1Controller:
        found = V1Controller(recording, V1Config(namespace=NS, batch_window_s=0))  # type: ignore[arg-type]
        found.start(sync_timeout_s=10, cycles=False)
        made.append(found)
        return found

    yield make
    for found in made:
        found.stop()


def _node(api: KubeClient, name: str, gpus: int) -> None:
    api.create(
        r.NODES,
        {
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
        },
    )
    devices = [t4(i) for i in range(gpus)]
    add_node(api, name, devices)
    ctl_slices.publish(api, name, devices)


def _claim(api: KubeClient, name: str, device_class: str = "gpu.drasat.io") -> Obj:
    body = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}
        },
    }
    return api.create(r.RESOURCE_CLAIMS_V1, body, namespace="default")


def _pod(api: KubeClient, name: str, claims: list[str], gates: list[str]) -> Obj:
    body: Obj = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [
                {"name": f"r{i}", "resourceClaimName": c} for i, c in enumerate(claims)
            ],
        },
    }
    if gates:
        body["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    return api.create(r.PODS, body, namespace="default")


def _gates(api: KubeClient, pod: str) -> list[str]:
    spec = api.get(r.PODS, pod, namespace="default").get("spec") or {}
    return [g["name"] for g in spec.get("schedulingGates") or []]


def _claim_of(api: KubeClient, name: str) -> Obj:
    return api.get(r.RESOURCE_CLAIMS_V1, name, namespace="default")


def _allocated(api: KubeClient, name: str) -> bool:
    return bool((_claim_of(api, name).get("status") or {}).get("allocation"))


def _settled(controller: V1Controller, check: Callable[[], Any], timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        controller.cycle()
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _cycles(controller: V1Controller, n: int = 3) -> None:
    for _ in range(n):
        controller.cycle()
        time.sleep(0.1)


def test_a_gated_pod_is_allocated_then_let_go(
    api: KubeClient, recording: Recording, controller: Callable[[], V1Controller]
) -> None:
    _claim(api, "c1")
    _pod(api, "p1", ["c1"], [SCHEDULING_GATE])
    ctl = controller()
    assert _settled(ctl, lambda: not _gates(api, "p1"))
    assert _allocated(api, "c1")
    assert FINALIZER in _claim_of(api, "c1")["metadata"]["finalizers"]
    # The ledger, the finalizer, the status, then the gate.
    order = [(verb, plural) for verb, plural, _ in recording.writes
             if plural in ("nodeallocationstates", "resourceclaims", "pods")]  # fmt: skip
    assert order == [
        ("replace", "nodeallocationstates"),
        ("patch", "resourceclaims"),
        ("status", "resourceclaims"),
        ("patch", "pods"),
    ]
    assert ctl.metrics.gates_lifted._value.get() == 1


def test_pods_of_one_cycle_share_one_ledger_write(
    api: KubeClient, recording: Recording, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n2", 2)
    api.patch(r.NODES, "n1", {"spec": {"unschedulable": True}})  # both pods go to n2
    for i in (1, 2):
        _claim(api, f"c{i}")
        _pod(api, f"p{i}", [f"c{i}"], [SCHEDULING_GATE])
    ctl = controller()
    ctl.cycle()
    assert _gates(api, "p1") == [] and _gates(api, "p2") == []
    writes = [w for w in recording.writes
              if w[1] in ("nodeallocationstates", "resourceclaims", "pods")]  # fmt: skip
    assert writes[0] == ("replace", "nodeallocationstates", "n2")  # one ledger write
    assert [w[:2] for w in writes].count(("replace", "nodeallocationstates")) == 1
    # Each pod's finalizer, status, then gate (the pods go side by side).
    for i in (1, 2):
        mine = [w for w in writes if w[2] in (f"c{i}", f"p{i}")]
        assert mine == [
            ("patch", "resourceclaims", f"c{i}"),
            ("status", "resourceclaims", f"c{i}"),
            ("patch", "pods", f"p{i}"),
        ]
    assert len(writes) == 7


def test_a_device_taken_in_the_ledger_meanwhile_refuses_that_pod_alone(
    api: KubeClient, recording: Recording, controller: Callable[[], V1Controller]
) -> None:
    _node(api, "n2", 2)
    api.patch(r.NODES, "n1", {"spec": {"unschedulable": True}})
    for i in (1, 2):
        _claim(api, f"c{i}")
        _pod(api, f"p{i}", [f"c{i}"], [SCHEDULING_GATE])
    uid = _claim_of(api, "c1")["metadata"]["uid"]

    def take(body: Obj | None) -> None:
        # Right before the cycle's one ledger write, another claim takes c1's device there:
        # the write meets a 409 and, read again, the fresh ledger refuses c1's pod alone.
        assert body is not None
        entries = body["spec"]["allocatedClaims"]
        key, entry = next((k, e) for k, e in entries.items() if k.startswith(uid))
        current = api.get(r.NAS, "n2", namespace=NS)
        foreign = {**entry, "claimInfo": {**entry["claimInfo"], "uid": "foreign"}}
        current["spec"].setdefault("allocatedClaims", {})[f"foreign/{key}"] = foreign
        api.replace(r.NAS, current)

    recording.before["nodeallocationstates"] = take
    ctl = controller()
    ctl.cycle()
    assert _gates(api, "p2") == [] and _allocated(api, "c2")
    assert _gates(api, "p1") == [SCHEDULING_GATE] and not _allocated(api, "c1")
    assert ctl.metrics.faults.labels("LedgerConflict")._value.get() == 1


def test_a_ledger_write_over_a_current_copy_reads_nothing_first(
    api: KubeClient, recording: Recording, controller: Callable[[], V1Controller]
) -> None:
    _claim(api, "c1")
    _pod(api, "p1", ["c1"], [SCHEDULING_GATE])
    ctl = controller()
    recording.reads.clear()
    ctl.cycle()
    assert _allocated(api, "c1") and not _gates(api, "p1")
    assert ("replace", "nodeallocationstates", "n1") in recording.writes
    assert not [x for x in recording.reads if x[0] == "nodeallocationstates"]


def test_a_pod_with_nothing_for_drasat_is_let_go_at_once(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _claim(api, "theirs", OTHER_DRIVER)
    _pod(api, "other-driver", ["theirs"], [SCHEDULING_GATE])
    _pod(api, "no-claims", [], [SCHEDULING_GATE])
    ctl = controller()
    ctl.cycle()
    assert _gates(api, "other-driver") == [] and _gates(api, "no-claims") == []
    assert not _allocated(api, "theirs")


def test_another_owners_gate_is_left_alone_and_holds_drasat_back(
    api: KubeClient, recording: Recording, controller: Callable[[], V1Controller]
) -> None:
    _claim(api, "c1")
    _claim(api, "theirs", OTHER_DRIVER)
    _pod(api, "queued", ["c1"], [KUEUE, SCHEDULING_GATE])
    _pod(api, "queued-other", ["theirs"], [SCHEDULING_GATE, KUEUE])
    ctl = controller()
    _cycles(ctl)
    # Nothing of drasat's in the second pod: drasat's gate goes, Kueue's stays.
    assert _gates(api, "queued-other") == [KUEUE]
    # The first pod is Kueue's to admit: no device is given while it holds the pod.
    assert _gates(api, "queued") == [KUEUE, SCHEDULING_GATE]
    assert not _allocated(api, "c1")
    assert not [w for w in recording.writes if w[1] == "pods" and w[2] == "queued"]
    # Kueue admits it (removes its gate): drasat allocates and lifts its own.
    pod = api.get(r.PODS, "queued", namespace="default")
    pod["spec"]["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    api.replace(r.PODS, pod)
    assert _settled(ctl, lambda: not _gates(api, "queued"))
    assert _allocated(api, "c1")


def test_a_gated_pod_waits_for_its_claim_to_exist(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _pod(api, "early", ["later"], [SCHEDULING_GATE])
    ctl = controller()
    _cycles(ctl)
    assert _gates(api, "early") == [SCHEDULING_GATE]  # its class is not known yet
    _claim(api, "later")
    assert _settled(ctl, lambda: not _gates(api, "early"))
    assert _allocated(api, "later")


def test_a_refused_pod_stays_gated_with_its_reason(
    api: KubeClient, controller: Callable[[], V1Controller]
) -> None:
    _claim(api, "c1")
    _claim(api, "c2")
    _pod(api, "p1", ["c1", "c2"], [SCHEDULING_GATE])  # two GPUs; n1 has one
    ctl = controller()

    def reasons() -> list[str]:
        events = api.list(r.EVENTS, namespace="default").items
        refused = [e for e in events if e.get("reason") == "NotAllocatable"]
        return [e["message"] for e in refused if e["involvedObject"]["kind"] == "Pod"]

    found = _settled(ctl, reasons)
    assert found, "no NotAllocatable Event on the pod"
    assert f"held by drasat's scheduling gate {SCHEDULING_GATE}" in found[0]
    assert _gates(api, "p1") == [SCHEDULING_GATE]
    assert f"scheduling gate {SCHEDULING_GATE}" in ctl.explanations["default/p1"]


def test_a_restart_lets_go_of_pods_allocated_before_it(
    api: KubeClient, controller: Callable[[], V1Controller], monkeypatch: pytest.MonkeyPatch
) -> None:
    _claim(api, "c1")
    _pod(api, "p1", ["c1"], [SCHEDULING_GATE])
    first = controller()
    # The first replica stops between the status write and the gate.
    monkeypatch.setattr(first.gates, "lift", lambda pod, why: False)
    assert _settled(first, lambda: _allocated(api, "c1"))
    first.stop()
    assert _gates(api, "p1") == [SCHEDULING_GATE]
    written = _claim_of(api, "c1")["status"]["allocation"]
    second = controller()
    assert _settled(second, lambda: not _gates(api, "p1"))
    assert _claim_of(api, "c1")["status"]["allocation"] == written  # not allocated again


def test_the_gate_is_lifted_from_a_pod_that_changed_meanwhile(
    api: KubeClient, recording: Recording, controller: Callable[[], V1Controller]
) -> None:
    _claim(api, "theirs", OTHER_DRIVER)
    _pod(api, "p1", ["theirs"], [KUEUE, SCHEDULING_GATE])
    ctl = controller()

    def relabel(_: Obj | None) -> None:  # the pod changes after the snapshot: a 409, a re-read
        pod = api.get(r.PODS, "p1", namespace="default")
        pod["metadata"].setdefault("labels", {})["changed"] = "yes"
        api.replace(r.PODS, pod)

    recording.before["pods"] = relabel
    ctl.cycle()
    pod = api.get(r.PODS, "p1", namespace="default")
    assert [g["name"] for g in pod["spec"]["schedulingGates"]] == [KUEUE]
    assert pod["metadata"]["labels"] == {"changed": "yes"}


def test_ungated_pods_work_as_before_and_are_said_once(
    api: KubeClient, controller: Callable[[], V1Controller], caplog: pytest.LogCaptureFixture
) -> None:
    _node(api, "n2", 1)
    for i in (1, 2):
        _claim(api, f"c{i}")
        _pod(api, f"p{i}", [f"c{i}"], [])
    ctl = controller()
    with caplog.at_level(logging.WARNING, logger="drasat.controller.cycle.gates"):
        assert _settled(ctl, lambda: _allocated(api, "c1") and _allocated(api, "c2"))
        _cycles(ctl, 2)
    said = [m for m in caplog.messages if "without drasat's scheduling gate" in m]
    assert len(said) == 1, said


def test_without_the_taint_rule_api_gated_pods_are_still_drasats(
    api: KubeClient,
    recording: Recording,
    controller: Callable[[], V1Controller],
    caplog: pytest.LogCaptureFixture,
) -> None:
    recording.taint_rules = errors.NotFound("the server could not find the resource", status=404)
    _claim(api, "c1")
    _pod(api, "p1", ["c1"], [SCHEDULING_GATE])
    with caplog.at_level(logging.WARNING, logger="drasat.controller.v1controller"):
        ctl = controller()
    assert any(f"relies on its scheduling gate {SCHEDULING_GATE}" in m for m in caplog.messages)
    assert _settled(ctl, lambda: not _gates(api, "p1"))
    assert _allocated(api, "c1")


def test_a_replica_that_does_not_lead_lifts_no_gate(recording: Recording, api: KubeClient) -> None:
    _claim(api, "theirs", OTHER_DRIVER)
    _pod(api, "p1", ["theirs"], [SCHEDULING_GATE])
    ctl = V1Controller(recording, V1Config(namespace=NS, batch_window_s=0),  # type: ignore[arg-type]
                       may_write=lambda: False)  # fmt: skip
    ctl.start(sync_timeout_s=10, cycles=False)
    try:
        assert ctl.cycle() is False
        assert _gates(api, "p1") == [SCHEDULING_GATE]
        assert not [w for w in recording.writes if w[1] == "pods"]
    finally:
        ctl.stop()


def test_a_taint_rule_it_may_not_keep_is_said_with_the_gate(
    api: KubeClient,
    recording: Recording,
    controller: Callable[[], V1Controller],
    caplog: pytest.LogCaptureFixture,
) -> None:
    recording.taint_rules = errors.KubeError("devicetaintrules is forbidden", status=403)
    with caplog.at_level(logging.ERROR, logger="drasat.controller.v1controller"):
        controller()
    (said,) = [m for m in caplog.messages if "cannot keep DeviceTaintRule" in m]
    assert f"drasat relies on its scheduling gate {SCHEDULING_GATE}" in said
