"""drasat's ResourceSlices and DeviceClasses on the real v1.37.2 API server: what `drasat
resourceslices` prints is accepted as it is, a slice that breaks the API's rules is rejected with
the server's own message, and the node plugin's publisher keeps a node's pool in step (generation
bump, stale slices deleted, owned by the Node)."""

from __future__ import annotations

import contextlib
import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from kubecluster import create_fake_node, wait_for
from kubernetes.client import ApiException
from slicekit import RESOURCE, delete_slice, device_classes, fleet_inventory, unique

from drasat.api.devicemodel import classes
from drasat.api.devicemodel.nodegpus import GpuHealth
from drasat.kube import client as kube_client
from drasat.nodeplugin import slicepublisher
from drasat.testbed.controlplane import realcluster

pytestmark = pytest.mark.timeout(300)

SPEC = "2xA100-40GB,1xT4,mig=0+1"

Obj = dict[str, Any]


def cli_objects(node: str, *extra: str) -> list[Obj]:
    """What `drasat resourceslices --shares ... -o json` prints, as objects."""
    command = [sys.executable, "-m", "drasat", "resourceslices", "--node-name", node]
    done = subprocess.run(
        [*command, "-o", "json", "--shares", "--simulate-gpus", SPEC, *extra],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    printed = json.loads(done.stdout)
    items: list[Obj] = printed["items"] if printed["kind"] == "List" else [printed]
    return items


@pytest.fixture
def node(kube_api: kubernetes.client.ApiClient) -> Iterator[Any]:
    """A fake node; it and every drasat slice of it are removed after the test."""
    name = unique("sa")
    created = create_fake_node(kube_api, name)
    yield created
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    with contextlib.suppress(ApiException):
        kubernetes.client.CoreV1Api(kube_api).delete_node(name)
    listed = custom.list_cluster_custom_object(
        *RESOURCE, "resourceslices", field_selector=f"spec.nodeName={name}"
    )
    for body in listed["items"]:
        delete_slice(custom, body["metadata"]["name"])


def test_the_cli_output_is_accepted_by_the_real_api_server(
    kube_api: kubernetes.client.ApiClient, node: Any
) -> None:
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    name = node.metadata.name
    printed = cli_objects(name)
    assert [o["kind"] for o in printed] == ["ResourceSlice", "ResourceSlice"]
    for body in printed:
        held = custom.create_cluster_custom_object(*RESOURCE, "resourceslices", body)
        # The server keeps every device, counter set and consumption as printed (quantities
        # are canonical already: plain integers).
        assert held["spec"] == body["spec"], body["metadata"]["name"]
    counters, devices = printed
    assert len(counters["spec"]["sharedCounters"]) == 2
    assert len(devices["spec"]["devices"]) == 54


def test_the_shipped_device_classes_are_accepted(kube_api: kubernetes.client.ApiClient) -> None:
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    with device_classes(kube_api):
        for body in classes.device_classes():
            held = custom.get_cluster_custom_object(
                *RESOURCE, "deviceclasses", body["metadata"]["name"]
            )
            assert held["spec"] == body["spec"]


def _broken(node: str) -> list[tuple[str, Obj, str]]:
    """(what is wrong, the slice, what the server says) — each from a valid printed slice."""
    counters, devices = cli_objects(node)
    both = copy.deepcopy(devices)
    both["spec"]["sharedCounters"] = counters["spec"]["sharedCounters"]
    too_many = copy.deepcopy(devices)
    first = too_many["spec"]["devices"][1]  # a MIG placement: it consumes counters
    too_many["spec"]["devices"] += [
        {**copy.deepcopy(first), "name": f"extra-{i}"} for i in range(11)
    ]  # 65 devices
    three = copy.deepcopy(devices)
    consumption = three["spec"]["devices"][1]["consumesCounters"][0]
    three["spec"]["devices"][1]["consumesCounters"] = [
        {**consumption, "counterSet": f"set-{i}"} for i in range(3)
    ]
    bad_policy = copy.deepcopy(devices)
    t4 = next(d for d in bad_policy["spec"]["devices"] if d["name"] == "gpu-2")
    t4["capacity"]["memory"]["requestPolicy"]["default"] = "1000"  # not a multiple of 1 MiB
    return [
        ("devices and counters", both, "only one of `sharedCounters` or `devices` is allowed"),
        ("65 devices with counters", too_many, "must have at most 64 items"),
        ("3 consumesCounters", three, "must have at most 2 items"),
        ("default off the step", bad_policy, "value is not a multiple of a given step"),
    ]


def test_a_broken_slice_is_rejected_with_the_servers_message(
    kube_api: kubernetes.client.ApiClient, node: Any
) -> None:
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    for what, body, message in _broken(node.metadata.name):
        with pytest.raises(ApiException) as caught:
            custom.create_cluster_custom_object(*RESOURCE, "resourceslices", body)
        assert caught.value.status == 422, what
        said = json.loads(caught.value.body)["message"]
        assert message in said, (what, said)


def _pool(api: kube_client.KubeClient, node: str) -> list[Obj]:
    listed = api.list(slicepublisher.RESOURCE_SLICES, field_selector=f"spec.nodeName={node}").items
    return sorted(listed, key=lambda s: s["metadata"]["name"])


def test_the_publisher_keeps_the_pool_in_step_on_the_real_api_server(
    kube_cluster: realcluster.Cluster, node: Any
) -> None:
    api = kube_client.KubeClient(kube_client.load_configuration(str(kube_cluster.kubeconfig)))
    name = node.metadata.name
    publisher = slicepublisher.SlicePublisher(api, node_name=name)
    hardware = fleet_inventory(SPEC)
    first = publisher.sync(hardware)
    assert first.generation == 1 and len(first.written) == 2
    held = _pool(api, name)
    assert [s["spec"]["pool"]["generation"] for s in held] == [1, 1]
    (owner,) = held[0]["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Node", node.metadata.uid, True)
    # Nothing changed: nothing written.
    assert not publisher.sync(hardware).changed
    # A lost GPU: generation 2, its devices tainted NoExecute.
    lost = hardware.ordered_gpus()[2].uuid
    sick = fleet_inventory(SPEC, health={lost: GpuHealth.from_xid(79)})
    assert publisher.sync(sick).generation == 2
    devices = {d["name"]: d for s in _pool(api, name) for d in s["spec"].get("devices", [])}
    (taint,) = devices["gpu-2"]["taints"]
    assert (taint["key"], taint["effect"]) == ("gpu.drasat.io/gpu-lost", "NoExecute")
    added = taint["timeAdded"]  # the server stamps it
    # The server's timeAdded is no change: the same health publishes nothing.
    assert not publisher.sync(fleet_inventory(SPEC, health={lost: GpuHealth.from_xid(79)})).changed
    # MIG mode off everywhere: the counter slice goes, one slice of generation 3 stays, and
    # the lost GPU's taint keeps its time.
    plain = publisher.sync(
        fleet_inventory("2xA100-40GB,1xT4", health={lost: GpuHealth.from_xid(79)})
    )
    assert plain.generation == 3 and len(plain.deleted) == 1
    (only,) = _pool(api, name)
    assert only["spec"]["pool"] == {"name": name, "generation": 3, "resourceSliceCount": 1}
    (kept,) = [d for d in only["spec"]["devices"] if d["name"] == "gpu-2"]
    assert kept["taints"][0]["timeAdded"] == added


def test_slices_go_with_their_node(
    kube_cluster: realcluster.Cluster, kube_api: kubernetes.client.ApiClient
) -> None:
    """Owned by the Node: the garbage collector deletes them when the node goes."""
    api = kube_client.KubeClient(kube_client.load_configuration(str(kube_cluster.kubeconfig)))
    name = unique("gc")
    create_fake_node(kube_api, name)
    try:
        slicepublisher.SlicePublisher(api, node_name=name).sync(fleet_inventory("1xT4"))
        assert len(_pool(api, name)) == 1
    finally:
        kubernetes.client.CoreV1Api(kube_api).delete_node(name)
    wait_for(lambda: not _pool(api, name), 60, 0.5, what="the garbage collector")
