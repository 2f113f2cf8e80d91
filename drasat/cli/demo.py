"""`drasat demo`: the whole system in one process on an embedded example, watched like kubectl.

It runs current Kubernetes' DRA (`resource.k8s.io/v1`) on the v1 reference cases, on the simulated
API server or, with `--kube-bin DIR`, on the real control plane (and real kubelets when DIR holds
them): `drasat.testbed.democluster.V1Cluster` starts the parts. `--classic` runs classic DRA
(`resource.k8s.io/v1alpha2`) instead: `drasat.classic.demo`, loaded only then.

What the Helm chart and the cluster would hold is created first: drasat's CRDs (real cluster), its
namespace, DeviceClasses and policy ConfigMap, one Node per described node. The demo waits for
every node's slices and NAS and for the controller's DeviceTaintRule (which keeps kube-scheduler's
own allocator off drasat's devices), applies the manifests, shows each pod Running with the
devices its claims were prepared with and its container's GPU environment, the allocations, then
deletes everything it applied and checks every node is clean again.

Manifests: the v1 reference cases (default), `--example NAME` (a folder of the shipped examples,
on the examples' lab cluster), `-f FILE|DIR`. An AllocationPolicy among them becomes the policy
ConfigMap, as `helm install --set policy...` would make it.

Pods of Deployments, ReplicaSets, Jobs (and StatefulSets, on the real control plane) are made by
the controller manager and counted: a workload that ran fewer pods than it asks for (`replicas`; a
Job's `parallelism`, at most `completions`) fails the demo with a line naming its manifest and the
counts.

Exit codes: 0 every pod ran and every node was cleaned up; 1 some step failed (the last line says
which); 2 bad input.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.resources
import importlib.util
import logging
import os
import pathlib
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib.resources.abc import Traversable
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import yaml

from drasat import loading, policyfiles
from drasat.api import cluster as cluster_api
from drasat.api import crds
from drasat.api.cluster import Cluster
from drasat.api.inputerrors import InputError
from drasat.api.nas import AllocatedDevices
from drasat.controller import decisions
from drasat.testbed import democluster
from drasat.testbed.controlplane import binaries, realkubelet
from drasat.testbed.controlplane import realcluster as controlplane
from drasat.testbed.democluster import V1Cluster, core_path, v1_path
from drasat.testbed.demoshow import (
    DemoError,
    Key,
    Obj,
    Out,
    PodOutcome,
    Workload,
    created,
    devices_text,
    env_line,
    owner_urls,
    sharing_text,
    shortfalls,
    table,
    wanted_pods,
    workload_pods,
)
from drasat.testbed.sim import apply, errors
from drasat.testbed.sim.kubelet import PodRun

log = logging.getLogger(__name__)

DEFAULT_EXAMPLE = "reference-cases"

#: The v1 flow's default: the two reference cases in `resource.k8s.io/v1` terms.
V1_EXAMPLE = "v1-reference-cases"

#: The examples' own cluster (what their READMEs show), used with --example.
EXAMPLES_CLUSTER = "clusters/lab.yaml"

SUFFIXES = (".yaml", ".yml", ".json")

#: Loggers whose WARNINGs the demo shows itself (Events), that are meant for an operator (the
#: plugin's sockets), or that retry on their own (a watch the server ended, reopened).
_QUIET = ("drasat.nodeplugin.plugin", "drasat.kube.events", "urllib3.connectionpool")

#: Classic DRA objects, which this flow's API (and current Kubernetes) no longer has.
_CLASSIC = ("resource.k8s.io/v1alpha2", "gpu.drasat.io/v1alpha1")


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
        "--runtime",
        choices=("fake", "containerd"),
        default="fake",
        help="with --kube-bin: the kubelets' container runtime: fake (no container runs; the "
        "default) or containerd: real kubelets on real containerd (scripts/runtime-build), "
        "drasat installed by its chart with localhost/drasat:dev (scripts/image-build) and the "
        "probe workloads, printing per pod what its container sees (make demo-containerd)",
    )
    parser.add_argument(
        "--images",
        type=pathlib.Path,
        metavar="DIR",
        help="with --runtime containerd: the image archives' folder (default: $DRASAT_IMAGES)",
    )
    parser.add_argument(
        "--allow-pending",
        action="store_true",
        help="exit 0 even when some pod stays Pending (examples that show a refusal)",
    )
    parser.set_defaults(func=main)


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
    described = loading.validate(cluster_api.Cluster, found[0])
    for number, group in enumerate(described.spec.nodes):
        if group.driver != cluster_api.DRASAT_FORMAT:
            raise InputError(
                f"spec.nodes[{number}].driver: {group.driver}: the demo runs drasat's node "
                f"plugin on every node (the what-if plans NVIDIA's format)",
                where=found[0].where,
            )
    return described, source


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


def _sources(
    args: argparse.Namespace, default: str = DEFAULT_EXAMPLE
) -> list[tuple[str, list[loading.Document]]]:
    examples: list[str] = list(args.example)
    if not examples and not args.manifests:
        examples = [default]
    sources = [(name, example_documents(name)) for name in examples]
    sources += [(given, _file_documents(given)) for given in args.manifests]
    return sources


# --- the run ----------------------------------------------------------------------------------


class V1Demo(democluster.DemoSteps):
    cluster: V1Cluster

    def show_cluster(self, source: str) -> None:
        missing = self.cluster.ready(self.timeout)
        cluster = self.cluster
        self.out.phase(
            f"cluster ({source}, {cluster.kind}, {cluster.kubelets}): {len(cluster.nodes)} nodes"
        )
        rows = [["NODE", "GPUS", "SLICE DEVICES", "NAS"]]
        for node in sorted(self.cluster.nodes, key=lambda n: n.name):
            nas = self.cluster.nas(node.name)
            devices = sum(
                len(s["spec"].get("devices") or []) for s in self.cluster.slices(node.name)
            )
            status = nas.status.value if nas is not None and nas.status else "missing"
            rows.append([node.name, democluster.describe(node.fleet.spec), str(devices), status])
        for line in table(rows):
            self.out(line)
        self.failures.extend(missing)

    def apply(self, title: str, documents: list[loading.Document]) -> list[apply.Applied]:
        """Namespaces first, and (on a real cluster) only then the rest once each namespace's
        default ServiceAccount exists: the ServiceAccount admission refuses pods before."""
        self.out.phase(f"applying {title}")
        known = self.cluster.kinds()
        first = [d for d in documents if d.data.get("kind") == "Namespace"]
        applied = apply.apply(self.client, first, known=known)
        if self.cluster.real_control_plane:  # kube-controller-manager makes them
            for item in applied:
                name = str(item.object["metadata"]["name"])
                url = core_path("serviceaccounts", name, "default")
                if not self.until(functools.partial(self._exists, url)):
                    raise DemoError(f"namespace {name}: no default ServiceAccount was made")
        applied += apply.apply(
            self.client, [d for d in documents if d.data.get("kind") != "Namespace"], known=known
        )
        for item in applied:
            self.out(f"{item.ref} {'created' if item.created else 'unchanged'}")
        return applied

    def _exists(self, url: str) -> bool:
        return self.cluster.get_object(url) is not None

    def _show_run(self, run: PodRun) -> None:
        for claim in run.claims:
            devices = [f"{d.pool_name}/{d.device_name}" for d in run.prepared.get(claim.uid, [])]
            self.out(f"  claim {claim.name}: {', '.join(devices) or 'no device'}")
            if len(run.containers) <= 1:
                self.out(f"  log [{claim.name}]: {env_line(run.claim_env(claim.uid))}")
        if len(run.containers) > 1:
            # Each container gets the devices of the requests it names (the kubelet's rule).
            for name in run.containers:
                self.out(f"  log [{name}]: {env_line(run.container_env(name))}")

    def _refusal(self, key: Key) -> str | None:
        """The newest Warning of drasat's controller on the pod: no node has the devices."""
        events = self.client.list(core_path("events", key[0]))["items"]
        found = [
            e
            for e in events
            if e.get("type") == "Warning"
            and e.get("reason") == decisions.REASON
            and (e.get("involvedObject") or {}).get("kind") == "Pod"
            and (e.get("involvedObject") or {}).get("name") == key[1]
        ]
        if not found:
            return None
        newest = max(found, key=lambda e: str(e.get("lastTimestamp") or e["metadata"]["name"]))
        return f"Warning {newest.get('reason')}: {newest.get('message')}"

    def _pod_reasons(self, key: Key) -> list[str]:
        """Without the simulated scheduler: kube-scheduler's PodScheduled condition."""
        reasons = []
        pod = self.cluster.get_object(core_path("pods", key[0], key[1]))
        if pod is not None and self.cluster.scheduler is None:
            for condition in (pod.get("status") or {}).get("conditions") or []:
                if condition.get("type") == "PodScheduled" and condition.get("status") != "True":
                    reasons.append(f"kube-scheduler: {condition.get('message')}")
        return reasons

    def claims(self, namespaces: Sequence[str]) -> list[Obj]:
        return [
            c for ns in namespaces for c in self.client.list(v1_path("resourceclaims", ns))["items"]
        ]

    def show_allocations(self, namespaces: Sequence[str]) -> None:
        """Each claim as its status says (node, devices, the pods it is reserved for), with what
        the node's NAS ledger says it gets (exclusive, time-sliced, MPS, a share) and the
        time-slice its GPUs are set to now (the simulated hardware, as the plugin left it)."""
        self.out.phase("allocations (ResourceClaim status, NodeAllocationState)")
        # The ledger names an entry `<claim uid>/<request>`: a claim may have several.
        ledger: dict[str, list[tuple[AllocatedDevices, dict[str, int]]]] = {}
        for node in self.cluster.nodes:
            nas = self.cluster.nas(node.name)
            if nas is None:
                continue
            index = {d.gpu.uuid: d.gpu.index for d in nas.spec.allocatableDevices if d.gpu}
            for key in sorted(nas.spec.allocatedClaims):
                entry = nas.spec.allocatedClaims[key]
                ledger.setdefault(entry.claimInfo.uid, []).append((entry, index))
        slices_of = {
            (node.name, gpu.uuid): _TIME_SLICES[gpu.time_slice]
            for node in self.cluster.nodes
            for gpu in node.fleet.gpus
        }
        rows = [["CLAIM", "NODE", "DEVICES", "GPU", "NAS SHARING", "TIME-SLICE", "RESERVED FOR"]]
        for claim in sorted(
            self.claims(namespaces),
            key=lambda c: (c["metadata"]["namespace"], c["metadata"]["name"]),
        ):
            meta, status = claim["metadata"], claim.get("status") or {}
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            pods = sorted(
                str(r.get("name"))
                for r in status.get("reservedFor") or []
                if r.get("resource") == "pods"
            )
            pool = str(results[0].get("pool")) if results else "-"
            found = ledger.get(str(meta["uid"]), [])
            uuids = {u for entry, _ in found for u in _gpu_uuids(entry)}
            rows.append(
                [
                    f"{meta['namespace']}/{meta['name']}",
                    pool,
                    ",".join(str(r.get("device")) for r in results) or "not allocated",
                    ", ".join(devices_text(entry, index) for entry, index in found) or "-",
                    ", ".join(dict.fromkeys(sharing_text(e, len(pods)) for e, _ in found)) or "-",
                    ",".join(sorted({slices_of.get((pool, u), "?") for u in uuids})) or "-",
                    ",".join(pods) or "-",
                ]
            )
        for line in table(rows):
            self.out(line)

    def delete(self, pods: list[Key], claims: list[Key], owners: Sequence[str]) -> None:
        """Delete the workloads (their pods go with them), the pods and the claims applied, and
        wait until every claim in their namespaces is gone (the resourceclaim controller deletes
        the ones it made from templates once their pod is gone)."""
        namespaces = sorted({k[0] for k in pods} | {k[0] for k in claims})
        existing = sorted(
            (c["metadata"]["namespace"], c["metadata"]["name"]) for c in self.claims(namespaces)
        )
        if owners:
            self.out.phase("deleting workloads")
            for url in owners:  # first, or their controllers would replace the pods
                self._delete(url, background=True)
        self.out.phase("deleting pods")
        for key in sorted(pods):
            self._delete(core_path("pods", key[0], key[1]))
        get = self.cluster.get_object
        gone = self.until(lambda: all(get(core_path("pods", *k)) is None for k in pods))
        for key in sorted(pods):
            there = self.cluster.get_object(core_path("pods", *key)) is not None
            self.out(
                f"pod {key[0]}/{key[1]}  {'still there: ' + self._why(key) if there else 'deleted'}"
            )
        if not gone:
            self.failures.append(f"pods not deleted within {self.timeout:g}s")
        self.out.phase("deleting claims")
        for key in claims:
            self._delete(v1_path("resourceclaims", key[0], key[1]))
        left = self.until(lambda: not self.claims(namespaces))
        still = {
            (c["metadata"]["namespace"], c["metadata"]["name"]) for c in self.claims(namespaces)
        }
        self.show_claims_left(existing, claims, still)
        if not left:
            self.failures.append(f"claims not deleted within {self.timeout:g}s")

    def _delete(self, url: str, *, background: bool = False) -> None:
        """DELETE `url`; `background`: its dependents go too, as `kubectl delete` asks (a
        batch/v1 Job would otherwise orphan its pods)."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        try:
            self.client.request("DELETE", url, body=body if background else None)
        except errors.ApiError as error:
            if error.code != 404:
                raise


#: `nvidia-smi compute-policy --set-timeslice=N` levels.
_TIME_SLICES = ("Default", "Short", "Medium", "Long")


def _gpu_uuids(entry: AllocatedDevices) -> list[str]:
    """The GPUs (MIG devices: their parents) of a ledger entry."""
    uuids = [g.uuid for g in entry.gpu.devices] if entry.gpu is not None else []
    uuids += [m.parentUUID for m in entry.mig.devices] if entry.mig is not None else []
    return uuids


def _terminate(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _terminate_unwinds() -> Any:
    """SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so every part is stopped and the
    temporary folder (the control plane's etcd data) removed; the previous handler, or None
    where this thread may not set one (not the main thread)."""
    try:
        return signal.signal(signal.SIGTERM, _terminate)
    except ValueError:
        return None


def _real_kubelets(bin_dir: pathlib.Path) -> tuple[bool, str]:
    """Whether the real control plane gets real kubelets (the kubelet and fakecri in `bin_dir`,
    and root to run them), and the line that says which and why."""
    try:
        realkubelet.locate_node_binaries(bin_dir)
    except binaries.MissingBinaries:
        return False, (
            f"simulated ({bin_dir} has no kubelet and fakecri: scripts/kube-build builds them)"
        )
    if os.geteuid() != 0:
        return False, "simulated (the real kubelet runs as root)"
    return True, f"real (kubelet and fakecri from {bin_dir}, one per node)"


def check_v1(documents: Sequence[loading.Document], *, real: bool = False) -> None:
    """Before anything starts: classic DRA objects are for `--classic` (say so), and a kind the
    simulated API server does not serve is refused as `apply` would refuse it later (on the real
    control plane, `served_kinds` decides once it runs)."""
    known = apply.kinds(crds.all_crds())
    for document in documents:
        version, kind = str(document.data.get("apiVersion")), str(document.data.get("kind"))
        where = f"{document.where}: {document.describe()}"
        if version in _CLASSIC:
            raise InputError(
                f"{kind} of {version} is classic DRA, which current Kubernetes does not serve: "
                "run it with drasat demo --classic",
                where=where,
            )
        if not real and (version, kind) not in known:
            raise InputError(
                f"the simulated API server does not serve {kind} of {version} (the real control "
                "plane, --kube-bin DIR, serves what Kubernetes serves)",
                where=where,
            )


def _run_v1(
    args: argparse.Namespace,
    stream: TextIO,
    sources: list[tuple[str, list[loading.Document]]],
    cluster: Cluster,
    source: str,
    policy: tuple[list[loading.Document], str, str],
) -> int:
    out = Out(stream)
    documents, policy_text, policy_name = policy
    check_v1(documents, real=args.kube_bin is not None)
    bin_dir: pathlib.Path | None = None
    if args.kube_bin is not None:
        try:
            bin_dir = binaries.locate(pathlib.Path(args.kube_bin))
        except binaries.MissingBinaries as error:
            raise InputError(str(error), where="--kube-bin") from None
    kept = {id(d) for d in documents}
    previous = _terminate_unwinds()
    began = time.monotonic()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="drasat-demo-"))  # short unix socket paths
    ran: set[Key] = set()
    stuck: list[PodOutcome] = []
    try:
        if bin_dir is None:
            running = V1Cluster.simulated(cluster, policy_text=policy_text, tmp=tmp)
        else:
            real_kubelets, why = _real_kubelets(bin_dir)
            out.phase(f"starting the real control plane from {bin_dir}")
            out(f"  kubelets: {why}")
            running = V1Cluster.real(
                cluster,
                policy_text=policy_text,
                tmp=tmp,
                bin_dir=bin_dir,
                out=out,
                timeout=args.timeout,
                real_kubelets=real_kubelets,
            )
        with running as v1_cluster:
            demo = V1Demo(v1_cluster, out, args.timeout)
            demo.show_cluster(source)
            out(f"policy: {policy_name}")
            started = time.monotonic()
            applied: list[apply.Applied] = []
            for title, docs in sources:
                applied += demo.apply(title, [d for d in docs if id(d) in kept])
            pods, claims = created(applied, "Pod"), created(applied, "ResourceClaim")
            workloads = [
                Workload(a, n)
                for a in applied
                if a.created and (n := wanted_pods(a.object)) is not None
            ]
            pods_of = workload_pods(demo.client, out, demo.until, workloads)
            made = sorted({k for w in workloads for k in pods_of.get(w.uid, [])})
            outcomes = demo.wait_pods(pods + made)
            ran_s = time.monotonic() - started
            namespaces = sorted({k[0] for k in pods + made + claims})
            demo.show_allocations(namespaces)
            ran = {k for k, o in outcomes.items() if o.run is not None}
            demo.delete(pods + made, claims, owner_urls(workloads, v1_cluster.kinds()))
            demo.check_cleanup()
            stuck = [o for o in outcomes.values() if o.run is None]
            not_run = [
                f"pod {o.key[0]}/{o.key[1]} did not run"
                for o in sorted(stuck, key=lambda o: o.key)
                if o.key not in made  # a workload's pods are counted per workload
                and not (args.allow_pending and not o.reason.startswith("timed out"))
            ]
            short = shortfalls(workloads, pods_of, outcomes, allow_pending=args.allow_pending)
            demo.failures[:0] = short + not_run
            startup = ", ".join(f"{what} {s:.1f}s" for what, s in v1_cluster.timings)
    except (controlplane.ClusterError, DemoError) as error:
        out(f"== demo FAILED: {error}")
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    total = time.monotonic() - began
    out(f"== took {total:.1f}s: start-up {startup}; pods applied to running {ran_s:.1f}s")
    if demo.failures:
        out(f"== demo FAILED: {'; '.join(demo.failures)}")
        return 1
    pending = f", {len(stuck)} stayed Pending" if stuck else ""
    kubelets = ", real kubelets" if v1_cluster.kubelets.startswith("real") else ""
    out(
        f"== demo ok ({v1_cluster.kind.split(' (')[0]}{kubelets}): {len(ran)} pods ran{pending}; "
        "every device was cleaned up"
    )
    return 0


def run(args: argparse.Namespace, stream: TextIO) -> int:
    if args.timeout <= 0:
        raise InputError("--timeout must be positive", where="--timeout")
    classic = getattr(args, "classic", False)
    if classic and getattr(args, "kube_bin", None) is not None:
        raise InputError("the real control plane runs the v1 flow only", where="--kube-bin")
    if getattr(args, "runtime", "fake") == "containerd":
        if classic or args.example or args.manifests or args.cluster:
            raise InputError(
                "runs its own probe workloads on simulated GPUs of its own: no --classic, "
                "--example, -f or --cluster",
                where="--runtime containerd",
            )
        from drasat.cli import containerddemo  # the containerd test bed, loaded only here

        return containerddemo.run(args, stream)
    sources = _sources(args, DEFAULT_EXAMPLE if classic else V1_EXAMPLE)
    cluster, source = read_cluster(args.cluster, examples=bool(args.example))
    documents, policy_text, policy_name = split_policy([d for _, s in sources for d in s])
    policy = (documents, policy_text, policy_name)
    if classic:
        try:  # classic DRA's wing, loaded only here (a v1-only install has none)
            # import_module, not `from drasat.classic import demo`: that form takes the
            # attribute of an already imported package and never asks the import system.
            classic_demo = importlib.import_module("drasat.classic.demo")
        except ModuleNotFoundError as missing:
            if not (missing.name or "").startswith("drasat.classic"):
                raise
            message = "this drasat has no classic DRA (drasat.classic)"
            raise InputError(message, where="--classic") from None
        code: int = classic_demo.run(args, stream, sources, cluster, source, policy)
        return code
    return _run_v1(args, stream, sources, cluster, source, policy)


#: Packages of the `demo` extra (the simulated API server's validation) -> their import names.
DEMO_EXTRA = {"kubernetes-validate": "kubernetes_validate", "cel-python": "celpy"}


def _check_demo_extra() -> None:
    missing = [
        pkg for pkg, module in DEMO_EXTRA.items() if importlib.util.find_spec(module) is None
    ]
    if missing:
        # drasat is not published on PyPI: `drasat[demo]` names nothing pip can install
        raise InputError(
            f"drasat demo needs {', '.join(missing)}, drasat's demo extra: pip install "
            f"'<the drasat wheel>[demo]' (README.md, Quick start), or pip install "
            f"{' '.join(missing)}",
            where="demo",
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
