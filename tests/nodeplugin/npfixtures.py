"""Node plugin test helpers: a simulated node (fleet, production NVML code, in-memory NAS)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drasat.nodeplugin import dra, mps, nvml, state, v1claims
from drasat.nodeplugin.gen import dra_v1_pb2
from drasat.nodeplugin.nasstore import MemoryNasStore
from drasat.nodeplugin.plugin import Config, NodePlugin
from drasat.testbed import simnvml

NODE = "gpu-node-1"
NAMESPACE = "drasat"


@dataclass
class Node:
    """One simulated GPU node: fleet, device lib, NAS, and the plugin's state over them."""

    root: Path
    sim: simnvml.SimulatedNvml
    lib: nvml.NvmlDeviceLib
    store: MemoryNasStore
    runner: mps.Runner
    plugin: NodePlugin

    @property
    def state(self) -> state.DeviceState:
        return self.plugin.state

    @property
    def config(self) -> Config:
        return self.plugin.config

    def gpu(self, index: int) -> str:
        return self.sim.gpus[index].uuid

    def restart(self) -> Node:
        """A new plugin process on the same node: same fleet, NAS, state dir and CDI root."""
        lib = nvml.NvmlDeviceLib(self.sim, run=self.sim.run)
        plugin = NodePlugin(self.config, lib=lib, store=self.store, mps_runner=self.runner)
        return Node(self.root, self.sim, lib, self.store, self.runner, plugin)

    def allocate(self, uid: str, allocation: dict[str, Any]) -> None:
        self.store.allocate(uid, allocation)

    def daemons(self) -> dict[str, tuple[str, ...]]:
        """The MPS daemons running now (real processes): name -> devices."""
        return {name: d.devices for name, d in self.state.mps.running().items()}

    def mps_limits(self, uid: str) -> dict[str, str]:
        """The MPS limits in the claim's CDI environment (what its clients get)."""
        spec = json.loads(self.state.cdi.path(uid).read_text())
        pairs = (e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
        limits = ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
        return {k: v for k, v in pairs if k in limits}


def make_node(root: Path, fleet: str, *, runner: mps.Runner | None = None, **config: Any) -> Node:
    sim = simnvml.SimulatedNvml(fleet)
    lib = nvml.NvmlDeviceLib(sim, run=sim.run)
    store = MemoryNasStore(node=NODE, namespace=NAMESPACE)
    runner = runner if runner is not None else mps.RecordingRunner()
    settings: dict[str, Any] = {
        "node_name": NODE,
        "namespace": NAMESPACE,
        "cdi_root": root / "cdi",
        "plugin_dir": root / "plugins",
        "registry_dir": root / "registry",
        "state_dir": root / "state",
        "gc_interval_s": 0,
        "health_wait_ms": 50,
    }
    cfg = Config(**{**settings, **config})
    plugin = NodePlugin(cfg, lib=lib, store=store, mps_runner=runner)
    plugin.publish()
    return Node(root, sim, lib, store, runner, plugin)


def claim_info(uid: str, name: str = "claim", namespace: str = "default") -> dict[str, str]:
    return {"namespace": namespace, "name": name, "uid": uid}


def gpu_allocation(uid: str, *uuids: str, **extra: Any) -> dict[str, Any]:
    sharing = extra.pop("sharing", None)
    gpu: dict[str, Any] = {"devices": [{"uuid": u} for u in uuids]}
    if sharing is not None:
        gpu["sharing"] = sharing
    return {"claimInfo": claim_info(uid), "gpu": gpu, **extra}


def mig_allocation(uid: str, parent: str, profile: str, start: int, size: int) -> dict[str, Any]:
    device = {"profile": profile, "parentUUID": parent, "placement": {"start": start, "size": size}}
    return {"claimInfo": claim_info(uid), "mig": {"devices": [device]}}


def ref(uid: str, name: str = "claim", namespace: str = "default") -> state.ClaimRef:
    return state.ClaimRef(uid=uid, namespace=namespace, name=name)


class Claims:
    """A v1 ClaimReader over ResourceClaim objects held in memory (what the API server has)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.reads = 0

    def add(self, claim: dict[str, Any]) -> None:
        meta = claim["metadata"]
        self.objects[(meta["namespace"], meta["name"])] = claim

    def read(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        claim = self.objects.get((namespace, name))
        if claim is None:
            raise state.ClaimError(f"ResourceClaim {namespace}/{name} not found")
        return claim


def v1_claim(
    uid: str,
    *results: tuple[str, str, str],
    name: str = "claim",
    namespace: str = "default",
    driver: str = "gpu.drasat.io",
    **allocation: Any,
) -> dict[str, Any]:
    """An allocated `resource.k8s.io/v1` ResourceClaim with (request, pool, device) results."""
    devices: dict[str, Any] = {
        "results": [
            {"request": r, "driver": driver, "pool": p, "device": d} for r, p, d in results
        ],
        **allocation,
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "status": {"allocation": {"devices": devices}},
    }


def gpu_instances(node: Node, index: int) -> list[tuple[int, int]]:
    """(start, size) of every GPU instance on GPU `index`, straight from the simulator."""
    gpu = node.sim.gpus[index]
    return sorted((gi.start, gi.profile.memory_slices) for gi in gpu.gpu_instances.values())


class V1:
    """The v1 DRAPlugin servicer of a node, called as the kubelet calls it."""

    def __init__(self, node: Node, claims: Claims | None) -> None:
        self.node = node
        allocations = v1claims.ClaimAllocations(
            claims, pool=NODE, gpus=node.state.gpus, profiles=node.lib.mig_profiles
        )
        self.service = dra.DraPluginV1(node.state, allocations)

    def prepare(self, *names: tuple[str, str], namespace: str = "default") -> Any:
        claims = [dra_v1_pb2.Claim(namespace=namespace, name=n, uid=u) for u, n in names]
        request = dra_v1_pb2.NodePrepareResourcesRequest(claims=claims)
        return self.service.NodePrepareResources(request, None).claims

    def unprepare(self, *uids: str) -> Any:
        request = dra_v1_pb2.NodeUnprepareResourcesRequest(
            claims=[dra_v1_pb2.Claim(namespace="default", name="claim", uid=u) for u in uids]
        )
        return self.service.NodeUnprepareResources(request, None).claims
