"""Domain limits: how big one object, node, claim or input may be (docs/OBJECTS.md, "Limits").

Each is taken from real hardware or from Kubernetes' own limits, with room to spare, so valid
input is never refused while hostile input (a node with two billion GPUs, a billion nodes of one
`count`) is refused at once with the field path instead of running for minutes. The models use
them as bounds, so the generated CRDs and JSON schemas state them too. Changing one is a code
change here, followed by `make generate`; the what-if's totals (`MAX_NODES`, `MAX_PODS`) can also
be raised per run with an environment variable.
"""

from __future__ import annotations

#: GPUs on one node. The largest real servers hold 16 (DGX-2, HGX-2) to 20 single-slot GPUs;
#: 64 is also how many devices a ResourceSlice may publish once devices consume counters (MIG)
#: or carry taints (ResourceSliceMaxDevicesWithTaintsOrConsumesCounters).
MAX_GPUS_PER_NODE = 64
#: Entries of a NodeAllocationState's allocatableDevices (GPUs plus one MIG entry per product and
#: profile): DRA's ResourceSliceMaxDevices.
MAX_NODE_DEVICES = 128
#: Devices one claim gets: GPUs of a GpuClaimParameters `count`, devices of an allocation.
#: DRA's AllocationResultsMaxSize (devices in one claim's allocation).
MAX_DEVICES_PER_CLAIM = 32
#: Nodes of one `count` in a Cluster description: Kubernetes' documented cluster size.
MAX_NODES_PER_GROUP = 5_000
#: Nodes of a what-if's --cluster (all descriptions and NodeAllocationStates together), three
#: times Kubernetes' documented cluster size; DRASAT_MAX_NODES raises it.
MAX_NODES = 15_000
#: Pods of a what-if (Pods plus the pods of workloads): Kubernetes' documented limit of 150,000
#: pods per cluster; DRASAT_MAX_PODS raises it. Also the most replicas one workload may ask for.
MAX_PODS = 150_000
#: Claims in one pod's `resourceClaims` (Kubernetes sets none; a pod cannot use more devices
#: than one node publishes in a ResourceSlice).
MAX_CLAIMS_PER_POD = 128
#: Characters of any string of our specs (names, UUIDs, globs, product names, values).
MAX_STRING = 1024
#: Object names (a DNS subdomain) and namespaces (a DNS label), as Kubernetes validates them.
MAX_NAME = 253
MAX_NAMESPACE = 63
#: Entries of each list of a policy's rules (reservations, namespaceLimits, allowedProducts), of
#: its glob lists and of namespacePriorities.
MAX_POLICY_ENTRIES = 1_000
#: Objective terms and lifecycle actions of a policy.
MAX_POLICY_TERMS = 64
