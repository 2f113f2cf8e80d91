"""`--from-cluster` on a `resource.k8s.io/v1` cluster: what the v1 what-if reads, listed through
drasat.kube and never written.

ResourceSlices, DeviceTaintRules and Nodes describe the cluster; DeviceClasses, ResourceClaims,
ResourceClaimTemplates, PodGroups (where served: the Workload API) and Pods come before the `-f`
manifests, so the answer is "what if I apply these now": existing allocations stay and take their
devices, and pods whose claims are allocated already are not placed again. A server that does not
serve `resource.k8s.io/v1` ResourceSlices (a classic cluster) gives None: the caller reads the
classic objects instead."""

from __future__ import annotations

import logging

from drasat import loading
from drasat.kube import errors
from drasat.kube.client import Api, Obj
from drasat.kube.resources import NODES, POD_GROUPS, PODS, Resource
from drasat.whatif import v1manifests

log = logging.getLogger(__name__)

GROUP, VERSION = "resource.k8s.io", "v1"
RESOURCE_SLICES = Resource(GROUP, VERSION, "resourceslices", "ResourceSlice", namespaced=False)
DEVICE_CLASSES = Resource(GROUP, VERSION, "deviceclasses", "DeviceClass", namespaced=False)
RESOURCE_CLAIMS = Resource(GROUP, VERSION, "resourceclaims", "ResourceClaim")
RESOURCE_CLAIM_TEMPLATES = Resource(
    GROUP, VERSION, "resourceclaimtemplates", "ResourceClaimTemplate"
)
#: v1 from Kubernetes 1.37; an older server lacks it (read when served).
DEVICE_TAINT_RULES = Resource(
    GROUP, VERSION, "devicetaintrules", "DeviceTaintRule", namespaced=False
)
#: In reading order: the cluster first, then what the manifests would sit beside.
KINDS = (
    RESOURCE_SLICES,
    DEVICE_TAINT_RULES,
    NODES,
    DEVICE_CLASSES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    POD_GROUPS,
    PODS,
)


def read(api: Api) -> list[Obj] | None:
    """Every object of `KINDS` (apiVersion and kind set, managedFields dropped), or None when
    the server does not serve v1 ResourceSlices. Raises KubeError when it cannot be read."""
    out: list[Obj] = []
    for resource in KINDS:
        try:
            listed = api.list(resource)
        except errors.NotFound:
            if resource is RESOURCE_SLICES:
                log.info("%s: not served, reading the classic objects", resource.api_version)
                return None
            if resource in (DEVICE_TAINT_RULES, POD_GROUPS):
                continue
            raise
        for item in listed.items:
            metadata = dict(item.get("metadata") or {})
            metadata.pop("managedFields", None)
            out.append(resource.stamp({**item, "metadata": metadata}))
    return out


def read_documents(
    api: Api, *, source: str = v1manifests.LIVE_SOURCE
) -> list[loading.Document] | None:
    """`read` as loader Documents (numbered in reading order), so they go through the same
    validation and field-path errors as files."""
    found = read(api)
    if found is None:
        return None
    return [loading.Document(source, n, obj) for n, obj in enumerate(found, start=1)]
