"""Faults: 409 on first writes, dropped watches, the server down, the controller killed mid-write.

The workload is CLAIM_OPERATIONS claim creations and deletions (Immediate claims on 3 nodes x 4
GPUs, at most LIVE_MAX alive at once). The controller is killed at random API writes (so between
any two of finalizer / NAS / status writes) and restarted RESTARTS times; the server drops every
watch after a few events, answers 409 to the first write of every object and is down for 2 s.
Afterwards, with the faults off: NAS and claim status agree, no GPU is used twice, every live
claim is allocated (nothing lost) and every deleted claim is gone from NAS and from the API.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
from ctl_classic import FAST
from ctl_cluster import add_class, add_node, allocated_node, device_users, nas_claims, t4, wait

from drasat.classic.controller import Controller
from drasat.kube import errors
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, configuration_for
from drasat.testbed.sim import apiserver

CLAIM_OPERATIONS = 200
RESTARTS = 8
LIVE_MAX = 10
SEED = 20261202


class Killed(BaseException):
    """The process died: not an Exception, so no handler in the controller catches it."""


class Mortal:
    """An Api that dies at its `fatal`-th write, and stays dead."""

    WRITES = ("create", "replace", "replace_status", "patch", "delete")

    def __init__(self, api: KubeClient, fatal: int) -> None:
        self._api, self._fatal, self._writes, self.dead = api, fatal, 0, False
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._api, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                if name in self.WRITES and not self.dead:
                    self._writes += 1
                    self.dead = self._writes >= self._fatal
                if self.dead:
                    raise Killed(name)
            return method(*args, **kwargs)

        return call


def _retrying(action: Any) -> Any:
    for _ in range(200):
        try:
            return action()
        except errors.Unavailable:
            time.sleep(0.05)
    raise AssertionError("the server never came back")


# The killed controllers' threads end with Killed, as a dying process's would.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_faults_and_restarts_leave_nas_and_claims_consistent(
    server: apiserver.ApiServer, api: KubeClient
) -> None:
    rng = random.Random(SEED)
    for n in range(3):
        add_node(api, f"node-{n}", [t4(g) for g in range(4)])
    add_class(api)
    server.faults.conflict_on_first_write()
    server.faults.drop_watches_after(7)

    clients: list[KubeClient] = []
    controllers: list[Controller] = []

    def start(fatal: int | None) -> Controller:
        client = KubeClient(configuration_for(server.url), request_timeout=5)
        clients.append(client)
        wrapped: Any = Mortal(client, fatal) if fatal is not None else client
        controller = Controller(wrapped, FAST)
        controller.start(sync_timeout_s=5)
        controllers.append(controller)
        return controller

    live: list[str] = []
    deleted: list[str] = []
    restarts = 0
    controller = start(rng.randint(3, 40))
    try:
        # The kills come from the controller's writes, which a loaded machine makes fewer of
        # while the operations run: the workload goes on past CLAIM_OPERATIONS (up to four times
        # as many) until every restart has happened.
        op = -1
        while (op := op + 1) < CLAIM_OPERATIONS or (
            restarts < RESTARTS and op < 4 * CLAIM_OPERATIONS
        ):
            if op == CLAIM_OPERATIONS // 2:
                server.faults.down_for(2.0)
            if live and (len(live) >= LIVE_MAX or rng.random() < 0.45):
                name = live.pop(rng.randrange(len(live)))
                _retrying(lambda n=name: api.delete(r.RESOURCE_CLAIMS, n, namespace="load"))
                deleted.append(name)
            else:
                name = f"c{op}"
                body = {"metadata": {"name": name, "namespace": "load"},
                        "spec": {"resourceClassName": "gpu.drasat.io",
                                 "allocationMode": "Immediate"}}  # fmt: skip
                _retrying(lambda b=body: api.create(r.RESOURCE_CLAIMS, b))
                live.append(name)
            time.sleep(rng.uniform(0.0, 0.02))
            if restarts < RESTARTS and controller.api.dead:  # type: ignore[attr-defined]
                controller.stop()
                restarts += 1
                controller = start(rng.randint(3, 40) if restarts < RESTARTS else None)
        assert restarts == RESTARTS, f"only {restarts} kills happened; lower the fatal range"
        if getattr(controller.api, "dead", False):
            controller.stop()
            controller = start(None)

        # The faults end; the last controller must converge.
        server.faults.reset()
        server.faults.drop_watches_now()

        def converged() -> bool:
            claims = {c["metadata"]["name"]: c for c in
                      api.list(r.RESOURCE_CLAIMS, namespace="load").items}  # fmt: skip
            if set(claims) != set(live):
                return False  # deleted claims still waiting for their finalizer
            in_nas = nas_claims(api)
            uids = {c["metadata"]["uid"] for c in claims.values()}
            if set(in_nas) != uids:
                return False
            return all(allocated_node(c) == in_nas[c["metadata"]["uid"]][0]
                       for c in claims.values())  # fmt: skip

        wait(converged, timeout=30, what="NAS and claim status to agree")
        assert len(controller.holds) == 0  # no tentative hold leaked
        assert all(len(users) == 1 for users in device_users(api).values()), "GPU used twice"
        assert len(deleted) > 50 and len(live) <= LIVE_MAX
    finally:
        for c in controllers:
            c.stop()
        for client in clients:
            client.close()


def test_negotiation_survives_conflicts_and_dropped_watches(
    server: apiserver.ApiServer, api: KubeClient
) -> None:
    from ctl_classic import Scheduler
    from ctl_cluster import add_claim, add_pod

    for n in range(2):
        add_node(api, f"node-{n}", [t4(g) for g in range(2)])
    add_class(api)
    server.faults.conflict_on_first_write(per_version=True)  # every change meets one 409
    server.faults.drop_watches_after(3)
    client = KubeClient(configuration_for(server.url), request_timeout=5)
    controller = Controller(client, FAST)
    controller.start(sync_timeout_s=5)
    try:
        nodes = []
        for i in range(4):
            add_claim(api, "ns", f"c{i}")
            add_pod(api, "ns", f"p{i}", {"gpu": f"c{i}"})
            scheduler = Scheduler(api, ["node-0", "node-1"], timeout=30)
            nodes.append(
                _retrying_conflicts(lambda i=i, s=scheduler: s.schedule("ns", f"p{i}", ["gpu"]))
            )
        assert sorted(nodes) == ["node-0", "node-0", "node-1", "node-1"]
        assert len(nas_claims(api)) == 4
        assert all(len(users) == 1 for users in device_users(api).values())
        assert controller.metrics.nas_conflicts._value.get() >= 1
    finally:
        controller.stop()
        client.close()


def _retrying_conflicts(action: Any) -> Any:
    """The test's own scheduler writes meet the injected 409s too: retry them."""
    for _ in range(20):
        try:
            return action()
        except errors.Conflict:
            time.sleep(0.05)
    raise AssertionError("conflicts never ended")
