"""Random ResourceClaims for drasat's classes, as users write them: `exactly` and `firstAvailable`
requests with selectors over attributes and capacities, counts, `All`, capacity requests (shares),
tolerations, and `matchAttribute` / `distinctAttribute` constraints.

What drasat refuses on purpose (docs/CONTROLLER.md) is not generated: `adminAccess`. Neither,
by default, are the known differences listed in docs/CONTROLLER.md, "Differences from
kube-scheduler's allocator" (each has an exact strict-xfail test in test_oracle_allocate.py):
`All` over MIG devices, selectors that fail on some device (`failing=True` adds them), and
tolerations in the validity test (`tolerations=False`)."""

from __future__ import annotations

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


@st.composite
def _spec(
    draw: st.DrawFn, name: str | None = None, *, failing: bool = False, tolerations: bool = True
) -> Obj:
    device_class = draw(st.sampled_from([GPU, GPU, MIG]))
    spec: Obj = {"deviceClassName": device_class}
    if name is not None:
        spec["name"] = name
    pool = (GPU_SELECTORS if device_class == GPU else MIG_SELECTORS) + (FAILING if failing else ())
    selectors = draw(st.lists(st.sampled_from(pool), max_size=2, unique=True))
    if selectors:
        spec["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    # As the API server stores a claim: the mode and count defaulted.
    if device_class == GPU and draw(st.integers(0, 3)) == 0:
        spec["allocationMode"] = "All"
    else:
        spec["allocationMode"] = "ExactCount"
        spec["count"] = draw(st.sampled_from([1, 1, 2, 3]))
    if device_class == GPU and draw(st.integers(0, 3)) == 0:
        requests: Obj = {}
        memory = draw(st.sampled_from([None, "4Gi", "8Gi", "16Gi"]))
        compute = draw(st.sampled_from([None, "25", "50", "100"]))
        if memory:
            requests["memory"] = memory
        if compute or not memory:
            requests["compute"] = compute or "50"
        spec["capacity"] = {"requests": requests}
    if tolerations and draw(st.integers(0, 4)) == 0:
        spec["tolerations"] = draw(st.sampled_from(TOLERATIONS))
    return spec


@st.composite
def claims(
    draw: st.DrawFn, name: str = "c", *, failing: bool = False, tolerations: bool = True
) -> Obj:
    options = {"failing": failing, "tolerations": tolerations}
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
        constraint: Obj = {kind: f"gpu.drasat.io/{draw(st.sampled_from(ATTRIBUTES))}"}
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
