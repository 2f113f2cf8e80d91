"""The chaos soak (issue 29): the whole v1 system on the real control plane while things break.

    python -m bench.soak [--ops 2000] [--nodes 8] [--seed N] [--fault-every S] [--out DIR]

It starts its own control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager
from `DRASAT_KUBE_BIN`, as `scripts/kube-cluster up`), two `drasat controller --dra-api v1`
replicas with leader election, and per node a `drasat nodeplugin` process on a simulated fleet
(publishing its ResourceSlices and NodeAllocationState) with a simulated kubelet in a process of
its own (`python -m bench.soak kubelet`: the real kubelet v1.37 does not hold up eight at once on
the project's two-core machine beside everything else). Nodes cycle through four shapes: two
A100-40GB in MIG mode; four T4 with shares; two H100-80GB, one of them in MIG mode; two A30
without shares. Every node also has the CPU fallback device.

The operations are creations and deletions of pods and ResourceClaims (each API call one
operation), of eight kinds: one whole GPU (template), two whole GPUs (direct claim), one
time-sliced GPU shared by two pods (direct claim), a share (memory and compute by capacity),
MIG by profile (1g, 2g, 3g) and by needs (memory), an optional GPU (`firstAvailable` GPU, else
the CPU fallback) and the CPU fallback alone. Pods carry drasat's scheduling gate, as the chart's
admission creates them. Meanwhile a fault thread injects, one at a time, a fault of each kind in
turn (shuffled per round):

- `controller-kill`: SIGKILL the leading controller replica, start it again;
- `plugin-kill`, `kubelet-kill`: SIGKILL a node's plugin (kubelet), start it again;
- `apiserver-restart`, `scheduler-restart`: SIGKILL kube-apiserver (kube-scheduler), start it
  again;
- `etcd-pause`: SIGSTOP etcd for 4 s, then SIGCONT;
- `node-delete`: delete a Node with prepared claims; its pods are force-deleted (as the pod
  garbage collector does) and the Node comes back (as its kubelet registers it again);
- `device-taint`: a NoExecute DeviceTaintRule on a device a running pod holds (the device-taint
  eviction controller evicts the pod), removed once the pod is gone;
- `nvml-fail`: the next calls of three NVML functions on a node fail (`NVML_ERROR_UNKNOWN`);
- `mig-fail`: the next GPU-instance and compute-instance creations on a MIG node fail (and a MIG
  pod is sent there);
- `disk-full`: the plugin's state directory (a 16 MiB tmpfs) filled for 5 s while a pod is
  prepared there.

Recovery time of a fault: from its end (the process started again, etcd resumed, the Node back,
the taint in place, the failure injected, the disk emptied) until a fresh probe pod (a claim of
the CPU fallback, on the fault's node or any node) runs and every pod bound to that node (or any
node) runs; for `device-taint`, until the pods on the tainted device are gone. A fault not
recovered within 180 s is a violation.

At each checkpoint (every `--checkpoint-every` operations, no fault in flight) the soak waits for
every bound pod to run, then checks, retrying for 30 s before a finding counts:

- no device held by two claims (shares and the CPU fallback excepted), no share capacity over
  the device's memory or 100% compute, no shared counter (a GPU's memory slices: MIG placements
  against each other and the whole GPU) over its ResourceSlice's value;
- the NodeAllocationState ledgers and the claims' status agree both ways;
- every CDI spec file and every MIG instance on the simulated hardware belongs to a claim
  allocated on that node;
- no controller cycle took longer than 30 s (the replicas' `cycle N: ... in Xs` log lines).

At every `--drain-every` operations and at the end the soak deletes everything, then checks that
nothing is left (no claim, ledger entry, CDI file, checkpoint record, MIG instance, MPS daemon
directory or process), and that a pod per whole GPU not in MIG mode of every node (pinned to it)
all run: what fits, runs. The resident memory of each drasat process is sampled at every
checkpoint; a process that lived through at least four samples must not grow by more than 25%
(and 32 MiB) after its second. Results: a JSON file and a summary in `--out` (default
`build/soak`); exit 1 on any violation.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import urllib3
from kubernetes.client import ApiException

from drasat.api import crds
from drasat.api.devicemodel import classes, names
from drasat.api.groups import DRIVER_NAME, NAS_GROUP, SCHEDULING_GATE, VERSION
from drasat.testbed.controlplane import binaries, realcluster
from drasat.testbed.simnvml import parse_fleet

Obj = dict[str, Any]
RESOURCE = ("resource.k8s.io", "v1")
NAMESPACE = "drasat"
WORK_NAMESPACES = ("soak-a", "soak-b")
PROBE_NAMESPACE = "soak-probe"
KINDS = (
    "controller-kill",
    "plugin-kill",
    "kubelet-kill",
    "apiserver-restart",
    "scheduler-restart",
    "etcd-pause",
    "node-delete",
    "device-taint",
    "nvml-fail",
    "mig-fail",
    "disk-full",
)
#: (fleet, shares) of the node shapes, in turn.
SHAPES = (
    ("2xA100-40GB,mig=all", True),
    ("4xT4", True),
    ("2xH100-80GB,mig=1", True),
    ("2xA30-24GB", False),
)
RECOVERY_LIMIT_S = 180.0
SETTLE_S = 90.0
CYCLE_BOUND_S = 30.0
NVML_UNKNOWN = 999
_CYCLE = re.compile(r"cycle (\d+): .* in ([0-9.]+)s")
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def say(message: str) -> None:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S")
    print(f"[soak {stamp}] {message}", flush=True)


@dataclasses.dataclass
class Config:
    ops: int = 2000
    nodes: int = 8
    seed: int = 1
    #: Seconds between the end of one fault's recovery and the next fault.
    fault_every: float = 10.0
    checkpoint_every: int = 200
    drain_every: int = 1000
    #: Seconds between two operations.
    op_interval: float = 0.25
    #: Items (a pod or two with their claims) alive at once, about.
    live: int = 0  # 0: 2.5 per node
    kinds: tuple[str, ...] = KINDS
    #: The run goes on past `ops` until each kind was injected this many times.
    fault_rounds: int = 0
    out: pathlib.Path = pathlib.Path("build/soak")


# --- processes -------------------------------------------------------------------------------


def _popen(args: list[str], log: pathlib.Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=realcluster.sigterm_on_parent_death,
        )


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            _kill(process)


def rss_mib(pid: int) -> float | None:
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


@dataclasses.dataclass
class Node:
    name: str
    folder: pathlib.Path
    fleet: str
    shares: bool
    kubeconfig: pathlib.Path
    plugin: subprocess.Popen[bytes] | None = None
    kubelet: subprocess.Popen[bytes] | None = None
    tmpfs: bool = False

    @property
    def state(self) -> pathlib.Path:
        return self.folder / "state"

    @property
    def cdi(self) -> pathlib.Path:
        return self.folder / "cdi"

    @property
    def fault_file(self) -> pathlib.Path:
        return self.folder / "nvml-faults"

    @property
    def hardware(self) -> pathlib.Path:
        return self.folder / "fleet.json"

    @property
    def mig(self) -> bool:
        return "mig=" in self.fleet

    def sim_fleet(self) -> str:
        return f"{self.fleet},seed={self.name},state={self.hardware},faults={self.fault_file}"

    def start_plugin(self) -> None:
        socket = self.folder / "r" / f"{DRIVER_NAME}-reg.sock"
        socket.unlink(missing_ok=True)  # a killed plugin's: wait for the new one's
        args = [
            sys.executable, "-m", "drasat", "--log-level", "INFO", "nodeplugin",
            "--node-name", self.name, "--simulate-gpus", self.sim_fleet(),
            "--namespace", NAMESPACE, "--kubeconfig", str(self.kubeconfig),
            "--kubelet-api", "structured", "--resourceslices",
            "--shares" if self.shares else "--no-shares",
            "--kubelet-plugin-dir", str(self.folder / "p"),
            "--kubelet-registry-dir", str(self.folder / "r"),
            "--state-dir", str(self.state), "--cdi-root", str(self.cdi), "--gc-interval", "10",
        ]  # fmt: skip
        self.plugin = _popen(args, self.folder / "plugin.log")
        _wait(socket.exists, 90, f"the node plugin of {self.name}", self.plugin)

    def start_kubelet(self) -> None:
        args = [
            sys.executable, "-m", "bench.soak", "kubelet", "--node", self.name,
            "--kubeconfig", str(self.kubeconfig), "--registry-dir", str(self.folder / "r"),
            "--cdi-root", str(self.cdi),
        ]  # fmt: skip
        self.kubelet = _popen(args, self.folder / "kubelet.log")

    def processes(self) -> list[tuple[str, subprocess.Popen[bytes] | None]]:
        return [(f"plugin {self.name}", self.plugin), (f"kubelet {self.name}", self.kubelet)]

    def stop(self) -> None:
        for _, process in self.processes():
            if process is not None:
                _stop(process)
        if self.tmpfs:
            subprocess.run(["umount", "-l", str(self.state)], check=False)


def _wait(
    ready: Callable[[], Any],
    timeout: float,
    what: str,
    process: subprocess.Popen[bytes] | None = None,
    interval: float = 0.2,
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ApiException, OSError, urllib3.exceptions.HTTPError):
            value = ready()
            if value:
                return value
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what}: the process exited ({process.returncode})")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def _mount_tmpfs(folder: pathlib.Path, size: str = "16m") -> bool:
    """A small tmpfs over `folder` (the plugin's state directory), so it can be filled up; False
    where mounting is not permitted (not root): the disk-full fault is then not injected."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(folder)],
        capture_output=True,
    )
    return done.returncode == 0


# --- the workload ----------------------------------------------------------------------------


def _attribute(name: str) -> str:
    return f'device.attributes["{DRIVER_NAME}"].{name}'


def _request(device_class: str, *cel: str, capacity: Obj | None = None, count: int = 0) -> Obj:
    request: Obj = {"deviceClassName": device_class}
    if cel:
        request["selectors"] = [{"cel": {"expression": c}} for c in cel]
    if capacity:
        request["capacity"] = {"requests": capacity}
    if count:
        request.update({"allocationMode": "ExactCount", "count": count})
    return request


def _claim_spec(request: Obj | None = None, first: list[Obj] | None = None) -> Obj:
    entry: Obj = {"name": "gpu"}
    if first is not None:
        entry["firstAvailable"] = first
    else:
        entry["exactly"] = request
    return {"devices": {"requests": [entry]}}


TEMPLATES: dict[str, Obj] = {
    "exclusive": _claim_spec(_request(classes.GPU_CLASS)),
    "share": _claim_spec(_request(classes.GPU_CLASS, capacity={"memory": "4Gi", "compute": "25"})),
    "mig-1g": _claim_spec(
        _request(classes.MIG_CLASS, f'{_attribute("profile")}.startsWith("1g.")')
    ),
    "mig-2g": _claim_spec(
        _request(classes.MIG_CLASS, f'{_attribute("profile")}.startsWith("2g.")')
    ),
    "mig-3g": _claim_spec(
        _request(classes.MIG_CLASS, f'{_attribute("profile")}.startsWith("3g.")')
    ),
    "mig-needs": _claim_spec(
        _request(
            classes.MIG_CLASS,
            f'device.capacity["{DRIVER_NAME}"].memory.compareTo(quantity("9Gi")) >= 0',
        )
    ),
    "optional": _claim_spec(
        first=[
            {"name": "gpu", "deviceClassName": classes.GPU_CLASS},
            {"name": "cpu", "deviceClassName": classes.FALLBACK_CLASS},
        ]
    ),
    "cpu": _claim_spec(_request(classes.FALLBACK_CLASS)),
}
DIRECT: dict[str, Obj] = {
    "two-gpus": _claim_spec(_request(classes.GPU_CLASS, count=2)),
    "time-sliced": {
        **_claim_spec(_request(classes.GPU_CLASS)),
        "devices": {
            **_claim_spec(_request(classes.GPU_CLASS))["devices"],
            "config": [
                {
                    "opaque": {
                        "driver": DRIVER_NAME,
                        "parameters": {
                            "apiVersion": f"{DRIVER_NAME}/v1alpha1",
                            "kind": "GpuConfig",
                            "sharing": {
                                "strategy": "TimeSlicing",
                                "timeSlicingConfig": {"timeSlice": "Long"},
                            },
                        },
                    }
                }
            ],
        },
    },
}
#: Workload kinds: (weight, template or None, direct claim or None, pods).
WORKLOAD: dict[str, tuple[int, str | None, str | None, int]] = {
    "exclusive": (20, "exclusive", None, 1),
    "two-gpus": (6, None, "two-gpus", 1),
    "time-sliced": (6, None, "time-sliced", 2),
    "share": (14, "share", None, 1),
    "mig-1g": (10, "mig-1g", None, 1),
    "mig-2g": (6, "mig-2g", None, 1),
    "mig-3g": (4, "mig-3g", None, 1),
    "mig-needs": (10, "mig-needs", None, 1),
    "optional": (14, "optional", None, 1),
    "cpu": (10, "cpu", None, 1),
}


def pod_body(
    name: str,
    *,
    template: str | None = None,
    claim: str | None = None,
    node: str | None = None,
) -> Obj:
    source = {"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim}
    spec: Obj = {
        "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", **source}],
        "schedulingGates": [{"name": SCHEDULING_GATE}],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@dataclasses.dataclass
class Item:
    kind: str
    namespace: str
    pods: list[str]
    claim: str | None  # a direct claim's name


def node_body(name: str) -> Obj:
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "soak"}
            ],
        },
    }


# --- the soak --------------------------------------------------------------------------------


@dataclasses.dataclass
class Fault:
    kind: str
    target: str
    at: float  # seconds since the start
    #: From the fault's start to its end (process started again, etcd resumed, ...).
    outage_s: float = 0.0
    #: From the fault's end until every pod runs again and a fresh pod runs (see the top).
    recovery_s: float | None = None
    note: str = ""


class Soak:
    def __init__(self, config: Config, folder: pathlib.Path) -> None:
        self.config = config
        self.folder = folder
        self.rng = random.Random(config.seed)
        self.started = time.monotonic()
        self.kube: realcluster.Cluster | None = None
        self.api: Any = None
        self.nodes: list[Node] = []
        self.controllers: dict[str, subprocess.Popen[bytes]] = {}
        self.items: list[Item] = []
        self.ops: dict[str, int] = {}
        self.api_retries = 0
        self.faults: list[Fault] = []
        self.skipped: dict[str, str] = {}
        self.violations: list[str] = []
        self.checkpoints = 0
        self.rss: dict[tuple[str, int], list[float]] = {}
        self.lock = threading.Lock()  # one fault or one checkpoint at a time
        self.stopping = threading.Event()
        self.faults_idle = threading.Event()
        self.finished = threading.Event()
        self.fault_error: BaseException | None = None
        self.counter = 0

    # -- helpers ------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def core(self) -> Any:
        return kubernetes.client.CoreV1Api(self.api)

    def custom(self) -> Any:
        return kubernetes.client.CustomObjectsApi(self.api)

    def retry(self, call: Callable[[], Any], what: str, timeout: float = 120.0) -> Any:
        """`call()`, again while the API server is away (restarted, etcd paused): connection
        errors and 5xx/429 answers are retried for `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return call()
            except ApiException as exc:
                if exc.status and exc.status < 500 and exc.status != 429:
                    raise
                error: BaseException = exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:  # the server is restarting
                error = exc
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: the API server did not answer: {error}")
            self.api_retries += 1
            time.sleep(0.5)

    def count(self, op: str) -> None:
        self.ops[op] = self.ops.get(op, 0) + 1

    def total_ops(self) -> int:
        return sum(self.ops.values())

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.counter}"

    # -- start and stop -----------------------------------------------------------------------

    def start(self) -> None:
        say(f"control plane in {self.folder}")
        self.kube = realcluster.Cluster.start(directory=self.folder / "kube", die_with_parent=True)
        self.api = kubernetes.config.new_client_from_config(config_file=str(self.kube.kubeconfig))
        self._install()
        for i in range(self.config.nodes):
            fleet, shares = SHAPES[i % len(SHAPES)]
            name = f"soak-{i}"
            folder = pathlib.Path(tempfile.mkdtemp(prefix=f"{name}-", dir="/tmp"))
            node = Node(name, folder, fleet, shares, self.kube.kubeconfig)
            node.state.mkdir()
            node.tmpfs = "disk-full" in self.config.kinds and _mount_tmpfs(node.state)
            self.core().create_node(node_body(name))
            self._node_ready(name)
            self.nodes.append(node)
        if "disk-full" in self.config.kinds and not any(n.tmpfs for n in self.nodes):
            self.skipped["disk-full"] = "mounting a tmpfs is not permitted here (not root)"
        for node in self.nodes:
            node.start_plugin()
        for node in self.nodes:
            node.start_kubelet()
        for identity in ("replica-1", "replica-2"):
            self.controllers[identity] = self._start_controller(identity)
        _wait(self._taint_rule, 90, "the controller's DeviceTaintRule")
        _wait(self._all_slices, 90, "every node's ResourceSlices")
        say(f"{len(self.nodes)} nodes, 2 controller replicas up after {self.elapsed():.0f}s")

    def _install(self) -> None:
        extensions = kubernetes.client.ApiextensionsV1Api(self.api)
        for crd in crds.all_crds():
            extensions.create_custom_resource_definition(crd)
        for crd in crds.all_crds():
            _wait(
                lambda c=crd: any(
                    cond.type == "Established" and cond.status == "True"
                    for cond in extensions.read_custom_resource_definition(
                        c["metadata"]["name"]
                    ).status.conditions
                    or []
                ),
                60,
                f"CRD {crd['metadata']['name']}",
            )
        for body in classes.device_classes():
            self.custom().create_cluster_custom_object(*RESOURCE, "deviceclasses", body)
        for ns in (NAMESPACE, *WORK_NAMESPACES, PROBE_NAMESPACE):
            self.core().create_namespace({"metadata": {"name": ns}})
            _wait(
                lambda n=ns: self.core().read_namespaced_service_account("default", n),
                60,
                f"namespace {ns}'s default ServiceAccount",
            )
            for name, spec in TEMPLATES.items():
                body = {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": name},
                    "spec": {"spec": spec},
                }
                self.custom().create_namespaced_custom_object(
                    *RESOURCE, ns, "resourceclaimtemplates", body
                )

    def _node_ready(self, name: str) -> None:
        self.core().patch_node_status(name, {"status": node_body(name)["status"]})
        self.core().patch_node(name, {"spec": {"taints": None}})

    def _start_controller(self, identity: str) -> subprocess.Popen[bytes]:
        assert self.kube is not None
        args = [
            sys.executable, "-m", "drasat", "--log-level", "INFO", "controller",
            "--dra-api", "v1", "--kubeconfig", str(self.kube.kubeconfig),
            "--namespace", NAMESPACE, "--metrics-address", "", "--batch-window", "0.1",
            "--leader-elect", "--leader-election-identity", identity,
            "--lease-duration", "8", "--renew-deadline", "6", "--retry-period", "2",
        ]  # fmt: skip
        return _popen(args, self.folder / f"controller-{identity}.log")

    def _taint_rule(self) -> bool:
        self.custom().get_cluster_custom_object(*RESOURCE, "devicetaintrules", "drasat-allocator")
        return True

    def _slices(self) -> list[Obj]:
        listed = self.retry(
            lambda: self.custom().list_cluster_custom_object(*RESOURCE, "resourceslices"),
            "list slices",
        )["items"]
        return [s for s in listed if s["spec"].get("driver") == DRIVER_NAME]

    def _all_slices(self) -> bool:
        pools = {s["spec"]["pool"]["name"] for s in self._slices()}
        return pools >= {n.name for n in self.nodes}

    def stop(self) -> None:
        self.stopping.set()
        try:
            for process in self.controllers.values():
                _stop(process)
            for node in self.nodes:
                node.stop()
            if self.kube is not None:
                self.kube.stop()
            if self.api is not None:
                self.api.close()
            for node in self.nodes:
                shutil.rmtree(node.folder, ignore_errors=True)
        finally:
            self.finished.set()

    # -- operations ---------------------------------------------------------------------------

    def create_item(self, kind: str, node: str | None = None, namespace: str = "") -> Item:
        _, template, direct, pods = WORKLOAD[kind]
        ns = namespace or self.rng.choice(WORK_NAMESPACES)
        claim = None
        if direct is not None:
            claim = self.name(f"c-{kind}")
            body = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": claim},
                "spec": DIRECT[direct],
            }
            self.retry(
                lambda: self.custom().create_namespaced_custom_object(
                    *RESOURCE, ns, "resourceclaims", body
                ),
                f"create claim {ns}/{claim}",
            )
            self.count("claim create")
        item = Item(kind, ns, [], claim)
        for _ in range(pods):
            name = self.name(f"p-{kind}")
            body = pod_body(name, template=template, claim=claim, node=node)
            self.retry(
                lambda b=body: self.core().create_namespaced_pod(ns, b), f"create pod {ns}/{name}"
            )
            self.count("pod create")
            item.pods.append(name)
        return item

    def delete_item(self, item: Item, *, force: bool = False) -> None:
        grace = 0 if force else None
        for name in item.pods:
            with contextlib.suppress(ApiException):  # 404: evicted or collected before
                self.retry(
                    lambda n=name: self.core().delete_namespaced_pod(
                        n, item.namespace, grace_period_seconds=grace
                    ),
                    f"delete pod {item.namespace}/{name}",
                )
            self.count("pod delete")
        if item.claim is not None:
            with contextlib.suppress(ApiException):
                self.retry(
                    lambda: self.custom().delete_namespaced_custom_object(
                        *RESOURCE, item.namespace, "resourceclaims", item.claim
                    ),
                    f"delete claim {item.namespace}/{item.claim}",
                )
            self.count("claim delete")

    def step(self) -> None:
        target = self.config.live or max(4, int(2.5 * len(self.nodes)))
        if self.items and (len(self.items) >= target or self.rng.random() < 0.35):
            item = self.items.pop(self.rng.randrange(len(self.items)))
            self.delete_item(item)
            return
        kinds = list(WORKLOAD)
        kind = self.rng.choices(kinds, weights=[WORKLOAD[k][0] for k in kinds])[0]
        self.items.append(self.create_item(kind))

    # -- reading the cluster ------------------------------------------------------------------

    def pods(self) -> list[Any]:
        listed = self.retry(lambda: self.core().list_pod_for_all_namespaces(), "list pods")
        return [p for p in listed.items if p.metadata.namespace.startswith("soak-")]

    def claims(self) -> list[Obj]:
        listed = self.retry(
            lambda: self.custom().list_cluster_custom_object(*RESOURCE, "resourceclaims"),
            "list claims",
        )
        return list(listed["items"])

    def ledgers(self) -> dict[str, Obj]:
        listed = self.retry(
            lambda: self.custom().list_namespaced_custom_object(
                NAS_GROUP, VERSION, NAMESPACE, "nodeallocationstates"
            ),
            "list NAS",
        )["items"]
        return {
            n["metadata"]["name"]: (n.get("spec") or {}).get("allocatedClaims") or {}
            for n in listed
        }

    def not_running(self, node: str | None = None) -> list[str]:
        """Pods bound (to `node`, or anywhere) and not deleted that do not run."""
        return [
            f"{p.metadata.namespace}/{p.metadata.name} on {p.spec.node_name}"
            for p in self.pods()
            if p.spec.node_name
            and (node is None or p.spec.node_name == node)
            and p.metadata.deletion_timestamp is None
            and p.status.phase != "Running"
        ]

    # -- recovery -----------------------------------------------------------------------------

    def probe(self, node: str | None) -> Item:
        where = node or self.rng.choice(self.nodes).name
        return self.create_item("cpu", node=where, namespace=PROBE_NAMESPACE)

    def healthy(self, probe: Item, node: str | None) -> bool:
        pod = self.retry(
            lambda: self.core().read_namespaced_pod(probe.pods[0], PROBE_NAMESPACE), "read probe"
        )
        return pod.status.phase == "Running" and not self.not_running(node)

    def recover(self, fault: Fault, node: str | None, since: float, probe: Item | None) -> None:
        """Time from `since` until a probe pod runs (on `node`, or anywhere) and every pod bound
        there runs; a violation after RECOVERY_LIMIT_S."""
        probe = probe or self.probe(node)
        try:
            _wait(lambda: self.healthy(probe, node), RECOVERY_LIMIT_S, "recovery", interval=0.5)
            fault.recovery_s = time.monotonic() - since
        except TimeoutError:
            stuck = self.not_running(node)[:5]
            self.violations.append(
                f"{fault.kind} on {fault.target} at {fault.at:.0f}s: not recovered within "
                f"{RECOVERY_LIMIT_S:g}s (probe and bound pods: {stuck})"
            )
        self.delete_item(probe, force=True)

    # -- faults -------------------------------------------------------------------------------

    def leader(self) -> str:
        lease = self.retry(
            lambda: kubernetes.client.CoordinationV1Api(self.api).read_namespaced_lease(
                "drasat-controller", NAMESPACE
            ),
            "read the Lease",
        )
        return str(lease.spec.holder_identity or "replica-1")

    def busy_node(self, nodes: list[Node]) -> Node:
        """A node of `nodes` where a pod runs (prepared claims), else any of them."""
        running = {p.spec.node_name for p in self.pods() if p.status.phase == "Running"}
        return self.rng.choice([n for n in nodes if n.name in running] or nodes)

    def inject(self, kind: str) -> None:
        assert self.kube is not None
        node: Node | None = None
        probe: Item | None = None
        mig: Item | None = None
        at = self.elapsed()
        begun = time.monotonic()
        if kind == "controller-kill":
            identity = self.leader()
            fault = Fault(kind, identity, at)
            _kill(self.controllers[identity])
            self.controllers[identity] = self._start_controller(identity)
        elif kind in ("plugin-kill", "kubelet-kill"):
            node = self.busy_node(self.nodes)
            fault = Fault(kind, node.name, at)
            if kind == "plugin-kill":
                assert node.plugin is not None
                _kill(node.plugin)
                node.start_plugin()
            else:
                assert node.kubelet is not None
                _kill(node.kubelet)
                node.start_kubelet()
        elif kind in ("apiserver-restart", "scheduler-restart"):
            component = f"kube-{kind.split('-')[0]}"
            fault = Fault(kind, component, at)
            self.kube.restart(component)
        elif kind == "etcd-pause":
            fault = Fault(kind, "etcd", at)
            etcd = next(p for p in self.kube.processes if p.name == "etcd")
            os.kill(etcd.pid, signal.SIGSTOP)
            time.sleep(4)
            os.kill(etcd.pid, signal.SIGCONT)
        elif kind == "node-delete":
            node = self.busy_node(self.nodes)
            fault = Fault(kind, node.name, at)
            self.delete_node(node.name)
        elif kind == "device-taint":
            self.taint(Fault(kind, "", at))
            return
        elif kind in ("nvml-fail", "mig-fail"):
            node = self.busy_node(
                [n for n in self.nodes if n.mig] if kind == "mig-fail" else self.nodes
            )
            fault = Fault(kind, node.name, at)
            functions = (
                ["nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlGpuInstanceCreateComputeInstance"]
                if kind == "mig-fail"
                else [
                    "nvmlDeviceGetHandleByUUID",
                    "nvmlDeviceSetComputeMode",
                    "nvmlDeviceGetComputeMode",
                ]
            )
            node.fault_file.write_text("".join(f"{f} {NVML_UNKNOWN}\n" for f in functions))
            if kind == "mig-fail":  # a MIG pod there meets the failures, if no other comes
                mig = self.create_item("mig-1g", node=node.name, namespace=PROBE_NAMESPACE)
        elif kind == "disk-full":
            node = self.rng.choice([n for n in self.nodes if n.tmpfs])
            fault = Fault(kind, node.name, at)
            filler = node.state / "filler"
            with contextlib.suppress(OSError), filler.open("wb") as f:
                while True:
                    f.write(b"\0" * (1 << 20))
            probe = self.probe(node.name)  # prepared while the disk is full
            time.sleep(5)
            filler.unlink()
        else:
            raise ValueError(f"unknown fault kind {kind}")
        self.faults.append(fault)
        fault.outage_s = time.monotonic() - begun
        self.recover(fault, node.name if node else None, time.monotonic(), probe)
        if mig is not None:
            self.delete_item(mig)

    def delete_node(self, name: str) -> None:
        """Delete the Node; force-delete its pods, as the pod garbage collector does for pods of
        a node that is gone; then create the Node again, as its kubelet registers it anew."""
        self.retry(lambda: self.core().delete_node(name), f"delete node {name}")
        _wait(lambda: not _exists(lambda: self.core().read_node(name)), 60, f"node {name} gone")
        for pod in self.pods():
            if pod.spec.node_name == name:
                with contextlib.suppress(ApiException):
                    self.core().delete_namespaced_pod(
                        pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
                    )
        self.retry(lambda: self.core().create_node(node_body(name)), f"create node {name}")
        self._node_ready(name)

    def held_devices(self) -> list[tuple[str, str]]:
        """(pool, device) of the GPUs and MIG devices held by the claims of running pods."""
        users = {
            key for pod in self.pods() if pod.status.phase == "Running" for key in _claims_of(pod)
        }
        return sorted(
            {
                (r["pool"], r["device"])
                for claim in self.claims()
                if (claim["metadata"]["namespace"], claim["metadata"]["name"]) in users
                for r in _ours(claim)
                if r["device"] != names.CPU_FALLBACK
            }
        )

    def taint(self, fault: Fault) -> None:
        """Taint a device a running pod holds NoExecute; time until its pods are evicted; then
        remove the taint and wait for the node to be healthy again."""
        held = self.held_devices()
        if not held:  # nothing runs (just drained): a pod of its own to evict
            victim = self.create_item("exclusive")
            self.items.append(victim)
            with contextlib.suppress(TimeoutError):
                _wait(self.held_devices, 90, "a pod holding a GPU", interval=0.5)
            held = self.held_devices()
        if not held:
            fault.note = "no device held by a running pod"
            self.faults.append(fault)
            return
        pool, device = self.rng.choice(sorted(set(held)))
        fault.target = f"{pool}/{device}"
        rule = f"soak-taint-{self.counter}"
        self.counter += 1
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": rule},
            "spec": {
                "deviceSelector": {"driver": DRIVER_NAME, "pool": pool, "device": device},
                "taint": {"key": "soak.drasat.io/unhealthy", "value": "x", "effect": "NoExecute"},
            },
        }
        holders = {
            (c["metadata"]["namespace"], c["metadata"]["name"])
            for c in self.claims()
            if any((r["pool"], r["device"]) == (pool, device) for r in _ours(c))
        }
        victims = {p.metadata.uid for p in self.pods() if set(_claims_of(p)) & holders}

        since = time.monotonic()
        self.retry(
            lambda: self.custom().create_cluster_custom_object(*RESOURCE, "devicetaintrules", body),
            "create the DeviceTaintRule",
        )
        self.faults.append(fault)

        def evicted() -> bool:  # evicted, stopped by the kubelet (unprepared) and gone
            return not victims & {p.metadata.uid for p in self.pods()}

        fault.note = f"{len(victims)} pods to evict"

        try:
            _wait(evicted, RECOVERY_LIMIT_S, "eviction", interval=0.5)
            fault.recovery_s = time.monotonic() - since
        except TimeoutError:
            self.violations.append(
                f"device-taint on {pool}/{device}: its pods not evicted within "
                f"{RECOVERY_LIMIT_S:g}s"
            )
        self.retry(
            lambda: self.custom().delete_cluster_custom_object(*RESOURCE, "devicetaintrules", rule),
            "delete the DeviceTaintRule",
        )
        healed = Fault("device-taint-heal", pool, self.elapsed())
        self.recover(healed, pool, time.monotonic(), None)
        fault.note += f", healed in {healed.recovery_s or -1:.1f}s"

    def fault_loop(self) -> None:
        """Inject faults until `stopping`; then say so (`faults_idle`) and stay alive until the
        soak has stopped everything: processes started again here get SIGTERM when the thread
        that started them ends (PR_SET_PDEATHSIG is per thread)."""
        try:
            self._inject_until_stopped()
        finally:
            self.faults_idle.set()
            self.finished.wait()

    def _inject_until_stopped(self) -> None:
        kinds = [k for k in self.config.kinds if k not in self.skipped]
        rotation: list[str] = []
        try:
            while not self.stopping.wait(self.config.fault_every * (0.5 + self.rng.random())):
                if not rotation:
                    rotation = self.rng.sample(kinds, len(kinds))
                kind = rotation.pop()
                with self.lock:
                    if self.stopping.is_set():
                        return
                    say(f"fault: {kind}")
                    self.inject(kind)
                    last = self.faults[-1]
                    done = f"{last.recovery_s:.1f}s" if last.recovery_s is not None else "-"
                    say(f"fault: {kind} on {last.target or '-'}: recovered in {done}")
        except BaseException as error:  # reported by the main loop
            self.fault_error = error
            raise

    # -- checks -------------------------------------------------------------------------------

    def sample_rss(self) -> None:
        processes = [(name, p) for name, p in self.controllers.items()]
        processes += [entry for node in self.nodes for entry in node.processes()]
        for name, process in processes:
            if process is None or process.poll() is not None:
                continue
            value = rss_mib(process.pid)
            if value is not None:
                self.rss.setdefault((name, process.pid), []).append(value)

    def problems(self) -> list[str]:
        claims = self.claims()
        slices = self._slices()
        devices = {
            (s["spec"]["pool"]["name"], d["name"]): d
            for s in slices
            for d in s["spec"].get("devices") or []
        }
        counters = {
            (s["spec"]["pool"]["name"], c["name"], name): int(_quantity(v["value"]))
            for s in slices
            for c in s["spec"].get("sharedCounters") or []
            for name, v in (c.get("counters") or {}).items()
        }
        out = []
        whole: dict[tuple[str, str], set[str]] = {}
        shared: dict[tuple[str, str], list[Obj]] = {}
        used: dict[tuple[str, str, str], int] = {}
        for claim in claims:
            ref = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
            for result in _ours(claim):
                key = (result["pool"], result["device"])
                device = devices.get(key)
                if result["device"] == names.CPU_FALLBACK:
                    continue
                if device is None:
                    continue  # the node's slices are being published again (node-delete)
                if result.get("consumedCapacity") and _is_share(result, device):
                    shared.setdefault(key, []).append(result)
                    continue
                whole.setdefault(key, set()).add(ref)
                for consumed in device.get("consumesCounters") or []:
                    for name, v in (consumed.get("counters") or {}).items():
                        k = (result["pool"], consumed["counterSet"], name)
                        used[k] = used.get(k, 0) + int(_quantity(v["value"]))
        for key, refs in whole.items():
            if len(refs) > 1:
                out.append(f"{key[0]}/{key[1]} held by {sorted(refs)}")
            if key in shared:
                out.append(f"{key[0]}/{key[1]} held whole by {sorted(refs)} and shared")
        for key, results in shared.items():
            capacity = devices[key].get("capacity") or {}
            for dimension in ("memory", "compute"):
                total = sum(_quantity(r["consumedCapacity"].get(dimension, "0")) for r in results)
                limit = _quantity((capacity.get(dimension) or {}).get("value", "0"))
                if limit and total > limit:
                    out.append(
                        f"shares of {key[0]}/{key[1]} take {total:g} {dimension} > {limit:g}"
                    )
        for key, value in used.items():
            if key in counters and value > counters[key]:
                out.append(f"counter {key} used {value} > {counters[key]}")
        # the ledgers and the claims' status, both ways
        ledger = self.ledgers()
        allocated: dict[str, str] = {}  # claim uid -> node
        for claim in claims:
            results = _ours(claim)
            if results:
                allocated[claim["metadata"]["uid"]] = results[0]["pool"]
        for uid, node in allocated.items():
            if not any(
                e.get("claimInfo", {}).get("uid") == uid for e in ledger.get(node, {}).values()
            ):
                out.append(f"claim {uid} allocated on {node} is not in its ledger")
        for node, entries in ledger.items():
            for key, entry in entries.items():
                if entry.get("claimInfo", {}).get("uid") not in allocated:
                    out.append(f"ledger of {node} holds {key} of no allocated claim")
        # CDI specs and the hardware
        for node in self.nodes:
            here = {uid for uid, where in allocated.items() if where == node.name}
            for spec in node.cdi.glob("*.json"):
                found = _UID.search(spec.name)
                if found and found.group(0) not in here:
                    out.append(f"CDI spec {node.name}/{spec.name} of no claim allocated there")
            placements = {
                (parsed.minor, parsed.start)
                for claim in claims
                for r in _ours(claim)
                if r["pool"] == node.name
                and isinstance(parsed := names.parse(r["device"]), names.MigName)
            }
            for gpu, start in _instances(node):
                if (gpu, start) not in placements:
                    out.append(f"MIG instance {node.name} GPU {gpu} start {start} of no claim")
        return out

    def settle(self, what: str) -> None:
        try:
            _wait(lambda: not self.not_running(), SETTLE_S, "bound pods to run", interval=0.5)
        except TimeoutError:
            self.violations.append(f"{what}: bound pods not running: {self.not_running()[:5]}")
        last: list[str] = []

        def clean() -> bool:
            last[:] = self.problems()
            return not last

        try:
            _wait(clean, 30, "consistency", interval=1.0)
        except TimeoutError:
            self.violations.extend(f"{what}: {p}" for p in last)

    def checkpoint(self, drain: bool) -> None:
        with self.lock:
            self.checkpoints += 1
            what = f"checkpoint {self.checkpoints} ({self.total_ops()} ops)"
            self.settle(what)
            self.sample_rss()
            self.check_cycles(what)
            if drain:
                self.drain(what)
            say(
                f"{what}: {len(self.items)} items, {len(self.faults)} faults, "
                f"{len(self.violations)} violations"
            )

    def check_cycles(self, what: str) -> None:
        slow = [
            (float(m.group(2)), identity)
            for identity in self.controllers
            for m in _CYCLE.finditer(
                (self.folder / f"controller-{identity}.log").read_text(errors="replace")
            )
        ]
        worst = max(slow, default=(0.0, ""))
        if worst[0] > CYCLE_BOUND_S:
            self.violations.append(f"{what}: a cycle of {worst[1]} took {worst[0]:.1f}s")

    def longest_cycle(self) -> float:
        return max(
            (
                float(m.group(2))
                for identity in self.controllers
                for m in _CYCLE.finditer(
                    (self.folder / f"controller-{identity}.log").read_text(errors="replace")
                )
            ),
            default=0.0,
        )

    def drain(self, what: str) -> None:
        """Delete everything; nothing may be left; then one pod per whole GPU not in MIG mode of
        every node must run (what fits runs), and is deleted again. A GPU in MIG mode goes whole
        only to a request asking for MIG mode, which the plain `exclusive` claim does not."""
        for item in self.items:
            self.delete_item(item)
        self.items.clear()
        self.wait_empty(f"{what}, drain")
        fill = [
            self.create_item("exclusive", node=node.name)
            for node in self.nodes
            for gpu in parse_fleet(node.fleet).gpus
            if not gpu.mig_enabled
        ]
        try:
            _wait(
                lambda: all(
                    p.status.phase == "Running"
                    for p in self.pods()
                    if p.metadata.namespace in WORK_NAMESPACES
                ),
                SETTLE_S * 2,
                "the fill to run",
                interval=1.0,
            )
        except TimeoutError:
            pending = [
                f"{p.metadata.namespace}/{p.metadata.name}"
                for p in self.pods()
                if p.status.phase != "Running"
            ]
            self.violations.append(f"{what}: pods that fit do not run: {pending[:6]}")
        for item in fill:
            self.delete_item(item)
        self.wait_empty(f"{what}, after the fill")

    def wait_empty(self, what: str) -> None:
        left: list[str] = []

        def empty() -> bool:
            left[:] = self.leftovers()
            return not left

        try:
            _wait(empty, 120, "nothing left", interval=1.0)
        except TimeoutError:
            self.violations.extend(f"{what}: left: {x}" for x in left)

    def leftovers(self) -> list[str]:
        out = [f"pod {p.metadata.namespace}/{p.metadata.name}" for p in self.pods()]
        out += [
            f"claim {c['metadata']['namespace']}/{c['metadata']['name']}"
            for c in self.claims()
            if c["metadata"]["namespace"].startswith("soak-")
        ]
        for node, entries in self.ledgers().items():
            out += [f"ledger entry {node}/{key}" for key in entries]
        for node in self.nodes:
            out += [f"CDI spec {node.name}/{p.name}" for p in node.cdi.glob("*.json")]
            records = node.state / "checkpoint" / "claims"
            out += [f"checkpoint record {node.name}/{p.name}" for p in records.glob("*")]
            out += [f"MIG instance {node.name} GPU {g} start {s}" for g, s in _instances(node)]
            out += [f"MPS directory {node.name}/{p.name}" for p in (node.state / "mps").glob("*")]
            out += [f"MPS daemon {pid} of {node.name}" for pid in _mps_daemons(node.state)]
        return out

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> None:
        faults = threading.Thread(target=self.fault_loop, name="faults", daemon=True)
        faults.start()
        next_checkpoint = self.config.checkpoint_every
        next_drain = self.config.drain_every
        last_report = time.monotonic()
        while self.total_ops() < self.config.ops or not self.rounds_done():
            if self.fault_error is not None:
                raise RuntimeError(f"the fault thread failed: {self.fault_error!r}")
            self.step()
            if self.total_ops() >= next_checkpoint:
                drain = self.total_ops() >= next_drain
                self.checkpoint(drain)
                next_checkpoint += self.config.checkpoint_every
                if drain:
                    next_drain += self.config.drain_every
            if time.monotonic() - last_report > 30:
                last_report = time.monotonic()
                self.sample_rss()
                say(
                    f"{self.total_ops()}/{self.config.ops} ops, {len(self.items)} items, "
                    f"{len(self.faults)} faults, {len(self.violations)} violations"
                )
            time.sleep(self.config.op_interval)
        self.stopping.set()
        self.faults_idle.wait(timeout=RECOVERY_LIMIT_S * 3)
        if self.fault_error is not None:
            raise RuntimeError(f"the fault thread failed: {self.fault_error!r}")
        self.checkpoint(drain=True)
        self.check_memory()

    def rounds_done(self) -> bool:
        """Whether each fault kind was injected `fault_rounds` times."""
        kinds = [k for k in self.config.kinds if k not in self.skipped]
        done = [f.kind for f in self.faults]
        return all(done.count(k) >= self.config.fault_rounds for k in kinds)

    def check_memory(self) -> None:
        for (name, pid), samples in self.rss.items():
            if len(samples) < 4:
                continue
            base, last = samples[1], samples[-1]
            if last > base * 1.25 and last - base > 32:
                self.violations.append(
                    f"memory of {name} (pid {pid}) grew from {base:.0f} to {last:.0f} MiB"
                )

    def result(self, config: Config, wall: float) -> Obj:
        by_kind: dict[str, list[float]] = {}
        for fault in self.faults:
            by_kind.setdefault(fault.kind, [])
            if fault.recovery_s is not None:
                by_kind[fault.kind].append(fault.recovery_s)
        roles: dict[str, list[list[float]]] = {}
        for (name, _), samples in self.rss.items():
            roles.setdefault(name.split()[0], []).append(samples)
        return {
            "config": {
                k: (str(v) if isinstance(v, pathlib.Path) else v)
                for k, v in dataclasses.asdict(config).items()
            },
            "commit": _commit(),
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load_average": os.getloadavg(),
            },
            "wall_s": round(wall, 1),
            "operations": dict(sorted(self.ops.items())),
            "operations_total": self.total_ops(),
            "api_retries": self.api_retries,
            "checkpoints": self.checkpoints,
            "faults": {
                kind: {
                    "injected": sum(1 for f in self.faults if f.kind == kind),
                    "recovered": len(times),
                    "recovery_s_median": round(sorted(times)[len(times) // 2], 2)
                    if times
                    else None,
                    "recovery_s_max": round(max(times), 2) if times else None,
                    "outage_s_max": round(
                        max((f.outage_s for f in self.faults if f.kind == kind), default=0.0), 2
                    ),
                }
                for kind, times in sorted(by_kind.items())
            },
            "fault_log": [dataclasses.asdict(f) for f in self.faults],
            "skipped_kinds": self.skipped,
            "longest_cycle_s": self.longest_cycle(),
            "rss_mib": {
                role: {
                    "processes": len(series),
                    "max": round(max(max(s) for s in series), 1),
                    "largest_growth_after_second_sample": round(
                        max((s[-1] - s[1] for s in series if len(s) >= 2), default=0.0), 1
                    ),
                }
                for role, series in sorted(roles.items())
            },
            "injected_failures_met": self.failures_hit(),
            "violations": self.violations,
        }

    def failures_hit(self) -> dict[str, int]:
        """How often the plugins met an injected failure: log lines naming NVML's unknown error
        (nvml-fail, mig-fail) or a full disk (disk-full)."""
        texts = [
            (node.folder / "plugin.log").read_text(errors="replace")
            for node in self.nodes
            if (node.folder / "plugin.log").exists()
        ]
        return {
            "nvml_unknown_error_lines": sum(t.count("NVML_ERROR_UNKNOWN") for t in texts),
            "no_space_left_lines": sum(t.count("No space left") for t in texts),
        }


def _exists(read: Callable[[], Any]) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _claims_of(pod: Any) -> list[tuple[str, str]]:
    """(namespace, name) of the claims a pod uses: direct ones and those made from templates."""
    ns = pod.metadata.namespace
    direct = [(ns, c.resource_claim_name) for c in pod.spec.resource_claims or []]
    made = [(ns, c.resource_claim_name) for c in pod.status.resource_claim_statuses or []]
    return [key for key in direct + made if key[1]]


def _ours(claim: Obj) -> list[Obj]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return [r for r in results if r.get("driver") == DRIVER_NAME]


def _quantity(text: Any) -> float:
    return float(kubernetes.utils.parse_quantity(str(text)))


def _is_share(result: Obj, device: Obj) -> bool:
    memory = (device.get("capacity") or {}).get("memory", {}).get("value")
    used = result["consumedCapacity"].get("memory")
    return bool(memory and used and _quantity(used) < _quantity(memory))


def _instances(node: Node) -> list[tuple[int, int]]:
    """(GPU index, start) of every GPU instance on the node's simulated hardware."""
    try:
        saved = json.loads(node.hardware.read_text())
    except (OSError, ValueError):
        return []
    return [(i, gi["start"]) for i, gpu in enumerate(saved) for gi in gpu["gpu_instances"]]


def _mps_daemons(state: pathlib.Path) -> list[int]:
    """Pids of simulated MPS control daemons whose pipe directory is under `state`."""
    found = []
    for proc in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if b"simmps" in cmdline and str(state).encode() in environ:
            found.append(int(proc.name))
    return found


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=pathlib.Path(__file__).resolve().parent,
    )
    return done.stdout.strip() or "unknown"


@contextlib.contextmanager
def soak(config: Config) -> Iterator[Soak]:
    folder = pathlib.Path(tempfile.mkdtemp(prefix="drasat-soak-"))
    run = Soak(config, folder)
    try:
        run.start()
        yield run
    finally:
        run.stop()


def run_soak(config: Config) -> Obj:
    """Start, run, stop; the result (also written to `config.out`)."""
    binaries.locate()  # a clear error when the control plane is not built
    started = time.monotonic()
    with soak(config) as running:
        try:
            running.run()
        finally:
            result = running.result(config, time.monotonic() - started)
            config.out.mkdir(parents=True, exist_ok=True)
            (config.out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
            logs = config.out / "logs"
            shutil.rmtree(logs, ignore_errors=True)
            logs.mkdir()
            for path in running.folder.glob("controller-*.log"):
                shutil.copy(path, logs / path.name)
            for node in running.nodes:
                for name in ("plugin.log", "kubelet.log"):
                    if (node.folder / name).exists():
                        shutil.copy(node.folder / name, logs / f"{node.name}-{name}")
    return result


def summary(result: Obj) -> str:
    lines = [
        f"operations: {result['operations_total']} ({result['operations']}), "
        f"wall {result['wall_s']:.0f}s, {result['checkpoints']} checkpoints, "
        f"API retries {result['api_retries']}",
        "| fault | injected | recovered | outage max | recovery median | recovery max |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind, row in result["faults"].items():
        median = row["recovery_s_median"]
        worst = row["recovery_s_max"]
        lines.append(
            f"| {kind} | {row['injected']} | {row['recovered']} | {row['outage_s_max']:.1f} s | "
            f"{'-' if median is None else f'{median:.1f} s'} | "
            f"{'-' if worst is None else f'{worst:.1f} s'} |"
        )
    lines.append(f"skipped kinds: {result['skipped_kinds'] or 'none'}")
    lines.append(f"injected failures met: {result['injected_failures_met']}")
    lines.append(f"longest controller cycle: {result['longest_cycle_s']:.2f} s")
    lines.append(f"memory (MiB): {result['rss_mib']}")
    lines.append(f"violations: {len(result['violations'])}")
    lines += [f"  - {v}" for v in result["violations"]]
    return "\n".join(lines)


# --- the simulated kubelet as a process ------------------------------------------------------


def kubelet_main(args: argparse.Namespace) -> int:
    from drasat.testbed.sim import kubeclient, kubelet

    client = kubeclient.KubeClient.from_kubeconfig(args.kubeconfig)
    running = kubelet.Kubelet(
        client,
        node=args.node,
        registry_dir=pathlib.Path(args.registry_dir),
        cdi_root=pathlib.Path(args.cdi_root),
        api=kubelet.DraApi.v1,
        resync=2.0,
        checkpoint=pathlib.Path(args.registry_dir).parent / "kubelet-claims.json",
    ).start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    running.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command")
    k = sub.add_parser("kubelet", help="(internal) one node's simulated kubelet")
    k.add_argument("--node", required=True)
    k.add_argument("--kubeconfig", required=True)
    k.add_argument("--registry-dir", required=True)
    k.add_argument("--cdi-root", required=True)
    parser.add_argument("--ops", type=int, default=2000, help="operations (default 2000)")
    parser.add_argument("--nodes", type=int, default=8, help="nodes (default 8)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fault-every", type=float, default=15.0,
                        help="mean seconds between faults (default 15)")  # fmt: skip
    parser.add_argument("--checkpoint-every", type=int, default=200)
    parser.add_argument("--drain-every", type=int, default=1000)
    parser.add_argument("--op-interval", type=float, default=0.25)
    parser.add_argument("--kinds", default=",".join(KINDS), help="fault kinds (default: all)")
    parser.add_argument("--fault-rounds", type=int, default=0,
                        help="go on past --ops until each kind was injected so often")  # fmt: skip
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("build/soak"))
    args = parser.parse_args(argv)
    if args.command == "kubelet":
        return kubelet_main(args)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"--kinds: unknown {unknown} (known: {', '.join(KINDS)})")
    config = Config(
        ops=args.ops,
        nodes=args.nodes,
        seed=args.seed,
        fault_every=args.fault_every,
        checkpoint_every=args.checkpoint_every,
        drain_every=args.drain_every,
        op_interval=args.op_interval,
        kinds=kinds,
        fault_rounds=args.fault_rounds,
        out=args.out,
    )
    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C: processes stopped, tmpfs unmounted.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    try:
        result = run_soak(config)
    except binaries.MissingBinaries as exc:
        print(f"python -m bench.soak: {exc}", file=sys.stderr)
        return 2
    print(summary(result))
    return 1 if result["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
