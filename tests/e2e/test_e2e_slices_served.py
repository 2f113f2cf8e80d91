"""The controller's reading of ResourceSlices as the real v1.37.2 API server serves them
(`drasat.v1.slices.Reader`, no validation again): drasat's and NVIDIA's slices of a MIG node,
written with quantities in other units and taints, listed back through drasat's client, read as
the validated reading reads them, and none of them validated again."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from kubecluster import create_fake_node
from slicekit import RESOURCE, delete_slice, fleet_inventory, unique

from drasat.api.groups import DRIVER_NAME
from drasat.kube import client as kube_client
from drasat.nodeplugin import slicepublisher
from drasat.testbed.controlplane import realcluster
from drasat.v1 import slices
from drasat.v1.slicekinds import ResourceSlice

pytestmark = pytest.mark.timeout(300)

NVIDIA = slices.NVIDIA_DRIVER
#: What NVIDIA's driver publishes of drasat's attributes (its own names).
NVIDIA_ATTRIBUTES = ("type", "uuid", "productName", "brand", "architecture", "parentUUID")
GiB = 2**30
Obj = dict[str, Any]


def _in_gib(device: Obj) -> None:
    """Whole GiB capacities written as `<n>Gi`: the server keeps a quantity's own units."""
    for quantity in (device.get("capacity") or {}).values():
        value = str(quantity["value"])
        if value.isdigit() and int(value) and int(value) % GiB == 0:
            quantity["value"] = f"{int(value) // GiB}Gi"


def _as_nvidia(body: Obj) -> Obj:
    """drasat's slice as NVIDIA's driver would publish it: whole GPUs and MIG devices, its own
    attributes, no fallback device or shares."""
    spec = dict(body["spec"], driver=NVIDIA)
    spec["pool"] = dict(spec["pool"])
    devices = []
    for device in spec.get("devices") or []:
        kind = ((device.get("attributes") or {}).get("type") or {}).get("string")
        if kind not in ("gpu", "mig"):
            continue
        attributes = {
            k: v
            for k, v in device["attributes"].items()
            if k in NVIDIA_ATTRIBUTES or k == "profile"
        }
        devices.append({**device, "attributes": attributes})
        devices[-1].pop("allowMultipleAllocations", None)
    if "devices" in spec:
        spec["devices"] = devices
    name = f"{body['metadata']['name']}-nv"
    return {**body, "metadata": {**body["metadata"], "name": name}, "spec": spec}


@pytest.fixture
def node(kube_api: kubernetes.client.ApiClient) -> Iterator[tuple[str, str]]:
    """A fake node (name, uid); it and every slice of it are removed after the test."""
    name = unique("served")
    created = create_fake_node(kube_api, name)
    yield name, created.metadata.uid
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    with contextlib.suppress(kubernetes.client.ApiException):
        kubernetes.client.CoreV1Api(kube_api).delete_node(name)
    listed = custom.list_cluster_custom_object(
        *RESOURCE, "resourceslices", field_selector=f"spec.nodeName={name}"
    )
    for body in listed["items"]:
        delete_slice(custom, body["metadata"]["name"])


def test_served_slices_read_as_validated_without_validating_them(
    kube_cluster: realcluster.Cluster,
    kube_api: kubernetes.client.ApiClient,
    node: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name, uid = node
    custom = kubernetes.client.CustomObjectsApi(kube_api)
    hardware = fleet_inventory("2xA100-40GB,1xH100-80GB,mig=0+1+2")
    # Owned by the Node, as the plugin writes them (the garbage collector keeps them).
    written = slicepublisher.desired(name, hardware, node_uid=uid)
    for body in written:
        for device in body["spec"].get("devices") or []:
            _in_gib(device)
    # One GPU's health taint (the node plugin's, on the GPU's whole device).
    whole = [d for b in written for d in b["spec"].get("devices") or [] if d["name"] == "gpu-2"]
    whole[0]["taints"] = [{"key": "gpu.drasat.io/xid", "value": "48", "effect": "NoSchedule"}]
    # A capacity drasat does not read, over 64 bits in base units: the server accepts it, and
    # the GPU stays usable on both readings (only memory must fit drasat's integers).
    whole[0]["capacity"]["vendorExtra"] = {"value": "10E"}
    for body in [*written, *(_as_nvidia(b) for b in written)]:
        custom.create_cluster_custom_object(*RESOURCE, "resourceslices", body)
    api = kube_client.KubeClient(kube_client.load_configuration(str(kube_cluster.kubeconfig)))
    served = api.list(slicepublisher.RESOURCE_SLICES, field_selector=f"spec.nodeName={name}")
    assert any(
        str(q["value"]).endswith("Gi")
        for body in served.items
        for d in body["spec"].get("devices") or []
        for q in (d.get("capacity") or {}).values()
    )
    extra = [
        d["capacity"]["vendorExtra"]
        for body in served.items
        for d in body["spec"].get("devices") or []
        if "vendorExtra" in (d.get("capacity") or {})
    ]
    assert extra == [{"value": "10E"}] * 2
    validated = {
        driver: slices.read_node(
            name, [s for s in served.items if s["spec"]["driver"] == driver], driver=driver
        )
        for driver in (DRIVER_NAME, NVIDIA)
    }
    calls: list[object] = []
    real = ResourceSlice.model_validate

    def spy(*args: Any, **kw: Any) -> ResourceSlice:
        calls.append(args)
        return real(*args, **kw)

    monkeypatch.setattr(ResourceSlice, "model_validate", spy)
    for driver, expected in validated.items():
        read = slices.Reader(driver).read(served.items)[name]
        assert read.read is not None, read.problem
        assert read == expected
        gpus = read.read.state.devices.gpus
        assert len(gpus) == 3 and [g.minor for g in gpus if not g.healthy] == [2]
    assert calls == []
