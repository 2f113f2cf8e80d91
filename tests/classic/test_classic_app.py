"""The wired controller: leader election between two replicas, metrics over HTTP, policy reload."""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from ctl_cluster import add_claim, add_class, add_node, allocated_node, claim, nas_claims, t4, wait

from drasat.classic.controller import for_app
from drasat.controller.app import App, Options
from drasat.controller.policy import PolicySource
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, configuration_for
from drasat.testbed.sim import apiserver

FAST = {"lease_duration_s": 2.0, "renew_deadline_s": 1.5, "retry_period_s": 0.2, "resync_s": 1.0}


class Running:
    def __init__(self, server: apiserver.ApiServer, identity: str, **options: object) -> None:
        self.client = KubeClient(configuration_for(server.url), request_timeout=10)
        opts = Options(metrics_address="127.0.0.1:0", identity=identity, **options)  # type: ignore[arg-type]
        self.app = App(opts, api=self.client, classic=for_app)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.app.run, args=(self.stop,), daemon=True)
        self.thread.start()

    @property
    def leading(self) -> bool:
        return self.app.elector is not None and self.app.elector.leading

    def url(self, path: str) -> str:
        server = wait(lambda: self.app.server, what="metrics server")
        host, port = server.server_address[:2]
        return f"http://{host}:{port}{path}"

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.client.close()


@pytest.fixture
def replicas(server: apiserver.ApiServer) -> Iterator[list[Running]]:
    running: list[Running] = []
    yield running
    for replica in running:
        replica.close()


def test_two_replicas_never_lead_at_once_and_the_second_takes_over(
    server: apiserver.ApiServer, api: KubeClient, replicas: list[Running]
) -> None:
    add_node(api, "node-1", [t4(0), t4(1)])
    add_class(api)
    replicas += [Running(server, f"r{i}", leader_elect=True, **FAST) for i in range(2)]  # type: ignore[arg-type]
    overlap = []
    watching = threading.Event()

    def sample() -> None:
        while not watching.is_set():
            if all(r.leading for r in replicas):
                overlap.append(time.monotonic())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    first = wait(lambda: next((r for r in replicas if r.leading), None), what="a leader")
    add_claim(api, "ns", "c1", mode="Immediate")
    wait(lambda: allocated_node(claim(api, "ns", "c1")), what="first allocation")
    first.close()  # releases the lease
    second = wait(lambda: next((r for r in replicas if r is not first and r.leading), None),
                  timeout=10, what="the other replica leading")  # fmt: skip
    add_claim(api, "ns", "c2", mode="Immediate")
    wait(lambda: allocated_node(claim(api, "ns", "c2")), what="allocation by the new leader")
    watching.set()
    sampler.join()
    assert not overlap, "both replicas led at once"
    assert len(nas_claims(api)) == 2
    lease = api.get(r.LEASES, "drasat-controller", namespace="drasat")
    assert lease["spec"]["holderIdentity"] == second.app.elector.config.identity  # type: ignore[union-attr]


def test_a_follower_does_not_write(
    server: apiserver.ApiServer, api: KubeClient, replicas: list[Running]
) -> None:
    add_node(api, "node-1", [t4(0)])
    add_class(api)
    api.create(r.LEASES, {"metadata": {"name": "drasat-controller", "namespace": "drasat"},
                          "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 3600,
                                   "renewTime": "2999-01-01T00:00:00.000000Z"}})  # fmt: skip
    replicas.append(Running(server, "follower", leader_elect=True, **FAST))  # type: ignore[arg-type]
    add_claim(api, "ns", "c1", mode="Immediate")
    time.sleep(1.0)
    assert not replicas[0].leading
    assert allocated_node(claim(api, "ns", "c1")) is None and not nas_claims(api)


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in metrics")


def test_metrics_health_and_readiness_over_http(
    server: apiserver.ApiServer, api: KubeClient, replicas: list[Running]
) -> None:
    add_node(api, "node-1", [t4(0)])
    add_class(api)
    add_claim(api, "ns", "c1", mode="Immediate")
    add_claim(api, "ns", "bad", mode="Immediate", params="missing")
    replicas.append(Running(server, "solo", **FAST))  # type: ignore[arg-type]
    wait(lambda: allocated_node(claim(api, "ns", "c1")), what="allocation")
    replica = replicas[0]
    with urllib.request.urlopen(replica.url("/healthz"), timeout=5) as answer:
        assert answer.status == 200
    wait(lambda: urllib.request.urlopen(replica.url("/readyz"), timeout=5).status == 200,
         what="ready")  # fmt: skip

    def metrics() -> str:
        with urllib.request.urlopen(replica.url("/metrics"), timeout=5) as answer:
            return str(answer.read().decode())

    text = wait(lambda: (m := metrics()) and "ParametersNotFound" in m and m, what="metrics")
    assert _metric(text, "drasat_controller_allocations_total") == 1
    assert _metric(text, 'drasat_controller_failures_total{reason="ParametersNotFound"}') >= 1
    assert _metric(text, 'drasat_controller_solver_seconds_count{kind="immediate"}') >= 1
    assert _metric(text, "drasat_controller_pending_claims") == 1  # the bad one
    assert "drasat_controller_nas_conflicts_total" in text


def test_nas_conflicts_are_counted(
    server: apiserver.ApiServer, api: KubeClient, replicas: list[Running]
) -> None:
    add_node(api, "node-1", [t4(0)])
    add_class(api)
    server.faults.conflict_on_first_write(plurals=["nodeallocationstates"])
    add_claim(api, "ns", "c1", mode="Immediate")
    replicas.append(Running(server, "solo", **FAST))  # type: ignore[arg-type]
    wait(lambda: allocated_node(claim(api, "ns", "c1")), what="allocation despite a 409")
    assert replicas[0].app.metrics.nas_conflicts._value.get() >= 1


POLICY = """\
apiVersion: policy.drasat.io/v1alpha1
kind: AllocationPolicy
metadata: {{name: prefer}}
spec:
  objective:
  - {{term: preferNode, weight: 10, nodes: [{node}]}}
"""


def test_policy_file_reloads_and_a_bad_one_keeps_the_last_good(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY.format(node="node-b"))
    source = PolicySource.from_file(path)
    assert source.poll() and source.current().objective[0].nodes == ["node-b"]
    assert not source.poll()  # unchanged
    path.write_text(POLICY.format(node="node-b").replace("preferNode", "preferNowhere"))
    with caplog.at_level(logging.ERROR):
        assert not source.poll()
    assert "policy rejected, the last good policy stays in force" in caplog.text
    assert "spec.objective[0].term" in caplog.text and str(path) in caplog.text
    assert source.current().objective[0].nodes == ["node-b"]
    path.write_text(POLICY.format(node="node-a"))
    assert source.poll() and source.current().objective[0].nodes == ["node-a"]


def test_policy_from_a_configmap_steers_placement_and_reloads(
    server: apiserver.ApiServer, api: KubeClient, replicas: list[Running]
) -> None:
    add_node(api, "node-a", [t4(0), t4(1)])
    add_node(api, "node-b", [t4(0), t4(1)])
    add_class(api)
    api.create(r.CONFIGMAPS, {"metadata": {"name": "policy", "namespace": "drasat"},
                              "data": {"policy.yaml": POLICY.format(node="node-b")}})  # fmt: skip
    replicas.append(Running(server, "solo", policy_configmap="policy", **FAST))  # type: ignore[arg-type]
    add_claim(api, "ns", "c1", mode="Immediate")
    assert wait(lambda: allocated_node(claim(api, "ns", "c1")), what="c1") == "node-b"
    configmap = api.get(r.CONFIGMAPS, "policy", namespace="drasat")
    configmap["data"]["policy.yaml"] = POLICY.format(node="node-a")
    api.replace(r.CONFIGMAPS, configmap)
    policy = replicas[0].app.policy
    wait(lambda: policy.current().objective[0].nodes == ["node-a"], what="reload")
    add_claim(api, "ns", "c2", mode="Immediate")
    assert wait(lambda: allocated_node(claim(api, "ns", "c2")), what="c2") == "node-a"


def test_a_crashed_leaders_lease_expires_and_the_other_takes_over(
    server: apiserver.ApiServer, api: KubeClient, replicas: list[Running]
) -> None:
    add_node(api, "node-1", [t4(0)])
    add_class(api)
    replicas += [Running(server, f"r{i}", leader_elect=True, **FAST) for i in range(2)]  # type: ignore[arg-type]
    first = wait(lambda: next((r for r in replicas if r.leading), None), what="a leader")
    assert first.app.elector is not None
    first.app.elector.stop(release=False)  # dies without giving the lease back
    started = time.monotonic()
    wait(lambda: any(r.leading for r in replicas if r is not first), timeout=10, what="takeover")
    assert time.monotonic() - started >= 1.0  # not before the lease (2 s) ran out
    add_claim(api, "ns", "c1", mode="Immediate")
    wait(lambda: allocated_node(claim(api, "ns", "c1")), what="allocation by the new leader")


def test_a_replica_that_loses_its_lease_stops(
    server: apiserver.ApiServer, api: KubeClient, replicas: list[Running]
) -> None:
    replicas.append(Running(server, "solo", leader_elect=True, **FAST))  # type: ignore[arg-type]
    wait(lambda: replicas[0].leading, what="leading")

    def usurp() -> bool:
        # Read-modify-write: the leader may renew the lease between our GET and PUT (409).
        lease = api.get(r.LEASES, "drasat-controller", namespace="drasat")
        lease["spec"].update(holderIdentity="usurper", renewTime="2999-01-01T00:00:00.000000Z",
                             leaseDurationSeconds=3600)  # fmt: skip
        try:
            api.replace(r.LEASES, lease)
        except errors.Conflict:
            return False
        return True

    wait(usurp, what="the lease taken over")
    replicas[0].thread.join(10)
    assert not replicas[0].thread.is_alive() and not replicas[0].leading
