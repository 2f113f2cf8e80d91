"""Random ResourceClaims for drasat's classes, as users write them: `exactly` and `firstAvailable`
requests with selectors over attributes and capacities, counts, `All`, capacity requests (shares),
tolerations, and `matchAttribute` / `distinctAttribute` constraints. `nvidia_claims` writes the
same shapes for NVIDIA's classes (`gpu.nvidia.com`, `mig.nvidia.com`) over the attributes and
capacities NVIDIA's driver publishes (no shares: its GPUs publish no consumable capacity).

What drasat refuses on purpose (docs/CONTROLLER.md) is not generated: `adminAccess`. Neither,
by default, are the known differences listed in docs/CONTROLLER.md, "Differences from
kube-scheduler's allocator" (each has an exact strict-xfail test in test_oracle_allocate.py):
`All` over MIG devices, selectors that fail on some device (`failing=True` adds them), and
tolerations in the validity test (`tolerations=False`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from drasat.api.devicemodel import classes

Obj = dict[str, Any]

GPU, MIG = classes.GPU_CLASS, classes.MIG_CLASS
D = 'device.attributes["gpu.drasat.io"]'
C = 'device.capacity["gpu.drasat.io"]'

GPU_SELECTORS = (
    f'{D}.productName == "Tesla T4"',
    f'{D}.productName.startsWith("NVIDIA")',
    f'{D}.architecture == "Ampere"',
    f'{C}.memory.compareTo(quantity("40Gi")) >= 0',
    f'{C}.memory.isLessThan(quantity("20Gi"))',
    f"{D}.migEnabled == false",
    f"{D}.migEnabled",
    f"has({D}.numaNode) && {D}.numaNode == 0",
    f"has({D}.numaNode) && {D}.numaNode == 1",
    f"{D}.index == 0",
    f'{D}.cudaComputeCapability.isGreaterThan(semver("8.0.0"))',
    'has(device.attributes["resource.kubernetes.io"].pciBusID) && '
    'device.attributes["resource.kubernetes.io"].pciBusID.startsWith("0000:1")',
    "device.allowMultipleAllocations",
)
MIG_SELECTORS = (
    f'{D}.profile == "1g.10gb"',
    f'{D}.profile == "3g.40gb"',
    f'{D}.profile.startsWith("1g")',
    f"{D}.placementStart == 0",
    f"{D}.placementStart >= 4",
    f'{D}.productName == "NVIDIA A100-SXM4-80GB"',
    f'{C}.memory.compareTo(quantity("20Gi")) >= 0',
    f"{D}.parentIndex == 0",
    f"has({D}.numaNode) && {D}.numaNode == 0",
)
#: Selectors that fail on a device without the attribute (kube-scheduler fails the claim).
FAILING = (
    f"{D}.numaNode == 0",
    f"{D}.numaNode == 1",
    'device.attributes["resource.kubernetes.io"].pciBusID.startsWith("0000:1")',
)
ATTRIBUTES = ("numaNode", "productName", "parentUUID", "uuid", "parentIndex", "profile", "type")
TOLERATIONS = (
    [{"operator": "Exists"}],
    [{"key": "gpu.drasat.io/xid", "operator": "Exists", "effect": "NoSchedule"}],
    [{"key": "gpu.drasat.io/gpu-lost", "operator": "Exists"}],
)

NVIDIA_GPU, NVIDIA_MIG = "gpu.nvidia.com", "mig.nvidia.com"
NV = 'device.attributes["gpu.nvidia.com"]'
NVC = 'device.capacity["gpu.nvidia.com"]'
NVIDIA_GPU_SELECTORS = (
    f'{NV}.productName == "Tesla T4"',
    f'{NV}.productName.startsWith("NVIDIA A100")',
    f'{NV}.architecture == "Ampere"',
    f'{NVC}.memory.compareTo(quantity("40Gi")) >= 0',
    f'{NVC}.memory.isLessThan(quantity("20Gi"))',
    f'{NV}.cudaComputeCapability.isGreaterThan(semver("8.0.0"))',
    'device.attributes["resource.kubernetes.io"].pciBusID.startsWith("0000:3")',
)
NVIDIA_MIG_SELECTORS = (
    f'{NV}.profile == "1g.5gb"',
    f'{NV}.profile == "1g.10gb"',
    f'{NV}.profile == "2g.10gb"',
    f'{NV}.profile == "3g.20gb"',
    f'{NV}.profile.startsWith("1g")',
    f'{NVC}.memory.compareTo(quantity("10Gi")) >= 0',
    f'{NV}.productName == "NVIDIA H100 80GB HBM3"',
)
NVIDIA_ATTRIBUTES = (
    "gpu.nvidia.com/parentUUID",
    "gpu.nvidia.com/productName",
    "gpu.nvidia.com/profile",
    "gpu.nvidia.com/uuid",
    "resource.kubernetes.io/pcieRoot",
)
NVIDIA_TOLERATIONS = ([{"key": "gpu.nvidia.com/xid", "operator": "Exists"}],)


@dataclass(frozen=True)
class _Vocabulary:
    """What claims of one driver's classes say."""

    gpu: str
    mig: str
    gpu_selectors: tuple[str, ...]
    mig_selectors: tuple[str, ...]
    failing: tuple[str, ...]
    attributes: tuple[str, ...]
    tolerations: tuple[list[Obj], ...]
    shares: bool


DRASAT = _Vocabulary(
    GPU, MIG, GPU_SELECTORS, MIG_SELECTORS, FAILING,
    tuple(f"gpu.drasat.io/{a}" for a in ATTRIBUTES), TOLERATIONS, shares=True,
)  # fmt: skip
NVIDIA = _Vocabulary(
    NVIDIA_GPU, NVIDIA_MIG, NVIDIA_GPU_SELECTORS, NVIDIA_MIG_SELECTORS, (), NVIDIA_ATTRIBUTES,
    NVIDIA_TOLERATIONS, shares=False,
)  # fmt: skip


@st.composite
def _spec(
    draw: st.DrawFn,
    name: str | None = None,
    *,
    failing: bool = False,
    tolerations: bool = True,
    words: _Vocabulary = DRASAT,
) -> Obj:
    device_class = draw(st.sampled_from([words.gpu, words.gpu, words.mig]))
    spec: Obj = {"deviceClassName": device_class}
    if name is not None:
        spec["name"] = name
    selectors_of = words.gpu_selectors if device_class == words.gpu else words.mig_selectors
    pool = selectors_of + (words.failing if failing else ())
    selectors = draw(st.lists(st.sampled_from(pool), max_size=2, unique=True))
    if selectors:
        spec["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    # As the API server stores a claim: the mode and count defaulted.
    if device_class == words.gpu and draw(st.integers(0, 3)) == 0:
        spec["allocationMode"] = "All"
    else:
        spec["allocationMode"] = "ExactCount"
        spec["count"] = draw(st.sampled_from([1, 1, 2, 3]))
    if words.shares and device_class == words.gpu and draw(st.integers(0, 3)) == 0:
        requests: Obj = {}
        memory = draw(st.sampled_from([None, "4Gi", "8Gi", "16Gi"]))
        compute = draw(st.sampled_from([None, "25", "50", "100"]))
        if memory:
            requests["memory"] = memory
        if compute or not memory:
            requests["compute"] = compute or "50"
        spec["capacity"] = {"requests": requests}
    if tolerations and draw(st.integers(0, 4)) == 0:
        spec["tolerations"] = draw(st.sampled_from(words.tolerations))
    return spec


@st.composite
def claims(
    draw: st.DrawFn,
    name: str = "c",
    *,
    failing: bool = False,
    tolerations: bool = True,
    words: _Vocabulary = DRASAT,
) -> Obj:
    options = {"failing": failing, "tolerations": tolerations, "words": words}
    names = ["a", "b"][: draw(st.integers(1, 2))]
    requests = []
    for request in names:
        if draw(st.integers(0, 3)) == 0:
            subs = [draw(_spec(f"s{i}", **options)) for i in range(draw(st.integers(1, 2)))]
            requests.append({"name": request, "firstAvailable": subs})
        else:
            requests.append({"name": request, "exactly": draw(_spec(**options))})
    devices: Obj = {"requests": requests}
    constraints = []
    for _ in range(draw(st.integers(0, 1))):
        kind = draw(st.sampled_from(["matchAttribute", "matchAttribute", "distinctAttribute"]))
        constraint: Obj = {kind: draw(st.sampled_from(words.attributes))}
        if len(names) > 1 and draw(st.booleans()):
            constraint["requests"] = list(names)
        constraints.append(constraint)
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": devices},
    }


def nvidia_claims(name: str = "c", *, tolerations: bool = True) -> st.SearchStrategy[Obj]:
    """`claims` for NVIDIA's classes, over what NVIDIA's driver publishes."""
    return claims(name, tolerations=tolerations, words=NVIDIA)


@st.composite
def simple_claims(draw: st.DrawFn, name: str = "c", *, words: _Vocabulary = DRASAT) -> Obj:
    """One request of one device (a whole GPU, a share or a MIG device) with at most one
    selector: what most pods ask, and what fits often enough that sequences fill and empty
    nodes (`claims` asks more than a small node has as often as not)."""
    device_class = draw(st.sampled_from([words.gpu, words.gpu, words.mig]))
    spec: Obj = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1}
    selectors = words.gpu_selectors if device_class == words.gpu else words.mig_selectors
    if draw(st.booleans()):
        spec["selectors"] = [{"cel": {"expression": draw(st.sampled_from(selectors))}}]
    if words.shares and device_class == words.gpu and draw(st.booleans()):
        memory = draw(st.sampled_from(["2Gi", "4Gi", "8Gi"]))
        spec["capacity"] = {"requests": {"memory": memory, "compute": "25"}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "a", "exactly": spec}]}},
    }
