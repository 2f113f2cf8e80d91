"""A cluster for the stateful oracle: drasat's real v1 controller (`V1Controller`, cycles run one
at a time by the test) on the in-memory API server of the controller tests (`ctl_kubefake`), over
nodes of drasat's driver (the node plugin's ResourceSlices and NodeAllocationState: whole GPUs,
shares with consumable capacity, MIG with partitionable counters; `fleet`) and of NVIDIA's
(NVIDIA-format slices: `nvidiaslices`; no NAS there, the ledger is the claims' statuses), with
drasat's and NVIDIA's DeviceClasses. The controller allocates both drivers.

What the oracle is given is read back from the API, as kube-scheduler reads it: every
ResourceSlice, every DeviceClass, and the allocation of every allocated claim (the scheduler's
allocated-devices, shared-device and consumed-capacity state is built from those, by the oracle,
as kube-scheduler's claim tracker builds it; counters follow from the allocated devices).
"""

from __future__ import annotations

import copy
import functools
import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import fleet
import nvidiaslices
from ctl_kubefake import FakeApi

from drasat.api.devicemodel import classes
from drasat.api.groups import DRIVER_NAME
from drasat.controller import v1inputs
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import informer, nasclient
from drasat.kube import resources as r

Obj = dict[str, Any]
NS = "drasat"
NVIDIA = nvidiaslices.DRIVER
#: NVIDIA-format nodes: the quickstart example's (T4s, one XID-tainted; an A100 with dynamic MIG;
#: an A100 with static MIG devices) and simulated fleets in NVIDIA's format.
NVIDIA_KINDS = (*nvidiaslices.KINDS, "2xA100-40GB,mig=all", "A100-40GB,T4,mig=0", "2xT4")
#: Cycles one step runs at most until the controller has nothing more to do.
MAX_CYCLES = 4


@dataclass(frozen=True)
class NodeSpec:
    """One node: drasat's (`drasat` set) or NVIDIA's (`nvidia`: a kind of NVIDIA_KINDS)."""

    name: str
    drasat: fleet.NodeCase | None = None
    nvidia: str | None = None

    def describe(self) -> str:
        if self.drasat is not None:
            gpus = ", ".join(
                g.product + (" mig" if g.mig else "") + (" unhealthy" if g.unhealthy else "")
                for g in self.drasat.gpus
            )
            return f"{self.name}: drasat [{gpus}]{' shares' if self.drasat.shares else ''}"
        return f"{self.name}: nvidia {self.nvidia}"


@functools.cache
def _nvidia_node(kind: str, name: str) -> tuple[Obj, list[Obj]]:
    # Built once per kind and name (reading the example and the fleet takes most of a second).
    if kind in nvidiaslices.KINDS:
        return nvidiaslices.node(kind, name)
    return nvidiaslices.fleet_node(name, kind)


@functools.cache
def _drasat_node(case: fleet.NodeCase) -> tuple[list[Obj], list[Obj]]:
    """The node's NAS devices and slices, built once per case."""
    built = fleet.build(case)
    devices = [d.model_dump(mode="json", exclude_none=True) for d in built.nas.allocatableDevices]
    return devices, built.slices


def mig_mode_gpus(slices: Iterable[Obj]) -> set[tuple[str, str, str]]:
    """The whole GPUs (driver, pool, device) whose MIG devices are published beside them: GPUs in
    MIG mode, in drasat's format and NVIDIA's (dynamic MIG) alike."""
    parents: set[str] = set()
    whole: dict[str, tuple[str, str, str]] = {}
    for body in slices:
        spec = body["spec"]
        for device in spec.get("devices") or []:
            attributes = device.get("attributes") or {}
            kind = (attributes.get("type") or {}).get("string")
            if kind == "mig":
                parents.add(str((attributes.get("parentUUID") or {}).get("string")))
            elif kind == "gpu":
                uuid = str((attributes.get("uuid") or {}).get("string"))
                whole[uuid] = (spec["driver"], spec["pool"]["name"], device["name"])
    return {key for uuid, key in whole.items() if uuid in parents}


#: The taint `unusable` puts on devices (no claim generated tolerates it).
UNUSABLE = {"key": "oracle.drasat.io/unusable", "value": "drasat", "effect": "NoSchedule"}


def unusable(slices: Iterable[Obj], devices: set[tuple[str, str, str]]) -> list[Obj]:
    """The slices with these devices tainted (NoSchedule): upstream then leaves them out of an
    exact count, fails an `All` request they match, and still counts what they consume (their
    counters, when allocated). How drasat treats a device it matches but never hands out."""
    out = []
    for body in slices:
        spec = body["spec"]
        if "devices" in spec:
            changed = []
            for d in spec["devices"]:
                if (spec["driver"], spec["pool"]["name"], d["name"]) in devices:
                    d = {**d, "taints": [*(d.get("taints") or []), UNUSABLE]}
                changed.append(d)
            body = {**body, "spec": {**spec, "devices": changed}}
        out.append(body)
    return out


def devices_of(allocations: Iterable[Obj]) -> set[tuple[str, str, str]]:
    """Every device (driver, pool, device) the allocations name."""
    return {
        (r["driver"], r["pool"], r["device"])
        for a in allocations
        for r in (a.get("devices") or {}).get("results") or []
    }


class Cluster:
    """The API, the nodes and the controller; `close()` stops the controller's informers."""

    def __init__(self, nodes: Iterable[NodeSpec]) -> None:
        self.api = FakeApi()
        self.nodes = list(nodes)
        self.tainted = False
        for body in [*classes.device_classes(), *nvidiaslices.device_classes()]:
            self.api.create(r.DEVICE_CLASSES_V1, body)
        for spec in self.nodes:
            self._add(spec)
        self._names = itertools.count(1)
        config = V1Config(
            namespace=NS, batch_window_s=0, drivers=(DRIVER_NAME, NVIDIA), device_taint=False
        )
        self.controller = V1Controller(self.api, config)
        self.controller.start(sync_timeout_s=10, cycles=False)
        #: What kube-scheduler reads and no step changes: every slice and class.
        self.slices = self._items(r.RESOURCE_SLICES_V1)
        self.classes = self._items(r.DEVICE_CLASSES_V1)

    def close(self) -> None:
        self.controller.stop()

    def _add(self, spec: NodeSpec) -> None:
        if spec.drasat is not None:
            devices, slices = _drasat_node(spec.drasat)
            node: Obj = {
                "metadata": {"name": spec.name, "labels": {"kubernetes.io/hostname": spec.name}},
                "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
            }
            nas = nasclient.new(namespace=NS, node=spec.name)
            nas["spec"]["allocatableDevices"] = copy.deepcopy(devices)
            nas["status"] = "Ready"
            self.tainted |= any(g.unhealthy for g in spec.drasat.gpus)
        else:
            assert spec.nvidia is not None
            node, slices = _nvidia_node(spec.nvidia, spec.name)
            nas = None
        self.api.create(r.NODES, node)
        if nas is not None:
            self.api.create(r.NAS, nas)
        for body in slices:
            self.api.create(r.RESOURCE_SLICES_V1, copy.deepcopy(body))
            self.tainted |= any(d.get("taints") for d in body["spec"].get("devices") or [])

    def publish(self, slices: Iterable[Obj], device_classes: Iterable[Obj]) -> None:
        """More ResourceSlices and DeviceClasses (another driver's, ...), read from then on."""
        for body in device_classes:
            self.api.create(r.DEVICE_CLASSES_V1, copy.deepcopy(body))
        for body in slices:
            self.api.create(r.RESOURCE_SLICES_V1, copy.deepcopy(body))
        self.slices = self._items(r.RESOURCE_SLICES_V1)
        self.classes = self._items(r.DEVICE_CLASSES_V1)

    # -- what the oracle reads -------------------------------------------------------------------

    def _items(self, resource: r.Resource) -> list[Obj]:
        return self.api.list(resource).items

    def claims(self) -> dict[str, Obj]:
        """Every claim by uid."""
        return {c["metadata"]["uid"]: c for c in self._items(r.RESOURCE_CLAIMS_V1)}

    # -- steps -----------------------------------------------------------------------------------

    def arrive(self, claims: list[Obj]) -> str:
        """A pod with these claims (each created as a standalone ResourceClaim): its name."""
        pod = f"p{next(self._names):03d}"  # creation order is name order
        entries = []
        for i, body in enumerate(claims):
            body = copy.deepcopy(body)
            body["metadata"] = {"name": f"{pod}-c{i}", "namespace": "default"}
            self.api.create(r.RESOURCE_CLAIMS_V1, body, namespace="default")
            entries.append({"name": f"c{i}", "resourceClaimName": f"{pod}-c{i}"})
        self.api.create(
            r.PODS,
            {
                "metadata": {"name": pod, "namespace": "default"},
                "spec": {
                    "containers": [{"name": "c", "image": "x"}],
                    "resourceClaims": entries,
                    # Whatever the node's taints: only the devices decide, as in the oracle.
                    "tolerations": [{"operator": "Exists"}],
                },
            },
            namespace="default",
        )
        return pod

    def bound_elsewhere(self, node: str, claims: list[Obj], allocations: list[Obj]) -> str:
        """A pod whose claims another allocator allocated (`allocations`, one per claim),
        reserved for it and bound to `node`, as kube-scheduler leaves them: its name."""
        pod = f"p{next(self._names):03d}"  # creation order is name order
        names = [f"{pod}-c{i}" for i in range(len(claims))]
        body = {
            "metadata": {"name": pod, "namespace": "default"},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "image": "x"}],
                "resourceClaims": [
                    {"name": f"c{i}", "resourceClaimName": n} for i, n in enumerate(names)
                ],
                "tolerations": [{"operator": "Exists"}],
            },
        }
        made = self.api.create(r.PODS, body, namespace="default")
        reserved = {"resource": "pods", "name": pod, "uid": made["metadata"]["uid"]}
        for name, claim, found in zip(names, claims, allocations, strict=True):
            claim = copy.deepcopy(claim)
            claim["metadata"] = {"name": name, "namespace": "default"}
            written = self.api.create(r.RESOURCE_CLAIMS_V1, claim, namespace="default")
            written["status"] = {"allocation": found, "reservedFor": [reserved]}
            self.api.replace_status(r.RESOURCE_CLAIMS_V1, written)
        return pod

    def leave(self, pod: str) -> None:
        """The pod and its claims deleted (the claims' devices are released)."""
        found = self.api.get(r.PODS, pod, namespace="default")
        self.api.delete(r.PODS, pod, namespace="default")
        for entry in found["spec"]["resourceClaims"]:
            self.api.delete(r.RESOURCE_CLAIMS_V1, entry["resourceClaimName"], namespace="default")

    def run(self) -> None:
        """Cycles, each on informers that have seen every write before it, until one writes
        nothing and leaves nothing for the next (at most MAX_CYCLES)."""
        for _ in range(MAX_CYCLES):
            self.caught_up()
            before = self._state()
            more = self.controller.cycle()
            if not more and self._state() == before:
                break
        self.caught_up()

    def _state(self) -> dict[tuple[str, str, str], str]:
        # Every object but Events (a refused pod's decision Event may be written in any cycle).
        with self.api.lock:
            return {
                key: obj["metadata"]["resourceVersion"]
                for key, obj in self.api.objects.items()
                if not key[0].endswith("/events")
            }

    def caught_up(self, timeout: float = 20.0) -> None:
        """Wait until every informer of the controller holds what the API holds."""
        deadline = time.monotonic() + timeout
        while True:
            if all(self._same(i) for i in self.controller._informers):
                return
            if time.monotonic() > deadline:
                raise AssertionError("the controller's informers did not catch up with the API")
            time.sleep(0.001)

    def _same(self, found: informer.Informer) -> bool:
        kind = FakeApi._kind(found.resource)
        with self.api.lock:
            wanted = {
                (ns, name): obj["metadata"]["resourceVersion"]
                for (k, ns, name), obj in self.api.objects.items()
                if k == kind and (found.namespace is None or ns == found.namespace)
            }
        have = {
            ((o["metadata"].get("namespace") or ""), o["metadata"]["name"]): o["metadata"].get(
                "resourceVersion"
            )
            for o in found.items()
        }
        return found.synced and have == wanted


def allocation(claim: Obj) -> Obj | None:
    found = (claim.get("status") or {}).get("allocation")
    return found or None


def node_of(claim: Obj) -> str | None:
    return v1inputs.allocated_node(claim)


def spec_only(claim: Obj) -> Obj:
    """The claim as the allocator is asked about it (no status)."""
    return {k: v for k, v in claim.items() if k != "status"}
