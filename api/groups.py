"""API groups, versions and kinds drasat reads and writes."""

from __future__ import annotations

DRIVER_NAME = "gpu.drasat.io"
#: NVIDIA's classic DRA driver: its claims and objects are read as ours (what-if, migration).
NVIDIA_DRIVER_NAME = "gpu.resource.nvidia.com"

PARAMS_GROUP = "gpu.drasat.io"
NAS_GROUP = "nas.gpu.drasat.io"
POLICY_GROUP = "policy.drasat.io"
VERSION = "v1alpha1"

NVIDIA_PARAMS_GROUP = "gpu.resource.nvidia.com"
NVIDIA_NAS_GROUP = "nas.gpu.resource.nvidia.com"

PARAMS_API_VERSION = f"{PARAMS_GROUP}/{VERSION}"
NAS_API_VERSION = f"{NAS_GROUP}/{VERSION}"
POLICY_API_VERSION = f"{POLICY_GROUP}/{VERSION}"

#: Every group whose parameter kinds we accept, ours first.
PARAMS_GROUPS = (PARAMS_GROUP, NVIDIA_PARAMS_GROUP)
NAS_GROUPS = (NAS_GROUP, NVIDIA_NAS_GROUP)
DRIVER_NAMES = (DRIVER_NAME, NVIDIA_DRIVER_NAME)

GPU_CLAIM_PARAMETERS = "GpuClaimParameters"
MIG_DEVICE_CLAIM_PARAMETERS = "MigDeviceClaimParameters"
DEVICE_CLASS_PARAMETERS = "DeviceClassParameters"
NODE_ALLOCATION_STATE = "NodeAllocationState"
ALLOCATION_POLICY = "AllocationPolicy"

PARAMS_KINDS = (GPU_CLAIM_PARAMETERS, MIG_DEVICE_CLAIM_PARAMETERS, DEVICE_CLASS_PARAMETERS)

FINALIZER = "gpu.drasat.io/deletion-protection"
#: The scheduling gate pods that use drasat's claims are created with (admission: the chart's
#: MutatingAdmissionPolicy or the controller's webhook); the controller lifts it once every
#: claim of the pod that drasat allocates is allocated, so kube-scheduler tries the pod once.
SCHEDULING_GATE = "gpu.drasat.io/allocation"
#: Pod labels of a gang (`controller.gangs`): its name (pods of one namespace with one name are
#: one gang) and how many pods it has; its pods are allocated all-or-nothing in one solve.
GANG_LABEL = "gpu.drasat.io/gang"
GANG_SIZE_LABEL = "gpu.drasat.io/gang-size"
#: On a preemptor pod: what is held for it while its victims leave (`controller.preemption`).
NOMINATION_ANNOTATION = "gpu.drasat.io/nomination"
CDI_VENDOR = "k8s.gpu.drasat.io"
CDI_CLASS = "claim"


def group_of(api_version: str) -> str:
    """`gpu.drasat.io/v1alpha1` -> `gpu.drasat.io`; `v1` -> `` (the core group)."""
    return api_version.rpartition("/")[0]
