"""The simulated v1 kubelet's device health: it consumes the node plugin's real
`DRAResourceHealth` stream and makes `allocatedResourcesStatus` as the 1.37 kubelet does."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from polling import until

from drasat.nodeplugin import mps, nvml
from drasat.nodeplugin.gen import drahealth_v1_pb2 as pb2
from drasat.nodeplugin.nasstore import MemoryNasStore
from drasat.nodeplugin.plugin import Config, NodePlugin
from drasat.nodeplugin.registration import KubeletApi
from drasat.testbed import simnvml
from drasat.testbed.sim import kubelet, kubelethealth
from drasat.testbed.sim.kubelethealth import ClaimDevice, HealthCache

DRIVER = "gpu.drasat.io"


def _report(*devices: tuple[str, int, str], timeout: int = 0) -> Any:
    return pb2.NodeWatchResourcesResponse(
        devices=[
            pb2.DeviceHealth(
                device=pb2.DeviceIdentifier(pool_name="n1", device_name=name),
                health=health,  # type: ignore[arg-type]
                message=message,
                health_check_timeout_seconds=timeout,
            )
            for name, health, message in devices
        ]
    )


def test_health_service_is_picked_as_the_kubelet_does() -> None:
    both = ["v1.DRAPlugin", "v1alpha1.DRAResourceHealth", "v1.DRAResourceHealth"]
    assert kubelethealth.health_service_for(both) == "v1.DRAResourceHealth"
    assert kubelethealth.health_service_for(["v1alpha1.DRAResourceHealth"]).startswith("v1alpha1")
    assert kubelethealth.health_service_for(["v1.DRAPlugin", "1.0.0"]) == ""


def test_allocated_resources_status_per_container_claim_and_request() -> None:
    now = [100.0]
    cache = HealthCache(clock=lambda: now[0])
    cache.report(DRIVER, _report(("gpu-0", pb2.UNHEALTHY, "GPU G0: critical XID 48"), timeout=10))
    cache.report(DRIVER, _report(("gpu-1", pb2.HEALTHY, "")))
    pod = {
        "spec": {
            "containers": [
                {"name": "a", "image": "x", "resources": {"claims": [{"name": "gpus"}]}},
                {"name": "b", "resources": {"claims": [{"name": "gpus", "request": "second"}]}},
                {"name": "c"},
            ]
        }
    }
    devices = {
        "uid-1": [
            ClaimDevice(DRIVER, ("first",), "n1", "gpu-0", ("k8s.gpu.drasat.io/claim=uid-1",)),
            ClaimDevice(DRIVER, ("second/alt",), "n1", "gpu-1", ()),
            ClaimDevice(DRIVER, ("second",), "n1", "gpu-7", ()),
        ]
    }
    statuses = kubelethealth.container_statuses(
        pod, {"gpus": "uid-1"}, devices, cache, started_at="2026-01-01T00:00:00Z"
    )
    assert [s["name"] for s in statuses] == ["a", "b", "c"]
    assert statuses[0]["allocatedResourcesStatus"] == [
        {
            "name": "claim:gpus",
            "resources": [
                {
                    "resourceID": "k8s.gpu.drasat.io/claim=uid-1",
                    "health": "Unhealthy",
                    "message": "GPU G0: critical XID 48",
                },
                {"resourceID": f"{DRIVER}/n1/gpu-1", "health": "Healthy"},
                {"resourceID": f"{DRIVER}/n1/gpu-7", "health": "Unknown"},  # never reported
            ],
        }
    ]
    # a request's entry lists its devices only (a subrequest counts as its request)
    assert statuses[1]["allocatedResourcesStatus"] == [
        {
            "name": "claim:gpus/second",
            "resources": [
                {"resourceID": f"{DRIVER}/n1/gpu-1", "health": "Healthy"},
                {"resourceID": f"{DRIVER}/n1/gpu-7", "health": "Unknown"},
            ],
        }
    ]
    assert "allocatedResourcesStatus" not in statuses[2]
    now[0] += 11  # gpu-0's own timeout (10 s) passed, gpu-1's default (30 s) not
    assert cache.get(DRIVER, "n1", "gpu-0") == ("Unknown", "")
    assert cache.get(DRIVER, "n1", "gpu-1") == ("Healthy", "")


def test_every_device_of_a_claim_with_one_cdi_device_shows_once() -> None:
    """The kubelet keys the entries by resourceID = the device's first CDI id: drasat gives
    every device of a claim the claim's one CDI device, so a claim shows its first device."""
    cache = HealthCache()
    cache.report(DRIVER, _report(("gpu-0", pb2.HEALTHY, ""), ("gpu-1", pb2.UNHEALTHY, "XID 48")))
    cdi = ("k8s.gpu.drasat.io/claim=u",)
    devices = {"u": [ClaimDevice(DRIVER, ("g",), "n1", f"gpu-{i}", cdi) for i in (0, 1)]}
    pod = {"spec": {"containers": [{"name": "a", "resources": {"claims": [{"name": "c"}]}}]}}
    (status,) = kubelethealth.container_statuses(pod, {"c": "u"}, devices, cache, started_at="")
    assert status["allocatedResourcesStatus"][0]["resources"] == [
        {"resourceID": cdi[0], "health": "Healthy"}
    ]


class _Claims:
    """The plugin's ResourceClaim reader: what the API server would answer."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}

    def read(self, namespace: str, name: str) -> dict[str, Any]:
        return self.objects[(namespace, name)]


@pytest.fixture
def plugin() -> Iterator[NodePlugin]:
    root = Path(tempfile.mkdtemp(prefix="klh-", dir="/tmp"))
    sim = simnvml.SimulatedNvml("2xA100-40GB,mig=0")
    config = Config(
        node_name="n1",
        cdi_root=root / "cdi",
        plugin_dir=root / "p",
        registry_dir=root / "r",
        state_dir=root / "s",
        gc_interval_s=0,
        health_wait_ms=50,
        kubelet_api=KubeletApi.structured,
    )
    node = NodePlugin(
        config,
        lib=nvml.NvmlDeviceLib(sim, run=sim.run),
        store=MemoryNasStore(node="n1", namespace="drasat"),
        mps_runner=mps.RecordingRunner(),
        claim_reader=_Claims(),
    )
    node.start()
    node.sim = sim  # type: ignore[attr-defined]
    yield node
    node.stop(grace_s=0)
    shutil.rmtree(root, ignore_errors=True)


def test_the_watch_follows_the_plugins_stream(plugin: Any) -> None:
    cache = HealthCache()
    changes = threading.Event()
    watch = kubelethealth.HealthWatch(
        DRIVER,
        str(plugin.config.dra_socket),
        "v1.DRAResourceHealth",
        cache,
        changes.set,
        retry_s=0.1,
    ).start()
    try:
        assert until(lambda: cache.get(DRIVER, "n1", "gpu-0")[0] == "Healthy")
        mig = "gpu-0-mig-1g5gb-19-0"
        assert cache.get(DRIVER, "n1", mig)[0] == "Healthy"
        assert changes.is_set()
        plugin.sim.inject_xid(plugin.sim.gpus[0].uuid, 48)
        assert until(lambda: cache.get(DRIVER, "n1", mig)[0] == "Unhealthy")
        assert "XID 48" in cache.get(DRIVER, "n1", "gpu-0")[1]
        assert cache.get(DRIVER, "n1", "gpu-1")[0] == "Healthy"
        plugin.health_board.close()  # the stream ends: the kubelet forgets the driver's health
        assert until(lambda: cache.get(DRIVER, "n1", "gpu-1")[0] == "Unknown")
    finally:
        watch.stop()
    assert watch.reports >= 2


class _Api:
    """The API server as far as the kubelet uses it here: one pod, its claim, status patches."""

    def __init__(self, pod: dict[str, Any], claim: dict[str, Any]) -> None:
        self.pod = pod
        self.claim = claim
        self.patches: list[dict[str, Any]] = []

    def list(self, url: str, **query: str) -> dict[str, Any]:
        return {"items": [self.pod]}

    def get(self, url: str) -> dict[str, Any]:
        return self.claim

    def merge_patch(self, url: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patches.append(patch)
        self.pod.setdefault("status", {}).update(patch["status"])
        return self.pod

    def close_watches(self) -> None:
        pass


def test_the_v1_kubelet_shows_an_xid_in_the_pods_status(plugin: Any) -> None:
    """The whole path in one process: the kubelet registers the plugin, prepares the pod's claim
    over the DRA socket, watches the health stream; an XID on the claim's GPU shows up as
    Unhealthy in the pod's allocatedResourcesStatus."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "default", "name": "claim", "uid": "claim-uid"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}],
        },
    }
    pod = {
        "metadata": {"namespace": "default", "name": "p", "uid": "pod-uid"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "ctr", "image": "x", "resources": {"claims": [{"name": "g"}]}}],
            "resourceClaims": [{"name": "g", "resourceClaimName": "claim"}],
        },
    }
    api = _Api(pod, claim)
    plugin.claim_reader.objects[("default", "claim")] = claim
    kl = kubelet.Kubelet(
        api,  # type: ignore[arg-type]
        node="n1",
        registry_dir=plugin.config.registry_dir,
        cdi_root=plugin.config.cdi_root,
        api=kubelet.DraApi.v1,
        health_retry=0.1,
    )
    cdi_id = "k8s.gpu.drasat.io/claim=claim-uid-gpu-0"  # the device's own CDI id

    def shown() -> list[Any]:
        kl.run_once()
        statuses = (api.pod.get("status") or {}).get("containerStatuses") or []
        return [
            r
            for s in statuses
            for e in s.get("allocatedResourcesStatus", [])
            for r in e["resources"]
        ]

    try:
        assert until(lambda: shown() == [{"resourceID": cdi_id, "health": "Healthy"}]), (
            kl.reasons,
            api.patches,
        )
        assert kl.plugins[DRIVER].health_service == "v1.DRAResourceHealth"
        assert api.pod["status"]["phase"] == "Running"
        plugin.sim.inject_xid(plugin.sim.gpus[0].uuid, 48)
        assert until(lambda: shown()[0]["health"] == "Unhealthy")
        (resource,) = shown()
        assert "critical XID 48" in resource["message"]
        entry = api.pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"][0]
        assert entry["name"] == "claim:g"
    finally:
        kl.stop()
    assert not [w for w in kl.health_watches.values()]
