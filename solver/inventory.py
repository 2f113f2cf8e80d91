"""What a node has free: its usable GPUs, their MIG layouts and existing allocations, as plain data.

A purely computational module: a NodeState (its devices, `nodemodel`, and its ledger) becomes a
NodeView of GpuSlots, each holding what is already taken on that GPU (held whole, share sums,
occupied MIG memory slices) and the MIG placements its product offers. Existing allocations are
facts here; nothing moves them.

Taken is what the node's ledger (`ledger.Ledger`) allocated, and also what the node still has in
use without an allocation: prepared claims that are no longer (or never were, v1 claims)
allocated — their devices are being torn down, or held by the kubelet's own claims — and MIG
devices the node plugin reported as orphans. A prepared GPU entry does
not say whether it was a share, so its GPU counts as held whole until the plugin removes it.

Views are memoized in the caller's SolverCache per node, for the identity of its latest
NodeState (NodeState and its ledger are treated as immutable snapshots), because the online mode
sees the same hundreds of nodes on every decision.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from drasat.api import catalog
from drasat.api.devicemodel import shares
from drasat.api.sharing import GpuShare
from drasat.solver.cache import SolverCache, fresh
from drasat.solver.ledger import Allocation, Ledger, MigTaken, Prepared
from drasat.solver.nodemodel import Gpu, MigProfile
from drasat.solver.problem import NodeState

MiB = 2**20
#: GPU memory is modelled in MiB: small integers for CP-SAT, exact enough for any product.
FULL_COMPUTE = shares.FULL_COMPUTE


@dataclass(frozen=True)
class MigOption:
    """One MIG profile at one placement on a GPU of some product."""

    profile: str
    start: int
    size: int  # memory slices
    memory_bytes: int  # 0 when neither the node nor the catalog knows it
    compute_slices: int
    media_extensions: bool

    @property
    def end(self) -> int:
        return self.start + self.size

    def slices(self) -> range:
        return range(self.start, self.end)


@dataclass(frozen=True)
class GpuSlot:
    """One usable GPU of a node and what existing allocations already hold of it."""

    node: str
    position: int  # index in NodeView.gpus (canonical order, see build_view)
    info: Gpu
    memory_mib: int
    #: Held whole by an existing exclusive GPU claim (on a MIG GPU: the paired-claim pattern).
    held_whole: bool
    share_compute_used: int
    share_memory_used_mib: int
    share_claims: int
    #: Memory slices occupied by existing MIG devices.
    mig_occupied: frozenset[int]
    media_extensions_used: bool
    #: MIG placements this GPU's product offers (empty for non-MIG GPUs).
    mig_options: tuple[MigOption, ...]
    memory_slices: int
    #: Claims holding this GPU whole (existing allocations).
    held_by: tuple[str, ...] = ()
    #: Namespaces of the existing shares on it (sorted): a share of another namespace never
    #: joins them (the node plugin runs one MPS server per GPU for one namespace's shares).
    share_namespaces: tuple[str, ...] = ()
    #: Namespaces with an existing share claim here that spans several GPUs: no other share of
    #: theirs joins it (the node plugin's MPS daemon serves one set of GPUs).
    spread_share_namespaces: tuple[str, ...] = ()
    #: intern(mig_options): GPUs of one product share it.
    options_id: int = 0
    #: intern(key()): GPUs in the same state (of any node) share per-GPU memo entries.
    state_id: int = 0
    #: intern(hardware()): GPUs of the same kind at the same index, whatever is taken of them.
    hardware_id: int = 0

    def key(self) -> tuple[object, ...]:
        """Everything the solver may read of this GPU except its identity (uuid, index, peers)."""
        i = self.info
        return (
            i.productName,
            i.memoryBytes,
            i.migEnabled,
            i.brand,
            i.architecture,
            i.cudaComputeCapability,
            i.driverVersion,
            i.cudaDriverVersion,
            i.numaNode,
            self.held_whole,
            self.share_compute_used,
            self.share_memory_used_mib,
            self.share_claims,
            tuple(sorted(self.mig_occupied)),
            self.media_extensions_used,
            self.share_namespaces,
            self.spread_share_namespaces,
            self.options_id,
        )

    def hardware(self) -> tuple[object, ...]:
        """What the GPU is, whatever is taken of it (its uuid aside)."""
        return (*self.key()[:9], self.info.index)

    def identity(self) -> tuple[object, ...]:
        peers = tuple(self.info.nvlinkPeers or ())
        return (self.info.uuid, self.info.index, peers, self.held_by)

    @property
    def uuid(self) -> str:
        return self.info.uuid

    @property
    def mig_enabled(self) -> bool:
        return self.info.migEnabled

    @property
    def untouched(self) -> bool:
        return not (self.held_whole or self.share_claims or self.mig_occupied)

    def option_free(self, option: MigOption, partner: str | None = None) -> bool:
        """Whether the placement is free of existing MIG devices (and of an existing +me).

        `partner`: the GPU claim a MIG claim is paired with; a GPU it holds whole is open to
        its MIG claims."""
        held = self.held_whole and not (partner is not None and self.held_by == (partner,))
        if held or any(s in self.mig_occupied for s in option.slices()):
            return False
        return not (option.media_extensions and self.media_extensions_used)


@dataclass(frozen=True)
class NamespaceUse:
    gpus: int = 0
    mig_slices: int = 0


@dataclass(frozen=True)
class NodeView:
    name: str
    ready: bool
    unready_reason: str
    gpus: tuple[GpuSlot, ...]
    #: The unhealthy GPUs the node lists (explanations count them).
    unhealthy: tuple[str, ...]
    #: Claim uids already allocated on this node.
    allocated: frozenset[str]
    namespace_use: dict[str, NamespaceUse] = field(default_factory=dict)
    cpu_free_milli: int | None = None
    memory_free_mib: int | None = None
    #: The free state without GPU identities (GPUs in canonical order), as a small interned
    #: number: nodes with equal keys are interchangeable for any claim that does not name a
    #: GPU's index or uuid.
    canonical_key: int = 0
    #: canonical_key plus every GPU's identity: equal only for the same node state.
    exact_key: int = 0
    #: Every GPU uuid the node lists, healthy or not.
    uuids: frozenset[str] = frozenset()
    #: What the usable GPUs are, not what is taken of them (interned: equal for nodes of the
    #: same hardware; selectors on uuid aside, eligibility is read from it).
    hardware_key: int = 0
    #: What is left of other drivers' devices' amounts (`NodeState.amounts`). Part of
    #: `exact_key` only: a pod with a device claim reads the node by its exact state (its
    #: choices name devices), and the others never read it.
    amounts: Mapping[str, int] = field(default_factory=dict)

    @property
    def used_before(self) -> bool:
        return any(not g.untouched for g in self.gpus)

    def by_uuid(self, uuid: str) -> GpuSlot | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)


@functools.lru_cache(maxsize=256)
def _product(product_name: str) -> catalog.Product | None:
    return catalog.product_for_name(product_name)


_PROFILE_NAME = re.compile(r"^(\d+)g\.(\d+)gb")


def _profile_facts(info: MigProfile) -> tuple[int, int, bool]:
    """(memory bytes, compute slices, media extensions) of a MIG profile.

    The node's values first; else the catalog's; else what the profile name spells ("3g.40gb").
    """
    product = _product(info.parentProductName)
    known = product.profile(info.profile) if product is not None else None
    memory = info.memoryBytes
    compute = info.computeSlices
    if known is not None:
        memory = memory if memory is not None else known.memory_bytes
        compute = compute if compute is not None else known.compute_slices
    spelled = _PROFILE_NAME.match(info.profile)
    if spelled is not None:
        memory = memory if memory is not None else int(spelled.group(2)) * 10**9
        compute = compute if compute is not None else int(spelled.group(1))
    return memory or 0, compute or 0, info.profile.endswith("+me")


def _mig_options(profiles: tuple[MigProfile, ...]) -> dict[str, tuple[MigOption, ...]]:
    """Product name -> every (profile, placement) its GPUs offer, in the node's order."""
    by_product: dict[str, list[MigOption]] = {}
    for info in profiles:
        memory, compute, media = _profile_facts(info)
        options = by_product.setdefault(info.parentProductName, [])
        for placement in info.placements:
            options.append(
                MigOption(info.profile, placement.start, placement.size, memory, compute, media)
            )
    return {product: tuple(options) for product, options in by_product.items()}


def share_memory_mib(share: GpuShare | None) -> int:
    return 0 if share is None else shares.memory_mib(share)


@dataclass
class _Taken:
    held_whole: bool = False
    holders: list[str] = field(default_factory=list)
    compute: int = 0
    memory_mib: int = 0
    shares: int = 0
    share_namespaces: set[str] = field(default_factory=set)
    occupied: set[int] = field(default_factory=set)
    media: bool = False


def _occupy(slot: _Taken, mig: MigTaken) -> None:
    slot.occupied.update(range(mig.start, mig.end))
    slot.media = slot.media or mig.media_extensions


def _record(taken: dict[str, _Taken], uid: str, claim: Allocation) -> None:
    for mig in claim.migs:
        _occupy(taken.setdefault(mig.parent, _Taken()), mig)
    share = claim.share
    for uuid in claim.gpus:
        slot = taken.setdefault(uuid, _Taken())
        if share is not None:
            slot.compute += share.compute or 0
            slot.memory_mib += share_memory_mib(share)
            slot.shares += 1
            slot.share_namespaces.add(claim.namespace)
        else:
            slot.held_whole = True
            slot.holders.append(uid)


def _record_prepared(taken: dict[str, _Taken], uid: str, prepared: Prepared) -> None:
    """A prepared claim without an allocation: its GPUs held whole, its MIG slices occupied."""
    for uuid in prepared.gpus:
        slot = taken.setdefault(uuid, _Taken())
        slot.held_whole = True
        slot.holders.append(uid)
    for mig in prepared.migs:
        _occupy(taken.setdefault(mig.parent, _Taken()), mig)


def _taken(ledger: Ledger) -> dict[str, _Taken]:
    """GPU uuid -> what is taken of it: allocations, prepared claims without one, orphans."""
    taken: dict[str, _Taken] = {}
    for uid, claim in ledger.allocated.items():
        _record(taken, uid, claim)
    for uid, prepared in ledger.prepared.items():
        if uid not in ledger.allocated:
            _record_prepared(taken, uid, prepared)
    for orphan in ledger.orphans:
        _occupy(taken.setdefault(orphan.parent, _Taken()), orphan)
    return taken


def _spread_shares(claims: Mapping[str, Allocation]) -> dict[str, set[str]]:
    """GPU uuid -> the namespaces of the share claims there that span several GPUs (a
    ResourceClaim's shares may be several ledger entries: grouped by the claim's uid)."""
    gpus_of: dict[str, set[str]] = {}
    namespace_of: dict[str, str] = {}
    for claim in claims.values():
        if claim.share is None or claim.mig:
            continue
        gpus_of.setdefault(claim.uid, set()).update(claim.gpus)
        namespace_of[claim.uid] = claim.namespace
    out: dict[str, set[str]] = {}
    for uid, uuids in gpus_of.items():
        if len(uuids) > 1:
            for uuid in uuids:
                out.setdefault(uuid, set()).add(namespace_of[uid])
    return out


def _namespace_use(claims: Mapping[str, Allocation]) -> dict[str, NamespaceUse]:
    use: dict[str, NamespaceUse] = {}
    for claim in claims.values():
        before = use.get(claim.namespace, NamespaceUse())
        use[claim.namespace] = NamespaceUse(
            before.gpus + len(claim.gpus), before.mig_slices + sum(m.size for m in claim.migs)
        )
    return use


def build_view(node: NodeState, cache: SolverCache | None = None) -> NodeView:
    """The node's free state. Pure; `cache` numbers its memo keys (see cache.py)."""
    intern = fresh(cache).intern
    ledger = node.ledger
    taken = _taken(ledger)
    spread = _spread_shares(ledger.allocated)
    options = _mig_options(node.devices.mig_profiles)
    option_ids = {product: intern(o) for product, o in options.items()}
    gpus: list[GpuSlot] = []
    unhealthy: list[str] = []
    for info in sorted(node.devices.gpus, key=lambda g: (g.index, g.uuid)):
        if not info.healthy:
            unhealthy.append(info.uuid)
            continue
        state = taken.get(info.uuid, _Taken())
        product = _product(info.productName)
        gpu_options = options.get(info.productName, ()) if info.migEnabled else ()
        slices = max(
            [product.memory_slices if product is not None else 0] + [o.end for o in gpu_options]
        )
        gpus.append(
            GpuSlot(
                node=node.name,
                position=len(gpus),
                info=info,
                memory_mib=info.memoryBytes // MiB,
                held_whole=state.held_whole,
                held_by=tuple(sorted(state.holders)),
                share_compute_used=state.compute,
                share_memory_used_mib=state.memory_mib,
                share_claims=state.shares,
                share_namespaces=tuple(sorted(state.share_namespaces)),
                spread_share_namespaces=tuple(sorted(spread.get(info.uuid, ()))),
                mig_occupied=frozenset(state.occupied),
                media_extensions_used=state.media,
                mig_options=gpu_options,
                memory_slices=slices,
                options_id=option_ids.get(info.productName, 0) if gpu_options else 0,
            )
        )
    cpu_free = None if node.cpu_milli is None else node.cpu_milli - node.used_cpu_milli
    memory_free = None if node.memory_mib is None else node.memory_mib - node.used_memory_mib
    # Canonical order: by content (not by interned numbers, which depend on history), ties by
    # index; positions are renumbered in that order.
    keyed = [(g.key(), g) for g in gpus]
    keyed.sort(key=lambda kg: (repr(kg[0][:-1]), kg[1].info.index, kg[1].uuid))
    for position, (key, gpu) in enumerate(keyed):
        # The slots are new and not yet shared: fill in what the order decided (cheaper than
        # dataclasses.replace on thousands of GPUs).
        object.__setattr__(gpu, "position", position)
        object.__setattr__(gpu, "state_id", intern(key))
        object.__setattr__(gpu, "hardware_id", intern(gpu.hardware()))
    canonical = tuple(g for _, g in keyed)
    node_facts = (node.ready, node.unready_reason, cpu_free, memory_free)
    canonical_key = intern((node_facts, tuple(g.state_id for g in canonical)))
    return NodeView(
        name=node.name,
        ready=node.ready,
        unready_reason=node.unready_reason,
        gpus=canonical,
        unhealthy=tuple(unhealthy),
        allocated=frozenset(ledger.allocated) | node.device_claims,
        namespace_use=_namespace_use(ledger.allocated),
        cpu_free_milli=cpu_free,
        memory_free_mib=memory_free,
        canonical_key=canonical_key,
        exact_key=intern((canonical_key, tuple(g.identity() for g in canonical), node.amounts)),
        uuids=frozenset(g.uuid for g in node.devices.gpus),
        hardware_key=intern(tuple(sorted(g.hardware_id for g in canonical))),
        amounts=dict(node.amounts),
    )


def _same_view(old: NodeState, new: NodeState) -> bool:
    """Whether `new` has the view of `old`: the same devices and ledger, by identity (the edges
    build each once per change of what they read: a node's slices, its NAS), and the same facts
    the view reads besides (labels are not among them)."""
    return (
        old.devices is new.devices
        and old.ledger is new.ledger
        and old.ready == new.ready
        and old.unready_reason == new.unready_reason
        and old.cpu_milli == new.cpu_milli
        and old.memory_mib == new.memory_mib
        and old.used_cpu_milli == new.used_cpu_milli
        and old.used_memory_mib == new.used_memory_mib
        and old.amounts == new.amounts
        and old.device_claims == new.device_claims
    )


def view_of(node: NodeState, cache: SolverCache | None = None) -> NodeView:
    """build_view, memoized in the cache per node name for the NodeState given last (no cache:
    built afresh). A NodeState hits when it is that one, or one built anew around the same
    devices and ledger (`_same_view`: the controller builds every node's NodeState each cycle,
    and rebuilding the views of unchanged nodes was a tenth of a busy cycle at 2,000 nodes). One
    entry per node: a new snapshot replaces the old one, so the table stays the size of the
    cluster and is never dropped whole while the cluster fits (it was, keyed by snapshot, every
    few thousand updates at 5,000 nodes: each time the next decisions rebuilt their
    candidates' views, 10-20 ms)."""
    if cache is None:
        return build_view(node)
    hit = cache.views.get(node.name)
    if hit is not None and hit[0] is node:
        return hit[1]
    if hit is not None and _same_view(hit[0], node):
        return cache.put(cache.views, node.name, (node, hit[1]))[1]
    view = build_view(node, cache)
    return cache.put(cache.views, node.name, (node, view))[1]
