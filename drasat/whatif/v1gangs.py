"""The what-if's lines for gangs (issue 27 item 3): each gang placed whole, and where, or not at
all, with why. A purely computational module over a `V1Result`."""

from __future__ import annotations

from drasat.v1 import gangs
from drasat.whatif.v1run import V1Result


def lines(result: V1Result) -> list[str]:
    """One line per gang, after a blank line; none without gangs."""
    out = []
    outcome = result.outcome
    for gang in result.gangs:
        if gang.pods and all(p in outcome.placed for p in gang.pods):
            out.append(gangs.placed_text(gang, outcome.placed))
            continue
        why = next((outcome.refused[p][0] for p in gang.pods if outcome.refused.get(p)), "")
        rule = f"gang {gang.name} is placed whole or not at all"
        if why.startswith(rule):
            why = why[len(rule) :].lstrip(":, ")
        out.append(f"gang {gang.name}: not placed ({len(gang.pods)} pods): {why}")
    return ["", *out] if out else []
