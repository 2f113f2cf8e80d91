"""Reasons as data: what blocks a pod on a node, with the claims and the node it names kept as
references, and rendered into sentences only at the end, for one pod and one node.

A per-node evaluation is memoized by the pod's shape and the node's free state, so the same
obstacle serves pods whose claims have other names and nodes with other names. Its texts hold
`ClaimRef(i)` (the pod's i-th claim) and `NODE` (the node it is about) where a name goes, and
the render step puts in the names of the pod and node at hand; no text is ever searched or
replaced. Literal parts hold only what the memo key fixes (selectors, profiles, rule names,
namespaces, counts).

Rules behind CP-SAT assumption literals (`model.py`, explain mode) are labelled the same way,
naming their claim by uid (`ClaimId`) and their node by name (`NodeId`); `explain.py` turns
those into references.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ClaimRef:
    """The pod's claim at this position (PodEntry.claims), rendered as its namespace/name."""

    index: int


@dataclass(frozen=True)
class ClaimsRef:
    """Some of the pod's claims, rendered as "claims a, b", each ResourceClaim once: the
    solver claims of one ResourceClaim (its MIG devices, its shares) carry its name each, so
    one of them alone reads "claim a's devices"."""

    indices: tuple[int, ...]

    def render(self, claims: Sequence[str]) -> str:
        named = list(dict.fromkeys(claims[i] for i in self.indices))
        if len(named) == 1:
            return f"claim {named[0]}'s devices"
        return "claims " + ", ".join(named)


@dataclass(frozen=True)
class NodeRef:
    """The node the text is about, rendered as its name."""


@dataclass(frozen=True)
class Stat:
    """In a cluster-wide sentence: the best (`best`) or total (`gpus`) over the nodes."""

    name: str


@dataclass(frozen=True)
class UnhealthyNote:
    """The node's own note on unhealthy GPUs left out of a count (empty when it has none)."""


NODE = NodeRef()
BEST = Stat("best")
GPUS = Stat("gpus")
UNHEALTHY = UnhealthyNote()

Part = str | ClaimRef | ClaimsRef | NodeRef | Stat | UnhealthyNote
Text = tuple[Part, ...]


@dataclass(frozen=True)
class ClaimId:
    """A claim by uid, in a model rule's label (`model.py`)."""

    uid: str


@dataclass(frozen=True)
class NodeId:
    """A node by name, in a model rule's label (`model.py`)."""

    name: str


#: A rule behind an assumption literal: text with the claims and nodes it names.
Label = tuple[str | ClaimId | NodeId, ...]


@dataclass(frozen=True)
class Obstacle:
    """Why a pod of some shape does not fit a node in some state, names left as references.

    `key` groups the same obstacle over nodes (it may hold NODE: one per node); `node_text` is
    the per-node reason (the controller's UnsuitableNodes); `summary` the cluster-wide
    sentence, whose BEST and GPUS take the best and the sum of `best` and `gpus` over the nodes
    with this obstacle.
    """

    key: tuple[object, ...]
    node_text: Text
    summary: Text
    best: int = 0
    gpus: int = 0


@dataclass(frozen=True)
class Names:
    """What references render to: the pod's claims (namespace/name, in order) and the node."""

    claims: tuple[str, ...]
    node: str
    unhealthy: int = 0


def render(text: Text, names: Names, best: int = 0, gpus: int = 0) -> str:
    out = []
    for part in text:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, ClaimRef):
            out.append(names.claims[part.index])
        elif isinstance(part, ClaimsRef):
            out.append(part.render(names.claims))
        elif isinstance(part, NodeRef):
            out.append(names.node)
        elif isinstance(part, Stat):
            out.append(str(best if part.name == "best" else gpus))
        elif names.unhealthy:
            out.append(f" ({names.unhealthy} unhealthy GPUs not counted)")
    return "".join(out)


def node_text(text: Text, claims: tuple[str, ...], node: str, unhealthy: int) -> str:
    """render(text, Names(claims, node, unhealthy)) for a per-node text (no stats): the
    controller asks it of every node that does not fit, so it is the fast spelling."""
    out = []
    for part in text:
        kind = part.__class__
        if kind is str:
            out.append(part)
        elif kind is ClaimRef:
            out.append(claims[part.index])  # type: ignore[union-attr,index]
        elif kind is ClaimsRef:
            out.append(part.render(claims))  # type: ignore[union-attr]
        elif kind is NodeRef:
            out.append(node)
        elif kind is UnhealthyNote and unhealthy:
            out.append(f" ({unhealthy} unhealthy GPUs not counted)")
    return "".join(out)  # type: ignore[arg-type]


def names_node(text: Text) -> bool:
    return any(isinstance(part, NodeRef) for part in text)


def from_label(label: Label, claims: Sequence[str], node: str) -> Text:
    """A model rule's label as text: its claim (uid, one of `claims`) and node as references."""
    index = {uid: i for i, uid in enumerate(claims)}
    out: list[Part] = []
    for part in label:
        if isinstance(part, ClaimId):
            out.append(ClaimRef(index[part.uid]))
        elif isinstance(part, NodeId):
            # The per-node model of explain mode holds the one node.
            out.append(NODE if part.name == node else part.name)
        else:
            out.append(part)
    return tuple(out)


def sort_key(text: Text) -> tuple[tuple[int, object], ...]:
    """An order of texts that does not depend on names (claims by position)."""
    out: list[tuple[int, object]] = []
    for part in text:
        if isinstance(part, str):
            out.append((1, part))
        elif isinstance(part, ClaimRef):
            out.append((0, part.index))
        else:
            out.append((2, repr(part)))
    return tuple(out)
