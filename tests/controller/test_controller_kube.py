"""drasat.kube against the in-memory API: paths, errors, pacing, NAS updates, informers, events."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from ctl_kubefake import FakeApi

from drasat.kube import errors, events, informer, nasclient, resources, snapshot
from drasat.kube.client import RateLimiter


@pytest.mark.parametrize(
    ("resource", "kwargs", "path"),
    [
        (resources.PODS, {"namespace": "a", "name": "p"}, "/api/v1/namespaces/a/pods/p"),
        (resources.NODES, {"name": "n"}, "/api/v1/nodes/n"),
        (resources.RESOURCE_CLAIMS, {}, "/apis/resource.k8s.io/v1alpha2/resourceclaims"),
        (
            resources.NAS,
            {"namespace": "d", "name": "n1", "subresource": "status"},
            "/apis/nas.gpu.drasat.io/v1alpha1/namespaces/d/nodeallocationstates/n1/status",
        ),
        (
            resources.device_class_parameters(),
            {"name": "x"},
            "/apis/gpu.drasat.io/v1alpha1/deviceclassparameters/x",
        ),
    ],
)
def test_paths(resource: resources.Resource, kwargs: dict[str, Any], path: str) -> None:
    assert resource.path(**kwargs) == path


def test_cluster_scoped_kind_refuses_a_namespace() -> None:
    with pytest.raises(ValueError, match="cluster-scoped"):
        resources.RESOURCE_CLASSES.path(namespace="x", name="y")


def test_parameters_lookup_accepts_nvidia_group_and_refuses_others() -> None:
    nvidia = resources.parameters("gpu.resource.nvidia.com", "GpuClaimParameters")
    assert nvidia is not None and nvidia.plural == "gpuclaimparameters"
    assert resources.parameters("example.com", "GpuClaimParameters") is None
    assert resources.parameters("gpu.drasat.io", "Unknown") is None


@pytest.mark.parametrize(
    ("status", "reason", "cls"),
    [
        (404, "NotFound", errors.NotFound),
        (409, "Conflict", errors.Conflict),
        (409, "AlreadyExists", errors.AlreadyExists),
        (410, "Expired", errors.Gone),
        (422, "Invalid", errors.Invalid),
        (503, "ServiceUnavailable", errors.Unavailable),
        (429, "TooManyRequests", errors.Unavailable),
        (403, "Forbidden", errors.KubeError),
    ],
)
def test_status_to_exception(status: int, reason: str, cls: type[errors.KubeError]) -> None:
    error = errors.from_status(status, reason, "msg")
    assert type(error) is cls and error.status == status and "msg" in str(error)


def test_rate_limiter_lets_a_burst_through_then_paces() -> None:
    now = [0.0]
    limiter = RateLimiter(10.0, 3, clock=lambda: now[0], sleep=lambda s: None)
    assert [limiter.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.reserve() == pytest.approx(0.1)
    now[0] += 1.0  # refills to the burst, not beyond
    assert [limiter.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert RateLimiter(0, 1).reserve() == 0.0


def _nas_api() -> FakeApi:
    api = FakeApi()
    api.create(resources.NAS, nasclient.new(namespace="drasat", node="n1"))
    return api


def test_nas_update_retries_on_conflict_and_calls_mutate_again() -> None:
    api = _nas_api()
    api.conflict_first = True
    seen: list[str] = []
    conflicts: list[int] = []

    def mutate(obj: dict[str, Any]) -> dict[str, Any]:
        seen.append(obj["metadata"]["resourceVersion"])
        obj["spec"]["allocatedClaims"]["u1"] = {"x": 1}
        return obj

    written = nasclient.update(
        api,
        namespace="drasat",
        node="n1",
        mutate=mutate,
        sleep=lambda s: None,
        on_conflict=lambda: conflicts.append(1),
    )
    assert len(seen) == 2 and conflicts == [1]
    assert written["spec"]["allocatedClaims"]["u1"] == {"x": 1}


def test_nas_update_no_change_writes_nothing() -> None:
    api = _nas_api()
    before = api.version
    nasclient.update(api, namespace="drasat", node="n1", mutate=lambda obj: None)
    assert api.version == before


def test_nas_update_gives_up_after_bounded_conflicts() -> None:
    api = _nas_api()

    def racing(obj: dict[str, Any]) -> dict[str, Any]:
        api.patch(resources.NAS, "n1", {"metadata": {"labels": {"t": str(time.time())}}},
                  namespace="drasat")  # fmt: skip
        return obj

    with pytest.raises(nasclient.TooManyConflicts):
        nasclient.update(api, namespace="drasat", node="n1", mutate=racing, attempts=3,
                   sleep=lambda s: None)  # fmt: skip


def _wait(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_informer_follows_changes_across_dropped_watches() -> None:
    api = FakeApi()
    seen: list[tuple[str, str]] = []
    inf = informer.Informer(
        api,
        resources.PODS,
        handler=lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
        backoff_s=(0.01, 0.05),
    )
    api.create(resources.PODS, {"metadata": {"name": "a", "namespace": "x"}})
    inf.start()
    try:
        assert inf.wait_synced(5)
        api.drop_watches()
        api.create(resources.PODS, {"metadata": {"name": "b", "namespace": "x"}})
        api.down = True
        api.drop_watches()
        time.sleep(0.05)
        api.down = False
        api.delete(resources.PODS, "a", namespace="x")
        _wait(lambda: inf.get("x/a") is None and inf.get("x/b") is not None)
        assert ("ADDED", "b") in seen and ("DELETED", "a") in seen
        assert inf.get("x/b") is not None and inf.get("x/b")["kind"] == "Pod"  # type: ignore[index]
    finally:
        inf.stop()


def test_informer_relists_when_the_watch_is_gone() -> None:
    api = FakeApi(history=2)
    inf = informer.Informer(api, resources.PODS, handler=lambda k, o: None, backoff_s=(0.01, 0.05))
    inf.start()
    try:
        assert inf.wait_synced(5)
        api.down = True
        api.drop_watches()
        api.down = False
        for i in range(5):  # more than the history holds: a resume answers 410
            api.create(resources.PODS, {"metadata": {"name": f"p{i}", "namespace": "x"}})
        _wait(lambda: len(inf.items()) == 5)
    finally:
        inf.stop()


def test_events_name_the_object_and_are_deduplicated() -> None:
    api = FakeApi()
    now = [datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)]
    recorder = events.EventRecorder(api, component="c", ttl_s=60, clock=lambda: now[0])
    claim = {
        "apiVersion": "resource.k8s.io/v1alpha2",
        "kind": "ResourceClaim",
        "metadata": {"name": "c1", "namespace": "ns", "uid": "u"},
    }
    assert recorder.warning(claim, "BadParameters", "spec.count: must be >= 1")
    assert not recorder.warning(claim, "BadParameters", "spec.count: must be >= 1")
    now[0] += datetime.timedelta(seconds=61)
    assert recorder.warning(claim, "BadParameters", "spec.count: must be >= 1")
    written = api.list(resources.EVENTS, namespace="ns").items
    assert len(written) == 2
    assert written[0]["involvedObject"]["name"] == "c1"
    assert written[0]["involvedObject"]["kind"] == "ResourceClaim"
    assert written[0]["type"] == "Warning" and written[0]["reason"] == "BadParameters"


def test_events_never_raise_when_the_server_is_down() -> None:
    api = FakeApi()
    api.down = True
    recorder = events.EventRecorder(api, component="c")
    assert not recorder.warning({"metadata": {"name": "x"}}, "R", "m")


def test_snapshot_reads_every_kind_and_skips_unserved_ones() -> None:
    api = FakeApi()
    api.create(resources.NAS, nasclient.new(namespace="drasat", node="n1"))
    api.create(resources.RESOURCE_CLASSES, {"metadata": {"name": "gpu.drasat.io"},
                                           "driverName": "gpu.drasat.io"})  # fmt: skip
    real_list = api.list

    def list_or_404(resource: resources.Resource, **kwargs: Any) -> Any:
        if resource.group == "nas.gpu.resource.nvidia.com":
            raise errors.NotFound("no such kind", status=404)
        return real_list(resource, **kwargs)

    api.list = list_or_404  # type: ignore[method-assign]
    docs = snapshot.read_cluster(api, nas_namespace="drasat")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["NodeAllocationState", "ResourceClass"]
    assert all("apiVersion" in d for d in docs)


def test_snapshot_over_http_gives_loader_documents(tmp_path: Any) -> None:
    from drasat.api import crds
    from drasat.kube.client import KubeClient, configuration_for
    from drasat.testbed.sim import apiserver

    with apiserver.ApiServer.running(crds=crds.all_crds()) as server:
        api = KubeClient(configuration_for(server.url))
        api.create(resources.NAS, nasclient.new(namespace="drasat", node="n1"))
        api.create(resources.NAS, nasclient.new(namespace="elsewhere", node="n2"))
        params = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"count": 2}}
        api.create(resources.gpu_claim_parameters(), params)
        api.create(resources.RESOURCE_CLAIMS, {"metadata": {"name": "c", "namespace": "ns"},
                                               "spec": {"resourceClassName": "x"}})  # fmt: skip
        before = server.api.store.resource_version
        documents = snapshot.read_cluster_documents(api, nas_namespace="drasat")
        assert server.api.store.resource_version == before  # nothing written
        api.close()
    described = sorted(d.describe() for d in documents)
    assert described == ["GpuClaimParameters ns/p", "NodeAllocationState drasat/n1",
                         "ResourceClaim ns/c"]  # fmt: skip
    assert all(d.source == "cluster" and "managedFields" not in d.data["metadata"]
               for d in documents)  # fmt: skip


def test_the_client_keeps_a_connection_for_every_concurrent_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The controller's watches and its parallel writes share one client: urllib3's default
    pool of 10 connections dropped the extra ones after each request ("Connection pool is full,
    discarding connection"), so under churn each write paid for a new connection."""
    import logging
    import threading

    from drasat.api import crds
    from drasat.kube.client import KubeClient, configuration_for
    from drasat.testbed.sim import apiserver

    with apiserver.ApiServer.running(crds=crds.all_crds()) as server:
        api = KubeClient(configuration_for(server.url))
        start = threading.Barrier(24)

        def read() -> None:
            start.wait()
            for _ in range(3):
                api.list(resources.PODS, namespace="default")

        threads = [threading.Thread(target=read) for _ in range(24)]
        with caplog.at_level(logging.WARNING, logger="urllib3.connectionpool"):
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        api.close()
    assert not [r for r in caplog.records if "pool is full" in r.getMessage()]
