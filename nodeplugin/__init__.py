"""Kubelet DRA plugin: registration, DRA gRPC service, NVML, MIG, sharing, CDI, checkpoint."""
