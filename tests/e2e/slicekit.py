"""Helpers for the ResourceSlice tests on the real control plane: a fake GPU node that publishes
drasat's slices from a simulated fleet, drasat's DeviceClasses, and pods with claims that the
real kube-scheduler allocates (no drasat controller, no kubelet).

Everything cluster-scoped that a helper creates is removed again: the node and its slices by
`gpu_node`, the classes it created (not those another test made first) by `device_classes`."""

from __future__ import annotations

import contextlib
import pathlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import kubernetes
import yaml
from kubecluster import create_fake_node, exists, wait_for
from kubernetes.client import ApiException

from drasat.api.devicemodel import classes
from drasat.api.devicemodel.nodegpus import Inventory
from drasat.nodeplugin import slicepublisher
from drasat.nodeplugin.nvml import NvmlDeviceLib
from drasat.testbed.simnvml import SimulatedNvml

RESOURCE = ("resource.k8s.io", "v1")

Obj = dict[str, Any]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def fleet_inventory(spec: str, **options: Any) -> Inventory:
    """The inventory of a simulated fleet, shares on unless `shares=False`."""
    options.setdefault("shares", True)
    fleet = SimulatedNvml(spec)
    return slicepublisher.inventory(NvmlDeviceLib(fleet, run=fleet.run), **options)


@dataclass
class GpuNode:
    name: str
    slices: list[Obj]
    devices: dict[str, Obj] = field(default_factory=dict)  # name -> published device


def delete_slice(custom: Any, name: str) -> None:
    try:
        custom.delete_cluster_custom_object(*RESOURCE, "resourceslices", name)
    except ApiException as exc:  # the garbage collector may have been first
        if exc.status != 404:
            raise


@contextlib.contextmanager
def gpu_node(api: kubernetes.client.ApiClient, spec: str, **options: Any) -> Iterator[GpuNode]:
    """A fake node publishing the slices of a simulated fleet `spec`, owned by the node."""
    custom = kubernetes.client.CustomObjectsApi(api)
    name = unique("sl")
    node = create_fake_node(api, name)
    published = slicepublisher.desired(
        name, fleet_inventory(spec, **options), node_uid=node.metadata.uid
    )
    try:
        for body in published:
            custom.create_cluster_custom_object(*RESOURCE, "resourceslices", body)
        devices = {d["name"]: d for s in published for d in s["spec"].get("devices", [])}
        yield GpuNode(name, published, devices)
    finally:
        with contextlib.suppress(ApiException):
            kubernetes.client.CoreV1Api(api).delete_node(name)
        for body in published:
            delete_slice(custom, body["metadata"]["name"])


@contextlib.contextmanager
def device_classes(api: kubernetes.client.ApiClient) -> Iterator[None]:
    """drasat's classes; those that already existed (another test's `gpu.drasat.io`, which has
    the same selector) are left as they were."""
    custom = kubernetes.client.CustomObjectsApi(api)
    created = []
    try:
        for body in classes.device_classes():
            try:
                custom.create_cluster_custom_object(*RESOURCE, "deviceclasses", body)
                created.append(body["metadata"]["name"])
            except ApiException as exc:
                if exc.status != 409:
                    raise
        yield
    finally:
        for name in created:
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(*RESOURCE, "deviceclasses", name)


def exactly(device_class: str, *cel: str, capacity: dict[str, str] | None = None) -> Obj:
    request: Obj = {"deviceClassName": device_class}
    if cel:
        request["selectors"] = [{"cel": {"expression": c}} for c in cel]
    if capacity:
        request["capacity"] = {"requests": capacity}
    return {"exactly": request}


def attribute(name: str) -> str:
    return f'device.attributes["gpu.drasat.io"].{name}'


@dataclass
class Outcome:
    """Where the scheduler put a pod: its node and its claim's results, or why not."""

    node: str | None
    results: list[Obj]
    message: str = ""

    @property
    def devices(self) -> list[str]:
        return [r["device"] for r in self.results]


class Workload:
    """Claims and pods in one namespace, each pod pinned to a node with one claim; `close`
    force-deletes them all and waits until the claims are gone (their devices free again)."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.namespace = namespace
        self.names: list[str] = []  # claims
        self.pods: list[str] = []

    def submit(
        self,
        node: str,
        requests: list[Obj],
        *,
        constraints: list[Obj] | None = None,
        name: str | None = None,
    ) -> str:
        """A claim with `requests` ([{name, exactly|firstAvailable}]) and a pod using it."""
        name = name or unique("w")
        devices: Obj = {"requests": requests}
        if constraints:
            devices["constraints"] = constraints
        claim = {"metadata": {"name": name}, "spec": {"devices": devices}}
        self.custom.create_namespaced_custom_object(
            *RESOURCE, self.namespace, "resourceclaims", claim
        )
        self.names.append(name)
        self.pod(node, name, name)
        return name

    def pod(self, node: str, name: str, claim: str) -> None:
        """A pod pinned to `node` that uses `claim`."""
        self.pods.append(name)
        self.core.create_namespaced_pod(
            self.namespace,
            {
                "metadata": {"name": name},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [
                        {"name": "c", "image": "none", "resources": {"claims": [{"name": "r"}]}}
                    ],
                    "resourceClaims": [{"name": "r", "resourceClaimName": claim}],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        )

    def outcome(self, name: str, timeout: float = 60, settle: float = 3.0) -> Outcome:
        """Bound (with the claim's results), or refused twice: unschedulable and still so
        `settle` seconds later, then refused again on a fresh pod's first try.

        The scheduler retries a pod when claims are deleted, so a first "Unschedulable" can come
        from devices whose claims (an earlier test's) its cache has not yet dropped; when that
        deletion reached the scheduler before the pod's first try no event retries the pod, and a
        loaded machine can stretch the window past any fixed `settle`. A second pod, created after
        the window, is tried against the scheduler's current view: its refusal is final."""
        node = self.core.read_namespaced_pod(name, self.namespace).spec.node_selector[
            "kubernetes.io/hostname"
        ]
        first = self._decided(name, name, timeout, settle)
        if first.node is not None:
            return first
        again = f"{name}-again"
        self.pod(node, again, name)
        return self._decided(again, name, timeout, settle=0)

    def _decided(self, pod_name: str, claim: str, timeout: float, settle: float) -> Outcome:
        unschedulable_since: float | None = None

        def settled() -> Outcome | None:
            nonlocal unschedulable_since
            pod = self.core.read_namespaced_pod(pod_name, self.namespace)
            if pod.spec.node_name:
                body = self.custom.get_namespaced_custom_object(
                    *RESOURCE, self.namespace, "resourceclaims", claim
                )
                return Outcome(
                    pod.spec.node_name, body["status"]["allocation"]["devices"]["results"]
                )
            for condition in pod.status.conditions or []:
                if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
                    now = time.monotonic()
                    unschedulable_since = unschedulable_since or now
                    if now - unschedulable_since >= settle:
                        return Outcome(None, [], condition.message or "")
            return None

        result: Outcome = wait_for(
            settled, timeout, 0.2, what=f"the scheduler to decide {pod_name}"
        )
        return result

    def run(self, node: str, requests: list[Obj], **options: Any) -> Outcome:
        return self.outcome(self.submit(node, requests, **options))

    def close(self) -> None:
        for name in self.pods:
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        for name in self.names:
            with contextlib.suppress(ApiException):
                self.custom.delete_namespaced_custom_object(
                    *RESOURCE, self.namespace, "resourceclaims", name
                )

        def gone() -> bool:
            listed = self.custom.list_namespaced_custom_object(
                *RESOURCE, self.namespace, "resourceclaims"
            )
            return not {c["metadata"]["name"] for c in listed["items"]} & set(self.names)

        wait_for(gone, 60, 0.2, what="the claims to be deleted")
        self.names.clear()


@contextlib.contextmanager
def applied(api: kubernetes.client.ApiClient, path: pathlib.Path) -> Iterator[list[Obj]]:
    """Create the file's objects in order; afterwards force-delete its pods and its namespace.
    Yields the pods as written."""
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    namespaces = [d["metadata"]["name"] for d in documents if d["kind"] == "Namespace"]
    pods = [d for d in documents if d["kind"] == "Pod"]
    try:
        for document in documents:
            namespace = document["metadata"].get("namespace")
            if document["kind"] == "Namespace":
                # An earlier test's namespace of the same name may still be terminating.
                gone = document["metadata"]["name"]
                wait_for(lambda n=gone: not exists(core.read_namespace, n), 120)
                core.create_namespace(document)
                wait_for(lambda n=namespace or document["metadata"]["name"]: _has_sa(core, n))
            elif document["kind"] == "Pod":
                core.create_namespaced_pod(namespace, document)
            else:
                assert document["apiVersion"] == "resource.k8s.io/v1", document["kind"]
                plural = {"ResourceClaimTemplate": "resourceclaimtemplates"}.get(
                    document["kind"], "resourceclaims"
                )
                custom.create_namespaced_custom_object(*RESOURCE, namespace, plural, document)
        yield pods
    finally:
        for pod in pods:
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod(
                    pod["metadata"]["name"], pod["metadata"]["namespace"], grace_period_seconds=0
                )
        for namespace in namespaces:
            with contextlib.suppress(ApiException):
                core.delete_namespace(namespace)


def _has_sa(core: Any, namespace: str) -> bool:
    try:
        core.read_namespaced_service_account("default", namespace)
    except ApiException:
        return False
    return True
