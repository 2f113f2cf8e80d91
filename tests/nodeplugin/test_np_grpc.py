"""End to end over real unix sockets: a simulated kubelet registers the plugin, then calls
NodePrepareResources / NodeUnprepareResources with a real grpc client."""

from __future__ import annotations

import json
import stat
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from npfixtures import Claims, Node, gpu_allocation, gpu_instances, mig_allocation, v1_claim

from drasat.api.nas import NasStatus
from drasat.nodeplugin.gen import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1alpha3_pb2,
    dra_v1alpha3_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from drasat.nodeplugin.registration import KubeletApi


class Kubelet:
    """The kubelet's side: plugin watcher registration, then DRA calls on the announced endpoint."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.channels: list[grpc.Channel] = []
        reg = self._channel(str(node.config.registration_socket))
        self.registration = pluginregistration_v1_pb2_grpc.RegistrationStub(reg)

    def _channel(self, path: str) -> grpc.Channel:
        channel = grpc.insecure_channel(f"unix://{path}")
        grpc.channel_ready_future(channel).result(timeout=10)
        self.channels.append(channel)
        return channel

    def register(self) -> pluginregistration_v1_pb2.PluginInfo:
        info = self.registration.GetInfo(pluginregistration_v1_pb2.InfoRequest(), timeout=10)
        self.registration.NotifyRegistrationStatus(
            pluginregistration_v1_pb2.RegistrationStatus(plugin_registered=True), timeout=10
        )
        channel = self._channel(info.endpoint)
        self.v1alpha3 = dra_v1alpha3_pb2_grpc.NodeStub(channel)
        self.v1beta1 = dra_v1beta1_pb2_grpc.DRAPluginStub(channel)
        self.v1 = dra_v1_pb2_grpc.DRAPluginStub(channel)
        return info

    def prepare(self, *uids: str, handle: str = "") -> Any:
        claims = [
            dra_v1alpha3_pb2.Claim(namespace="default", name="claim", uid=u, resource_handle=handle)
            for u in uids
        ]
        request = dra_v1alpha3_pb2.NodePrepareResourcesRequest(claims=claims)
        return self.v1alpha3.NodePrepareResources(request, timeout=30)

    def unprepare(self, *uids: str) -> Any:
        claims = [dra_v1alpha3_pb2.Claim(namespace="default", name="claim", uid=u) for u in uids]
        request = dra_v1alpha3_pb2.NodeUnprepareResourcesRequest(claims=claims)
        return self.v1alpha3.NodeUnprepareResources(request, timeout=30)

    def close(self) -> None:
        for channel in self.channels:
            channel.close()


@pytest.fixture
def served(node_factory: Any) -> Iterator[Any]:
    started: list[tuple[Node, Kubelet]] = []

    def start(fleet: str, claim_reader: Any = None, **config: Any) -> tuple[Node, Kubelet]:
        node = node_factory(fleet, **config)
        node.plugin.claim_reader = claim_reader
        node.plugin.start()
        kubelet = Kubelet(node)
        kubelet.register()
        started.append((node, kubelet))
        return node, kubelet

    yield start
    for node, kubelet in started:
        kubelet.close()
        node.plugin.stop(grace_s=0)


def test_registration_info_and_socket_permissions(served: Any) -> None:
    node, kubelet = served("T4")
    info = kubelet.registration.GetInfo(pluginregistration_v1_pb2.InfoRequest())
    assert (info.type, info.name) == ("DRAPlugin", "gpu.drasat.io")
    assert info.endpoint == str(node.config.plugin_dir / "gpu.drasat.io" / "dra.sock")
    assert list(info.supported_versions) == ["1.0.0"]
    assert node.plugin.registration.registered.is_set()
    mode = stat.S_IMODE(node.config.dra_socket.parent.stat().st_mode)
    assert mode & 0o007 == 0  # not readable by other users
    assert node.store.read().status is NasStatus.Ready


def test_structured_registration_versions(served: Any) -> None:
    _, kubelet = served("T4", kubelet_api=KubeletApi.structured)
    info = kubelet.registration.GetInfo(pluginregistration_v1_pb2.InfoRequest())
    assert list(info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]


def test_refused_registration_is_remembered(served: Any) -> None:
    node, kubelet = served("T4")
    kubelet.registration.NotifyRegistrationStatus(
        pluginregistration_v1_pb2.RegistrationStatus(plugin_registered=False, error="bad version")
    )
    assert node.plugin.registration.last_error == "bad version"


def test_prepare_unprepare_exclusive_and_mig(served: Any) -> None:
    node, kubelet = served("2xA100-40GB,mig=1")
    node.allocate("gpu-claim", gpu_allocation("gpu-claim", node.gpu(0)))
    node.allocate("mig-claim", mig_allocation("mig-claim", node.gpu(1), "3g.20gb", 4, 4))
    response = kubelet.prepare("gpu-claim", "mig-claim")
    assert {u: (list(r.cdi_devices), r.error) for u, r in response.claims.items()} == {
        "gpu-claim": (["k8s.gpu.drasat.io/claim=gpu-claim"], ""),
        "mig-claim": (["k8s.gpu.drasat.io/claim=mig-claim"], ""),
    }
    assert gpu_instances(node, 1) == [(4, 4)]
    again = kubelet.prepare("mig-claim")  # idempotent
    assert list(again.claims["mig-claim"].cdi_devices) == ["k8s.gpu.drasat.io/claim=mig-claim"]
    done = kubelet.unprepare("gpu-claim", "mig-claim")
    assert {u: r.error for u, r in done.claims.items()} == {"gpu-claim": "", "mig-claim": ""}
    assert gpu_instances(node, 1) == []
    assert kubelet.unprepare("mig-claim").claims["mig-claim"].error == ""


def test_per_claim_errors_and_the_plugin_keeps_serving(served: Any) -> None:
    node, kubelet = served("2xA100-40GB,mig=1")
    node.allocate("ok", gpu_allocation("ok", node.gpu(0)))
    node.allocate("busy", mig_allocation("busy", node.gpu(1), "3g.20gb", 0, 4))
    node.allocate("overlap", mig_allocation("overlap", node.gpu(1), "1g.5gb", 2, 1))
    node.allocate("ghost", gpu_allocation("ghost", "GPU-not-here"))
    response = kubelet.prepare("ok", "busy", "overlap", "ghost", "unknown")
    errors = {u: r.error for u, r in response.claims.items()}
    assert errors["ok"] == "" and errors["busy"] == ""
    assert "overlaps MIG device gpu-1-mig-3g20gb-9-0" in errors["overlap"]
    assert "in use by claim default/claim (busy)" in errors["overlap"]
    assert "GPU-not-here is not on this node" in errors["ghost"]
    assert "not allocated on node" in errors["unknown"]
    assert list(response.claims["overlap"].cdi_devices) == []
    bad_json = kubelet.prepare("other", handle="{oops")
    assert "resource handle is not valid JSON" in bad_json.claims["other"].error
    assert kubelet.unprepare("ok").claims["ok"].error == ""  # still serving


@pytest.mark.parametrize(("pb2", "stub"), [(dra_v1_pb2, "v1"), (dra_v1beta1_pb2, "v1beta1")])
def test_structured_dra_plugin_services(served: Any, pb2: Any, stub: str) -> None:
    claims = Claims()
    _, kubelet = served("T4", kubelet_api=KubeletApi.structured, claim_reader=claims)
    claims.add(v1_claim("c1", ("gpu", "gpu-node-1", "gpu-0")))
    service = getattr(kubelet, stub)
    request = pb2.NodePrepareResourcesRequest(
        claims=[pb2.Claim(namespace="default", name="claim", uid="c1")]
    )
    response = service.NodePrepareResources(request, timeout=30)
    (device,) = response.claims["c1"].devices
    assert (list(device.request_names), device.pool_name, device.device_name) == (
        ["gpu"],
        "gpu-node-1",
        "gpu-0",
    )
    assert list(device.cdi_device_ids) == ["k8s.gpu.drasat.io/claim=c1-gpu-0"]
    unprepare = pb2.NodeUnprepareResourcesRequest(claims=[pb2.Claim(uid="c1")])
    assert service.NodeUnprepareResources(unprepare, timeout=30).claims["c1"].error == ""


def test_sharing_modes_over_the_socket(served: Any) -> None:
    node, kubelet = served("3xA100-40GB")
    timeslice = {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Medium"}}
    mps = {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25}}
    node.allocate("ts", gpu_allocation("ts", node.gpu(0), sharing=timeslice))
    node.allocate("mps", gpu_allocation("mps", node.gpu(1), sharing=mps))
    node.allocate("share", gpu_allocation("share", node.gpu(2), share={"compute": 20}))
    response = kubelet.prepare("ts", "mps", "share")
    assert {u: r.error for u, r in response.claims.items()} == {"ts": "", "mps": "", "share": ""}
    assert node.sim.gpus[0].time_slice == 2
    # the MPS claim's own daemon, and the daemon of its namespace's shares on the other GPU
    assert sorted(node.daemons().values()) == sorted([(node.gpu(1),), (node.gpu(2),)])
    kubelet.unprepare("ts", "mps", "share")
    assert node.sim.gpus[0].time_slice == 0
    assert node.daemons() == {}


def test_64_concurrent_prepares_and_unprepares(served: Any) -> None:
    node, kubelet = served("8xA100-40GB,mig=all")
    uids = []
    for gpu in range(8):  # 7 x 1g.5gb per GPU, plus 8 whole-GPU share claims = 64 claims
        for start in range(7):
            uid = f"mig-{gpu}-{start}"
            node.allocate(uid, mig_allocation(uid, node.gpu(gpu), "1g.5gb", start, 1))
            uids.append(uid)
    for gpu in range(8):
        uid = f"share-{gpu}"
        node.allocate(uid, gpu_allocation(uid, node.gpu(gpu), share={"compute": 10}))
        uids.append(uid)
    assert len(uids) == 64
    with futures.ThreadPoolExecutor(16) as pool:
        prepared = list(pool.map(lambda u: kubelet.prepare(u).claims[u], uids))
    assert [p.error for p in prepared] == [""] * 64
    assert [list(p.cdi_devices) for p in prepared] == [
        [f"k8s.gpu.drasat.io/claim={u}"] for u in uids
    ]
    migs = node.store.read().spec.preparedClaims
    mig_uuids = [migs[u].mig.devices[0].uuid for u in uids if u.startswith("mig-")]
    assert len(set(mig_uuids)) == 56  # no two claims got the same MIG device
    for uid in uids:  # each claim's CDI spec exposes its own device(s) only
        spec = json.loads(node.state.cdi.path(uid).read_text())
        env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
        own = (
            migs[uid].mig.devices[0].uuid
            if uid.startswith("mig-")
            else migs[uid].gpu.devices[0].uuid
        )
        assert (env["DRASAT_GPU_UUIDS"], env["DRASAT_CLAIM_UID"]) == (own, uid)
    assert all(gpu_instances(node, g) == [(s, 1) for s in range(7)] for g in range(8))
    with futures.ThreadPoolExecutor(16) as pool:
        errors = list(pool.map(lambda u: kubelet.unprepare(u).claims[u].error, uids))
    assert errors == [""] * 64
    assert all(gpu_instances(node, g) == [] for g in range(8))
    assert node.store.read().spec.preparedClaims == {}
    assert node.state.checkpoint.records() == []


def test_optional_claim_and_mig_by_needs_over_the_socket(served: Any) -> None:
    node, kubelet = served("2xA100-40GB,mig=1")
    optional = {"claimInfo": {"namespace": "default", "name": "claim", "uid": "opt"},
                "gpu": {"devices": []}, "optional": True}  # fmt: skip
    node.allocate("opt", optional)
    # A MIG claim stated by needs (memory >= 8Gi): the controller resolved it to 2g.10gb at 2.
    node.allocate("needs", mig_allocation("needs", node.gpu(1), "2g.10gb", 2, 2))
    response = kubelet.prepare("opt", "needs")
    assert {u: r.error for u, r in response.claims.items()} == {"opt": "", "needs": ""}
    spec = json.loads(node.state.cdi.path("opt").read_text())
    env = spec["devices"][0]["containerEdits"]["env"]
    assert "NVIDIA_VISIBLE_DEVICES=void" in env and "DRASAT_GPU_ALLOCATED=false" in env
    assert gpu_instances(node, 1) == [(2, 2)]
    assert {u: r.error for u, r in kubelet.unprepare("opt", "needs").claims.items()} == {
        "opt": "",
        "needs": "",
    }


def test_garbage_collection_loop_runs(served: Any) -> None:
    node, kubelet = served("T4", gc_interval_s=0.05)
    node.allocate("gone", gpu_allocation("gone", node.gpu(0)))
    assert kubelet.prepare("gone").claims["gone"].error == ""
    node.store.deallocate("gone")  # the controller deallocated it; the kubelet never unprepares
    deadline = time.monotonic() + 10
    while node.state.checkpoint.get("gone") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert node.state.checkpoint.get("gone") is None
    assert not node.state.cdi.path("gone").exists()


def test_hostile_requests_get_an_answer_per_claim_and_the_plugin_keeps_serving(
    served: Any,
) -> None:
    # Issue 18: claim UIDs no API server makes (NUL, path characters, 5,000 characters), a
    # damaged handle and thousands of unknown claims in one request, then a good claim.
    node, kubelet = served("2xT4")
    node.allocate("ok", gpu_allocation("ok", node.gpu(0)))
    odd = ["nul\x00", "../../etc/passwd", "x" * 5000, "line\nbreak"]
    unknown = [f"unknown-{i}" for i in range(3000)]
    response = kubelet.prepare("ok", *odd, *unknown)
    errors = {u: r.error for u, r in response.claims.items()}
    assert set(errors) == {"ok", *odd, *unknown}
    assert errors["ok"] == ""
    for uid in odd:
        assert "is not a Kubernetes UID" in errors[uid] and "\n" not in errors[uid]
    assert all("not allocated on node" in errors[u] for u in unknown)
    assert not any("internal error" in e for e in errors.values())
    for damaged in ("[" * 10_000, "9" * 5000, "[" * 100_000):  # nesting, digits, size
        handle = kubelet.prepare("h", handle=damaged)
        assert "resource handle" in handle.claims["h"].error
        assert "internal error" not in handle.claims["h"].error
    undone = kubelet.unprepare("ok", *odd)
    assert {u: r.error for u, r in undone.claims.items()} == dict.fromkeys(["ok", *odd], "")
    assert kubelet.prepare("ok").claims["ok"].error == ""  # still serving
