"""Publishing ResourceSlices (`nodeplugin/slicepublisher.py`) against a small in-memory API: the
kubelet-plugin helper library's rules (generation bump on change, nothing written when nothing
changed, stale slices deleted, owned by the Node), and the inventory read from the hardware."""

from __future__ import annotations

import copy
import itertools
import pathlib
from typing import Any

import pytest

from drasat.api.devicemodel.nodegpus import GpuHealth
from drasat.api.inputerrors import InputError
from drasat.kube import errors
from drasat.kube.client import ObjectList
from drasat.kube.resources import NODES, Resource
from drasat.nodeplugin import app, mps, registration, slicepublisher
from drasat.nodeplugin.nasstore import MemoryNasStore
from drasat.nodeplugin.nvml import NvmlDeviceLib
from drasat.nodeplugin.plugin import Config, NodePlugin
from drasat.testbed import simnvml
from drasat.testbed.simnvml import SimulatedNvml

Obj = dict[str, Any]


class FakeApi:
    """Nodes and ResourceSlices, with resourceVersions and conflicts; counts every write."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Obj] = {
            ("Node", "n1"): {"metadata": {"name": "n1", "uid": "node-uid-1"}},
        }
        self.versions = itertools.count(1)
        self.writes: list[tuple[str, str]] = []

    def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        try:
            return copy.deepcopy(self.objects[(resource.kind, name)])
        except KeyError:
            raise errors.NotFound(name) from None

    def list(self, resource: Resource, **_: Any) -> ObjectList:
        items = [copy.deepcopy(o) for (k, _n), o in self.objects.items() if k == resource.kind]
        return ObjectList(items, "1")

    def _stamp_taints(self, stored: Obj) -> None:
        """As the API server does: a taint without `timeAdded` gets the current time."""
        for device in stored.get("spec", {}).get("devices") or []:
            for taint in device.get("taints") or []:
                taint.setdefault("timeAdded", f"2026-01-01T00:00:{next(self.versions):02d}Z")

    def create(self, resource: Resource, body: Obj, *, namespace: str | None = None) -> Obj:
        key = (resource.kind, body["metadata"]["name"])
        if key in self.objects:
            raise errors.AlreadyExists(key[1])
        stored = copy.deepcopy(body)
        self._stamp_taints(stored)
        stored["metadata"]["resourceVersion"] = str(next(self.versions))
        self.objects[key] = stored
        self.writes.append(("create", key[1]))
        return stored

    def replace(self, resource: Resource, body: Obj) -> Obj:
        key = (resource.kind, body["metadata"]["name"])
        held = self.objects[key]
        if held["metadata"]["resourceVersion"] != body["metadata"].get("resourceVersion"):
            raise errors.Conflict(key[1])
        stored = copy.deepcopy(body)
        self._stamp_taints(stored)
        stored["metadata"]["resourceVersion"] = str(next(self.versions))
        self.objects[key] = stored
        self.writes.append(("replace", key[1]))
        return stored

    def delete(
        self, resource: Resource, name: str, *, namespace: str | None = None, uid: str | None = None
    ) -> None:
        if self.objects.pop((resource.kind, name), None) is None:
            raise errors.NotFound(name)
        self.writes.append(("delete", name))

    def pool(self) -> Any:
        """Copies of the ResourceSlices held, by name."""
        return sorted(
            (copy.deepcopy(o) for (k, _), o in self.objects.items() if k == "ResourceSlice"),
            key=lambda o: o["metadata"]["name"],
        )


def lib(spec: str) -> NvmlDeviceLib:
    fleet = SimulatedNvml(spec)
    return NvmlDeviceLib(fleet, run=fleet.run)


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


def test_first_publish_creates_the_pool_owned_by_the_node(api: FakeApi) -> None:
    publisher = slicepublisher.SlicePublisher(api, node_name="n1")  # type: ignore[arg-type]
    done = publisher.sync(slicepublisher.inventory(lib("1xA100-40GB,1xT4,mig=0")))
    assert done.generation == 1
    assert done.written == ("n1-gpu.drasat.io-0", "n1-gpu.drasat.io-1")
    for held in api.pool():
        assert held["spec"]["nodeName"] == "n1"
        assert held["spec"]["pool"] == {"name": "n1", "generation": 1, "resourceSliceCount": 2}
        (owner,) = held["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("Node", "node-uid-1", True)


def test_nothing_is_written_when_nothing_changed(api: FakeApi) -> None:
    publisher = slicepublisher.SlicePublisher(api, node_name="n1")  # type: ignore[arg-type]
    hardware = lib("2xT4")
    publisher.sync(slicepublisher.inventory(hardware))
    before = list(api.writes)
    again = publisher.sync(slicepublisher.inventory(hardware))
    assert (again.generation, again.changed, api.writes) == (1, False, before)


def test_a_health_change_bumps_the_generation_and_taints_the_gpu(api: FakeApi) -> None:
    publisher = slicepublisher.SlicePublisher(api, node_name="n1")  # type: ignore[arg-type]
    hardware = lib("2xT4")
    publisher.sync(slicepublisher.inventory(hardware))
    sick = hardware.gpus()[1].uuid
    done = publisher.sync(slicepublisher.inventory(hardware, health={sick: GpuHealth.from_xid(48)}))
    assert done.generation == 2 and done.written == ("n1-gpu.drasat.io-0",)
    (held,) = api.pool()
    devices = {d["name"]: d for d in held["spec"]["devices"]}
    (taint,) = devices["gpu-1"]["taints"]
    added = taint.pop("timeAdded")  # set by the API server
    assert taint == {"key": "gpu.drasat.io/xid", "value": "48", "effect": "NoSchedule"}
    assert "taints" not in devices["gpu-0"]
    assert held["spec"]["pool"]["generation"] == 2
    # The server's timeAdded is no change: nothing is written again.
    again = slicepublisher.inventory(hardware, health={sick: GpuHealth.from_xid(48)})
    assert not publisher.sync(again).changed
    # Another change keeps the taint's time (eviction counts from it).
    gpu0 = hardware.gpus()[0].uuid
    both = {sick: GpuHealth.from_xid(48), gpu0: GpuHealth.from_xid(79)}
    assert publisher.sync(slicepublisher.inventory(hardware, health=both)).generation == 3
    (held,) = api.pool()
    assert held["spec"]["devices"][1]["taints"][0]["timeAdded"] == added


def test_mig_mode_off_removes_the_counter_slice(api: FakeApi) -> None:
    """The generation is the highest existing + 1, and slices no longer wanted are deleted."""
    publisher = slicepublisher.SlicePublisher(api, node_name="n1")  # type: ignore[arg-type]
    publisher.sync(slicepublisher.inventory(lib("1xA100-40GB,mig=0")))
    assert len(api.pool()) == 2
    # Someone left a slice of a later generation behind (a crashed earlier plugin).
    stale = copy.deepcopy(api.pool()[1])
    stale["metadata"]["name"] = "n1-gpu.drasat.io-9"
    stale["spec"]["pool"]["generation"] = 5
    api.create(slicepublisher.RESOURCE_SLICES, stale)
    done = publisher.sync(slicepublisher.inventory(lib("1xA100-40GB")))
    assert done.generation == 6
    assert done.deleted == ("n1-gpu.drasat.io-1", "n1-gpu.drasat.io-9")
    (held,) = api.pool()
    assert held["spec"]["pool"] == {"name": "n1", "generation": 6, "resourceSliceCount": 1}
    assert [d["name"] for d in held["spec"]["devices"]] == ["gpu-0", "cpu-fallback"]


def test_a_conflict_is_retried_from_a_fresh_read(api: FakeApi) -> None:
    publisher = slicepublisher.SlicePublisher(api, node_name="n1")  # type: ignore[arg-type]
    publisher.sync(slicepublisher.inventory(lib("1xT4")))
    real_replace = api.replace
    calls = []

    def replace_once_stale(resource: Resource, body: Obj) -> Obj:
        calls.append(body["metadata"]["name"])
        if len(calls) == 1:  # another writer got there first
            api.objects[("ResourceSlice", body["metadata"]["name"])]["metadata"][
                "resourceVersion"
            ] = "999"
        return real_replace(resource, body)

    api.replace = replace_once_stale  # type: ignore[method-assign]
    done = publisher.sync(slicepublisher.inventory(lib("1xT4"), shares=True))
    assert done.generation == 2 and len(calls) == 2


def test_no_node_no_slices(api: FakeApi) -> None:
    del api.objects[(NODES.kind, "n1")]
    with pytest.raises(errors.NotFound):
        publisher = slicepublisher.SlicePublisher(api, node_name="n1")  # type: ignore[arg-type]
        publisher.sync(slicepublisher.inventory(lib("1xT4")))
    assert api.pool() == []


def test_inventory_reads_profiles_and_placements_from_nvml() -> None:
    found = slicepublisher.inventory(lib("1xA100-40GB,1xT4,mig=0"), health={"x": GpuHealth()})
    (a100, t4) = found.ordered_gpus()
    assert a100.migEnabled and not t4.migEnabled
    profiles = {m.profile: m for m in found.mig_profiles[a100.uuid]}
    assert t4.uuid not in found.mig_profiles
    assert profiles["3g.20gb"].giProfileId == 9
    assert [(p.start, p.size) for p in profiles["3g.20gb"].placements] == [(0, 4), (4, 4)]


def test_the_plugin_publishes_its_slices_and_taints_a_gpu_after_a_critical_xid(
    tmp_path: pathlib.Path, api: FakeApi
) -> None:
    """NodePlugin.publish (start, health changes) keeps the slices in step with the NAS."""
    sim = SimulatedNvml("2xT4")
    hardware = NvmlDeviceLib(sim, run=sim.run)
    config = Config(node_name="n1", state_dir=tmp_path / "state", cdi_root=tmp_path / "cdi")
    plugin = NodePlugin(
        config,
        lib=hardware,
        store=MemoryNasStore(node="n1", namespace="drasat"),
        mps_runner=mps.RecordingRunner(),
        slice_publisher=slicepublisher.SlicePublisher(api, node_name="n1"),  # type: ignore[arg-type]
    )
    plugin.publish(ready=False)
    (held,) = api.pool()
    assert [d["name"] for d in held["spec"]["devices"]] == ["gpu-0", "gpu-1", "cpu-fallback"]
    # Shareable by default (consumable capacity); `slice_shares=False` publishes whole GPUs only.
    assert all(d["allowMultipleAllocations"] for d in held["spec"]["devices"][:2])
    plugin.health.wait_ms = 10
    assert plugin.health.poll() is False  # registers for events
    sim.inject_xid(sim.gpus[1].uuid, 79)  # fallen off the bus
    assert plugin.health.poll() is True  # -> publish -> slices
    (held,) = api.pool()
    assert held["spec"]["pool"]["generation"] == 2
    (taint,) = held["spec"]["devices"][1]["taints"]
    assert (taint["key"], taint["effect"]) == ("gpu.drasat.io/gpu-lost", "NoExecute")


def test_a_failed_slice_publish_does_not_stop_the_plugin(
    tmp_path: pathlib.Path, api: FakeApi
) -> None:
    del api.objects[(NODES.kind, "n1")]  # the Node is not there (yet)
    sim = SimulatedNvml("1xT4")
    plugin = NodePlugin(
        Config(node_name="n1", state_dir=tmp_path / "state", cdi_root=tmp_path / "cdi"),
        lib=NvmlDeviceLib(sim, run=sim.run),
        store=MemoryNasStore(node="n1", namespace="drasat"),
        mps_runner=mps.RecordingRunner(),
        slice_publisher=slicepublisher.SlicePublisher(api, node_name="n1"),  # type: ignore[arg-type]
    )
    plugin.publish(ready=False)  # the NAS is written; the slices wait for the next publish
    assert api.pool() == []
    assert plugin.store.read().spec.gpus()


def test_resourceslices_need_api_access_and_a_structured_kubelet_api(
    tmp_path: pathlib.Path,
) -> None:
    config = Config(
        node_name="n1",
        state_dir=tmp_path / "state",
        cdi_root=tmp_path / "cdi",
        publish_slices=True,
        kubelet_api=registration.KubeletApi.structured,
    )
    options = app.Options(
        config=config,
        simulate_gpus="1xT4",
        simulator=simnvml.node_plugin_parts,
        in_memory_nas=True,
    )
    with pytest.raises(InputError, match="--resourceslices needs API access"):
        app.build(options)
