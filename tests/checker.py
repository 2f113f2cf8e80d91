"""An independent allocation checker, and helpers to build small clusters and pods from the catalog.

`violations(problem, solution)` re-derives every rule a placement must obey from the problem
alone — the NAS objects, the claims and the policy — without any solver code, so a solver bug
cannot hide behind a shared helper. Tests of every part may reuse it (`assert_valid`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from typing import Any

from drasat.api import catalog
from drasat.api.nas import (
    AllocatableDevice,
    AllocatedDevices,
    GpuInfo,
    MigInfo,
    MigPlacement,
    NodeAllocationStateSpec,
)
from drasat.api.quantity import to_bytes
from drasat.api.selectors import GpuSelector
from drasat.api.sharing import GpuShare
from drasat.solver.claimspec import GpuDemand, MigDemand, Requirement, Topology
from drasat.solver.nodemodel import NodeDevices
from drasat.solver.problem import (
    ClaimRequest,
    NodeState,
    PodPlacement,
    PodRequest,
    Problem,
    Solution,
)
from drasat.v1 import nasinventory

# -- building clusters and pods ------------------------------------------------------------------


def make_gpus(
    node: str,
    product_key: str,
    count: int = 1,
    *,
    mig: bool = False,
    first_index: int = 0,
    numa: Sequence[int] | None = None,
    nvlink: bool = False,
) -> list[GpuInfo]:
    product = catalog.find_product(product_key)
    assert product is not None, product_key
    uuids = [f"GPU-{node}-{first_index + i}" for i in range(count)]
    return [
        GpuInfo(
            index=first_index + i,
            uuid=uuids[i],
            minor=first_index + i,
            migEnabled=mig,
            memoryBytes=product.memory_bytes,
            productName=product.product_name,
            brand=product.brand,
            architecture=product.architecture,
            cudaComputeCapability=product.compute_capability,
            driverVersion="550.54.15",
            cudaDriverVersion="12.4",
            numaNode=numa[i] if numa is not None else None,
            nvlinkPeers=[u for u in uuids if u != uuids[i]] if nvlink else None,
        )
        for i in range(count)
    ]


def mig_entries(product_key: str) -> list[MigInfo]:
    product = catalog.find_product(product_key)
    assert product is not None and product.mig_capable, product_key
    return [
        MigInfo(
            profile=p.name,
            parentProductName=product.product_name,
            placements=[MigPlacement(start=s, size=z) for s, z in p.placements],
        )
        for p in product.mig_profiles
    ]


def make_node(
    name: str,
    product_key: str,
    count: int = 1,
    *,
    mig: bool = False,
    allocated: dict[str, AllocatedDevices] | None = None,
    ready: bool = True,
    numa: Sequence[int] | None = None,
    nvlink: bool = False,
    extra_gpus: Sequence[GpuInfo] = (),
    cpu_milli: int | None = None,
) -> NodeState:
    """A node with `count` GPUs of one catalog product (MIG-enabled with `mig`)."""
    gpus = make_gpus(name, product_key, count, mig=mig, numa=numa, nvlink=nvlink)
    devices = [AllocatableDevice(gpu=g) for g in [*gpus, *extra_gpus]]
    products = {product_key} if mig else set()
    devices += [AllocatableDevice(mig=m) for key in sorted(products) for m in mig_entries(key)]
    spec = NodeAllocationStateSpec(allocatableDevices=devices, allocatedClaims=allocated or {})
    return nasinventory.node_state(
        name,
        spec,
        ready=ready,
        unready_reason="" if ready else "NAS NotReady",
        cpu_milli=cpu_milli,
    )


def gpu_claim(
    name: str,
    *,
    count: int = 1,
    selector: dict[str, Any] | None = None,
    optional: bool = False,
    share: dict[str, Any] | None = None,
    topology: dict[str, str] | None = None,
    namespace: str = "default",
    uid: str | None = None,
    mig_mode: bool | None = None,
) -> ClaimRequest:
    parsed = GpuSelector.model_validate(selector) if selector is not None else None
    spec = GpuDemand(
        count=count,
        selector=parsed,
        optional=optional,
        share=GpuShare.model_validate(share) if share is not None else None,
        topology=Topology(
            same_nvlink_domain=_requirement(topology, "sameNVLinkDomain"),
            same_numa_node=_requirement(topology, "sameNUMANode"),
        )
        if topology is not None
        else None,
        # As a classic claim: MIG-mode GPUs go whole where the selector asks for them.
        mig_mode_gpus_allowed=_asks_mig_enabled(parsed) if mig_mode is None else mig_mode,
    )
    return ClaimRequest(
        uid=uid or f"uid-{namespace}-{name}", namespace=namespace, name=name, gpu=spec
    )


def _requirement(topology: dict[str, str], name: str) -> Requirement | None:
    value = topology.get(name)
    return Requirement(value) if value is not None else None


def mig_claim(
    name: str,
    profile: str | None = None,
    *,
    memory: str | None = None,
    compute_slices: int | None = None,
    gpu_claim_name: str | None = None,
    namespace: str = "default",
) -> ClaimRequest:
    spec = MigDemand(
        profile=profile,
        memory_bytes=to_bytes(memory) if memory is not None else 0,
        compute_slices=compute_slices or 0,
        gpu_claim_name=gpu_claim_name,
    )
    return ClaimRequest(uid=f"uid-{namespace}-{name}", namespace=namespace, name=name, mig=spec)


def pod(
    name: str,
    *claims: ClaimRequest,
    namespace: str = "default",
    priority: int = 0,
    candidates: Sequence[str] | None = None,
    cpu_milli: int = 0,
) -> PodRequest:
    return PodRequest(
        key=f"{namespace}/{name}",
        namespace=namespace,
        claims=tuple(claims),
        priority=priority,
        cpu_milli=cpu_milli,
        candidate_nodes=tuple(candidates) if candidates is not None else None,
    )


# -- the checker ---------------------------------------------------------------------------------


def _asks_mig_enabled(selector: GpuSelector | None) -> bool:
    if selector is None:
        return False
    if selector.migEnabled is True:
        return True
    return any(
        _asks_mig_enabled(s) for s in (selector.andExpression or []) + (selector.orExpression or [])
    )


def _mig_facts(devices: NodeDevices, product: str, profile: str) -> tuple[int, int] | None:
    """(memory bytes, compute slices) of a profile, from the node or the catalog."""
    for info in devices.mig_profiles:
        if info.parentProductName == product and info.profile == profile:
            known = catalog.product_for_name(product)
            entry = known.profile(profile) if known is not None else None
            memory = info.memoryBytes or (entry.memory_bytes if entry else 0)
            compute = info.computeSlices or (entry.compute_slices if entry else 0)
            return memory, compute
    return None


def _placements(devices: NodeDevices, product: str, profile: str) -> set[tuple[int, int]]:
    return {
        (p.start, p.size)
        for info in devices.mig_profiles
        if info.parentProductName == product and info.profile == profile
        for p in info.placements
    }


class _Checker:
    def __init__(self, problem: Problem, solution: Solution) -> None:
        self.problem = problem
        self.solution = solution
        self.errors: list[str] = []
        self.nodes = {n.name: n for n in problem.nodes}
        self.existing = {uid: n.name for n in problem.nodes for uid in n.ledger.allocated}
        self.claims = {c.uid: c for p in problem.pods for c in p.claims}
        self.pods = {p.key: p for p in problem.pods}

    def fail(self, text: str) -> None:
        self.errors.append(text)

    def run(self) -> list[str]:
        placed_on: dict[str, str] = {}
        new: dict[str, tuple[str, AllocatedDevices, PodRequest]] = {}
        keys = [p.pod for p in self.solution.placements] + [r.pod for r in self.solution.unplaced]
        if sorted(keys) != sorted(self.pods):
            self.fail(f"pods placed + unplaced {sorted(keys)} != problem pods {sorted(self.pods)}")
        for placement in self.solution.placements:
            request = self.pods.get(placement.pod)
            node = self.nodes.get(placement.node)
            if request is None or node is None:
                self.fail(f"{placement.pod}: unknown pod or node {placement.node}")
                continue
            placed_on[request.key] = node.name
            if not node.ready:
                self.fail(f"{request.key}: placed on node {node.name}, which is not ready")
            if request.candidate_nodes is not None and node.name not in request.candidate_nodes:
                self.fail(f"{request.key}: node {node.name} is not a candidate")
            mine = {c.uid for c in request.claims}
            for uid, entry in _answers(placement).items():
                if uid not in mine:
                    self.fail(f"{request.key}: allocates claim {uid} it does not use")
                if uid in self.existing:
                    self.fail(f"{request.key}: re-allocates existing claim {uid}")
                if uid in new:
                    self.fail(f"claim {uid} allocated twice")
                new[uid] = (node.name, entry, request)
        for rejection in self.solution.unplaced:
            if not rejection.reasons:
                self.fail(f"{rejection.pod}: unplaced without a reason")
        for key, node_name in placed_on.items():
            for claim in self.pods[key].claims:
                where = self.existing.get(claim.uid) or (
                    new[claim.uid][0] if claim.uid in new else None
                )
                if where is None:
                    self.fail(f"{key}: claim {claim.uid} is allocated nowhere")
                elif where != node_name:
                    self.fail(f"{key}: on {node_name} but its claim {claim.uid} is on {where}")
        for uid, (node_name, entry, request) in new.items():
            self.check_claim(self.claims[uid], entry, self.nodes[node_name], request)
        for node in self.problem.nodes:
            merged = _held(node)
            merged.update({u: e for u, (n, e, _) in new.items() if n == node.name})
            owner = {u: r.key for u, (n, _, r) in new.items() if n == node.name}
            self.check_node(node, merged, owner)
        self.check_policy(new, placed_on)
        return self.errors

    def check_claim(
        self, claim: ClaimRequest, entry: AllocatedDevices, node: NodeState, pod: PodRequest
    ) -> None:
        ref = f"claim {claim.namespace}/{claim.name}"
        gpus = {g.uuid: g for g in node.devices.gpus}
        if entry.claimInfo.uid != claim.uid or entry.claimInfo.name != claim.name:
            self.fail(f"{ref}: claimInfo {entry.claimInfo} does not name the claim")
        if claim.gpu is not None:
            spec = claim.gpu
            if entry.gpu is None or entry.gpu.sharing is None:
                self.fail(f"{ref}: needs a gpu entry with sharing")
                return
            uuids = [d.uuid for d in entry.gpu.devices]
            want = 1 if spec.share is not None else spec.count
            if len(set(uuids)) != len(uuids):
                self.fail(f"{ref}: a GPU listed twice")
            if not (len(uuids) == want or (spec.optional and not uuids)):
                self.fail(f"{ref}: {len(uuids)} devices, wants {want}")
            if spec.optional and entry.optional is not True:
                self.fail(f"{ref}: optional claim without optional: true")
            if (spec.share is None) != (entry.share is None):
                self.fail(f"{ref}: share field does not match the claim")
            for uuid in uuids:
                gpu = gpus.get(uuid)
                if gpu is None:
                    self.fail(f"{ref}: GPU {uuid} is not on node {node.name}")
                    continue
                if not gpu.healthy:
                    self.fail(f"{ref}: GPU {uuid} is unhealthy")
                if spec.selector is not None and not spec.selector.matches(gpu):
                    self.fail(f"{ref}: GPU {uuid} does not match {spec.selector.describe()}")
                if gpu.migEnabled and (spec.share is not None or not spec.mig_mode_gpus_allowed):
                    self.fail(f"{ref}: MIG-enabled GPU {uuid} given whole, not allowed")
            self.check_topology(ref, spec, [gpus[u] for u in uuids if u in gpus])
            return
        mig = claim.mig
        assert mig is not None
        if entry.mig is None or len(entry.mig.devices) != 1 or entry.mig.sharing is None:
            self.fail(f"{ref}: needs a mig entry with one device and sharing")
            return
        device = entry.mig.devices[0]
        gpu = gpus.get(device.parentUUID)
        if gpu is None or not gpu.migEnabled:
            self.fail(f"{ref}: MIG device on {device.parentUUID}, not a MIG-enabled GPU here")
            return
        if mig.profile is not None and device.profile != mig.profile:
            self.fail(f"{ref}: profile {device.profile}, asked {mig.profile}")
        facts = _mig_facts(node.devices, gpu.productName, device.profile)
        if facts is None:
            self.fail(f"{ref}: profile {device.profile} not offered for {gpu.productName}")
            return
        if facts[0] < mig.memory_bytes:
            self.fail(f"{ref}: {device.profile} has less memory than asked")
        if facts[1] < mig.compute_slices:
            self.fail(f"{ref}: {device.profile} has fewer compute slices than asked")
        here = (device.placement.start, device.placement.size)
        if here not in _placements(node.devices, gpu.productName, device.profile):
            self.fail(f"{ref}: {device.profile} cannot be placed at {here}")
        if mig.gpu_claim_name is not None:
            partners = [
                c
                for c in pod.claims
                if c.gpu is not None
                and c.name
                in (mig.gpu_claim_name, f"{pod.key.rpartition('/')[2]}-{mig.gpu_claim_name}")
            ]
            held = {
                d.uuid
                for c in partners
                for n in self.problem.nodes
                for uid, e in _held(n).items()
                if uid == c.uid and e.gpu is not None
                for d in e.gpu.devices
            }
            held |= {
                d.uuid
                for p in self.solution.placements
                for uid, e in _answers(p).items()
                if uid in {c.uid for c in partners} and e.gpu is not None
                for d in e.gpu.devices
            }
            if device.parentUUID not in held:
                self.fail(f"{ref}: not on the GPU of its gpuClaimName {mig.gpu_claim_name}")

    def check_topology(self, ref: str, spec: GpuDemand, gpus: list[GpuInfo]) -> None:
        topology = spec.topology
        if topology is None or len(gpus) < 2:
            return
        if topology.same_numa_node == "Required":
            numa = {g.numaNode for g in gpus}
            if len(numa) != 1 or None in numa:
                self.fail(f"{ref}: GPUs on NUMA nodes {numa}, sameNUMANode is required")
        if topology.same_nvlink_domain == "Required":
            for a in gpus:
                for b in gpus:
                    linked = b.uuid in (a.nvlinkPeers or []) or a.uuid in (b.nvlinkPeers or [])
                    if a is not b and not linked:
                        self.fail(f"{ref}: {a.uuid} and {b.uuid} not NVLink-linked")

    def check_node(
        self, node: NodeState, claims: dict[str, AllocatedDevices], owner: dict[str, str]
    ) -> None:
        gpus = {g.uuid: g for g in node.devices.gpus}
        whole: dict[str, list[str]] = {}
        shares: dict[str, list[GpuShare]] = {}
        migs: dict[str, list[tuple[str, str, MigPlacement]]] = {}
        for uid, entry in claims.items():
            if entry.gpu is not None:
                for d in entry.gpu.devices:
                    if entry.share is not None:
                        shares.setdefault(d.uuid, []).append(entry.share)
                    else:
                        whole.setdefault(d.uuid, []).append(uid)
            if entry.mig is not None:
                for m in entry.mig.devices:
                    migs.setdefault(m.parentUUID, []).append((uid, m.profile, m.placement))
        for uuid, holders in whole.items():
            if len(holders) > 1:
                self.fail(f"node {node.name}: GPU {uuid} held whole by {holders}")
            if shares.get(uuid):
                self.fail(f"node {node.name}: GPU {uuid} held whole and shared")
            for uid, _, _ in migs.get(uuid, []):
                if not self._paired(uid, holders[0], owner):
                    self.fail(f"node {node.name}: GPU {uuid} held whole also hosts MIG {uid}")
        for uuid, parts in shares.items():
            gpu = gpus.get(uuid)
            if gpu is None:
                continue
            if gpu.migEnabled:
                self.fail(f"node {node.name}: share on MIG-enabled GPU {uuid}")
            if sum(p.compute or 0 for p in parts) > 100:
                self.fail(f"node {node.name}: shares on {uuid} exceed 100% compute")
            if sum(to_bytes(p.memory) for p in parts if p.memory is not None) > gpu.memoryBytes:
                self.fail(f"node {node.name}: shares on {uuid} exceed its memory")
        for uuid, devices in migs.items():
            if (
                any(p.endswith("+me") for _, p, _ in devices)
                and sum(1 for _, p, _ in devices if p.endswith("+me")) > 1
            ):
                self.fail(f"node {node.name}: two +me MIG devices on {uuid}")
            for i, (a, _, pa) in enumerate(devices):
                for b, _, pb in devices[i + 1 :]:
                    if pa.overlaps(pb):
                        self.fail(f"node {node.name}: MIG devices of {a} and {b} overlap on {uuid}")

    def _paired(self, mig_uid: str, gpu_uid: str, owner: dict[str, str]) -> bool:
        mig = self.claims.get(mig_uid)
        gpu = self.claims.get(gpu_uid)
        if mig is None or gpu is None or mig.mig is None or mig.mig.gpu_claim_name is None:
            return mig_uid not in owner  # two existing allocations: not ours to judge
        pod_key = owner.get(mig_uid, "")
        names = (mig.mig.gpu_claim_name, f"{pod_key.rpartition('/')[2]}-{mig.mig.gpu_claim_name}")
        return gpu.name in names

    def check_policy(
        self, new: dict[str, tuple[str, AllocatedDevices, PodRequest]], placed_on: dict[str, str]
    ) -> None:
        rules = self.problem.policy.rules
        for uid, (node_name, entry, _) in new.items():
            namespace = entry.claimInfo.namespace
            gpus = {g.uuid: g for g in self.nodes[node_name].devices.gpus}
            used = [d.uuid for d in entry.gpu.devices] if entry.gpu is not None else []
            used += [d.parentUUID for d in entry.mig.devices] if entry.mig is not None else []
            for uuid in used:
                gpu = gpus[uuid]
                allowed = [
                    g
                    for r in rules.allowedProducts
                    if fnmatch.fnmatchcase(namespace, r.namespace)
                    for g in r.products
                ]
                if allowed and not any(
                    fnmatch.fnmatchcase(gpu.productName.lower(), g.lower()) for g in allowed
                ):
                    self.fail(f"claim {uid}: product {gpu.productName} not allowed for {namespace}")
                for reservation in rules.reservations:
                    if reservation.count is not None:
                        continue
                    covers = any(fnmatch.fnmatchcase(node_name, g) for g in reservation.nodes) and (
                        reservation.selector is None or reservation.selector.matches(gpu)
                    )
                    ours = any(fnmatch.fnmatchcase(namespace, g) for g in reservation.namespaces)
                    if covers and not ours:
                        self.fail(f"claim {uid}: GPU {uuid} is reserved ({reservation.name})")
        for limit in rules.namespaceLimits:
            # Existing allocations may already exceed a limit; new ones may not add to it.
            before = _use(e for n in self.problem.nodes for e in _held(n).values())
            added = _use(e for _, e, _ in new.values())
            for namespace, (gpus, slices) in added.items():
                if not fnmatch.fnmatchcase(namespace, limit.namespace):
                    continue
                old_gpus, old_slices = before.get(namespace, (0, 0))
                if limit.maxGpus is not None and gpus and old_gpus + gpus > limit.maxGpus:
                    self.fail(f"namespace {namespace}: {old_gpus + gpus} GPUs > {limit.maxGpus}")
                if (
                    limit.maxMigSlices is not None
                    and slices
                    and old_slices + slices > limit.maxMigSlices
                ):
                    total = old_slices + slices
                    self.fail(f"namespace {namespace}: {total} slices > {limit.maxMigSlices}")


def _held(node: NodeState) -> dict[str, AllocatedDevices]:
    """The node's ledger as the NAS writes it: the checks read what the edge translates."""
    return nasinventory.entries_of(node.ledger.allocated)


def _answers(placement: PodPlacement) -> dict[str, AllocatedDevices]:
    """The new allocations as the NAS writes them."""
    return nasinventory.entries_of(placement.allocations)


def _use(entries: Iterable[AllocatedDevices]) -> dict[str, tuple[int, int]]:
    """namespace -> (GPUs held, MIG memory slices held)."""
    totals: dict[str, tuple[int, int]] = {}
    for entry in entries:
        gpus, slices = totals.get(entry.claimInfo.namespace, (0, 0))
        gpus += len(entry.gpu.devices) if entry.gpu is not None else 0
        slices += sum(m.placement.size for m in entry.mig.devices) if entry.mig is not None else 0
        totals[entry.claimInfo.namespace] = (gpus, slices)
    return totals


def violations(problem: Problem, solution: Solution) -> list[str]:
    """Every rule the solution breaks, as text; empty when it is valid."""
    return _Checker(problem, solution).run()


def assert_valid(problem: Problem, solution: Solution) -> None:
    errors = violations(problem, solution)
    assert not errors, "\n".join(errors)
