"""Which known difference from kube-scheduler's allocator a claim runs into, if any
(docs/CONTROLLER.md, "Differences from kube-scheduler's allocator"; each has an exact strict-xfail
test in test_oracle_allocate.py): the differential tests keep these claims out of their random
cases, for drasat's classes and NVIDIA's alike."""

from __future__ import annotations

from typing import Any

import claimgen

Obj = dict[str, Any]

GPU_CLASSES = {claimgen.GPU, claimgen.NVIDIA_GPU}
MIG_CLASSES = {claimgen.MIG, claimgen.NVIDIA_MIG}


def specs(claim: Obj) -> list[Obj]:
    """Every `exactly` request and `firstAvailable` entry of the claim."""
    out = []
    for request in claim["spec"]["devices"]["requests"]:
        out.extend(request.get("firstAvailable") or [request.get("exactly") or {}])
    return out


def _many(spec: Obj) -> bool:
    return spec.get("allocationMode") == "All" or spec.get("count", 1) > 1


def difference(claim: Obj, tainted: bool, held: bool = False) -> str | None:
    """The known difference the claim runs into (None: none), where `tainted` says whether a
    device it may get carries a taint (an unhealthy GPU) and `held` whether other claims may
    hold devices when it is allocated."""
    found = specs(claim)
    if held and _all_entry_constrained(claim):
        # drasat fails the claim where a constraint refuses a device of the All entry; upstream
        # moves on to the next entry when a held device comes first in the set.
        return "all-entry-behind-held"
    kinds = {s["deviceClassName"] for s in found}
    if kinds & GPU_CLASSES and kinds & MIG_CLASSES:
        return "mig-and-whole"
    limits = {compute_limit(s) for s in found if s["deviceClassName"] in GPU_CLASSES}
    if len(limits) > 1:
        # Whole GPUs beside shares, or shares of two compute limits, in one claim: the node
        # plugin cannot prepare them, drasat refuses them (intended, docs/CONTROLLER.md).
        return "plugin-shapes"
    if any("capacity" in s and _many(s) for s in found):
        return "several-shares"
    if tainted and any(s.get("tolerations") for s in found):
        return "tolerated-taint"
    first_available_mig = any(
        any(e["deviceClassName"] in MIG_CLASSES for e in r.get("firstAvailable") or [])
        for r in claim["spec"]["devices"]["requests"]
    )
    if first_available_mig and sum(s["deviceClassName"] in MIG_CLASSES for s in found) > 2:
        # MIG options multiply by profile: past MAX_VARIANTS combinations drasat stops trying.
        return "variants-cap"
    return None


def _all_entry_constrained(claim: Obj) -> bool:
    """Whether a `firstAvailable` entry of mode All, before another, has a claim constraint
    covering it."""
    constraints = claim["spec"]["devices"].get("constraints") or []
    for request in claim["spec"]["devices"]["requests"]:
        entries = request.get("firstAvailable") or []
        for entry in entries[:-1]:
            if entry.get("allocationMode") != "All":
                continue
            names = {request["name"], f"{request['name']}/{entry['name']}"}
            if any(not c.get("requests") or names & set(c["requests"]) for c in constraints):
                return True
    return False


def compute_limit(spec: Obj) -> str | None:
    """A GPU request's compute limit as drasat's node plugin sees it (None: a whole GPU)."""
    requests = (spec.get("capacity") or {}).get("requests")
    if requests is None:
        return None
    return str(requests.get("compute", "0"))  # the published default: no limit


#: A selector that asks for a GPU in MIG mode (drasat then gives one whole).
ASKS_MIG_MODE = 'device.attributes["gpu.drasat.io"].migEnabled'


def mig_mode_tolerated(claim: Obj, taint: Obj) -> Obj:
    """The claim with each request (or `firstAvailable` entry) whose selectors ask for MIG mode
    tolerating `taint` (the one put on whole GPUs in MIG mode): drasat gives such a GPU whole
    only to a request that asks for MIG mode (docs/CONTROLLER.md)."""
    requests = []
    for request in claim["spec"]["devices"]["requests"]:
        request = dict(request)
        if "exactly" in request:
            request["exactly"] = _tolerating(request["exactly"], taint)
        else:
            request["firstAvailable"] = [_tolerating(e, taint) for e in request["firstAvailable"]]
        requests.append(request)
    devices = {**claim["spec"]["devices"], "requests": requests}
    return {**claim, "spec": {**claim["spec"], "devices": devices}}


def _tolerating(spec: Obj, taint: Obj) -> Obj:
    expressions = [s.get("cel", {}).get("expression") for s in spec.get("selectors") or []]
    if ASKS_MIG_MODE not in expressions:
        return spec
    toleration = {"key": taint["key"], "operator": "Exists"}
    return {**spec, "tolerations": [*(spec.get("tolerations") or []), toleration]}
