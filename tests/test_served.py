"""What drasat turns off where the API server does not serve or keep it (drasat.kube.served), and
what the node plugin then publishes: the probes against a stand-in server that keeps or drops the
fields as a server with the gate on or off does (the real ones: tests/e2e/test_e2e_versions.py),
and the slices without the dropped fields."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from drasat.api.devicemodel import nodegpus, pool
from drasat.api.devicemodel.nodegpus import Inventory
from drasat.api.nas import GpuInfo, MigInfo, MigPlacement
from drasat.kube import errors, served
from drasat.kube import resources as r
from drasat.nodeplugin import app, plugin

Obj = dict[str, Any]


class Server:
    """A stand-in API server for the probes: its discovery lists `kinds`; a dry-run create
    answers the object with the fields of a turned-off gate dropped."""

    def __init__(
        self,
        *,
        kinds: dict[str, set[str]] | None = None,
        capacity: bool = True,
        counters: bool = True,
        fail: errors.KubeError | None = None,
    ) -> None:
        self.kinds = kinds or {}
        self.capacity, self.counters, self.fail = capacity, counters, fail
        self.created: list[tuple[str, Obj]] = []

    def served_kinds(self, group_version: str) -> frozenset[str]:
        if self.fail is not None:
            raise self.fail
        return frozenset(self.kinds.get(group_version, set()))

    def create_dry_run(
        self, resource: r.Resource, body: Obj, *, namespace: str | None = None
    ) -> Obj:
        if self.fail is not None:
            raise self.fail
        self.created.append((resource.kind, body))
        answer = copy.deepcopy(body)
        spec = answer["spec"]
        if not self.capacity:
            for device in spec.get("devices") or []:
                device.pop("allowMultipleAllocations", None)
            for request in (spec.get("spec") or {}).get("devices", {}).get("requests", []):
                request["exactly"].pop("capacity", None)
        if not self.counters:
            spec.pop("sharedCounters", None)
        return answer


def test_a_server_that_keeps_everything_turns_nothing_off() -> None:
    server = Server(kinds={"resource.k8s.io/v1": {"DeviceTaintRule"}})
    found = [
        served.claim_shares(server, "drasat"),
        served.slice_shares(server, "n1"),
        served.slice_counters(server, "n1"),
        served.device_taint_rules(server),
    ]
    assert all(f.on for f in found), found
    line = served.line("controller", found)
    assert line.startswith("controller: nothing turned off; on: shares (DRAConsumableCapacity:")
    assert "the DeviceTaintRule (served as resource.k8s.io/v1)" in line


def test_dropped_fields_and_missing_kinds_are_turned_off_with_the_reason() -> None:
    server = Server(capacity=False, counters=False)
    shares = served.claim_shares(server, "drasat")
    assert not shares.on
    assert shares.why == (
        "DRAConsumableCapacity is off: a server-side dry-run of a ResourceClaimTemplate in "
        "drasat lost a claim's capacity.requests"
    )
    assert not served.slice_shares(server, "n1").on
    counters = served.slice_counters(server, "n1")
    assert not counters.on and "DRAPartitionableDevices is off" in counters.why
    taint = served.device_taint_rules(server)
    assert not taint.on and "discovery lists no DeviceTaintRule" in taint.why
    line = served.line("node plugin on n1", [served.slice_shares(server, "n1"), counters])
    assert line.startswith("node plugin on n1: turned off: shares (DRAConsumableCapacity is off")
    assert "; MIG counters (DRAPartitionableDevices is off" in line and "; on:" not in line


def test_an_older_version_of_the_taint_rule_is_found() -> None:
    server = Server(kinds={"resource.k8s.io/v1beta2": {"DeviceTaintRule"}})
    assert served.device_taint_rules(server).why == "served as resource.k8s.io/v1beta2"


def test_what_cannot_be_asked_stays_on_and_says_so() -> None:
    server = Server(fail=errors.Unavailable("GET /apis: connection refused"))
    for finding in (served.claim_shares(server, "x"), served.device_taint_rules(server)):
        assert finding.on
        assert finding.why.startswith("could not tell:"), finding


def test_the_probe_slices_are_the_nodes_own_pool() -> None:
    """What the node plugin's admission policy admits: its node, its pool, drasat's driver."""
    server = Server()
    served.slice_shares(server, "gpu-node-7")
    served.slice_counters(server, "gpu-node-7")
    for kind, body in server.created:
        assert kind == "ResourceSlice"
        assert body["spec"]["nodeName"] == body["spec"]["pool"]["name"] == "gpu-node-7"
        assert body["spec"]["driver"] == "gpu.drasat.io"
        # 1.35+: a slice holds either devices or counter sets
        assert not (body["spec"].get("devices") and body["spec"].get("sharedCounters"))


def _inventory(**options: Any) -> Inventory:
    whole = GpuInfo(uuid="GPU-0", minor=0, index=0, productName="NVIDIA A100-SXM4-40GB",
                    memoryBytes=40 * 2**30, migEnabled=False)  # fmt: skip
    mig = whole.model_copy(update={"uuid": "GPU-1", "minor": 1, "index": 1, "migEnabled": True})
    profile = MigInfo(
        profile="1g.5gb",
        parentProductName=whole.productName,
        giProfileId=19,
        memoryBytes=5 * 2**30,
        placements=[MigPlacement(start=0, size=1)],
    )
    return Inventory(gpus=[whole, mig], mig_profiles={"GPU-1": [profile]}, shares=True, **options)


def _devices(specs: list[Obj]) -> list[Obj]:
    return [d for s in specs for d in s.get("devices") or []]


def test_the_slices_leave_out_what_the_server_would_drop() -> None:
    full = pool.slice_specs(_inventory())
    assert any(s.get("sharedCounters") for s in full)
    assert any(d.get("consumesCounters") for d in _devices(full))
    assert any(d.get("allowMultipleAllocations") for d in _devices(full))
    bare = pool.slice_specs(_inventory(consumable_capacity=False, counters=False))
    assert not any(s.get("sharedCounters") for s in bare)
    assert not any("consumesCounters" in d or "allowMultipleAllocations" in d
                   for d in _devices(bare))  # fmt: skip
    # the same devices, under the same names
    assert [d["name"] for d in _devices(bare)] == [d["name"] for d in _devices(full)]
    assert nodegpus.Inventory(gpus=[]).counters and nodegpus.Inventory(gpus=[]).consumable_capacity


@pytest.mark.parametrize(("capacity", "counters"), [(True, True), (False, False), (True, False)])
def test_the_node_plugin_publishes_what_the_server_keeps(
    capacity: bool, counters: bool, caplog: pytest.LogCaptureFixture
) -> None:
    config = plugin.Config(node_name="n1")
    with caplog.at_level("WARNING"):
        fitted = app.fit_to_server(config, Server(capacity=capacity, counters=counters))
    assert (fitted.slice_consumable_capacity, fitted.slice_counters) == (capacity, counters)
    assert (
        dataclasses.replace(fitted, slice_consumable_capacity=True, slice_counters=True) == config
    )
    (line,) = [r.getMessage() for r in caplog.records if "node plugin on n1" in r.getMessage()]
    assert (": turned off:" in line) is not (capacity and counters)


def test_gangs_come_from_podgroups_only_where_discovery_lists_them() -> None:
    served_here = served.pod_groups(Server(kinds={"scheduling.k8s.io/v1beta1": {"PodGroup"}}))
    assert served_here.on and served_here.why == "served as scheduling.k8s.io/v1beta1"
    # 1.34 - 1.36, or 1.37 without the GenericWorkload gate: labels only, said with the gate
    bare = served.pod_groups(Server(kinds={"scheduling.k8s.io/v1": {"PriorityClass"}}))
    assert not bare.on and "gate GenericWorkload" in bare.why
    # a discovery that fails is not an answer: a watch of a kind not served would fail for ever
    unknown = served.pod_groups(Server(fail=errors.Unavailable("down", status=503)))
    assert not unknown.on and unknown.why.startswith("could not tell")
