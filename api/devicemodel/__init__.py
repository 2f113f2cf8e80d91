"""drasat's one device model for `resource.k8s.io/v1`: what the node plugin publishes in
ResourceSlices, what the what-if reads and what the controller allocates from, so the names
never drift. Purely computational, one concern per module:

- `names`: the codec that builds and parses device and counter names;
- `nodegpus`: the input (GPUs, MIG profiles per GPU, health, which kinds to publish);
- `devices`: whole GPUs, MIG placements and the CPU fallback as v1 Devices;
- `partitions`: dynamic MIG as partitionable devices (KEP 4815 counter sets);
- `shares`: shareable GPUs as consumable capacity (KEP 5075);
- `taints`: unhealthy GPUs as device taints;
- `pool`: a node's pool as ResourceSlices within the API's limits;
- `classes`: the DeviceClasses drasat ships.
"""
