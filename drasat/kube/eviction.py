"""Evicting a pod through the Eviction API (`policy/v1` Eviction, the `pods/eviction`
subresource) and reading PodDisruptionBudgets: the API server refuses an eviction that a budget
does not allow (429), which is how a budget is respected even when drasat's view of it is stale."""

from __future__ import annotations

from drasat.kube import errors
from drasat.kube.client import Api, Obj
from drasat.kube.resources import Resource

PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")


def evict(api: Api, pod: Obj) -> bool:
    """Ask the API server to evict the pod: True when it is evicted (or already gone), False
    when a PodDisruptionBudget does not allow it now (429 naming the budget). Other errors,
    the API server's own throttling (429 without a budget) among them, are raised."""
    meta = pod.get("metadata") or {}
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    body: Obj = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    if meta.get("uid"):
        # Evict this pod, not another one of the same name created since.
        body["deleteOptions"] = {"preconditions": {"uid": meta["uid"]}}
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


def budgets(api: Api) -> list[Obj]:
    """Every PodDisruptionBudget of the cluster."""
    return list(api.list(PDBS).items)
