"""A simulated kube-controller-manager: the controllers a DRA demo needs, each a pure function of
the listed state, run together by `ControllerManager` (a watch-driven loop, like the scheduler).

- **resourceclaim** (`resource.k8s.io/v1`, as 1.37's `pkg/controller/resourceclaim`): for each
  pod that is not being deleted or done, a claim per `resourceClaimTemplateName` entry
  (`generateName: <pod>-<entry>-`, both parts cut in proportion to fit 57 characters; the
  template's labels and annotations plus `resource.kubernetes.io/pod-claim-name: <entry>`; the
  pod as controlling owner, without blockOwnerDeletion; the template's spec), recorded in
  `pod.status.resourceClaimStatuses`; a claim the pod already owns with that annotation is
  reused. A scheduled pod's allocated claims are reserved for it if they are not yet.
  `status.reservedFor` loses pods that are gone, were replaced (another uid) or are done
  (Succeeded/Failed, or deleted before being scheduled); a claim left with no consumer that
  carries the scheduler's finalizer (`resource.kubernetes.io/delete-protection`) is deallocated
  and loses the finalizer (claims allocated by drasat's controller lack it and are left to
  drasat); a template's claim with no consumer whose pod is done or replaced is deleted.
- **device-taint-eviction** (1.37's `pkg/controller/devicetainteviction`): a scheduled pod whose
  reserved, allocated claim uses a device with a `NoExecute` taint (the device's own in its
  ResourceSlice, or a DeviceTaintRule's on a device a slice publishes) that the allocation result's
  tolerations do not tolerate gets the `DisruptionTarget` condition (`DeletionByDeviceTaintManager`)
  and is deleted (uid precondition) once `timeAdded` plus the shortest matching
  `tolerationSeconds` has passed. No Events, no DeviceTaintRule status.
- **garbage collector**: claims whose owning pods are all gone are deleted (`garbage.collect`; the
  simulated API server cascades deletes itself).
- **deployment** (`apps/v1`): one ReplicaSet per pod template, named `<deployment>-<hash>` with the
  `pod-template-hash` label, owned by the Deployment, with the Deployment's replicas; ReplicaSets of
  older templates are scaled to 0 (a rollout without surge: `Recreate`, whatever the strategy).
- **replicaset**: pods `generateName: <replicaset>-` from the template, owned by the ReplicaSet,
  until `spec.replicas` pods are active; extra ones (unscheduled first) are deleted.
- **job** (`batch/v1`, non-indexed completion counting): while fewer than `completions` pods
  succeeded and fewer than `backoffLimit` (6) + 1 failed, `min(parallelism, completions -
  succeeded)` active pods (`generateName: <job>-`, labels `batch.kubernetes.io/job-name`,
  `job-name`, `batch.kubernetes.io/controller-uid`, `controller-uid`, owned by the Job); `suspend`
  stops new pods; then conditions `SuccessCriteriaMet` and `Complete` (or `FailureTarget` and
  `Failed`). Indexed jobs get the `batch.kubernetes.io/job-completion-index` annotation, pods by
  index. No pod failure policy, success policy, `activeDeadlineSeconds` or tracking finalizers.

Statuses written: ReplicaSets and Deployments `replicas`, `readyReplicas` (pods Running),
`observedGeneration`; Jobs `active`, `succeeded`, `failed`, `startTime`, conditions.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from drasat.testbed.sim import actor, errors, garbage, kubeclient, scheduling

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: The finalizer kube-scheduler puts on a claim it allocated (resourceapi.Finalizer).
SCHEDULER_FINALIZER = "resource.kubernetes.io/delete-protection"
#: generateName of a template's claim leaves room for "-" and 5 random characters in 63.
_CLAIM_BASE_MAX = 57
#: The alphabet of rand.SafeEncodeString (no vowels, no look-alikes), for pod-template-hash.
_SAFE = "bcdfghjklmnpqrstvwxz2456789"
JOB_BACKOFF_LIMIT = 6
_DONE_PHASES = ("Succeeded", "Failed")


def _core(
    plural: str, namespace: str | None = None, name: str | None = None, sub: str | None = None
) -> str:
    return kubeclient.path("", "v1", plural, namespace=namespace, name=name, subresource=sub)


def _claims(namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
    return kubeclient.path(
        "resource.k8s.io", "v1", "resourceclaims", namespace=namespace, name=name, subresource=sub
    )


def _templates(namespace: str, name: str) -> str:
    return kubeclient.path(
        "resource.k8s.io", "v1", "resourceclaimtemplates", namespace=namespace, name=name
    )


def _apps(
    plural: str, namespace: str | None = None, name: str | None = None, sub: str | None = None
) -> str:
    return kubeclient.path("apps", "v1", plural, namespace=namespace, name=name, subresource=sub)


def _jobs(namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
    return kubeclient.path("batch", "v1", "jobs", namespace=namespace, name=name, subresource=sub)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- pure decisions ---------------------------------------------------------------------------


def pod_done(pod: Mapping[str, Any]) -> bool:
    """isPodDone: none of its containers runs or will run."""
    return (pod.get("status") or {}).get("phase") in _DONE_PHASES or bool(
        pod["metadata"].get("deletionTimestamp") and not (pod.get("spec") or {}).get("nodeName")
    )


def pod_active(pod: Mapping[str, Any]) -> bool:
    """Counted against replicas/parallelism: not finished and not being deleted."""
    return (pod.get("status") or {}).get("phase") not in _DONE_PHASES and not pod["metadata"].get(
        "deletionTimestamp"
    )


def claim_generate_name(pod_name: str, claim_name: str) -> str:
    """`<pod>-<claim>-`, or both parts cut in proportion when that exceeds 57 characters."""
    base = f"{pod_name}-{claim_name}-"
    if len(base) <= _CLAIM_BASE_MAX:
        return base
    # Integer arithmetic as the Go code does it (same operands, same order).
    return (
        pod_name[: len(pod_name) * _CLAIM_BASE_MAX // len(base)]
        + "-"
        + claim_name[: len(claim_name) * _CLAIM_BASE_MAX // len(base)]
    )


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for owner in obj["metadata"].get("ownerReferences") or []:
        if owner.get("controller"):
            return owner  # type: ignore[no-any-return]
    return None


def owned_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    ref = controller_of(obj)
    return ref is not None and ref.get("uid") == owner["metadata"]["uid"]


def owner_reference(
    owner: Mapping[str, Any], api_version: str, kind: str, *, block: bool = True
) -> Obj:
    """A controlling ownerReference; `block=False` for a template's claim, which 1.37's
    resourceclaim controller creates without blockOwnerDeletion (checked by tests/contract)."""
    ref = {
        "apiVersion": api_version,
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    if block:
        ref["blockOwnerDeletion"] = True
    return ref


def template_hash(template: Mapping[str, Any]) -> str:
    """A pod-template-hash in the real one's alphabet: FNV-1a (32 bit) of the template's JSON,
    its decimal digits mapped to safe characters (the real hash is of Go's object dump, so the
    value differs; the form is the same)."""
    value = 0x811C9DC5
    for byte in json.dumps(template, sort_keys=True).encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE[int(d) % len(_SAFE)] for d in str(value))


def valid_reservations(
    claim: Mapping[str, Any], pods_by_name: Mapping[str, Mapping[str, Any]]
) -> list[Obj]:
    """reservedFor without pods that are gone, were replaced, or are done."""
    kept = []
    for ref in (claim.get("status") or {}).get("reservedFor") or []:
        if ref.get("apiGroup", "") == "" and ref.get("resource") == "pods":
            pod = pods_by_name.get(str(ref.get("name")))
            if pod is None or pod["metadata"]["uid"] != ref.get("uid") or pod_done(pod):
                continue
        kept.append(dict(ref))
    return kept


def merged_claim_statuses(pod: Mapping[str, Any], made: Mapping[str, str]) -> list[Obj]:
    """pod.status.resourceClaimStatuses with `made` (pod claim -> claim) applied, keyed by name
    as the controller's server-side apply merges them."""
    current = {
        s["name"]: dict(s)
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if s.get("name")
    }
    for entry, claim in made.items():
        current[entry] = {"name": entry, "resourceClaimName": claim}
    return [current[k] for k in sorted(current)]


def job_wanted_active(job: Mapping[str, Any], succeeded: int) -> int:
    spec = job.get("spec") or {}
    if spec.get("suspend"):
        return 0
    parallelism = int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    if completions is None:  # done once any pod succeeded
        return 0 if succeeded else parallelism
    return max(0, min(parallelism, int(completions) - succeeded))


def job_finished(job: Mapping[str, Any], succeeded: int, failed: int) -> str | None:
    """ "Complete", "Failed" or None (still running)."""
    spec = job.get("spec") or {}
    completions = spec.get("completions")
    if succeeded and (completions is None or succeeded >= int(completions)):
        return "Complete"
    if failed > int(spec.get("backoffLimit", JOB_BACKOFF_LIMIT)):
        return "Failed"
    return None


# --- device taint eviction ----------------------------------------------------------------------

#: The condition the device taint eviction controller puts on a pod before deleting it.
EVICTION_CONDITION = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByDeviceTaintManager",
    "message": "Device Taint manager: deleting due to NoExecute taint",
}

DeviceId = tuple[str, str, str]


def _rule_selects(selector: Mapping[str, Any] | None, device: DeviceId) -> bool:
    """A DeviceTaintRule's deviceSelector: every field given must match; none given: all match;
    no selector at all: nothing."""
    if selector is None:
        return False
    driver, pool, name = device
    wanted = {"driver": driver, "pool": pool, "device": name}
    return all(selector.get(k) in (None, v) for k, v in wanted.items())


def device_taints(
    slices: Sequence[Mapping[str, Any]], rules: Sequence[Mapping[str, Any]]
) -> dict[DeviceId, list[Obj]]:
    """The taints of every device the ResourceSlices publish: its own and those of the
    DeviceTaintRules selecting it (a rule taints only devices that exist)."""
    taints: dict[DeviceId, list[Obj]] = {}
    for piece in slices:
        spec = piece.get("spec") or {}
        pool = str((spec.get("pool") or {}).get("name"))
        for device in spec.get("devices") or []:
            key = (str(spec.get("driver")), pool, str(device.get("name")))
            taints.setdefault(key, []).extend(dict(t) for t in device.get("taints") or [])
    for rule in rules:
        spec = rule.get("spec") or {}
        for key, found in taints.items():
            if spec.get("taint") and _rule_selects(spec.get("deviceSelector"), key):
                found.append(dict(spec["taint"]))
    return taints


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """A DeviceToleration against a DeviceTaint (key, operator Exists/Equal, value, effect)."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    key = toleration.get("key")
    if key and key != taint.get("key"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return bool(key) and toleration.get("value", "") == taint.get("value", "")


def seconds_of(stamp: str | None) -> float:
    """An RFC 3339 time (`2026-01-01T00:00:00Z`) as seconds since the epoch; 0 when missing."""
    if not stamp:
        return 0.0
    parsed = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return parsed.timestamp()


def eviction_time(
    claim: Mapping[str, Any], taints: Mapping[DeviceId, Sequence[Mapping[str, Any]]]
) -> float | None:
    """When the pods of an allocated claim must go (seconds since the epoch): the earliest
    `timeAdded` of a NoExecute taint on an allocated device, plus the shortest
    `tolerationSeconds` of the result's tolerations that match it; a matching toleration without
    seconds tolerates it forever. None: no such taint."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    earliest: float | None = None
    for result in (allocation.get("devices") or {}).get("results") or []:
        device = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
        for taint in taints.get(device, ()):
            if taint.get("effect") != "NoExecute":
                continue
            matching = [
                t
                for t in result.get("tolerations") or []
                if t.get("effect") in (None, "", "NoExecute") and tolerates(t, taint)
            ]
            if any(t.get("tolerationSeconds") is None for t in matching):
                continue  # tolerated forever
            delay = min((max(0, int(t["tolerationSeconds"])) for t in matching), default=0)
            at = seconds_of(taint.get("timeAdded")) + delay
            earliest = at if earliest is None else min(earliest, at)
    return earliest


# --- the loop ---------------------------------------------------------------------------------


class ControllerManager(actor.WatchDrivenLoop):
    """The resourceclaim, garbage-collection, deployment, replicaset and job controllers;
    `claims=False` leaves claims alone (classic DRA, where the simulated scheduler does that)."""

    name = "sim-controller-manager"

    def __init__(
        self,
        client: kubeclient.KubeClient,
        *,
        resync: float = 1.0,
        claims: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(client, resync=resync)
        #: Wall-clock seconds, compared with taints' `timeAdded` (a fake one in tests).
        self._clock = clock
        self._claims_on = claims
        self._lock = threading.Lock()
        #: Why a pod's claim could not be created ((namespace, pod) -> message).
        self.reasons: dict[tuple[str, str], str] = {}

    def watched(self) -> list[tuple[str, Mapping[str, str]]]:
        urls = [_core("pods"), _apps("deployments"), _apps("replicasets"), _jobs()]
        if self._claims_on:
            res = ("resource.k8s.io", "v1")
            urls += [
                _claims(),
                kubeclient.path(*res, "resourceslices"),
                kubeclient.path(*res, "devicetaintrules"),
            ]
        return [(url, {}) for url in urls]

    def run_once(self) -> None:
        if self._claims_on:
            self.sync_claims()
            self.evict_for_device_taints()
        self.sync_deployments()
        self.sync_replicasets()
        self.sync_jobs()

    # --- resourceclaim controller ------------------------------------------------------------

    def sync_claims(self) -> None:
        # Claims before pods: a pod in a claim's reservedFor existed when the claims were
        # listed, so a later pod list that lacks it means it is gone (not yet to come).
        claims = self._client.list(_claims())["items"]
        pods = self._client.list(_core("pods"))["items"]
        by_ns: dict[str, dict[str, Obj]] = {}
        for pod in pods:
            by_ns.setdefault(pod["metadata"]["namespace"], {})[pod["metadata"]["name"]] = pod
        for pod in pods:
            # A pod being deleted or done needs no claims (upstream: podNeedsClaims).
            if not pod["metadata"].get("deletionTimestamp") and not pod_done(pod):
                self._catch(self._sync_pod, pod, claims)
        for claim in claims:
            self._catch(self._sync_claim, claim, by_ns.get(claim["metadata"]["namespace"], {}))
        namespaces = {c["metadata"]["namespace"] for c in claims}
        garbage.collect(self._client, namespaces, dependents=(garbage.V1_CLAIMS,))

    def _catch(self, step: Any, *args: Any) -> None:
        try:
            step(*args)
        except errors.ApiError as exc:  # a conflict or a race: the next pass retries
            log.debug("%s: %s", self.name, exc)

    def _sync_pod(self, pod: Obj, claims: Sequence[Obj]) -> None:
        meta = pod["metadata"]
        namespace, key = meta["namespace"], (meta["namespace"], meta["name"])
        statuses = scheduling.status_claim_names(pod)
        existing = {
            c["metadata"]["name"]: c for c in claims if c["metadata"]["namespace"] == namespace
        }
        made: dict[str, str] = {}
        for entry in scheduling.pod_claims(pod):
            if entry.template_name is None:
                continue
            recorded = statuses.get(entry.name)
            if recorded and recorded in existing and owned_by(existing[recorded], pod):
                continue
            own = [
                c
                for c in existing.values()
                if owned_by(c, pod)
                and (c["metadata"].get("annotations") or {}).get(scheduling.POD_CLAIM_ANNOTATION)
                == entry.name
            ]
            if own:
                made[entry.name] = own[0]["metadata"]["name"]
                continue
            try:
                template = self._client.get(_templates(namespace, entry.template_name))
            except errors.ApiError as exc:
                if exc.code != 404:
                    raise
                with self._lock:
                    self.reasons[key] = (
                        f"PodResourceClaim {entry.name}: resource claim template "
                        f"{entry.template_name!r} not found"
                    )
                continue
            inner = template["spec"].get("metadata") or {}
            body = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "generateName": claim_generate_name(meta["name"], entry.name),
                    "labels": inner.get("labels") or {},
                    "annotations": {
                        **(inner.get("annotations") or {}),
                        scheduling.POD_CLAIM_ANNOTATION: entry.name,
                    },
                    "ownerReferences": [owner_reference(pod, "v1", "Pod", block=False)],
                },
                "spec": template["spec"]["spec"],
            }
            created = self._client.create(_claims(namespace), body)
            made[entry.name] = created["metadata"]["name"]
            existing[created["metadata"]["name"]] = created
        if made:
            statuses_patch = {"status": {"resourceClaimStatuses": merged_claim_statuses(pod, made)}}
            self._client.merge_patch(
                _core("pods", namespace, meta["name"], "status"), statuses_patch
            )
            with self._lock:
                self.reasons.pop(key, None)
        if not (pod.get("spec") or {}).get("nodeName"):
            return  # the scheduler reserves
        names = {**statuses, **made}
        for entry in scheduling.pod_claims(pod):
            name = entry.claim_name or names.get(entry.name)
            claim = existing.get(str(name)) if name else None
            if claim is None or not (claim.get("status") or {}).get("allocation"):
                continue
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if scheduling.reserved_for(claim, pod) or len(reserved) >= scheduling.RESERVED_FOR_MAX:
                continue
            patch = {
                "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
                "status": {"reservedFor": [*reserved, scheduling.pod_reference(pod)]},
            }
            cm = claim["metadata"]
            self._client.merge_patch(_claims(cm["namespace"], cm["name"], "status"), patch)

    def _sync_claim(self, claim: Obj, pods: Mapping[str, Obj]) -> None:
        meta = claim["metadata"]
        url = _claims(meta["namespace"], meta["name"])
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        valid = valid_reservations(claim, pods)
        finalizers = list(meta.get("finalizers") or [])
        ours = SCHEDULER_FINALIZER in finalizers
        allocated = bool((claim.get("status") or {}).get("allocation"))
        if len(valid) < len(reserved) or (ours and meta.get("deletionTimestamp") and not valid):
            status: Obj = {"reservedFor": valid or None}
            if not valid and ours:
                status["allocation"] = None  # allocated by a scheduler: deallocate
            if len(valid) < len(reserved) or (allocated and ours):
                claim = self._client.merge_patch(
                    f"{url}/status",
                    {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status},
                )
            if ours and not (claim.get("status") or {}).get("allocation"):
                kept = [f for f in finalizers if f != SCHEDULER_FINALIZER]
                claim = self._client.merge_patch(
                    url,
                    {
                        "metadata": {
                            "resourceVersion": claim["metadata"]["resourceVersion"],
                            "finalizers": kept or None,
                        }
                    },
                )
        if valid:
            return
        owner = controller_of(claim)
        if owner is None or owner.get("kind") != "Pod" or owner.get("apiVersion") != "v1":
            return
        pod = pods.get(str(owner.get("name")))
        if pod is None:
            return  # not known (yet): the garbage collector deletes it if truly gone
        if pod["metadata"]["uid"] != owner.get("uid") or pod_done(pod):
            try:
                self._client.delete(url)
            except errors.ApiError as exc:
                if exc.code != 404:
                    raise

    # --- device taint eviction controller -----------------------------------------------------

    def evict_for_device_taints(self) -> None:
        """Delete scheduled pods whose reserved, allocated claims use a device with a NoExecute
        taint they do not tolerate, once its time has come (after a DisruptionTarget condition)."""
        res = ("resource.k8s.io", "v1")
        slices = self._client.list(kubeclient.path(*res, "resourceslices"))["items"]
        rules = self._client.list(kubeclient.path(*res, "devicetaintrules"))["items"]
        taints = device_taints(slices, rules)
        if not any(t.get("effect") == "NoExecute" for found in taints.values() for t in found):
            return
        claims = {
            (c["metadata"]["namespace"], c["metadata"]["name"]): c
            for c in self._client.list(_claims())["items"]
        }
        now = self._clock()
        for pod in self._client.list(_core("pods"))["items"]:
            meta = pod["metadata"]
            if not (pod.get("spec") or {}).get("nodeName") or meta.get("deletionTimestamp"):
                continue
            statuses = scheduling.status_claim_names(pod)
            due = False
            for entry in scheduling.pod_claims(pod):
                name = entry.claim_name or statuses.get(entry.name)
                claim = claims.get((meta["namespace"], str(name))) if name else None
                if claim is None or not scheduling.reserved_for(claim, pod):
                    continue
                at = eviction_time(claim, taints)
                due = due or (at is not None and at <= now)
            if due:
                self._catch(self._evict, pod)

    def _evict(self, pod: Obj) -> None:
        meta = pod["metadata"]
        conditions = [
            c
            for c in (pod.get("status") or {}).get("conditions") or []
            if c.get("type") != "DisruptionTarget"
        ]
        condition = {**EVICTION_CONDITION, "lastTransitionTime": _now()}
        url = _core("pods", meta["namespace"], meta["name"])
        self._client.merge_patch(
            f"{url}/status", {"status": {"conditions": [*conditions, condition]}}
        )
        self._client.request(
            "DELETE",
            url,
            body={
                "kind": "DeleteOptions",
                "apiVersion": "v1",
                "preconditions": {"uid": meta["uid"]},
            },
        )

    # --- workloads ------------------------------------------------------------------------------

    def sync_deployments(self) -> None:
        sets = self._client.list(_apps("replicasets"))["items"]
        for deployment in self._client.list(_apps("deployments"))["items"]:
            self._catch(self._sync_deployment, deployment, sets)

    def _sync_deployment(self, deployment: Obj, sets: Sequence[Obj]) -> None:
        meta, spec = deployment["metadata"], deployment.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return
        namespace = meta["namespace"]
        template = spec.get("template") or {}
        digest = template_hash(template)
        name = f"{meta['name']}-{digest}"
        replicas = int(spec.get("replicas", 1))
        own = [
            s for s in sets if s["metadata"]["namespace"] == namespace and owned_by(s, deployment)
        ]
        current = next((s for s in own if s["metadata"]["name"] == name), None)
        for old in own:
            if old is not current and int((old.get("spec") or {}).get("replicas", 1)) != 0:
                self._client.merge_patch(
                    _apps("replicasets", namespace, old["metadata"]["name"]),
                    {"spec": {"replicas": 0}},
                )
        if current is None:
            labels = {
                **(template.get("metadata") or {}).get("labels", {}),
                "pod-template-hash": digest,
            }
            selector = dict(spec.get("selector") or {})
            selector["matchLabels"] = {
                **selector.get("matchLabels", {}),
                "pod-template-hash": digest,
            }
            body = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": name,
                    "labels": labels,
                    "ownerReferences": [owner_reference(deployment, "apps/v1", "Deployment")],
                },
                "spec": {
                    "replicas": replicas,
                    "selector": selector,
                    "template": {
                        **template,
                        "metadata": {**(template.get("metadata") or {}), "labels": labels},
                    },
                },
            }
            current = self._client.create(_apps("replicasets", namespace), body)
        elif int((current.get("spec") or {}).get("replicas", 1)) != replicas:
            self._client.merge_patch(
                _apps("replicasets", namespace, name), {"spec": {"replicas": replicas}}
            )
        status = current.get("status") or {}
        wanted = {
            "observedGeneration": meta.get("generation", 1),
            "replicas": status.get("replicas", 0),
            "readyReplicas": status.get("readyReplicas", 0),
        }
        if {k: (deployment.get("status") or {}).get(k) for k in wanted} != wanted:
            self._client.merge_patch(
                _apps("deployments", namespace, meta["name"], "status"), {"status": wanted}
            )

    def sync_replicasets(self) -> None:
        pods = self._client.list(_core("pods"))["items"]
        for replicaset in self._client.list(_apps("replicasets"))["items"]:
            self._catch(self._sync_replicaset, replicaset, pods)

    def _sync_replicaset(self, replicaset: Obj, pods: Sequence[Obj]) -> None:
        meta, spec = replicaset["metadata"], replicaset.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return
        namespace = meta["namespace"]
        own = [
            p for p in pods if p["metadata"]["namespace"] == namespace and owned_by(p, replicaset)
        ]
        active = [p for p in own if pod_active(p)]
        replicas = int(spec.get("replicas", 1))
        for _ in range(replicas - len(active)):
            self._create_pod(
                namespace,
                f"{meta['name']}-",
                spec.get("template") or {},
                owner_reference(replicaset, "apps/v1", "ReplicaSet"),
            )
        # Unscheduled pods go first, then the newest (kube-controller-manager's ranking, roughly).
        extra = sorted(
            active,
            key=lambda p: (
                bool((p.get("spec") or {}).get("nodeName")),
                str(p["metadata"].get("creationTimestamp", "")),
            ),
        )[: max(0, len(active) - replicas)]
        for pod in extra:
            self._delete(_core("pods", namespace, pod["metadata"]["name"]))
        ready = sum(1 for p in active if (p.get("status") or {}).get("phase") == "Running")
        wanted = {
            "observedGeneration": meta.get("generation", 1),
            "replicas": min(len(active), replicas) if active else 0,
            "readyReplicas": ready,
        }
        if {k: (replicaset.get("status") or {}).get(k) for k in wanted} != wanted:
            self._client.merge_patch(
                _apps("replicasets", namespace, meta["name"], "status"), {"status": wanted}
            )

    def sync_jobs(self) -> None:
        pods = self._client.list(_core("pods"))["items"]
        for job in self._client.list(_jobs())["items"]:
            self._catch(self._sync_job, job, pods)

    def _sync_job(self, job: Obj, pods: Sequence[Obj]) -> None:
        meta, spec = job["metadata"], job.get("spec") or {}
        status = job.get("status") or {}
        if meta.get("deletionTimestamp"):
            return
        if any(c.get("type") in ("Complete", "Failed") for c in status.get("conditions") or []):
            return
        namespace = meta["namespace"]
        own = [p for p in pods if p["metadata"]["namespace"] == namespace and owned_by(p, job)]
        active = [p for p in own if pod_active(p)]
        succeeded = sum(1 for p in own if (p.get("status") or {}).get("phase") == "Succeeded")
        failed = sum(1 for p in own if (p.get("status") or {}).get("phase") == "Failed")
        finished = job_finished(job, succeeded, failed)
        new_status: Obj = {
            "active": len(active) or None,
            "succeeded": succeeded or None,
            "failed": failed or None,
            "startTime": status.get("startTime") or (None if spec.get("suspend") else _now()),
        }
        if finished is not None:
            first = "SuccessCriteriaMet" if finished == "Complete" else "FailureTarget"
            now = _now()
            new_status["conditions"] = [
                {"type": kind, "status": "True", "lastProbeTime": now, "lastTransitionTime": now}
                for kind in (first, finished)
            ]
            if finished == "Complete":
                new_status["completionTime"] = now
        else:
            self._start_job_pods(job, own, active, succeeded)
        current = {k: status.get(k) for k in new_status}
        if current != new_status:
            self._client.merge_patch(
                _jobs(namespace, meta["name"], "status"), {"status": new_status}
            )

    def _start_job_pods(
        self, job: Obj, own: Sequence[Obj], active: Sequence[Obj], succeeded: int
    ) -> None:
        meta, spec = job["metadata"], job.get("spec") or {}
        template = spec.get("template") or {}
        labels = {
            **((template.get("metadata") or {}).get("labels") or {}),
            "batch.kubernetes.io/controller-uid": meta["uid"],
            "batch.kubernetes.io/job-name": meta["name"],
            "controller-uid": meta["uid"],
            "job-name": meta["name"],
        }
        indexed = spec.get("completionMode") == "Indexed"
        taken = {
            (p["metadata"].get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
            for p in own
            if pod_active(p) or (p.get("status") or {}).get("phase") == "Succeeded"
        }
        free = [str(i) for i in range(int(spec.get("completions") or 0)) if str(i) not in taken]
        for _ in range(job_wanted_active(job, succeeded) - len(active)):
            annotations = dict((template.get("metadata") or {}).get("annotations") or {})
            prefix = f"{meta['name']}-"
            if indexed and free:
                index = free.pop(0)
                annotations["batch.kubernetes.io/job-completion-index"] = index
                prefix = f"{meta['name']}-{index}-"
            body_template = {
                **template,
                "metadata": {
                    **(template.get("metadata") or {}),
                    "labels": labels,
                    "annotations": annotations,
                },
            }
            self._create_pod(
                meta["namespace"], prefix, body_template, owner_reference(job, "batch/v1", "Job")
            )

    def _create_pod(
        self, namespace: str, prefix: str, template: Mapping[str, Any], owner: Obj
    ) -> None:
        metadata = {
            k: v
            for k, v in (template.get("metadata") or {}).items()
            if k in ("labels", "annotations")
        }
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**metadata, "generateName": prefix, "ownerReferences": [owner]},
            "spec": template.get("spec") or {},
        }
        self._client.create(_core("pods", namespace), body)

    def _delete(self, url: str) -> None:
        try:
            self._client.delete(url)
        except errors.ApiError as exc:
            if exc.code != 404:
                raise
