"""Read what the allocator needs from a live cluster, as plain documents (for the what-if).

`read_cluster` never writes. Kinds whose CRD is not installed (NVIDIA's groups, typically) are
skipped; every returned document has apiVersion and kind, as `kubectl get -o yaml` would show it.
"""

from __future__ import annotations

import logging

from drasat import loading
from drasat.api import groups
from drasat.kube import errors, resources
from drasat.kube.client import Api, KubeClient, Obj, load_configuration
from drasat.kube.resources import Resource

log = logging.getLogger(__name__)


def snapshot_resources() -> tuple[Resource, ...]:
    """Every kind the what-if reads: classes, claims, templates, parameters, NAS (both groups)."""
    kinds: list[Resource] = [
        resources.RESOURCE_CLASSES,
        resources.RESOURCE_CLAIMS,
        resources.RESOURCE_CLAIM_TEMPLATES,
    ]
    for group in groups.PARAMS_GROUPS:
        kinds += [
            resources.device_class_parameters(group),
            resources.gpu_claim_parameters(group),
            resources.mig_device_claim_parameters(group),
        ]
    kinds += [resources.nas(group) for group in groups.NAS_GROUPS]
    return tuple(kinds)


def read_cluster(api: Api, *, nas_namespace: str | None = None) -> list[Obj]:
    """All objects of `snapshot_resources()` (NAS only from `nas_namespace` when given).

    Raises KubeError when the server cannot be read at all (other than a kind it does not serve).
    """
    documents: list[Obj] = []
    for resource in snapshot_resources():
        namespace = nas_namespace if resource.kind == groups.NODE_ALLOCATION_STATE else None
        try:
            listed = api.list(resource, namespace=namespace)
        except errors.NotFound:
            log.info("%s: not served by this cluster, skipped", resource.api_version)
            continue
        documents += [_clean(item) for item in listed.items]
    return documents


def _clean(obj: Obj) -> Obj:
    """Drop server bookkeeping the models do not know (managedFields)."""
    metadata = dict(obj.get("metadata") or {})
    metadata.pop("managedFields", None)
    return {**obj, "metadata": metadata}


def read_cluster_documents(
    api: Api, *, nas_namespace: str | None = None, source: str = "cluster"
) -> list[loading.Document]:
    """`read_cluster` as loader Documents (source `cluster`, numbered in reading order), so they
    go through the same validation and field-path errors as manifest files."""
    objects = read_cluster(api, nas_namespace=nas_namespace)
    return [loading.Document(source, number, obj) for number, obj in enumerate(objects, start=1)]


def connect(kubeconfig: str | None = None, context: str | None = None) -> KubeClient:
    """A client from a kubeconfig (or in-cluster config); InputError when there is none."""
    return KubeClient(load_configuration(kubeconfig, context))
