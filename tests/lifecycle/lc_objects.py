"""The objects the lifecycle model makes: the kinds of claim (`KINDS`: the claim's
`spec.devices` and what it asks of a node, in `lc_truth`'s terms), ResourceClaimTemplates, claims
and pods as users (and the chart's admission, which gates every pod with claims) write them."""

from __future__ import annotations

from typing import Any

import lc_truth as truth
from lc_world import A100_PROFILES, GRACE_ROUNDS, NAMESPACE, GiB

from drasat.api.devicemodel import classes
from drasat.api.groups import DRIVER_NAME, SCHEDULING_GATE

Obj = dict[str, Any]


def _request(device_class: str, **extra: Any) -> Obj:
    return {"deviceClassName": device_class, **extra}


def _mig(profile: str) -> Obj:
    cel = f'device.attributes["{DRIVER_NAME}"].profile == "{profile}"'
    return _request(classes.MIG_CLASS, selectors=[{"cel": {"expression": cel}}])


def _mig_ask(profile: str) -> truth.Ask:
    _, size, starts, _ = A100_PROFILES[profile]
    return truth.Ask(mig=(size, starts))


_TIME_SLICED = {
    "opaque": {
        "driver": DRIVER_NAME,
        "parameters": {
            "apiVersion": f"{DRIVER_NAME}/v1alpha1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"timeSlice": "Long"}},
        },
    }
}

#: The kinds of claim the model makes: (the claim's spec.devices, what it asks of a node).
KINDS: dict[str, tuple[Obj, truth.Ask | None]] = {
    "gpu": ({"requests": [{"name": "gpu", "exactly": _request(classes.GPU_CLASS)}]},
            truth.Ask(whole=1)),
    "gpu2": ({"requests": [{"name": "gpu", "exactly": _request(
        classes.GPU_CLASS, allocationMode="ExactCount", count=2)}]}, truth.Ask(whole=2)),
    "time-sliced": ({"requests": [{"name": "gpu", "exactly": _request(classes.GPU_CLASS)}],
                     "config": [_TIME_SLICED]}, truth.Ask(whole=1)),
    "share-4g": ({"requests": [{"name": "gpu", "exactly": _request(
        classes.GPU_CLASS, capacity={"requests": {"memory": "4Gi", "compute": "25"}})}]},
        truth.Ask(share=(4 * GiB, 25))),
    "share-10g": ({"requests": [{"name": "gpu", "exactly": _request(
        classes.GPU_CLASS, capacity={"requests": {"memory": "10Gi", "compute": "40"}})}]},
        truth.Ask(share=(10 * GiB, 40))),
    "mig-1g": ({"requests": [{"name": "gpu", "exactly": _mig("1g.5gb")}]}, _mig_ask("1g.5gb")),
    "mig-2g": ({"requests": [{"name": "gpu", "exactly": _mig("2g.10gb")}]}, _mig_ask("2g.10gb")),
    "mig-3g": ({"requests": [{"name": "gpu", "exactly": _mig("3g.20gb")}]}, _mig_ask("3g.20gb")),
    "optional": ({"requests": [{"name": "gpu", "firstAvailable": [
        {"name": "gpu", "deviceClassName": classes.GPU_CLASS},
        {"name": "cpu", "deviceClassName": classes.FALLBACK_CLASS}]}]}, truth.Ask(anywhere=True)),
    "cpu": ({"requests": [{"name": "gpu", "exactly": _request(classes.FALLBACK_CLASS)}]},
            truth.Ask(anywhere=True)),
    # kube-scheduler's (it tolerates drasat's allocator taint): the second allocator's.
    "tolerates-all": ({"requests": [{"name": "gpu", "exactly": _request(
        classes.GPU_CLASS, tolerations=[{"operator": "Exists"}])}]}, None),
}  # fmt: skip
GANG_KINDS = ("gpu", "mig-1g", "share-4g")
POD_KINDS = tuple(k for k in KINDS if k != "tolerates-all")
PRIORITIES = (0, 0, 100, 1000)
SHARED_KINDS = ("gpu", "time-sliced", "share-4g", "optional")


def claim(name: str, kind: str) -> Obj:
    return {"metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"devices": KINDS[kind][0]}}


def template(name: str, kind: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"spec": {"devices": KINDS[kind][0]}},
    }


def pod(
    name: str,
    *,
    claim: str | None = None,
    template: str | None = None,
    priority: int = 0,
    labels: dict[str, str] | None = None,
) -> Obj:
    """A pod with one claim (by name, or from a template), drasat's scheduling gate on it."""
    source = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
    spec: Obj = {
        "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", **source}],
        "schedulingGates": [{"name": SCHEDULING_GATE}],
        # Deleted or evicted on a node, it holds its devices this long (`lc_world.GRACE_ROUNDS`).
        "terminationGracePeriodSeconds": GRACE_ROUNDS,
    }
    if priority:
        spec["priority"] = priority
    meta: Obj = {"name": name, "namespace": NAMESPACE}
    if labels:
        meta["labels"] = labels
    return {"metadata": meta, "spec": spec}
