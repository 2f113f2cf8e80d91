"""Pods and the pods that workloads (Deployment, ReplicaSet, StatefulSet, Job, DaemonSet) would
create.

Pods of workloads are named the way their controllers name them — `<statefulset>-<ordinal>`,
`<deployment>-<template-hash>-<suffix>`, `<replicaset>-<suffix>`, `<job>-<suffix>`,
`<daemonset>-<suffix>` — with the random parts derived from the workload's name (and a
DaemonSet's node), so every run names them alike. A DaemonSet stands for one pod on each node
its controller would run one on (`daemon_nodes`), tied to that node as the controller ties it.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drasat import loading
from drasat.api import cluster, limits, nodefit
from drasat.api.base import Object
from drasat.api.groups import NOMINATION_ANNOTATION
from drasat.api.inputerrors import InputError
from drasat.api.quantity import MAX_QUANTITY, go_value
from drasat.whatif import kinds, manifestindex

#: The alphabet Kubernetes uses for generated name suffixes (no vowels, no look-alikes).
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@dataclass(frozen=True)
class PodInstance:
    namespace: str
    name: str
    uid: str
    spec: kinds.PodSpec
    #: Where the pod spec was written, for error messages (the workload's document).
    where: str
    #: Field path of the pod spec inside its document: `spec` or `spec.template.spec`.
    spec_path: str
    #: `Deployment web` for pods of a workload, "" for a Pod.
    owner: str
    #: status.phase of a Pod read back from a cluster ("" when not given).
    phase: str = ""
    #: The pod's labels (a workload's: its template's), sorted: a gang's are read from them.
    labels: tuple[tuple[str, str], ...] = ()
    #: A Pod's nomination as written (`gpu.drasat.io/nomination`, `status.nominatedNodeName`):
    #: what the controller's rule (`drasat.v1.nominations.believed`) reads; "" when not given.
    nomination: str = ""
    nominated_node: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def object_uid(kind: str, namespace: str, name: str, given: str | None = None) -> str:
    """metadata.uid when given, else a uuid5 of kind, namespace and name (reproducible)."""
    if given:
        return given
    return str(uuid.uuid5(cluster.UUID_NAMESPACE, f"{kind}/{namespace}/{name}"))


def suffix(seed: str, length: int) -> str:
    """`length` characters of Kubernetes' name-suffix alphabet, derived from `seed`."""
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(_SAFE_ALPHABET[b % len(_SAFE_ALPHABET)] for b in digest[:length])


def with_children(entries: list[manifestindex.Entry[Object]]) -> dict[int, str]:
    """Workloads whose own children are in the input: index -> `Kind name` of a child. Pure.

    A dump of a live namespace lists a Deployment, its ReplicaSet and their Pods; the Pods are
    what exists (names, UIDs, allocations), so only the leaves of that tree stand for pods.
    """
    index_of = {(e.obj.kind, e.namespace, e.obj.metadata.name): i for i, e in enumerate(entries)}
    out: dict[int, str] = {}
    for entry in entries:
        for ref in entry.obj.metadata.ownerReferences or []:
            owner = index_of.get((str(ref.get("kind")), entry.namespace, str(ref.get("name"))))
            if ref.get("controller") and owner is not None:
                out.setdefault(owner, f"{entry.obj.kind} {entry.obj.metadata.name}")
    return out


#: The tolerations the DaemonSet controller gives its pods (`AddOrUpdateDaemonPodTolerations`),
#: so a node's conditions and cordon keep none of them off it.
DAEMON_TOLERATIONS: tuple[dict[str, str], ...] = tuple(
    {"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": effect}
    for key, effect in (
        ("not-ready", "NoExecute"),
        ("unreachable", "NoExecute"),
        ("disk-pressure", "NoSchedule"),
        ("memory-pressure", "NoSchedule"),
        ("pid-pressure", "NoSchedule"),
        ("unschedulable", "NoSchedule"),
    )
)


def expand(
    entries: list[manifestindex.Entry[Object]], nodes: Sequence[Mapping[str, Any]] = ()
) -> list[PodInstance]:
    """Every pod the entries stand for, in input order. Raises InputError on duplicate pods.

    Workloads whose children are in the input are left to them (see `with_children`).
    `nodes`: the cluster's Node objects (metadata name and labels, spec taints), where a
    DaemonSet's pods run; none: a DaemonSet stands for no pod.
    """
    pods: list[PodInstance] = []
    seen: dict[str, str] = {}
    skipped = with_children(entries)
    most = loading.env_limit("DRASAT_MAX_PODS", limits.MAX_PODS)
    for index, entry in enumerate(entries):
        if index in skipped:
            continue
        # Counted before they are made (a million replicas are refused, not built); a
        # DaemonSet's pods are at most one per node.
        made = _pods_of(entry, nodes) if isinstance(entry.obj, kinds.DaemonSet) else []
        if len(pods) + (len(made) or _pod_count(entry.obj)) > most:
            raise InputError(
                f"the manifests stand for more than {most:,} pods, Kubernetes' limit per "
                "cluster (raise the limit with DRASAT_MAX_PODS)",
                where=entry.where(),
            )
        for pod in made or _pods_of(entry, nodes):
            if pod.key in seen:
                raise InputError(
                    f"pod {pod.key} is also created by {seen[pod.key]}", where=pod.where
                )
            seen[pod.key] = pod.where
            pods.append(pod)
    return pods


def _pods_of(
    entry: manifestindex.Entry[Object], nodes: Sequence[Mapping[str, Any]]
) -> list[PodInstance]:
    obj = entry.obj
    where = entry.where()
    if isinstance(obj, kinds.DaemonSet):
        return _daemon_pods(entry, obj, daemon_nodes(obj.spec.template.spec, nodes))
    if isinstance(obj, kinds.Pod):
        uid = object_uid("Pod", entry.namespace, obj.metadata.name, obj.metadata.uid)
        phase = str((obj.status or {}).get("phase", ""))
        labels = tuple(sorted((obj.metadata.labels or {}).items()))
        nomination = str((obj.metadata.annotations or {}).get(NOMINATION_ANNOTATION) or "")
        nominated_node = str((obj.status or {}).get("nominatedNodeName") or "")
        return [
            PodInstance(
                entry.namespace, obj.metadata.name, uid, obj.spec, where, "spec", "", phase,
                labels, nomination, nominated_node,
            )
        ]  # fmt: skip
    if isinstance(obj, kinds.ReplicatedWorkload | kinds.Job):
        names = _names(obj)
        owner = f"{obj.kind} {obj.metadata.name}"
        return [
            PodInstance(
                entry.namespace,
                name,
                object_uid("Pod", entry.namespace, name),
                obj.spec.template.spec,
                where,
                "spec.template.spec",
                owner,
                labels=tuple(sorted((obj.spec.template.metadata.labels or {}).items())),
            )
            for name in names
        ]
    raise AssertionError(f"not a workload: {type(obj).__name__}")  # pragma: no cover


def daemon_nodes(
    spec: kinds.PodSpec, nodes: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The nodes the DaemonSet controller runs a pod of the template on
    (`NodeShouldRunDaemonPod`): its node selector and required node affinity match and it
    tolerates the node's NoSchedule and NoExecute taints, with the tolerations the controller
    adds. Pure."""
    pod = {"spec": _daemon_spec(spec, None)}
    return [n for n in nodes if nodefit.unfit(pod, n) is None]


def _daemon_spec(spec: kinds.PodSpec, node: str | None) -> dict[str, Any]:
    """The template's spec as the controller makes its pod for `node`: its tolerations, and
    the required node affinity replaced by one term naming the node
    (`ReplaceDaemonSetPodNodeNameNodeAffinity`)."""
    out = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    out.pop("nodeName", None)  # the controller's affinity, not the template's, picks the node
    tolerations = list(out.get("tolerations") or [])
    out["tolerations"] = tolerations + [t for t in DAEMON_TOLERATIONS if t not in tolerations]
    if node is not None:
        affinity = out.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [term]}
    return out


def _daemon_pods(
    entry: manifestindex.Entry[Object], obj: kinds.DaemonSet, nodes: Sequence[Mapping[str, Any]]
) -> list[PodInstance]:
    name = obj.metadata.name
    names = [str((n.get("metadata") or {}).get("name")) for n in nodes]
    labels = tuple(sorted((obj.spec.template.metadata.labels or {}).items()))
    taken: set[str] = set()
    out = []
    for node in names:
        candidate, retry = f"{name}-{suffix(f'{name}/{node}', 5)}", 0
        while candidate in taken:
            retry += 1
            candidate = f"{name}-{suffix(f'{name}/{node}/{retry}', 5)}"
        taken.add(candidate)
        spec = kinds.PodSpec.model_validate(_daemon_spec(obj.spec.template.spec, node))
        out.append(
            PodInstance(
                entry.namespace, candidate, object_uid("Pod", entry.namespace, candidate), spec,
                entry.where(), "spec.template.spec", f"DaemonSet {name}", labels=labels,
            )
        )  # fmt: skip
    return out


def _pod_count(obj: Object) -> int:
    if isinstance(obj, kinds.Job):
        count = obj.spec.parallelism
        if obj.spec.completions is not None:
            count = min(count, obj.spec.completions)
        return count
    if isinstance(obj, kinds.ReplicatedWorkload):
        return obj.spec.replicas
    return 1


def _names(obj: kinds.ReplicatedWorkload | kinds.Job) -> list[str]:
    name = obj.metadata.name
    count = _pod_count(obj)
    if obj.kind == "StatefulSet":
        return [f"{name}-{i}" for i in range(count)]
    prefix = f"{name}-{suffix(f'{name}/template', 10)}" if obj.kind == "Deployment" else name
    return _unique_names(prefix, name, count)


def _unique_names(prefix: str, seed: str, count: int) -> list[str]:
    """`<prefix>-<5 letters>` for `count` pods; as Kubernetes does, a suffix already taken is
    drawn again (27^5 suffixes: a 100,000-replica workload has collisions)."""
    names: list[str] = []
    taken: set[str] = set()
    for i in range(count):
        candidate = f"{prefix}-{suffix(f'{seed}/{i}', 5)}"
        retry = 0
        while candidate in taken:
            retry += 1
            candidate = f"{prefix}-{suffix(f'{seed}/{i}/{retry}', 5)}"
        taken.add(candidate)
        names.append(candidate)
    return names


#: Pods in these phases hold no devices any more (`kubectl get pods -o yaml` lists them too).
FINISHED_PHASES = ("Succeeded", "Failed")


def priority_of(
    pod: PodInstance,
    classes: Mapping[str, manifestindex.Entry[kinds.PriorityClass]],
) -> int:
    """`spec.priority`, else the PriorityClass named, else a global default one, else 0."""
    if pod.spec.priority is not None:
        return pod.spec.priority
    if pod.spec.priorityClassName is not None:
        named = classes.get(pod.spec.priorityClassName)
        return named.obj.value if named is not None else 0
    default = next((c for c in classes.values() if c.obj.globalDefault), None)
    return default.obj.value if default is not None else 0


def resource_requests(pod: PodInstance) -> tuple[int, int]:
    """CPU (millicores) and memory (MiB) the pod requests, as the scheduler counts them.

    The containers' sum, or the largest init container when that is more; a resource with a
    limit but no request requests its limit.
    """
    total = _sum_requests(pod, "containers", pod.spec.containers)
    init = [
        _sum_requests(pod, "initContainers", [c], offset=i)
        for i, c in enumerate(pod.spec.initContainers)
    ]
    cpu = max([total[0], *(c for c, _ in init)])
    memory = max([total[1], *(m for _, m in init)])
    return cpu, memory


def _sum_requests(
    pod: PodInstance, field_name: str, containers: list[kinds.Container], offset: int = 0
) -> tuple[int, int]:
    cpu = memory = 0
    for index, container in enumerate(containers, start=offset):
        resources = container.resources or kinds.Resources()
        requests, limits = resources.requests or {}, resources.limits or {}
        path = f"{pod.spec_path}.{field_name}[{index}].resources"
        for resource in ("cpu", "memory"):
            value = requests.get(resource, limits.get(resource))
            if value is None:
                continue
            where_set = "requests" if resource in requests else "limits"
            try:
                # Any spelling the API server parses (`1k` CPUs, `1u` bytes), rounded up.
                amount = go_value(value) * (1000 if resource == "cpu" else 1)
                if amount < 0 or amount > MAX_QUANTITY:
                    raise ValueError(f"{value!r} is not a quantity from 0 to {MAX_QUANTITY}")
                whole = int(amount.to_integral_value(rounding="ROUND_CEILING"))
                if resource == "cpu":
                    cpu += whole
                else:
                    memory += -(-whole // 2**20)
            except ValueError as error:
                raise InputError(
                    f"{path}.{where_set}.{resource}: {error}", where=pod.where
                ) from None
    return cpu, memory
