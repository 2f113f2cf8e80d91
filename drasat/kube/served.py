"""What this API server serves and keeps, asked once at start-up, and the one log line saying
what drasat turned off because of it.

Kubernetes 1.34 - 1.36 with their default feature gates lack some of what drasat uses, in two
ways that need two different questions:

- **A kind** (DeviceTaintRule; MutatingAdmissionPolicy v1; the Workload API's PodGroup, whose
  gangs drasat reads): discovery lists it, or not.
- **A field that a feature gate drops** (`DRAConsumableCapacity`: a device's
  `allowMultipleAllocations`, a request's `capacity.requests`; `DRAPartitionableDevices`: a
  slice's `sharedCounters`, a device's `consumesCounters`): discovery and the OpenAPI schema show
  the field either way. The server drops it when it stores the object, so a server-side dry-run
  create (`dryRun=All`: defaulting, validation and admission run, nothing is stored) of a small
  object that uses it tells: its answer is the object as the server would store it.

A question the server cannot answer (no permission, the namespace not there yet, the server
down) leaves the feature on, and the line says so: what the server then drops, it drops.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from drasat.api.groups import DRIVER_NAME
from drasat.kube import errors
from drasat.kube import resources as r

Obj = dict[str, Any]

#: The versions of resource.k8s.io that serve DeviceTaintRule, newest first: v1 (1.37), v1beta2
#: (1.36, off by default), v1alpha3 (1.34 - 1.36, off by default).
TAINT_RULE_VERSIONS = ("v1", "v1beta2", "v1alpha3")
#: The capacity a probe claim asks for (any quantity does).
_PROBE_REQUEST = {"memory": "1Mi"}


@runtime_checkable
class Prober(Protocol):
    """What the questions need from a client (drasat.kube.client.KubeClient)."""

    def create_dry_run(
        self, resource: r.Resource, body: Obj, *, namespace: str | None = None
    ) -> Obj: ...

    def served_kinds(self, group_version: str) -> frozenset[str]: ...


@dataclass(frozen=True)
class Finding:
    """One feature drasat uses: on or off on this server, and how that was found."""

    feature: str
    on: bool
    why: str


def device_taint_rules(api: Prober) -> Finding:
    """DeviceTaintRule, in the newest version served (discovery)."""
    feature = "the DeviceTaintRule"
    for version in TAINT_RULE_VERSIONS:
        kinds = _kinds(api, f"{r.DRA_GROUP}/{version}")
        if isinstance(kinds, errors.KubeError):
            return Finding(feature, True, f"could not tell: discovery failed ({kinds}); kept on")
        if "DeviceTaintRule" in kinds:
            return Finding(feature, True, f"served as {r.DRA_GROUP}/{version}")
    return Finding(
        feature,
        False,
        "discovery lists no DeviceTaintRule in resource.k8s.io v1, v1beta2 or v1alpha3 "
        "(gate DRADeviceTaintRules, on by default from 1.37)",
    )


def mutating_admission_policies(api: Prober) -> Finding:
    """MutatingAdmissionPolicy v1 (discovery): the chart's admission path where served."""
    feature = "MutatingAdmissionPolicy v1"
    kinds = _kinds(api, "admissionregistration.k8s.io/v1")
    if isinstance(kinds, errors.KubeError):
        return Finding(feature, True, f"could not tell: discovery failed ({kinds})")
    if "MutatingAdmissionPolicy" in kinds:
        return Finding(feature, True, "served")
    return Finding(
        feature,
        False,
        "discovery lists none in admissionregistration.k8s.io/v1 (GA from 1.36): the chart "
        "(controller.admission.mode=auto) gates pods with the controller's webhook instead",
    )


def pod_groups(api: Prober) -> Finding:
    """The Workload API's PodGroup (discovery of `scheduling.k8s.io/v1beta1`): gangs from the
    PodGroups pods name where served, from labels only otherwise. Unknown: labels only (a
    watch of a kind not served would fail for ever)."""
    feature = "gangs from PodGroups"
    version = f"{r.POD_GROUPS.group}/{r.POD_GROUPS.version}"
    kinds = _kinds(api, version)
    if isinstance(kinds, errors.KubeError):
        return Finding(feature, False, f"could not tell: discovery failed ({kinds}); gangs "
                       "come from the gpu.drasat.io/gang labels only")  # fmt: skip
    if r.POD_GROUPS.kind in kinds:
        return Finding(feature, True, f"served as {version}")
    return Finding(
        feature,
        False,
        f"discovery lists no PodGroup in {version} (the Workload API: gate GenericWorkload and "
        f"--runtime-config={version}=true, Kubernetes 1.37): gangs come from the "
        "gpu.drasat.io/gang labels only",
    )


def claim_shares(api: Prober, namespace: str) -> Finding:
    """Shares of a GPU in claims (DRAConsumableCapacity): a server-side dry-run of a
    ResourceClaimTemplate in `namespace` whose request asks for capacity."""
    template = {
        "apiVersion": r.RESOURCE_CLAIM_TEMPLATES_V1.api_version,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "drasat-probe-consumable-capacity", "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [_share_request()]}}},
    }

    def kept(answer: Obj) -> bool:
        requests = answer.get("spec", {}).get("spec", {}).get("devices", {}).get("requests")
        return bool(((requests or [{}])[0].get("exactly") or {}).get("capacity"))

    return _dry_run(
        api, r.RESOURCE_CLAIM_TEMPLATES_V1, template, namespace, kept,
        feature="shares", field="a claim's capacity.requests", gate="DRAConsumableCapacity",
        what=f"ResourceClaimTemplate in {namespace}",
    )  # fmt: skip


def slice_shares(api: Prober, node: str) -> Finding:
    """Shareable devices in ResourceSlices (DRAConsumableCapacity): a server-side dry-run of a
    slice of `node` with one device that allows multiple allocations."""
    device = {"name": "probe", "allowMultipleAllocations": True}
    body = _probe_slice(node, "consumable-capacity", {"devices": [device]})

    def kept(answer: Obj) -> bool:
        devices = answer.get("spec", {}).get("devices") or [{}]
        return bool(devices[0].get("allowMultipleAllocations"))

    return _dry_run(
        api, r.RESOURCE_SLICES_V1, body, None, kept, feature="shares",
        field="a device's allowMultipleAllocations", gate="DRAConsumableCapacity",
        what="ResourceSlice",
    )  # fmt: skip


def slice_counters(api: Prober, node: str) -> Finding:
    """MIG counters in ResourceSlices (DRAPartitionableDevices): a server-side dry-run of a
    slice of `node` with one counter set."""
    counters = [{"name": "probe", "counters": {"memory": {"value": "1"}}}]
    body = _probe_slice(node, "partitionable-devices", {"sharedCounters": counters})

    def kept(answer: Obj) -> bool:
        return bool(answer.get("spec", {}).get("sharedCounters"))

    return _dry_run(
        api, r.RESOURCE_SLICES_V1, body, None, kept, feature="MIG counters",
        field="a slice's sharedCounters", gate="DRAPartitionableDevices", what="ResourceSlice",
    )  # fmt: skip


def line(who: str, findings: Iterable[Finding]) -> str:
    """The one start-up line: what `who` turned off and why, then what it kept."""
    found = list(findings)
    off = [f"{f.feature} ({f.why})" for f in found if not f.on]
    on = [f"{f.feature} ({f.why})" for f in found if f.on]
    said = f"{who}: turned off: {'; '.join(off)}" if off else f"{who}: nothing turned off"
    return said + (f"; on: {'; '.join(on)}" if on else "")


def _share_request() -> Obj:
    return {
        "name": "gpu",
        "exactly": {
            "deviceClassName": DRIVER_NAME,
            "capacity": {"requests": dict(_PROBE_REQUEST)},
        },
    }


def _probe_slice(node: str, what: str, content: Obj) -> Obj:
    """A slice of `node`'s own pool (what the node plugin's admission policy admits)."""
    return {
        "apiVersion": r.RESOURCE_SLICES_V1.api_version,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER_NAME}-probe-{what}"[:253]},
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            **content,
        },
    }


def _kinds(api: Prober, group_version: str) -> frozenset[str] | errors.KubeError:
    """The kinds served (none where the version is not), or the error that left it unknown."""
    try:
        return api.served_kinds(group_version)
    except errors.KubeError as error:
        return error


def _dry_run(
    api: Prober,
    resource: r.Resource,
    body: Obj,
    namespace: str | None,
    kept: Any,
    *,
    feature: str,
    field: str,
    gate: str,
    what: str,
) -> Finding:
    try:
        answer = api.create_dry_run(resource, body, namespace=namespace)
    except errors.KubeError as error:
        return Finding(feature, True, f"could not tell: a server-side dry-run of a {what} "
                       f"failed ({error}); kept on")  # fmt: skip
    if kept(answer):
        return Finding(feature, True, f"{gate}: the server keeps {field}")
    return Finding(
        feature,
        False,
        f"{gate} is off: a server-side dry-run of a {what} lost {field}",
    )
