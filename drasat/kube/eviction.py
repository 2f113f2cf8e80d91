"""Stopping a pod, the two ways Kubernetes does: evicting it through the Eviction API (`policy/v1`
Eviction, the `pods/eviction` subresource), which a PodDisruptionBudget may refuse (429: the API
server enforces the budget even when drasat's view of it is stale), for a disruption that may wait
(preemption); and deleting it (`delete_pod`), which no budget holds back, for a pod that must not
keep using its device (as Kubernetes' device-taint eviction controller and NoExecute taint manager
delete the pods of a tainted device or node). And reading PodDisruptionBudgets."""

from __future__ import annotations

from drasat.kube import errors
from drasat.kube.client import Api, Obj
from drasat.kube.resources import PODS, Resource

PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")


def evict(api: Api, pod: Obj, *, dry_run: bool = False) -> bool:
    """Ask the API server to evict the pod: True when it is evicted (or already gone), False
    when a PodDisruptionBudget does not allow it now (429 naming the budget). Other errors,
    the API server's own throttling (429 without a budget) among them, are raised. `dry_run`:
    the API server runs every check (budgets, RBAC, admission) and evicts nothing
    (`deleteOptions.dryRun: [All]`), so a set of evictions can be checked before any is done."""
    meta = pod.get("metadata") or {}
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    body: Obj = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    options: Obj = {}
    if meta.get("uid"):
        # Evict this pod, not another one of the same name created since.
        options["preconditions"] = {"uid": meta["uid"]}
    if dry_run:
        options["dryRun"] = ["All"]
    if options:
        body["deleteOptions"] = options
    subresource = Resource("", "v1", f"pods/{name}/eviction", "Eviction")
    try:
        api.create(subresource, body, namespace=namespace)
    except (errors.NotFound, errors.Conflict):
        return True  # gone, or replaced by a pod of the same name (the uid precondition)
    except errors.Unavailable as error:
        if error.status == 429 and "disruption budget" in str(error).lower():
            return False
        raise
    return True


def delete_pod(api: Api, pod: Obj) -> bool:
    """Delete the pod, no PodDisruptionBudget consulted, with the grace period its spec asks for:
    True when this call deleted it (or started its graceful deletion), False when it is gone
    already or its name is another pod's now (its uid is the precondition, so a pod created
    since under the same name is never hit). Other errors are raised."""
    meta = pod.get("metadata") or {}
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    try:
        api.delete(PODS, name, namespace=namespace, uid=str(meta.get("uid") or "") or None)
    except (errors.NotFound, errors.Conflict):
        return False
    return True


def budgets(api: Api) -> list[Obj]:
    """Every PodDisruptionBudget of the cluster."""
    return list(api.list(PDBS).items)
