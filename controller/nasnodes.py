"""NodeAllocationState objects -> the solver's NodeState (its devices and ledger in the solver's
terms, `drasat.v1.nasinventory`), with tentative holds as allocations; the NAS's allocatedClaims
kept beside it as the node's ledger record (`ParsedNas.entries`), which the controller writes.

A purely computational module. A node whose NAS is missing, NotReady or does not validate is kept
in the problem as not ready, with the reason (naming the field) that ends up in unsuitableNodes'
Event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from drasat.api.inputerrors import describe_validation_error
from drasat.api.nas import AllocatedDevices, NasStatus, NodeAllocationStateSpec
from drasat.solver.problem import NodeState
from drasat.v1 import nasinventory

Obj = dict[str, Any]

HELD_PREFIX = "held:"


@dataclass(frozen=True)
class ParsedNas:
    """One NAS object parsed once (keyed by resourceVersion by the caller)."""

    node: NodeState
    resource_version: str
    #: Why the object itself is bad ("" when it validated).
    problem: str = ""
    #: No NAS: a node of another driver whose ledger is read from the claims' statuses
    #: (`controller.statusledger`); nothing is written to it.
    from_statuses: bool = False
    #: The ledger record: the NAS's allocatedClaims (from_statuses: the entries the claims'
    #: statuses stand for), whose allocations `node.ledger` holds in the solver's terms.
    entries: Mapping[str, AllocatedDevices] = field(default_factory=dict)


def with_entries(parsed: ParsedNas, entries: Mapping[str, AllocatedDevices]) -> ParsedNas:
    """The ledger with these allocatedClaims entries instead of its own, in its record and in
    its node's ledger (an entry it held already keeps its conversion)."""
    held = parsed.node.ledger.allocated
    known = {id(e): held[k] for k, e in parsed.entries.items() if k in held}
    allocated = {k: known.get(id(e)) or nasinventory.allocation_of(e) for k, e in entries.items()}
    ledger = replace(parsed.node.ledger, allocated=allocated)
    node = replace(parsed.node, ledger=ledger)
    return replace(parsed, node=node, entries=dict(entries))


def parse(obj: Obj) -> ParsedNas:
    """A NAS object as a NodeState; never raises."""
    metadata = obj.get("metadata") or {}
    name = str(metadata.get("name", ""))
    version = str(metadata.get("resourceVersion", ""))
    where = f"NodeAllocationState {metadata.get('namespace', '')}/{name}"
    try:
        spec = NodeAllocationStateSpec.model_validate(obj.get("spec") or {})
    except ValidationError as error:
        problem = f"{where}: {describe_validation_error(error, prefix=('spec',))}"
        return ParsedNas(_unready(name, problem), version, problem)
    status = obj.get("status")
    entries = spec.allocatedClaims
    if status != NasStatus.Ready.value:
        reason = f"{where} is {status or 'without status'} (node plugin not ready)"
        node = nasinventory.node_state(name, spec, ready=False, unready_reason=reason)
        return ParsedNas(node, version, entries=entries)
    return ParsedNas(nasinventory.node_state(name, spec), version, entries=entries)


class ParsedNases:
    """`parse`, remembering each NAS's answer while its object is the same version: a cycle
    reads every node's NAS, and validating one into models is the larger part of reading it
    (at 1,000 nodes about 1.8 s a cycle without this, on the project's machine). What a
    cycle did not ask for is dropped at the next `rotate`. An object without a
    resourceVersion is parsed each time."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], ParsedNas] = {}
        self._used: dict[tuple[str, str], ParsedNas] = {}

    def parse(self, obj: Obj) -> ParsedNas:
        metadata = obj.get("metadata") or {}
        version = str(metadata.get("resourceVersion", ""))
        if not version:
            return parse(obj)
        key = (str(metadata.get("name", "")), version)
        found = self._used.get(key) or self._kept.get(key)
        if found is None:
            found = parse(obj)
        self._used[key] = found
        return found

    def rotate(self) -> None:
        """A cycle's reading ended: keep what it used, forget the rest."""
        self._kept, self._used = self._used, {}


def missing(name: str) -> NodeState:
    return _unready(name, f"node {name} has no NodeAllocationState (node plugin not running)")


def _unready(name: str, reason: str) -> NodeState:
    return NodeState(name=name, ready=False, unready_reason=reason)


def with_held(node: NodeState, held: Mapping[str, AllocatedDevices]) -> NodeState:
    """The node with devices held tentatively for other claims added as existing allocations."""
    allocated = node.ledger.allocated
    extra = {HELD_PREFIX + uid: e for uid, e in held.items() if uid not in allocated}
    return nasinventory.with_entries(node, extra)


def nodes_for(
    names: Iterable[str], parsed: Mapping[str, ParsedNas], held: Mapping[str, Any]
) -> tuple[NodeState, ...]:
    """NodeStates of `names` (missing NAS -> unready), each with its `held[name]` allocations."""
    out = []
    for name in dict.fromkeys(names):
        entry = parsed.get(name)
        node = entry.node if entry is not None else missing(name)
        out.append(with_held(node, held.get(name) or {}))
    return tuple(out)


def owners_of(parsed: Mapping[str, ParsedNas], claim_uid: str) -> list[str]:
    """Every node whose NAS lists `claim_uid` in allocatedClaims (sorted; more than one only when
    something went wrong, which resync repairs)."""
    return sorted(n for n, e in parsed.items() if claim_uid in e.entries)


def owner_of(parsed: Mapping[str, ParsedNas], claim_uid: str) -> str | None:
    """The node whose NAS lists `claim_uid` in allocatedClaims (the first, by name)."""
    owners = owners_of(parsed, claim_uid)
    return owners[0] if owners else None
