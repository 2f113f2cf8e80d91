"""PodSchedulingContext arithmetic: candidate nodes in, status.resourceClaims out.

A purely computational module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]

#: The API's limit on potentialNodes and unsuitableNodes.
MAX_NODES = 128


def candidates(psc: Obj) -> tuple[str, ...]:
    """potentialNodes, then selectedNode if it is not among them."""
    spec = psc.get("spec") or {}
    names = [str(n) for n in spec.get("potentialNodes") or []]
    selected = spec.get("selectedNode")
    if selected and selected not in names:
        names.append(str(selected))
    return tuple(dict.fromkeys(names))


def selected_node(psc: Obj) -> str | None:
    selected = (psc.get("spec") or {}).get("selectedNode")
    return str(selected) if selected else None


def unsuitable(nodes: Sequence[str], feasibility: Mapping[str, str | None]) -> list[str]:
    """Nodes (in candidate order) whose feasibility is a reason, or that the solver left out."""
    return [n for n in nodes if n not in feasibility or feasibility[n] is not None][:MAX_NODES]


def claim_statuses(entries: Mapping[str, list[str]]) -> list[Obj]:
    """status.resourceClaims: pod claim entry name -> its unsuitable nodes, sorted by name."""
    return [
        {"name": name, "unsuitableNodes": list(nodes[:MAX_NODES])}
        for name, nodes in sorted(entries.items())
    ]


def merged(psc: Obj, ours: Mapping[str, list[str]]) -> list[Obj]:
    """status.resourceClaims with our entries set and other drivers' entries kept."""
    current = (psc.get("status") or {}).get("resourceClaims") or []
    others = [dict(c) for c in current if c.get("name") not in ours]
    return sorted(others + claim_statuses(ours), key=lambda c: str(c.get("name")))


def status_differs(psc: Obj, statuses: list[Obj]) -> bool:
    current = (psc.get("status") or {}).get("resourceClaims") or []
    normalized = sorted(
        (
            {"name": c.get("name"), "unsuitableNodes": list(c.get("unsuitableNodes") or [])}
            for c in current
        ),
        key=lambda c: str(c["name"]),
    )
    return normalized != statuses


def describe(feasibility: Mapping[str, str | None], nodes: Sequence[str], limit: int = 5) -> str:
    """`n1: reason; n2: reason (and 3 more)` for an Event."""
    bad = [(n, feasibility.get(n) or "not evaluated") for n in nodes if feasibility.get(n, "x")]
    text = "; ".join(f"{n}: {reason}" for n, reason in bad[:limit])
    return text + (f" (and {len(bad) - limit} more)" if len(bad) > limit else "")
