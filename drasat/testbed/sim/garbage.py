"""The garbage collector's sweep for orphans: dependents whose owners no longer exist.

The simulated API server deletes an object's dependents when the object goes. What that misses
is a dependent created after its owner went, e.g. a claim the scheduler made from a template
for a pod it had just listed while the pod was being deleted. Kubernetes' garbage collector
deletes those too (it checks that owners exist); `collect` does the same for the kinds the
classic DRA flow creates on a pod's behalf.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from drasat.testbed.sim import errors, kubeclient

Obj = dict[str, Any]

#: resource.k8s.io/v1 claims, made from templates by the resourceclaim controller.
V1_CLAIMS = ("resource.k8s.io", "v1", "resourceclaims")
#: What the classic DRA flow makes on a pod's behalf and owns by it: claims from templates,
#: scheduling contexts.
DEPENDENTS = (
    ("resource.k8s.io", "v1alpha2", "resourceclaims"),
    ("resource.k8s.io", "v1alpha2", "podschedulingcontexts"),
)


def orphaned(obj: Obj, pod_uids: set[str]) -> bool:
    """True when every owner of the object is a pod, and none of them exists."""
    owners = obj["metadata"].get("ownerReferences") or []
    return bool(owners) and all(
        o.get("kind") == "Pod" and o.get("uid") not in pod_uids for o in owners
    )


def collect(
    client: kubeclient.KubeClient,
    namespaces: Iterable[str],
    *,
    dependents: Iterable[tuple[str, str, str]] = DEPENDENTS,
) -> list[str]:
    """Delete the pod-owned dependents (group, version, plural) whose pods are gone;
    `plural namespace/name` of each."""
    deleted = []
    for namespace in sorted(set(namespaces)):
        pods = client.list(kubeclient.path("", "v1", "pods", namespace=namespace))["items"]
        uids = {str(p["metadata"]["uid"]) for p in pods}
        for group, version, plural in dependents:
            url = kubeclient.path(group, version, plural, namespace=namespace)
            for obj in client.list(url)["items"]:
                if not orphaned(obj, uids) or obj["metadata"].get("deletionTimestamp"):
                    continue
                name = obj["metadata"]["name"]
                try:
                    client.delete(
                        kubeclient.path(group, version, plural, namespace=namespace, name=name)
                    )
                except errors.ApiError as error:
                    if error.code != 404:
                        raise
                    continue
                deleted.append(f"{plural} {namespace}/{name}")
    return deleted
