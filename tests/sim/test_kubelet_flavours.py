"""What the simulated kubelet's two flavours (classic, v1) register and call, without a cluster
(the v1 flavour end to end: tests/e2e/test_e2e_kubelet.py)."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path

from drasat.testbed.sim import kubelet
from drasat.testbed.sim.kubelet import DraApi


def test_the_service_each_flavour_calls() -> None:
    both = ["v1.DRAPlugin", "v1beta1.DRAPlugin", "1.0.0"]
    assert kubelet.service_for(DraApi.v1, both) == "v1"
    assert kubelet.service_for(DraApi.v1, ["v1beta1.DRAPlugin"]) == "v1beta1"
    assert kubelet.service_for(DraApi.v1, ["1.0.0"]) is None  # a classic-only plugin
    assert kubelet.service_for(DraApi.classic, both) == "v1alpha3"
    assert kubelet.service_for(DraApi.classic, ["v1.DRAPlugin"]) is None


def test_the_drivers_called_for_a_claim() -> None:
    classic = {"status": {"driverName": "gpu.drasat.io", "allocation": {"resourceHandles": []}}}
    assert kubelet.claim_drivers(DraApi.classic, classic) == ("gpu.drasat.io",)
    results = [
        {"request": "a", "driver": "gpu.drasat.io", "pool": "n", "device": "gpu-0"},
        {"request": "b", "driver": "nic.example.com", "pool": "n", "device": "eth0"},
        {"request": "c", "driver": "gpu.drasat.io", "pool": "n", "device": "gpu-1"},
    ]
    current = {"status": {"allocation": {"devices": {"results": results}}}}
    assert kubelet.claim_drivers(DraApi.v1, current) == ("gpu.drasat.io", "nic.example.com")


def test_a_started_pod_keeps_its_other_conditions() -> None:
    pod = {"status": {"conditions": [{"type": "PodScheduled", "status": "True"},
                                     {"type": "Ready", "status": "False"}]}}  # fmt: skip
    status = kubelet._running_status(pod)
    assert status["phase"] == "Running"
    assert {(c["type"], c["status"]) for c in status["conditions"]} == {
        ("PodScheduled", "True"),
        ("ContainersReady", "True"),
        ("Initialized", "True"),
        ("Ready", "True"),
    }


class _NoPods:
    def list(self, *_args: object, **_kwargs: object) -> dict[str, list[object]]:
        return {"items": []}


def test_a_restarted_kubelet_unprepares_the_claims_of_pods_deleted_meanwhile(
    tmp_path: Path,
) -> None:
    """As the real kubelet's DRA checkpoint: the claims handed to NodePrepareResources outlive
    the kubelet process, so a kubelet killed while a pod was deleted unprepares its claims when
    it starts again (issue 29's soak found MIG devices and CDI specs left without it)."""
    checkpoint = tmp_path / "claims.json"
    claim = kubelet.ClaimRef("ns", "c", "uid-1", ("gpu.drasat.io",))
    first = kubelet.Kubelet(
        _NoPods(), node="n", registry_dir=tmp_path, cdi_root=tmp_path, checkpoint=checkpoint
    )  # type: ignore[arg-type]
    first._attempted["pod-1"] = [claim]
    first._save_checkpoint()
    restarted = kubelet.Kubelet(
        _NoPods(), node="n", registry_dir=tmp_path, cdi_root=tmp_path, checkpoint=checkpoint
    )  # type: ignore[arg-type]
    calls: list[tuple[str, list[str], bool]] = []

    def call(driver: str, claims: list[kubelet.ClaimRef], *, prepare: bool) -> dict[str, object]:
        calls.append((driver, [c.uid for c in claims], prepare))
        return {c.uid: kubelet.Answer() for c in claims}

    restarted._call = call  # type: ignore[method-assign]
    restarted.run_once()  # the pod is gone from the API server
    assert calls == [("gpu.drasat.io", ["uid-1"], False)]
    assert json.loads(checkpoint.read_text()) == {}


class _CutOnce:
    """The API server restarting mid-answer once (a chunked body read in part), then empty."""

    def __init__(self) -> None:
        self.lists = 0

    def list(self, *_args: object, **_kwargs: object) -> dict[str, list[object]]:
        self.lists += 1
        if self.lists == 1:
            raise http.client.IncompleteRead(b"{", 273)
        return {"items": []}

    def close_watches(self) -> None:
        pass


def test_an_answer_cut_short_by_an_api_server_restart_does_not_end_the_kubelet(
    tmp_path: Path,
) -> None:
    """The chaos soak's kube-apiserver restart cut a pod list mid-body: the loop thread died on
    IncompleteRead and the node's pods never started or stopped again. The real kubelet retries."""
    client = _CutOnce()
    node = kubelet.Kubelet(client, node="n", registry_dir=tmp_path, cdi_root=tmp_path, resync=0.05)  # type: ignore[arg-type]
    node.watched = lambda: []  # type: ignore[method-assign]
    node.start()
    try:
        deadline = time.monotonic() + 10
        while client.lists < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        node.stop()
    assert client.lists >= 2
