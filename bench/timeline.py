"""One pod's path from creation to binding on the real control plane, step by step, one clock.

    python -m bench.timeline [--kubeconfig K] [--allocators kube,drasat-ungated,drasat]
                             [--pods 5] [--out DIR]
    python -m bench.timeline --replay DIR/records.json     # the tables again, from a recording

A small fleet (`--nodes` fake nodes with drasat's ResourceSlices, as `bench.kube_alloc`) and,
per allocator, `--pods` pods asking one whole GPU each, created one at a time (the next once the
last is bound, so each pod's path is the unloaded one). While they run, watches on the pods, the
claims, the Events (the namespace's) and drasat's NodeAllocationStates record every change with
the bench's wall clock; drasat's controller log (its lines carry the same machine's clock, to the
millisecond) adds what the API does not show: the cycle that placed the pod and its solve.

From the recording, `steps` lists for one pod: created, its claim created by the resourceclaim
controller, each kube-scheduler attempt (a FailedScheduling Event, or its count going up), the
controller's cycle and solve, each of drasat's writes (the NAS ledger, the claim's finalizer and
`status.allocation`, the gate lifted), the claim reserved for the pod, and the binding. Results
go to `--out` (records.json: everything recorded; timeline.md: the tables).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import pathlib
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import kubernetes
from kubernetes.client import ApiException

from bench import kube_alloc
from drasat.api.devicemodel import classes
from drasat.api.groups import NAS_GROUP, SCHEDULING_GATE, VERSION

Obj = dict[str, Any]
TEMPLATE = "whole-1"
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\w+) ([\w.]+): (.*)$")
_CYCLE = re.compile(r"^cycle \d+: (\d+) pods, .* in ([0-9.]+)s")


# --- recording -----------------------------------------------------------------------------


def trim(kind: str, obj: Obj) -> Obj:
    """What the timeline needs of one watched object (the recording stays small)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if kind == "Pod":
        return {
            "name": meta.get("name"),
            "gates": [g.get("name") for g in spec.get("schedulingGates") or []],
            "node": spec.get("nodeName"),
            "conditions": {
                c["type"]: [c.get("status"), c.get("reason")]
                for c in status.get("conditions") or []
            },
            "claims": [
                s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []
            ],
        }
    if kind == "ResourceClaim":
        return {
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "owner": next((o.get("name") for o in meta.get("ownerReferences") or []), None),
            "finalizers": list(meta.get("finalizers") or []),
            "allocated": bool(status.get("allocation")),
            "reserved": [r.get("name") for r in status.get("reservedFor") or []],
        }
    if kind == "Event":
        involved = obj.get("involvedObject") or {}
        series = obj.get("series") or {}
        return {
            "name": meta.get("name"),
            "object": [involved.get("kind"), involved.get("name")],
            "reason": obj.get("reason"),
            "message": (obj.get("message") or "")[:200],
            "source": obj.get("reportingComponent") or (obj.get("source") or {}).get("component"),
            "count": max(int(obj.get("count") or 1), int(series.get("count") or 0)),
        }
    # NodeAllocationState: which claims its ledger names.
    return {"name": meta.get("name"), "uids": sorted(set(_UID.findall(json.dumps(obj))))}


class Recorder:
    """Watches on pods, claims and Events of one namespace and on drasat's NASes; each change is
    appended to `records` with the wall clock when it arrived."""

    def __init__(self, kubeconfig: pathlib.Path, namespace: str, nas_namespace: str) -> None:
        self.records: list[Obj] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._kubeconfig = kubeconfig
        self._threads = [
            threading.Thread(target=self._run, args=(kind, namespace), daemon=True)
            for kind in ("Pod", "ResourceClaim", "Event")
        ] + [threading.Thread(target=self._run, args=("NAS", nas_namespace), daemon=True)]
        for thread in self._threads:
            thread.start()

    def add(self, record: Obj) -> None:
        with self._lock:
            self.records.append(record)

    def _lister(self, api: kubernetes.client.ApiClient, kind: str, ns: str) -> Any:
        core = kubernetes.client.CoreV1Api(api)
        custom = kubernetes.client.CustomObjectsApi(api)
        if kind == "Pod":
            return core.list_namespaced_pod, {"namespace": ns}
        if kind == "Event":
            return core.list_namespaced_event, {"namespace": ns}
        if kind == "ResourceClaim":
            args = {"group": "resource.k8s.io", "version": "v1", "plural": "resourceclaims"}
            return custom.list_namespaced_custom_object, {**args, "namespace": ns}
        args = {"group": NAS_GROUP, "version": VERSION, "plural": "nodeallocationstates"}
        return custom.list_namespaced_custom_object, {**args, "namespace": ns}

    def _run(self, kind: str, ns: str) -> None:
        api = kubernetes.config.new_client_from_config(config_file=str(self._kubeconfig))
        with api:
            lister, kwargs = self._lister(api, kind, ns)
            while not self._stop.is_set():
                watch = kubernetes.watch.Watch()
                try:
                    for event in watch.stream(lister, timeout_seconds=5, **kwargs):
                        obj = event["object"]
                        if not isinstance(obj, dict):
                            obj = api.sanitize_for_serialization(obj)
                        self.add(
                            {
                                "t": time.time(),
                                "kind": kind,
                                "type": event["type"],
                                "object": trim(kind, obj),
                            }
                        )
                        if self._stop.is_set():
                            break
                except (ApiException, OSError, ValueError):
                    time.sleep(0.2)

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)


# --- the timeline --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Step:
    t: float  # seconds since the pod's create call
    source: str
    what: str


def parse_log(lines: Iterable[str]) -> list[tuple[float, str]]:
    """(wall clock, message) of each of the controller's log lines (`drasat.cli.main`'s format;
    its time is the machine's local time, to the millisecond)."""
    out = []
    for line in lines:
        found = _LOG_LINE.match(line.rstrip("\n"))
        if found:
            when = datetime.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f")
            out.append((when.timestamp(), found.group(4)))
    return out


def steps(
    records: Sequence[Obj], log: Sequence[tuple[float, str]], pod: str, ns: str
) -> list[Step]:
    """One pod's timeline from a recording (`Recorder.records` plus the "Create" record of the
    pod's create call) and the controller's parsed log."""
    created = next(r["t"] for r in records if r["kind"] == "Create" and r["object"]["name"] == pod)
    out: list[Step] = [Step(0.0, "bench", "create call sent")]

    def add(t: float, source: str, what: str) -> None:
        out.append(Step(round(t - created, 3), source, what))

    claims: dict[str, Obj] = {}  # claim name -> last seen
    last_pod: Obj | None = None
    counts: dict[str, int] = {}
    nas_seen: dict[str, set[str]] = {}
    for r in sorted(records, key=lambda r: r["t"]):
        o, kind, t = r["object"], r["kind"], r["t"]
        if kind == "Pod" and o["name"] == pod:
            if last_pod is None:
                gates = ", ".join(o["gates"]) or "none"
                add(t, "API", f"pod created (scheduling gates: {gates})")
                last_pod = {"gates": [], "node": None, "conditions": {}, "claims": []}
            if SCHEDULING_GATE in last_pod["gates"] and SCHEDULING_GATE not in o["gates"]:
                add(t, "drasat", "write: scheduling gate lifted")
            if o["claims"] and not last_pod["claims"]:
                add(t, "resourceclaim controller", "pod status names its claim")
            for ctype, (status, reason) in o["conditions"].items():
                if (
                    last_pod["conditions"].get(ctype) != [status, reason]
                    and ctype == "PodScheduled"
                ):
                    add(
                        t,
                        "kube-scheduler",
                        f"PodScheduled={status}" + (f" ({reason})" if reason else ""),
                    )
            if o["node"] and not last_pod["node"]:
                add(t, "kube-scheduler", f"bound to {o['node']}")
            last_pod = o
        elif kind == "ResourceClaim" and o["owner"] == pod:
            before = claims.get(o["name"])
            if before is None:
                add(t, "resourceclaim controller", f"claim {o['name']} created")
                before = {"finalizers": [], "allocated": False, "reserved": []}
            for f in o["finalizers"]:
                if f not in before["finalizers"]:
                    add(
                        t,
                        "drasat" if "drasat" in f else "kube-scheduler",
                        f"write: claim finalizer {f}",
                    )
            if o["allocated"] and not before["allocated"]:
                add(t, "allocator", "write: claim status.allocation")
            if o["reserved"] and not before["reserved"]:
                add(t, "kube-scheduler", "write: claim status.reservedFor (the pod)")
            claims[o["name"]] = o
        elif kind == "Event" and o["object"][1] in {pod, *claims}:
            key = o["name"]
            if o["count"] > counts.get(key, 0):
                counts[key] = o["count"]
                n = f" #{o['count']}" if o["count"] > 1 else ""
                add(t, o["source"] or "?", f"Event {o['reason']}{n}: {o['message'][:90]}")
        elif kind == "NAS":
            uids = {c["uid"] for c in claims.values()}
            now = set(o["uids"]) & uids
            if now - nas_seen.get(o["name"], set()):
                add(t, "drasat", f"write: NAS {o['name']} lists the claim")
            nas_seen[o["name"]] = now
    key = f"{ns}/{pod}"
    names = set(claims)
    allocated = next((t for t, m in log if key in m and m.startswith("allocated ")), None)
    cycle = None
    for t, message in log:
        if t < created - 0.01:
            continue
        found = _CYCLE.match(message)
        if found and allocated is not None and t <= allocated + 0.01:
            cycle = (t, message, float(found.group(2)))
        elif key in message or any(n in message for n in names):
            add(t, "drasat log", message[:110])
    if cycle is not None:
        t, message, elapsed = cycle
        add(t - elapsed, "drasat log", "cycle starts its solve")
        add(t, "drasat log", message[:110])
    out.sort(key=lambda s: s.t)
    return out


def table(rows: Sequence[Step]) -> str:
    lines = ["| t (ms since create) | Δ ms | who | step |", "|---:|---:|---|---|"]
    prev = 0.0
    for s in rows:
        lines.append(f"| {1000 * s.t:.0f} | {1000 * (s.t - prev):.0f} | {s.source} | {s.what} |")
        prev = s.t
    return "\n".join(lines) + "\n"


def bound_after(rows: Sequence[Step]) -> float | None:
    return next((s.t for s in rows if s.what.startswith("bound to ")), None)


#: The milestones of a pod's path, in order: (name, the first step that reaches it).
MILESTONES: tuple[tuple[str, Callable[[Step], bool]], ...] = (
    ("claim created", lambda s: s.what.startswith("claim ") and s.what.endswith(" created")),
    ("first scheduler attempt failed", lambda s: s.what.startswith("Event FailedScheduling")),
    ("refused by drasat (no room)", lambda s: s.what.startswith("Event NotAllocatable")),
    ("solve starts", lambda s: s.what == "cycle starts its solve"),
    ("NAS written", lambda s: s.what.startswith("write: NAS ")),
    ("status.allocation written", lambda s: s.what == "write: claim status.allocation"),
    ("gate lifted", lambda s: s.what == "write: scheduling gate lifted"),
    ("bound", lambda s: s.what.startswith("bound to ")),
)


def milestones(rows: Sequence[Step]) -> dict[str, float]:
    """When the pod first reached each milestone (s since its create call); absent: never."""
    out = {}
    for name, reached in MILESTONES:
        found = next((s.t for s in rows if reached(s)), None)
        if found is not None:
            out[name] = found
    return out


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def milestone_table(per_pod: Sequence[Sequence[Step]]) -> str:
    """p50 / p99 of each milestone over the pods that were bound."""
    reached = [milestones(rows) for rows in per_pod]
    bound = [m for m in reached if "bound" in m]
    lines = [
        f"{len(bound)} of {len(per_pod)} pods bound\n",
        "| milestone | pods | p50 s | p99 s |",
        "|---|---:|---:|---:|",
    ]
    for name, _ in MILESTONES:
        values = [m[name] for m in bound if name in m]
        if values:
            lines.append(
                f"| {name} | {len(values)} | {_pct(values, 50):.3f} | {_pct(values, 99):.3f} |"
            )
    # What the slow tail is made of: a pod refused first (by drasat's cycle or kube-scheduler's
    # attempt) found no device free when it came and waited for a departure.
    slow = [m for m in bound if m["bound"] > SLOW_S]
    waited = sum(1 for m in slow if REFUSED_FIRST & m.keys())
    lines.append(
        f"\n{len(slow)} bound after {SLOW_S:g} s; {waited} of them were refused first (no device "
        "free when they came: they waited for a departure)"
    )
    return "\n".join(lines) + "\n"


#: The latency target of the bind's p99 (issue 24), and the milestones that say a pod was
#: refused before it was bound.
SLOW_S = 2.0
REFUSED_FIRST = frozenset({"first scheduler attempt failed", "refused by drasat (no room)"})


#: The steps of giving a departed pod's devices back, in order (`releases`).
RELEASE_STEPS = ("claim deallocated or deleted", "claim left drasat's ledger")


def releases(records: Sequence[Obj]) -> dict[str, dict[str, float]]:
    """Per pod deleted while its claim was allocated: seconds from the pod's deletion (its
    watch event) until its claim was first seen without an allocation or deleted, and until the
    claim's uid left the NodeAllocationState that named it (drasat's ledger; absent for an
    allocator without one). What the pod held is allocatable again after the later of the two."""
    deleted: dict[str, float] = {}
    claim_of: dict[str, str] = {}  # pod -> its claim's uid (the claim's owner)
    allocated: dict[str, bool] = {}  # claim uid -> allocated when last seen
    freed: dict[str, float] = {}  # claim uid -> first seen unallocated or deleted after that
    ledgers: dict[str, set[str]] = {}  # NAS name -> the uids it names
    left: dict[str, float] = {}  # claim uid -> when it left the NAS that named it
    for r in sorted(records, key=lambda r: r["t"]):
        o, kind, t = r["object"], r["kind"], r["t"]
        if kind == "Pod" and r.get("type") == "DELETED":
            deleted.setdefault(o["name"], t)
        elif kind == "ResourceClaim":
            uid = o["uid"]
            if o.get("owner"):
                claim_of.setdefault(o["owner"], uid)
            gone = r.get("type") == "DELETED" or not o["allocated"]
            if gone and allocated.get(uid):
                freed.setdefault(uid, t)
            allocated[uid] = not gone
        elif kind == "NAS":
            now = set() if r.get("type") == "DELETED" else set(o["uids"])
            for uid in ledgers.get(o["name"], set()) - now:
                left.setdefault(uid, t)
            ledgers[o["name"]] = now
    out = {}
    for pod, t in deleted.items():
        uid = claim_of.get(pod)
        if uid is None or uid not in freed:
            continue  # its claim was never allocated (a refused pod)
        delays = {RELEASE_STEPS[0]: round(freed[uid] - t, 3)}
        if uid in left:
            delays[RELEASE_STEPS[1]] = round(left[uid] - t, 3)
        out[pod] = delays
    return out


def release_table(records: Sequence[Obj]) -> str:
    """p50 / p99 / max of each step of `releases`, over the pods deleted with an allocation."""
    found = releases(records)
    lines = [
        f"{len(found)} pods deleted while allocated: pod deleted -> (s)\n",
        "| step | pods | p50 s | p99 s | max s |",
        "|---|---:|---:|---:|---:|",
    ]
    for step in RELEASE_STEPS:
        values = [d[step] for d in found.values() if step in d]
        if values:
            lines.append(
                f"| {step} | {len(values)} | {_pct(values, 50):.3f} | {_pct(values, 99):.3f} "
                f"| {max(values):.3f} |"
            )
    return "\n".join(lines) + "\n"


def report(data: Obj) -> str:
    """The tables of a recording: per allocator, the first pod's timeline, every pod's
    creation -> bound (up to 10 pods) or the milestones' percentiles (more)."""
    parts = []
    for run in data["runs"]:
        log = parse_log(run.get("log", []))
        per_pod = [steps(run["records"], log, p, run["namespace"]) for p in run["pods"]]
        head = f"### {run['allocator']}\n\n"
        if len(per_pod) > 10:
            parts.append(head + milestone_table(per_pod) + "\n" + release_table(run["records"]))
            continue
        totals = [b for b in (bound_after(r) for r in per_pod) if b is not None]
        median = f"{statistics.median(totals):.3f}" if totals else "—"
        parts.append(
            f"{head}creation -> bound of {len(run['pods'])} pods "
            f"(s): {', '.join(f'{x:.3f}' for x in totals)}; median {median}\n\n"
            f"first pod ({run['pods'][0]}):\n\n{table(per_pod[0])}"
        )
    return "\n".join(parts)


# --- the run -------------------------------------------------------------------------------


def trace(
    api: kubernetes.client.ApiClient,
    kubeconfig: pathlib.Path,
    allocator: str,
    args: argparse.Namespace,
    run: str,
) -> Obj:
    handle = kube_alloc.ALLOCATORS[allocator](kubeconfig, args.drasat_namespace)
    try:
        with kube_alloc.namespace(api, f"{run}-{allocator}") as ns:
            request = {"deviceClassName": classes.GPU_CLASS}
            kube_alloc._create_templates(api, ns, {TEMPLATE: request})
            recorder = Recorder(kubeconfig, ns, args.drasat_namespace)
            core = kubernetes.client.CoreV1Api(api)
            time.sleep(1.0)  # the watches listed
            names = []
            try:
                for i in range(args.pods):
                    name = f"t{i:02d}"
                    recorder.add({"t": time.time(), "kind": "Create", "object": {"name": name}})
                    body = kube_alloc.pod(name, TEMPLATE, gated=allocator in kube_alloc.GATED)
                    core.create_namespaced_pod(ns, body)
                    names.append(name)
                    deadline = time.monotonic() + args.timeout
                    while time.monotonic() < deadline:
                        if core.read_namespaced_pod(name, ns).spec.node_name:
                            break
                        time.sleep(0.05)
                    time.sleep(args.gap)
            finally:
                recorder.close()
            log_path = getattr(handle, "log", None)
            log = pathlib.Path(log_path).read_text().splitlines() if log_path else []
            kube_alloc.say(f"{allocator}: {len(names)} pods traced")
            return {
                "allocator": allocator,
                "namespace": ns,
                "pods": names,
                "records": recorder.records,
                "log": log,
            }
    finally:
        handle.stop()


def bench(args: argparse.Namespace) -> Obj:
    run = args.run or f"tl-{int(time.time()) % 100000}"
    with kube_alloc.control_plane(args.kubeconfig) as kubeconfig:
        api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        with api, kube_alloc._device_classes(api):
            planned = kube_alloc.plan_fleet(run, args.nodes, 0.5, 0)
            try:
                kube_alloc.create_fleet(api, planned, 4)
                runs = [trace(api, kubeconfig, a, args, run) for a in args.allocators]
            finally:
                kube_alloc.delete_fleet(api, planned)
    return {"runs": runs}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.timeline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kubeconfig", type=pathlib.Path, default=None)
    parser.add_argument("--allocators", default="kube,drasat-ungated,drasat")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--pods", type=int, default=5, help="pods traced per allocator")
    parser.add_argument("--gap", type=float, default=2.0, help="pause after each binding (s)")
    parser.add_argument("--timeout", type=float, default=60.0, help="per pod (s)")
    parser.add_argument("--drasat-namespace", default="drasat")
    parser.add_argument("--run", default="")
    parser.add_argument("--replay", type=pathlib.Path, default=None, help="a records.json")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/results/timeline"))
    args = parser.parse_args(argv)
    args.allocators = [a for a in args.allocators.split(",") if a]
    unknown = [a for a in args.allocators if a not in kube_alloc.ALLOCATORS]
    if unknown:
        parser.error(f"unknown allocator(s) {', '.join(unknown)}")
    if args.pods < 1:
        parser.error("--pods must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.replay is not None:
        try:
            data = json.loads(args.replay.read_text())
        except (OSError, ValueError) as error:
            print(f"error: {args.replay}: {error}", file=sys.stderr)
            return 2
        print(report(data), end="")
        return 0
    data = bench(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "records.json").write_text(json.dumps(data) + "\n")
    text = report(data)
    (args.out / "timeline.md").write_text(text)
    print(text, end="")
    print(f"wrote {args.out}/records.json and timeline.md")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
