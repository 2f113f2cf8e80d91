"""Allocation on the real control plane: kube-scheduler's own allocator against drasat's.

    python -m bench.kube_alloc [--kubeconfig K] --nodes 100 [--load 1.2] [--allocators kube,drasat]
                               [--churn-nodes 8 --churn-claims 600] [--out DIR]

A fleet of N fake nodes (Node objects, no kubelet) each publishes drasat's ResourceSlices for
8 simulated GPUs, built by the node plugin's own code (`drasat.nodeplugin.slicepublisher`) from a
simulated NVML fleet: a quarter of the nodes A100-40GB or H100-80GB with every GPU in MIG mode
(partitionable devices: the whole GPU and every MIG placement, sharing counters), the rest
H100-80GB without MIG, shareable by capacity. drasat's DeviceClasses are created if missing.

Per allocator, in the same run and on the same slices, one after the other:

- **fill**: P pods (enough to ask for `--load` x the fleet's GPUs) are created as fast as the
  client can, each with one claim from a ResourceClaimTemplate (the real resourceclaim
  controller makes the claims): whole GPUs, 2 or 4 GPUs, MIG by profile (CEL on `profile` and
  `productName`), shares (`capacity.requests`). A watch on the pods records when each is bound.
  Measured: pods bound per second (bound / first create -> last bind), creation -> bound p50 and
  p99 (client clocks: the create call's start to the watch event), and, once nothing more binds
  for `--settle` seconds, the share of the fleet's GPUs allocated (whole GPUs 1, a MIG device its
  memory slices / 8, a share its compute / 100, from the claims' `status.allocation`). Every
  device is checked to be held by at most one claim (shares: capacity sums within the device's).
- **churn**: MIG claims arrive and depart on `--churn-nodes` MIG nodes (half A100-40GB, half
  H100-80GB, as `bench/mig_churn.py`'s cluster) with the event sequence of `bench.mig_churn.events`
  (Poisson arrivals, exponential lifetimes of mean `--churn-lifetime` seconds, by profile or by
  needs expressed as CEL on capacity); a claim not bound within `--patience` seconds is refused
  and its pod deleted; a bound pod is deleted at its departure. Measured: claims accepted, and
  the same over the claims that fit when they arrived (`bench.churn_fit`: drasat's own
  allocation, after the run, over the devices the claims bound and not yet deleted then held),
  with their creation -> bound p50 / p99 (a claim never bound counts as unbounded).
  `--refit results.json` adds that measure to a written run without running anything.

Allocator `kube` is kube-scheduler itself (no device taint on drasat's devices). Allocator
`drasat` is drasat's v1 controller (`start_drasat`), which taints drasat's devices so the
scheduler's allocator leaves them alone and allocates the claims itself; the scheduler binds.
Its pods are created with drasat's scheduling gate, as the chart's admission creates them: the
controller allocates, lifts the gate, and kube-scheduler tries the pod once. `drasat-ungated` is
the same controller with pods created without the gate (a cluster without the admission).

Results go to `--out` (results.json, summary.md); the command prints the table.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime
import json
import math
import pathlib
import platform
import random
import shlex
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import kubernetes
from kubernetes.client import ApiException

from bench import mig_churn
from drasat.api import catalog
from drasat.api.devicemodel import classes
from drasat.api.devicemodel.nodegpus import Inventory
from drasat.api.groups import DRIVER_NAME, SCHEDULING_GATE
from drasat.nodeplugin import slicepublisher
from drasat.nodeplugin.nvml import NvmlDeviceLib
from drasat.testbed.simnvml import SimulatedNvml

Obj = dict[str, Any]
RESOURCE = ("resource.k8s.io", "v1")
LABEL = "drasat-bench"
GPUS_PER_NODE = 8
MIG_PRODUCTS = mig_churn.PRODUCTS  # ("A100-40GB", "H100-80GB")
PLAIN_PRODUCT = "H100-80GB"


# --- the workload --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Shape:
    """One kind of pod of the fill workload: its claim template's requests and its weight."""

    name: str
    weight: float
    request: Obj  # one DeviceRequest (`exactly`)
    gpus: float  # GPU-equivalents it asks for (for sizing the workload to --load)


def _attribute(name: str) -> str:
    return f'device.attributes["{DRIVER_NAME}"].{name}'


def _capacity_at_least(name: str, quantity: str) -> str:
    return f'device.capacity["{DRIVER_NAME}"].{name}.compareTo(quantity("{quantity}")) >= 0'


def _product(key: str) -> catalog.Product:
    found = catalog.find_product(key)
    if found is None:  # the catalog is the program's own: a wrong key is a bug here
        raise AssertionError(f"no product {key!r} in drasat's catalog")
    return found


def _mig_profiles(key: str) -> list[catalog.MigProfile]:
    return [p for p in _product(key).mig_profiles if not p.media_extensions]


def mig_request(product: str, profile: str) -> Obj:
    """MIG by profile on one product (the same profile name exists on several)."""
    product_name = _product(product).product_name
    return {
        "deviceClassName": classes.MIG_CLASS,
        "selectors": [
            {"cel": {"expression": f'{_attribute("profile")} == "{profile}"'}},
            {"cel": {"expression": f'{_attribute("productName")} == "{product_name}"'}},
        ],
    }


def needs_request(memory_gib: int | None, compute: int | None) -> Obj:
    """MIG by needs: any placement with at least this memory and these compute slices."""
    cel = []
    if memory_gib:
        cel.append(_capacity_at_least("memory", f"{memory_gib}Gi"))
    if compute:
        cel.append(_capacity_at_least("computeSlices", str(compute)))
    return {
        "deviceClassName": classes.MIG_CLASS,
        "selectors": [{"cel": {"expression": c}} for c in cel],
    }


def fill_shapes() -> list[Shape]:
    """The fill workload: 30% one whole GPU, 10% two, 5% four, 30% MIG by profile (bench/
    mig_churn's profile weights, either MIG product), 25% a quarter of a GPU's compute and
    memory by capacity (shares)."""
    shapes = [
        Shape("whole-1", 30, {"deviceClassName": classes.GPU_CLASS}, 1.0),
        Shape(
            "whole-2",
            10,
            {"deviceClassName": classes.GPU_CLASS, "allocationMode": "ExactCount", "count": 2},
            2.0,
        ),
        Shape(
            "whole-4",
            5,
            {"deviceClassName": classes.GPU_CLASS, "allocationMode": "ExactCount", "count": 4},
            4.0,
        ),
        Shape(
            "share-25",
            25,
            {
                "deviceClassName": classes.GPU_CLASS,
                "capacity": {"requests": {"memory": "20Gi", "compute": "25"}},
            },
            0.25,
        ),
    ]
    weights = dict(mig_churn.MIXES["default"].profiles)
    total = sum(weights.values()) * len(MIG_PRODUCTS)
    for product in MIG_PRODUCTS:
        profiles = _mig_profiles(product)
        for index, weight in weights.items():
            profile = profiles[index]
            shapes.append(
                Shape(
                    f"mig-{product}-{profile.name}".lower().replace(".", ""),
                    30 * weight / total,
                    mig_request(product, profile.name),
                    profile.memory_slices / _product(product).memory_slices,
                )
            )
    return shapes


def template(name: str, request: Obj) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
    }


def pod(
    name: str,
    template_name: str,
    node_selector: dict[str, str] | None = None,
    *,
    gated: bool = False,
) -> Obj:
    """A pod whose claim the resourceclaim controller makes from the template; no kubelet runs
    it, it only needs to get bound. `gated`: created with drasat's scheduling gate, as the
    chart's admission (MutatingAdmissionPolicy or webhook) creates a pod with a claim of
    drasat's; drasat's controller lifts it once the claim is allocated."""
    spec: Obj = {
        "containers": [
            {
                "name": "c",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"claims": [{"name": "gpu"}]},
            }
        ],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template_name}],
        "terminationGracePeriodSeconds": 0,
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if gated:
        spec["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    return {"metadata": {"name": name, "labels": {LABEL: "pod"}}, "spec": spec}


# --- allocators ----------------------------------------------------------------------------


class Handle(Protocol):
    def stop(self) -> None: ...


class Allocator(Protocol):
    def __call__(self, kubeconfig: pathlib.Path, namespace: str) -> Handle: ...


@dataclasses.dataclass
class _Nothing:
    def stop(self) -> None:
        return None


def start_kube_scheduler(kubeconfig: pathlib.Path, namespace: str) -> Handle:
    """Allocator A: kube-scheduler's own allocator, which runs already. It must see drasat's
    devices untainted: a DeviceTaintRule on drasat's driver left by an earlier run would keep it
    off them, so that is an error here, not something to measure."""
    api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    with api:
        rules = kubernetes.client.CustomObjectsApi(api).list_cluster_custom_object(
            *RESOURCE, "devicetaintrules"
        )
    ours = [
        r["metadata"]["name"]
        for r in rules.get("items", [])
        if (r["spec"].get("deviceSelector") or {}).get("driver") == DRIVER_NAME
    ]
    if ours:
        raise RuntimeError(
            f"DeviceTaintRule {', '.join(ours)} taints {DRIVER_NAME}'s devices: kube-scheduler "
            "cannot allocate them; delete it (or stop drasat's controller) first"
        )
    return _Nothing()


def start_drasat(kubeconfig: pathlib.Path, namespace: str) -> Handle:
    """Allocator B: drasat's v1 controller (`drasat controller --dra-api v1`), running until
    `stop()`; its DeviceTaintRule in place when this returns and gone after `stop()`
    (`bench.drasat_allocator`)."""
    from bench import drasat_allocator

    return drasat_allocator.start(kubeconfig, namespace)


ALLOCATORS: dict[str, Allocator] = {
    "kube": start_kube_scheduler,
    "drasat": start_drasat,
    "drasat-ungated": start_drasat,
}
# The allocators whose pods are created with drasat's scheduling gate, as the chart's admission
# creates them; `drasat-ungated` is the path without admission (kube-scheduler tries the pod
# before drasat allocates, then again after its backoff).
GATED = frozenset({"drasat"})


# --- the fleet -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FleetNode:
    name: str
    fleet: str  # the simulated NVML fleet spec
    labels: dict[str, str]


def plan_fleet(run: str, nodes: int, mig_share: float, churn_nodes: int) -> list[FleetNode]:
    """`mig_share` of the nodes (at least `churn_nodes`) MIG nodes, spread evenly among the
    plain H100 nodes and alternating A100-40GB / H100-80GB; the first `churn_nodes` of them
    carry the churn label."""
    migs = min(nodes, max(churn_nodes, round(nodes * mig_share)))
    out: list[FleetNode] = []
    seen = 0
    for i in range(nodes):
        name = f"{run}-{i:04d}"
        if (i + 1) * migs // nodes > i * migs // nodes:
            product = MIG_PRODUCTS[seen % len(MIG_PRODUCTS)]
            labels = {LABEL: "mig"}
            if seen < churn_nodes:
                labels[f"{LABEL}/churn"] = "true"
            seen += 1
            spec = f"{GPUS_PER_NODE}x{product},mig=all,seed={name}"
        else:
            labels = {LABEL: "plain"}
            spec = f"{GPUS_PER_NODE}x{PLAIN_PRODUCT},seed={name}"
        out.append(FleetNode(name, spec, labels))
    return out


def node_body(node: FleetNode) -> Obj:
    """A Node with no kubelet: Ready, room for many pods (only bindings are measured)."""
    resources = {"cpu": "256", "memory": "2Ti", "pods": "500"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": {"kubernetes.io/hostname": node.name, **node.labels},
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake"}
            ],
        },
    }


def node_inventory(node: FleetNode) -> Inventory:
    """What drasat's node plugin finds on this node's simulated GPUs."""
    fleet = SimulatedNvml(node.fleet)
    return slicepublisher.inventory(NvmlDeviceLib(fleet, run=fleet.run), shares=True)


def node_slices(node: FleetNode, uid: str) -> list[Obj]:
    """The slices drasat's node plugin would publish for this node's simulated GPUs."""
    return slicepublisher.desired(node.name, node_inventory(node), node_uid=uid)


@dataclasses.dataclass
class Fleet:
    nodes: list[FleetNode]
    devices: dict[tuple[str, str], Obj]  # (pool, device) -> published device
    gpus: int
    created_s: float
    slice_bytes: int


def create_fleet(api: kubernetes.client.ApiClient, planned: list[FleetNode], workers: int) -> Fleet:
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    started = time.monotonic()

    def one(node: FleetNode) -> list[Obj]:
        body = node_body(node)
        created = core.create_node(body)
        core.patch_node_status(node.name, {"status": body["status"]})
        # TaintNodesByCondition put node.kubernetes.io/not-ready on it; no lifecycle controller
        # runs to lift it, so the bench does (as tests/kubecluster.create_fake_node).
        core.patch_node(node.name, {"spec": {"taints": None}})
        published = node_slices(node, created.metadata.uid)
        for body_slice in published:
            custom.create_cluster_custom_object(*RESOURCE, "resourceslices", body_slice)
        return published

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        published = list(pool.map(one, planned))
    devices = {
        (s["spec"]["pool"]["name"], d["name"]): d
        for node_slices_ in published
        for s in node_slices_
        for d in s["spec"].get("devices", [])
    }
    gpus = sum(1 for d in devices.values() if _type(d) == "gpu")
    size = sum(len(json.dumps(s)) for node_slices_ in published for s in node_slices_)
    return Fleet(planned, devices, gpus, time.monotonic() - started, size)


def delete_fleet(api: kubernetes.client.ApiClient, planned: list[FleetNode]) -> None:
    """The nodes, and their slices (owned by the nodes; deleted here too, not left to the
    garbage collector, so the next run starts from none)."""
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    names = {n.name for n in planned}
    for node in planned:
        with contextlib.suppress(ApiException):
            core.delete_node(node.name)
    listed = custom.list_cluster_custom_object(*RESOURCE, "resourceslices")
    for item in listed.get("items", []):
        if item["spec"].get("nodeName") in names:
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(
                    *RESOURCE, "resourceslices", item["metadata"]["name"]
                )


def _type(device: Obj) -> str:
    return str(device.get("attributes", {}).get("type", {}).get("string", ""))


def gpu_equivalents(device: Obj, result: Obj) -> float:
    """What one allocation result holds of a GPU: a whole GPU 1, a MIG device its memory
    slices / 8, a result on a shareable GPU the larger of its compute and memory fractions
    (a whole-GPU claim there consumes the published defaults: all the memory and compute 0,
    so compute alone would count it as nothing)."""
    kind = _type(device)
    if kind == "mig":
        return int(device["attributes"]["placementSize"]["int"]) / mig_churn.SLICES
    if kind != "gpu":
        return 0.0
    consumed = result.get("consumedCapacity") or {}
    if not consumed:
        return 1.0
    fractions = [0.0]
    for name, whole in (("compute", "100"), ("memory", None)):
        if name not in consumed:
            continue
        total = whole or ((device.get("capacity") or {}).get(name) or {}).get("value")
        if total:
            used = kubernetes.utils.parse_quantity(consumed[name])
            fractions.append(float(used / kubernetes.utils.parse_quantity(total)))
    return min(1.0, max(fractions))


# --- watching pods -------------------------------------------------------------------------


class BindWatch:
    """A watch on the namespace's pods in a thread: when each was first seen bound."""

    def __init__(self, kubeconfig: pathlib.Path, namespace: str) -> None:
        self.api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.namespace = namespace
        self.bound: dict[str, float] = {}
        self.nodes: dict[str, str] = {}
        self.changed = threading.Condition()
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        listed = self.core.list_namespaced_pod(namespace)
        self.version = listed.metadata.resource_version
        self.thread = threading.Thread(target=self._run, name="bind-watch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                self._watch_once()
        except BaseException as exc:  # reported by wait/close in the caller's thread
            self.error = exc

    def _relist(self) -> None:
        """After the watch's version expired: list again; binds found by the list count from
        now, which can only make latencies longer, never shorter."""
        listed = self.core.list_namespaced_pod(self.namespace)
        self.version = listed.metadata.resource_version
        with self.changed:
            for item in listed.items:
                self._saw(item.metadata.name, item.spec.node_name)

    def _saw(self, name: str, node: str | None) -> None:
        if node and name not in self.bound:
            self.bound[name] = time.monotonic()
            self.nodes[name] = node
            self.changed.notify_all()

    def _watch_once(self) -> None:
        watch = kubernetes.watch.Watch()
        try:
            for event in watch.stream(
                self.core.list_namespaced_pod,
                self.namespace,
                resource_version=self.version,
                timeout_seconds=5,
                allow_watch_bookmarks=True,
            ):
                obj = event["object"]
                if event["type"] == "ERROR":  # a Status, as a dict
                    if isinstance(obj, dict) and obj.get("code") == 410:
                        self._relist()
                        return
                    raise RuntimeError(f"watch on pods of {self.namespace}: {obj}")
                if isinstance(obj, dict):  # a BOOKMARK the client could not deserialize
                    self.version = obj.get("metadata", {}).get("resourceVersion", self.version)
                    continue
                self.version = obj.metadata.resource_version
                if event["type"] in ("ADDED", "MODIFIED") and obj.spec is not None:
                    with self.changed:
                        self._saw(obj.metadata.name, obj.spec.node_name)
                if self.stopping.is_set():
                    return
        except ApiException as exc:
            if exc.status != 410:
                raise
            self._relist()
        finally:
            watch.stop()

    def wait(self, until: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not until():
                if self.error is not None:
                    raise RuntimeError(f"the pod watch failed: {self.error}") from self.error
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 0.5))
        return True

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)
        self.api.close()
        if self.error is not None:
            raise RuntimeError(f"the pod watch failed: {self.error}") from self.error


# --- one allocator's phases ----------------------------------------------------------------


def say(message: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S")
    print(f"{stamp} {message}", file=sys.stderr, flush=True)


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(0, math.ceil(q / 100 * len(ordered)) - 1)
    return ordered[rank]


@contextlib.contextmanager
def namespace(api: kubernetes.client.ApiClient, name: str) -> Iterator[str]:
    """A fresh namespace; afterwards its pods are force-deleted (no kubelet would finish a
    graceful deletion of a bound pod) and the namespace waited away, so its claims are gone
    and their devices free for the next phase."""
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name, "labels": {LABEL: "run"}}})
    deadline = time.monotonic() + 60
    while True:  # pods are admitted only once the namespace's default ServiceAccount exists
        try:
            core.read_namespaced_service_account("default", name)
            break
        except ApiException as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    try:
        yield name
    finally:
        with contextlib.suppress(ApiException):
            core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            core.delete_namespace(name)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                core.read_namespace(name)
            except ApiException as exc:
                if exc.status == 404:
                    break
                raise
            time.sleep(0.5)


def _create_templates(api: kubernetes.client.ApiClient, ns: str, bodies: dict[str, Obj]) -> None:
    custom = kubernetes.client.CustomObjectsApi(api)
    for name, request in bodies.items():
        custom.create_namespaced_custom_object(
            *RESOURCE, ns, "resourceclaimtemplates", template(name, request)
        )


def _claims(api: kubernetes.client.ApiClient, ns: str) -> list[Obj]:
    custom = kubernetes.client.CustomObjectsApi(api)
    listed = custom.list_namespaced_custom_object(*RESOURCE, ns, "resourceclaims")
    return list(listed.get("items", []))


def check_no_double_allocation(claims: Sequence[Obj], fleet: Fleet) -> list[str]:
    """Problems: a device held by two claims (not a shareable one), or shares summing past
    the device's capacity. Empty when the allocations are sound."""
    holders: dict[tuple[str, str], list[Obj]] = {}
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        for result in (allocation or {}).get("devices", {}).get("results", []):
            holders.setdefault((result["pool"], result["device"]), []).append(result)
    problems = []
    for key, results in holders.items():
        if len(results) < 2:
            continue
        device = fleet.devices.get(key, {})
        if not device.get("allowMultipleAllocations"):
            problems.append(f"device {key[0]}/{key[1]} held by {len(results)} claims")
            continue
        compute = sum(
            float(
                kubernetes.utils.parse_quantity(
                    (r.get("consumedCapacity") or {}).get("compute", "100")
                )
            )
            for r in results
        )
        if compute > 100:
            problems.append(f"shares of {key[0]}/{key[1]} take {compute:g}% compute")
    return problems


def shares_given_whole_gpus(claims: Sequence[Obj]) -> int:
    """Claims that asked for a share (capacity requests) and were given a device without
    consumed capacity: a GPU that cannot be shared (one in MIG mode), held whole."""
    count = 0
    for claim in claims:
        requests = claim.get("spec", {}).get("devices", {}).get("requests", [])
        if not any((r.get("exactly") or {}).get("capacity") for r in requests):
            continue
        allocation = (claim.get("status") or {}).get("allocation") or {}
        results = allocation.get("devices", {}).get("results", [])
        count += any(not r.get("consumedCapacity") for r in results)
    return count


def allocated_gpus(claims: Sequence[Obj], fleet: Fleet) -> float:
    total = 0.0
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        for result in (allocation or {}).get("devices", {}).get("results", []):
            device = fleet.devices.get((result["pool"], result["device"]))
            if device is not None:
                total += gpu_equivalents(device, result)
    return total


def _name(i: int, shape: Shape) -> str:
    return f"p{i:05d}-{shape.name}"


def fill(
    api: kubernetes.client.ApiClient,
    kubeconfig: pathlib.Path,
    ns: str,
    fleet: Fleet,
    args: argparse.Namespace,
) -> Obj:
    shapes = fill_shapes()
    rng = random.Random(args.seed)
    mean = sum(s.gpus * s.weight for s in shapes) / sum(s.weight for s in shapes)
    count = args.pods or max(1, round(args.load * fleet.gpus / mean))
    chosen = rng.choices(shapes, weights=[s.weight for s in shapes], k=count)
    _create_templates(api, ns, {s.name: s.request for s in shapes})
    core = kubernetes.client.CoreV1Api(api)
    watch = BindWatch(kubeconfig, ns)
    created: dict[str, float] = {}
    errors: list[str] = []

    def create(item: tuple[int, Shape]) -> None:
        i, shape = item
        name = _name(i, shape)
        began = time.monotonic()
        try:
            core.create_namespaced_pod(ns, pod(name, shape.name, gated=args.gated))
            created[name] = began
        except ApiException as exc:
            errors.append(f"{name}: {exc.status} {exc.reason}")

    say(f"fill: creating {count} pods ({sum(s.gpus for s in chosen):g} GPUs asked)")
    try:
        first = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(create, enumerate(chosen)))
        created_s = time.monotonic() - first
        say(f"fill: {len(created)} created in {created_s:.1f}s, {len(watch.bound)} bound so far")
        last = [time.monotonic(), len(watch.bound)]

        def settled() -> bool:
            if len(watch.bound) != last[1]:
                last[:] = [time.monotonic(), len(watch.bound)]
            return len(watch.bound) >= len(created) or time.monotonic() - last[0] >= args.settle

        watch.wait(settled, args.fill_timeout)
        bound = dict(watch.bound)
        say(f"fill: {len(bound)} of {len(created)} bound; nothing more for {args.settle:g}s")
    finally:
        watch.close()
    claims = _claims(api, ns)
    latencies = [bound[n] - created[n] for n in bound if n in created]
    span = (max(bound.values()) - first) if bound else math.nan
    by_shape: dict[str, list[int]] = {}
    for name in created:
        shape = name.split("-", 1)[1]
        by_shape.setdefault(shape, [0, 0])[0] += 1
        by_shape[shape][1] += name in bound
    allocated = allocated_gpus(claims, fleet)
    return {
        "pods": len(created),
        "create_errors": errors[:10],
        "created_s": round(created_s, 2),
        "bound": len(bound),
        "bound_per_s": round(len(bound) / span, 2) if bound else 0.0,
        "bind_span_s": round(span, 2),
        "latency_p50_s": round(_percentile(latencies, 50), 3),
        "latency_p99_s": round(_percentile(latencies, 99), 3),
        "latency_max_s": round(max(latencies), 3) if latencies else math.nan,
        "demand_gpus": round(sum(s.gpus for s in chosen), 2),
        "allocated_gpus": round(allocated, 2),
        "allocated_share": round(allocated / fleet.gpus, 4),
        # What the bound pods asked for; above it, allocated counts GPUs held beyond the ask.
        "served_gpus": round(sum(s.gpus for i, s in enumerate(chosen) if _name(i, s) in bound), 2),
        "shares_on_whole_gpus": shares_given_whole_gpus(claims),
        "by_shape": {k: {"pods": v[0], "bound": v[1]} for k, v in sorted(by_shape.items())},
        "double_allocations": check_no_double_allocation(claims, fleet),
        # Each bound pod's creation -> bound, seconds (for the CDFs of bench/perf_plots).
        "latencies_s": sorted(round(x, 3) for x in latencies),
    }


def churn_templates() -> dict[str, Obj]:
    """One template per kind of churn request: each MIG product's profiles, and each needs."""
    bodies: dict[str, Obj] = {}
    for product in MIG_PRODUCTS:
        for profile in _mig_profiles(product):
            bodies[_churn_name(product, profile.name, None, None)] = mig_request(
                product, profile.name
            )
    for memory, compute, _ in mig_churn.MIXES["default"].needs:
        bodies[_churn_name(None, None, memory, compute)] = needs_request(memory, compute)
    return bodies


def _churn_name(
    product: str | None, profile: str | None, memory: int | None, compute: int | None
) -> str:
    if profile is not None and product is not None:
        return f"{product}-{profile}".lower().replace(".", "")
    return f"needs-m{memory or 0}-c{compute or 0}"


def churn(
    api: kubernetes.client.ApiClient,
    kubeconfig: pathlib.Path,
    ns: str,
    fleet: Fleet,
    args: argparse.Namespace,
) -> Obj:
    churn_nodes = [n for n in fleet.nodes if n.labels.get(f"{LABEL}/churn")]
    gpus = len(churn_nodes) * GPUS_PER_NODE
    events = mig_churn.events(args.churn_claims, args.seed, gpus, args.churn_load)
    _create_templates(api, ns, churn_templates())
    core = kubernetes.client.CoreV1Api(api)
    watch = BindWatch(kubeconfig, ns)
    selector = {f"{LABEL}/churn": "true"}
    created: dict[str, float] = {}
    accepted: set[str] = set()
    refused: set[str] = set()
    kinds: dict[str, list[int]] = {}
    # (time, order, action, name): creations at arrivals; at arrival + patience, a verdict;
    # at departure, a bound pod's deletion.
    timeline: list[tuple[float, int, str, str, str]] = []
    for e in events:
        name = f"c{e.id:05d}"
        kind = _churn_name(e.product, e.profile, e.memory_gib, e.compute)
        at, leaves = e.arrival * args.churn_lifetime, e.departure * args.churn_lifetime
        timeline.append((at, 0, "create", name, kind))
        # A claim whose lifetime ends within the patience is judged when it leaves.
        timeline.append((min(at + args.patience, leaves), 1, "verdict", name, kind))
        timeline.append((leaves, 2, "depart", name, kind))
    timeline.sort()

    deleted: dict[str, float] = {}

    def delete(name: str) -> None:
        deleted[name] = time.monotonic()
        with contextlib.suppress(ApiException):
            core.delete_namespaced_pod(name, ns, grace_period_seconds=0)

    served: dict[str, dict[str, int]] = {}
    # Per accepted claim, its allocation's results (what it held, for the fit at arrival).
    holds: dict[str, list[Obj]] = {}
    recorded: dict[str, concurrent.futures.Future[None]] = {}
    served_lock = threading.Lock()
    custom = kubernetes.client.CustomObjectsApi(api)

    def record_served(name: str, kind: str) -> None:
        """Which MIG profile the allocator gave an accepted claim (by needs: any that covers)."""
        with contextlib.suppress(ApiException):
            statuses = core.read_namespaced_pod(name, ns).status.resource_claim_statuses or []
            for status in statuses:
                claim = custom.get_namespaced_custom_object(
                    *RESOURCE, ns, "resourceclaims", status.resource_claim_name
                )
                allocation = (claim.get("status") or {}).get("allocation") or {}
                for result in allocation.get("devices", {}).get("results", []):
                    with served_lock:
                        holds.setdefault(name, []).append(result)
                    device = fleet.devices.get((result["pool"], result["device"]), {})
                    profile = device.get("attributes", {}).get("profile", {}).get("string", "?")
                    with served_lock:
                        counts = served.setdefault(kind, {})
                        counts[profile] = counts.get(profile, 0) + 1

    recorder = None
    if args.record:  # every change of the churn's pods, claims, Events, NASes (bench.timeline)
        from bench import timeline as timeline_bench

        recorder = timeline_bench.Recorder(kubeconfig, ns, args.drasat_namespace)
    say(f"churn: {len(events)} claims on {len(churn_nodes)} MIG nodes")
    pool = concurrent.futures.ThreadPoolExecutor(args.clients)
    lag = 0.0
    try:
        start = time.monotonic()
        for at, _, action, name, kind in timeline:
            wait = start + at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            else:
                lag = max(lag, -wait)
            if action == "create":
                created[name] = time.monotonic()
                if recorder is not None:
                    recorder.add({"t": time.time(), "kind": "Create", "object": {"name": name}})
                kinds.setdefault(kind, [0, 0])[0] += 1
                pool.submit(
                    core.create_namespaced_pod, ns, pod(name, kind, selector, gated=args.gated)
                )
            elif action == "verdict":
                if name in watch.bound:
                    accepted.add(name)
                    kinds[kind][1] += 1
                    recorded[name] = pool.submit(record_served, name, kind)
                else:
                    refused.add(name)
                    pool.submit(delete, name)
            elif name in accepted:
                # After its record (submitted earlier, so never queued behind this one).
                pool.submit(lambda n=name: (recorded[n].result(), delete(n)))
        pool.shutdown(wait=True)
        # Bound after their verdict, before their deletion took effect: refused for latency.
        late = sum(1 for n in refused if n in watch.bound)
        wall = time.monotonic() - start
        latencies = [watch.bound[n] - created[n] for n in accepted if n in watch.bound]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        watch.close()
        if recorder is not None:
            recorder.close()
    recording = (
        {"namespace": ns, "pods": sorted(created), "records": recorder.records}
        if recorder is not None
        else None
    )
    return {
        "recording": recording,
        "nodes": len(churn_nodes),
        "gpus": gpus,
        "claims": len(events),
        "accepted": len(accepted),
        "accepted_share": round(len(accepted) / max(1, len(events)), 4),
        "refused": len(refused),
        "refused_then_bound": late,
        "latency_p50_s": round(_percentile(latencies, 50), 3),
        "latency_p99_s": round(_percentile(latencies, 99), 3),
        "wall_s": round(wall, 1),
        "schedule_lag_max_s": round(lag, 2),
        "by_kind": {
            k: {"claims": v[0], "accepted": v[1], "served": served.get(k, {})}
            for k, v in sorted(kinds.items())
        },
        # Per claim, in arrival order, for the fit at arrival (bench.churn_fit): its kind, and
        # seconds from the churn's start to its creation, its bind and its pod's deletion (null
        # where none), and the devices an accepted claim held.
        "claims_held": {
            name: {
                "kind": kind,
                "created": round(created[name] - start, 3),
                "bound": round(watch.bound[name] - start, 3) if name in watch.bound else None,
                "deleted": round(deleted[name] - start, 3) if name in deleted else None,
                "results": holds.get(name, []),
            }
            for _, _, action, name, kind in timeline
            if action == "create" and name in created
        },
        # Per claim, in arrival order: [arrival s, accepted, creation -> bound s or null]
        # (acceptance over time and the CDFs of bench/perf_plots).
        "claims_timeline": [
            [
                round(at, 2),
                name in accepted,
                round(watch.bound[name] - created[name], 3) if name in watch.bound else None,
            ]
            for at, _, action, name, _ in timeline
            if action == "create"
        ],
    }


def run_allocator(
    name: str,
    api: kubernetes.client.ApiClient,
    kubeconfig: pathlib.Path,
    fleet: Fleet,
    args: argparse.Namespace,
    run: str,
) -> Obj:
    """Start the allocator, fill, clean up, churn, clean up, stop it. A missing allocator is
    reported in the results, not raised: the other column still counts."""
    try:
        handle = ALLOCATORS[name](kubeconfig, args.drasat_namespace)
    except NotImplementedError as exc:
        say(f"{name}: not run ({exc})")
        return {"allocator": name, "status": f"not run: {exc}"}
    say(f"{name}: started")
    out: Obj = {"allocator": name, "status": "ran", "gated": name in GATED}
    args = argparse.Namespace(**{**vars(args), "gated": name in GATED})
    try:
        if "fill" in args.phases:
            with namespace(api, f"{run}-{name}-fill") as ns:
                out["fill"] = fill(api, kubeconfig, ns, fleet, args)
        if "churn" in args.phases and args.churn_claims and args.churn_nodes:
            with namespace(api, f"{run}-{name}-churn") as ns:
                out["churn"] = churn(api, kubeconfig, ns, fleet, args)
    finally:
        handle.stop()
    # drasat's controller's counters and sums (solve time, gates lifted), read before it ended.
    metrics = str(getattr(handle, "metrics", ""))
    out["controller_metrics"] = {
        key: float(value)
        for key, _, value in (line.rpartition(" ") for line in metrics.splitlines())
        if key and not key.startswith("#") and "_bucket" not in key and "_created" not in key
    }
    recording = out.get("churn", {}).pop("recording", None)
    if recording is not None:  # `python -m bench.timeline --replay` reads it
        log = getattr(handle, "log", None)
        recording["log"] = pathlib.Path(log).read_text().splitlines() if log else []
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"churn-records-{name}.json"
        path.write_text(json.dumps({"runs": [{"allocator": name, **recording}]}) + "\n")
    return out


#: The DeviceClasses a run installs (bench.nvidia_alloc installs NVIDIA's instead).
class_bodies = classes.device_classes


@contextlib.contextmanager
def _device_classes(api: kubernetes.client.ApiClient) -> Iterator[None]:
    custom = kubernetes.client.CustomObjectsApi(api)
    created = []
    try:
        for body in class_bodies():
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


@contextlib.contextmanager
def control_plane(kubeconfig: pathlib.Path | None) -> Iterator[pathlib.Path]:
    """The given cluster, or a fresh one (stopped again at the end) from
    drasat.testbed.controlplane."""
    if kubeconfig is not None:
        yield kubeconfig
        return
    from drasat.testbed.controlplane import realcluster

    with tempfile.TemporaryDirectory(prefix="drasat-bench-kube-") as folder:
        started = realcluster.Cluster.start(
            directory=pathlib.Path(folder) / "c", die_with_parent=True
        )
        try:
            yield started.kubeconfig
        finally:
            started.stop()


def bench(args: argparse.Namespace) -> Obj:
    run = args.run or f"kb-{uuid.uuid4().hex[:5]}"
    with control_plane(args.kubeconfig) as kubeconfig:
        api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        with api, _device_classes(api):
            planned = plan_fleet(run, args.nodes, args.mig_share, args.churn_nodes)
            try:
                say(f"fleet: {len(planned)} nodes x {GPUS_PER_NODE} GPUs")
                fleet = create_fleet(api, planned, args.clients)
                say(
                    f"fleet: created in {fleet.created_s:.1f}s, {fleet.slice_bytes / 2**20:.1f} MiB"
                )
                results = {
                    "run": run,
                    "nodes": args.nodes,
                    "gpus": fleet.gpus,
                    "mig_nodes": sum(1 for n in planned if n.labels[LABEL] == "mig"),
                    "fleet_create_s": round(fleet.created_s, 1),
                    "slice_mib": round(fleet.slice_bytes / 2**20, 1),
                    "allocators": [
                        run_allocator(name, api, kubeconfig, fleet, args, run)
                        for name in args.allocators
                    ],
                }
            finally:
                delete_fleet(api, planned)
    return results


def churn_fleet(results: Obj, args: argparse.Namespace) -> list[FleetNode]:
    planned = plan_fleet(results["run"], results["nodes"], args.mig_share, args.churn_nodes)
    return [n for n in planned if n.labels.get(f"{LABEL}/churn")]


def _seconds(value: float) -> float | None:
    """A latency for results.json: None where the claim was never bound."""
    return round(value, 3) if math.isfinite(value) else None


def add_fit_at_arrival(results: Obj, args: argparse.Namespace) -> None:
    """Each allocator's churn gains `fit_at_arrival`: how many claims fit when they arrived
    (bench.churn_fit, drasat's own allocation over the devices then held), how many of those
    were accepted, and their creation -> bound p50 / p99, a claim never bound counting as
    unbounded (None when a percentile lands on one). Pure: after the run, from its record."""
    from bench import churn_fit

    nodes = churn_fleet(results, args)
    judge = churn_fit.Judge(
        {n.name: node_slices(n, f"uid-{n.name}") for n in nodes},
        {n: template(n, r) for n, r in churn_templates().items()},
        {body["metadata"]["name"]: body for body in class_bodies()},
    )
    for allocator in results["allocators"]:
        churned = allocator.get("churn")
        if not churned or "claims_held" not in churned:
            continue
        held = churned["claims_held"]
        started = time.monotonic()
        fit = churn_fit.fit_at_arrival(judge, held)
        # claims_timeline is in arrival order, as claims_held: [arrival, accepted, latency].
        verdicts = dict(zip(held, churned["claims_timeline"], strict=True))
        fitting = [n for n, ok in fit.items() if ok]
        accepted = [n for n in fitting if verdicts[n][1]]
        latencies = [verdicts[n][2] if verdicts[n][2] is not None else math.inf for n in fitting]
        churned["fit_at_arrival"] = {
            "claims": len(fitting),
            "accepted": len(accepted),
            "accepted_share": round(len(accepted) / max(1, len(fitting)), 4),
            "latency_p50_s": _seconds(_percentile(latencies, 50)),
            "latency_p99_s": _seconds(_percentile(latencies, 99)),
            "judged_s": round(time.monotonic() - started, 1),
        }


def summary(results: Obj) -> str:
    lines = [
        "| allocator | nodes × GPUs | pods | bound | bound/s | creation→bound p50 / p99 s "
        "| GPUs allocated when full (asked by the bound pods) "
        "| churn: accepted (of claims) | churn p50 / p99 s "
        "| fit at arrival: accepted (of claims) | their p50 / p99 s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a in results["allocators"]:
        head = f"| {a['allocator']} | {results['nodes']} × 8 = {results['gpus']} "
        if a["status"] != "ran":
            lines.append(head + f"| {a['status']} | | | | | | | | |")
            continue
        f = a.get("fill")
        c = a.get("churn")
        churn_cells = (
            f"{c['accepted']} ({c['claims']}; {100 * c['accepted_share']:.1f}%) "
            f"| {c['latency_p50_s']} / {c['latency_p99_s']}"
            if c
            else "— | —"
        )
        fit = (c or {}).get("fit_at_arrival")
        churn_cells += (
            f" | {fit['accepted']} ({fit['claims']}; {100 * fit['accepted_share']:.1f}%) "
            f"| {_shown(fit['latency_p50_s'])} / {_shown(fit['latency_p99_s'])}"
            if fit
            else " | — | —"
        )
        fill_cells = (
            f"| {f['pods']} | {f['bound']} | {f['bound_per_s']} | "
            f"{f['latency_p50_s']} / {f['latency_p99_s']} | "
            f"{100 * f['allocated_share']:.1f}% ({f['allocated_gpus']:g} of {results['gpus']}; "
            f"asked {f.get('served_gpus', '?')}; whole GPUs to shares "
            f"{f.get('shares_on_whole_gpus', '?')}) | "
            if f
            else "| — | — | — | — | — | "
        )
        lines.append(head + fill_cells + churn_cells + " |")
    return "\n".join(lines) + "\n"


def _shown(seconds: float | None) -> str:
    return "never bound" if seconds is None else str(seconds)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.kube_alloc",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--kubeconfig",
        type=pathlib.Path,
        default=None,
        help="a running cluster (default: start one from DRASAT_KUBE_BIN)",
    )
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--mig-share", type=float, default=0.25, help="share of MIG nodes")
    parser.add_argument("--load", type=float, default=1.2, help="fill demand / fleet GPUs")
    parser.add_argument("--pods", type=int, default=0, help="fill pods (default: from --load)")
    parser.add_argument(
        "--allocators",
        default="kube,drasat",
        help=f"comma-separated, run in this order: {', '.join(ALLOCATORS)}",
    )
    parser.add_argument("--drasat-namespace", default="drasat")
    parser.add_argument("--phases", default="fill,churn", help="fill, churn or both")
    parser.add_argument(
        "--settle",
        type=float,
        default=15.0,
        help="the cluster is full when nothing binds for this long (s)",
    )
    parser.add_argument("--fill-timeout", type=float, default=900.0)
    parser.add_argument("--clients", type=int, default=8, help="concurrent API calls")
    parser.add_argument("--churn-nodes", type=int, default=8)
    parser.add_argument("--churn-claims", type=int, default=600)
    parser.add_argument("--churn-load", type=float, default=1.2)
    parser.add_argument("--churn-lifetime", type=float, default=30.0, help="mean, seconds")
    parser.add_argument(
        "--patience",
        type=float,
        default=5.0,
        help="a churn claim not bound within this long is refused (s)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--record",
        action="store_true",
        help="record the churn's watch events and the controller log for bench.timeline",
    )
    parser.add_argument(
        "--controller-args",
        default="",
        help="more flags for drasat's controller, one string (e.g. '--batch-window 0.05')",
    )
    parser.add_argument("--run", default="", help="name prefix of the run's objects")
    parser.add_argument(
        "--refit",
        type=pathlib.Path,
        default=None,
        help="no run: add the fit at arrival to this results.json (its summary.md beside it)",
    )
    parser.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path("bench/results/kube-alloc")
    )
    args = parser.parse_args(argv)
    args.allocators = [a for a in args.allocators.split(",") if a]
    args.phases = [p for p in args.phases.split(",") if p]
    if not args.phases or set(args.phases) - {"fill", "churn"}:
        parser.error(f"--phases {','.join(args.phases)}: fill, churn or both")
    unknown = [a for a in args.allocators if a not in ALLOCATORS]
    if unknown:
        parser.error(f"unknown allocator(s) {', '.join(unknown)}; known: {', '.join(ALLOCATORS)}")
    if args.nodes < 1 or args.churn_nodes > args.nodes:
        parser.error("--nodes must be at least 1 and at least --churn-nodes")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from bench import drasat_allocator

    if args.refit is not None:
        results = json.loads(args.refit.read_text())
        add_fit_at_arrival(results, parse_args(results["argv"]))
        args.out = args.refit.parent
    else:
        drasat_allocator.EXTRA_ARGS[:] = shlex.split(args.controller_args)
        results = bench(args)
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        results["machine"] = f"{stamp}; {platform.platform()}; python {platform.python_version()}"
        results["argv"] = list(sys.argv[1:] if argv is None else argv)
        # The run's results are written before the judging after it: a failure there (it can
        # be retried with --refit) loses nothing of the run.
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        add_fit_at_arrival(results, args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    table = summary(results)
    (args.out / "summary.md").write_text(table)
    print(table, end="")
    print(f"wrote {args.out}/results.json and summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
