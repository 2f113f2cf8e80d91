"""The kinds drasat reads and writes, as (group, version, plural) with their URL paths.

This is a purely computational module: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drasat.api import groups


@dataclass(frozen=True)
class Resource:
    """One REST resource: `group` is "" for the core API (`/api/v1`)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, *, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        """`/apis/g/v/namespaces/ns/plural/name/sub`; no namespace on a namespaced kind: all."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        elif not self.namespaced and namespace:
            raise ValueError(f"{self.kind} is cluster-scoped: no namespace")
        base += f"/{self.plural}"
        if name is not None:
            if not name:
                raise ValueError(f"{self.kind}: empty name")
            base += f"/{name}"
        elif subresource:
            raise ValueError("a subresource needs a name")
        return base + (f"/{subresource}" if subresource else "")

    def stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The object with apiVersion and kind set (list items come without them)."""
        return {"apiVersion": self.api_version, "kind": self.kind, **obj}


# Core and coordination.
PODS = Resource("", "v1", "pods", "Pod")
EVENTS = Resource("", "v1", "events", "Event")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")

# Classic DRA.
DRA_GROUP = "resource.k8s.io"
DRA_VERSION = "v1alpha2"
RESOURCE_CLAIMS = Resource(DRA_GROUP, DRA_VERSION, "resourceclaims", "ResourceClaim")
RESOURCE_CLASSES = Resource(
    DRA_GROUP, DRA_VERSION, "resourceclasses", "ResourceClass", namespaced=False
)
RESOURCE_CLAIM_TEMPLATES = Resource(
    DRA_GROUP, DRA_VERSION, "resourceclaimtemplates", "ResourceClaimTemplate"
)
POD_SCHEDULING_CONTEXTS = Resource(
    DRA_GROUP, DRA_VERSION, "podschedulingcontexts", "PodSchedulingContext"
)


# Current DRA (Kubernetes 1.34+).
DRA_V1 = "v1"
RESOURCE_CLAIMS_V1 = Resource(DRA_GROUP, DRA_V1, "resourceclaims", "ResourceClaim")
DEVICE_CLASSES_V1 = Resource(DRA_GROUP, DRA_V1, "deviceclasses", "DeviceClass", namespaced=False)
RESOURCE_CLAIM_TEMPLATES_V1 = Resource(
    DRA_GROUP, DRA_V1, "resourceclaimtemplates", "ResourceClaimTemplate"
)
RESOURCE_SLICES_V1 = Resource(
    DRA_GROUP, DRA_V1, "resourceslices", "ResourceSlice", namespaced=False
)
DEVICE_TAINT_RULES_V1 = Resource(
    DRA_GROUP, DRA_V1, "devicetaintrules", "DeviceTaintRule", namespaced=False
)

#: The Workload API's PodGroup (Kubernetes 1.37, beta, behind the GenericWorkload gate): a gang
#: of pods that name it (`spec.schedulingGroup.podGroupName`).
SCHEDULING_GROUP = "scheduling.k8s.io"
POD_GROUPS = Resource(SCHEDULING_GROUP, "v1beta1", "podgroups", "PodGroup")


def nas(group: str = groups.NAS_GROUP) -> Resource:
    """NodeAllocationState of our group (default) or NVIDIA's."""
    return Resource(group, groups.VERSION, "nodeallocationstates", groups.NODE_ALLOCATION_STATE)


def gpu_claim_parameters(group: str = groups.PARAMS_GROUP) -> Resource:
    return Resource(group, groups.VERSION, "gpuclaimparameters", groups.GPU_CLAIM_PARAMETERS)


def mig_device_claim_parameters(group: str = groups.PARAMS_GROUP) -> Resource:
    return Resource(
        group, groups.VERSION, "migdeviceclaimparameters", groups.MIG_DEVICE_CLAIM_PARAMETERS
    )


def device_class_parameters(group: str = groups.PARAMS_GROUP) -> Resource:
    return Resource(
        group,
        groups.VERSION,
        "deviceclassparameters",
        groups.DEVICE_CLASS_PARAMETERS,
        namespaced=False,
    )


NAS = nas()


def parameters(group: str, kind: str) -> Resource | None:
    """The parameters resource for a parametersRef's (apiGroup, kind); None: not one of ours."""
    if group not in groups.PARAMS_GROUPS:
        return None
    makers = {
        groups.GPU_CLAIM_PARAMETERS: gpu_claim_parameters,
        groups.MIG_DEVICE_CLAIM_PARAMETERS: mig_device_claim_parameters,
        groups.DEVICE_CLASS_PARAMETERS: device_class_parameters,
    }
    maker = makers.get(kind)
    return maker(group) if maker is not None else None
