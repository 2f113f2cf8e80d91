"""The simulated cluster the lifecycle model drives, one step at a time.

What runs: the simulated API server (`drasat.testbed.sim.apiserver`: real HTTP, validation as the
real server's), the real controller (`V1Controller`, two replicas of which one leads, each with
its own informers, driven through its public interface only: constructor, `start(cycles=False)`,
`cycle()`, `stop()`), and beside it the other actors, each stepped by the model rather than on a
thread of its own:

- kube-scheduler for v1 (`drasat.testbed.sim.v1scheduler`: binds pods whose claims are
  allocated, PostFilter deallocates an unreserved claim pinning a pod nowhere);
- kube-controller-manager (`drasat.testbed.sim.controllers`: claims from templates, reservedFor,
  deallocation of claims with the scheduler's finalizer, the garbage collector);
- kubelets (`kubelet_pass`: a bound pod whose claims are allocated and reserved runs; a pod
  deleted or evicted on its node stays, Terminating with its claims reserved and its devices in
  use, for `grace_rounds` rounds — its `terminationGracePeriodSeconds` — before the kubelet
  confirms the deletion; the pod GC removes at once a terminating pod whose node is gone, and a
  finished pod goes at once: nothing runs there);
- a second allocator (`second_allocator_pass`: kube-scheduler's own allocator for claims that
  tolerate drasat's allocator taint, deciding from the allocations of the round before — two
  allocators deciding at the same instant), and an admin's direct writes (`admin_allocate`);
- the node side (`add_node`): Node, NodeAllocationState and ResourceSlices as drasat's node
  plugin publishes them (`drasat.nodeplugin.slicepublisher`), removed with the Node.

A round: the second allocator decides, the leader's cycle, the controller-manager, the
scheduler, the kubelets, the clock one second on; after each actor every replica's informers
catch up (`lc_api.Tracker`), so the run is the same every time for the same steps. A step is a
rule then rounds until one changes nothing (at most `max_rounds`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from lc_api import FaultPlan, ModelApi, Tracker

from drasat.api import crds
from drasat.api.devicemodel import classes
from drasat.api.devicemodel.nodegpus import Inventory, profiles_by_gpu
from drasat.api.groups import DRIVER_NAME
from drasat.api.nas import NodeAllocationStateSpec
from drasat.api.policy import AllocationPolicySpec, SolverBudget
from drasat.controller.v1controller import V1Config, V1Controller
from drasat.kube import errors, nasclient
from drasat.kube import resources as r
from drasat.kube.client import KubeClient, configuration_for
from drasat.kube.events import EventRecorder
from drasat.nodeplugin import slicepublisher
from drasat.testbed.sim import apiserver, controllers, kubeclient, routing, v1scheduler

Obj = dict[str, Any]
NAS_NAMESPACE = "drasat"
NAMESPACE = "ml"
GiB = 2**30
#: Rounds (seconds of the model's clock) a deleted pod on a node takes to go: the model's pods'
#: `terminationGracePeriodSeconds` (`lc_objects.pod`).
GRACE_ROUNDS = 3

log = logging.getLogger(__name__)


# --- the hardware: the model's own description -------------------------------------------------

#: MIG profiles of an A100-40GB the model uses: name -> (GPU-instance profile id, memory
#: slices, starts, memory). From NVIDIA's published table (docs: DESIGN, "MIG facts").
A100_PROFILES: dict[str, tuple[int, int, tuple[int, ...], int]] = {
    "1g.5gb": (19, 1, (0, 1, 2, 3, 4, 5, 6), 5 * GiB),
    "2g.10gb": (14, 2, (0, 2, 4), 10 * GiB),
    "3g.20gb": (9, 4, (0, 4), 20 * GiB),
}
#: Memory slices of a GPU-instance profile id, whatever the product (NVML's placement sizes).
SLICES_BY_PROFILE_ID = {19: 1, 20: 1, 15: 2, 14: 2, 9: 4, 5: 4, 0: 8}


@dataclasses.dataclass(frozen=True)
class Gpu:
    minor: int
    uuid: str
    product: str
    memory: int
    mig: bool


#: Node shapes: the GPUs each kind of node has, (product, memory, MIG mode).
SHAPES: dict[str, tuple[tuple[str, int, bool], ...]] = {
    "t4x1": (("Tesla T4", 15 * GiB, False),),
    "a100mig": (("NVIDIA A100-SXM4-40GB", 40 * GiB, True),),
    "t4x2": (("Tesla T4", 15 * GiB, False), ("Tesla T4", 15 * GiB, False)),
    "a100mig+t4": (("NVIDIA A100-SXM4-40GB", 40 * GiB, True), ("Tesla T4", 15 * GiB, False)),
}

_uuids = itertools.count(1)


def make_gpus(shape: str) -> tuple[Gpu, ...]:
    return tuple(
        Gpu(minor, f"GPU-{next(_uuids):08d}-0000-4000-8000-000000000000", product, memory, mig)
        for minor, (product, memory, mig) in enumerate(SHAPES[shape])
    )


def allocatable(gpus: tuple[Gpu, ...]) -> list[Obj]:
    """The NAS `allocatableDevices` of the GPUs (what drasat's node plugin reads from NVML)."""
    out: list[Obj] = []
    arch = {"Tesla T4": ("Turing", "7.5"), "NVIDIA A100-SXM4-40GB": ("Ampere", "8.0")}
    for gpu in gpus:
        architecture, capability = arch[gpu.product]
        out.append({"gpu": {
            "index": gpu.minor, "uuid": gpu.uuid, "minor": gpu.minor, "migEnabled": gpu.mig,
            "memoryBytes": gpu.memory, "productName": gpu.product, "architecture": architecture,
            "cudaComputeCapability": capability,
        }})  # fmt: skip
    products = {g.product for g in gpus if g.mig}
    for product in sorted(products):
        for profile, (gi, size, starts, memory) in A100_PROFILES.items():
            out.append({"mig": {
                "profile": profile, "parentProductName": product, "giProfileId": gi,
                "memoryBytes": memory, "computeSlices": int(profile[0]),
                "placements": [{"start": s, "size": size} for s in starts],
            }})  # fmt: skip
    return out


# --- the clock ---------------------------------------------------------------------------------


class Clock:
    """The controller's clock: one second per round, whatever the machine's speed."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# --- a controller replica ----------------------------------------------------------------------


@dataclasses.dataclass
class Replica:
    index: int
    world: World
    controller: V1Controller | None = None
    client: KubeClient | None = None
    tracker: Tracker = dataclasses.field(default_factory=Tracker)
    #: While >= 0: this many more write checks pass, then the lease is lost (mid-cycle).
    lease_left: int = -1

    def may_write(self) -> bool:
        if self.world.leader != self.index:
            return False
        if self.lease_left == 0:
            self.world.leader = -1  # the lease is lost: no one leads until the model elects
            return False
        if self.lease_left > 0:
            self.lease_left -= 1
        return True

    def start(self) -> None:
        self.tracker = Tracker()
        self.client = KubeClient(configuration_for(self.world.server.url), request_timeout=10)
        api = ModelApi(self.client, self.world.faults, self.tracker, self.world.note_eviction,
                       self.world.budget_objects, self.world.note_budget_refusal)  # fmt: skip
        self.controller = V1Controller(
            api,  # type: ignore[arg-type]
            self.world.config,
            policy=lambda: self.world.policy,
            may_write=self.may_write,
            # Events deduplicated on the model's clock, not the machine's.
            recorder=EventRecorder(
                api,  # type: ignore[arg-type]
                component=self.world.config.component,
                clock=lambda: datetime.datetime.fromtimestamp(self.world.clock.now, datetime.UTC),
            ),
            clock=self.world.clock,
        )
        self.controller.start(sync_timeout_s=60, cycles=False)

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
        if self.client is not None:
            self.client.close()
        self.controller = self.client = None


# --- the world ---------------------------------------------------------------------------------


class HarnessError(Exception):
    """The model itself could not go on (not a finding about drasat)."""


class World:
    def __init__(
        self, *, nodes: dict[str, str], replicas: int = 2, grace_rounds: int = GRACE_ROUNDS
    ) -> None:
        #: Rounds a deleted pod on a node stays Terminating (0: it goes at once).
        self.grace_rounds = grace_rounds
        #: Pod uid -> the round it was first seen Terminating on its node.
        self.terminating: dict[str, int] = {}
        self.server = apiserver.ApiServer(
            crds=crds.all_crds(), graceful_pod_deletion=grace_rounds > 0
        ).start()
        self.admin = KubeClient(configuration_for(self.server.url), request_timeout=10)
        self.sim = kubeclient.KubeClient(self.server.url)
        self.clock = Clock()
        self.faults = FaultPlan()
        self.faults.thread = threading.current_thread()
        self.config = V1Config(
            namespace=NAS_NAMESPACE,
            batch_window_s=0,
            unsuitable_ttl_s=5.0,
            write_workers=1,  # one order of writes: the same run for the same steps
            # Solves that always finish (they take milliseconds here): a time limit met on a
            # loaded machine would make a step's outcome depend on the machine's speed.
            time_limit_s=120.0,
            # A refusal's decision Event follows every change of the decision (its refresh
            # counts the machine's seconds).
            decision_refresh_s=0.0,
        )
        self.policy = AllocationPolicySpec(
            solver=SolverBudget(timeLimitSeconds=120, onlineTimeLimitSeconds=60, workers=1)
        )
        self.scheduler = v1scheduler.V1Scheduler(self.sim)
        self.manager = controllers.ControllerManager(self.sim, clock=lambda: self.clock.now)
        self.gpus: dict[str, tuple[Gpu, ...]] = {}
        self.shapes: dict[str, str] = {}
        #: Claim uid -> the results an allocator other than drasat wrote (the model's record).
        self.foreign: dict[str, list[Obj]] = {}
        #: Pods the controller evicted (preemption): (round, namespace/name).
        self.evictions: list[tuple[int, str]] = []
        #: PodDisruptionBudgets of the namespace: name -> minAvailable (every pod selected).
        self.budgets: dict[str, int] = {}
        #: Evictions a budget refused: (round, namespace/name, budget).
        self.budget_refusals: list[tuple[int, str, str]] = []
        #: Cycles that raised: (round, text).
        self.aborts: list[tuple[int, str]] = []
        self.rounds = 0
        self.faulted = False
        self.leader = 0
        #: Who takes the lease when the leader loses it in the middle of a cycle.
        self.next_leader = 0
        self._newest: dict[str, int] = {}
        self._scanned = 0
        self._second_view: dict[str, set[str]] = {}
        self.setup(nodes)
        self.replicas = [Replica(i, self) for i in range(replicas)]
        for replica in self.replicas:
            replica.start()
        self.catch_up()

    def note_eviction(self, pod: str) -> None:
        self.evictions.append((self.rounds, pod))

    def note_budget_refusal(self, pod: str, budget: str) -> None:
        self.budget_refusals.append((self.rounds, pod, budget))

    def budget_objects(self) -> list[Obj]:
        """The budgets as the API server serves them: `disruptionsAllowed` from the pods bound
        and running now (the disruption controller's healthy pods, always current here)."""
        healthy = sum(
            1
            for p in self.admin.list(r.PODS, namespace=NAMESPACE).items
            if (p.get("spec") or {}).get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase", "Pending") in ("Pending", "Running")
        )
        return [
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"minAvailable": least, "selector": {}},
                "status": {
                    "disruptionsAllowed": max(0, healthy - least),
                    "currentHealthy": healthy,
                    "desiredHealthy": least,
                },
            }
            for name, least in sorted(self.budgets.items())
        ]

    # --- set up -------------------------------------------------------------------------------

    def setup(self, nodes: dict[str, str]) -> None:
        for body in classes.device_classes():
            self.admin.create(r.DEVICE_CLASSES_V1, body)
        for name, shape in nodes.items():
            self.add_node(name, shape)

    def add_node(self, name: str, shape: str) -> None:
        """A node registers (Node), its plugin publishes its NAS and ResourceSlices, both owned
        by the Node (gone with it)."""
        self.shapes[name] = shape
        gpus = self.gpus.get(name) or make_gpus(shape)
        self.gpus[name] = gpus
        node = self.admin.create(
            r.NODES,
            {
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}},
            },
        )
        owner = {"apiVersion": "v1", "kind": "Node", "name": name,
                 "uid": node["metadata"]["uid"]}  # fmt: skip
        body = nasclient.new(namespace=NAS_NAMESPACE, node=name)
        body["metadata"]["ownerReferences"] = [owner]
        devices = allocatable(gpus)
        body["spec"]["allocatableDevices"] = devices
        body["status"] = "Ready"
        self.admin.create(r.NAS, body)
        spec = NodeAllocationStateSpec.model_validate({"allocatableDevices": devices})
        found = spec.gpus()
        inventory = Inventory(
            gpus=found, mig_profiles=profiles_by_gpu(found, spec.mig_profiles()), shares=True
        )
        slicepublisher.SlicePublisher(self.admin, node_name=name).sync(inventory)

    def close(self) -> None:
        for replica in self.replicas:
            replica.stop()
        self.admin.close()
        self.sim.close_watches()
        self.server.stop()

    # --- catching up --------------------------------------------------------------------------

    def newest(self, plural: str) -> int:
        """The newest resourceVersion the server wrote of a kind."""
        store = self.server.api.store
        with store._cond:
            events = store._events
            fresh = []
            for event in reversed(events):
                if event.resource_version <= self._scanned:
                    break
                fresh.append(event)
            for event in fresh:
                key = event.store_key[1]
                self._newest[key] = max(self._newest.get(key, 0), event.resource_version)
            if events:
                self._scanned = events[-1].resource_version
        return self._newest.get(plural, 0)

    def read(self, resource: r.Resource, namespace: str | None = None) -> list[Obj]:
        """Every object of a kind as the server stores it (the model's own reads and the model's
        kubelets read storage directly: the truth, without an HTTP round trip)."""
        route = routing.Route(resource.group, resource.version, resource.plural)
        rt = self.server.api.resource(route)
        items, _ = self.server.api.store.list_objects(rt, namespace)
        return items

    @property
    def version(self) -> int:
        return int(self.server.api.store.resource_version)

    def catch_up(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        for replica in self.replicas:
            if replica.controller is None:
                continue  # stopped: no informers
            while not replica.tracker.caught_up(self.newest):
                if time.monotonic() > deadline:
                    behind = {p: (v, self.newest(p)) for p, v in replica.tracker.seen.items()}
                    raise HarnessError(f"replica {replica.index} informers behind: {behind}")
                time.sleep(0.0005)

    # --- the actors ---------------------------------------------------------------------------

    def round(self) -> bool:
        """One round; whether anything but Events was written."""
        start = self.version
        self.rounds += 1
        view = self._second_view
        self._second_view = self.allocated_devices()
        self.catch_up()
        if self.leader < 0:  # the lease was lost in the last cycle: the other replica takes it
            self.leader = self.next_leader
            for replica in self.replicas:
                replica.lease_left = -1
        leader = self.replicas[self.leader]
        met = len(self.faults.injected)
        if leader.controller is not None:
            try:
                leader.controller.cycle()
            except Exception as error:  # the finding "a cycle aborts"
                log.info("cycle raised", exc_info=True)
                self.aborts.append((self.rounds, f"{type(error).__name__}: {error}"))
        #: Whether this round's cycle met an injected API error.
        self.faulted = len(self.faults.injected) > met
        self.faults.tick()
        self.second_allocator_pass(view)
        # The controller-manager's resourceclaim controller and garbage collector (the model
        # makes no Deployments, ReplicaSets, Jobs or NoExecute taints).
        for actor in (self.manager.sync_claims, self.scheduler.run_once, self.kubelet_pass):
            try:
                actor()
            except Exception as error:  # an actor meets what another actor did: next round
                log.info("actor %s: %s", actor, error)
        self.clock.now += 1.0
        self.catch_up()
        return self._changed_since(start)

    def _changed_since(self, start: int) -> bool:
        store = self.server.api.store
        with store._cond:
            return any(
                e.resource_version > start and e.store_key[1] != "events"
                for e in reversed(store._events)
                if e.resource_version > start
            )

    def settle(self, max_rounds: int) -> int:
        """Rounds until one changes nothing (at most `max_rounds`); how many ran."""
        for done in range(1, max_rounds + 1):
            if not self.round():
                return done
        return max_rounds

    def kubelet_pass(self) -> None:
        """Each node's kubelet starts the bound pods whose claims are allocated and reserved for
        them (it prepares them), and confirms the deletion of a Terminating pod once its grace
        period is over; a pod bound to a node that is gone waits for the pod GC."""
        nodes = {n["metadata"]["name"] for n in self.read(r.NODES)}
        claims = {c["metadata"]["name"]: c for c in self.read(r.RESOURCE_CLAIMS_V1, NAMESPACE)}
        listed = self.read(r.PODS, NAMESPACE)
        self.terminating = {
            k: v for k, v in self.terminating.items()
            if any(p["metadata"]["uid"] == k for p in listed)
        }  # fmt: skip
        for pod in listed:
            meta, spec = pod["metadata"], pod.get("spec") or {}
            phase = (pod.get("status") or {}).get("phase", "Pending")
            if meta.get("deletionTimestamp"):
                self._terminate(pod, phase, spec.get("nodeName") in nodes)
                continue
            if phase != "Pending" or not spec.get("nodeName") or meta.get("deletionTimestamp"):
                continue
            if spec["nodeName"] not in nodes:
                continue
            names = pod_claim_names(pod)
            if None in names:
                continue
            ready = all(
                n in claims
                and (claims[n].get("status") or {}).get("allocation")
                and any(
                    x.get("uid") == meta["uid"]
                    for x in (claims[n].get("status") or {}).get("reservedFor") or []
                )
                for n in names
            )
            if ready:
                self.set_phase(pod, "Running")

    def _terminate(self, pod: Obj, phase: str, on_a_node: bool) -> None:
        """A Terminating pod: it goes once its grace period is over (the kubelet confirms with
        gracePeriodSeconds 0), at once where nothing runs (finished) or its node is gone (the
        pod GC)."""
        uid = str(pod["metadata"]["uid"])
        since = self.terminating.setdefault(uid, self.rounds)
        running = on_a_node and phase not in ("Succeeded", "Failed")
        if running and self.rounds - since < self.grace_rounds:
            return
        self.confirm_deletion(pod)

    def confirm_deletion(self, pod: Obj) -> None:
        meta = pod["metadata"]
        path = kubeclient.path("", "v1", "pods", namespace=meta["namespace"], name=meta["name"])
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta["uid"]}}  # fmt: skip
        try:
            self.sim.request("DELETE", path, body=body)
        except Exception as error:  # gone already, or a new pod of its name
            log.info("deletion of %s not confirmed: %s", meta["name"], error)
        self.terminating.pop(str(meta["uid"]), None)

    def set_phase(self, pod: Obj, phase: str) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(errors.NotFound):
            self.admin.patch(
                r.PODS,
                meta["name"],
                {"status": {"phase": phase}},
                namespace=meta["namespace"],
                subresource="status",
            )

    # --- what is allocated (for the second allocator) -----------------------------------------

    def allocated_devices(self) -> dict[str, set[str]]:
        """node -> names of drasat's devices some claim's status names (any allocator)."""
        out: dict[str, set[str]] = {}
        for claim in self.read(r.RESOURCE_CLAIMS_V1, NAMESPACE):
            for result in results_of(claim):
                out.setdefault(str(result.get("pool")), set()).add(str(result.get("device")))
        return out

    def second_allocator_pass(self, view: dict[str, set[str]]) -> None:
        """kube-scheduler's allocator, for pending pods whose claims tolerate drasat's allocator
        taint (drasat leaves those to it): a whole non-MIG GPU free in `view` (the allocations
        of the round before: it decides at the same instant as drasat's cycle), the scheduler's
        finalizer added as kube-scheduler does."""
        claims = {c["metadata"]["name"]: c for c in self.read(r.RESOURCE_CLAIMS_V1, NAMESPACE)}
        cordoned = {
            n["metadata"]["name"]
            for n in self.read(r.NODES)
            if (n.get("spec") or {}).get("unschedulable")
        }
        taken = {node: set(devs) for node, devs in view.items()}
        for pod in self.read(r.PODS, NAMESPACE):
            if (pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            for name in pod_claim_names(pod):
                claim = claims.get(name or "")
                if claim is None or not tolerates_all(claim) or is_allocated(claim):
                    continue
                spot = self._free_whole_gpu(taken, cordoned)
                if spot is None:
                    continue
                node, device = spot
                taken.setdefault(node, set()).add(device)
                self.write_allocation(claim, node, device, finalizer=True)

    def _free_whole_gpu(
        self, taken: dict[str, set[str]], cordoned: set[str]
    ) -> tuple[str, str] | None:
        for node in sorted(self.gpus):
            if node in cordoned or node not in self.shapes:
                continue
            for gpu in self.gpus[node]:
                device = f"gpu-{gpu.minor}"
                if gpu.mig or device in taken.get(node, set()):
                    continue
                return node, device
        return None

    def write_allocation(
        self,
        claim: Obj,
        node: str,
        device: str,
        *,
        finalizer: bool = False,
        share: tuple[int, int] | None = None,
    ) -> bool:
        """An allocation written by someone other than drasat (recorded as foreign): the whole
        device, or a share of it (memory bytes, compute %) as upstream's allocator writes one."""
        meta = claim["metadata"]
        if finalizer:
            kept = list(meta.get("finalizers") or [])
            if controllers.SCHEDULER_FINALIZER not in kept:
                try:
                    claim = self.admin.patch(
                        r.RESOURCE_CLAIMS_V1,
                        meta["name"],
                        {"metadata": {"finalizers": [*kept, controllers.SCHEDULER_FINALIZER],
                                      "resourceVersion": meta["resourceVersion"]}},
                        namespace=meta["namespace"],
                    )  # fmt: skip
                except errors.KubeError:
                    return False
        request = first_request_name(claim)
        result: Obj = {"request": request, "driver": DRIVER_NAME, "pool": node, "device": device}
        if share is not None:
            result["consumedCapacity"] = {"memory": str(share[0]), "compute": str(share[1])}
            result["shareID"] = str(uuid.uuid4())
        allocation = {
            "devices": {"results": [result]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
            "allocationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }  # fmt: skip
        body = {**claim, "status": {**(claim.get("status") or {}), "allocation": allocation}}
        try:
            written = self.admin.replace_status(r.RESOURCE_CLAIMS_V1, body)
        except errors.KubeError as error:
            log.info("foreign allocation of %s not written: %s", meta["name"], error)
            return False
        self.foreign[written["metadata"]["uid"]] = [result]
        return True


# --- reading objects (the model's own, small) ----------------------------------------------------


def pod_claim_names(pod: Obj) -> list[str | None]:
    """The claim names of a pod's entries (None: a template's claim not made yet)."""
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    out: list[str | None] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        out.append(entry.get("resourceClaimName") or statuses.get(entry.get("name")))
    return out


def is_allocated(claim: Obj) -> bool:
    return bool((claim.get("status") or {}).get("allocation"))


def results_of(claim: Obj) -> list[Obj]:
    """The allocation's results of drasat's driver."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    found = (allocation.get("devices") or {}).get("results") or []
    return [x for x in found if x.get("driver") == DRIVER_NAME]


def tolerates_all(claim: Obj) -> bool:
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        for t in (request.get("exactly") or {}).get("tolerations") or []:
            if t.get("operator") == "Exists" and not t.get("key"):
                return True
    return False


def first_request_name(claim: Obj) -> str:
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    return str(requests[0]["name"]) if requests else "gpu"


Action = Callable[[], None]
