"""Whether a pod may run on a node, as kube-scheduler's filters before DynamicResources decide
it: NodeUnschedulable, NodeName, TaintToleration (NoSchedule and NoExecute), NodeAffinity
(`nodeSelector` and required node affinity), and NodeResourcesFit (cpu, memory, pods) against
what the pods bound there request.

The controller filters its candidate nodes with these, so it never allocates a claim on a node
where the scheduler would then refuse the pod; the CPU and memory left become the solver's node
capacity (the pods of one batch compete for it). Each refusal is a short reason for the pod's
explanation. This is a purely computational module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drasat.api.quantity import to_bytes

Obj = Mapping[str, Any]

UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def _requirement(expression: Obj, value: str | None) -> bool:
    operator = expression.get("operator")
    values = expression.get("values") or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            number, bound = int(value), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def node_selector_matches(selector: Obj | None, node: Obj) -> bool:
    """A v1 NodeSelector: terms are ORed, expressions and fields within a term ANDed."""
    if not selector:
        return True
    labels = (node.get("metadata") or {}).get("labels") or {}
    fields = {"metadata.name": (node.get("metadata") or {}).get("name")}
    for term in selector.get("nodeSelectorTerms") or []:
        expressions = term.get("matchExpressions") or []
        by_field = term.get("matchFields") or []
        if not expressions and not by_field:
            continue
        if all(_requirement(e, labels.get(e.get("key"))) for e in expressions) and all(
            _requirement(f, fields.get(f.get("key"))) for f in by_field
        ):
            return True
    return False


def tolerates(tolerations: Sequence[Obj], taint: Obj) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key")
        if toleration.get("operator") == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def unfit(pod: Obj, node: Obj) -> str | None:
    """Why the pod may not run on the node by the filters other than resources; None: it may."""
    spec = pod.get("spec") or {}
    meta = node.get("metadata") or {}
    node_spec = node.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    if node_spec.get("unschedulable") and not tolerates(tolerations, UNSCHEDULABLE_TAINT):
        return "node is unschedulable (cordoned)"
    if spec.get("nodeName") and spec["nodeName"] != meta.get("name"):
        return f"pod names node {spec['nodeName']}"
    for taint in node_spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            key, value, effect = taint.get("key"), taint.get("value", ""), taint.get("effect")
            return f"untolerated taint {key}={value}:{effect}"
    labels = meta.get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return f"nodeSelector {key}={value} does not match"
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not node_selector_matches(affinity, node):
        return "required node affinity does not match"
    return None


def _cpu_milli(value: Any) -> int:
    text = str(value)
    if text.endswith("m"):
        return int(to_bytes(text[:-1]))
    return int(to_bytes(text) * 1000)


def _mib(value: Any) -> int:
    return -(-to_bytes(str(value)) // 2**20)


def requests(pod: Obj) -> tuple[int, int]:
    """(cpu millicores, memory MiB) the pod requests: its containers' sum or its largest init
    container, whichever is more, plus its overhead, as the scheduler counts them."""
    spec = pod.get("spec") or {}

    def total(containers: Iterable[Obj]) -> tuple[int, int]:
        cpu = memory = 0
        for container in containers:
            wanted = (container.get("resources") or {}).get("requests") or {}
            cpu += _cpu_milli(wanted["cpu"]) if "cpu" in wanted else 0
            memory += _mib(wanted["memory"]) if "memory" in wanted else 0
        return cpu, memory

    cpu, memory = total(spec.get("containers") or [])
    for init in spec.get("initContainers") or []:
        init_cpu, init_memory = total([init])
        cpu, memory = max(cpu, init_cpu), max(memory, init_memory)
    overhead = spec.get("overhead") or {}
    cpu += _cpu_milli(overhead["cpu"]) if "cpu" in overhead else 0
    memory += _mib(overhead["memory"]) if "memory" in overhead else 0
    return cpu, memory


@dataclass(frozen=True)
class Capacity:
    """A node's allocatable cpu, memory and pods, and what its bound pods request."""

    cpu_milli: int | None
    memory_mib: int | None
    pods: int | None
    used_cpu_milli: int = 0
    used_memory_mib: int = 0
    used_pods: int = 0


def capacity(node: Obj, bound: Iterable[Obj]) -> Capacity:
    """What the node offers and what the (non-terminated) pods bound to it already take."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    cpu = memory = used = 0
    for pod in bound:
        if ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
            continue
        pod_cpu, pod_memory = requests(pod)
        cpu, memory, used = cpu + pod_cpu, memory + pod_memory, used + 1
    return Capacity(
        cpu_milli=_cpu_milli(allocatable["cpu"]) if "cpu" in allocatable else None,
        memory_mib=to_bytes(str(allocatable["memory"])) // 2**20
        if "memory" in allocatable
        else None,
        pods=int(allocatable["pods"]) if "pods" in allocatable else None,
        used_cpu_milli=cpu,
        used_memory_mib=memory,
        used_pods=used,
    )


def full(capacity: Capacity) -> str | None:
    """Why no further pod fits by count; None: one more does."""
    if capacity.pods is not None and capacity.used_pods >= capacity.pods:
        return f"node already runs its {capacity.pods} pods"
    return None
