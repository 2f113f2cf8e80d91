"""What both demos (`drasat demo`, and `drasat demo --classic` in `drasat.classic.demo`) print and
count: the output and its tables, each pod's outcome, the workloads whose pods a controller makes
and how many each asks for, and the text of a ledger entry's devices and sharing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from drasat.api import access
from drasat.api.nas import AllocatedDevices
from drasat.testbed.sim import apply, kubeclient, resources
from drasat.testbed.sim.kubelet import PodRun

#: How long a claim's Warning Event must stand, with its pod still Pending, before the pod
#: counts as stuck (a few controller resyncs: a transient Warning does not end the wait).
SETTLE_S = 2.5

POLL_S = 0.05


Obj = dict[str, Any]
Key = tuple[str, str]


class DemoError(Exception):
    """A step of the demo failed (exit 1); the message says which."""


def until(check: Callable[[], Any], timeout: float) -> Any:
    """Poll `check` until it is truthy or `timeout` passes; its last value."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = check()
        if value or time.monotonic() >= deadline:
            return value
        pause.wait(POLL_S)


class Out:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, line: str = "") -> None:
        print(line, file=self.stream, flush=True)

    def phase(self, title: str) -> None:
        self(f"== {title}")


def table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]


def env_line(env: dict[str, str]) -> str:
    """A container's GPU environment, its devices (DRASAT_GPU_UUIDS) first (the claim UID left
    out)."""
    keys = sorted(k for k in env if k != "DRASAT_CLAIM_UID")
    keys.sort(key=lambda k: k != "DRASAT_GPU_UUIDS")
    return " ".join(f"{k}={env[k]}" for k in keys)


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


def created(applied: Iterable[apply.Applied], kind: str) -> list[Key]:
    """The objects of `kind` that applying created (not the ones that were there), sorted."""
    return sorted(
        (str(a.object["metadata"]["namespace"]), str(a.object["metadata"]["name"]))
        for a in applied
        if a.object.get("kind") == kind and a.created
    )


def owner_urls(
    workloads: Iterable[Workload], known: Mapping[tuple[str, str], resources.ResourceType]
) -> list[str]:
    """The URL of each workload, to delete it (and its pods) by; `known`: the served kinds."""
    return [
        apply.url(
            known[(str(w.applied.object["apiVersion"]), str(w.applied.object["kind"]))], *w.key
        )
        for w in workloads
    ]


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
            parent = {s["metadata"]["uid"]: controller_uid(s) for s in sets["items"]}
            pods = client.list(kubeclient.path("", "v1", "pods", namespace=ns))["items"]
            for pod in pods:
                owner = controller_uid(pod)
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


def controller_uid(obj: Obj) -> str | None:
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
