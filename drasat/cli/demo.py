"""`drasat demo`: the whole system in one process on an embedded example, watched like kubectl.

By default it runs current Kubernetes' DRA (`resource.k8s.io/v1`) on the v1 reference cases:
`drasat.cli.demov1`, on the simulated API server or, with `--kube-bin DIR`, on the real control
plane. `--classic` runs classic DRA (`resource.k8s.io/v1alpha2`) as described here.

The classic demo starts the in-process API server, the controller, a node plugin per simulated
node (simulated NVML, real gRPC sockets), the simulated scheduler and a simulated kubelet per node
(`drasat.testbed.democluster`), applies the manifests, and prints each pod going Pending -> Running
with its "log" (the environment its container gets from the CDI spec), the NodeAllocationState
view, then deletes the pods and claims and checks every node is clean again.

Manifests: the two reference cases (default), `--example NAME` (a folder of the shipped
examples, on the examples' lab cluster), `-f FILE|DIR`. An AllocationPolicy among them becomes
the policy ConfigMap, as `helm install --set policy...` would make it.

Pods of Deployments, ReplicaSets and Jobs are made by the simulated controller manager and
counted: a workload that ran fewer pods than it asks for (`replicas`; a Job's `parallelism`, at
most `completions`) fails the demo with a line naming its manifest and the counts.

Exit codes: 0 every pod ran and every node was cleaned up; 1 some step failed (the last line says
which); 2 bad input.
"""

from __future__ import annotations

import argparse
import importlib.resources
import importlib.util
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, TextIO

import yaml

from drasat import loading, policyfiles
from drasat.api import access, crds
from drasat.api import cluster as cluster_api
from drasat.api.errors import InputError
from drasat.api.nas import AllocatedDevices, NodeAllocationState
from drasat.testbed import democluster
from drasat.testbed.sim import apply, errors, garbage, kubeclient, scheduling
from drasat.testbed.sim.kubelet import PodRun
from drasat.whatif import manifests as whatif_manifests
from drasat.whatif import nodes as whatif_nodes

DEFAULT_EXAMPLE = "reference-cases"
#: The v1 flow's default: the two reference cases in `resource.k8s.io/v1` terms.
V1_EXAMPLE = "v1-reference-cases"
#: The examples' own cluster (what their READMEs show), used with --example.
EXAMPLES_CLUSTER = "clusters/lab.yaml"
SUFFIXES = (".yaml", ".yml", ".json")
#: How long a claim's Warning Event must stand, with its pod still Pending, before the pod
#: counts as stuck (a few controller resyncs: a transient Warning does not end the wait).
SETTLE_S = 2.5
POLL_S = 0.05
#: Loggers whose WARNINGs the demo shows itself (Events), that are meant for an operator (the
#: plugin's sockets), or that retry on their own (a watch the server ended, reopened).
_QUIET = ("drasat.nodeplugin.plugin", "drasat.kube.events", "urllib3.connectionpool")

Obj = dict[str, Any]
Key = tuple[str, str]


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="run the whole system in one process on an example and watch it work",
        description="Start the API server, controller, node plugins (simulated GPUs, real gRPC "
        "sockets), scheduler and kubelets in this process, apply manifests, show the pods "
        "running with the GPUs they see, then delete them and check the devices are clean.",
    )
    parser.add_argument(
        "--example",
        action="append",
        default=[],
        metavar="NAME",
        help=f"a shipped example folder (repeatable): {', '.join(example_names())}; "
        f"default: {DEFAULT_EXAMPLE} unless -f is given",
    )
    parser.add_argument(
        "-f",
        "--filename",
        dest="manifests",
        action="append",
        default=[],
        metavar="MANIFESTS",
        help="manifests to apply: a file or a directory (repeatable)",
    )
    parser.add_argument(
        "--cluster",
        metavar="FILE",
        help="a compact Cluster description (kind Cluster, as for drasat whatif) to simulate; "
        "default: the what-if's example cluster, or the examples' lab cluster with --example",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="the longest any one step may wait (default: 60)",
    )
    parser.add_argument(
        "--classic",
        action="store_true",
        help="run classic DRA (resource.k8s.io/v1alpha2, Kubernetes <= 1.31) with the classic "
        f"examples (default: {DEFAULT_EXAMPLE}) instead of the v1 flow (default: {V1_EXAMPLE})",
    )
    parser.add_argument(
        "--kube-bin",
        metavar="DIR",
        help="run the v1 demo on the real control plane: etcd, kube-apiserver, kube-scheduler "
        "and kube-controller-manager from DIR (scripts/kube-build fills "
        "~/.cache/drasat/kube-v1.37.2), started in a temporary folder and stopped at the end",
    )
    parser.add_argument(
        "--allow-pending",
        action="store_true",
        help="exit 0 even when some pod stays Pending (examples that show a refusal)",
    )
    parser.set_defaults(func=main)


# --- inputs -----------------------------------------------------------------------------------


def _examples_dir() -> Traversable:
    return importlib.resources.files("drasat.examples")


def example_names() -> list[str]:
    root = _examples_dir()
    if not root.is_dir():
        return []
    return sorted(
        entry.name
        for entry in root.iterdir()
        if entry.is_dir()
        and entry.name != "clusters"
        and any(f.name.endswith(SUFFIXES) for f in entry.iterdir())
    )


def example_documents(name: str) -> list[loading.Document]:
    folder = _examples_dir() / name
    if name not in example_names():
        raise InputError(f"no such example (known: {', '.join(example_names())})", where=name)
    files = sorted((f for f in folder.iterdir() if f.name.endswith(SUFFIXES)), key=lambda f: f.name)
    return [
        d
        for f in files
        for d in loading.parse_documents(
            f.read_text(encoding="utf-8"), f"<examples>/{name}/{f.name}"
        )
    ]


def _file_documents(given: str) -> list[loading.Document]:
    path = Path(given)
    if not path.is_dir():
        return loading.read_documents(given)
    found = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())
    if not found:
        raise InputError("directory holds no .yaml, .yml or .json file", where=given)
    return [d for p in found for d in loading.read_documents(p)]


def read_cluster(given: str | None, *, examples: bool) -> tuple[cluster_api.Cluster, str]:
    """The Cluster to simulate and where it came from."""
    if given is not None:
        documents, source = loading.read_documents(given), given
    elif examples:
        source = f"<examples>/{EXAMPLES_CLUSTER}"
        text = (_examples_dir() / EXAMPLES_CLUSTER).read_text(encoding="utf-8")
        documents = loading.parse_documents(text, source)
    else:
        source = "<embedded>/default-cluster.yaml"
        text = (importlib.resources.files("drasat.whatif") / "default-cluster.yaml").read_text(
            encoding="utf-8"
        )
        documents = loading.parse_documents(text, source)
    found = [d for d in documents if d.data.get("kind") == cluster_api.CLUSTER_KIND]
    if len(found) != 1:
        raise InputError(
            f"expected exactly one {cluster_api.CLUSTER_KIND} ({cluster_api.CLUSTER_API_VERSION}); "
            "the demo simulates the hardware it describes",
            where=source,
        )
    return loading.validate(cluster_api.Cluster, found[0]), source


def split_policy(documents: list[loading.Document]) -> tuple[list[loading.Document], str, str]:
    """Manifests without the AllocationPolicy; the policy text for the ConfigMap and its name."""
    policies = [d for d in documents if d.data.get("kind") == "AllocationPolicy"]
    rest = [d for d in documents if d.data.get("kind") != "AllocationPolicy"]
    if len(policies) > 1:
        raise InputError(
            "more than one AllocationPolicy; the controller runs one",
            where=", ".join(p.where for p in policies),
        )
    if not policies:
        return rest, policyfiles.shipped_text("default"), "default (shipped)"
    text = yaml.safe_dump(policies[0].data, sort_keys=False)
    policy = policyfiles.from_text(text, source=policies[0].where)  # the controller's check
    return rest, text, f"{policy.metadata.name} ({policies[0].source})"


# --- output -----------------------------------------------------------------------------------


class Out:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, line: str = "") -> None:
        print(line, file=self.stream, flush=True)

    def phase(self, title: str) -> None:
        self(f"== {title}")


def _table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]


def env_line(env: dict[str, str]) -> str:
    """A container's GPU environment, NVIDIA_VISIBLE_DEVICES first (the claim UID left out)."""
    keys = sorted(k for k in env if k != "DRASAT_CLAIM_UID")
    keys.sort(key=lambda k: k != "NVIDIA_VISIBLE_DEVICES")
    return " ".join(f"{k}={env[k]}" for k in keys)


# --- the run ----------------------------------------------------------------------------------


@dataclass
class PodOutcome:
    key: Key
    node: str = ""
    run: PodRun | None = None
    reason: str = ""  # why it did not run


@dataclass(frozen=True)
class Workload:
    """An applied object whose pods a controller makes, and how many it asks for."""

    applied: apply.Applied
    wanted: int

    @property
    def key(self) -> Key:
        meta = self.applied.object["metadata"]
        return str(meta["namespace"]), str(meta["name"])

    @property
    def uid(self) -> str:
        return str(self.applied.object["metadata"]["uid"])

    @property
    def ref(self) -> str:
        return f"{self.applied.document.where}: {self.applied.ref}"


def wanted_pods(obj: Obj) -> int | None:
    """Pods a workload runs at once, as the what-if counts them: Deployment, ReplicaSet and
    StatefulSet `replicas` (1), Job `parallelism` (1) but never more than `completions` (the
    demo's containers never exit, so a Job's later completions would never start); None for
    other kinds."""
    spec = obj.get("spec") or {}
    kind = obj.get("kind")
    if kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        return int(spec.get("replicas", 1))
    if kind == "Job":
        count = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        return count if completions is None else min(count, int(completions))
    return None


def shortfalls(
    workloads: Iterable[Workload],
    pods_of: dict[str, list[Key]],
    outcomes: dict[Key, PodOutcome],
    *,
    allow_pending: bool,
) -> list[str]:
    """One line per workload that ran fewer pods than it asks for, naming its manifest and the
    counts. With `allow_pending`, a pod that was created and refused (a Warning, not a
    timeout) counts as shown; a pod never created never does."""
    lines = []
    for workload in workloads:
        made = pods_of.get(workload.uid, [])
        ran = sum(1 for k in made if k in outcomes and outcomes[k].run is not None)
        refused = sum(
            1
            for k in made
            if k in outcomes
            and outcomes[k].run is None
            and not outcomes[k].reason.startswith("timed out")
        )
        shown = ran + (refused if allow_pending else 0)
        if shown < workload.wanted:
            lines.append(
                f"{workload.ref} asks for {workload.wanted} pod(s), {ran} ran ({len(made)} created)"
            )
    return lines


def workload_pods(
    client: kubeclient.KubeClient,
    out: Out,
    until: Callable[[Callable[[], Any]], Any],
    workloads: list[Workload],
) -> dict[str, list[Key]]:
    """Wait (`until`: at most the demo's timeout) until the controllers made every workload's
    pods; the pods of each workload by its uid (a Deployment's through its ReplicaSets)."""
    if not workloads:
        return {}
    out.phase(f"waiting for the pods of {len(workloads)} workload(s)")
    namespaces = sorted({w.key[0] for w in workloads})

    def owned() -> dict[str, list[Key]]:
        found: dict[str, list[Key]] = {}
        for ns in namespaces:
            sets = client.list(kubeclient.path("apps", "v1", "replicasets", namespace=ns))
            parent = {s["metadata"]["uid"]: _controller_uid(s) for s in sets["items"]}
            pods = client.list(kubeclient.path("", "v1", "pods", namespace=ns))["items"]
            for pod in pods:
                owner = _controller_uid(pod)
                key = (ns, str(pod["metadata"]["name"]))
                for uid in {owner, parent.get(owner)} - {None}:
                    found.setdefault(str(uid), []).append(key)
        return found

    def complete() -> dict[str, list[Key]] | None:
        found = owned()
        if all(len(found.get(w.uid, [])) >= w.wanted for w in workloads):
            return found
        return None

    found = until(complete) or owned()
    for workload in workloads:
        made = sorted(found.get(workload.uid, []))
        out(f"{workload.applied.ref}: {len(made)} of {workload.wanted} pod(s) created")
        found[workload.uid] = made
    return found


@dataclass
class Demo:
    cluster: democluster.DemoCluster
    out: Out
    timeout: float
    failures: list[str] = field(default_factory=list)

    @property
    def client(self) -> kubeclient.KubeClient:
        return self.cluster.client

    def until(self, check: Callable[[], Any], timeout: float | None = None) -> Any:
        """Poll `check` until it is truthy or the timeout passes; its last value."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        pause = threading.Event()
        while True:
            value = check()
            if value or time.monotonic() >= deadline:
                return value
            pause.wait(POLL_S)

    def nas(self, node: str) -> NodeAllocationState | None:
        url = kubeclient.path(
            "nas.gpu.drasat.io",
            "v1alpha1",
            "nodeallocationstates",
            namespace=democluster.NAMESPACE,
            name=node,
        )
        try:
            return NodeAllocationState.model_validate(self.client.get(url))
        except errors.ApiError as error:
            if error.code == 404:
                return None
            raise

    # --- phases -------------------------------------------------------------------------------

    def show_cluster(self, source: str) -> None:
        self.out.phase(f"cluster ({source}): {len(self.cluster.nodes)} nodes")
        rows = [["NODE", "GPUS", "NAS"]]
        for node in sorted(self.cluster.nodes, key=lambda n: n.name):
            nas = self.nas(node.name)
            status = nas.status.value if nas is not None and nas.status else "missing"
            rows.append([node.name, democluster.describe(node.fleet.spec), status])
            if status != "Ready":
                self.failures.append(f"node {node.name}: NAS {status} after the plugin started")
        for line in _table(rows):
            self.out(line)

    def apply(self, title: str, documents: list[loading.Document]) -> list[apply.Applied]:
        self.out.phase(f"applying {title}")
        applied = apply.apply(self.client, documents, known=apply.kinds(crds.all_crds()))
        for item in applied:
            self.out(f"{item.ref} {'created' if item.created else 'unchanged'}")
        return applied

    def wait_pods(self, pods: list[Key]) -> dict[Key, PodOutcome]:
        self.out.phase(f"waiting for {len(pods)} pod(s) (at most {self.timeout:g}s each step)")
        outcomes = {key: PodOutcome(key) for key in pods}
        warned: dict[Key, float] = {}
        open_ = set(pods)

        def step() -> bool:
            for key in sorted(open_):
                run, node = self._running(key)
                if run is not None:
                    outcomes[key].run, outcomes[key].node = run, node
                    open_.discard(key)
                    continue
                warning = self._claim_warning(key)
                if warning is None:
                    warned.pop(key, None)
                    continue
                since = warned.setdefault(key, time.monotonic())
                if time.monotonic() - since >= SETTLE_S:
                    outcomes[key].reason = warning
                    open_.discard(key)
            return not open_

        if not self.until(step):
            for key in sorted(open_):
                outcomes[key].reason = f"timed out after {self.timeout:g}s: {self._why(key)}"
        for key in sorted(outcomes):
            outcome = outcomes[key]
            ref = f"pod {key[0]}/{key[1]}"
            if outcome.run is None:
                self.out(f"{ref}  stays Pending: {outcome.reason}")
                continue
            self.out(f"{ref}  Pending -> Running on {outcome.node}")
            if not outcome.run.claims:
                self.out("  log: (no resource claims)")
            for claim in outcome.run.claims:
                self.out(f"  log [{claim.name}]: {env_line(outcome.run.claim_env(claim.uid))}")
        return outcomes

    def _running(self, key: Key) -> tuple[PodRun | None, str]:
        for node in self.cluster.nodes:
            run = node.kubelet.running(*key) if node.kubelet is not None else None
            if run is not None:
                return run, node.name
        return None, ""

    def _pod(self, key: Key) -> Obj | None:
        try:
            return self.client.get(kubeclient.path("", "v1", "pods", namespace=key[0], name=key[1]))
        except errors.ApiError as error:
            if error.code == 404:
                return None
            raise

    def _claim_names(self, key: Key) -> list[str]:
        pod = self._pod(key)
        return [e.resolved_name(key[1]) for e in scheduling.pod_claims(pod)] if pod else []

    def _claim_warning(self, key: Key) -> str | None:
        """The newest Warning Event of the controller on one of the pod's claims."""
        names = set(self._claim_names(key))
        if not names:
            return None
        events = self.client.list(kubeclient.path("", "v1", "events", namespace=key[0]))["items"]
        found = [
            e
            for e in events
            if e.get("type") == "Warning"
            and (e.get("involvedObject") or {}).get("kind") == "ResourceClaim"
            and (e.get("involvedObject") or {}).get("name") in names
        ]
        if not found:
            return None
        newest = max(found, key=lambda e: int(e["metadata"].get("resourceVersion") or 0))
        claim = newest["involvedObject"]["name"]
        return f"Warning {newest.get('reason')} on claim {claim}: {newest.get('message')}"

    def _why(self, key: Key) -> str:
        reasons = []
        sim = self.cluster.scheduler
        if sim is not None and key in sim.reasons:
            reasons.append(f"scheduler: {sim.reasons[key]}")
        for node in self.cluster.nodes:
            if node.kubelet is not None and key in node.kubelet.reasons:
                reasons.append(f"kubelet {node.name}: {node.kubelet.reasons[key]}")
        return "; ".join(reasons) or "nothing happened to it"

    def workload_pods(self, workloads: list[Workload]) -> dict[str, list[Key]]:
        return workload_pods(self.client, self.out, self.until, workloads)

    def show_allocations(self) -> None:
        self.out.phase("allocations (NodeAllocationState)")
        for node in sorted(self.cluster.nodes, key=lambda n: n.name):
            nas = self.nas(node.name)
            if nas is None:
                self.out(f"node {node.name}: no NodeAllocationState")
                continue
            allocated, prepared = nas.spec.allocatedClaims, nas.spec.preparedClaims
            self.out(f"node {node.name}: {len(allocated)} allocated, {len(prepared)} prepared")
            if not allocated:
                continue
            index = {d.gpu.uuid: d.gpu.index for d in nas.spec.allocatableDevices if d.gpu}
            rows = [["CLAIM", "DEVICES", "SHARING", "PODS", "PREPARED"]]
            entries = sorted(
                allocated.items(), key=lambda i: (i[1].claimInfo.namespace, i[1].claimInfo.name)
            )
            for uid, entry in entries:
                info = entry.claimInfo
                consumers = self._consumers(info.namespace, info.name)
                rows.append(
                    [
                        f"{info.namespace}/{info.name}",
                        devices_text(entry, index),
                        sharing_text(entry, len(consumers)),
                        ",".join(consumers) or "-",
                        "yes" if uid in prepared else "no",
                    ]
                )
            for line in _table(rows):
                self.out(line)

    def delete(
        self, pods: list[Key], claims: list[Key], ran: set[Key], owners: Sequence[str] = ()
    ) -> None:
        """Delete the workloads (`owners`: their URLs; their pods go with them), the pods and
        the claims, and report what is left."""
        namespaces = sorted({k[0] for k in pods} | {k[0] for k in claims})
        existing = sorted(
            (c["metadata"]["namespace"], c["metadata"]["name"])
            for ns in namespaces
            for c in self._claims(ns)
        )
        if owners:
            self.out.phase("deleting workloads")
            for url in owners:  # first, or their controllers would replace the pods
                self._delete(url)
        self.out.phase("deleting pods")
        for key in sorted(pods):
            self._delete(kubeclient.path("", "v1", "pods", namespace=key[0], name=key[1]))
        gone = self.until(lambda: all(self._pod(k) is None for k in pods))
        for key in sorted(pods):
            state = "Running" if key in ran else "Pending"
            if self._pod(key) is None:
                self.out(f"pod {key[0]}/{key[1]}  {state} -> deleted")
            else:
                self.out(f"pod {key[0]}/{key[1]}  {state} -> still there: {self._why(key)}")
        if not gone:
            self.failures.append(f"pods not deleted within {self.timeout:g}s")
        self.out.phase("deleting claims")
        for key in claims:
            self._delete(kubeclient.path(*_CLAIMS, namespace=key[0], name=key[1]))

        def claims_gone() -> bool:
            garbage.collect(self.client, namespaces)  # the garbage collector's orphan sweep
            return not [c for ns in namespaces for c in self._claims(ns)]

        left = self.until(claims_gone)
        still = {
            (c["metadata"]["namespace"], c["metadata"]["name"])
            for ns in namespaces
            for c in self._claims(ns)
        }
        for key in existing:
            how = (
                "deleted with its manifest"
                if key in claims
                else "made for its pod, deleted with it"
            )
            if key in still:
                self.out(f"claim {key[0]}/{key[1]}  still there ({how})")
            else:
                self.out(f"claim {key[0]}/{key[1]}  deallocated and gone ({how})")
        if not left:
            self.failures.append(f"claims not deallocated within {self.timeout:g}s")

    def _consumers(self, namespace: str, name: str) -> list[str]:
        """The pods a claim is reserved for (status.reservedFor)."""
        try:
            claim = self.client.get(kubeclient.path(*_CLAIMS, namespace=namespace, name=name))
        except errors.ApiError as error:
            if error.code == 404:
                return []
            raise
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        return sorted(str(r.get("name")) for r in reserved if r.get("resource") == "pods")

    def _delete(self, url: str) -> None:
        try:
            self.client.delete(url)
        except errors.ApiError as error:
            if error.code != 404:
                raise

    def _claims(self, namespace: str) -> list[Obj]:
        items: list[Obj] = self.client.list(kubeclient.path(*_CLAIMS, namespace=namespace))["items"]
        return items

    def check_cleanup(self) -> None:
        self.out.phase("cleanup")

        def leftovers(node: democluster.SimNode) -> list[str]:
            nas = self.nas(node.name)
            counts = {
                "allocated": len(nas.spec.allocatedClaims) if nas else 0,
                "prepared": len(nas.spec.preparedClaims) if nas else 0,
                "CDI specs": len(node.cdi_specs()),
                "MIG devices": node.mig_devices(),
            }
            return [f"{n} {what}" for what, n in counts.items()]

        def clean() -> bool:
            return all(
                all(item.startswith("0 ") for item in leftovers(n)) for n in self.cluster.nodes
            )

        self.until(clean)
        for node in sorted(self.cluster.nodes, key=lambda n: n.name):
            items = leftovers(node)
            ok = all(item.startswith("0 ") for item in items)
            self.out(f"node {node.name}: {', '.join(items)}  {'ok' if ok else 'NOT CLEAN'}")
            if not ok:
                self.failures.append(f"node {node.name} not clean: {', '.join(items)}")


_CLAIMS = ("resource.k8s.io", "v1alpha2", "resourceclaims")


def _controller_uid(obj: Obj) -> str | None:
    for owner in obj["metadata"].get("ownerReferences") or []:
        if owner.get("controller"):
            return str(owner.get("uid"))
    return None


def devices_text(entry: AllocatedDevices, index: dict[str, int]) -> str:
    parts = []
    if entry.gpu is not None:
        for gpu in entry.gpu.devices:
            parts.append(f"GPU {index.get(gpu.uuid, '?')} ({gpu.uuid[:12]})")
    if entry.mig is not None:
        for mig in entry.mig.devices:
            start, size = mig.placement.start, mig.placement.size
            parts.append(
                f"MIG {mig.profile} on GPU {index.get(mig.parentUUID, '?')} "
                f"(slices {start}-{start + size - 1})"
            )
    return ", ".join(parts) or "none (CPU only)"


def sharing_text(entry: AllocatedDevices, users: int = 1) -> str:
    """What the claim gets (`drasat.api.access`): exclusive, time-sliced, MPS or a share."""
    sharing = (entry.gpu.sharing if entry.gpu else None) or (
        entry.mig.sharing if entry.mig else None
    )
    return access.label(sharing, entry.share, users)


def _sources(
    args: argparse.Namespace, default: str = DEFAULT_EXAMPLE
) -> list[tuple[str, list[loading.Document]]]:
    examples: list[str] = list(args.example)
    if not examples and not args.manifests:
        examples = [default]
    sources = [(name, example_documents(name)) for name in examples]
    sources += [(given, _file_documents(given)) for given in args.manifests]
    return sources


def check_manifests(
    cluster: cluster_api.Cluster, source: str, documents: Sequence[loading.Document]
) -> None:
    """Reject bad manifests before anything starts, with the what-if's own messages.

    The what-if compiler knows the claim kinds, references and MIG profiles the cluster offers,
    so an example with a mistake (a profile its GPUs lack, a missing parameters object) fails in
    the demo with exactly the line `drasat whatif` prints for it, and exit 2.
    """
    described = loading.Document(source, 1, cluster.model_dump(mode="json", exclude_none=True))
    nodes = whatif_nodes.load([described])
    whatif_manifests.compile_manifests(
        documents, offered_profiles=nodes.offered_profiles(), existing_uids=nodes.existing_uids()
    )


def _pods(applied: Iterable[apply.Applied], kind: str) -> list[Key]:
    return sorted(
        (str(a.object["metadata"]["namespace"]), str(a.object["metadata"]["name"]))
        for a in applied
        if a.object.get("kind") == kind and a.created
    )


def run(args: argparse.Namespace, stream: TextIO) -> int:
    out = Out(stream)
    if args.timeout <= 0:
        raise InputError("--timeout must be positive", where="--timeout")
    classic = getattr(args, "classic", False)
    if classic and getattr(args, "kube_bin", None) is not None:
        raise InputError("the real control plane runs the v1 flow only", where="--kube-bin")
    sources = _sources(args, DEFAULT_EXAMPLE if classic else V1_EXAMPLE)
    cluster, source = read_cluster(args.cluster, examples=bool(args.example))
    documents, policy_text, policy_name = split_policy([d for _, s in sources for d in s])
    if not classic:
        from drasat.cli import demov1  # it builds on this module

        policy = (documents, policy_text, policy_name)
        return demov1.run(args, stream, sources, cluster, source, policy)
    check_manifests(cluster, source, documents)
    kept = {id(d) for d in documents}
    with democluster.DemoCluster.running(cluster, policy_text=policy_text) as demo_cluster:
        demo = Demo(demo_cluster, out, args.timeout)
        demo.show_cluster(source)
        out(f"policy: {policy_name}")
        applied = []
        for title, docs in sources:
            applied += demo.apply(title, [d for d in docs if id(d) in kept])
        pods = _pods(applied, "Pod")
        claims = _pods(applied, "ResourceClaim")
        workloads = [
            Workload(a, n)
            for a in applied
            if a.created and (n := wanted_pods(a.object)) is not None
        ]
        pods_of = demo.workload_pods(workloads)
        made = sorted({k for w in workloads for k in pods_of.get(w.uid, [])})
        outcomes = demo.wait_pods(pods + made)
        demo.show_allocations()
        ran = {k for k, o in outcomes.items() if o.run is not None}
        known = apply.kinds(crds.all_crds())
        owners = [
            apply.url(
                known[(str(w.applied.object["apiVersion"]), str(w.applied.object["kind"]))], *w.key
            )
            for w in workloads
        ]
        demo.delete(pods + made, claims, ran, owners)
        demo.check_cleanup()
        stuck = [o for o in outcomes.values() if o.run is None and o.key not in made]
        for outcome in sorted(stuck, key=lambda o: o.key):
            if args.allow_pending and not outcome.reason.startswith("timed out"):
                continue
            demo.failures.insert(0, f"pod {outcome.key[0]}/{outcome.key[1]} did not run")
        short = shortfalls(workloads, pods_of, outcomes, allow_pending=args.allow_pending)
        demo.failures[:0] = short
        stuck = [o for o in outcomes.values() if o.run is None]
    if demo.failures:
        out(f"== demo FAILED: {'; '.join(demo.failures)}")
        return 1
    pending = f", {len(stuck)} stayed Pending" if stuck else ""
    out(f"== demo ok: {len(ran)} pods ran{pending}; every device was cleaned up")
    return 0


#: Packages of the `demo` extra (the simulated API server's validation) -> their import names.
DEMO_EXTRA = {"kubernetes-validate": "kubernetes_validate", "cel-python": "celpy"}


def _check_demo_extra() -> None:
    missing = [
        pkg for pkg, module in DEMO_EXTRA.items() if importlib.util.find_spec(module) is None
    ]
    if missing:
        raise InputError(
            f"drasat demo needs {', '.join(missing)}: pip install 'drasat[demo]'", where="demo"
        )


def main(args: argparse.Namespace) -> int:
    _check_demo_extra()
    # The node plugin announces its sockets at WARNING, for an operator reading a DaemonSet's
    # log; in the demo that is noise unless a more verbose --log-level asked for it.
    quiet = [logging.getLogger(name) for name in _QUIET]
    levels = [logger.level for logger in quiet]
    if getattr(args, "log_level", "WARNING") in ("WARNING", "ERROR"):
        for logger in quiet:
            logger.setLevel(logging.ERROR)
    try:
        return run(args, sys.stdout)
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)
