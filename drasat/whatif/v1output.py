"""The what-if's output: what a run found, for every renderer.

The picture of the cluster after the run lives here, one for both what-ifs: each node's GPUs as
bars (`NodeView`, `GpuView`, `Segment`: MIG devices at their placements, shares by their
compute, drawn from the ledger, `node_view`), the colours (`palette`, `colour`, `Legend`) and
the `Summary`. The classic what-if's report (`report.py`) takes them from here; below, how a v1
run is rendered.

`table`/`wide`: one row per pod claim with its node and, per result, the request's name and the
device as its driver named it (`gpu-0`, `gpu-0-mig-1g5gb-19-0`), then what it is: a MIG
device's profile and placement on its GPU, a share's compute and memory, the CPU fallback. The
wide table adds the ResourceClaim, the GPUs' UUIDs and the sharing (the strategy the
allocation's opaque configs set, and how many pods use the claim). A pod that was not placed
says so on its rows; why is told once per pod below the table (the reason names the claim, the
request and the nodes; the wide table adds what each request asks for: class, selectors,
constraints). Then the summary and the solver's status with what it proves.

`yaml`/`json`: a `v1` List of each node's NodeAllocationState (its ledger: the claims already
allocated in the input and the new ones, in drasat's terms), then every ResourceClaim a pod
uses with `status.allocation` as the controller writes it (`drasat.v1.results`: results with
request, driver, pool, device, consumedCapacity and shareID; configs; nodeSelector; the
controller's `allocationTimestamp` is left out so two runs diff cleanly). Every claim carries
the annotation `whatif.drasat.io/solver`; one of a pod not placed also
`whatif.drasat.io/reason`. The claims' specs are unchanged, so `kubectl apply --dry-run=server`
accepts them.

`html`: the classic report page (`html`): each node's GPUs as bars with MIG devices at their
placements and shares by their compute, drawn from the ledger, and the wide table.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import yaml

from drasat.api import catalog
from drasat.api.devicemodel import shares
from drasat.api.nas import AllocatedDevices, GpuInfo, NodeAllocationState
from drasat.api.quantity import to_bytes
from drasat.solver.nodemodel import Gpu
from drasat.solver.problem import Solution, Status, bound_text
from drasat.v1 import nasinventory
from drasat.v1.publisheddevices import FALLBACK, MIG, Published
from drasat.whatif import html, table, v1gangs, v1manifests, v1preemption, v1run
from drasat.whatif.v1run import V1Result

Obj = dict[str, Any]

#: Memory slices of a MIG GPU whose product neither the catalog nor its NAS describes.
DEFAULT_MIG_SLICES = 8


@dataclass(frozen=True)
class Segment:
    """A part of a GPU's bar: `start`/`size` in slots of the bar (MIG slices or percent)."""

    start: int
    size: int
    claim: str  # namespace/name of the claim
    label: str  # the whole story (tooltip)
    text: str  # what fits in the segment: the most telling part first
    colour: str
    existing: bool


@dataclass(frozen=True)
class GpuView:
    index: int
    uuid: str
    product: str
    memory: str
    mig_enabled: bool
    #: Slots of the bar: memory slices of a MIG GPU, 100 (percent) otherwise.
    slots: int
    segments: tuple[Segment, ...]
    #: A MIG GPU held whole by a claim whose pod pairs MIG devices with it (gpuClaimName):
    #: (claim, colour); drawn as the bar's frame, not a segment.
    held_by: tuple[str, str] | None = None


@dataclass(frozen=True)
class NodeView:
    name: str
    ready: bool
    gpus: tuple[GpuView, ...]
    #: Optional claims allocated on this node with no device (their pods run CPU-only).
    cpu_only: tuple[str, ...] = ()


@dataclass(frozen=True)
class Summary:
    nodes: int
    nodes_not_ready: int
    gpus_total: int
    gpus_used: int
    mig_slices_total: int
    mig_slices_used: int
    pods_placed: int
    pods_unplaced: int
    #: Allocations the solution adds, and those the input NodeAllocationStates already held.
    allocations_new: int
    allocations_existing: int
    status: str
    objective: float
    #: None: no bound is known (online mode; a batch model that left out nodes).
    best_bound: float | None
    gap: float | None
    wall_time_s: float
    mode: str
    #: What the status proves (drasat.solver.Status.meaning).
    meaning: str = ""

    @property
    def solver_text(self) -> str:
        """`STATUS (mode: what it proves)`."""
        return f"{self.status} ({self.mode}: {self.meaning})" if self.meaning else self.status

    @property
    def bound_text(self) -> str:
        """`best bound B, gap G%`, or `no bound`."""
        status = Status(self.status) if self.status in {s.value for s in Status} else None
        return bound_text(self.best_bound, self.gap, status)

    @property
    def gpus_free(self) -> int:
        return self.gpus_total - self.gpus_used

    @property
    def mig_slices_free(self) -> int:
        return self.mig_slices_total - self.mig_slices_used


def mig_slices(gpu: GpuInfo, nas: NodeAllocationState) -> int:
    """Memory slices of a MIG GPU: the catalog's, else what its NAS placements reach."""
    product = catalog.product_for_name(gpu.productName)
    if product is not None and product.memory_slices:
        return product.memory_slices
    ends = [
        p.end
        for m in nas.spec.mig_profiles()
        if m.parentProductName == gpu.productName
        for p in m.placements
    ]
    return max(ends, default=DEFAULT_MIG_SLICES)


def colour(key: str) -> str:
    """A stable colour for a claim the workload does not hold (an existing allocation)."""
    hue = int(hashlib.sha256(key.encode()).hexdigest()[:6], 16) % 360
    return f"hsl({hue}, 45%, 72%)"


def palette(count: int) -> list[str]:
    """`count` colours far apart: hues a golden angle apart, lightness alternating."""
    return [f"hsl({(i * 137.508) % 360:.0f}, 62%, {58 + 8 * (i % 2)}%)" for i in range(count)]


@dataclass(frozen=True)
class Legend:
    """How the bars name and colour claims."""

    names: dict[str, str]  # claim uid -> namespace/name
    colours: dict[str, str]  # namespace/name -> colour
    users: dict[str, int]  # namespace/name -> pods using it
    existing: set[str]  # uids allocated in the input

    def colour_of(self, key: str) -> str:
        return self.colours.get(key) or colour(key)


def node_view(nas: NodeAllocationState, legend: Legend) -> NodeView:
    gpus = []
    for gpu in nas.spec.gpus():
        slots = mig_slices(gpu, nas) if gpu.migEnabled else 100
        segments, held_by = _segments(gpu, nas, legend)
        memory = f"{gpu.memoryBytes / 2**30:.0f} GiB"
        gpus.append(
            GpuView(
                gpu.index,
                gpu.uuid,
                gpu.productName,
                memory,
                gpu.migEnabled,
                slots,
                tuple(segments),
                held_by,
            )
        )
    ready = nas.status is None or nas.status.value == "Ready"
    cpu_only = tuple(
        legend.names.get(uid, f"{entry.claimInfo.namespace}/{entry.claimInfo.name}")
        for uid, entry in nas.spec.allocatedClaims.items()
        if entry.gpu is not None and not entry.gpu.devices
    )
    return NodeView(nas.metadata.name, ready, tuple(gpus), cpu_only)


def _segments(
    gpu: GpuInfo, nas: NodeAllocationState, legend: Legend
) -> tuple[list[Segment], tuple[str, str] | None]:
    segments: list[Segment] = []
    held_by: tuple[str, str] | None = None
    offset = 0  # share claims stack up from the left of a non-MIG bar
    for uid, entry in nas.spec.allocatedClaims.items():
        key = legend.names.get(uid, f"{entry.claimInfo.namespace}/{entry.claimInfo.name}")
        was = uid in legend.existing
        paint = legend.colour_of(key)
        if entry.mig is not None:
            for device in entry.mig.devices:
                if device.parentUUID == gpu.uuid:
                    label = f"{device.profile} {key}"
                    placement = device.placement
                    # a one- or two-slice device has room for its profile only
                    text = label if placement.size > 2 else device.profile
                    segments.append(
                        Segment(placement.start, placement.size, key, label, text, paint, was)
                    )
        elif entry.gpu is not None and any(d.uuid == gpu.uuid for d in entry.gpu.devices):
            if gpu.migEnabled:  # held whole next to its pod's paired MIG devices
                held_by = (key, paint)
                continue
            size = _share_percent(entry, gpu) if entry.share is not None else 100 - offset
            users = legend.users.get(key, 0)
            label = f"{key} ({users} pods)" if users > 1 else key
            if entry.share is not None:
                label = f"{size}% {key}"
            segments.append(Segment(offset, size, key, label, label, paint, was))
            offset = min(100, offset + size)
    return segments, held_by


def _share_percent(entry: AllocatedDevices, gpu: GpuInfo) -> int:
    share = entry.share
    assert share is not None
    if share.compute is not None:
        return share.compute
    memory = to_bytes(share.memory) if share.memory is not None else 0
    return max(1, round(100 * memory / gpu.memoryBytes)) if gpu.memoryBytes else 1


REASON_ANNOTATION = "whatif.drasat.io/reason"
SOLVER_ANNOTATION = "whatif.drasat.io/solver"

#: Weakest first: the status of a run of several rounds is its weakest round's.
_STRENGTH = (
    Status.MODEL_INVALID,
    Status.UNKNOWN,
    Status.INFEASIBLE,
    Status.FEASIBLE,
    Status.PER_POD_OPTIMAL,
    Status.OPTIMAL,
)


# --- what each result is ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Devices:
    """Every published device of the cluster by (driver, pool, name), and each GPU by UUID."""

    published: Mapping[tuple[str, str, str], Published]
    gpus: Mapping[str, Gpu]

    @classmethod
    def of(cls, result: V1Result) -> _Devices:
        published = {
            (d.driver, d.pool, d.name): d
            for state in result.cluster.states
            for d in result.cluster.published(state.name)
        }
        gpus = {g.uuid: g for state in result.cluster.states for g in state.devices.gpus}
        return cls(published, gpus)

    def describe(self, found: Obj, *, wide: bool) -> str:
        """`req: device (what it is)`."""
        name = str(found.get("device"))
        text = f"{found.get('request')}: {name}"
        device = self.published.get((str(found.get("driver")), str(found.get("pool")), name))
        if device is None:
            return text
        if device.kind == FALLBACK:
            return f"{text} (CPU only, no GPU)"
        gpu = self.gpus.get(device.gpu_uuid or "")
        on = f"GPU {gpu.index}" if gpu is not None else str(device.gpu_uuid)
        if wide and gpu is not None:
            on += f" {gpu.uuid}"
        if device.kind == MIG:
            return f"{text} ({device.profile}@{device.start} on {on})"
        share = _share(found.get("consumedCapacity") or {}, gpu)
        if share:
            return f"{text} (share {share} of {on})"
        return f"{text} ({on})" if wide else text


def _share(consumed: Mapping[str, Any], gpu: Gpu | None) -> str:
    """`25%, 4Gi` for a part of a GPU; empty for all of it (a whole GPU on a shareable device)."""
    if not consumed:
        return ""
    memory = to_bytes(str(consumed.get(shares.MEMORY, "0")))
    compute = int(to_bytes(str(consumed.get(shares.COMPUTE, "0"))))
    if gpu is not None and shares.takes_whole(memory, compute, gpu.memoryBytes):
        return ""
    return ", ".join(p for p in (f"{compute}%" if compute else "", _bytes(memory)) if p)


def _bytes(count: int) -> str:
    if not count:
        return ""
    for unit, size in (("Gi", 2**30), ("Mi", 2**20)):
        if count % size == 0:
            return f"{count // size}{unit}"
    return str(count)


def _allocation(result: V1Result, claim: v1manifests.V1Claim) -> tuple[Obj | None, bool]:
    """(status.allocation after the run, whether the input held it already)."""
    if v1manifests.allocated(claim.obj):
        return claim.obj["status"]["allocation"], True
    found = result.outcome.allocations.get(str(claim.obj["metadata"]["uid"]))
    return (found.allocation if found is not None else None), False


def _node_of(allocation: Obj) -> str:
    terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
    for term in terms:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
    return "-"


def _sharing(allocation: Obj, users: int) -> str:
    """The sharing strategies the opaque configs set, and the pods that use the claim."""
    strategies = []
    for config in (allocation.get("devices") or {}).get("config") or []:
        parameters = (config.get("opaque") or {}).get("parameters") or {}
        strategy = (parameters.get("sharing") or {}).get("strategy")
        if strategy and strategy not in strategies:
            strategies.append(str(strategy))
    pods = f"{users} pod{'s' if users != 1 else ''}"
    return f"{', '.join(strategies)}, {pods}" if strategies else pods


# --- rows -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One entry of a pod's spec.resourceClaims; shaped as the HTML template reads it."""

    pod: str
    pod_claim: str
    claim: v1manifests.V1Claim
    node: str | None
    devices: str
    devices_wide: str
    sharing: str
    reason: str | None
    existing: bool = False

    @property
    def placed(self) -> bool:
        return self.node is not None


def rows(result: V1Result) -> list[Row]:
    outcome = result.outcome
    described = _Devices.of(result)
    users = _users(result)
    out: list[Row] = []
    for pod in result.workload.pods:
        refused = outcome.refused.get(pod.key)
        for pod_claim, claim in pod.claims:
            allocation, existing = _allocation(result, claim)
            if allocation is None or (refused and not existing):
                reason = "see below" if refused else "not allocated"
                out.append(Row(pod.key, pod_claim, claim, None, "-", "-", "-", reason))
                continue
            found = (allocation.get("devices") or {}).get("results") or []
            out.append(
                Row(
                    pod.key,
                    pod_claim,
                    claim,
                    _node_of(allocation),
                    "; ".join(described.describe(r, wide=False) for r in found) or "none",
                    "; ".join(described.describe(r, wide=True) for r in found) or "none",
                    _sharing(allocation, users.get(claim.key, 1)),
                    None,
                    existing,
                )
            )
    return out


def _users(result: V1Result) -> dict[str, int]:
    """claim key -> the placed (or bound) pods that use it."""
    out: dict[str, int] = {}
    for pod in result.workload.pods:
        if pod.key in result.outcome.refused:
            continue
        for _, claim in pod.claims:
            out[claim.key] = out.get(claim.key, 0) + 1
    return out


def _cells(row: Row, *, wide: bool) -> list[str]:
    devices = row.devices_wide if wide else row.devices
    if row.existing:
        devices += " (already allocated)"
    if not row.placed:
        devices = f"not placed ({row.reason})"
    if not wide:
        return [row.pod, row.pod_claim, row.node or "-", devices]
    return [row.pod, row.pod_claim, row.claim.name, row.node or "-", devices, row.sharing]


def _asks(claim: v1manifests.V1Claim, classes: Mapping[str, Obj]) -> list[str]:
    """What each request of a claim asks for: class, the class's and its own selectors, count;
    then the constraints."""
    spec = claim.obj["spec"]["devices"]
    lines = []
    for request in spec.get("requests") or []:
        entries = [(str(request["name"]), request["exactly"])] if request.get("exactly") else []
        entries += [
            (f"{request['name']}/{sub.get('name')}", sub)
            for sub in request.get("firstAvailable") or []
        ]
        for name, entry in entries:
            class_name = str(entry.get("deviceClassName"))
            device_class = classes.get(class_name) or {}
            found = [
                *((device_class.get("spec") or {}).get("selectors") or []),
                *(entry.get("selectors") or []),
            ]
            selectors = [
                s["cel"]["expression"] for s in found if (s.get("cel") or {}).get("expression")
            ]
            text = f"request {name}: class {class_name}"
            mode = entry.get("allocationMode", "ExactCount")
            text += ", all matching" if mode == "All" else f", count {entry.get('count', 1)}"
            asked = (entry.get("capacity") or {}).get("requests")
            if asked:
                text += ", capacity " + ", ".join(f"{k} {v}" for k, v in sorted(asked.items()))
            if selectors:
                text += ", selectors " + " && ".join(f"({s})" for s in selectors)
            lines.append(text)
    for constraint in spec.get("constraints") or []:
        over = ", ".join(constraint.get("requests") or []) or "all requests"
        for kind in ("matchAttribute", "distinctAttribute"):
            if constraint.get(kind):
                lines.append(f"constraint {kind} {constraint[kind]} over {over}")
    return lines


#: Pods named on one line of a reason several pods share; the rest are counted.
_NAMED = 5


def unplaced_lines(result: V1Result, *, wide: bool) -> list[str]:
    """Each reason pods were not placed for, once, with the pods it holds for (the pods of a
    shared claim share its error); the wide table adds what their claims ask for."""
    by_reason: dict[str, list[v1manifests.V1Pod]] = {}
    for pod in result.workload.pods:
        reasons = result.outcome.refused.get(pod.key)
        if reasons:
            by_reason.setdefault("; ".join(reasons), []).append(pod)
    lines: list[str] = []
    for reason, pods in by_reason.items():
        names = [p.key for p in pods[:_NAMED]]
        more = f" and {len(pods) - _NAMED} more" if len(pods) > _NAMED else ""
        lines.append(f"{', '.join(names)}{more} not placed: {reason}")
        if wide:
            claims = {c.key: c for p in pods for c in p.pending()}
            for claim in claims.values():
                lines.extend(
                    f"  {claim.key} {line}" for line in _asks(claim, result.workload.classes)
                )
    return ["", *lines] if lines else []


# --- solver status -------------------------------------------------------------------------------


def solver_text(
    solutions: Sequence[Solution], *, refused: bool = False, timing: bool = True
) -> str:
    """The status and what it proves, and the time taken unless `timing` is False (the claims'
    annotation leaves it out, so two runs diff on what differs).

    `allocate` solves in rounds (round r: the pods still unplaced with their r-th choice of
    devices, over what earlier rounds left), so one round's status speaks for the whole set;
    with more, the weakest round's is given with each round's, and that the set over all rounds
    is not proven optimal."""
    if not solutions:
        return "not run (" + ("no pod reached it" if refused else "no claim to allocate") + ")"
    if len(solutions) == 1 and solutions[0].first_pass:
        found = solutions[0]
        return (
            f"{found.status.value} (the first feasible answer: each pod in turn on the best "
            f"node left, not searched further, the time limit ran out); {found.bound_text()}"
        ) + (f"; {found.wall_time_s * 1000:.0f} ms" if timing else "")
    if len(solutions) == 1:
        found = solutions[0]
        return (
            f"{found.status.value} ({found.status.meaning}, each pod with its first choice of "
            f"devices); {found.bound_text()}"
        ) + (f"; {found.wall_time_s * 1000:.0f} ms" if timing else "")
    weakest = min((s.status for s in solutions), key=_STRENGTH.index)
    rounds = ", ".join(
        f"{i + 1}: {s.status.value}" + (" (first feasible, not searched)" if s.first_pass else "")
        for i, s in enumerate(solutions)
    )
    total = sum(s.wall_time_s for s in solutions) * 1000
    return (
        f"{weakest.value} in {len(solutions)} rounds ({rounds}); each round {weakest.meaning} "
        f"for the pods it placed, given the rounds before it; the set is not proven optimal "
        f"over every pod's alternatives"
    ) + (f"; {total:.0f} ms" if timing else "")


# --- the ledger ----------------------------------------------------------------------------------


def ledgers(result: V1Result) -> dict[str, dict[str, AllocatedDevices]]:
    """node -> its NAS allocatedClaims after the run: the input's (allocated claims included)
    and the new allocations."""
    out = {
        node.state.name: nasinventory.entries_of(node.state.ledger.allocated)
        for node in v1run.node_inputs(result.cluster, result.workload)
    }
    for placed in result.outcome.allocations.values():
        out.setdefault(placed.node, {}).update(placed.ledger)
    return out


def node_states(result: V1Result) -> list[NodeAllocationState]:
    """Each node's NodeAllocationState with the ledger after the run."""
    found = ledgers(result)
    out = []
    for nas in result.cluster.nas:
        claims = found.get(nas.metadata.name, dict(nas.spec.allocatedClaims))
        spec = nas.spec.model_copy(update={"allocatedClaims": claims})
        out.append(nas.model_copy(update={"spec": spec}))
    return out


# --- renderers ------------------------------------------------------------------------------------


class DeviceUse(NamedTuple):
    gpus_total: int
    gpus_used: int
    mig_slices_total: int
    mig_slices_used: int


def device_use(states: Sequence[NodeAllocationState]) -> DeviceUse:
    """The summary's device counts over the nodes' ledgers after the run (both what-ifs): the
    GPUs, and those an entry uses (a MIG device's parent counts); the MIG slices of MIG-enabled
    GPUs, and those MIG devices take."""
    used: set[str] = set()
    slices_used = 0
    for nas in states:
        for entry in nas.spec.allocatedClaims.values():
            if entry.gpu is not None:
                used.update(d.uuid for d in entry.gpu.devices)
            if entry.mig is not None:
                used.update(d.parentUUID for d in entry.mig.devices)
                slices_used += sum(d.placement.size for d in entry.mig.devices)
    gpus = [(g, n) for n in states for g in n.spec.gpus()]
    return DeviceUse(
        gpus_total=len(gpus),
        gpus_used=sum(1 for g, _ in gpus if g.uuid in used),
        mig_slices_total=sum(mig_slices(g, n) for g, n in gpus if g.migEnabled),
        mig_slices_used=slices_used,
    )


def _summary(result: V1Result, states: Sequence[NodeAllocationState]) -> Summary:
    use = device_use(states)
    solutions = result.outcome.solutions
    weakest = (
        min((s.status for s in solutions), key=_STRENGTH.index) if solutions else Status.UNKNOWN
    )
    existing = sum(1 for c in result.workload.claims.values() if v1manifests.allocated(c.obj))
    return Summary(
        nodes=len(states),
        nodes_not_ready=sum(1 for s in result.cluster.states if not s.ready),
        gpus_total=use.gpus_total,
        gpus_used=use.gpus_used,
        mig_slices_total=use.mig_slices_total,
        mig_slices_used=use.mig_slices_used,
        pods_placed=len(result.workload.pods) - len(result.outcome.refused),
        pods_unplaced=len(result.outcome.refused),
        allocations_new=len(result.outcome.allocations),
        allocations_existing=existing,
        status=weakest.value,
        objective=sum(s.objective for s in solutions),
        best_bound=solutions[0].best_bound if len(solutions) == 1 else None,
        gap=solutions[0].gap if len(solutions) == 1 else None,
        wall_time_s=sum(s.wall_time_s for s in solutions),
        mode="v1",
        meaning=weakest.meaning,
    )


def render_table(result: V1Result, *, wide: bool = False) -> str:
    header = ["POD", "CLAIM", "NODE", "DEVICES"]
    if wide:
        header = ["POD", "CLAIM", "RESOURCECLAIM", "NODE", "DEVICES", "SHARING"]
    lines = table.columns([header, *(_cells(r, wide=wide) for r in rows(result))])
    lines.extend(unplaced_lines(result, wide=wide))
    lines.extend(v1gangs.lines(result))
    priorities = {p.key: p.priority for p in result.workload.pods}
    lines.extend(v1preemption.lines(result.preemptions, priorities))
    summary = _summary(result, node_states(result))
    lines.append("")
    lines.extend(table.summary_lines(summary)[:2])
    lines.append(
        f"solver: {solver_text(result.outcome.solutions, refused=bool(result.outcome.refused))}"
    )
    if result.solver_error:
        lines.append(result.solver_error)
    lines.extend(f"note: {n.what} ({n.where}): {n.reason}" for n in result.workload.notes)
    lines.extend(table.ignored_lines(result.workload.ignored, wide=wide))
    lines.extend(table.ignored_lines(result.cluster.ignored, wide=wide))
    return "\n".join(lines) + "\n"


def claims(result: V1Result) -> list[Obj]:
    """Every claim a pod uses, as it would be after the run."""
    out = []
    reasons = {
        claim.key: "; ".join(result.outcome.refused[pod.key])
        for pod in result.workload.pods
        if pod.key in result.outcome.refused
        for _, claim in pod.claims
    }
    solver = solver_text(
        result.outcome.solutions, refused=bool(result.outcome.refused), timing=False
    )
    for claim in result.workload.claims.values():
        obj = json.loads(json.dumps(claim.obj))
        annotations = obj["metadata"].setdefault("annotations", {})
        annotations[SOLVER_ANNOTATION] = solver
        uid = str(obj["metadata"]["uid"])
        if uid in result.outcome.allocations:
            obj.setdefault("status", {})["allocation"] = result.outcome.allocations[uid].allocation
        elif claim.key in reasons and not v1manifests.allocated(obj):
            annotations[REASON_ANNOTATION] = reasons[claim.key]
        out.append(obj)
    return out


def as_list(result: V1Result, *, claims_only: bool = False) -> Obj:
    """The NodeAllocationStates (unless `claims_only`), then the claims, as one `v1` List."""
    items: list[Obj] = [] if claims_only else [nas.dump() for nas in node_states(result)]
    items.extend(claims(result))
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}


@dataclass(frozen=True)
class _Page:
    """What the report template reads, for a v1 run."""

    rows: tuple[Row, ...]
    nodes: tuple[NodeView, ...]
    colours: dict[str, str]
    ignored: tuple[Any, ...]
    claims: tuple[v1manifests.V1Claim, ...]
    solver_error: str | None
    summary: Summary

    @property
    def workload(self) -> _Page:  # the template counts `report.workload.claims`
        return self


def render_html(result: V1Result) -> str:
    """The classic report page: GPU bars from the ledger (MIG placements, shares), the rows."""
    states = node_states(result)
    keys = list(result.workload.claims)
    colours = dict(zip(keys, palette(len(keys)), strict=True))
    names = {}
    for placed in result.outcome.allocations.values():
        for entry in placed.ledger:
            names[entry] = f"{placed.namespace}/{placed.name}"
    existing = {
        key
        for node in v1run.node_inputs(result.cluster, result.workload)
        for key in node.state.ledger.allocated
    }
    # report's legend and node view: the same bars as the classic page, from the same ledger.
    legend = Legend(names, colours, _users(result), existing)
    refused = result.outcome.refused
    page = _Page(
        # The page has no "below": an unplaced row carries its pod's reason.
        rows=tuple(
            dataclasses.replace(row, reason="; ".join(refused[row.pod]))
            if not row.placed and row.pod in refused
            else row
            for row in rows(result)
        ),
        nodes=tuple(node_view(nas, legend) for nas in states),
        colours=colours,
        ignored=(*result.cluster.ignored, *result.workload.ignored),
        claims=tuple(result.workload.claims.values()),
        solver_error=result.solver_error,
        summary=_summary(result, states),
    )
    return html.render_page(
        page,
        title="drasat what-if (v1)",
        solver_note=solver_text(result.outcome.solutions, refused=bool(result.outcome.refused)),
    )


def render(result: V1Result, output: str, *, claims_only: bool = False) -> str:
    if output in ("table", "wide"):
        return render_table(result, wide=output == "wide")
    if output == "html":
        return render_html(result)
    listing = as_list(result, claims_only=claims_only)
    if output == "json":
        return json.dumps(listing, indent=2) + "\n"
    return yaml.safe_dump(listing, sort_keys=False, width=100)
